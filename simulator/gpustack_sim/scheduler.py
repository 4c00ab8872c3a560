"""kube-scheduler's part: bind each ungated Pod to a node that can take it, or say why none can.

A node takes a Pod when, in the order of kube-scheduler's filter plugins: it is not cordoned,
or the Pod tolerates the cordon's taint (NodeUnschedulable); the Pod tolerates its NoSchedule
and NoExecute taints (TaintToleration); the Pod's nodeSelector and required node affinity
accept its labels (NodeAffinity); and its allocatable — what the kubelet and the device plugins
advertise — still holds the Pod's requests beside those of the Pods already bound there
(NodeResourcesFit). The first filter a node fails is its reason. kube-scheduler never reads a
node's Ready condition: a NotReady or unreachable node keeps Pods off by the taints the node
lifecycle puts on it, which a Pod tolerating every taint tolerates too. Nodes are tried by
name, those that hold more of the Pod's images first (ImageLocality: the one score that tells
apart the examples' nodes, which are otherwise alike; the others score them equal, and
kube-scheduler breaks ties at random). An unschedulable Pod's message is kube-scheduler's FitError: each reason counted over
the nodes, then what preemption found (`fit_error`). Where the cluster runs HAMi,
its scheduler extender also filters the nodes for the Pods that ask for vGPUs, judges the
resources it manages itself (kube-scheduler ignores them), and writes its choice on the Pod.

A Pod that names ResourceClaims goes through the DynamicResources plugin
(dynamicresources.py): it waits until its claims exist, a missing DeviceClass fails it before
any node is tried, the plugin filters after the others, and it allocates and reserves the claims
before the binding. Where the package ships a kube-scheduler configuration for the device
plugin the cluster runs (`compositions/kube-scheduler/<devicePlugin>.yaml`, as Kueue's), the
cluster's scheduler runs it: NodeResourcesFit leaves out the extended resources of its
`ignoredResourceGroups` (a name's part before the `/`), as fit.go does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

from functions import documents
from gpustack_sim import kube
from gpustack_sim.client import Client
from gpustack_sim.dynamicresources import Allocation, DynamicResources
from gpustack_sim.hami import HamiScheduler

# What a cordoned node is tainted with (the node lifecycle's TaintNodesByCondition); a Pod that
# tolerates it may be placed on the node (NodeUnschedulable).
CORDONED = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


class Scheduler:
    def __init__(self, api: Client, configurations: Path | None = None):
        """`configurations`: the folder of kube-scheduler configurations by device plugin
        (`compositions/kube-scheduler`); None, kube-scheduler's defaults."""
        self.api = api
        self.configurations = configurations
        hami = HamiScheduler(api)
        api.api.webhooks.append(hami.webhook())
        self.extenders = {"hami": hami}  # by the device plugin they come with
        self.dynamic_resources = DynamicResources(api)

    def run(self) -> None:
        nodes = self.api.list("Node")
        for pod in self.api.list("Pod"):
            spec = pod["spec"]
            if spec.get("nodeName") or spec.get("schedulingGates") or _deleting(pod):
                continue
            self.schedule(pod, nodes)

    def schedule(self, pod: dict[str, Any], nodes: list[dict[str, Any]]) -> None:
        requests = self.fit_requests(pod)
        extender = self.extenders.get(kube.device_plugin(self.api))
        if extender is not None and any(extender.asks(pod)):
            requests = {k: v for k, v in requests.items() if k not in extender.managed}
        else:
            extender = None
        dra = self.dynamic_resources
        claims = dra.claims(pod) if pod["spec"].get("resourceClaims") else []
        if claims is None:
            return  # PreEnqueue: the Pod waits for its claims
        refused = dra.pre_filter(claims) if nodes else ""
        if refused:
            return self.unschedulable(pod, pre_filter_error(len(nodes), refused))
        unfits: list[Unfit] = []
        unavailable: set[str] = set()
        for node in by_image_locality(pod, nodes):
            why = self.unfit(pod, requests, node)
            allocation = dra.filter(claims, node) if claims and why is None else None
            if allocation is not None and allocation.why:
                why = Unfit((allocation.why,))  # UnschedulableAndUnresolvable
                unavailable |= set(allocation.unavailable)
            chosen = extender.choose(pod, node) if extender and why is None else None
            if isinstance(chosen, str):
                why = Unfit((chosen,), resolvable=True)
            if why is None:
                return self.bind(pod, node, extender, chosen, claims, allocation)
            unfits.append(why)
        if not nodes:
            return self.unschedulable(pod, "no nodes available to schedule pods")
        post_filter = dra.post_filter(pod, claims, unavailable) if claims else ""
        self.unschedulable(pod, fit_error(len(nodes), unfits, post_filter))

    def bind(
        self,
        pod: dict[str, Any],
        node: Mapping[str, Any],
        extender: HamiScheduler | None,
        chosen: Any,
        claims: list[dict[str, Any]],
        allocation: Allocation | None,
    ) -> None:
        """Reserve (the extender's annotations, the claims' allocation), then bind."""
        if extender is not None and chosen is not None:
            extender.bind(pod, chosen)  # its annotations, before the binding
            pod = self.api.apply(pod)
        if claims and allocation is not None:
            self.dynamic_resources.pre_bind(pod, claims, allocation)
        metadata = pod["metadata"]
        pod = self.api.bind(metadata["name"], metadata["namespace"], node["metadata"]["name"])
        kube.set_conditions(pod, kube.condition("PodScheduled", "True"))
        self.api.update_status(pod)

    def unschedulable(self, pod: dict[str, Any], message: str) -> None:
        kube.set_conditions(pod, kube.condition("PodScheduled", "False", "Unschedulable", message))
        pod.setdefault("status", {})["phase"] = "Pending"
        self.api.update_status(pod)

    def fit_requests(self, pod: Mapping[str, Any]) -> dict[str, Fraction]:
        """The Pod's requests NodeResourcesFit judges: all, but for the extended resources of
        the configuration's ignored groups."""
        ignored = self.ignored_resource_groups()
        return {
            name: amount
            for name, amount in kube.pod_requests(pod["spec"]).items()
            if not (kube.extended_resource(name) and name.split("/", 1)[0] in ignored)
        }

    def ignored_resource_groups(self) -> set[str]:
        """NodeResourcesFit's `ignoredResourceGroups` in the cluster's scheduler configuration
        (its default profile's)."""
        path = (
            self.configurations / f"{kube.device_plugin(self.api)}.yaml"
            if self.configurations
            else None
        )
        if path is None or not path.exists():
            return set()
        groups: set[str] = set()
        for configuration in documents.shipped(path):
            for profile in configuration.get("profiles") or []:
                if profile.get("schedulerName", "default-scheduler") != "default-scheduler":
                    continue
                for plugin in profile.get("pluginConfig") or []:
                    if plugin.get("name") == "NodeResourcesFit":
                        groups |= set((plugin.get("args") or {}).get("ignoredResourceGroups") or [])
        return groups

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


