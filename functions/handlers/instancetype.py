"""instancetype: a pool's ClusterQueue, its LocalQueue entrance in every namespace, and status.

The status shows an accelerator view per sharing mode and the CPU view summed from the pool's node
summaries (one ConfigMap per node, which the devices handler publishes), the detail of the hardware behind it, what it offers an Instance, and the strings
`kubectl get instancetypes` prints. A custom InstanceType with the same identity as a derived
one reads the same nodes.
"""

from __future__ import annotations

import datetime
from fractions import Fraction

from functions.core import apis, labels, names, quantity, reasons
from functions.core.catalog import unit_display
from functions.core.flavors import (
    MAX_QUEUE_FLAVORS,
    Flavor,
    derive_flavors,
    flavors_left_out,
    queue_flavors,
    resource_groups,
)
from functions.core.pools import NodeSummary, PoolKey, pool_views
from functions.core.settings import Settings
from functions.core.status import instancetype as type_status
from functions.handlers.base import Handler, InputError, Request, Requirement
from functions.handlers.desired import Desired
from functions.handlers.inputs import (
    CATALOG,
    SUMMARIES,
    catalog_settings,
    keep_observed,
    node_summaries,
    summaries_missing,
    summaries_requirement,
)
from functions.handlers.readiness import condition
from functions.views import BOOLEAN, OBJECT, QUANTITY, STRING, View, check_shape

NODE_DEVICES_CHECK = "gpustack-node-devices"
HOLD, HOLD_AND_DRAIN, NONE = "Hold", "HoldAndDrain", "None"  # Kueue's stop policies


# The spec fields read here and handed to the core, with the types the XRD gives them.
SPEC_SHAPE = {
    "acceleratable": BOOLEAN,
    "acceleratorGroup": STRING,
    "arch": STRING,
    "displayName": STRING,
    "generalGroup": STRING,
    "inactive": BOOLEAN,
    "localStorage": STRING,
    "os": STRING,
    "unitResources": OBJECT,
    "unitResources.cpu": QUANTITY,
    "unitResources.ram": QUANTITY,
}


def pool_of(request: Request) -> PoolKey:
    spec = request.xr.view("spec")
    check_shape(spec, "spec", SPEC_SHAPE)
    for field in ("os", "arch"):
        if not spec.str(field):
            raise InputError(f"spec.{field}", "must be specified, e.g. linux / amd64")
    if spec.bool("acceleratable") and not spec.str("acceleratorGroup"):
        raise InputError("spec.acceleratorGroup", "must be specified when acceleratable is true")
    return PoolKey.for_instance_type(spec.to_dict())


def devices_selector(pool: PoolKey) -> dict[str, str]:
    """The labels that pick out this pool's candidate nodes: on a node's summary, as the
    agent stamps them on its Devices."""
    selector = {labels.OS: pool.os, labels.ARCH: pool.arch}
    if pool.a_key:
        selector[labels.accelerator_key_label(pool.a_key)] = labels.TRUE
    if pool.g_key:
        selector[labels.general_key_label(pool.g_key)] = labels.TRUE
    return selector


def requirements(request: Request) -> dict[str, Requirement]:
    # The summaries' namespace is the Catalog's systemNamespace: once the Catalog is read,
    # this selector stays the same on every later call.
    settings = catalog_settings(request, Desired())
    return {
        "catalog": CATALOG,
        SUMMARIES: summaries_requirement(settings, devices_selector(pool_of(request))),
        "namespaces": Requirement(apis.CORE, "Namespace"),
    }


def compose(request: Request) -> Desired:
    desired = Desired()
    pool = pool_of(request)
    settings = catalog_settings(request, desired)
    if summaries_missing(request, ["clusterqueue"]):
        return keep_observed(request, desired, "the ClusterQueue, its LocalQueues and the status")
    nodes = node_summaries(request, desired)
    observed_queue = request.observed("clusterqueue")
    flavors = queue_flavors(pool, derive_flavors(nodes, settings.mixed_on_node))
    stop_policy = desired_stop_policy(request, bool(flavors), observed_queue, settings)
    draining = HOLD_AND_DRAIN in (stop_policy, queue_stop_policy(observed_queue))
    reserved = reserved_cpu(observed_queue, desired)
    views = pool_views(pool, nodes, settings.mixed_on_node, reserved, draining)

    groups = resource_groups(pool, flavors, pool_manufacturer(pool, nodes))
    warn_flavors_left_out(desired, flavors_left_out(pool, flavors))
    queue = cluster_queue(request.xr.name, pool, groups, stop_policy)
    if pool.acceleratable and settings.node_devices_admission_check and settings.derived_from_node:
        queue["spec"]["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": NODE_DEVICES_CHECK}]
        }
    desired.compose("clusterqueue", queue, observed_queue)
    for namespace in queue_namespaces(request, settings):
        key = f"localqueue-{namespace}"
        desired.compose(key, local_queue(request.xr.name, namespace), request.observed(key))
    phase, message = queue_phase(observed_queue)
    desired.status = type_status.publish(
        pool,
        views,
        settings.dialect,
        phase=phase,
        message=message,
        entrance=names.entrance(request.xr.name),
        unit=unit_display(request.xr.view("spec").to_dict()),
    )
    return desired


