"""The Container runtime: an Instance becomes a Pod queued through Kueue (+ a NodePort Service).

The request is planned by the core (`plan`: sizes, resource keys, credits); the Pod is laid out
by `pod`; its status is mirrored back into the Instance. A running Pod keeps what it was
composed with: Pods are immutable, and a setting turned off later must not strand it. A Pod
made from another spec, or rejected at admission, is replaced instead (`record`); the Pod
records the digest of the spec it is made from. `spec.gpus` is refused here: only the
VirtualMachine runtime takes it.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from typing import Any

from functions import structs
from functions.core import labels, names, reasons
from functions.core.dialects import Dialect
from functions.core.modes import Mode
from functions.core.requests import InstanceTypeFacts, Refusal, Wait, plan
from functions.handlers.instance import lifecycle, pin
from functions.handlers.instance.outcome import (
    Instance,
    Outcome,
    Running,
    Waiting,
    refused,
)
from functions.handlers.instance.pod import (
    PodInputs,
    render_claim_template,
    render_pod,
    render_service,
)
from functions.views import ListView, View, passed_on

# The XRD's rule in its words (compositions/xrds/instance.yaml), which the handler applies
# where no API server does: offline render (tests/test_messages.py holds the two equal).
GPUS_RULE = (
    "gpus are taken by the VirtualMachine runtime only; a Container takes its accelerators "
    "through spec.resources: clear spec.gpus, or set spec.runtime to VirtualMachine"
)
# The RuntimeClass each manufacturer's container toolkit installs (T-Head's needs none).
RUNTIME_CLASSES = {
    m: m for m in ("amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia")
}


def start(instance: Instance, facts: InstanceTypeFacts, hostname: str | None) -> Outcome:
    refusal = runtime_refusal(instance.spec)
    if refusal is not None:
        return refused(refusal)
    resources = instance.spec.view("resources").to_dict()
    planned = plan(resources, facts, instance.settings.overcommit, instance.settings.dialect)
    if isinstance(planned, Wait):
        return Waiting(planned.reason, planned.message)
    if isinstance(planned, list):
        return refused(*planned)
    if instance.spec.bool("privileged") and planned.claim.mode is not Mode.NONE:
        refusal = privileged_cards_refusal(instance.settings.dialect)
        if refusal is not None:
            return refused(refusal)
    if not facts.entrance:
        message = f"spec.type: instance type {facts.name} has no entrance yet; retry"
        return Waiting(reasons.INSTANCE_TYPE_NOT_READY, message)
    placed = lifecycle.placement(instance, hostname)
    if not (placed is None or isinstance(placed, str)):
        return placed
    steering = pin_expressions(instance)
    if isinstance(steering, Waiting):
        return steering
    inputs = PodInputs(
        name=instance.name,
        namespace=instance.namespace,
        entrance=facts.entrance,
        plan=planned,
        manufacturer=facts.manufacturer,
        accelerator_key=facts.accelerator_group,
        hostname=placed,
        runtime_class=runtime_class(instance, facts.manufacturer),
        fit_affinity=instance.settings.workload_fit_affinity,
        pin_expressions=steering,
        dialect=instance.settings.dialect,
        spec_digest=instance.spec_digest,
    )
    service = render_service(instance.spec, instance.name, instance.namespace)
    composed = {"service": service} if service is not None else {}
    if instance.replacing is not None:  # this round drops the Pod, the next one makes it
        return replace(instance.replacing, resources=composed)
    claim_template = render_claim_template(inputs)
    pod = render_pod(instance.spec, inputs, claim_template)
    if instance.kept is not None:
        keep_placement_and_size(pod, instance.kept)
    if claim_template is not None:
        composed = {"resourceclaimtemplate": claim_template, **composed}
    composed = {"pod": pod, **composed}
    status = pod_status(instance.kept, instance.request.observed("service"))
    return Running(reasons.POD_COMPOSED, composed, status)


def runtime_refusal(spec: View) -> Refusal | None:
    """`spec.gpus` is the VirtualMachine runtime's: a Pod would silently take none of it."""
    gpus = spec.get("gpus")
    if gpus is None or (isinstance(gpus, ListView) and not len(gpus)):
        return None
    return Refusal("spec.gpus", GPUS_RULE, reasons.INVALID_FOR_CONTAINER)


