"""Kueue's part, played from what the package ships: the Kueue Configuration and the queues.

- Pod integration: a Pod with a `kueue.x-k8s.io/queue-name` label is gated at creation
  (`kueue.x-k8s.io/admission`) and gets a Workload.
- Admission by quota: the Pod's requests go through the shipped Configuration's resource
  transformations (KEP-2937: outputs × quantity, × the quantity of `multiplyBy` where the Pod
  asks for it; `Replace` drops the input, `Retain` keeps it; an empty `Replace` ignores the
  input) — the configuration shipped for the device plugin the cluster runs — and are counted
  as Kueue counts them (CPU in millicores, anything else in whole units, each rounded up);
  then, group by group, the first flavor of the ClusterQueue whose node labels and taints the
  Pod accepts (only the flavor's own label keys count) and whose quota holds the request is
  assigned. With `IgnoreUndeclared` only covered resources are checked. An admitted Pod is
  ungated and given the flavor's node labels and tolerations.
- DRA (kueuedra.py): the devices a Pod's ResourceClaimTemplates ask for, counted per DeviceClass
  as the Configuration's `resources.deviceClassMappings` names them, are added to its requests
  after the transformations; a claim Kueue cannot count makes the Workload Inadmissible.
- Queues: a ClusterQueue write is refused, as Kueue's webhook refuses it, where a resource is
  covered or a flavor listed by more than one resource group; a ClusterQueue is Active when
  every flavor it names exists and it is not stopped; `HoldAndDrain` evicts its admitted
  workloads, and the pod integration stops each Pod by a graceful delete. Its status reports
  reserving/admitted workloads and the reservation per flavor.
- Quota goes back when a Pod ends, not when it is gone: a Workload whose Pod is being deleted
  (`deletionTimestamp`), or has finished, is Finished and holds nothing, however long the Pod
  stays Terminating (on an unreachable node, until the Pod garbage collector removes it).

It never calls the product's credit rule: the charge of a Pod is whatever the shipped
transformations make of the Pod's actual container requests. Quantities are read with
Kubernetes' Python client and written in apimachinery's canonical form (`kube`), as Kueue
writes its status and its messages (`1600k`, `800m`).
"""

from __future__ import annotations

import copy
import datetime
import functools
import math
from collections.abc import Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

from functions import documents
from gpustack_sim import kube
from gpustack_sim.apiserver import FORBIDDEN, Mutator, Webhook
from gpustack_sim.client import Client
from gpustack_sim.kueuedra import INADMISSIBLE, DraError, dra_requests
from gpustack_sim.nodelifecycle import DEFAULT_GRACE_SECONDS, EPOCH

GATE = "kueue.x-k8s.io/admission"
QUEUE_NAME = "kueue.x-k8s.io/queue-name"
MANAGED = "kueue.x-k8s.io/managed"
API = "kueue.x-k8s.io/v1beta2"
POD_SET = "main"
CLUSTER_QUEUE_VALIDATOR = "vclusterqueue.kb.io"
TERMINATION_TARGET = "TerminationTarget"  # the Pod condition Kueue's `Stop` sets
CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped"  # kueue.WorkloadEvictedByClusterQueueStopped
FINISHED_PHASES = ("Succeeded", "Failed")


