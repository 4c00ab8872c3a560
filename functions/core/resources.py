"""Accelerator resource keys: a `Claim` ↔ the keys on a container, and back.

`encode` writes a claim as the resource keys of the container that holds it (requests = limits);
`decode` reads them back (`decode(encode(m, c)) == (m, c)` for every claim). The instance
handler encodes, the agent decodes a Pod to learn what each device it holds was given for, and
the simulator's stand-ins read Pods through the same pair.

The keys are gpustack's device plugin's (reference §5.3), in their final admitted form: the
reference's Pod webhook adds `<base>.sliced.units` / `<base>.partitioned.units` and defaults the
cores percentage to 100; no webhook runs in this design, so the keys are written complete here.
Quantities are written in the canonical form the API server stores (`320k`, not `320000`), so
an observed Pod reads back exactly as it was composed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from functions.core import quantity
from functions.core.modes import MODES, Claim, Mode

# The device-plugin resource base of each manufacturer (reference §5.3); others: `<m>.com/gpu`.
BASES = {
    "amd": "amd.com/gpu",
    "ascend": "huawei.com/npu",
    "cambricon": "cambricon.com/mlu",
    "hygon": "hygon.com/dcu",
    "iluvatar": "iluvatar.com/gpu",
    "metax": "metax-tech.com/gpu",
    "mthreads": "mthreads.com/gpu",
    "nvidia": "nvidia.com/gpu",
    "thead": "alibabacloud.com/ppu",
}
# How a manufacturer names a hardware partition in its resource keys.
PARTITION_KINDS = {"nvidia": "mig", "thead": "mig", "hygon": "mig"}

# A mode's keys are its suffix on the base (core/modes.py); a slice and a partition also say
# what they are on keys of their own, and carry their credits on `.units`.
_SLICE, _PARTITION = MODES[Mode.SLICED], MODES[Mode.PARTITIONED]
SLICED, SLICED_UNITS = _SLICE.suffix, _SLICE.charged_suffix
SLICED_MEMORY_PERCENTAGE = f"{SLICED}.memory-percentage"
SLICED_MEMORY_MIB = f"{SLICED}.memory-mib"
SLICED_CORES_PERCENTAGE = f"{SLICED}.cores-percentage"
PARTITIONED, PARTITIONED_UNITS = _PARTITION.suffix, _PARTITION.charged_suffix
# The modes keyed by a count of cards alone, the most specific first (shared, then whole).
_COUNTED = tuple(spec for spec in reversed(tuple(MODES.values())) if not spec.one_card)

_BY_BASE = {base: manufacturer for manufacturer, base in BASES.items()}
_OTHER_BASE = re.compile(r"^(?P<manufacturer>[a-z0-9]([-a-z0-9]*[a-z0-9])?)\.com/gpu")
_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def base_of(manufacturer: str) -> str:
    """`nvidia` → `nvidia.com/gpu`."""
    return BASES.get(manufacturer, f"{manufacturer}.com/gpu")


def partition_key(manufacturer: str, profile: str) -> str:
    """`nvidia`, `3g.40gb` → `nvidia.com/gpu.partitioned.mig-3g.40gb`."""
    kind = PARTITION_KINDS.get(manufacturer, "mig")
    return f"{base_of(manufacturer)}{PARTITIONED}.{kind}-{profile}"


def valid_partition_key(manufacturer: str, profile: str) -> bool:
    """Whether the profile yields a legal resource name (the part after `/`: ≤ 63, name chars)."""
    name = partition_key(manufacturer, profile).rsplit("/", 1)[1]
    return len(name) <= 63 and bool(_NAME_PART.match(name))


def credits_resource(manufacturer: str) -> str:
    """The one resource a pool's ClusterQueue covers: `credits.gpustack.ai/nvidia`."""
    return f"credits.gpustack.ai/{manufacturer}"


def visibility_key(manufacturer: str) -> str:
    """The SSH sidecar's token: the device plugin resolves it to the card(s) `main` holds."""
    return f"device.gpustack.ai/{manufacturer}.visibility"


def split(key: str) -> tuple[str, str] | None:
    """(manufacturer, suffix) of an accelerator resource key; None for any other resource."""
    for base, manufacturer in _BY_BASE.items():
        if key == base or key.startswith(base + "."):
            return manufacturer, key[len(base) :]
    match = _OTHER_BASE.match(key)
    if match is None or match["manufacturer"] in BASES:
        return None
    base = base_of(match["manufacturer"])
    if key == base or key.startswith(base + "."):
        return match["manufacturer"], key[len(base) :]
    return None


def encode(manufacturer: str, claim: Claim) -> dict[str, str]:
    """The accelerator keys on the container that holds `claim` (none for `Mode.NONE`)."""
    spec = MODES.get(claim.mode)
    if spec is None:
        return {}
    base = base_of(manufacturer)
    if claim.mode is Mode.SLICED:
        keys = {base + SLICED: "1"}
        if claim.memory_percentage:
            keys[base + SLICED_MEMORY_PERCENTAGE] = str(claim.memory_percentage)
        else:
            keys[base + SLICED_MEMORY_MIB] = str(claim.memory_mib)
        keys[base + SLICED_CORES_PERCENTAGE] = str(claim.cores_percentage or 100)
        keys[base + SLICED_UNITS] = quantity.format_decimal(claim.units)
        return keys
    if claim.mode is Mode.PARTITIONED:
        return {
            base + PARTITIONED: "1",
            partition_key(manufacturer, claim.profile): "1",
            base + PARTITIONED_UNITS: quantity.format_decimal(claim.units),
        }
    return {base + spec.suffix: str(claim.cards)}  # a count of cards: whole, or a share on each


def decode(keys: Mapping[str, Any]) -> tuple[str, Claim] | None:
    """The (manufacturer, claim) a container's keys encode; None when it holds no card.

    The most specific mode present wins (partitioned, sliced, shared, whole); values are read
    as Kubernetes quantities, so `320k` and `320000` are the same. A key that does not parse
    reads as 0.
    """
    found: dict[str, dict[str, int]] = {}
    profiles: dict[str, str] = {}
    for key, value in keys.items():
        parts = split(key)
        if parts is None:
            continue
        manufacturer, suffix = parts
        found.setdefault(manufacturer, {})[suffix] = quantity.count(value)
        prefix = f"{PARTITIONED}.{PARTITION_KINDS.get(manufacturer, 'mig')}-"
        if suffix.startswith(prefix) and suffix != PARTITIONED_UNITS:
            profiles[manufacturer] = suffix[len(prefix) :]
    for manufacturer in sorted(found):
        claim = _claim(found[manufacturer], profiles.get(manufacturer, ""))
        if claim is not None:
            return manufacturer, claim
    return None


def _claim(suffixes: Mapping[str, int], profile: str) -> Claim | None:
    if profile or suffixes.get(PARTITIONED):
        return Claim(Mode.PARTITIONED, 1, profile=profile, units=suffixes.get(PARTITIONED_UNITS, 0))
    if suffixes.get(SLICED):
        claim = Claim(
            Mode.SLICED,
            1,
            memory_percentage=suffixes.get(SLICED_MEMORY_PERCENTAGE, 0),
            memory_mib=suffixes.get(SLICED_MEMORY_MIB, 0),
            cores_percentage=suffixes.get(SLICED_CORES_PERCENTAGE, 100),
            units=suffixes.get(SLICED_UNITS, 0),
        )
        return claim
    for spec in _COUNTED:
        if suffixes.get(spec.suffix):
            return Claim(spec.mode, suffixes[spec.suffix])
    return None
