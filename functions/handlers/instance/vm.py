"""The VirtualMachine runtime: GPUClass entries resolved to a KubeVirt VMI (DESIGN §3.4, seed 003).

Each class entry becomes `count` entries of `spec.domain.devices.gpus` whose `deviceName` is the
class's device-plugin resource (never the class name), the class's tolerations are copied, and a
licensed vGPU class adds a `GPULICENSE` disk from a copy of its license Secret (token and the
class's `featureType`) in the tenant's namespace — the VMI waits until that copy exists. Raw
`{name}` entries pass through.

Refusals apply to *starting* a VMI only (seed 003: license changes reach a guest through a new
VMI; a renamed source does not move an existing VM): a missing, deleting or conflicting class,
an unpermitted resource, vGPU without entitlement, mixed entry kinds, more than one vGPU class,
a count over the class's per-VM limit or over 1024 units. A VMI that has started is kept as
observed while any of that changes; the Instance says what changed (`RestartRequired`) and that
it applies at the next start. A shortage never refuses: the VMI waits for scheduling, and a
passthrough class no eligible node advertises yet has no per-VM limit to exceed.

KubeVirt refuses any change to an existing VMI's spec, started or not. A VMI that has not
started but would now be made otherwise is therefore replaced, never rewritten: it is left out
of this reconcile (Crossplane deletes it) and the next one composes the new VMI (`recreate`).

The class resolution, the VMI layout and the keep-what-runs rule are shared with the
KubernetesNodes handler (one VMI per worker).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from functions.core import apis, labels, names, quantity, reasons
from functions.core.requests import InstanceTypeFacts, Plan, Refusal, Wait, plan
from functions.handlers import gpuclass
from functions.handlers.base import Request, Requirement
from functions.handlers.desired import Condition, Desired
from functions.handlers.inputs import catalog_settings
from functions.handlers.instance import gpus, lifecycle
from functions.handlers.instance.outcome import (
    Instance,
    Outcome,
    Refused,
    Running,
    Waiting,
    refused,
    started,
)
from functions.views import ListView, View, passed_on

LICENSE_DISK = "gpulicense"
LICENSE_SERIAL = "GPULICENSE"
GRIDD_CONF = "gridd.conf"  # the licensing client's configuration on the GPULICENSE disk


# --- requirements -----------------------------------------------------------------------------


def requirements(request: Request) -> dict[str, Requirement]:
    """GPU classes, KubeVirt's permitted devices, the nodes and the namespace chain; once the
    classes are read, the license Secret of a licensed vGPU class they name (the same selector
    on every later call)."""
    found = gpus.class_requirements()
    found |= gpuclass.entitlement_requirements(request)
    named = {e.str("className") for e in request.xr.list("spec", "gpus").views()}
    for offer in gpuclass.offers(request, "gpuclasses") or []:
        if offer.name in named and offer.license_secret:
            namespace = catalog_settings(request, Desired()).license_namespace
            found["license"] = Requirement(
                apis.CORE, "Secret", match_name=offer.license_secret, namespace=namespace
            )
    return found


# --- the VirtualMachine runtime's entry point ----------------------------------------------------


def start(instance: Instance, facts: InstanceTypeFacts, hostname: str | None) -> Outcome:
    """What a start would make now, kept from a VMI that already runs (`keep_running`); a VMI
    that ended Failed is replaced: KubeVirt never starts a VMI twice."""
    vmi = instance.workload
    if vmi is not None and failed(vmi):
        return replacing(instance.request, vmi)
    return keep_running(instance, fresh(instance, facts, hostname))


def failed(vmi: View | None) -> bool:
    return vmi is not None and vmi.str("status", "phase") == reasons.FAILED


def replacing(request: Request, vmi: View) -> Waiting:
    """A failed VMI (its launcher lost with its node, or failed) is removed this round and a new
    one started on the next, under the catalog as it is then; its license copy stays."""
    copy = request.observed("license")
    kept = {"license": as_observed(copy)} if copy is not None else {}
    return Waiting(reasons.REPLACING_FAILED_VMI, failure_message(vmi), kept)


# What KubeVirt's Ready reasons mean on a VMI that has failed: its messages are worded for a VMI
# still starting ("virt-launcher pod has not yet been scheduled"), while a failed VMI had one.
FAILED_BECAUSE = {
    "PodNotExists": "its virt-launcher Pod is gone",
    "PodTerminating": "its virt-launcher Pod ended",
}


def failure_message(vmi: View) -> str:
    ready = vmi_condition(vmi, "Ready")
    reason = ready.str("reason") if ready is not None else ""
    why = FAILED_BECAUSE.get(reason) or ready_message(vmi) or "no reason given"
    return f"the VirtualMachineInstance failed ({why}); replacing it with a new one"


def fresh(instance: Instance, facts: InstanceTypeFacts, hostname: str | None) -> Outcome:
    """A VMI: CPU and memory from the InstanceType, GPUs from the gpus entries."""
    spec = instance.spec
    refusal = runtime_refusal(spec)
    if refusal is not None:
        return refused(refusal)
    placed = lifecycle.placement(instance, hostname)
    if not (placed is None or isinstance(placed, str)):
        return placed
    sized = size(spec.view("resources").to_dict(), facts)
    if not isinstance(sized, Plan):
        return sized
    offers = gpus.read_offers(instance.request, instance.settings.vgpu_entitlement)
    if isinstance(offers, Waiting):
        return offers
    resolved = gpus.resolve(list(spec.list("gpus").views()), offers)
    if isinstance(resolved, list):
        return refused(*resolved)
    composed: dict[str, dict] = {}
    if resolved.license_secret:
        delivered = deliver_license(instance, resolved)
        if isinstance(delivered, Waiting):
            return delivered
        composed["license"] = delivered
    machine = Machine(instance.name, instance.namespace, spec.str("image"), sized)
    vmi = render_vmi(machine, resolved, workspace_disk(spec), placed)
    composed["vmi"] = vmi
    observed = instance.request.observed("vmi")
    status = vmi_status(observed, resolved.shortages)
    return Running(reasons.VMI_COMPOSED, composed, status, (scheduled(observed, status),))


def runtime_refusal(spec: View) -> Refusal | None:
    taken = sorted(k for k in spec.view("resources").to_dict() if k.startswith("accelerator"))
    if not (taken or spec.has("additionalVolumes")):
        return None
    field_ = f"spec.resources.{taken[0]}" if taken else "spec.additionalVolumes"
    message = (
        "a VirtualMachine takes its GPUs through spec.gpus and mounts only its workspace "
        f"disk: clear {field_}"
    )
    return Refusal(field_, message, reasons.INVALID_FOR_VIRTUAL_MACHINE)


def size(resources: dict[str, Any], facts: InstanceTypeFacts) -> Plan | Refused | Waiting:
    """A VM is sized like a card-less Instance of its type: one unit, no card (decisions.md)."""
    if facts.acceleratable:
        resources = {**resources, "accelerator": "0"}
    sized = plan(resources, facts, overcommit=False)
    if isinstance(sized, Wait):
        return Waiting(sized.reason, sized.message)
    if isinstance(sized, list):
        return refused(*sized)
    return sized


# --- the license delivered with the VM ---------------------------------------------------------


def deliver_license(instance: Instance, resolved: gpus.Resolved) -> dict | Waiting:
    """The license Secret copied into the tenant's namespace; the VMI waits until it exists."""
    found = instance.request.required("license")
    namespace = instance.settings.license_namespace
    source = resolved.license_secret
    if not found or not found[0].str("data", names.LICENSE_KEY):
        return Waiting(
            reasons.WAITING_FOR_LICENSE,
            f"spec.gpus: waiting for license Secret {source} in {namespace} (key "
            f"{names.LICENSE_KEY}); the VM starts once it exists and never boots unlicensed",
        )
    copy = license_copy(instance.name, instance.namespace, found[0], resolved.feature_type)
    if instance.request.observed("license") is None:
        message = "spec.gpus: copying the license Secret into the namespace"
        return Waiting(reasons.WAITING_FOR_LICENSE, message, {"license": copy})
    return copy