class Kueue:
    def __init__(self, api: Client, configurations: Path):
        """`configurations`: a Kueue Configuration file, or a folder of them by device plugin
        (`compositions/kueue/<devicePlugin>.yaml`)."""
        self.api = api
        self.configurations = configurations
        self.events: list[str] = []
        # Kueue registers its webhooks when it is installed, before any queue exists
        api.api.webhooks.append(
            Webhook(
                CLUSTER_QUEUE_VALIDATOR,
                "ClusterQueue",
                admit_cluster_queue,
                creates=True,
                reason=FORBIDDEN,  # controller-runtime's Denied: its errors are no APIStatus
            )
        )
        api.api.mutators.append(Mutator("mpod.kb.io", "Pod", self.gate))

    @property
    def configuration(self) -> dict[str, Any]:
        path = self.configurations
        if path.is_dir():
            path = path / f"{kube.device_plugin(self.api)}.yaml"
        return _configuration(path, path.stat().st_mtime_ns)

    @property
    def resources(self) -> dict[str, Any]:
        return self.configuration.get("resources") or {}

    @property
    def manages_pods(self) -> bool:
        """The pod integration is on: Kueue's webhook gates Pods only then."""
        return "pod" in ((self.configuration.get("integrations") or {}).get("frameworks") or [])

    @property
    def transformations(self) -> dict[str, Any]:
        return {t["input"]: t for t in self.resources.get("transformations") or []}

    @property
    def ignore_undeclared(self) -> bool:
        return self.resources.get("quotaCheckStrategy") == "IgnoreUndeclared"

    def run(self) -> None:
        self.activate_queues()
        for pod in self.api.list("Pod"):
            if GATE in _gates(pod) and "phase" not in (pod.get("status") or {}):
                self.report_gated(pod)
        self.drain_stopped_queues()
        self.finish_workloads()  # after the drain: a Pod it stopped is being deleted already
        for pod in self.api.list("Pod"):
            if GATE in _gates(pod):
                self.admit(pod)
        self.report_usage()

    # --- the pod integration -----------------------------------------------------------------

    def gate(self, pod: dict[str, Any]) -> None:
        """Kueue's Pod webhook, at creation: a Pod for a queue (while the pod integration is
        on) is marked managed and gated until its Workload is admitted."""
        labels = pod["metadata"].setdefault("labels", {})
        if not self.manages_pods or QUEUE_NAME not in labels or labels.get(MANAGED) == "true":
            return
        labels[MANAGED] = "true"
        pod.setdefault("spec", {}).setdefault("schedulingGates", []).append({"name": GATE})

    def report_gated(self, pod: dict[str, Any]) -> None:
        """A new gated Pod reads Pending, PodScheduled=False (SchedulingGated)."""
        pod.setdefault("status", {})["phase"] = "Pending"
        kube.set_conditions(pod, kube.condition("PodScheduled", "False", "SchedulingGated"))
        self.api.update_status(pod)
        workload = workload_of(pod)
        self.api.apply(workload)
        try:
            requests = self.counted(pod)
        except DraError:  # the workload controller reports it when it admits
            requests = self.requests(pod)
        workload["status"] = {"resourceRequests": resource_requests(requests)}
        self.api.update_status(workload)

    def requests(self, pod: Mapping[str, Any]) -> dict[str, Fraction]:
        """The Pod's requests as Kueue counts them: after the resource transformations."""
        counted: dict[str, Fraction] = {}
        transformations = self.transformations
        requested = kube.pod_requests(pod["spec"])
        for name, amount in requested.items():
            transformation = transformations.get(name)
            if transformation is None:
                counted[name] = counted.get(name, Fraction(0)) + amount
                continue
            scale = requested.get(transformation.get("multiplyBy", ""), Fraction(1))
            for output, factor in (transformation.get("outputs") or {}).items():
                charge = amount * scale * kube.quantity(factor)
                counted[output] = counted.get(output, Fraction(0)) + charge
            if transformation.get("strategy", "Retain") == "Retain":
                counted[name] = counted.get(name, Fraction(0)) + amount
        return counted

    def counted(self, pod: Mapping[str, Any]) -> dict[str, Fraction]:
        """What the Workload requests: the transformed requests, and what its claims' devices
        count as (DraError where Kueue cannot count them)."""
        counted = self.requests(pod)
        if pod["spec"].get("resourceClaims"):
            mappings = self.resources.get("deviceClassMappings") or []
            for name, amount in dra_requests(self.api, pod, mappings, POD_SET).items():
                counted[name] = counted.get(name, Fraction(0)) + amount
        return counted

    # --- admission ----------------------------------------------------------------------------

    def admit(self, pod: dict[str, Any]) -> None:
        workload = self.api.get("Workload", workload_name(pod), pod["metadata"]["namespace"])
        if workload is None or finished(workload):
            return
        try:
            counted = self.counted(pod)
        except DraError as error:
            return self.inadmissible(workload, error)
        if pod["spec"].get("resourceClaims"):
            clear_unadmitted(workload)
        queue, why = self.cluster_queue(pod)
        assigned = None
        if queue is not None:
            requests = {k: charged(k, v) for k, v in counted.items()}
            assigned, why = self.assign(pod, queue, requests)
        if queue is None or assigned is None:
            kube.set_conditions(workload, kube.condition("QuotaReserved", "False", "Pending", why))
            self.api.update_status(workload)
            return
        name = queue["metadata"]["name"]
        usage = {r: kube.format_quantity(requests[r]) for r in assigned}
        workload["status"]["admission"] = {
            "clusterQueue": name,
            "podSetAssignments": [
                {"name": POD_SET, "flavors": assigned, "resourceUsage": usage, "count": 1}
            ],
        }
        kube.set_conditions(
            workload,
            kube.condition(
                "QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {name}"
            ),
            kube.condition("Admitted", "True", "Admitted", "The workload is admitted"),
        )
        self.api.update_status(workload)
        self.ungate(
            pod, [self.api.get("ResourceFlavor", f) for f in sorted(set(assigned.values()))]
        )

    def inadmissible(self, workload: dict[str, Any], error: DraError) -> None:
        """The workload controller's answer to claims it cannot count: no reservation,
        QuotaReserved and Requeued False, Inadmissible."""
        workload.setdefault("status", {}).pop("admission", None)
        kube.set_conditions(
            workload,
            kube.condition("QuotaReserved", "False", INADMISSIBLE, error.message),
            kube.condition("Requeued", "False", INADMISSIBLE, error.requeued),
        )
        self.api.update_status(workload)

    def cluster_queue(self, pod: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
        namespace, name = pod["metadata"]["namespace"], kube.labels_of(pod)[QUEUE_NAME]
        local = self.api.get("LocalQueue", name, namespace)
        if local is None:
            return None, f"LocalQueue {name} doesn't exist"
        queue = self.api.get("ClusterQueue", local["spec"]["clusterQueue"])
        if queue is None or kube.condition_status(queue, "Active") != "True":
            return None, f"ClusterQueue {local['spec']['clusterQueue']} is inactive"
        labels = kube.labels_of(self.api.get("Namespace", namespace))
        if not kube.label_selector_matches(queue["spec"].get("namespaceSelector"), labels):
            return None, "workload namespace doesn't match ClusterQueue selector"
        return queue, ""

    def assign(
        self, pod: Mapping[str, Any], queue: Mapping[str, Any], requests: Mapping[str, int]
    ) -> tuple[dict[str, str] | None, str]:
        """A flavor per covered resource the Pod requests, group by group; or why not."""
        assigned: dict[str, str] = {}
        covered: set[str] = set()
        for group in queue["spec"].get("resourceGroups") or []:
            wanted = {r: requests[r] for r in group["coveredResources"] if requests.get(r)}
            covered |= set(group["coveredResources"])
            if not wanted:
                continue
            flavor, why = self.first_fitting(pod, queue, group, wanted)
            if flavor is None:
                return None, why
            assigned |= dict.fromkeys(wanted, flavor)
        undeclared = sorted(r for r, v in requests.items() if v and r not in covered)
        if undeclared and not self.ignore_undeclared:
            return (
                None,
                f"resources {undeclared} are not covered by ClusterQueue {queue['metadata']['name']}",
            )
        return assigned, ""

    def first_fitting(
        self,
        pod: Mapping[str, Any],
        queue: Mapping[str, Any],
        group: Mapping[str, Any],
        wanted: Mapping[str, Fraction],
    ) -> tuple[str | None, str]:
        reasons = []
        used = self.usage(queue["metadata"]["name"])
        for entry in group["flavors"]:
            flavor = self.api.get("ResourceFlavor", entry["name"])
            if flavor is None:
                reasons.append(f"flavor {entry['name']} not found")
                continue
            mismatch = _mismatch(pod, flavor)
            if mismatch:
                reasons.append(mismatch)
                continue
            quota = {
                r["name"]: charged(r["name"], kube.quantity(r["nominalQuota"]))
                for r in entry["resources"]
            }
            short = [
                why
                for r, amount in wanted.items()
                if (why := shortfall(entry["name"], r, amount, used, quota.get(r, Fraction(0))))
            ]
            if not short:
                return entry["name"], ""
            reasons += short
        return None, "couldn't assign flavors to pod set main: " + ", ".join(reasons)

    def ungate(self, pod: dict[str, Any], flavors: list[Any]) -> None:
        """Admitted: the gate goes, the flavor's node labels and tolerations come."""
        spec = pod["spec"]
        spec["schedulingGates"] = [g for g in spec.get("schedulingGates", []) if g["name"] != GATE]
        if not spec["schedulingGates"]:
            del spec["schedulingGates"]
        for flavor in flavors:
            spec.setdefault("nodeSelector", {}).update(flavor["spec"].get("nodeLabels") or {})
            for toleration in flavor["spec"].get("tolerations") or []:
                if toleration not in spec.setdefault("tolerations", []):
                    spec["tolerations"].append(copy.deepcopy(toleration))
        self.api.apply(pod)

    # --- workloads and queues ---------------------------------------------------------------

    def admitted(self, to_edit: bool = True) -> list[dict[str, Any]]:
        """The workloads that hold quota: admitted and not Finished (`HasActiveQuotaReservation`,
        pkg/workload/workload.go; the cache drops a Finished one, workload_controller.go).
        `to_edit=False`: the stored objects themselves, for a reader that only reads them."""
        return [
            w
            for w in (self.api.list if to_edit else self.api.peek_list)("Workload")
            if (w.get("status") or {}).get("admission") and not finished(w)
        ]

    def usage(self, queue: str) -> dict[tuple[str, str], Fraction]:
        used: dict[tuple[str, str], Fraction] = {}
        for workload in self.admitted(to_edit=False):
            admission = workload["status"]["admission"]
            if admission["clusterQueue"] != queue:
                continue
            for assignment in admission["podSetAssignments"]:
                for resource, amount in assignment["resourceUsage"].items():
                    key = (assignment["flavors"][resource], resource)
                    used[key] = used.get(key, 0) + charged(resource, kube.quantity(amount))
        return used

    def finish_workloads(self) -> None:
        """What the pod integration makes of a Workload as its Pod ends (pkg/controller/jobs/pod/
        pod_controller.go `Load` and `Finished`, pkg/controller/jobframework/reconciler.go
        `ReconcileGenericJob`):
        - the Pod is being deleted: `Load` answers "finalize" for a Pod with a deletionTimestamp,
          and `FinalizeOrphanedWorkload` (pkg/workload/workload.go; the FinishOrphanedWorkloads
          gate, beta and on since 0.18) marks its Workload Finished, `OwnerNotFound`, at once,
          however long the Pod then stays Terminating;
        - the Pod Succeeded or Failed: Finished, `Succeeded` or `Failed`, with the Pod's message;
        - the Pod is gone: the garbage collector deletes the Workload it owns.
        The same step takes off the Pod's `kueue.x-k8s.io/managed` finalizer, which this API
        server does not model: nothing here holds a Pod but its kubelet (nodelifecycle.py)."""
        for workload in self.api.list("Workload"):
            namespace = workload["metadata"]["namespace"]
            pod = self.api.get("Pod", _pod_name(workload), namespace)
            if pod is None:
                self.api.delete("Workload", workload["metadata"]["name"], namespace)
            elif not finished(workload) and (ending := pod_ending(pod)):
                kube.set_conditions(workload, kube.condition("Finished", "True", *ending))
                self.api.update_status(workload)

    def drain_stopped_queues(self) -> None:
        """`HoldAndDrain`: each admitted workload of the queue is evicted
        (pkg/controller/core/workload_controller.go `reconcileOnClusterQueueActiveState`)."""
        stopped = {
            q["metadata"]["name"]
            for q in self.api.list("ClusterQueue")
            if q["spec"].get("stopPolicy") == "HoldAndDrain"
        }
        for workload in self.admitted():
            if workload["status"]["admission"]["clusterQueue"] in stopped:
                self.evict(workload, CLUSTER_QUEUE_STOPPED, "The ClusterQueue is stopped")

    def evict(self, workload: dict[str, Any], reason: str, message: str) -> None:
        """pkg/workload/evict/evict.go `Evict`, then what the pod integration does with an
        evicted workload (reconciler.go, "handle eviction"): it stops the Pod, and, a lone Pod
        never counting as active (`IsActive`), clears the reservation at once."""
        namespace, name = workload["metadata"]["namespace"], workload["metadata"]["name"]
        kube.set_conditions(workload, kube.condition("Evicted", "True", reason, message))
        self.events.append(f"Workload {namespace}/{name} EvictedDueTo{reason}: {message}")
        pod = self.api.get("Pod", _pod_name(workload), namespace)
        if pod is not None:
            self.stop(pod, f"WorkloadEvictedDueTo{reason}", message)
        release_quota(workload, reason, message)
        self.api.update_status(workload)

    def stop(self, pod: dict[str, Any], reason: str, message: str) -> None:
        """The pod integration's `Stop` (pod_controller.go): a Pod being deleted already,
        finished, or still gated is left alone; any other gets the `TerminationTarget`
        condition and is deleted gracefully (a plain Delete): it stays, Terminating, until its
        kubelet confirms (nodelifecycle.py `collect`)."""
        phase = (pod.get("status") or {}).get("phase")
        if _deleting(pod) or phase in FINISHED_PHASES or GATE in _gates(pod):
            return
        kube.set_conditions(pod, kube.condition(TERMINATION_TARGET, "True", reason, message))
        pod = self.api.update_status(pod)
        pod["metadata"]["deletionTimestamp"] = graceful_deletion_time(pod)
        self.api.apply(pod)
        metadata = pod["metadata"]
        self.events.append(f"Pod {metadata['namespace']}/{metadata['name']} Stopped: {message}")

    def activate_queues(self) -> None:
        flavors = {f["metadata"]["name"] for f in self.api.list("ResourceFlavor")}
        for queue in self.api.list("ClusterQueue"):
            kube.set_conditions(queue, queue_active(queue, flavors))
            self.api.update_status(queue)
        active = {
            q["metadata"]["name"]: kube.condition_status(q, "Active") == "True"
            for q in self.api.list("ClusterQueue")
        }
        for local in self.api.list("LocalQueue"):
            kube.set_conditions(local, local_queue_active(local, active))
            self.api.update_status(local)

    def report_usage(self) -> None:
        for queue in self.api.list("ClusterQueue"):
            name = queue["metadata"]["name"]
            used = self.usage(name)
            admitted = sum(
                1
                for w in self.admitted(to_edit=False)
                if w["status"]["admission"]["clusterQueue"] == name
            )
            pending = sum(
                1
                for w in self.api.peek_list("Workload")  # only read
                if w["spec"]["queueName"] in self.local_queue_names(name)
                and not (w.get("status") or {}).get("admission")
                and not finished(w)
            )
            reservation = [
                {
                    "name": entry["name"],
                    "resources": [
                        {
                            "name": r,
                            "total": kube.format_quantity(used.get((entry["name"], r), 0)),
                            "borrowed": "0",
                        }
                        for r in group["coveredResources"]
                    ],
                }
                for group in queue["spec"].get("resourceGroups", [])
                for entry in group["flavors"]
            ]
            status = queue.setdefault("status", {})
            status |= {
                "admittedWorkloads": admitted,
                "reservingWorkloads": admitted,
                "pendingWorkloads": pending,
                "flavorsReservation": reservation,
                "flavorsUsage": copy.deepcopy(reservation),
            }
            self.api.update_status(queue)

    def local_queue_names(self, cluster_queue: str) -> set[str]:
        return {
            q["metadata"]["name"]
            for q in self.api.peek_list("LocalQueue")  # only read
            if q["spec"]["clusterQueue"] == cluster_queue
        }


def workload_name(pod: Mapping[str, Any]) -> str:
    return f"pod-{pod['metadata']['name']}"


def workload_of(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The Workload Kueue's pod integration makes for a Pod: one pod set, the Pod's template."""
    template = {k: v for k, v in pod["spec"].items() if k not in ("schedulingGates", "nodeName")}
    return {
        "apiVersion": API,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(pod),
            "namespace": pod["metadata"]["namespace"],
            "labels": {"kueue.x-k8s.io/pod-name": pod["metadata"]["name"]},
        },
        "spec": {
            "queueName": kube.labels_of(pod)[QUEUE_NAME],
            "podSets": [
                {"name": POD_SET, "count": 1, "template": {"spec": copy.deepcopy(template)}}
            ],
        },
    }


def queue_active(queue: Mapping[str, Any], flavors: set[str]) -> dict[str, str]:
    """A ClusterQueue's Active condition, as Kueue's cache words it (`inactiveReason`): the
    reasons in its order, the first one the condition's."""
    named = [
        f["name"] for g in queue["spec"].get("resourceGroups", []) for f in g.get("flavors", [])
    ]
    missing = [name for name in named if name not in flavors]
    found = []
    if queue["spec"].get("stopPolicy", "None") != "None":
        found.append(("Stopped", "is stopped"))
    if missing:
        found.append(
            ("FlavorNotFound", f"references missing ResourceFlavor(s): {','.join(missing)}")
        )
    if not found:
        return kube.condition("Active", "True", "Ready", "Can admit new workloads")
    message = f"Can't admit new workloads: {', '.join(m for _, m in found)}."
    return kube.condition("Active", "False", found[0][0], message)


def local_queue_active(local: Mapping[str, Any], active: Mapping[str, bool]) -> dict[str, str]:
    """A LocalQueue's Active condition, as Kueue's LocalQueue controller words it."""
    cluster_queue = local["spec"]["clusterQueue"]
    if cluster_queue not in active:
        return kube.condition(
            "Active",
            "False",
            "ClusterQueueDoesNotExist",
            "Can't submit new workloads to clusterQueue",
        )
    if not active[cluster_queue]:
        return kube.condition(
            "Active",
            "False",
            "ClusterQueueIsInactive",
            "Can't submit new workloads to clusterQueue",
        )
    return kube.condition("Active", "True", "Ready", "Can submit new workloads to localQueue")


def shortfall(
    flavor: str,
    resource: str,
    amount: Fraction,
    used: Mapping[tuple[str, str], Fraction],
    quota: Fraction,
) -> str:
    """Why the flavor's quota does not hold the request, as Kueue's flavor assigner words it
    (`fitsResourceQuota`; a queue without a cohort can borrow nothing), or "" when it does."""
    available = quota - used.get((flavor, resource), Fraction(0))
    if amount > quota:
        return (
            f"insufficient quota for {resource} in flavor {flavor}, previously considered podsets"
            f" requests (0) + current podset request ({kube.format_quantity(amount)}) > maximum"
            f" capacity ({kube.format_quantity(quota)})"
        )
    if amount > available:
        return (
            f"insufficient unused quota for {resource} in flavor {flavor}, "
            f"{kube.format_quantity(amount - available)} more needed"
        )
    return ""


def charged(resource: str, amount: Fraction) -> Fraction:
    """What Kueue counts of an amount (`resources.ResourceValue`): CPU in millicores, anything
    else in whole units, each rounded up."""
    unit = Fraction(1, 1000) if resource == "cpu" else Fraction(1)
    return math.ceil(amount / unit) * unit


def resource_requests(requests: Mapping[str, Fraction]) -> list[dict[str, Any]]:
    """`status.resourceRequests`: what Kueue counts for the pod set, after transformations."""
    resources = {r: kube.format_quantity(v) for r, v in sorted(requests.items()) if v}
    return [{"name": POD_SET, "resources": resources}]


def clear_unadmitted(workload: dict[str, Any]) -> None:
    """Once a DRA Workload's claims are counted, the workload controller drops the False
    QuotaReserved and Requeued conditions an earlier attempt left."""
    conditions = (workload.get("status") or {}).get("conditions") or []
    kept = [
        c
        for c in conditions
        if not (c["type"] in ("QuotaReserved", "Requeued") and c["status"] == "False")
    ]
    if len(kept) < len(conditions):
        workload["status"]["conditions"] = kept


def finished(workload: Mapping[str, Any]) -> bool:
    return kube.condition_status(workload, "Finished") == "True"


def pod_ending(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The reason and message Kueue finishes a Pod's Workload with, or None while it runs:
    being deleted comes first (`Load` finalizes before `Finished` is asked)."""
    if _deleting(pod):
        # kueue.WorkloadFinishedReasonOwnerNotFound, FinalizeOrphanedWorkload's message
        return "OwnerNotFound", "The workload's owner no longer exists"
    status = pod.get("status") or {}
    if status.get("phase") in FINISHED_PHASES:
        return status["phase"], status.get("message", "")
    return None


def release_quota(workload: dict[str, Any], reason: str, message: str) -> None:
    """The reservation of an evicted workload cleared (`UnsetQuotaReservationWithCondition`,
    pkg/workload/workload.go, with Kueue 0.19's default gates): not requeued, since only a
    preemption or a node failure requeues it."""
    workload["status"].pop("admission", None)
    kube.set_conditions(
        workload,
        kube.condition("Requeued", "False", reason, message),
        kube.condition("QuotaReserved", "False", "Pending", message),
        kube.condition("Admitted", "False", "NoReservation", "The workload has no reservation"),
    )


def graceful_deletion_time(pod: Mapping[str, Any]) -> str:
    """The `deletionTimestamp` a graceful delete gives: now plus the Pod's grace period. Kueue
    keeps no clock here; "now" is the time every condition it writes carries."""
    grace = pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    moment = EPOCH + datetime.timedelta(seconds=grace)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _deleting(pod: Mapping[str, Any]) -> bool:
    return "deletionTimestamp" in pod["metadata"]


def _pod_name(workload: Mapping[str, Any]) -> str:
    return workload["metadata"]["labels"]["kueue.x-k8s.io/pod-name"]


def _gates(pod: Mapping[str, Any]) -> list[str]:
    return [g["name"] for g in (pod.get("spec") or {}).get("schedulingGates") or []]


def _mismatch(pod: Mapping[str, Any], flavor: Mapping[str, Any]) -> str:
    """Why the Pod cannot take this flavor (its taints, its node labels); "" when it can."""
    spec = flavor["spec"]
    name = flavor["metadata"]["name"]
    tolerations = [*(pod["spec"].get("tolerations") or []), *(spec.get("tolerations") or [])]
    untolerated = kube.untolerated(tolerations, spec.get("nodeTaints") or [])
    if untolerated:
        return f"untolerated taint {untolerated[0]} in flavor {name}"
    labels = spec.get("nodeLabels") or {}
    if not kube.selects(pod["spec"], labels, keys=labels):
        return f"flavor {name} doesn't match node affinity"
    return ""


@functools.cache
def _configuration(path: Path, modified: int) -> dict[str, Any]:
    """A Kueue Configuration, read again only when the file changes."""
    return (documents.shipped(path) or [{}])[0]


def admit_cluster_queue(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
    """Kueue's ClusterQueue webhook (`validateResourceGroups`), on create and update: each
    resource is covered, and each flavor listed, by one resource group only. Its errors are
    aggregated as Kubernetes aggregates field errors: one alone, several in brackets."""
    errors: list[str] = []
    resources: set[str] = set()
    flavors: set[str] = set()
    for i, group in enumerate((new.get("spec") or {}).get("resourceGroups") or []):
        for j, resource in enumerate(group.get("coveredResources") or []):
            if resource in resources:
                errors.append(
                    f'spec.resourceGroups[{i}].coveredResources[{j}]: Duplicate value: "{resource}"'
                )
            resources.add(resource)
        for j, flavor in enumerate(group.get("flavors") or []):
            if flavor.get("name") in flavors:
                errors.append(
                    f'spec.resourceGroups[{i}].flavors[{j}].name: Duplicate value: "{flavor.get("name")}"'
                )
            flavors.add(flavor.get("name"))
    if not errors:
        return None
    return errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
