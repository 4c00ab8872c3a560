"""KubeVirt's part: a VMI runs in a virt-launcher Pod that the scheduler places like any other.

The launcher asks for each GPU's `deviceName` as an extended resource (KubeVirt's device plugins
advertise them on the node), carries the VMI's node selector and tolerations, and is placed by
the scheduler; the VMI is Scheduling until its launcher runs, then Running and Ready. A
launcher goes with its VMI.

A VMI has one launcher in its life (KubeVirt's VMI lifecycle): once its launcher has run, losing
it — evicted, deleted, its node gone — or the launcher failing ends the VMI in phase Failed, and
a VMI in a final phase (Failed, Succeeded) is never started again: whoever owns it makes a new
one.
"""

from __future__ import annotations

from typing import Any

from functions.simulate import kube
from functions.simulate.client import Client

LAUNCHER_LABEL = {"kubevirt.io": "virt-launcher"}
CREATED_BY = "kubevirt.io/created-by"


class KubeVirt:
    def __init__(self, api: Client):
        self.api = api

    def run(self) -> None:
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
    for field in ("nodeSelector", "tolerations", "affinity"):
        if field in spec:
            pod_spec[field] = spec[field]
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
