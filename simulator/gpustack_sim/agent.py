"""The node agent's allocation report, run for real against the simulated kubelet.

The agent is the product, not a stand-in: each node's `Devices.spec.allocations` is what
`functions.agent.allocations` makes of the kubelet's pod-resources answer (here, the simulated
kubelet's grants, with the device plugin's ID formats), the Pods on the node and, under DRA, the
ResourceClaims they name and the node's ResourceSlices (the simulated driver's), and its owner is
the Node, by the uid the API server gave it (`functions.agent.agent.owner_reference`). The
hardware part of the spec is the scenario's (what NVML would report). An agent runs where its
Node is: a Devices whose Node is gone has no agent writing it.
"""

from __future__ import annotations

from functions.agent.agent import owner_reference
from functions.agent.allocations import DraState, allocations
from gpustack_sim import kube
from gpustack_sim.client import Client
from gpustack_sim.kubelet import Kubelet


class Agents:
    def __init__(self, api: Client, kubelet: Kubelet):
        self.api = api
        self.kubelet = kubelet

    def run(self) -> None:
        pods = self.api.list("Pod")
        claims = self.api.list("ResourceClaim")  # none where no DRA driver is simulated
        slices: dict[str, list[dict]] = {}
        for found_slice in self.api.list("ResourceSlice"):
            slices.setdefault(found_slice["spec"].get("nodeName") or "", []).append(found_slice)
        for devices in self.api.list("Devices"):
            node = devices["metadata"]["name"]
            found = self.api.get("Node", node)
            if found is None:
                continue
            owners = [owner_reference(node, found["metadata"]["uid"])]
            if devices["metadata"].get("ownerReferences") != owners:
                self.api.merge_patch("Devices", node, {"metadata": {"ownerReferences": owners}})
            on_node = {kube.pod_key(p): p for p in pods if p["spec"].get("nodeName") == node}
            spec = devices.setdefault("spec", {})
            dra = DraState(node, claims, slices.get(node, []))
            rows = allocations(
                self.kubelet.pod_resources(node), on_node, spec.get("accelerators") or [], dra
            )
            if rows != (spec.get("allocations") or []):
                self.api.merge_patch("Devices", node, {"spec": {"allocations": rows}})
