"""The sharing mode and the claim: the one vocabulary of how cards are taken.

A card is held in exactly one `Mode` at a time, and an Instance's accelerator request is one
`Claim` in one mode. Everything that speaks of modes — the request planner, the per-card ledger,
the resource keys on a Pod, the agent's report of allocations, the Kueue transformations and the
simulator — uses these two types; nothing else spells a mode.

| Mode        | A claim takes                                   | Credits (D = 1,600,000 per card) |
|-------------|-------------------------------------------------|----------------------------------|
| EXCLUSIVE   | `cards` whole cards                             | cards × D                        |
| SHARED      | one share on each of `cards` distinct cards     | cards × D/10                     |
| SLICED      | a logical slice of one card (percent or MiB)    | its units                        |
| PARTITIONED | a hardware (MIG) partition of one card          | its units                        |

Units are already credits (reference §4.1): a slice of p % costs p × D/100, a slice of m MiB
costs floor(m × D / card MiB). A partition costs its share of the card's memory slices
(a 3g.40gb holds 4 of 8: D/2) — the reference's 40960-of-81920 figure, but one price per profile
on every card of a model, which a device plugin's per-profile resource name needs to be charged
exactly (docs/accounting.md, "Partition credits").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

D = 1_600_000  # credits per whole card (2⁹ × 5⁵: 1 % and one share are integers)
SHARES_PER_CARD = 10
SHARE = D // SHARES_PER_CARD  # 160,000
PERCENT = D // 100  # 16,000


class Mode(IntEnum):
    """How a card is held; the integer is what `Devices.status` writes (reference §4.3)."""

    NONE = 0
    EXCLUSIVE = 1
    SHARED = 2
    SLICED = 3
    PARTITIONED = 4

    @property
    def title(self) -> str:
        """As `Devices.spec.allocations[].mode` spells it: `Exclusive`, `Sliced`, ..."""
        return self.name.title()

    @classmethod
    def named(cls, title: str) -> Mode:
        """The mode a `Devices` allocation names; ValueError lists the valid names."""
        for mode in TAKEN:
            if mode.title == title:
                return mode
        raise ValueError(f"must be one of {', '.join(m.title for m in TAKEN)}, got {title!r}")


TAKEN = (Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.PARTITIONED)
ONE_CARD = frozenset({Mode.SLICED, Mode.PARTITIONED})  # a claim of these lives on exactly one card


def slice_units_by_percent(memory_percentage: int) -> int:
    """A logical slice by percent: 20 % → 320,000 units."""
    return memory_percentage * PERCENT


def slice_units_by_mib(memory_mib: int, card_mib: int) -> int:
    """A logical slice by MiB: floor(MiB × D / card MiB) (12288 of 24576 → 800,000)."""
    return memory_mib * D // card_mib if card_mib else 0


def partition_units(profile_slices: int, card_slices: int) -> int:
    """A partition costs its share of the card's memory slices (4 of 8 → 800,000)."""
    return profile_slices * D // card_slices if card_slices else 0


@dataclass(frozen=True)
class Claim:
    """What one container asks of one node's cards (`Mode.NONE`: no card at all).

    `cards` counts whole cards (EXCLUSIVE) or distinct cards holding one share each (SHARED); a
    slice or a partition is always on one card. `units` are the credits of a slice or a
    partition, filled in by `sized` once the card's VRAM is known.
    """

    mode: Mode = Mode.NONE
    cards: int = 0
    memory_percentage: int = 0
    memory_mib: int = 0
    cores_percentage: int = 0
    profile: str = ""
    units: int = 0

    @property
    def credits(self) -> int:
        """What Kueue charges for this claim in `credits.gpustack.ai/<manufacturer>`."""
        if self.mode is Mode.EXCLUSIVE:
            return self.cards * D
        if self.mode is Mode.SHARED:
            return self.cards * SHARE
        return self.units  # a slice or a partition; nothing for NONE

    def sized(self, card_mib: int, profile_credits: int = 0) -> Claim:
        """This claim with the units of its slice (on a card of `card_mib`) or its partition
        (the profile's published credits)."""
        if self.mode is Mode.SLICED:
            if self.memory_percentage:
                return replace(self, units=slice_units_by_percent(self.memory_percentage))
            return replace(self, units=slice_units_by_mib(self.memory_mib, card_mib))
        if self.mode is Mode.PARTITIONED:
            return replace(self, units=profile_credits)
        return self


NO_CLAIM = Claim()
