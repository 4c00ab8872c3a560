"""MIG geometry as data, and the placement-aware remaining-profiles rule (reference §6).

A card in MIG mode is carved in memory slices; each profile has a fixed set of legal placements
`{start, size}`. What remains for a profile is the number of its placements that overlap no
occupied interval; a card's scalar contribution is the largest of those numbers, never the sum.

The geometry below is NVIDIA's "Supported MIG Profiles" table (media-extension `+me` and `+gfx`
profiles are left out: they are not key-safe). Memory sizes are what `nvidia-smi mig -lgip`
reports for each GPU-instance profile; the agent reports the driver's own figures where it can,
and this table fills in for fixtures and for cards whose driver does not answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from functions.core import names
from functions.core.devices import MigProfile, Placement
from functions.core.modes import D, partition_units


def _profile(
    name: str, memory_mib: int, compute: int, memory: int, starts: Iterable[int]
) -> MigProfile:
    placements = tuple(Placement(start, memory) for start in starts)
    return MigProfile(name, memory_mib, compute, memory, placements)


MANUFACTURER = "nvidia"  # whose cards the table below describes

# product (as NVML names it) → offered GPU-instance profiles
GEOMETRY: dict[str, tuple[MigProfile, ...]] = {
    "NVIDIA A100-SXM4-40GB": (
        _profile("1g.5gb", 4864, 1, 1, range(7)),
        _profile("1g.10gb", 9856, 1, 2, (0, 2, 4, 6)),
        _profile("2g.10gb", 9856, 2, 2, (0, 2, 4)),
        _profile("3g.20gb", 19968, 3, 4, (0, 4)),
        _profile("4g.20gb", 19968, 4, 4, (0,)),
        _profile("7g.40gb", 40192, 7, 8, (0,)),
    ),
    "NVIDIA A100-SXM4-80GB": (
        _profile("1g.10gb", 9728, 1, 1, range(7)),
        _profile("1g.20gb", 19968, 1, 2, (0, 2, 4, 6)),
        _profile("2g.20gb", 19968, 2, 2, (0, 2, 4)),
        _profile("3g.40gb", 40192, 3, 4, (0, 4)),
        _profile("4g.40gb", 40192, 4, 4, (0,)),
        _profile("7g.80gb", 80384, 7, 8, (0,)),
    ),
    "NVIDIA H100 80GB HBM3": (
        _profile("1g.10gb", 9984, 1, 1, range(7)),
        _profile("1g.20gb", 20096, 1, 2, (0, 2, 4, 6)),
        _profile("2g.20gb", 20096, 2, 2, (0, 2, 4)),
        _profile("3g.40gb", 40448, 3, 4, (0, 4)),
        _profile("4g.40gb", 40448, 4, 4, (0,)),
        _profile("7g.80gb", 81152, 7, 8, (0,)),
    ),
    # H200 and A30: sizes are the profile's memory-slice fraction of the card (143771 MiB and
    # 24576 MiB); the agent replaces them with the driver's figures on a real card.
    "NVIDIA H200": (
        _profile("1g.18gb", 143771 * 1 // 8, 1, 1, range(7)),
        _profile("1g.35gb", 143771 * 2 // 8, 1, 2, (0, 2, 4, 6)),
        _profile("2g.35gb", 143771 * 2 // 8, 2, 2, (0, 2, 4)),
        _profile("3g.71gb", 143771 * 4 // 8, 3, 4, (0, 4)),
        _profile("4g.71gb", 143771 * 4 // 8, 4, 4, (0,)),
        _profile("7g.141gb", 143771, 7, 8, (0,)),
    ),
    "NVIDIA A30": (
        _profile("1g.6gb", 24576 * 1 // 4, 1, 1, range(4)),
        _profile("2g.12gb", 24576 * 2 // 4, 2, 2, (0, 2)),
        _profile("4g.24gb", 24576, 4, 4, (0,)),
    ),
}
# The same silicon under the names other board variants report.
GEOMETRY["NVIDIA A100-PCIE-40GB"] = GEOMETRY["NVIDIA A100-SXM4-40GB"]
GEOMETRY["NVIDIA A100 80GB PCIe"] = GEOMETRY["NVIDIA A100-SXM4-80GB"]
GEOMETRY["NVIDIA H100 PCIe"] = GEOMETRY["NVIDIA H100 80GB HBM3"]
GEOMETRY["NVIDIA H200 NVL"] = GEOMETRY["NVIDIA H200"]


def profiles_for(product: str) -> tuple[MigProfile, ...]:
    """The offered profiles of a product, or () when it is not MIG-capable (or unknown)."""
    return GEOMETRY.get(product, ())


def is_free(placement: Placement, occupied: Iterable[Placement]) -> bool:
    return not any(placement.overlaps(taken) for taken in occupied)


def remaining_profiles(
    profiles: Iterable[MigProfile], occupied: Iterable[Placement]
) -> dict[str, int]:
    """Per profile, how many of its legal placements are still entirely free."""
    occupied = tuple(occupied)
    return {
        profile.name: sum(1 for placement in profile.placements if is_free(placement, occupied))
        for profile in profiles
    }


def capacity(profiles: Iterable[MigProfile]) -> int:
    """A card's partition capacity: the largest per-profile instance count (7 on A100/H100)."""
    return max((profile.max_count for profile in profiles), default=0)


def largest_remaining(remaining: Mapping[str, int]) -> int:
    return max(remaining.values(), default=0)


def card_slices(profiles: Iterable[MigProfile]) -> int:
    """How many memory slices the card is carved in (8 on A100/H100/H200, 4 on A30)."""
    return max((p.end for profile in profiles for p in profile.placements), default=0)


def units(profile: MigProfile, profiles: Iterable[MigProfile]) -> int:
    """What one instance of `profile` costs on a card offering `profiles` (3g.40gb: D/2)."""
    return partition_units(profile.memory_slices, card_slices(profiles))


def unpriced_units(product: str, profile: str, profile_mib: int, card_mib: int) -> int:
    """The price of a profile a status written before prices were published names (release
    0.1.0): the table's for a model it knows (by product name or its label value), else the
    profile's share of the card's VRAM."""
    for known, profiles in GEOMETRY.items():
        if product in (known, names.label_value(known)):
            found = next((p for p in profiles if p.name == profile), None)
            if found is not None:
                return units(found, profiles)
    return profile_mib * D // card_mib if card_mib else 0
