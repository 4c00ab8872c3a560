"""HAMi v2.10.0, as its code and chart describe it: an admission webhook, a scheduler extender
and a device plugin.

- The device plugin advertises `nvidia.com/gpu`: `deviceSplitCount` (10) vGPU devices per
  healthy card not in MIG mode, with IDs `<UUID>-<i>` that name no real choice: its Allocate
  gives the container the cards HAMi's scheduler wrote on the Pod
  (`hami.io/vgpu-devices-allocated`), whatever IDs the kubelet picked.
- The webhook `vgpu.hami.io` (pkg/scheduler/webhook.go `Handle`, pkg/device/nvidia/device.go
  `MutateAdmission`) sees each Pod created and hands those asking for a vGPU to
  `hami-scheduler`; it denies such a Pod when a container's `gpumem-percentage` is outside
  0-100, when any container is privileged, or when it already has a `nodeName`
  (`admit_pod`). It gives a container asking vGPUs and no cores 100 cores when it asks
  `gpumem-percentage: 100` or no memory at all (`exclusive_by_default`). The simulated API
  server runs no mutating webhook, so that default is applied where the extender reads the
  container (`ask_of`); the simulated scheduler reads no `schedulerName`, so the extender
  judges every Pod that asks for vGPUs, as hami-scheduler would.
- The scheduler extender manages `nvidia.com/gpu`, `gpumem`, `gpumem-percentage` and
  `gpucores` (`ignoredByScheduler: true`: kube-scheduler does not count them against the
  node). A container's `nvidia.com/gpu: n` is n vGPUs on n distinct cards, each with the
  memory (`gpumem` MiB, or `gpumem-percentage` of the card, else all of it) and cores percent
  asked. A card takes a vGPU while it has fewer than 10, the memory and the cores free; one
  with a 100-cores vGPU takes nothing else, and a vGPU asking 100 cores needs an empty card.
  Cards are tried least-used first: the chart's `gpuSchedulerPolicy: spread` (`spread_order`).
  On binding it writes `UUID,NVIDIA,<MiB>,<cores>:` per vGPU and `;` after each container.

Not modelled: the webhook's opt-outs (the `hami.io/webhook: ignore` label on a Pod or its
namespace), its quota check, `defaultGPUNum` (a container asking only memory or cores gets
`nvidia.com/gpu: 1`), and the extender's node choice (`nodeSchedulerPolicy: binpack`): the
simulated kube-scheduler tries nodes by name. Nothing here reads the product: the names, the
defaults and the rules are HAMi's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpustack_sim import kube
from gpustack_sim.apiserver import FORBIDDEN, Webhook
from gpustack_sim.client import Client
from gpustack_sim.deviceplugin import Allocate, Card, Grant, cards_of

GPU = "nvidia.com/gpu"
MEMORY = "nvidia.com/gpumem"
MEMORY_PERCENTAGE = "nvidia.com/gpumem-percentage"
CORES = "nvidia.com/gpucores"
MANAGED = (GPU, MEMORY, MEMORY_PERCENTAGE, CORES, "nvidia.com/priority")
VGPU_NAMES = (GPU, MEMORY, MEMORY_PERCENTAGE, CORES)  # any in the limits: a vGPU is asked
ALLOCATED = "hami.io/vgpu-devices-allocated"
SPLIT_COUNT = 10
WEBHOOK = "vgpu.hami.io"  # charts/hami/templates/scheduler/webhook.yaml
SCHEDULER_NAME = "hami-scheduler"  # the chart's `schedulerName`, the webhook's --scheduler-name
# The chart's --force-overwrite-default-scheduler=true: a Pod naming kube-scheduler is taken too.
OVERWRITTEN_SCHEDULERS = ("", "default-scheduler", SCHEDULER_NAME)


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
    """One container's vGPU request, as HAMi's scheduler reads it (`ask_of`)."""

    count: int
    memory_mib: int
    memory_percentage: int
    cores: int

    def memory_on(self, card: Card) -> int:
        if self.memory_mib:
            return self.memory_mib
        return card.memory_mib * self.memory_percentage // 100


def ask_of(container: Mapping[str, Any]) -> Ask | None:
    """One container's vGPU request as HAMi's scheduler reads it (`GenerateResourceRequests`,
    pkg/device/nvidia/device.go; limits first, then requests), after the webhook's cores
    default. Chart defaults: `defaultMemory: 0`, so no memory asked is all of it;
    `defaultCores: 0`."""
    count = _int(_value(container, GPU))
    if not count:
        return None
    memory = _int(_value(container, MEMORY))
    # Above 100 is clamped; 0 or less is ignored, as if unset ("hami-core reads 0 as no limit").
    percentage = max(min(_int(_value(container, MEMORY_PERCENTAGE)), 100), 0)
    if not percentage and not memory:
        percentage = 100
    if _has(container, CORES):
        cores = _int(_value(container, CORES))
    else:
        cores = 100 if exclusive_by_default(container) else 0
    return Ask(count, memory, percentage, min(cores, 100))  # Fit: "core limit can't exceed 100"


def exclusive_by_default(container: Mapping[str, Any]) -> bool:
    """Whether the webhook gives this container `gpucores: 100` (`defaultExclusiveCoreIfNeeded`,
    pkg/device/nvidia/device.go): it asks vGPUs and no cores, and either a
    `gpumem-percentage` of exactly 100 or, without one, no `gpumem` either."""
    if not _has(container, GPU) or _has(container, CORES):
        return False
    if _has(container, MEMORY_PERCENTAGE):
        return _int(_value(container, MEMORY_PERCENTAGE)) == 100
    return not _has(container, MEMORY)


def admit_pod(pod: Mapping[str, Any]) -> str | None:
    """Why HAMi's webhook denies creating this Pod, in its words; None when it lets it through
    (pkg/scheduler/webhook.go `Handle`, v2.10.0; before v2.10 a privileged container was
    skipped, not denied). kube-apiserver prefixes the denial with the webhook's name."""
    spec = pod.get("spec") or {}
    if spec.get("schedulerName", "") not in OVERWRITTEN_SCHEDULERS:
        return None  # "pod already has different scheduler assigned": left alone
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    for container in containers:  # MutateAdmission, init containers first
        invalid = _invalid_memory_percentage(container)
        if invalid:
            return invalid
    if not any(_asks_vgpu(c) for c in containers):
        return None
    privileged = [c["name"] for c in containers if _privileged(c)]
    if privileged:  # the first privileged container, whichever asks the vGPU
        return f"container {privileged[0]} is privileged"
    if spec.get("nodeName"):  # set beside schedulerName: hami-scheduler could not bind it
        return "pod has node assigned"
    return None