def fit_error(nodes: int, unfits: list[Unfit], post_filter: str = "") -> str:
    """kube-scheduler's FitError: each reason counted over the nodes, the counted reasons
    sorted as strings, then the PostFilter plugins' messages joined by commas, in their
    order: DynamicResources' (`post_filter`, for a Pod with claims), DefaultPreemption's."""
    filtered = Counter(reason for unfit in unfits for reason in unfit.reasons)
    preemption = Counter(NO_VICTIMS if unfit.resolvable else NOT_HELPFUL for unfit in unfits)
    before = f"{post_filter}, " if post_filter else ""
    return (
        f"0/{nodes} nodes are available: {_histogram(filtered)}. "
        f"{before}preemption: 0/{nodes} nodes are available: {_histogram(preemption)}."
    )


def pre_filter_error(nodes: int, message: str) -> str:
    """The FitError of a Pod a PreFilter plugin (DynamicResources') refused before any node was
    tried: its message instead of the nodes' reasons, and every node unresolvable for
    preemption."""
    return (
        f"0/{nodes} nodes are available: {message}. "
        f"preemption: 0/{nodes} nodes are available: {nodes} {NOT_HELPFUL}."
    )


# ImageLocality's bounds (pkg/scheduler/framework/plugins/imagelocality): below 23 MB of images a
# node scores nothing, from 1000 MB a container the most.
IMAGE_MIN_BYTES = 23 * 1024 * 1024
IMAGE_MAX_BYTES = 1000 * 1024 * 1024


def by_image_locality(pod: Mapping[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes, best ImageLocality score first (stable: by name among equals). A node scores
    the sizes of the Pod's images it has, each scaled by the share of nodes that have it, within
    the plugin's bounds."""
    containers = (pod.get("spec") or {}).get("containers") or []
    wanted = [c.get("image") for c in containers if c.get("image")]
    images = {node["metadata"]["name"]: _images(node) for node in nodes}
    if not any(image in held for held in images.values() for image in wanted):
        return nodes
    spread = {image: sum(image in held for held in images.values()) for image in wanted}

    def score(node: Mapping[str, Any]) -> int:
        held = images[node["metadata"]["name"]]
        total = sum(held[image] * spread[image] // len(nodes) for image in wanted if image in held)
        return min(max(total, IMAGE_MIN_BYTES), IMAGE_MAX_BYTES * len(containers))

    return sorted(nodes, key=score, reverse=True)


def _images(node: Mapping[str, Any]) -> dict[str, int]:
    """Each image name the node has pulled, and its size."""
    return {
        name: int(image.get("sizeBytes") or 0)
        for image in (node.get("status") or {}).get("images") or []
        for name in image.get("names") or []
    }


def _histogram(counted: Counter[str]) -> str:
    return ", ".join(sorted(f"{count} {reason}" for reason, count in counted.items()))


def _deleting(obj: Mapping[str, Any]) -> bool:
    return "deletionTimestamp" in (obj.get("metadata") or {})
