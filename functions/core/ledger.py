"""The per-card credit ledger and the per-node summaries pools are summed from (reference §4.3).

Every card is worth D = 1,600,000 credits. A card is taken in exactly one mode at a time:
Exclusive (all of it), Shared (D/10 per holder, at most 10), Sliced (its units, within the slice
slots), or Partitioned (a MIG card: one credit charge per partition, placement-aware profiles).
`CardLedger.allocate` refuses anything that does not fit, so no sequence of allocations can make
`remaining` negative or larger than the card.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace

from functions.core import mig
from functions.core.devices import (
    Accelerator,
    Allocation,
    DevicesSpec,
    MigProfile,
    Partition,
    Placement,
)
from functions.core.modes import (
    PERCENT,
    SHARE,
    SHARES_PER_CARD,
    D,
    Mode,
    slice_units_by_mib,
    slice_units_by_percent,
)

LOGICAL_SLICE_SLOTS = {"nvidia": 128, "iluvatar": 128, "ascend": 63, "cambricon": 16, "hygon": 4}
DEFAULT_SLICE_SLOTS = 16


class AllocationRefused(ValueError):
    """An allocation the card cannot take (wrong mode, too big, overlapping placement)."""


def slice_slots(manufacturer: str) -> int:
    """How many logical slices one card of this manufacturer holds."""
    return LOGICAL_SLICE_SLOTS.get(manufacturer, DEFAULT_SLICE_SLOTS)


@dataclass(frozen=True)
class CardLedger:
    id: str
    index: int
    memory_mib: int
    healthy: bool = True
    slice_slots: int = 0  # 0: the card cannot be sliced logically
    profiles: tuple[MigProfile, ...] = ()  # non-empty: a partitioned (MIG) card
    mode: Mode = Mode.NONE
    remaining: int = D
    holders: int = 0  # Shared holders or Sliced slices
    occupied: tuple[tuple[str, Placement], ...] = ()
    # The existing partitions a partition must be one of, when the device plugin serves MIG
    # devices made ahead of time (the GPU Operator's); None: partitions are made on demand.
    fixed: tuple[Partition, ...] | None = None

    @classmethod
    def for_card(
        cls, card: Accelerator, manufacturer: str, fixed_partitions: bool = False
    ) -> CardLedger:
        slots = 0 if card.partitioned else slice_slots(manufacturer)
        profiles = card.profiles if card.partitioned else ()
        fixed = card.partitions if fixed_partitions and card.partitioned else None
        return cls(
            card.uuid, card.index, card.memory_mib, card.healthy, slots, profiles, fixed=fixed
        )

    @property
    def partitioned(self) -> bool:
        return bool(self.profiles)

    @property
    def free(self) -> bool:
        """Wholly free: can take any claim its population serves."""
        return self.healthy and self.mode == Mode.NONE

    @property
    def allocated_slices(self) -> int:
        return self.holders if self.mode == Mode.SLICED else 0

    def allocate(self, allocation: Allocation) -> CardLedger:
        """This card with `allocation` taken; AllocationRefused when it cannot take it."""
        if not self.healthy:
            raise AllocationRefused(f"accelerator {self.id} is unhealthy")
        if self.partitioned and allocation.mode is not Mode.PARTITIONED:
            raise AllocationRefused(
                f"accelerator {self.id} is in MIG mode and serves only partitions"
            )
        return _TAKE[allocation.mode](self, allocation)

    def _exclusive(self, allocation: Allocation) -> CardLedger:
        self._require_mode(allocation, shareable=False)
        return replace(self, mode=Mode.EXCLUSIVE, remaining=0, holders=1)

    def _share(self, allocation: Allocation) -> CardLedger:
        self._require_mode(allocation)
        if self.holders >= SHARES_PER_CARD:
            raise AllocationRefused(f"accelerator {self.id} has no free share")
        return replace(
            self, mode=Mode.SHARED, remaining=self.remaining - SHARE, holders=self.holders + 1
        )

    def _require_mode(self, allocation: Allocation, shareable: bool = True) -> None:
        """The card must be free, or (a shareable mode) already held in the same mode."""
        if self.mode is not Mode.NONE and (self.mode is not allocation.mode or not shareable):
            raise AllocationRefused(
                f"accelerator {self.id} is held {self.mode.title.lower()}, "
                f"it cannot also be {allocation.mode.title.lower()}"
            )

    def _slice(self, allocation: Allocation) -> CardLedger:
        self._require_mode(allocation)
        if self.slice_slots == 0:
            raise AllocationRefused(f"accelerator {self.id} cannot be sliced")
        if self.holders >= self.slice_slots:
            raise AllocationRefused(f"accelerator {self.id} has no free slice slot")
        if allocation.memory_percentage:
            if not 0 < allocation.memory_percentage <= 100:
                raise AllocationRefused("memoryPercentage must be within (0, 100]")
            units = slice_units_by_percent(allocation.memory_percentage)
        elif allocation.memory_mib:
            units = slice_units_by_mib(allocation.memory_mib, self.memory_mib)
        else:
            raise AllocationRefused("a slice needs memoryPercentage or memoryMiB")
        if not 0 < units <= self.remaining:
            raise AllocationRefused(
                f"accelerator {self.id} has {self.remaining} credits left, the slice needs {units}"
            )
        return replace(
            self, mode=Mode.SLICED, remaining=self.remaining - units, holders=self.holders + 1
        )

    def _partition(self, allocation: Allocation) -> CardLedger:
        if not self.partitioned:
            raise AllocationRefused(f"accelerator {self.id} is not in MIG mode")
        profile = next((p for p in self.profiles if p.name == allocation.profile), None)
        if profile is None:
            offered = ", ".join(p.name for p in self.profiles)
            raise AllocationRefused(f"profile {allocation.profile!r} is not offered ({offered})")
        placement = allocation.placement or self._first_free(profile)
        if placement not in profile.placements:
            raise AllocationRefused(f"{placement} is not a legal placement of {profile.name}")
        if self.fixed is not None and Partition(profile.name, placement) not in self.fixed:
            raise AllocationRefused(f"accelerator {self.id} has no {profile.name} at {placement}")
        if not mig.is_free(placement, (taken for _, taken in self.occupied)):
            raise AllocationRefused(f"{placement} of {profile.name} overlaps a partition")
        units = mig.units(profile, self.profiles)
        if units > self.remaining:
            raise AllocationRefused(f"accelerator {self.id} has no credits left for {profile.name}")
        return replace(
            self,
            mode=Mode.PARTITIONED,
            remaining=self.remaining - units,
            holders=self.holders + 1,
            occupied=(*self.occupied, (profile.name, placement)),
        )

    def _first_free(self, profile: MigProfile) -> Placement:
        taken = [placement for _, placement in self.occupied]
        for placement in self._placements(profile):
            if mig.is_free(placement, taken):
                return placement
        raise AllocationRefused(f"no free placement of {profile.name} on accelerator {self.id}")

    def _placements(self, profile: MigProfile) -> tuple[Placement, ...]:
        if self.fixed is None:
            return profile.placements
        return tuple(p.placement for p in self.fixed if p.profile == profile.name)

    def remaining_profiles(self) -> dict[str, int]:
        """Per offered profile, how many more instances fit: free legal placements, or (fixed
        partitions) the existing instances of it no allocation holds."""
        taken = tuple(placement for _, placement in self.occupied)
        if self.fixed is None:
            return mig.remaining_profiles(self.profiles, taken)
        return {
            profile.name: sum(
                1 for p in self.fixed if p.profile == profile.name and p.placement not in taken
            )
            for profile in self.profiles
        }

    def allocated_profiles(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name, _ in self.occupied:
            counts[name] = counts.get(name, 0) + 1
        return counts

    def slice_percent(self) -> int:
        """Percent points of this card a new logical slice could still take (0 when it can't)."""
        can_slice = self.slice_slots and self.holders < self.slice_slots
        if not (self.healthy and can_slice and self.mode in (Mode.NONE, Mode.SLICED)):
            return 0
        return self.remaining // PERCENT

    def free_shares(self) -> int:
        if not self.healthy or self.partitioned or self.mode not in (Mode.NONE, Mode.SHARED):
            return 0
        return self.remaining // SHARE


_TAKE: dict[Mode, Callable[[CardLedger, Allocation], CardLedger]] = {
    Mode.EXCLUSIVE: CardLedger._exclusive,
    Mode.SHARED: CardLedger._share,
    Mode.SLICED: CardLedger._slice,
    Mode.PARTITIONED: CardLedger._partition,
}


@dataclass(frozen=True)
class Conflict:
    """An observed allocation the ledger could not place: reported, never silently dropped."""

    pod: str
    device: str
    reason: str


@dataclass(frozen=True)
class GroupLedger:
    key: str  # the aKey
    id: str
    manufacturer: str
    cards: tuple[CardLedger, ...]


@dataclass(frozen=True)
class NodeLedger:
    groups: tuple[GroupLedger, ...]
    conflicts: tuple[Conflict, ...] = ()


def build_ledger(spec: DevicesSpec, fixed_partitions: bool = False) -> NodeLedger:
    """Seed every card free, then apply the node's observed allocations in order.

    `fixed_partitions`: the device plugin serves only the MIG devices that exist (the GPU
    Operator's), so a MIG card offers its free existing instances, not its free placements."""
    cards: dict[str, CardLedger] = {}
    for group in spec.groups:
        for device in group.devices:
            cards[device.uuid] = CardLedger.for_card(device, group.manufacturer, fixed_partitions)
    conflicts: list[Conflict] = []
    for allocation in spec.allocations:
        card = cards.get(allocation.device)
        if card is None:
            conflicts.append(Conflict(allocation.pod, allocation.device, "unknown accelerator"))
            continue
        try:
            cards[allocation.device] = card.allocate(allocation)
        except AllocationRefused as refused:
            conflicts.append(Conflict(allocation.pod, allocation.device, str(refused)))
    return NodeLedger(
        groups=tuple(
            GroupLedger(g.key, g.id, g.manufacturer, tuple(cards[c.uuid] for c in g.devices))
            for g in spec.groups
        ),
        conflicts=tuple(conflicts),
    )


@dataclass(frozen=True, slots=True)  # slots: pools read thousands, a column at a time
class GroupSummary:
    """One node's contribution to every view of the pools its cards belong to."""

    total_cards: int = 0  # every card of the model, MIG ones too
    cards: int = 0  # unpartitioned cards
    free_cards: int = 0
    free_shares: int = 0
    cards_with_free_share: int = 0
    logical_cards: int = 0
    free_slice_percent: int = 0
    max_card_slice_percent: int = 0
    max_card_slice_units: int = 0
    partition_capacity: int = 0
    partition_remaining: int = 0
    allocated_profiles: dict[str, int] = field(default_factory=dict)
    remaining_profiles: dict[str, int] = field(default_factory=dict)


# GroupSummary's whole-number figures, by name (the profile counts are maps).
SUMMARY_COUNTS = tuple(f.name for f in fields(GroupSummary) if f.type in (int, "int"))


def summarize(cards: Iterable[CardLedger]) -> GroupSummary:
    counts = dict.fromkeys(SUMMARY_COUNTS, 0)
    allocated: dict[str, int] = {}
    remaining: dict[str, int] = {}
    for card in cards:
        counts["total_cards"] += 1
        if card.partitioned:
            card_remaining = card.remaining_profiles() if card.healthy else {}
            counts["partition_capacity"] += mig.capacity(card.profiles)
            counts["partition_remaining"] += mig.largest_remaining(card_remaining)
            for name in (p.name for p in card.profiles):
                remaining[name] = remaining.get(name, 0) + card_remaining.get(name, 0)
            for name, count in card.allocated_profiles().items():
                allocated[name] = allocated.get(name, 0) + count
            continue
        counts["cards"] += 1
        counts["free_cards"] += card.free
        shares = card.free_shares()
        counts["free_shares"] += shares
        counts["cards_with_free_share"] += shares > 0
        if card.slice_slots:
            counts["logical_cards"] += 1
            percent = card.slice_percent()
            counts["free_slice_percent"] += percent
            counts["max_card_slice_percent"] = max(counts["max_card_slice_percent"], percent)
            if percent:
                counts["max_card_slice_units"] = max(counts["max_card_slice_units"], card.remaining)
    return GroupSummary(**counts, allocated_profiles=allocated, remaining_profiles=remaining)


def summarize_node(ledger: NodeLedger) -> dict[str, GroupSummary]:
    """Per aKey, this node's summary."""
    return {group.key: summarize(group.cards) for group in ledger.groups}
