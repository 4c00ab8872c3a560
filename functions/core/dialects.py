"""Device-plugin dialects: how a claim is written for the device plugin a cluster runs.

The Catalog's `devicePlugin` names the dialect. Each is one table: the sharing modes it can
express, the Pod keys for each (`encode`/`decode`, `decode(encode(m, c)) == (m, c)`), the Kueue
transformations that charge exactly `Claim.credits` for them, what its plugin advertises on a
node, and the device IDs the kubelet's pod-resources API reports for an allocation.

| Mode        | gpustack (default)                 | nvidia (GPU Operator)                    | hami                                       | dra (NVIDIA's DRA driver) |
|-------------|------------------------------------|------------------------------------------|--------------------------------------------|---------------------------|
| EXCLUSIVE N | `<base>: N`                        | `nvidia.com/gpu: N`                      | `nvidia.com/gpu: N`, `gpumem-percentage: 100`, `gpucores: 100` | N of class `gpu.nvidia.com` |
| SHARED N    | `<base>.shared: N`, N cards        | `nvidia.com/gpu.shared: N` replicas      | —                                          | —                         |
| SLICED p %  | `<base>.sliced…` + `.units`        | —                                        | `nvidia.com/gpu: 1`, `gpumem-percentage: p`, `gpucores: c` | —             |
| PARTITIONED | `<base>.partitioned…` + `.units`   | `nvidia.com/mig-<profile>: 1`            | —                                          | 1 of class `mig.nvidia.com`, that profile |
| advertised  | every key, per card and per unit   | `nvidia.com/gpu` (a card), or `.shared` ×10 on a time-sliced node; `nvidia.com/mig-<profile>` per MIG device | `nvidia.com/gpu` × 10 vGPUs per card; memory and cores judged by HAMi's scheduler | nothing: a ResourceSlice lists `gpu-<minor>` per card, each MIG device |
| device IDs  | card UUID; MIG UUID                | card UUID; `<card UUID>::<n>` replica; MIG UUID | `<card UUID>-<n>`, arbitrary: the card is in the Pod's `hami.io/vgpu-devices-allocated` | the claim's allocated device, whose `uuid` the slice names |

Under dra the Pod also carries `credits.gpustack.ai/<manufacturer>`: its price (`Dra`).

Only NVIDIA cards speak the nvidia and hami dialects; another manufacturer's cards keep their
own plugin's whole-card key (`amd.com/gpu: N`) under them. What a dialect cannot express is not
offered (the InstanceType says so) and a request for it is refused naming the setting. A shape
Kueue cannot charge exactly is not offered either: Kueue transforms by resource name only, so
a MIG profile name two card models price differently (`1g.10gb` is an eighth of an 80 GB card
and a quarter of an A100 40GB) has no one price under nvidia (docs/device-plugins.md).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from functions.core import mig, quantity, resources
from functions.core.devices import DevicesSpec
from functions.core.modes import MODES, PERCENT, SHARE, SHARES_PER_CARD, Claim, D, Mode

Name = Literal["gpustack", "nvidia", "hami", "dra"]
DEFAULT: Name = "gpustack"

NVIDIA = mig.MANUFACTURER
GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
HAMI_MEMORY_PERCENTAGE = "nvidia.com/gpumem-percentage"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_CORES = "nvidia.com/gpucores"
HAMI_KEYS = (HAMI_MEMORY_PERCENTAGE, HAMI_MEMORY, HAMI_CORES)
HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"  # the Pod annotation naming the real cards
REPLICA = "::"  # a time-slicing replica's ID: `<card UUID>::<n>`
# GPU feature discovery's labels: the product on every node it runs on, and the MIG strategy
# the GPU Operator's plugin runs there, unless `none`.
GFD_PRODUCT = "nvidia.com/gpu.product"
MIG_STRATEGY = "nvidia.com/mig.strategy"
MIXED = "mixed"
# NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu v0.4.0): its driver name, the DeviceClasses
# its Helm chart installs (whole cards; MIG devices the MIG manager made), and the attributes
# it publishes each device with. The claim's one request is named for what it asks.
DRA_DRIVER = "gpu.nvidia.com"
DRA_GPU_CLASS = "gpu.nvidia.com"
DRA_MIG_CLASS = "mig.nvidia.com"
DRA_UUID, DRA_PROFILE = "uuid", "profile"
DRA_REQUEST = "accelerators"
# What Kueue counts DRA devices as (`deviceClassMappings`): no ClusterQueue covers it, so
# `IgnoreUndeclared` leaves it uncharged; the Pod's own credits key is what is charged.
DRA_DEVICES = "dra.gpustack.ai/nvidia"
_PROFILE = re.compile(r"\.profile == '([^']+)'")


class _Keys:
    """What every device-plugin dialect shares: a claim is the container's resource keys
    alone, with no ResourceClaim, and Kueue maps no DeviceClass."""

    def device_request(self, manufacturer: str, claim: Claim) -> dict[str, Any] | None:
        """The ResourceClaim request that gets `claim`'s devices (None: the keys do)."""
        return None

    def device_class_mappings(self) -> list[dict[str, Any]]:
        """Kueue's `resources.deviceClassMappings` for the DeviceClasses claims name."""
        return []

    def decode(self, keys: Mapping[str, Any]) -> tuple[str, Claim] | None:
        raise NotImplementedError  # each dialect reads its own keys

    def decode_claim(
        self, keys: Mapping[str, Any], request: Mapping[str, Any] | None
    ) -> tuple[str, Claim] | None:
        """The claim a container's keys and its `device_request` make together."""
        return self.decode(keys)