def _invalid_memory_percentage(container: Mapping[str, Any]) -> str | None:
    """`validateMemoryPercentage` (pkg/device/nvidia/device.go)."""
    if not _has(container, MEMORY_PERCENTAGE):
        return None
    percentage = _int(_value(container, MEMORY_PERCENTAGE))
    if 0 <= percentage <= 100:
        return None
    return (
        f"invalid {MEMORY_PERCENTAGE} value {percentage} in container {container['name']}: "
        "must be an integer between 0 and 100"
    )


def _asks_vgpu(container: Mapping[str, Any]) -> bool:
    """`mutateContainerResource`: any of HAMi's names in the limits (a count, or memory or
    cores that `defaultGPUNum: 1` turns into one)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    return any(name in limits for name in VGPU_NAMES)


def _privileged(container: Mapping[str, Any]) -> bool:
    return (container.get("securityContext") or {}).get("privileged") is True


class HamiScheduler:
    """HAMi's scheduler extender: filters nodes by card and binds the choice onto the Pod."""

    managed = frozenset(MANAGED)

    def __init__(self, api: Client):
        self.api = api

    def webhook(self) -> Webhook:
        """The admission webhook HAMi's chart installs with the scheduler: CREATE only, and
        controller-runtime's Denied is 403 Forbidden."""
        return Webhook(WEBHOOK, "Pod", self.admit, creates=True, reason=FORBIDDEN)

    def admit(self, pod: Mapping[str, Any], old: Mapping[str, Any] | None) -> str | None:
        if old is not None or kube.device_plugin(self.api) != "hami":
            return None
        return admit_pod(pod)

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
        """`Fit` (pkg/device/nvidia/device.go): the first `count` cards, least-used first, that
        take the vGPU."""
        found = []
        for card in spread_order(cards, usage):
            vgpu = VGpu(card.uuid, ask.memory_on(card), ask.cores)
            if takes(usage.setdefault(card.uuid, []), card, vgpu):
                found.append(vgpu)
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


def spread_order(cards: list[Card], usage: Mapping[str, list[VGpu]]) -> list[Card]:
    """The order `Fit` tries the cards in under the default `spread` policy: least-used first.

    `fitInDevices` (pkg/scheduler/score.go) scores every card before each container
    (`ComputeScore`, pkg/scheduler/policy/gpu_policy.go: vGPUs/split count + cores/100 +
    memory/total, equal weights), sorts them highest first ("default policy is spread") and
    `Fit` walks the list from its end. `ComputeScore` adds the container's own request only to
    cards whose type is the request's, "NVIDIA"; a card's type is its model name (the device
    plugin's register.go), so the score is what the card already holds. Cards of equal score
    come in the order the device plugin registered them, which it takes from a Go map; the
    stand-in takes the lowest index first."""
    return sorted(cards, key=lambda card: (_score(card, usage.get(card.uuid, [])), card.index))


def _score(card: Card, held: list[VGpu]) -> Fraction:
    if not card.memory_mib:
        return Fraction(0)  # ComputeScore: a card without memory scores 0
    return (
        Fraction(len(held), SPLIT_COUNT)
        + Fraction(sum(v.cores for v in held), 100)
        + Fraction(sum(v.memory_mib for v in held), card.memory_mib)
    )


def takes(held: list[VGpu], card: Card, vgpu: VGpu) -> bool:
    """Whether a card holding `held` takes one more vGPU (`Fit`'s checks, in its order)."""
    free_memory = card.memory_mib - sum(v.memory_mib for v in held)
    used_cores = sum(v.cores for v in held)
    return (
        len(held) < SPLIT_COUNT  # CardTimeSlicingExhausted
        and free_memory >= vgpu.memory_mib  # CardInsufficientMemory
        and 100 - used_cores >= vgpu.cores  # CardInsufficientCore
        and not (vgpu.cores == 100 and held)  # ExclusiveDeviceAllocateConflict
        and not (used_cores == 100 and vgpu.cores == 0)  # CardComputeUnitsExhausted
    )


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


def _has(container: Mapping[str, Any], name: str) -> bool:
    resources = container.get("resources") or {}
    return any(name in (resources.get(part) or {}) for part in ("limits", "requests"))


def _value(container: Mapping[str, Any], name: str) -> Any:
    """A resource's quantity as HAMi reads it: the limit, else the request."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    return limits[name] if name in limits else (resources.get("requests") or {}).get(name)


def _int(value: Any) -> int:
    try:
        return math.floor(kube.quantity(value)) if value is not None else 0
    except (ValueError, TypeError):
        return 0
