"""KubeVirt's part: a VMI runs in a virt-launcher Pod that the scheduler places like any other.

The launcher asks for each GPU's `deviceName` as an extended resource (KubeVirt's device plugins
advertise them on the node), carries the VMI's node selector and tolerations, and is placed by
the scheduler. A launcher goes with its VMI.

A VMI's status is what KubeVirt v1.9.0 writes:

- virt-api's mutating webhook makes a new VMI `Pending` (pkg/virt-api/webhooks/mutating-webhook/
  mutators/vmi-mutator.go); the simulated API server runs no mutating webhook, so an unset phase
  reads as Pending, as virt-controller's `IsUnprocessed` reads it.
- virt-controller (pkg/virt-controller/watch/vmi/lifecycle.go, `sync` then `updateStatus`)
  creates a Pending VMI's launcher and, in the same pass, makes it `Scheduling`. While
  Scheduling it copies the launcher's `PodScheduled=False` condition (reason `Unschedulable`, the
  scheduler's message) onto the VMI as a condition of type `PodScheduled` — added once, never
  rewritten while it stays (pkg/controller/conditions.go, `AddPodCondition`) — and removes it
  once the launcher is placed; once the launcher runs the VMI is `Scheduled` on its node. A
  Scheduling VMI whose launcher is gone or going down is `Failed`; so is a Scheduled or Running
  one whose launcher is gone.
- Every pass writes the VMI's `Ready` condition from the launcher (`syncReadyConditionFromPod`):
  False while the guest is not running, whatever the scheduler says, and the launcher's own
  Ready condition once the VMI is Running.
- virt-handler (pkg/virt-handler/vm.go, `calculateVmPhaseForStatusReason`) makes a Scheduled
  VMI `Running` once its domain runs, here once its launcher does, and ends a Scheduled or
  Running VMI whose launcher ended (the domain is gone).

So a VMI that no node can take stays Scheduling with `Ready=False` (`GuestNotRunning`), and the
scheduler's reason is only in its `PodScheduled` condition.

virt-handler, KubeVirt's DaemonSet, runs on every node its placement admits — the KubeVirt CR's
`spec.workloads.nodePlacement` (nodeSelector, affinity, tolerations) beside the tolerations the
DaemonSet controller gives every daemon Pod — and its heartbeat labels the node
`kubevirt.io/schedulable: "true"`; virt-controller sets it "false" when the heartbeat stops (the
node is not Ready). KubeVirt puts `kubevirt.io/schedulable: "true"` in every launcher's
nodeSelector, so a VMI runs only where virt-handler does. Without a KubeVirt CR nothing is
installed, and no node is labelled.

A VMI has one launcher in its life: virt-controller creates it only for a Pending VMI, and a
VMI in a final phase (Failed, Succeeded) is never started again: whoever owns it makes a new
one.

virt-api's VMI update admitter (the webhook `virtualmachineinstances-update-validator.kubevirt.io`)
refuses any update that changes an existing VMI's spec, started or not — only KubeVirt's own
service account may, for volume hotplug, which nothing here does. Labels, annotations and the
status subresource stay writable. A VMI with another spec is a new VMI: delete, then create.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpustack_sim import kube
from gpustack_sim.apiserver import Webhook
from gpustack_sim.client import Client
from gpustack_sim.validation import json_equal

LAUNCHER_LABEL = {"kubevirt.io": "virt-launcher"}
SCHEDULABLE = "kubevirt.io/schedulable"  # virt-handler's heartbeat label (KubeVirt's v1 API)
# What the DaemonSet controller adds to every daemon Pod (Kubernetes' DaemonSet docs, "Taints
# and tolerations"), and the toleration virt-handler's own DaemonSet carries.
DAEMON_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "CriticalAddonsOnly", "operator": "Exists"},
)
CREATED_BY = "kubevirt.io/created-by"
VMI_UPDATE_VALIDATOR = "virtualmachineinstances-update-validator.kubevirt.io"
VMI_UPDATE_RESTRICTED = "update of VMI object is restricted"  # virt-api's words


class KubeVirt:
    def __init__(self, api: Client):
        self.api = api
        # virt-api registers its webhooks when KubeVirt is installed, before any VMI exists
        api.api.webhooks.append(
            Webhook(VMI_UPDATE_VALIDATOR, "VirtualMachineInstance", admit_vmi_update)
        )

    def run(self) -> None:
        self.heartbeat()
        vmis = {
            (v["metadata"]["namespace"], v["metadata"]["name"]): v
            for v in self.api.list("VirtualMachineInstance")
        }
        for pod in self.api.list("Pod"):
            owner = (pod["metadata"].get("annotations") or {}).get(CREATED_BY)
            if owner and (pod["metadata"]["namespace"], owner) not in vmis:
                self.api.delete("Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])
        for (namespace, name), vmi in sorted(vmis.items()):
            launcher = self.api.get("Pod", launcher_name(name), namespace)
            if launcher is None and phase_of(vmi) in UNPROCESSED:
                launcher = self.api.apply(launcher_of(vmi))  # virt-controller's `sync`
            self.report(vmi, launcher)

    def heartbeat(self) -> None:
        """virt-handler's label on each node, and virt-controller's once its heartbeat stops."""
        installed = self.api.list("KubeVirt")
        if not installed:
            return
        workloads = (installed[0].get("spec") or {}).get("workloads") or {}
        placement = workloads.get("nodePlacement") or {}
        for node in self.api.list("Node"):
            current = kube.labels_of(node).get(SCHEDULABLE)
            wanted = schedulable(node, placement, current)
            if wanted != current:
                patch = {"metadata": {"labels": {SCHEDULABLE: wanted}}}
                self.api.merge_patch("Node", node["metadata"]["name"], patch)

    def report(self, vmi: dict[str, Any], launcher: dict[str, Any] | None) -> None:
        """virt-controller's pass over the VMI, then virt-handler's, written once."""
        status = handler_status(controller_status(vmi.get("status") or {}, launcher), launcher)
        if vmi.get("status") != status:
            vmi["status"] = status
            self.api.update_status(vmi)


def handler_runs_on(node: Mapping[str, Any], placement: Mapping[str, Any]) -> bool:
    """Does virt-handler's DaemonSet place a Pod on this node?"""
    selection = {key: placement[key] for key in ("nodeSelector", "affinity") if key in placement}
    if not kube.selects(selection, kube.labels_of(node)):
        return False
    tolerations = [*DAEMON_TOLERATIONS, *(placement.get("tolerations") or [])]
    return not kube.untolerated(tolerations, (node.get("spec") or {}).get("taints") or [])


