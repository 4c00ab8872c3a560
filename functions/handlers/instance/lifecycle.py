"""An Instance's lifecycle: stopped or not, its InstanceType, and the node it is pinned to.

`spec.stop` removes the workload. Deleting or draining the InstanceType stops the Instance and
records the generation it stopped at; it stays stopped until its spec changes (the walkthrough
repoints `spec.type` and clears `stop`). A drain shows on the InstanceType (Draining) or, as
Kueue stops the Pod at once, on the Pod itself (`stopped_by_queue`).
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.core import labels, reasons
from functions.core.requests import InstanceTypeFacts, Refusal
from functions.core.status import StatusError
from functions.core.status import instancetype as type_status
from functions.handlers.instance import volumes
from functions.handlers.instance.outcome import (
    Instance,
    Outcome,
    Stopped,
    Waiting,
    refused,
)
from functions.views import View

# An Instance in one of these phases never ran, so a missing type refuses it; any other has
# run, so a missing type stops it.
NEVER_RAN = ("", reasons.REFUSED, reasons.STARTING)


def stopped(instance: Instance) -> Stopped | None:
    if instance.spec.bool("stop"):
        return Stopped("stopped by spec.stop")
    status = instance.request.xr.view("status")
    stopped_at = status.get("stoppedGeneration")
    if isinstance(stopped_at, int) and stopped_at == instance.generation:
        return Stopped(status.str("phaseMessage") or "stopped", instance.generation)
    return None


def drain(instance: Instance, why: str) -> Stopped:
    message = (
        f"{why}: the Instance stopped at generation {instance.generation}; change its spec "
        "(for example spec.type) to start it again"
    )
    return Stopped(message, instance.generation)


# The condition Kueue's pod integration puts on a Pod it stops because its ClusterQueue drains
# (pod_controller.go `Stop`: "WorkloadEvicted" + "DueTo" + the eviction's reason).
QUEUE_STOPPED = ("TerminationTarget", "WorkloadEvictedDueToClusterQueueStopped")


def stopped_by_queue(workload: View | None) -> bool:
    """Kueue stopped the observed Pod as its pool's queue drains. Kueue clears the reservation
    as it stops the Pod, so the InstanceType may read its queue drained without ever reading
    Draining: the Pod says it first."""
    if workload is None or workload.str("kind") != "Pod":
        return False
    return any(
        (condition.str("type"), condition.str("reason")) == QUEUE_STOPPED
        for condition in workload.list("status", "conditions").views()
    )


def instance_type(instance: Instance) -> InstanceTypeFacts | Outcome:
    """The InstanceType the Instance runs on, or why it cannot: refused, waiting, drained."""
    name = instance.spec.str("type")
    if not name:
        return refused(
            Refusal("spec.type", "type must be specified", reasons.INSTANCE_TYPE_NOT_FOUND)
        )
    found = instance.request.required_read("instancetype", read_type)
    if found is None:
        return Waiting(reasons.READING_INSTANCE_TYPE, f"spec.type: reading instance type {name}")
    observed = found[0] if found else None
    if observed is not None and observed.draining:
        return drain(instance, f"instance type {name} is draining")
    if observed is not None and stopped_by_queue(instance.kept):
        return drain(instance, f"instance type {name} drained its queue (Kueue stopped the Pod)")
    if observed is not None and not observed.deleting:
        if isinstance(observed.facts, StatusError):
            message = (
                f"spec.type: instance type {name} published an unreadable status "
                f"({observed.facts}); waiting for its next reconcile"
            )
            return Waiting(reasons.INSTANCE_TYPE_NOT_READY, message)
        return retyped(instance, observed.facts) or observed.facts
    phase = instance.request.xr.str("status", "phase")
    if instance.workload is not None or phase not in NEVER_RAN:
        return drain(instance, f"instance type {name} was deleted")
    return refused(
        Refusal(
            "spec.type",
            f"instance type {name} not found: pick one from `kubectl get instancetypes`",
            reasons.INSTANCE_TYPE_NOT_FOUND,
        )
    )


@dataclass(frozen=True)
class TypeRead:
    """What an Instance reads of its InstanceType. Every Instance of a type reads the same
    published status, and reading it through the Structs was a fifth of an Instance's call: it
    is read once while the type is unchanged (`Request.required_read`), and what it offers is
    handed out read-only. An unreadable status is kept too, as its error: it is read again
    once the type changes."""

    draining: bool
    deleting: bool
    facts: InstanceTypeFacts | StatusError


def read_type(instance_type: View) -> TypeRead:
    try:
        facts: InstanceTypeFacts | StatusError = type_status.read(instance_type)
    except StatusError as error:
        facts = error.with_traceback(None)  # kept: no frame of this call is held with it
    return TypeRead(
        draining=instance_type.str("status", "phase") == reasons.DRAINING,
        deleting=instance_type.has("metadata", "deletionTimestamp"),
        facts=facts,
    )


def retyped(instance: Instance, facts: InstanceTypeFacts) -> Outcome | None:
    """A kept Pod queued to another type's entrance: `spec.type` changed under a Pod that
    carries no record of its spec (made before Pods carried one, `record`), so it is not the
    Instance's Pod and is replaced, as one whose record differs is."""
    pod = instance.kept
    if pod is None or instance.virtual_machine:
        return None
    queued_to = pod.labels().get(labels.QUEUE_NAME, "")
    if not queued_to or not facts.entrance or queued_to == facts.entrance:
        return None
    message = (
        f"the Pod is queued to {queued_to}, not to instance type {facts.name}'s entrance "
        f"{facts.entrance}: replacing it with a Pod of the current spec"
    )
    return Waiting(reasons.REPLACING_OUTDATED_POD, message)


def pinned_hostname(instance: Instance) -> str | Outcome | None:
    """The pin is a `kubernetes.io/hostname` nodeSelector read from the Node, never nodeName."""
    node_name = instance.spec.str("nodeName")
    if not node_name:
        return None
    found = instance.request.required("node")
    if found is None:
        return Waiting(reasons.READING_NODE, f"spec.nodeName: reading node {node_name}")
    if found:
        return found[0].labels().get(labels.HOSTNAME) or node_name
    if instance.kept is not None:  # the node only has to exist when the Pod is first made
        return instance.kept.str("spec", "nodeSelector", labels.HOSTNAME) or node_name
    return refused(
        Refusal(
            "spec.nodeName",
            f"node {node_name} not found: pick one from `kubectl get nodes`",
            reasons.NODE_NOT_FOUND,
        )
    )


def placement(instance: Instance, hostname: str | None) -> str | Outcome | None:
    """Where the workload may run once its claims are considered: a node-local volume pins it
    (walkthrough §6); a claim nothing binds yet makes it wait; a pin elsewhere is refused."""
    if not instance.settings.persistent_volume_placement:
        return hostname
    request = instance.request
    where = volumes.placement(
        volumes.claims(instance.spec),
        request.required("claims"),
        request.required("volumes"),
        request.required("storageclasses"),
    )
    if where.waiting:
        return Waiting(reasons.WAITING_FOR_VOLUME, where.waiting)
    if where.node and hostname and where.node != hostname:
        message = (
            f"the pin to {hostname} conflicts with a node-local persistent volume on {where.node}"
        )
        return refused(Refusal("spec.nodeName", message, reasons.PLACEMENT_CONFLICT))
    return hostname or where.node
