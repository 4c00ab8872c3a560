"""KubeVirt's part: a VMI runs in a virt-launcher Pod that the scheduler places like any other.

The launcher asks for each GPU's `deviceName` as an extended resource (KubeVirt's device plugins
advertise them on the node), carries the VMI's node selector and tolerations, and is placed by
the scheduler; the VMI is Scheduling until its launcher runs, then Running and Ready. A
launcher goes with its VMI.

virt-handler, KubeVirt's DaemonSet, runs on every node its placement admits — the KubeVirt CR's
`spec.workloads.nodePlacement` (nodeSelector, affinity, tolerations) beside the tolerations the
DaemonSet controller gives every daemon Pod — and its heartbeat labels the node
`kubevirt.io/schedulable: "true"`; virt-controller sets it "false" when the heartbeat stops (the
node is not Ready). KubeVirt puts `kubevirt.io/schedulable: "true"` in every launcher's
nodeSelector, so a VMI runs only where virt-handler does. Without a KubeVirt CR nothing is
installed, and no node is labelled.

A VMI has one launcher in its life (KubeVirt's VMI lifecycle): once its launcher has run, losing
it — evicted, deleted, its node gone — or the launcher failing ends the VMI in phase Failed, and
a VMI in a final phase (Failed, Succeeded) is never started again: whoever owns it makes a new
one.

virt-api's VMI update admitter (the webhook `virtualmachineinstances-update-validator.kubevirt.io`)
refuses any update that changes an existing VMI's spec, started or not — only KubeVirt's own
service account may, for volume hotplug, which nothing here does. Labels, annotations and the
status subresource stay writable. A VMI with another spec is a new VMI: delete, then create.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from functions.core import quantity
from functions.simulate import kube
from functions.simulate.apiserver import Webhook
from functions.simulate.client import Client
from functions.simulate.validation import json_equal

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
            if phase_of(vmi) in FINAL:
                continue
            launcher = self.api.get("Pod", launcher_name(name), namespace)
            ended = launcher_ended(vmi, launcher)
            if ended is not None:
                self.end(vmi, *ended)
                continue
            if launcher is None:
                self.api.apply(launcher_of(vmi))
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

    def end(self, vmi: dict[str, Any], phase: str, message: str) -> None:
        vmi["status"] = {
            **(vmi.get("status") or {}),
            "phase": phase,
            "conditions": [kube.condition("Ready", "False", "PodTerminating", message)],
        }
        self.api.update_status(vmi)

    def report(self, vmi: dict[str, Any], launcher: dict[str, Any] | None) -> None:
        if launcher is not None and (launcher.get("status") or {}).get("phase") == "Running":
            node = launcher["spec"]["nodeName"]
            status = {
                "phase": "Running",
                "nodeName": node,
                "conditions": [kube.condition("Ready", "True")],
                "interfaces": [
                    {"ipAddress": ((launcher["status"].get("podIPs") or [{}])[0]).get("ip", "")}
                ],
            }
        else:
            message = kube_message(launcher)
            status = {
                "phase": "Scheduling",
                "conditions": [kube.condition("Ready", "False", "Unschedulable", message)],
            }
        if vmi.get("status") != status:
            vmi["status"] = status
            self.api.update_status(vmi)


FINAL = ("Failed", "Succeeded")


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
            return quantity.parse(a) == quantity.parse(b)
        except quantity.QuantityError:
            return False
    return json_equal(a, b)


def phase_of(vmi: dict[str, Any]) -> str:
    return str((vmi.get("status") or {}).get("phase") or "")


def launcher_ended(vmi: dict[str, Any], launcher: dict[str, Any] | None) -> tuple[str, str] | None:
    """The VMI's final phase and why, once its launcher is gone after it ran or has ended."""
    status = vmi.get("status") or {}
    ran = status.get("phase") in ("Scheduled", "Running") or bool(status.get("nodeName"))
    if launcher is None:
        return ("Failed", "the virt-launcher Pod is gone") if ran else None
    phase = (launcher.get("status") or {}).get("phase")
    if phase in FINAL:
        return str(phase), f"the virt-launcher Pod ended in phase {phase}"
    return None


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


def kube_message(launcher: dict[str, Any] | None) -> str:
    if launcher is None:
        return "creating the virt-launcher Pod"
    for condition in (launcher.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("message", "")
    return "waiting for the virt-launcher Pod"
