"""kubernetesnodes: a tenant's worker pool becomes one KubeVirt VMI per worker (seed 003).

A `KubernetesNodes` pool has `replicas` workers, each a VM sized by an InstanceType like a VM
Instance (one unit of the type, no card; `spec.resources` scales it) and booted from `image`,
with `gpus` per worker. Its GPU entries are class entries only and passthrough only (seed 003:
"do not select a vGPU class for this worker-pool path"); each resolves as a VM's does
(`instance.vm.resolve`), and each worker needs its GPUs on one host, so the class's per-VM
limit applies per worker. Worker `i` is the VMI `<pool>-<i>`; scaling down removes the
highest-numbered workers (they are no longer desired, and Crossplane deletes them).

As for a VM Instance, refusals apply to starting a worker only: a worker VMI that has started
is kept as observed while its class or the catalog changes, and the pool says what changed and
that it applies at that worker's next start (`RestartRequired`); a new worker in the same state
is refused. A worker VMI that has not started but would now be made otherwise is replaced, not
rewritten (KubeVirt refuses any change to a VMI's spec): it is left out now and composed anew on
the next reconcile, as a failed one is. A shortage never refuses: the worker waits for
scheduling. The status counts the workers that are Ready.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, replace

from functions.core import apis, reasons
from functions.core.requests import InstanceTypeFacts, Plan, Refusal
from functions.core.settings import Settings
from functions.core.status import StatusError
from functions.handlers.base import Handler, Request, Requirement
from functions.handlers.desired import Condition, Desired
from functions.handlers.gpuclass import whole
from functions.handlers.inputs import CATALOG, catalog_settings
from functions.handlers.instance import admission, gpus, lifecycle, vm
from functions.handlers.instance.outcome import Refused, Waiting, started
from functions.views import View

KINDS = frozenset({"KubernetesNodes", "XKubernetesNodes"})  # XKubernetesNodes: the legacy XR
EPHEMERAL_DEFAULT = "20Gi"
MAX_REPLICAS = 256
PASSTHROUGH_ONLY = gpus.VgpuBar(
    reasons.PASSTHROUGH_ONLY,
    "GPU class {name} is a vGPU offer: class entries of a KubernetesNodes pool support "
    "passthrough only; select a passthrough class",
)


def requirements(request: Request) -> dict[str, Requirement]:
    found = {"catalog": CATALOG, **gpus.class_requirements()}
    if request.xr.str("spec", "type"):
        found["instancetype"] = Requirement(
            apis.WORKER, "InstanceType", match_name=request.xr.str("spec", "type")
        )
    return found


def compose(request: Request) -> Desired:
    desired = Desired()
    pool = Pool.of(request)
    start = workers_start(request, pool, catalog_settings(request, desired))
    workers = [worker(request, pool, index, start) for index in range(pool.replicas)]
    for index, found in enumerate(workers):
        if found.vmi is not None:
            desired.compose(worker_key(index), found.vmi, request.observed(worker_key(index)))
    report(desired, pool, start, workers)
    return desired


@dataclass(frozen=True)
class Pool:
    name: str
    namespace: str
    spec: View
    replicas: int

    @classmethod
    def of(cls, request: Request) -> Pool:
        spec = request.xr.view("spec")
        replicas = spec.get("replicas")
        count = 1 if replicas is None else int(replicas) if whole(replicas) else 0
        # An out-of-range count is refused (`refusals`); it must not be walked meanwhile.
        return cls(request.name, request.namespace, spec, min(max(count, 0), MAX_REPLICAS))


def worker_key(index: int) -> str:
    return f"worker-{index}"


def worker_name(pool: Pool, index: int) -> str:
    return f"{pool.name}-{index}"


# --- what starting a worker comes to, for every worker alike -----------------------------------


@dataclass(frozen=True)
class Start:
    """A worker's start now: the size and GPUs, or why it cannot start (refused or waiting)."""

    plan: Plan | None = None
    resolved: gpus.Resolved | None = None
    refusal: Refused | None = None
    waiting: Waiting | None = None