def license_copy_name(instance: str) -> str:
    return f"{instance}-gpu-license"


def license_copy(instance: str, namespace: str, source: View, feature_type: int) -> dict:
    """What the GPULICENSE disk carries (docs/gpuclass.md, "The GPULICENSE disk"): the source
    Secret's token, and the licensing client's `gridd.conf` with the class's FeatureType."""
    gridd = f"FeatureType={feature_type}\n".encode()
    return {
        "apiVersion": apis.CORE,
        "kind": "Secret",
        "metadata": {"name": license_copy_name(instance), "namespace": namespace},
        "type": "Opaque",
        "data": {
            names.LICENSE_KEY: source.str("data", names.LICENSE_KEY),
            GRIDD_CONF: base64.b64encode(gridd).decode(),
        },
    }


# --- the VMI ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    """One VM to render: its name and namespace, root image and size."""

    name: str
    namespace: str
    image: str
    plan: Plan


def render_vmi(
    machine: Machine,
    resolved: gpus.Resolved,
    workspace: dict,
    hostname: str | None = None,
    extra: tuple[tuple[dict, dict], ...] = (),
) -> dict:
    """The VMI: root and workspace disks, the license disk, any `extra` (disk, volume) pairs."""
    disks = [
        {"name": "rootdisk", "disk": {"bus": "virtio"}},
        {"name": "workspace", "disk": {"bus": "virtio"}},
    ]
    volumes = [
        {"name": "rootdisk", "containerDisk": {"image": machine.image}},
        {"name": "workspace", **workspace},
    ]
    if resolved.license_secret:
        disks.append({"name": LICENSE_DISK, "serial": LICENSE_SERIAL, "disk": {"bus": "virtio"}})
        volumes.append(
            {"name": LICENSE_DISK, "secret": {"secretName": license_copy_name(machine.name)}}
        )
    for disk, volume in extra:
        disks.append(disk)
        volumes.append(volume)
    return {
        "apiVersion": apis.KUBEVIRT,
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": machine.name,
            "namespace": machine.namespace,
            "labels": {labels.INSTANCE: machine.name},
        },
        "spec": vmi_spec(machine.plan, resolved, disks, volumes, hostname),
    }


