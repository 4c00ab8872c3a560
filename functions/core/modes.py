"""The sharing mode and the claim: the one vocabulary of how cards are taken.

A card is held in exactly one `Mode` at a time, and an Instance's accelerator request is one
`Claim` in one mode. Everything that speaks of modes — the request planner, the per-card ledger,
the resource keys on a Pod, the agent's report of allocations, the Kueue transformations and the
simulator — uses these two types; nothing else spells a mode.

`MODES` is the one table of what is spelled per mode: every layer iterates over it, and what a
mode does differently (how a card takes it, how its request is validated, how its view is
summed) is written next to the layer's own rule, keyed by the mode.

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

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum, IntEnum
from types import MappingProxyType

D = 1_600_000  # credits per whole card (2⁹ × 5⁵: 1 % and one share are integers)
SHARES_PER_CARD = 10
SHARE = D // SHARES_PER_CARD  # 160,000
PERCENT = D // 100  # 16,000
UNITS = ".units"  # a slice's or a partition's credits are carried on `<base>.sliced.units`


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


class FieldKind(Enum):
    """What a request field holds, as the Instance XRD declares it (tools/modes.py)."""

    QUANTITY = "quantity"  # a count as a Kubernetes quantity (`accelerator: "2"`)
    COUNT = "count"  # an integer from 0
    PERCENT = "percent"  # an integer from 0 to 100
    NAME = "name"  # a name of at most 63 characters (a partition profile)


@dataclass(frozen=True)
class RequestField:
    """One `spec.resources` field of an Instance that asks for a mode."""

    name: str
    kind: FieldKind
    description: str


@dataclass(frozen=True)
class ModeSpec:
    """What one sharing mode is called and costs, wherever it is spelled.

    The credit rule is one line for every mode: a claim counts `cards` (whole cards, or cards
    holding one share each) or, for a mode that lives on `one_card`, its `units`; it costs
    `unit_credits` per count. The same count is what gpustack's device plugin carries on the
    charged key (`<base><suffix>`, or `<base><suffix>.units`) and what the mode's fit label
    (`fit`, a node label prefix; "" for none) is compared with, from a count of `fit_from` on.
    """

    mode: Mode
    abbreviation: str  # its part of the InstanceType's ACCELERATOR(EX/SH/SL/PT) column
    view: str  # its view in `InstanceType.status`
    fields: tuple[RequestField, ...]  # the `spec.resources` fields that ask for it
    what: str  # what a request of it takes, as a refusal says it
    suffix: str  # its resource keys' suffix on the manufacturer's base (`nvidia.com/gpu.shared`)
    unit_credits: int  # credits per count
    one_card: bool = False  # a part of one card, priced in units once the card is known
    fit: str = ""  # the fit label prefix a Pod's affinity reads (`<prefix><aKey>`)
    fit_from: int = 0  # the least count a claim's fit expression is written for

    @property
    def field(self) -> str:
        """The field that names the mode (a refusal of the mode points at it)."""
        return self.fields[0].name

    def count(self, claim: Claim) -> int:
        """What the credit rule and the fit label count of a claim: units, or cards."""
        return claim.units if self.one_card else claim.cards

    def credits(self, claim: Claim) -> int:
        return self.count(claim) * self.unit_credits

    @property
    def charged_suffix(self) -> str:
        """The suffix of the key gpustack's device plugin carries the count on."""
        return self.suffix + UNITS if self.one_card else self.suffix


MODES: Mapping[Mode, ModeSpec] = MappingProxyType(
    {
        spec.mode: spec
        for spec in (
            ModeSpec(
                Mode.EXCLUSIVE,
                abbreviation="EX",
                view="accelerator",
                fields=(
                    RequestField(
                        "accelerator",
                        FieldKind.QUANTITY,
                        "Whole cards of one node, each held alone.",
                    ),
                ),
                what="whole cards",
                suffix="",
                unit_credits=D,
                fit="exclusive-free-cards.fit.gpustack.ai/",
            ),
            ModeSpec(
                Mode.SHARED,
                abbreviation="SH",
                view="acceleratorShared",
                fields=(
                    RequestField(
                        "acceleratorShared",
                        FieldKind.COUNT,
                        "One share on each of this many distinct cards of one node.",
                    ),
                ),
                what="shares of a card",
                suffix=".shared",
                unit_credits=SHARE,
                fit="shared-free-cards.fit.gpustack.ai/",
                fit_from=2,  # a share on N ≥ 2 cards (docs/instances.md, "Fit affinity")
            ),
            ModeSpec(
                Mode.SLICED,
                abbreviation="SL",
                view="acceleratorSliced",
                fields=(
                    RequestField(
                        "acceleratorSlicedMemoryPercentage",
                        FieldKind.PERCENT,
                        "A logical slice of one card: this percentage of its memory.",
                    ),
                    RequestField(
                        "acceleratorSlicedCoresPercentage",
                        FieldKind.PERCENT,
                        "A logical slice of one card: this percentage of its cores.",
                    ),
                ),
                what="a memory slice of a card",
                suffix=".sliced",
                unit_credits=1,
                one_card=True,
                fit="sliced-max-free-units.fit.gpustack.ai/",
            ),
            ModeSpec(
                Mode.PARTITIONED,
                abbreviation="PT",
                view="acceleratorPartitioned",
                fields=(
                    RequestField(
                        "acceleratorPartitionedProfile",
                        FieldKind.NAME,
                        "A hardware (MIG) partition of one card, by profile (3g.40gb).",
                    ),
                ),
                what="a hardware partition",
                suffix=".partitioned",
                unit_credits=1,
                one_card=True,
            ),
        )
    }
)
TAKEN = tuple(MODES)  # the modes a card can be taken in, in the table's (and the column's) order


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
        spec = MODES.get(self.mode)
        return spec.credits(self) if spec else 0  # nothing for NONE

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