def schedulable(
    node: Mapping[str, Any], placement: Mapping[str, Any], current: str | None
) -> str | None:
    """The label's value: "true" while virt-handler runs there and the node is Ready; "false"
    once its heartbeat stops (or virt-handler no longer runs there); absent where it never ran."""
    runs = handler_runs_on(node, placement)
    if runs and kube.condition_status(node, "Ready") == "True":
        return "true"
    return "false" if runs or current is not None else None


def admit_vmi_update(new: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
    """virt-api's VMI update admitter: the spec is compared whole (semantic equality)."""
    if old is None or semantic_equal(new.get("spec"), old.get("spec")):
        return None
    return VMI_UPDATE_RESTRICTED


def semantic_equal(a: Any, b: Any) -> bool:
    """apimachinery's `equality.Semantic`: JSON equality, but quantities by value (`1024Mi` is
    `1Gi`, the form KubeVirt stores)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(semantic_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(semantic_equal, a, b))
    if isinstance(a, str) and isinstance(b, str) and a != b:
        try:
            return kube.quantity(a) == kube.quantity(b)
        except ValueError:
            return False
    return json_equal(a, b)


def phase_of(vmi: dict[str, Any]) -> str:
    return str((vmi.get("status") or {}).get("phase") or "")


def launcher_name(vmi: str) -> str:
    return f"virt-launcher-{vmi}"


def launcher_of(vmi: dict[str, Any]) -> dict[str, Any]:
    spec = vmi["spec"]
    wanted: dict[str, int] = {}
    for gpu in spec["domain"]["devices"].get("gpus") or []:
        wanted[gpu["deviceName"]] = wanted.get(gpu["deviceName"], 0) + 1
    limits = {resource: str(count) for resource, count in sorted(wanted.items())}
    pod_spec: dict[str, Any] = {
        "containers": [
            {
                "name": "compute",
                "image": "quay.io/kubevirt/virt-launcher:v1.9.0",
                "resources": {"requests": limits, "limits": limits},
            }
        ]
    }
    for field in ("tolerations", "affinity"):
        if field in spec:
            pod_spec[field] = spec[field]
    pod_spec["nodeSelector"] = {SCHEDULABLE: "true", **(spec.get("nodeSelector") or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": launcher_name(vmi["metadata"]["name"]),
            "namespace": vmi["metadata"]["namespace"],
            "labels": dict(LAUNCHER_LABEL),
            "annotations": {CREATED_BY: vmi["metadata"]["name"]},
        },
        "spec": pod_spec,
    }


# --- the VMI's status, as virt-controller and virt-handler write it ------------------------------

UNPROCESSED = ("", "Pending")  # the v1 API's `IsUnprocessed` (staging/.../core/v1/types.go)
FINAL = ("Failed", "Succeeded")  # `IsFinal`
# The Ready condition's reason and message while the guest cannot be ready (lifecycle.go,
# `syncReadyConditionFromPod`; the reasons are the v1 API's `PodNotExistsReason`, …).
NO_LAUNCHER = ("PodNotExists", "virt-launcher pod has not yet been scheduled")
LAUNCHER_DOWN = ("PodTerminating", "virt-launcher pod is terminating")
GUEST_NOT_RUNNING = ("GuestNotRunning", "Guest VM is not reported as running")
NO_POD_READY = ("PodConditionMissing", "virt-launcher pod is missing the Ready condition")
# The fields of the v1 API's VirtualMachineInstanceCondition, what a copied Pod condition keeps.
CONDITION_FIELDS = ("type", "status", "reason", "message", "lastProbeTime", "lastTransitionTime")


def controller_status(status: Mapping[str, Any], launcher: dict[str, Any] | None) -> dict:
    """virt-controller's `updateStatus` (lifecycle.go): the Ready condition from the launcher,
    then the phase the launcher allows. An unprocessed VMI whose launcher was just created is
    Scheduling at once; the PodScheduled condition is copied from the next pass on, as KubeVirt
    copies it only in the `IsScheduling` case."""
    phase = str(status.get("phase") or "")
    ready = ready_condition(phase, launcher)
    status = {**status, "conditions": updated(conditions_of(status), ready)}
    if phase in UNPROCESSED:
        return {**status, "phase": "Scheduling" if launcher is not None else "Pending"}
    if phase == "Scheduling":
        return scheduling(status, launcher)
    if phase in ("Scheduled", "Running") and launcher is None:
        return {**status, "phase": "Failed"}
    return status


def scheduling(status: dict[str, Any], launcher: dict[str, Any] | None) -> dict:
    """A Scheduling VMI (`updateStatus`, its `IsScheduling` case): the launcher's
    PodScheduled=False condition copied, or dropped once it no longer holds; Scheduled on the
    launcher's node once the launcher runs; Failed when it is gone or going down."""
    if launcher is None:
        return {**status, "phase": "Failed"}
    unplaced = pod_condition(launcher, "PodScheduled")
    if unplaced is not None and unplaced.get("status") == "False":
        conditions = added(status["conditions"], unplaced)
    else:
        conditions = removed(status["conditions"], "PodScheduled")
    status = {**status, "conditions": conditions}
    if launcher_ready(launcher):
        return {**status, "phase": "Scheduled", "nodeName": launcher["spec"]["nodeName"]}
    if launcher_down(launcher):
        return {**status, "phase": "Failed"}
    return status


def ready_condition(phase: str, launcher: dict[str, Any] | None) -> dict[str, Any]:
    """`syncReadyConditionFromPod` (lifecycle.go): False with why the guest cannot be ready —
    never the scheduler's reason — until the VMI is Running; then the launcher's own Ready."""
    if launcher is None:
        return kube.condition("Ready", "False", *NO_LAUNCHER)
    if launcher_down(launcher):
        return kube.condition("Ready", "False", *LAUNCHER_DOWN)
    if phase != "Running":
        return kube.condition("Ready", "False", *GUEST_NOT_RUNNING)
    ready = pod_condition(launcher, "Ready")
    if ready is None:
        return kube.condition("Ready", "False", *NO_POD_READY)
    return as_vmi_condition(ready)


def handler_status(status: dict[str, Any], launcher: dict[str, Any] | None) -> dict:
    """virt-handler on the launcher's node (pkg/virt-handler/vm.go,
    `calculateVmPhaseForStatusReason`): a Scheduled VMI is Running once its domain runs — here,
    once its launcher does — with the launcher's address on its interface. A Scheduled or
    Running VMI whose launcher ended has lost its domain: Failed, or Succeeded where the
    launcher succeeded (the guest shut down)."""
    phase = status.get("phase")
    if phase not in ("Scheduled", "Running") or launcher is None:
        return status
    launcher_phase = (launcher.get("status") or {}).get("phase")
    if launcher_phase in FINAL:
        return {**status, "phase": launcher_phase}
    if phase == "Scheduled" and launcher_phase == "Running":
        return {**status, "phase": "Running", "interfaces": [{"ipAddress": pod_ip(launcher)}]}
    return status


def launcher_ready(launcher: Mapping[str, Any]) -> bool:
    """pkg/controller/controller.go's `IsPodReady`: Running and not going down, its compute
    container started (its readiness is the guest's, which comes later) and the others ready."""
    if launcher_down(launcher):
        return False
    status = launcher.get("status") or {}
    for container in status.get("containerStatuses") or []:
        if container.get("name") in ("compute", "istio-proxy"):
            if (container.get("state") or {}).get("running") is None:
                return False
        elif not container.get("ready"):
            return False
    return status.get("phase") == "Running"


def launcher_down(launcher: Mapping[str, Any]) -> bool:
    """`IsPodDownOrGoingDown` (controller.go): ended, its compute container terminated, or being
    deleted."""
    status = launcher.get("status") or {}
    compute = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == "compute"), {}
    )
    return (
        status.get("phase") in FINAL
        or (compute.get("state") or {}).get("terminated") is not None
        or "deletionTimestamp" in (launcher.get("metadata") or {})
    )