def vmi_spec(
    sized: Plan,
    resolved: gpus.Resolved,
    disks: list[dict],
    volumes: list[dict],
    hostname: str | None,
) -> dict:
    spec: dict = {
        "domain": {
            "cpu": {"cores": quantity.ceil(sized.cpu)},
            "memory": {"guest": quantity.format_binary(sized.ram)},
            "devices": {
                "disks": disks,
                "gpus": [
                    {"name": f"gpu-{i}", "deviceName": device}
                    for i, device in enumerate(resolved.devices)
                ],
            },
        },
        "volumes": volumes,
    }
    if resolved.tolerations:
        spec["tolerations"] = resolved.tolerations
    if hostname:
        spec["nodeSelector"] = {labels.HOSTNAME: hostname}
    return spec


def workspace_disk(spec: View) -> dict:
    if spec.has("volume", "persistent"):
        return {"persistentVolumeClaim": {"claimName": spec.str("volume", "persistent", "name")}}
    return {"emptyDisk": {"capacity": str(spec.get("volume", "ephemeral", "capacity") or "1Gi")}}


# --- what a running VM keeps (seed 003: changes apply at the next start) -------------------------


def keep_running(instance: Instance, outcome: Outcome) -> Outcome:
    """A started VMI (and its license copy) composed as observed when a start now would be
    refused, would wait, or would make another VMI; the Instance says what and when."""
    observed = instance.workload
    if observed is None:
        return outcome
    if not started(observed):
        return recreate(observed, outcome)
    if isinstance(outcome, Waiting) and outcome.reason in TRANSIENT:
        return kept(instance.request, observed, None)
    change = pending_change(outcome, instance.request)
    if change is None:
        return restart_required(outcome)
    return kept(instance.request, observed, change)


def recreate(observed: View, outcome: Outcome) -> Outcome:
    """A VMI that has not started, when a start now would make another: KubeVirt refuses to
    update its spec, so it is left out now (Crossplane deletes it) and the next reconcile, with
    no VMI observed, composes the new one. The license copy stays (a Secret may change)."""
    if not isinstance(outcome, Running):
        return outcome  # a refusal or a wait drops the VMI anyway
    differs = changed_parts(outcome.resources.get("vmi"), observed)
    if not differs:
        return outcome
    others = {name: obj for name, obj in outcome.resources.items() if name != "vmi"}
    return Waiting(reasons.REPLACING_VIRTUAL_MACHINE, recreate_message(differs), others)