def workers_start(request: Request, pool: Pool, settings: Settings) -> Start:
    refusals = admission.namespace_refusals(pool.namespace, settings) + spec_refusals(pool.spec)
    if refusals:
        return Start(refusal=Refused(tuple(refusals)))
    facts = instance_type(request, pool.spec.str("type"))
    if not isinstance(facts, InstanceTypeFacts):
        return facts
    sized = vm.size(pool.spec.view("resources").to_dict(), facts)
    if isinstance(sized, Refused):
        return Start(refusal=sized)
    if isinstance(sized, Waiting):
        return Start(waiting=sized)
    offers = gpus.read_classes(request)
    if offers is None:
        return Start(waiting=gpus.READING)
    entries = list(pool.spec.list("gpus").views())
    resolved = gpus.resolve(entries, replace(offers, vgpu_bar=PASSTHROUGH_ONLY))
    if isinstance(resolved, list):
        return Start(refusal=Refused(tuple(resolved)))
    return Start(plan=sized, resolved=resolved)


def spec_refusals(spec: View) -> list[Refusal]:
    """The XRD's rules the handler must hold offline too: replicas, class entries only."""
    found = []
    replicas = spec.get("replicas")
    if replicas is not None and not (whole(replicas) and 0 <= replicas <= MAX_REPLICAS):
        message = f"must be a whole number from 0 to {MAX_REPLICAS}, got {replicas!r}"
        found.append(Refusal("spec.replicas", message, reasons.INVALID_RESOURCES))
    message = "a KubernetesNodes pool takes class entries only: select a GPU class by className"
    found += [
        Refusal(f"spec.gpus[{index}]", message, reasons.INVALID_GPUS)
        for index, entry in enumerate(spec.list("gpus").views())
        if not entry.has("className")
    ]
    return found


def instance_type(request: Request, name: str) -> InstanceTypeFacts | Start:
    """The InstanceType that sizes every worker, or why no worker can start now."""
    found = request.required_read("instancetype", lifecycle.read_type)
    if not name or found == []:
        message = f"instance type {name} not found: pick one from `kubectl get instancetypes`"
        refusal = Refusal("spec.type", message, reasons.INSTANCE_TYPE_NOT_FOUND)
        return Start(refusal=Refused((refusal,)))
    if found is None:
        return Start(waiting=Waiting(reasons.READING_INSTANCE_TYPE, f"spec.type: reading {name}"))
    facts = found[0].facts
    if isinstance(facts, StatusError):
        message = f"spec.type: instance type {name} published an unreadable status ({facts})"
        return Start(waiting=Waiting(reasons.INSTANCE_TYPE_NOT_READY, message))
    return facts


# --- one worker --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Worker:
    name: str
    vmi: dict | None  # what is composed for it (None: nothing, it cannot start)
    observed: View | None
    change: Condition | None = None  # a started worker kept: what a start now would change
    replacing: str = ""  # why its VMI is removed now, to be started anew on the next reconcile


def worker(request: Request, pool: Pool, index: int, start: Start) -> Worker:
    name = worker_name(pool, index)
    observed = request.observed(worker_key(index))
    if observed is not None and vm.failed(observed):  # removed now, started anew on the next
        return Worker(name, None, observed, replacing=vm.failure_message(observed))
    wanted = render_worker(pool, name, start)
    if observed is None:
        return Worker(name, wanted, observed)
    if not started(observed):
        return unstarted(name, wanted, observed)
    why = start.refusal or start.waiting
    if why is not None and why.reason in vm.TRANSIENT:
        return Worker(name, vm.as_observed(observed), observed)
    if why is not None:
        change = vm.next_start(why.reason, why.message)
    elif vm.changed_parts(wanted, observed):
        parts = ", ".join(vm.changed_parts(wanted, observed))
        change = vm.next_start(
            reasons.GPU_CLASS_CHANGED,
            f"spec.gpus: the GPU classes changed since {name} started ({parts} differ)",
        )
    else:
        return Worker(name, wanted, observed)
    return Worker(name, vm.as_observed(observed), observed, change)