def pod_ip(launcher: Mapping[str, Any]) -> str:
    return str(((launcher["status"].get("podIPs") or [{}])[0]).get("ip", ""))


def pod_condition(pod: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == type_), None)


def as_vmi_condition(condition: Mapping[str, Any]) -> dict[str, Any]:
    return {key: condition[key] for key in CONDITION_FIELDS if key in condition}


def conditions_of(status: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(status.get("conditions") or [])


# pkg/controller/conditions.go's VirtualMachineInstanceConditionManager


def updated(conditions: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    """`UpdateCondition`: a condition of that type is replaced only when its status or reason
    changes (its message stays otherwise); else the new one is appended."""
    for index, old in enumerate(conditions):
        if old.get("type") != new["type"]:
            continue
        if (old.get("status"), old.get("reason")) == (new.get("status"), new.get("reason")):
            return conditions
        return [*conditions[:index], new, *conditions[index + 1 :]]
    return [*conditions, new]


def added(conditions: list[dict[str, Any]], pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """`AddPodCondition`: the Pod's condition appended unless the VMI has one of its type — so
    a later message of the scheduler does not replace the first one copied."""
    if any(c.get("type") == pod.get("type") for c in conditions):
        return conditions
    return [*conditions, as_vmi_condition(pod)]


def removed(conditions: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    """`RemoveCondition`."""
    return [c for c in conditions if c.get("type") != type_]