def privileged_cards_refusal(dialect: Dialect) -> Refusal | None:
    """A device plugin that will not give a privileged container its devices."""
    if dialect.privileged_cards:
        return None
    message = (
        f"a privileged container cannot ask for accelerators under {dialect.title} (the "
        "Catalog's devicePlugin): its admission webhook denies the Pod; drop spec.privileged, "
        "or ask for no accelerator"
    )
    return Refusal("spec.privileged", message, reasons.FORBIDDEN)


def pin_expressions(instance: Instance) -> tuple[dict, ...] | Waiting:
    """For a `spec.nodeName` pin: the expressions that keep Kueue to the pinned node's flavor."""
    if not instance.spec.str("nodeName"):
        return ()
    flavors = instance.request.required("flavors")
    if flavors is None:
        return Waiting(reasons.READING_NODE, "spec.nodeName: reading the pool's flavors")
    node = instance.request.required_one("node")
    return tuple(pin.flavor_expressions(node.labels(), flavors)) if node is not None else ()


def runtime_class(instance: Instance, manufacturer: str) -> str | None:
    """The manufacturer's RuntimeClass, only if the cluster has it (reference §5.2)."""
    wanted = RUNTIME_CLASSES.get(manufacturer)
    classes = instance.request.required_objects("runtimeclasses") or ()
    return wanted if wanted is not None and wanted in map(structs.name_of, classes) else None


def keep_placement_and_size(pod: dict[str, Any], observed: View) -> None:
    """What a running Pod was composed with stays: its main container's resources and its
    placement fields (Pods are immutable; overcommit or fit affinity may have changed since),
    as views of the observed Pod, which the frame copies whole."""
    observed_main = next(
        (
            c
            for c in observed.list("spec", "containers").views()
            if c.str("name") == names.MAIN_CONTAINER
        ),
        None,
    )
    if observed_main is not None and observed_main.has("resources"):
        pod["spec"]["containers"][0]["resources"] = passed_on(observed_main.view("resources"))
    for field in ("nodeSelector", "affinity", "runtimeClassName", "resourceClaims"):
        kept = observed.get("spec", field)
        if kept is not None:
            pod["spec"][field] = passed_on(kept)
        else:
            pod["spec"].pop(field, None)


def pod_phase(pod: View | None) -> tuple[str, str]:
    """The Instance phase from the Pod's phase and conditions (reference §1.4)."""
    if pod is None:
        return reasons.STARTING, "composing the Pod"
    if pod.str("status", "phase") in (reasons.SUCCEEDED, reasons.FAILED):
        return pod.str("status", "phase"), pod.str("status", "message")
    conditions = {c.str("type"): c for c in pod.list("status", "conditions").views()}
    scheduled = conditions.get("PodScheduled")
    if scheduled is None or scheduled.str("status") == "Unknown":
        return reasons.SCHEDULING, ""
    if scheduled.str("status") == "False":
        return reasons.PENDING, scheduled.str("message") or scheduled.str("reason")
    initialized = conditions.get("Initialized")
    if initialized is not None and initialized.str("status") == "False":
        return reasons.INITIALIZING, initialized.str("message")
    ready = conditions.get("Ready")
    if ready is None:
        return reasons.STARTING, ""
    if ready.str("status") == "True":
        return reasons.READY, ""
    if ready.str("reason") == "ContainersNotReady" or ready.str("status") == "Unknown":
        return reasons.STARTING, ready.str("message")
    return reasons.NOT_READY, ready.str("message")


def pod_status(pod: View | None, service: View | None) -> dict[str, Any]:
    """The Instance's status mirrored from its Pod (and Service): phase, node, IPs, ports,
    and what the device plugin allocated."""
    phase, message = pod_phase(pod)
    status: dict[str, Any] = {"phase": phase}
    if message:
        status["phaseMessage"] = message
    if pod is None:
        return status
    if pod.str("spec", "nodeName"):
        status["nodeName"] = pod.str("spec", "nodeName")
    host_ips = [ip.str("ip") for ip in pod.list("status", "hostIPs").views()]
    pod_ips = [ip.str("ip") for ip in pod.list("status", "podIPs").views()]
    if host_ips:
        status["hostIPs"] = host_ips
    if pod_ips:
        status["podIPs"] = pod_ips
    if service is not None:
        status["ports"] = [
            {k: v for k, v in p.to_dict().items() if k in ("port", "protocol", "name", "nodePort")}
            for p in service.list("spec", "ports").views()
        ]
    allocated = pod.str("metadata", "annotations", labels.ALLOCATED)
    if allocated:
        with contextlib.suppress(json.JSONDecodeError):
            status["allocations"] = json.loads(allocated)
    return status