def unstarted(name: str, wanted: dict | None, observed: View) -> Worker:
    """A worker VMI not started yet: KubeVirt refuses to update its spec, so one a start now
    would make otherwise is removed this round and composed anew on the next."""
    differs = vm.changed_parts(wanted, observed)
    if differs:
        return Worker(name, None, observed, replacing=vm.recreate_message(differs))
    return Worker(name, wanted, observed)


def render_worker(pool: Pool, name: str, start: Start) -> dict | None:
    if start.plan is None or start.resolved is None:
        return None
    spec = pool.spec
    machine = vm.Machine(name, pool.namespace, spec.str("image"), start.plan)
    capacity = str(spec.get("ephemeralStorage") or EPHEMERAL_DEFAULT)
    extra = ()
    if spec.str("userData", "secretName"):
        extra = (
            (
                {"name": "cloudinitdisk", "disk": {"bus": "virtio"}},
                {
                    "name": "cloudinitdisk",
                    "cloudInitNoCloud": {"secretRef": {"name": spec.str("userData", "secretName")}},
                },
            ),
        )
    return vm.render_vmi(
        machine, start.resolved, {"emptyDisk": {"capacity": capacity}}, extra=extra
    )


# --- the pool's status ---------------------------------------------------------------------------


def report(desired: Desired, pool: Pool, start: Start, workers: list[Worker]) -> None:
    """replicas, readyReplicas, each worker's phase, and the conditions that say why."""
    ready = [w for w in workers if vm.vmi_phase(w.observed)[0] == reasons.READY and w.vmi]
    desired.status = {
        "replicas": pool.replicas,
        "readyReplicas": len(ready),
        "workers": [worker_status(w, start) for w in workers],
    }
    phase, message = pool_phase(pool, start, workers, len(ready))
    desired.status["phase"] = phase
    if message:
        desired.status["phaseMessage"] = message
    all_ready = len(ready) == pool.replicas
    desired.condition(
        reasons.WORKERS_READY,
        all_ready,
        reasons.READY if all_ready else phase,
        "" if all_ready else message,
    )
    changes = [w.change for w in workers if w.change is not None]
    if changes:
        desired.condition(reasons.RESTART_REQUIRED, True, changes[0].reason, changes[0].message)
    else:
        desired.condition(reasons.RESTART_REQUIRED, False, reasons.UP_TO_DATE)
    if start.refusal is not None and pool.replicas:
        desired.warning(start.refusal.message, start.refusal.reason)
    desired.composite_ready = all_ready


def pool_phase(pool: Pool, start: Start, workers: list[Worker], ready: int) -> tuple[str, str]:
    if ready == pool.replicas:
        return reasons.READY, ""
    if start.refusal is not None:
        return reasons.REFUSED, start.refusal.message
    if start.waiting is not None:
        return reasons.STARTING, start.waiting.message
    if start.resolved is not None and start.resolved.shortages:
        return reasons.SCHEDULING, vm.shortage_message(start.resolved.shortages)
    replacing = [w for w in workers if w.replacing]
    if replacing:
        return reasons.STARTING, f"{replacing[0].name}: {replacing[0].replacing}"
    waiting = [w for w in workers if not started(w.observed)]
    if waiting and any(w.observed is not None for w in waiting):
        return reasons.SCHEDULING, f"{len(waiting)} of {pool.replicas} workers wait for a node"
    return reasons.STARTING, f"{ready} of {pool.replicas} workers are ready"


def worker_status(found: Worker, start: Start) -> dict:
    status = {"name": found.name, **vm.vmi_status(found.observed)}
    if found.replacing:
        status = {"name": found.name, "phase": reasons.STARTING, "phaseMessage": found.replacing}
    elif found.vmi is None:
        why = start.refusal or start.waiting
        status = {
            "name": found.name,
            "phase": reasons.REFUSED if start.refusal else reasons.STARTING,
        }
        if why is not None:
            status["phaseMessage"] = why.message
    elif found.change is not None:
        status["phaseMessage"] = found.change.message
    return status


HANDLER = Handler(
    "kubernetesnodes",
    KINDS,
    compose,
    requirements,
    ttl=datetime.timedelta(
        seconds=30
    ),  # the InstanceType, classes and nodes are required, not watched
)
