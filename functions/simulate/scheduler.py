"""kube-scheduler's part: bind each ungated Pod to a node that can take it, or say why none can.

A node takes a Pod when, in the order of kube-scheduler's filter plugins: it is not cordoned,
or the Pod tolerates the cordon's taint (NodeUnschedulable); the Pod tolerates its NoSchedule
and NoExecute taints (TaintToleration); the Pod's nodeSelector and required node affinity
accept its labels (NodeAffinity); and its allocatable — what the kubelet and the device plugins
advertise — still holds the Pod's requests beside those of the Pods already bound there
(NodeResourcesFit). The first filter a node fails is its reason. kube-scheduler never reads a
node's Ready condition: a NotReady or unreachable node keeps Pods off by the taints the node
lifecycle puts on it, which a Pod tolerating every taint tolerates too. Nodes are tried by
name; the message of an unschedulable Pod counts the reasons as kube-scheduler's does. Where the cluster runs HAMi,
its scheduler extender also filters the nodes for the Pods that ask for vGPUs, judges the
resources it manages itself (kube-scheduler ignores them), and writes its choice on the Pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from functions.simulate import kube
from functions.simulate.client import Client
from functions.simulate.hami import HamiScheduler

# What a cordoned node is tainted with (the node lifecycle's TaintNodesByCondition); a Pod that
# tolerates it may be placed on the node (NodeUnschedulable).
CORDONED = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


class Scheduler:
    def __init__(self, api: Client):
        self.api = api
        self.extenders = {"hami": HamiScheduler(api)}  # by the device plugin they come with

    def run(self) -> None:
        nodes = self.api.list("Node")
        for pod in self.api.list("Pod"):
            spec = pod["spec"]
            if spec.get("nodeName") or spec.get("schedulingGates") or _deleting(pod):
                continue
            self.schedule(pod, nodes)

    def schedule(self, pod: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
        reasons: Counter[str] = Counter()
        requests = kube.pod_requests(pod["spec"])
        extender = self.extenders.get(kube.device_plugin(self.api))
        if extender is not None and any(extender.asks(pod)):
            requests = {k: v for k, v in requests.items() if k not in extender.managed}
        else:
            extender = None
        for node in nodes:
            why = self.unfit(pod, requests, node)
            chosen = extender.choose(pod, node) if extender and why is None else None
            if isinstance(chosen, str):
                why = chosen
            if why is None:
                if extender is not None and chosen is not None:
                    extender.bind(pod, chosen)
                pod["spec"]["nodeName"] = node["metadata"]["name"]
                pod = self.api.apply(pod)
                kube.set_conditions(pod, kube.condition("PodScheduled", "True"))
                self.api.update_status(pod)
                return
            reasons[why] += 1
        detail = ", ".join(f"{count} {why}" for why, count in sorted(reasons.items()))
        message = (
            f"0/{len(nodes)} nodes are available: {detail}."
            if nodes
            else "no nodes available to schedule pods"
        )
        kube.set_conditions(pod, kube.condition("PodScheduled", "False", "Unschedulable", message))
        pod.setdefault("status", {})["phase"] = "Pending"
        self.api.update_status(pod)

    def unfit(
        self, pod: Mapping[str, Any], requests: Mapping[str, Fraction], node: Mapping[str, Any]
    ) -> str | None:
        """Why this node cannot take the Pod, worded as kube-scheduler words it; None if it can."""
        spec = node.get("spec") or {}
        tolerations = pod["spec"].get("tolerations") or []
        if spec.get("unschedulable") and not any(kube.tolerates(t, CORDONED) for t in tolerations):
            return "node(s) were unschedulable"
        taints = kube.untolerated(tolerations, spec.get("taints") or [])
        if taints:
            return f"node(s) had untolerated taint {{{taints[0]['key']}: {taints[0].get('value', '')}}}"
        if not kube.selects(pod["spec"], kube.labels_of(node)):
            return "node(s) didn't match Pod's node affinity/selector"
        free = self.free(node)
        for name, amount in sorted(requests.items()):
            if amount > free.get(name, Fraction(0)):
                return f"Insufficient {name}"
        return None

    def free(self, node: Mapping[str, Any]) -> dict[str, Fraction]:
        """The node's allocatable less what the Pods bound to it request."""
        allocatable = {
            name: kube.quantity(value)
            for name, value in ((node.get("status") or {}).get("allocatable") or {}).items()
        }
        for pod in self.api.list("Pod"):
            if pod["spec"].get("nodeName") == node["metadata"]["name"] and kube.running(pod):
                for name, amount in kube.pod_requests(pod["spec"]).items():
                    allocatable[name] = allocatable.get(name, Fraction(0)) - amount
        return allocatable


def _deleting(obj: Mapping[str, Any]) -> bool:
    return "deletionTimestamp" in (obj.get("metadata") or {})
