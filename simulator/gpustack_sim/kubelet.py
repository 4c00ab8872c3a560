"""The kubelet's part: node status, starting bound Pods with their devices, pod-resources.

- Node status: a node without a Ready condition gets one (the kubelet's heartbeat); its
  allocatable is its capacity plus what the device plugin advertises for its cards.
- A Pod bound to the node starts when the device plugin can allocate every container's
  accelerator resources (Allocate); it runs and is Ready. When it cannot, the Pod fails with
  `UnexpectedAdmissionError`, as the kubelet's device manager fails it.
- The grants are the kubelet's checkpoint, by Pod UID as its device manager keeps them (a Pod
  deleted and made again under its name is another Pod); `pod_resources(node)` answers the
  kubelet pod-resources API (List) from them, naming each Pod, which the node agent reads. A Pod
  that is gone, or has finished, gives its devices back; a partition the plugin created is
  destroyed with it.
- The device plugin is the one the cluster runs (`kube.device_plugin`): gpustack's, the NVIDIA
  GPU Operator's, HAMi's, or under `dra` the device-plugin part of NVIDIA's DRA driver, each
  played from its own documentation.
- Admission drops the extended resources a container requests that its node does not have at
  all (pkg/kubelet/lifecycle/predicate.go, `removeMissingExtendedResources`; a resource a
  plugin advertised once stays, at 0): they are no plugin's, so no Allocate sees them.
- A Pod that names ResourceClaims starts only once each claim is reserved for it (the
  kubelet's DRA manager refuses to prepare a claim whose `status.reservedFor` lacks the Pod,
  and tries again): until then it stays as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from functions.agent.podresources import ContainerDevices
from gpustack_sim import kube
from gpustack_sim.client import Client
from gpustack_sim.deviceplugin import Allocate, Card, DevicePlugin, Grant, cards_of
from gpustack_sim.dra import pod_claim_names

Checkpoint = dict[str, dict[str, list[Grant]]]  # Pod UID → container → grants


class Kubelet:
    def __init__(self, api: Client, plugins: Mapping[str, DevicePlugin]):
        self.api = api
        self.plugins = plugins  # by the name a Catalog's `devicePlugin` gives it
        self.checkpoint: Checkpoint = {}
        self.pods: dict[str, tuple[str, str]] = {}  # Pod UID → (node, namespace/name)
        self.advertised: dict[str, dict[str, str]] = {}  # node → what the plugin put there

    def run(self) -> None:
        self.release_gone_pods()
        for node in self.api.list("Node"):
            self.report_node(node)
        for pod in self.api.list("Pod"):
            if kube.running(pod) and (pod.get("status") or {}).get("phase") != "Running":
                self.start(pod)

    @property
    def plugin(self) -> DevicePlugin:
        return self.plugins[kube.device_plugin(self.api)]

    def cards(self, node: str) -> list[Card]:
        return cards_of(self.api.get("Devices", node))

    def report_node(self, node: dict[str, Any]) -> None:
        """The heartbeat, and the plugin's resources on top of the node's own (a resource the
        plugin stops advertising stays at 0, as the kubelet leaves it)."""
        name, status = node["metadata"]["name"], node.setdefault("status", {})
        if not status.get("conditions"):
            ready = kube.condition(
                "Ready", "True", "KubeletReady", "kubelet is posting ready status"
            )
            kube.set_conditions(node, ready)
        advertised = {k: str(v) for k, v in self.plugin.advertise(node, self.cards(name)).items()}
        gone = dict.fromkeys(set(self.advertised.get(name, {})) - set(advertised), "0")
        self.advertised[name] = advertised
        capacity = status.get("capacity") or {}
        allocatable = status.get("allocatable") or capacity
        status["capacity"] = {**capacity, **gone, **advertised}
        status["allocatable"] = {**allocatable, **gone, **advertised}
        self.api.update_status(node)

    def start(self, pod: dict[str, Any]) -> None:
        node, uid = pod["spec"]["nodeName"], pod["metadata"]["uid"]
        if not self.claims_reserved(pod):
            return  # the DRA manager cannot prepare its claims yet
        cards = self.cards(node)
        node_object = self.api.get("Node", node) or {}
        present = set((node_object.get("status") or {}).get("allocatable") or {})
        held = [
            g
            for k, containers in self.checkpoint.items()
            if self.pods[k][0] == node
            for gs in containers.values()
            for g in gs
        ]
        granted: dict[str, list[Grant]] = {}
        for container in pod["spec"].get("containers") or []:
            wanted = {
                name: math.ceil(kube.quantity(value))
                for name, value in ((container.get("resources") or {}).get("limits") or {}).items()
                if name in present or not kube.extended_resource(name)
            }
            call = Allocate(node_object, cards, held, pod, container["name"], wanted)
            grants = self.plugin.allocate(call)
            if isinstance(grants, str):
                return self.fail(pod, grants)
            granted[container["name"]] = grants
            held += grants
        self.checkpoint[uid], self.pods[uid] = granted, (node, kube.pod_key(pod))
        self.create_partitions(node, [g for gs in granted.values() for g in gs])
        index = sorted(n["metadata"]["name"] for n in self.api.list("Node")).index(node) + 1
        pod["status"] = {
            "phase": "Running",
            "conditions": [
                kube.condition(t, "True")
                for t in ("ContainersReady", "Initialized", "PodScheduled", "Ready")
            ],
            "hostIPs": [{"ip": f"10.0.0.{index}"}],
            "podIPs": [{"ip": f"10.244.{index}.{len(self.checkpoint)}"}],
            **not_owned(pod),
        }
        self.api.update_status(pod)

    def claims_reserved(self, pod: Mapping[str, Any]) -> bool:
        """Is each of the Pod's ResourceClaims there and reserved for it?"""
        namespace, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        for name in pod_claim_names(pod).values():
            claim = self.api.peek("ResourceClaim", name, namespace) if name else None
            reserved = ((claim or {}).get("status") or {}).get("reservedFor") or []
            if not any(r.get("uid") == uid for r in reserved):
                return False
        return True

    def fail(self, pod: dict[str, Any], why: str) -> None:
        pod["status"] = {
            "phase": "Failed",
            "reason": "UnexpectedAdmissionError",
            "message": f"Allocate failed due to {why}, which is unexpected",
            **not_owned(pod),
        }
        self.api.update_status(pod)

    def release_gone_pods(self) -> None:
        live = {p["metadata"]["uid"]: p for p in self.api.list("Pod")}
        for uid in sorted(self.checkpoint, key=self.pods.__getitem__):
            pod = live.get(uid)
            if pod is not None and kube.running(pod):
                continue
            grants = [g for gs in self.checkpoint.pop(uid).values() for g in gs]
            self.destroy_partitions(self.pods.pop(uid)[0], grants)

    def pod_resources(self, node: str) -> list[ContainerDevices]:
        """The kubelet pod-resources API's List, for the Pods on `node`."""
        found = []
        for uid, containers in sorted(self.checkpoint.items(), key=lambda e: self.pods[e[0]]):
            on, key = self.pods[uid]
            if on != node:
                continue
            namespace, name = key.split("/", 1)
            for container, grants in sorted(containers.items()):
                by_resource: dict[str, list[str]] = {}
                for grant in grants:
                    by_resource.setdefault(grant.resource, []).extend(grant.device_ids)
                found += [
                    ContainerDevices(f"{namespace}/{name}", container, resource, tuple(ids))
                    for resource, ids in sorted(by_resource.items())
                ]
        return found

    # --- MIG instances the plugin makes and unmakes (what NVML then reports) -------------------

    def create_partitions(self, node: str, grants: list[Grant]) -> None:
        made = [g for g in grants if g.created]
        if made:
            self._edit_partitions(node, made, add=True)

    def destroy_partitions(self, node: str, grants: list[Grant]) -> None:
        made = [g for g in grants if g.created]
        if made:
            self._edit_partitions(node, made, add=False)

    def _edit_partitions(self, node: str, grants: list[Grant], add: bool) -> None:
        devices = self.api.get("Devices", node)
        if devices is None:
            return
        for vendor in devices["spec"].get("accelerators") or []:
            for card in vendor.get("devices") or []:
                mig = card.setdefault("mig", {})
                partitions = [
                    p
                    for p in mig.get("partitions") or []
                    if p.get("uuid") not in {g.device_ids[0] for g in grants}
                ]
                if add:
                    partitions += [_partition(g) for g in grants if g.card == card["uuid"]]
                if partitions or "partitions" in mig:
                    mig["partitions"] = sorted(partitions, key=lambda p: p["placement"]["start"])
        self.api.apply(devices)


def not_owned(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the kubelet keeps of a Pod's status as it writes its own: the ResourceClaims
    kube-controller-manager made for it (`generateAPIPodStatus`: "not owned and not modified
    by kubelet")."""
    kept = (pod.get("status") or {}).get("resourceClaimStatuses")
    return {"resourceClaimStatuses": kept} if kept else {}


def _partition(grant: Grant) -> dict[str, Any]:
    assert grant.placement is not None
    return {
        "profile": grant.profile,
        "placement": {"start": grant.placement.start, "size": grant.placement.size},
        "uuid": grant.device_ids[0],
    }
