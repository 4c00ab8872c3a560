"""kube-scheduler's part: bind each ungated Pod to a node that can take it, or say why none can.

A node takes a Pod when, in the order of kube-scheduler's filter plugins: it is not cordoned,
or the Pod tolerates the cordon's taint (NodeUnschedulable); the Pod tolerates its NoSchedule
and NoExecute taints (TaintToleration); the Pod's nodeSelector and required node affinity
accept its labels (NodeAffinity); and its allocatable — what the kubelet and the device plugins
advertise — still holds the Pod's requests beside those of the Pods already bound there
(NodeResourcesFit). The first filter a node fails is its reason. kube-scheduler never reads a
node's Ready condition: a NotReady or unreachable node keeps Pods off by the taints the node
lifecycle puts on it, which a Pod tolerating every taint tolerates too. Nodes are tried by
name. An unschedulable Pod's message is kube-scheduler's FitError: each reason counted over
the nodes, then what preemption found (`fit_error`). Where the cluster runs HAMi,
its scheduler extender also filters the nodes for the Pods that ask for vGPUs, judges the
resources it manages itself (kube-scheduler ignores them), and writes its choice on the Pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpustack_sim import kube
from gpustack_sim.client import Client
from gpustack_sim.hami import HamiScheduler

# What a cordoned node is tainted with (the node lifecycle's TaintNodesByCondition); a Pod that
# tolerates it may be placed on the node (NodeUnschedulable).
CORDONED = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


class Scheduler:
    def __init__(self, api: Client):
        self.api = api
        hami = HamiScheduler(api)
        api.api.webhooks.append(hami.webhook())
        self.extenders = {"hami": hami}  # by the device plugin they come with

    def run(self) -> None:
        nodes = self.api.list("Node")
        for pod in self.api.list("Pod"):
            spec = pod["spec"]
            if spec.get("nodeName") or spec.get("schedulingGates") or _deleting(pod):
                continue
            self.schedule(pod, nodes)

    def schedule(self, pod: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
        requests = kube.pod_requests(pod["spec"])
        extender = self.extenders.get(kube.device_plugin(self.api))
        if extender is not None and any(extender.asks(pod)):
            requests = {k: v for k, v in requests.items() if k not in extender.managed}
        else:
            extender = None
        unfits: list[Unfit] = []
        for node in nodes:
            why = self.unfit(pod, requests, node)
            chosen = extender.choose(pod, node) if extender and why is None else None
            if isinstance(chosen, str):
                why = Unfit((chosen,), resolvable=True)
            if why is None:
                if extender is not None and chosen is not None:
                    extender.bind(pod, chosen)  # its annotations, before the binding
                    pod = self.api.apply(pod)
                metadata = pod["metadata"]
                pod = self.api.bind(
                    metadata["name"], metadata["namespace"], node["metadata"]["name"]
                )
                kube.set_conditions(pod, kube.condition("PodScheduled", "True"))
                self.api.update_status(pod)
                return
            unfits.append(why)
        message = fit_error(len(nodes), unfits) if nodes else "no nodes available to schedule pods"
        kube.set_conditions(pod, kube.condition("PodScheduled", "False", "Unschedulable", message))
        pod.setdefault("status", {})["phase"] = "Pending"
        self.api.update_status(pod)

    def unfit(
        self, pod: Mapping[str, Any], requests: Mapping[str, Fraction], node: Mapping[str, Any]
    ) -> Unfit | None:
        """Why this node cannot take the Pod, worded as kube-scheduler words it; None if it can."""
        spec = node.get("spec") or {}
        tolerations = pod["spec"].get("tolerations") or []
        if spec.get("unschedulable") and not any(kube.tolerates(t, CORDONED) for t in tolerations):
            return Unfit(("node(s) were unschedulable",))
        taints = kube.untolerated(tolerations, spec.get("taints") or [])
        if taints:
            taint = taints[0]
            return Unfit(
                (f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}",)
            )
        if not kube.selects(pod["spec"], kube.labels_of(node)):
            return Unfit(("node(s) didn't match Pod's node affinity/selector",))
        short = self.insufficient(requests, node)
        return Unfit(short, resolvable=True) if short else None

    def insufficient(
        self, requests: Mapping[str, Fraction], node: Mapping[str, Any]
    ) -> tuple[str, ...]:
        """NodeResourcesFit: every resource the node's allocatable no longer holds, and the
        Pod count it allows."""
        free = self.free(node)
        found = ["Too many pods"] if free.get("pods", Fraction(1)) < 1 else []
        found += [
            f"Insufficient {name}"
            for name, amount in sorted(requests.items())
            if amount > free.get(name, Fraction(0))
        ]
        return tuple(found)

    def free(self, node: Mapping[str, Any]) -> dict[str, Fraction]:
        """The node's allocatable less what the Pods bound to it request (and one Pod slot
        each, where the node says how many it takes)."""
        allocatable = {
            name: kube.quantity(value)
            for name, value in ((node.get("status") or {}).get("allocatable") or {}).items()
        }
        for pod in self.api.list("Pod"):
            if pod["spec"].get("nodeName") == node["metadata"]["name"] and kube.running(pod):
                for name, amount in kube.pod_requests(pod["spec"]).items():
                    allocatable[name] = allocatable.get(name, Fraction(0)) - amount
                if "pods" in allocatable:
                    allocatable["pods"] -= 1
        return allocatable


@dataclass(frozen=True)
class Unfit:
    """Why a node cannot take a Pod: the failing filter's reasons, and whether evicting Pods
    of lower priority could make room (NodeResourcesFit and an extender: Unschedulable) or not
    (the other filters: UnschedulableAndUnresolvable)."""

    reasons: tuple[str, ...]
    resolvable: bool = False


NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"  # every Pod here is of priority 0


def fit_error(nodes: int, unfits: list[Unfit]) -> str:
    """kube-scheduler's FitError: each reason counted over the nodes, the counted reasons
    sorted as strings, then what the DefaultPreemption PostFilter found."""
    filtered = Counter(reason for unfit in unfits for reason in unfit.reasons)
    preemption = Counter(NO_VICTIMS if unfit.resolvable else NOT_HELPFUL for unfit in unfits)
    return (
        f"0/{nodes} nodes are available: {_histogram(filtered)}. "
        f"preemption: 0/{nodes} nodes are available: {_histogram(preemption)}."
    )


def _histogram(counted: Counter[str]) -> str:
    return ", ".join(sorted(f"{count} {reason}" for reason, count in counted.items()))


def _deleting(obj: Mapping[str, Any]) -> bool:
    return "deletionTimestamp" in (obj.get("metadata") or {})
