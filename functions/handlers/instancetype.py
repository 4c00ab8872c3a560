"""instancetype: a pool's ClusterQueue, its LocalQueue entrance in every namespace, and status.

The status shows the four accelerator views and the CPU view summed from the pool's Devices
summaries, the detail of the hardware behind it, and the strings `kubectl get instancetypes`
prints. A custom InstanceType with the same identity as a derived one reads the same nodes.
"""

from __future__ import annotations

import datetime

from functions.core import labels, names, quantity
from functions.core.catalog import Settings, unit_display
from functions.core.flavors import derive_flavors, queue_flavors, resource_groups
from functions.core.pools import NodeSummary, PoolKey, PoolViews, pool_views
from functions.frame import Handler, InputError, Output, Request, Requirement
from functions.handlers.common import API, CATALOG, catalog_settings, condition_status, node_summary
from functions.structs import View

KUEUE = "kueue.x-k8s.io/v1beta2"
NODE_DEVICES_CHECK = "gpustack-node-devices"
QUEUE_ANNOTATION = "schedule.gpustack.ai/queue"


def pool_of(request: Request) -> PoolKey:
    spec = request.xr.view("spec")
    for field in ("os", "arch"):
        if not spec.str(field):
            raise InputError(f"spec.{field}", "must be specified, e.g. linux / amd64")
    if spec.bool("acceleratable") and not spec.str("acceleratorGroup"):
        raise InputError("spec.acceleratorGroup", "must be specified when acceleratable is true")
    return PoolKey.for_instance_type(spec.to_dict())


def devices_selector(pool: PoolKey) -> dict[str, str]:
    """The labels the agent stamps on Devices that pick out this pool's candidate nodes."""
    selector = {labels.OS: pool.os, labels.ARCH: pool.arch}
    if pool.a_key:
        selector[labels.accelerator_key_label(pool.a_key)] = labels.TRUE
    if pool.g_key:
        selector[labels.general_key_label(pool.g_key)] = labels.TRUE
    return selector


class InstanceTypeHandler(Handler):
    name = "instancetype"
    kinds = frozenset({"InstanceType"})
    # Devices and Namespaces are required resources, which Crossplane v2.3 does not watch.
    ttl = datetime.timedelta(seconds=30)

    def requirements(self, request: Request) -> dict[str, Requirement]:
        return {
            "catalog": CATALOG,
            "devices": Requirement(API, "Devices", match_labels=devices_selector(pool_of(request))),
            "namespaces": Requirement("v1", "Namespace"),
        }

    def compose(self, request: Request, out: Output) -> None:
        pool = pool_of(request)
        settings = catalog_settings(request)
        nodes = [node_summary(d, settings) for d in request.required("devices") or []]
        observed_queue = request.observed("clusterqueue")
        flavors = queue_flavors(pool, derive_flavors(nodes, settings.mixed_on_node))
        stop_policy = desired_stop_policy(request, bool(flavors), observed_queue, settings)
        draining = "HoldAndDrain" in (stop_policy, queue_stop_policy(observed_queue))
        views = pool_views(
            pool, nodes, settings.mixed_on_node, reserved_cpu(observed_queue), draining
        )

        queue = cluster_queue(
            request.xr.name, pool, resource_groups(pool, flavors, pool_manufacturer(pool, nodes))
        )
        queue["spec"]["stopPolicy"] = stop_policy
        if (
            pool.acceleratable
            and settings.node_devices_admission_check
            and settings.derived_from_node
        ):
            queue["spec"]["admissionChecksStrategy"] = {
                "admissionChecks": [{"name": NODE_DEVICES_CHECK}]
            }
        out.compose(
            "clusterqueue", queue, ready=condition_status(observed_queue, "Active") == "True"
        )
        for namespace in queue_namespaces(request, settings):
            key = f"localqueue-{namespace}"
            ready = condition_status(request.observed(key), "Active") == "True"
            out.compose(key, local_queue(request.xr.name, namespace), ready=ready)
        out.status = pool_status(request, pool, nodes, views, observed_queue)


def cluster_queue(name: str, pool: PoolKey, groups: list[dict]) -> dict:
    """The pool's ClusterQueue: no cohort, so no borrowing; lower priorities preempted within it."""
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": {
            "name": name,
            "labels": labels.pool_labels(pool.os, pool.arch, pool.a_key, pool.g_key),
        },
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": groups,
            "flavorFungibility": {
                "whenCanBorrow": "TryNextFlavor",
                "whenCanPreempt": "MayStopSearch",
            },
            "preemption": {
                "reclaimWithinCohort": "Never",
                "borrowWithinCohort": {"policy": "Never"},
                "withinClusterQueue": "LowerPriority",
            },
        },
    }


def local_queue(pool_name: str, namespace: str) -> dict:
    """The entrance: a LocalQueue named by the pool's FNV-1a hash, in one namespace."""
    return {
        "apiVersion": KUEUE,
        "kind": "LocalQueue",
        "metadata": {
            "name": names.entrance(pool_name),
            "namespace": namespace,
            "annotations": {QUEUE_ANNOTATION: pool_name},
        },
        "spec": {"clusterQueue": pool_name},
    }


