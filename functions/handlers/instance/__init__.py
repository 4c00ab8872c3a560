"""instance: a tenant's Instance becomes a Pod queued through Kueue, or a KubeVirt VMI.

Without admission webhooks, everything that needs other objects is checked here: the
InstanceType, the pinned Node, the gates, the claims, the GPU classes. The reconcile is one
decision (`decide`) that ends in one of four outcomes (see `outcome`): a refusal composes no
workload and says why — a condition `Admitted=False` with a reason and a message naming the
field, a Warning result, `status.phase: Refused` — or, when a workload already runs, a Fatal
result that keeps it; a wait says what it waits for; a stop removes the workload; a run
composes it and mirrors its status.

Modules: `lifecycle` (stop, drain, the InstanceType, the pin, volume placement), `admission`
(the webhook's refusals), `container` and `pod` (the Container runtime), `record` (when an
observed Pod is replaced), `vm` (the VirtualMachine runtime), `volumes` (volume rules).
"""

from __future__ import annotations

import datetime

from functions.core import apis, labels
from functions.core.requests import InstanceTypeFacts
from functions.handlers.base import Handler, Request, Requirement
from functions.handlers.desired import Desired
from functions.handlers.inputs import CATALOG, catalog_settings
from functions.handlers.instance import admission, container, lifecycle, record, vm, volumes
from functions.handlers.instance.outcome import Instance, Outcome, refused, render

KINDS = frozenset({"Instance", "XInstance"})  # XInstance: the legacy (claim) composite


def requirements(request: Request) -> dict[str, Requirement]:
    spec = request.xr.view("spec")
    found = {
        "catalog": CATALOG,
        "runtimeclasses": Requirement(apis.NODE_API, "RuntimeClass"),
    }
    if spec.str("type"):
        found["instancetype"] = Requirement(
            apis.WORKER, "InstanceType", match_name=spec.str("type")
        )
    if spec.str("nodeName"):
        found["node"] = Requirement(apis.CORE, "Node", match_name=spec.str("nodeName"))
        found["flavors"] = Requirement(
            apis.KUEUE, "ResourceFlavor", match_labels={labels.RESOURCE_TYPE: "nodes"}
        )
    if spec.str("runtime") == "VirtualMachine":
        found |= vm.requirements(request)
    if volumes.claims(spec):
        found["claims"] = Requirement(
            apis.CORE, "PersistentVolumeClaim", namespace=request.namespace
        )
        found["volumes"] = Requirement(apis.CORE, "PersistentVolume")
        found["storageclasses"] = Requirement(apis.STORAGE, "StorageClass")
    return found


def compose(request: Request) -> Desired:
    desired = Desired()
    instance = read(request, desired)
    return render(instance, decide(instance), desired)


def read(request: Request, desired: Desired) -> Instance:
    generation = request.xr.get("metadata", "generation")
    generation = generation if isinstance(generation, int) else 0
    spec = request.xr.view("spec")
    virtual_machine = spec.str("runtime") == "VirtualMachine"
    workload = request.observed("vmi" if virtual_machine else "pod")
    digest = "" if virtual_machine else record.spec_digest(spec)
    return Instance(
        request=request,
        spec=spec,
        name=request.name,
        namespace=request.namespace,
        settings=catalog_settings(request, desired),
        workload=workload,
        generation=generation,
        spec_digest=digest,
        replacing=record.replacing(workload, digest, generation) if digest else None,
    )


def decide(instance: Instance) -> Outcome:
    """Stop, refuse, wait, or run — in the order the reference's webhook and controller judge."""
    stop = lifecycle.stopped(instance)
    if stop is not None:
        return stop
    refusals = admission.namespace_refusals(instance.namespace, instance.settings)
    if refusals:
        return refused(*refusals)
    facts = lifecycle.instance_type(instance)
    if not isinstance(facts, InstanceTypeFacts):
        return facts
    refusals = admission.refusals(instance.spec, instance.settings, instance.kept)
    if refusals:
        return refused(*refusals)
    hostname = lifecycle.pinned_hostname(instance)
    if not (hostname is None or isinstance(hostname, str)):
        return hostname
    runtime = vm if instance.virtual_machine else container
    return runtime.start(instance, facts, hostname)


HANDLER = Handler(
    "instance",
    KINDS,
    compose,
    requirements,
    ttl=datetime.timedelta(seconds=30),  # the InstanceType and Node are required, not watched
)