def warn_flavors_left_out(desired: Desired, left_out: list[Flavor]) -> None:
    """Kueue lists at most 64 flavors for one resource: the nodes of the rest take no Pod."""
    if not left_out:
        return
    names = ", ".join(f.name for f in left_out[:3]) + (", ..." if len(left_out) > 3 else "")
    desired.warning(
        f"the pool has {MAX_QUEUE_FLAVORS + len(left_out)} flavors and its ClusterQueue lists "
        f"the first {MAX_QUEUE_FLAVORS}, Kueue's most for one resource: the nodes of the "
        f"{len(left_out)} largest ({names}) take no Instance; split the pools by CPU: set the "
        "Catalog's instanceTypeAwareCpuManufacturer",
        reasons.FLAVORS_LEFT_OUT,
    )


def cluster_queue(name: str, pool: PoolKey, groups: list[dict], stop_policy: str) -> dict:
    """The pool's ClusterQueue: no cohort, so no borrowing; lower priorities preempted within it."""
    return {
        "apiVersion": apis.KUEUE,
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
            "stopPolicy": stop_policy,
        },
    }


def local_queue(pool_name: str, namespace: str) -> dict:
    """The entrance: a LocalQueue named by the pool's FNV-1a hash, in one namespace."""
    return {
        "apiVersion": apis.KUEUE,
        "kind": "LocalQueue",
        "metadata": {
            "name": names.entrance(pool_name),
            "namespace": namespace,
            "annotations": {labels.QUEUE_ANNOTATION: pool_name},
        },
        "spec": {"clusterQueue": pool_name},
    }


def queue_stop_policy(queue: View | None) -> str:
    return queue.str("spec", "stopPolicy") or NONE if queue is not None else NONE


def reservations(queue: View | None) -> int:
    if queue is None:
        return 0
    status = queue.view("status")
    return _whole(status.get("reservingWorkloads")) + _whole(status.get("admittedWorkloads"))


def _whole(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def desired_stop_policy(
    request: Request, has_flavors: bool, queue: View | None, settings: Settings
) -> str:
    """Hold when inactive; HoldAndDrain when the pool lost every flavor but still holds work."""
    if request.xr.bool("spec", "inactive"):
        return HOLD
    if not has_flavors and settings.drain_when_no_flavors and reservations(queue) > 0:
        return HOLD_AND_DRAIN
    return NONE


def queue_phase(queue: View | None) -> tuple[str, str]:
    """The InstanceType phase summarising its observed ClusterQueue."""
    if queue is None:
        return reasons.ACTIVATING, "waiting for the ClusterQueue to be created"
    policy = queue_stop_policy(queue)
    if policy == HOLD:
        return reasons.INACTIVE, "cluster queue is held"
    if policy == HOLD_AND_DRAIN:
        if reservations(queue) > 0:
            return reasons.DRAINING, "cluster queue is draining its workloads"
        return reasons.INACTIVE, "cluster queue is drained"
    active = condition(queue, "Active")
    if active == "True":
        return reasons.ACTIVE, ""
    if active == "False":
        for found in queue.list("status", "conditions").views():
            if found.str("type") == "Active":
                return reasons.INACTIVE, found.str("message") or found.str("reason")
    return reasons.ACTIVATING, "waiting for Kueue to activate the ClusterQueue"


def reserved_cpu(queue: View | None, desired: Desired) -> int:
    """Cores Kueue has reserved in the queue (whole cores, rounded up). A reservation that
    cannot be read counts nothing and is named in a Warning: the CPU view then shows more
    remaining than Kueue holds."""
    if queue is None:
        return 0
    total = quantity.parse(0)
    for index, flavor in enumerate(queue.list("status", "flavorsReservation")):
        at = f"status.flavorsReservation[{index}]"
        if not isinstance(flavor, View):
            unread_reservation(desired, queue.name, at, "must be an object")
            continue
        for position, resource in enumerate(flavor.list("resources")):
            total += reserved_cores(desired, queue.name, f"{at}.resources[{position}]", resource)
    return quantity.ceil(total) if total else 0


def reserved_cores(desired: Desired, queue: str, at: str, resource: object) -> Fraction:
    if not isinstance(resource, View):
        unread_reservation(desired, queue, at, "must be an object")
        return Fraction(0)
    if resource.str("name") != "cpu":
        return Fraction(0)
    try:
        return quantity.parse(resource.get("total") or 0)
    except quantity.QuantityError as error:
        unread_reservation(desired, queue, f"{at}.total", str(error))
        return Fraction(0)


def unread_reservation(desired: Desired, queue: str, at: str, problem: str) -> None:
    desired.warning(
        f"ClusterQueue {queue}: {at}: {problem}; this reservation is not counted, so the CPU "
        "view may show more cores remaining than Kueue holds",
        reasons.UNREADABLE_OBJECT,
    )


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


HANDLER = Handler(
    "instancetype",
    frozenset({"InstanceType"}),
    compose,
    requirements,
    # Summaries and Namespaces are required resources, which Crossplane v2.3 does not watch.
    ttl=datetime.timedelta(seconds=30),
)