def pool_status(
    request: Request, pool: PoolKey, nodes: list[NodeSummary], views: PoolViews, queue: View | None
) -> dict:
    phase, message = queue_phase(queue)
    accelerators = views.accelerators
    status = {
        "phase": phase,
        "entrance": names.entrance(request.xr.name),
        "accelerator": accelerators.exclusive.as_status(),
        "acceleratorShared": accelerators.shared.as_status(),
        "acceleratorSliced": accelerators.sliced.as_status(),
        "acceleratorPartitioned": accelerators.partitioned.as_status(),
        "nodes": len(views.nodes),
        "largestNodeCards": views.largest_node_cards,
        "largestNodeCores": views.largest_node_cores,
        "detail": detail(pool, nodes, views.nodes),
        "display": {
            "unit": unit_display(request.xr.view("spec").to_dict()),
            "accelerator": accelerators.display,
            "cpu": views.cpu.display,
        },
    }
    if not pool.acceleratable:
        status["cpu"] = views.cpu.as_status()
    if message:
        status["phaseMessage"] = message
    return status


def queue_stop_policy(queue: View | None) -> str:
    return queue.str("spec", "stopPolicy") or "None" if queue is not None else "None"


def reservations(queue: View | None) -> int:
    if queue is None:
        return 0
    return int(queue.get("status", "reservingWorkloads") or 0) + int(
        queue.get("status", "admittedWorkloads") or 0
    )


def desired_stop_policy(
    request: Request, has_flavors: bool, queue: View | None, settings: Settings
) -> str:
    """Hold when inactive; HoldAndDrain when the pool lost every flavor but still holds work."""
    if request.xr.bool("spec", "inactive"):
        return "Hold"
    if not has_flavors and settings.drain_when_no_flavors and reservations(queue) > 0:
        return "HoldAndDrain"
    return "None"


def queue_phase(queue: View | None) -> tuple[str, str]:
    """The InstanceType phase summarising its observed ClusterQueue."""
    if queue is None:
        return "Activating", "waiting for the ClusterQueue to be created"
    policy = queue_stop_policy(queue)
    if policy == "Hold":
        return "Inactive", "cluster queue is held"
    if policy == "HoldAndDrain":
        if reservations(queue) > 0:
            return "Draining", "cluster queue is draining its workloads"
        return "Inactive", "cluster queue is drained"
    active = condition_status(queue, "Active")
    if active == "True":
        return "Active", ""
    if active == "False":
        for condition in queue.list("status", "conditions").views():
            if condition.str("type") == "Active":
                return "Inactive", condition.str("message") or condition.str("reason")
    return "Activating", "waiting for Kueue to activate the ClusterQueue"


def reserved_cpu(queue: View | None) -> int:
    """Cores Kueue has reserved in the queue (whole cores, rounded up)."""
    if queue is None:
        return 0
    total = 0
    for flavor in queue.list("status", "flavorsReservation").views():
        for resource in flavor.list("resources").views():
            if resource.str("name") == "cpu":
                total += quantity.parse(str(resource.get("total") or 0))
    return quantity.ceil(total) if total else 0


def queue_namespaces(request: Request, settings: Settings) -> list[str]:
    reserved = settings.reserved_namespaces
    return sorted(
        ns.name
        for ns in request.required("namespaces") or []
        if ns.name not in reserved and ns.str("status", "phase") != "Terminating"
    )


def pool_manufacturer(pool: PoolKey, nodes: list[NodeSummary]) -> str:
    if not pool.a_key:
        return ""
    for node in nodes:
        if pool.a_key in node.facts:
            return node.facts[pool.a_key].manufacturer
    return pool.a_key.split("-", 1)[0]


def detail(pool: PoolKey, nodes: list[NodeSummary], covered: tuple[str, ...]) -> dict:
    """The observed hardware behind the pool (empty while no node backs it).

    Descriptors come from the first covered node; whether the pool slices logically or
    physically comes from every node's counts (a pool may mix MIG and whole cards).
    """
    covered_names = set(covered)
    members = [n for n in nodes if n.node in covered_names]
    if not members:
        return {}
    if not pool.a_key:
        if pool.g_key is None:
            return {"manufacturer": names.GENERIC}
        return {
            "manufacturer": names.cpu_manufacturer(pool.g_key),
            "product": members[0].cpu.model_name,
        }
    first = members[0].facts[pool.a_key]
    sliceable = next((n for n in members if n.groups[pool.a_key].logical_cards), None)
    logical = sliceable.facts[pool.a_key].slice_slots if sliceable else 0
    partitioned = next((n for n in members if n.groups[pool.a_key].partition_capacity), None)
    profiles = partitioned.facts[pool.a_key].profiles if partitioned else ()
    return {
        "manufacturer": first.manufacturer,
        "product": names.label_value(first.product),
        "family": first.family,
        "memory": quantity.format_mebibytes(first.memory_mib),
        "cores": str(first.cores),
        "computeCapability": first.compute_capability,
        "runtimeVersion": first.runtime_version,
        "slicedDetail": {
            "logical": {"count": logical, "coresPercentageOvercommit": logical > 0},
            "physical": {
                "count": max((p.count for p in profiles), default=0),
                "profiles": [
                    {"name": p.name, "count": p.count, "memoryMiB": p.memory_mib} for p in profiles
                ],
            },
        },
    }