def recreate_message(differs: Sequence[str]) -> str:
    return (
        "the VirtualMachineInstance has not started and a start now would make another one "
        f"({', '.join(differs)} differ); recreating it with the new spec"
    )


# Waits that only mean "not read yet": a running VM is kept, and nothing is said to change.
TRANSIENT = (
    reasons.READING_GPU_CLASSES,
    reasons.READING_INSTANCE_TYPE,
    reasons.READING_NODE,
    reasons.INSTANCE_TYPE_NOT_READY,
)


def kept(request: Request, observed: View, change: Condition | None) -> Running:
    resources = {"vmi": as_observed(observed)}
    copy = request.observed("license")
    if copy is not None:
        resources["license"] = as_observed(copy)
    status = vmi_status(observed)
    conditions = [scheduled(observed, status)]
    if change is not None:
        status["phaseMessage"] = change.message
        conditions.append(change)
    return Running(reasons.VMI_COMPOSED, resources, status, tuple(conditions))


def pending_change(outcome: Outcome, request: Request) -> Condition | None:
    """What a start now would do otherwise than the running VMI, as a RestartRequired condition."""
    if isinstance(outcome, Refused | Waiting):
        return next_start(outcome.reason, outcome.message)
    if not isinstance(outcome, Running):
        return None
    differs = changed_parts(outcome.resources.get("vmi"), request.observed("vmi"))
    if differs:
        what = f"the GPU classes changed since the VM started ({', '.join(differs)} differ)"
        return next_start(reasons.GPU_CLASS_CHANGED, f"spec.gpus: {what}")
    wanted, observed = outcome.resources.get("license"), request.observed("license")
    if wanted is not None and (
        observed is None or wanted["data"] != observed.view("data").to_dict()
    ):
        what = "spec.gpus: the license Secret changed since the VM started"
        return next_start(reasons.LICENSE_CHANGED, what)
    return None


def next_start(reason: str, what: str) -> Condition:
    message = (
        f"{what}; the running VM keeps its GPUs and license as started — this applies at its "
        "next start (set spec.stop to true, then back to false)"
    )
    return Condition(reasons.RESTART_REQUIRED, True, reason, message)


def restart_required(outcome: Outcome) -> Outcome:
    """A running VM that is what a start now would make: RestartRequired is False."""
    if not isinstance(outcome, Running):
        return outcome
    up_to_date = Condition(reasons.RESTART_REQUIRED, False, reasons.UP_TO_DATE)
    return Running(
        outcome.reason, outcome.resources, outcome.status, (*outcome.conditions, up_to_date)
    )


VMI_PARTS = {
    ("domain", "devices", "gpus"): "GPU devices",
    ("tolerations",): "tolerations",
    ("domain", "devices", "disks"): "disks",
    ("volumes",): "volumes",
    ("domain", "cpu"): "CPU",
    ("domain", "memory"): "memory",
    ("nodeSelector",): "node selector",
}


def changed_parts(wanted: Mapping[str, Any] | None, observed: View | None) -> list[str]:
    """The parts of the VMI spec a start now would make differently (KubeVirt's defaults on
    the observed object are not differences)."""
    if wanted is None or observed is None:
        return []
    spec = observed.view("spec")
    return [
        part
        for path, part in VMI_PARTS.items()
        if not covers(spec.get(*path), _at(wanted["spec"], path))
    ]


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def covers(observed: Any, wanted: Any) -> bool:
    """Whether `observed` (as a view reads it) holds everything `wanted` says (extra observed
    fields allowed). Only what `wanted` names is read of it; `wanted` is plain data."""
    if isinstance(wanted, dict):
        return isinstance(observed, View) and all(
            covers(observed.value(k), v) for k, v in wanted.items()
        )
    if isinstance(wanted, list):
        return (
            isinstance(observed, ListView)
            and len(observed) == len(wanted)
            and all(covers(o, w) for o, w in zip(observed, wanted, strict=True))
        )
    if wanted is None:
        return observed is None
    return bool(wanted == observed) or same_quantity(observed, wanted)


def same_quantity(observed: Any, wanted: Any) -> bool:
    """KubeVirt compares specs semantically: `1024Mi` is the `1Gi` a cluster may store."""
    if not (isinstance(observed, str) and isinstance(wanted, str)):
        return False
    try:
        return quantity.parse(observed) == quantity.parse(wanted)
    except quantity.QuantityError:
        return False