@dataclass(frozen=True)
class Gpustack(_Keys):
    """gpustack's own device plugin: every mode, with the units carried on the Pod (§5.3)."""

    name: Name = "gpustack"
    title: str = "gpustack's device plugin"
    distinct_shares: bool = True  # `.shared: N` is one share on each of N distinct cards
    sidecar_visibility: bool = True  # the plugin resolves the SSH sidecar's visibility token
    fixed_partitions: bool = False  # the plugin makes a MIG instance when a Pod takes one
    privileged_cards: bool = True  # a privileged container may ask for its devices
    node_labels: tuple[str, ...] = ()  # the Node labels `left_out` reads

    def modes(self, manufacturer: str) -> frozenset[Mode]:
        return frozenset(MODES)

    def encode(self, manufacturer: str, claim: Claim) -> dict[str, str]:
        return resources.encode(manufacturer, claim)

    def decode(self, keys: Mapping[str, Any]) -> tuple[str, Claim] | None:
        return resources.decode(keys)

    def charges(self, profile: str, credits: int) -> bool:
        return True  # the Pod carries the partition's units: exact on every card

    def shares_bound(self, largest_node_cards: int) -> int:
        return largest_node_cards

    def refusal(self, claim: Claim) -> tuple[str, str] | None:
        """The `spec.resources` field and why this plugin cannot give `claim` as it is asked
        (None: it can)."""
        return None

    def left_out(self, spec: DevicesSpec, node_labels: Mapping[str, str]) -> str:
        """Why this plugin cannot serve the node `spec` reports, its Node labelled so, as
        claims are written for it ("": it can)."""
        return ""

    def transformations(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        for manufacturer in sorted(resources.BASES):
            base = resources.base_of(manufacturer)
            # Each mode's count, on the key the plugin carries it on, at the mode's price.
            charged = {base + spec.charged_suffix: spec.unit_credits for spec in MODES.values()}
            found += [_replace(key, manufacturer, units) for key, units in charged.items()]
            found += [_replace(key) for key in _gpustack_counters(manufacturer)]
        return found


def _gpustack_counters(manufacturer: str) -> list[str]:
    """The keys that say what a slice or a partition is, charged through its units instead."""
    base = resources.base_of(manufacturer)
    keys = [
        base + suffix
        for suffix in (
            resources.SLICED,
            resources.SLICED_MEMORY_PERCENTAGE,
            resources.SLICED_MEMORY_MIB,
            resources.SLICED_CORES_PERCENTAGE,
            resources.PARTITIONED,
        )
    ]
    keys.append(resources.visibility_key(manufacturer))
    if manufacturer == NVIDIA:
        keys += [resources.partition_key(manufacturer, name) for name in known_profiles()]
    return keys


@dataclass(frozen=True)
class Nvidia(_Keys):
    """The NVIDIA GPU Operator's device plugin: whole cards, time-sliced replicas renamed to
    `nvidia.com/gpu.shared` (`renameByDefault`, 10 replicas per card), and MIG devices under the
    `mixed` strategy (`nvidia.com/mig-<profile>`)."""

    name: Name = "nvidia"
    title: str = "the NVIDIA GPU Operator's device plugin"
    distinct_shares: bool = False  # the plugin may hand two replicas of one card to a container
    sidecar_visibility: bool = False
    fixed_partitions: bool = True  # it serves the MIG devices the MIG manager made, no others
    privileged_cards: bool = True
    node_labels: tuple[str, ...] = (GFD_PRODUCT, MIG_STRATEGY)

    def modes(self, manufacturer: str) -> frozenset[Mode]:
        if manufacturer != NVIDIA:
            return frozenset({Mode.EXCLUSIVE})
        return frozenset({Mode.EXCLUSIVE, Mode.SHARED, Mode.PARTITIONED})

    def encode(self, manufacturer: str, claim: Claim) -> dict[str, str]:
        if claim.mode is Mode.EXCLUSIVE:
            return {resources.base_of(manufacturer): str(claim.cards)}
        if manufacturer != NVIDIA:
            return {}
        if claim.mode is Mode.SHARED:
            return {GPU_SHARED: str(claim.cards)}
        if claim.mode is Mode.PARTITIONED:
            return {mig_resource(claim.profile): "1"}
        return {}

    def decode(self, keys: Mapping[str, Any]) -> tuple[str, Claim] | None:
        for key, value in sorted(keys.items()):
            if key.startswith(MIG_PREFIX) and quantity.count(value):
                profile = key[len(MIG_PREFIX) :]
                return NVIDIA, Claim(Mode.PARTITIONED, 1, profile=profile, units=price(profile))
        if quantity.count(keys.get(GPU_SHARED)):
            return NVIDIA, Claim(Mode.SHARED, quantity.count(keys[GPU_SHARED]))
        return _whole(keys)

    def charges(self, profile: str, credits: int) -> bool:
        """Kueue charges `nvidia.com/mig-<profile>` one price: offered where it is this card's."""
        return price(profile) == credits

    def shares_bound(self, largest_node_cards: int) -> int:
        return largest_node_cards * SHARES_PER_CARD  # replicas, not distinct cards

    def refusal(self, claim: Claim) -> tuple[str, str] | None:
        return None

    def left_out(self, spec: DevicesSpec, node_labels: Mapping[str, str]) -> str:
        """A node with cards in MIG mode needs the plugin's `mixed` MIG strategy. Under
        `single` it advertises the MIG devices as `nvidia.com/gpu` (and does not start where
        MIG and whole cards mix), under `none` a card in MIG mode as a whole `nvidia.com/gpu`:
        either way a whole-card claim could be given what is not a whole card, and Kueue and
        the scheduler cannot steer it off. GPU feature discovery's labels tell the strategy;
        where it does not run (no product label), nothing is told."""
        mig_cards = spec.cards_in_mig_mode(NVIDIA)
        if not mig_cards or GFD_PRODUCT not in node_labels:
            return ""
        strategy = node_labels.get(MIG_STRATEGY) or "none"
        if strategy == MIXED:
            return ""
        told = (
            f"GPU feature discovery's label {MIG_STRATEGY}={strategy}"
            if MIG_STRATEGY in node_labels
            else f"GPU feature discovery sets no {MIG_STRATEGY} label"
        )
        given = "its MIG devices" if strategy == "single" else "a card in MIG mode"
        return (
            f"{mig_cards} card(s) in MIG mode, and {self.title} runs MIG strategy {strategy} "
            f"here ({told}), which advertises {given} as {GPU}: a whole-card Instance could "
            f"be given one; set mig.strategy: {MIXED} in the GPU Operator's ClusterPolicy "
            "(docs/device-plugins.md)"
        )

    def transformations(self) -> list[dict[str, Any]]:
        found = [_replace(GPU, NVIDIA, D), _replace(GPU_SHARED, NVIDIA, SHARE)]
        found += [
            _replace(mig_resource(profile), NVIDIA, credits)
            for profile, credits in chargeable_profiles().items()
        ]
        return found + _other_whole_cards()


@dataclass(frozen=True)
class Hami(_Keys):
    """HAMi: vGPUs capped to a share of a card's memory and cores. `nvidia.com/gpu` counts
    vGPUs, each on its own card; memory and cores are per vGPU (percent of that card)."""

    name: Name = "hami"
    title: str = "HAMi"
    distinct_shares: bool = True
    sidecar_visibility: bool = False
    fixed_partitions: bool = False  # (no partitions offered)
    # HAMi's webhook denies a Pod with a privileged container that asks for a vGPU (v2.10;
    # earlier releases left such a Pod to kube-scheduler, which cannot place it).
    privileged_cards: bool = False
    node_labels: tuple[str, ...] = ()

    def modes(self, manufacturer: str) -> frozenset[Mode]:
        if manufacturer != NVIDIA:
            return frozenset({Mode.EXCLUSIVE})
        return frozenset({Mode.EXCLUSIVE, Mode.SLICED})

    def encode(self, manufacturer: str, claim: Claim) -> dict[str, str]:
        if manufacturer != NVIDIA:
            return _own_plugins_whole_cards(manufacturer, claim)
        if claim.mode is Mode.EXCLUSIVE:
            return {GPU: str(claim.cards), HAMI_MEMORY_PERCENTAGE: "100", HAMI_CORES: "100"}
        if claim.mode is Mode.SLICED:
            return {
                GPU: "1",
                HAMI_MEMORY_PERCENTAGE: str(claim.memory_percentage),
                HAMI_CORES: str(claim.cores_percentage),
            }
        return {}

    def decode(self, keys: Mapping[str, Any]) -> tuple[str, Claim] | None:
        cards = quantity.count(keys.get(GPU))
        if not cards:
            return _whole(keys)
        # HAMi's defaults: no memory asked is all of it, and then the cores default to 100.
        memory = quantity.count(keys.get(HAMI_MEMORY_PERCENTAGE, 100))
        cores = quantity.count(keys.get(HAMI_CORES, 100 if memory == 100 else 0))
        if memory == 100 and cores == 100:
            return NVIDIA, Claim(Mode.EXCLUSIVE, cards)
        sliced = Claim(Mode.SLICED, 1, memory_percentage=memory, cores_percentage=cores)
        return NVIDIA, replace(sliced, units=memory * PERCENT)

    def charges(self, profile: str, credits: int) -> bool:
        return False  # HAMi slices cards itself; MIG cards are not its to offer here

    def shares_bound(self, largest_node_cards: int) -> int:
        return largest_node_cards

    def refusal(self, claim: Claim) -> tuple[str, str] | None:
        # HAMi's scheduler reads `gpucores: 100` as "this card alone": no other vGPU joins it.
        if claim.mode is Mode.SLICED and claim.cores_percentage >= 100:
            return (
                "acceleratorSlicedCoresPercentage",
                "HAMi gives a slice with 100 % of the cores the whole card; "
                "set acceleratorSlicedCoresPercentage below 100, or ask for a whole card",
            )
        return None

    def left_out(self, spec: DevicesSpec, node_labels: Mapping[str, str]) -> str:
        return ""

    def transformations(self) -> list[dict[str, Any]]:
        # A vGPU's memory percent, times the vGPU count, at D/100 a percent: a whole card is
        # 100 × 1 × 16,000 = D, a 20 % slice 320,000. The count and the cores charge nothing.
        per_percent = _replace(HAMI_MEMORY_PERCENTAGE, NVIDIA, PERCENT) | {"multiplyBy": GPU}
        ignored = [_replace(key) for key in (GPU, HAMI_CORES, HAMI_MEMORY)]
        return [per_percent, *ignored, *_other_whole_cards()]


@dataclass(frozen=True)
class Dra:
    """NVIDIA's DRA driver for GPUs: cards claimed through a ResourceClaimTemplate composed
    beside the Pod (`device_request`), allocated by kube-scheduler from the ResourceSlices the
    driver publishes. Whole cards, and the MIG devices the MIG manager made, by profile.

    Kueue counts a claim's devices per DeviceClass (`deviceClassMappings`), one price for every
    device of a class, and applies no transformation to them: no count of devices is credits.
    So the Pod states its price itself, `credits.gpustack.ai/<manufacturer>` on `main`, which
    Kueue charges as it is (the ClusterQueue covers it), kube-scheduler ignores
    (`ignoredResourceGroups`, compositions/kube-scheduler/dra.yaml) and the kubelet drops at
    admission as a resource its node does not have. The device count maps to a resource no
    ClusterQueue covers (`DRA_DEVICES`), which Kueue requires and leaves uncharged.
    """

    name: Name = "dra"
    title: str = "NVIDIA's DRA driver for GPUs"
    distinct_shares: bool = False  # (no shares offered)
    sidecar_visibility: bool = False
    fixed_partitions: bool = True  # the driver publishes the MIG devices that exist
    privileged_cards: bool = True
    node_labels: tuple[str, ...] = ()

    def modes(self, manufacturer: str) -> frozenset[Mode]:
        """The driver's time-slicing and MPS share one claim's card between the Pods that
        reference that claim: no claim of one Instance takes a tenth of a card, so shares
        and slices are not offered."""
        if manufacturer != NVIDIA:
            return frozenset({Mode.EXCLUSIVE})
        return frozenset({Mode.EXCLUSIVE, Mode.PARTITIONED})

    def encode(self, manufacturer: str, claim: Claim) -> dict[str, str]:
        if manufacturer != NVIDIA:
            return _own_plugins_whole_cards(manufacturer, claim)
        if claim.mode in (Mode.EXCLUSIVE, Mode.PARTITIONED):
            return {resources.credits_resource(manufacturer): str(claim.credits)}
        return {}

    def decode(self, keys: Mapping[str, Any]) -> tuple[str, Claim] | None:
        """Other manufacturers' whole cards; an NVIDIA claim is in its ResourceClaim
        (`decode_claim`), the credits key says only its price."""
        return _whole(keys)

    def device_request(self, manufacturer: str, claim: Claim) -> dict[str, Any] | None:
        """`N` cards of the driver's `gpu.nvidia.com` class, or one MIG device of the
        profile from its `mig.nvidia.com` class."""
        if manufacturer != NVIDIA:
            return None
        if claim.mode is Mode.EXCLUSIVE:
            exactly = {"deviceClassName": DRA_GPU_CLASS, "count": claim.cards}
        elif claim.mode is Mode.PARTITIONED:
            profile = f"device.attributes['{DRA_DRIVER}'].{DRA_PROFILE} == '{claim.profile}'"
            exactly = {
                "deviceClassName": DRA_MIG_CLASS,
                "count": 1,
                "selectors": [{"cel": {"expression": profile}}],
            }
        else:
            return None
        return {"name": DRA_REQUEST, "exactly": {"allocationMode": "ExactCount", **exactly}}

    def decode_claim(
        self, keys: Mapping[str, Any], request: Mapping[str, Any] | None
    ) -> tuple[str, Claim] | None:
        """The claim a `device_request` and the container's keys make together (the
        inverse of `device_request` and `encode`)."""
        if request is None:
            return self.decode(keys)
        exactly = request.get("exactly") or {}
        credits = quantity.count(keys.get(resources.credits_resource(NVIDIA)))
        if exactly.get("deviceClassName") == DRA_GPU_CLASS:
            return NVIDIA, Claim(Mode.EXCLUSIVE, quantity.count(exactly.get("count", 1)))
        selectors = [s.get("cel", {}).get("expression", "") for s in exactly.get("selectors", [])]
        profiles = [found.group(1) for s in selectors if (found := _PROFILE.search(s))]
        if exactly.get("deviceClassName") == DRA_MIG_CLASS and profiles:
            return NVIDIA, Claim(Mode.PARTITIONED, 1, profile=profiles[0], units=credits)
        return None

    def charges(self, profile: str, credits: int) -> bool:
        return True  # the Pod carries the price of this card's profile

    def shares_bound(self, largest_node_cards: int) -> int:
        return largest_node_cards

    def refusal(self, claim: Claim) -> tuple[str, str] | None:
        return None

    def left_out(self, spec: DevicesSpec, node_labels: Mapping[str, str]) -> str:
        return ""  # a card in MIG mode is published as its MIG devices, never as a card

    def transformations(self) -> list[dict[str, Any]]:
        return _other_whole_cards()  # the credits key is charged as it is

    def device_class_mappings(self) -> list[dict[str, Any]]:
        return [{"name": DRA_DEVICES, "deviceClassNames": [DRA_GPU_CLASS, DRA_MIG_CLASS]}]


Dialect = Gpustack | Nvidia | Hami | Dra
DIALECTS: dict[str, Dialect] = {d.name: d for d in (Gpustack(), Nvidia(), Hami(), Dra())}


def of(name: str) -> Dialect:
    """The dialect a Catalog names (the Catalog's schema admits only these four)."""
    return DIALECTS.get(name) or DIALECTS[DEFAULT]


def expressing(mode: Mode, manufacturer: str) -> list[str]:
    """The dialects that can express `mode` on this manufacturer's cards."""
    return [name for name, dialect in DIALECTS.items() if mode in dialect.modes(manufacturer)]


def decode_any(keys: Mapping[str, Any]) -> tuple[str, Claim] | None:
    """A container's claim, whichever dialect wrote it (the agent does not know the Catalog's
    setting): MIG device names are the nvidia dialect's, HAMi's memory and cores keys HAMi's;
    everything else reads as gpustack's keys, which spell whole cards and shares as nvidia's."""
    if any(key.startswith(MIG_PREFIX) for key in keys):
        return DIALECTS["nvidia"].decode(keys)
    if any(key in keys for key in HAMI_KEYS):
        return DIALECTS["hami"].decode(keys)
    return DIALECTS["gpustack"].decode(keys)


def is_vgpu(resource: str, keys: Mapping[str, Any]) -> bool:
    """Whether `resource` is HAMi's vGPU count on a container that speaks HAMi: the count of
    a slice and of whole cards alike, so the container's other keys say which."""
    return resource == GPU and any(key in keys for key in HAMI_KEYS)


def card_of(device_id: str) -> str:
    """The card a kubelet device ID names: a time-slicing replica `GPU-…::3` is its card."""
    return device_id.split(REPLICA, 1)[0]


def hami_cards(annotation: str) -> list[list[tuple[str, int, int]]]:
    """`hami.io/vgpu-devices-allocated`, per container in order: (card UUID, memory MiB, cores
    percent) of each vGPU. HAMi writes `UUID,NVIDIA,mem,cores:` per device and `;` after each
    container's list (`GPU-a,NVIDIA,4915,20:;`)."""
    containers = []
    for listed in annotation.split(";")[:-1] if annotation.endswith(";") else annotation.split(";"):
        devices = []
        for device in filter(None, listed.split(":")):
            fields = device.split(",")
            if len(fields) >= 4:
                devices.append((fields[0], quantity.count(fields[2]), quantity.count(fields[3])))
        containers.append(devices)
    return containers


def mig_resource(profile: str) -> str:
    """The NVIDIA plugin's name for a MIG device: `nvidia.com/mig-3g.40gb`."""
    return MIG_PREFIX + profile


def known_profiles() -> list[str]:
    """Every partition profile of the core's MIG geometry table."""
    return sorted({p.name for profiles in mig.GEOMETRY.values() for p in profiles})


@functools.cache
def chargeable_profiles() -> dict[str, int]:
    """Each MIG profile name with one price on every card model the core knows; a name two
    models price differently is left out (Kueue cannot tell them apart by the resource name)."""
    prices: dict[str, set[int]] = {}
    for profiles in mig.GEOMETRY.values():
        for profile in profiles:
            prices.setdefault(profile.name, set()).add(mig.units(profile, profiles))
    return {name: min(found) for name, found in sorted(prices.items()) if len(found) == 1}


def price(profile: str) -> int:
    """What Kueue charges `nvidia.com/mig-<profile>` under nvidia (0: not chargeable)."""
    return chargeable_profiles().get(profile, 0)


def _replace(key: str, manufacturer: str = "", credits: int = 0) -> dict[str, Any]:
    """A Kueue transformation: `key` replaced by `credits` per unit, or ignored (no outputs)."""
    found: dict[str, Any] = {"input": key, "strategy": "Replace"}
    if manufacturer:
        found["outputs"] = {
            resources.credits_resource(manufacturer): quantity.format_decimal(credits)
        }
    return found


def _own_plugins_whole_cards(manufacturer: str, claim: Claim) -> dict[str, str]:
    """Another manufacturer's whole cards, on the key its own device plugin advertises."""
    return {resources.base_of(manufacturer): str(claim.cards)} if claim.cards else {}


def _other_whole_cards() -> list[dict[str, Any]]:
    """Other manufacturers' whole cards, under their own plugins' names."""
    return [_replace(resources.base_of(m), m, D) for m in sorted(resources.BASES) if m != NVIDIA]


def _whole(keys: Mapping[str, Any]) -> tuple[str, Claim] | None:
    for manufacturer in sorted(resources.BASES):
        cards = quantity.count(keys.get(resources.base_of(manufacturer)))
        if cards:
            return manufacturer, Claim(Mode.EXCLUSIVE, cards)
    return None
