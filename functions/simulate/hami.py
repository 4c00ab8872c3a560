"""HAMi, as its documentation and chart describe it: a scheduler extender and a device plugin.

- The device plugin advertises `nvidia.com/gpu`: `deviceSplitCount` (10) vGPU devices per
  healthy card not in MIG mode, with IDs `<UUID>-<i>` that name no real choice: its Allocate
  gives the container the cards HAMi's scheduler wrote on the Pod
  (`hami.io/vgpu-devices-allocated`), whatever IDs the kubelet picked.
- The scheduler extender manages `nvidia.com/gpu`, `gpumem`, `gpumem-percentage` and
  `gpucores` (`ignoredByScheduler: true`: kube-scheduler does not count them against the
  node). A container's `nvidia.com/gpu: n` is n vGPUs on n distinct cards, each with the
  memory (`gpumem` MiB, or `gpumem-percentage` of the card, else all of it) and cores percent
  (`gpucores`, 100 when the whole memory is asked and no cores are) asked. A card takes a vGPU
  while it has fewer than 10, the memory and the cores free; one with a 100-cores vGPU takes
  nothing else, and a vGPU asking 100 cores needs an empty card. On binding it writes
  `UUID,NVIDIA,<MiB>,<cores>:` per vGPU and `;` after each container.

Nothing here reads the product: the names, the defaults and the rules are HAMi's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from functions.simulate import kube
from functions.simulate.client import Client
from functions.simulate.deviceplugin import Allocate, Card, Grant, cards_of

GPU = "nvidia.com/gpu"
MEMORY = "nvidia.com/gpumem"
MEMORY_PERCENTAGE = "nvidia.com/gpumem-percentage"
CORES = "nvidia.com/gpucores"
MANAGED = (GPU, MEMORY, MEMORY_PERCENTAGE, CORES, "nvidia.com/priority")
ALLOCATED = "hami.io/vgpu-devices-allocated"
SPLIT_COUNT = 10


def _vgpu_cards(cards: list[Card]) -> list[Card]:
    return [c for c in cards if c.healthy and not c.mig and c.manufacturer == "nvidia"]


class HamiPlugin:
    """HAMi's NVIDIA device plugin (the `hami` dialect)."""

    def advertise(self, node: Mapping[str, Any], cards: list[Card]) -> dict[str, int]:
        vgpus = len(_vgpu_cards(cards)) * SPLIT_COUNT
        return {GPU: vgpus} if vgpus else {}

    def allocate(self, call: Allocate) -> list[Grant] | str:
        count = call.wanted.get(GPU, 0)
        if not count:
            return []
        containers = [c["name"] for c in call.pod["spec"].get("containers") or []]
        chosen = decode(_annotations(call.pod).get(ALLOCATED, ""))
        index = containers.index(call.container)
        if index >= len(chosen) or len(chosen[index]) != count:
            return f"{GPU}: the Pod carries no HAMi device decision for {call.container}"
        taken = {device for grant in call.held for device in grant.device_ids}
        # The kubelet picks any free vGPU ids; the card each container gets is HAMi's choice.
        ids = [
            f"{card.uuid}-{i}"
            for card in _vgpu_cards(call.cards)
            for i in range(SPLIT_COUNT)
            if f"{card.uuid}-{i}" not in taken
        ]
        return [
            Grant(GPU, (device_id,), vgpu.card, "hami")
            for device_id, vgpu in zip(ids, chosen[index], strict=False)
        ]


@dataclass(frozen=True)
class VGpu:
    card: str
    memory_mib: int
    cores: int


@dataclass(frozen=True)
class Ask:
    """One container's vGPU request, as HAMi reads its limits."""

    count: int
    memory_mib: int
    memory_percentage: int
    cores: int

    def memory_on(self, card: Card) -> int:
        if self.memory_mib:
            return self.memory_mib
        return card.memory_mib * self.memory_percentage // 100


def ask_of(container: Mapping[str, Any]) -> Ask | None:
    limits = (container.get("resources") or {}).get("limits") or {}
    count = _int(limits.get(GPU))
    if not count:
        return None
    memory = _int(limits.get(MEMORY))
    percentage = min(_int(limits.get(MEMORY_PERCENTAGE)), 100)
    if not memory and not percentage:
        percentage = 100
    whole = percentage == 100 and not memory
    cores = _int(limits[CORES]) if CORES in limits else (100 if whole else 0)
    return Ask(count, memory, percentage, min(cores, 100))


class HamiScheduler:
    """HAMi's scheduler extender: filters nodes by card and binds the choice onto the Pod."""

    managed = frozenset(MANAGED)

    def __init__(self, api: Client):
        self.api = api

    def asks(self, pod: Mapping[str, Any]) -> list[Ask | None]:
        return [ask_of(c) for c in pod["spec"].get("containers") or []]

    def choose(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> list[list[VGpu]] | str:
        """The cards each container's vGPUs go on, or why this node has none."""
        cards = _vgpu_cards(cards_of(self.api.get("Devices", node["metadata"]["name"])))
        usage = self.usage(node)
        chosen: list[list[VGpu]] = []
        for ask in self.asks(pod):
            vgpus = self._fit(ask, cards, usage) if ask else []
            if vgpus is None:
                return "node(s) didn't fit HAMi's vGPU request (CardInsufficientMemory or cores)"
            for vgpu in vgpus:
                usage[vgpu.card].append(vgpu)
            chosen.append(vgpus)
        return chosen

    def _fit(self, ask: Ask, cards: list[Card], usage: dict[str, list[VGpu]]) -> list[VGpu] | None:
        found = []
        for card in cards:
            held = usage.setdefault(card.uuid, [])
            memory = ask.memory_on(card)
            used_cores = sum(v.cores for v in held)
            fits = (
                len(held) < SPLIT_COUNT
                and card.memory_mib - sum(v.memory_mib for v in held) >= memory
                and 100 - used_cores >= ask.cores
                and not (ask.cores == 100 and held)
                and not (used_cores == 100 and ask.cores == 0)
            )
            if fits:
                found.append(VGpu(card.uuid, memory, ask.cores))
            if len(found) == ask.count:
                return found
        return None

    def usage(self, node: Mapping[str, Any]) -> dict[str, list[VGpu]]:
        """The vGPUs the Pods bound to `node` hold, by card, from their annotations."""
        held: dict[str, list[VGpu]] = {}
        for pod in self.api.list("Pod"):
            if pod["spec"].get("nodeName") != node["metadata"]["name"]:
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for vgpus in decode(_annotations(pod).get(ALLOCATED, "")):
                for vgpu in vgpus:
                    held.setdefault(vgpu.card, []).append(vgpu)
        return held

    def bind(self, pod: dict[str, Any], chosen: list[list[VGpu]]) -> None:
        pod["metadata"].setdefault("annotations", {})[ALLOCATED] = encode(chosen)


def encode(chosen: list[list[VGpu]]) -> str:
    return "".join(
        "".join(f"{v.card},NVIDIA,{v.memory_mib},{v.cores}:" for v in vgpus) + ";"
        for vgpus in chosen
    )


def decode(annotation: str) -> list[list[VGpu]]:
    containers = annotation.split(";")[:-1]
    return [
        [
            VGpu(fields[0], _int(fields[2]), _int(fields[3]))
            for fields in (device.split(",") for device in listed.split(":") if device)
        ]
        for listed in containers
    ]


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _int(value: Any) -> int:
    try:
        return math.floor(kube.quantity(value)) if value is not None else 0
    except (ValueError, TypeError):
        return 0