def as_observed(obj: View) -> dict:
    """An observed object composed as it is: its identity, its labels but Crossplane's, its spec
    (a VMI, KubeVirt's defaults and all, copied whole by the frame) or data (a Secret)."""
    metadata: dict = {"name": obj.name, "namespace": obj.namespace}
    kept = {k: v for k, v in obj.labels().items() if not k.startswith("crossplane.io/")}
    if kept:
        metadata["labels"] = kept
    found = {"apiVersion": obj.str("apiVersion"), "kind": obj.str("kind"), "metadata": metadata}
    for key in ("type", "spec", "data"):
        if obj.has(key):
            found[key] = obj.get(key) if key == "type" else passed_on(obj.view(key))
    return found


# --- the status mirrored from the VMI ----------------------------------------------------------


# KubeVirt's VMI phases before its launcher runs on a node ("": not yet made Pending).
UNPLACED = ("", "Pending", "Scheduling")
WAITING_FOR_NODE = "waiting for a node with the requested GPUs"


def vmi_phase(vmi: View | None, shortages: Sequence[str] = ()) -> tuple[str, str]:
    """The Instance phase from the VMI: Scheduling until KubeVirt places it (with why not),
    Starting on its node, Ready once it runs with its Ready condition True."""
    if vmi is None or vmi.str("status", "phase") in UNPLACED:
        if shortages:
            return reasons.SCHEDULING, shortage_message(shortages)
        if vmi is None:
            return reasons.STARTING, "composing the VirtualMachineInstance"
        return reasons.SCHEDULING, unplaced_message(vmi)
    phase = vmi.str("status", "phase")
    if phase == "Scheduled":
        return reasons.STARTING, "the VM is starting on its node"
    if phase == "Running":
        ready = vmi_condition(vmi, "Ready")
        if ready is not None and ready.str("status") == "True":
            return reasons.READY, ""
        return reasons.STARTING, ready.str("message") if ready is not None else ""
    return phase, ""


def unplaced_message(vmi: View) -> str:
    """Why the VMI is not placed: the scheduler's message, which KubeVirt copies from its
    launcher Pod's PodScheduled=False condition onto the VMI as a condition of that type.
    Its Ready condition says only that the guest is not running yet."""
    unplaced = vmi_condition(vmi, "PodScheduled")
    if unplaced is not None and unplaced.str("status") == "False" and unplaced.str("message"):
        return unplaced.str("message")
    return WAITING_FOR_NODE


def vmi_condition(vmi: View, type_: str) -> View | None:
    conditions = vmi.list("status", "conditions").views()
    return next((c for c in conditions if c.str("type") == type_), None)


def ready_message(vmi: View) -> str:
    ready = vmi_condition(vmi, "Ready")
    return ready.str("message") if ready is not None and ready.str("status") != "True" else ""


def shortage_message(resources: Sequence[str]) -> str:
    return (
        f"spec.gpus: no eligible node (Ready, schedulable, its taints tolerated) advertises "
        f"{' or '.join(sorted(set(resources)))} yet; the VM waits and starts when one does"
    )


def vmi_status(vmi: View | None, shortages: Sequence[str] = ()) -> dict:
    phase, message = vmi_phase(vmi, shortages)
    status: dict = {"phase": phase}
    if message:
        status["phaseMessage"] = message
    if vmi is not None and vmi.str("status", "nodeName"):
        status["nodeName"] = vmi.str("status", "nodeName")
    if vmi is not None:
        ips = [
            i.str("ipAddress")
            for i in vmi.list("status", "interfaces").views()
            if i.str("ipAddress")
        ]
        if ips:
            status["podIPs"] = ips
    return status


def scheduled(vmi: View | None, status: Mapping[str, Any]) -> Condition:
    """`Scheduled`: True once the VMI is on a node; False with why while it waits — the
    scheduler's reason or a shortage (a wait, never a refusal)."""
    if started(vmi):
        return Condition(reasons.SCHEDULED, True, reasons.SCHEDULED)
    why = str(status.get("phaseMessage") or WAITING_FOR_NODE)
    return Condition(reasons.SCHEDULED, False, reasons.WAITING_FOR_CAPACITY, why)
