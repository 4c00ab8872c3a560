"""NVIDIA GPU feature discovery (GFD), the GPU Operator's operand that labels GPU nodes.

It runs where the operator deployed it (`nvidia.com/gpu.deploy.gpu-feature-discovery: "true"`,
gpuoperator.py) and labels the node from its cards (the simulated NVML: the node's Devices),
as its labelers do (NVIDIA/k8s-device-plugin, internal/lm/resource.go, mig-strategy.go,
strategy.go):

- `nvidia.com/gpu.product`: the cards' product name, each run of characters other than
  letters, digits, `-`, `_`, `.` and spaces dropped and the words joined by `-`;
  `nvidia.com/gpu.count`: how many cards of it there are;
- its MIG strategy is the ClusterPolicy's `spec.mig.strategy`, which the operator passes on as
  `MIG_STRATEGY`, else GFD's own default `none`; unless `none`, `nvidia.com/mig.strategy`
  says which;
- under `single`, where every card is in MIG mode with MIG devices of one profile, the product
  is `<product>-MIG-<profile>` and the count the MIG devices'; a node `single` refuses (see
  nvidia.py) reads `<product>-MIG-INVALID`, count 0.

Only these labels are played (not memory, replicas, CUDA or the mixed strategy's per-profile
labels). Nothing here reads the product.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpustack_sim.client import Client
from gpustack_sim.deviceplugin import cards_of
from gpustack_sim.gpuoperator import cluster_policy
from gpustack_sim.nvidia import NONE, SINGLE, mig_strategy, single_invalid

DEPLOYED = "nvidia.com/gpu.deploy.gpu-feature-discovery"
PRODUCT, COUNT = "nvidia.com/gpu.product", "nvidia.com/gpu.count"
MIG_STRATEGY = "nvidia.com/mig.strategy"
OWN = (PRODUCT, COUNT, MIG_STRATEGY)
_DROPPED = re.compile(r"[^A-Za-z0-9\-_. ]")


class GpuFeatureDiscovery:
    def __init__(self, api: Client):
        self.api = api

    def run(self) -> None:
        policy = cluster_policy(self.api)
        if policy is None:
            return  # the operator is not installed
        strategy = mig_strategy(policy)
        for node in self.api.list("Node"):
            labels = dict(node["metadata"].get("labels") or {})
            if labels.get(DEPLOYED) != "true":
                continue
            devices = self.api.get("Devices", node["metadata"]["name"])
            wanted = {k: v for k, v in labels.items() if k not in OWN}
            wanted |= gfd_labels(devices, strategy)
            if wanted != labels:
                node["metadata"]["labels"] = wanted
                self.api.apply(node)


def gfd_labels(devices: Mapping[str, Any] | None, strategy: str) -> dict[str, str]:
    """GFD's labels for a node whose hardware `devices` reports, under MIG `strategy`."""
    nvidia = [
        card
        for vendor in ((devices or {}).get("spec") or {}).get("accelerators") or []
        if vendor.get("manufacturer") == "nvidia"
        for card in vendor.get("devices") or []
    ]
    if not nvidia:
        return {}
    product = sanitised(nvidia[0].get("product", ""))
    found = {
        PRODUCT: product,
        COUNT: str(sum(c.get("product") == nvidia[0].get("product") for c in nvidia)),
    }
    if strategy != NONE:
        found[MIG_STRATEGY] = strategy
    cards = [card for card in cards_of(devices) if card.manufacturer == "nvidia"]
    if strategy == SINGLE and any(card.mig for card in cards):
        if single_invalid(cards):
            return found | {PRODUCT: f"{product}-MIG-INVALID", COUNT: "0"}
        migs = [profile for card in cards for profile, _, _ in card.partitions]
        found |= {PRODUCT: f"{product}-MIG-{migs[0]}", COUNT: str(len(migs))}
    return found


def sanitised(name: str) -> str:
    return "-".join(_DROPPED.sub("", name).split())
