"""A device plugin's part: what a node advertises for its cards, and which devices a container
gets (the kubelet's Allocate), with the device IDs the kubelet's pod-resources API reports.

`GpustackPlugin` plays gpustack's own device plugin (reference §2.6, §4.3): whole cards
`<base>`, ten ownership shares per card `<base>.shared`, logical slices `<base>.sliced` costed by
`<base>.sliced.units` (1,600,000 per card), hardware partitions `<base>.partitioned` created on
demand at a free placement of the requested profile; a card is held in one mode at a time.
Partition keys count what is held plus what is still free, so they shrink as partitions are
taken (§2.6); an unhealthy card's keys are left out, in MIG mode or not.
Device IDs: the card's UUID, `<UUID>::<n>` for a share, the MIG device's UUID for a partition.
The plugin keeps its own books from the grants it made; it never reads the product's ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

PER_CARD = 1_600_000  # the plugin's units per card (reference §4.1)
SHARES = 10  # ownership shares per card
SLICE_SLOTS = {"nvidia": 128, "iluvatar": 128, "ascend": 63, "cambricon": 16, "hygon": 4}
DEFAULT_SLICE_SLOTS = 16
VISIBILITY_TOKENS = 512

# The plugin's resource names, spelled here as the reference gives them (§2.1's table of known
# manufacturers, §2.6, §5.3; partitions are `mig-<profile>` for NVIDIA, T-Head and Hygon, §6):
# on purpose not taken from the product's key encoder, so a wrong key on either side shows.
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
PARTITION_KINDS = {"nvidia": "mig", "thead": "mig", "hygon": "mig"}
SHARED, SLICED, PARTITIONED = ".shared", ".sliced", ".partitioned"
SLICED_UNITS, PARTITIONED_UNITS = ".sliced.units", ".partitioned.units"
SLICED_MEMORY_PERCENTAGE = ".sliced.memory-percentage"
SLICED_CORES_PERCENTAGE = ".sliced.cores-percentage"
SLICED_MEMORY_MIB = ".sliced.memory-mib"


def base_of(manufacturer: str) -> str:
    """A manufacturer's extended-resource name; an unknown one's `<m>.com/gpu` (§2.1)."""
    return BASES.get(manufacturer, f"{manufacturer}.com/gpu")


def partition_key(manufacturer: str, profile: str) -> str:
    kind = PARTITION_KINDS.get(manufacturer, "mig")
    return f"{base_of(manufacturer)}{PARTITIONED}.{kind}-{profile}"


def visibility_key(manufacturer: str) -> str:
    """The SSH sidecar's token (§2.6)."""
    return f"device.gpustack.ai/{manufacturer}.visibility"


@dataclass(frozen=True)
class Placement:
    start: int
    size: int

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True)
class Card:
    """One card as the node's hardware reports it (`Devices.spec`, the simulated NVML)."""

    uuid: str
    index: int
    manufacturer: str
    memory_mib: int
    healthy: bool
    profiles: Mapping[str, tuple[Placement, ...]]  # MIG mode: offered profile → placements
    partitions: tuple[tuple[str, Placement, str], ...] = ()  # existing (profile, placement, uuid)

    @property
    def mig(self) -> bool:
        return bool(self.profiles)


@dataclass(frozen=True)
class Grant:
    """What Allocate gave one container for one resource."""

    resource: str
    device_ids: tuple[str, ...]
    card: str
    mode: str  # exclusive | shared | sliced | partitioned
    units: int = 0
    placement: Placement | None = None
    profile: str = ""
    created: bool = False  # a MIG instance the plugin made for this grant (and unmakes after)


@dataclass(frozen=True)
class Allocate:
    """The kubelet's Allocate call for one container of a Pod bound to `node`."""

    node: Mapping[str, Any]
    cards: list[Card]
    held: list[Grant]  # what the node's containers already hold
    pod: Mapping[str, Any]
    container: str
    wanted: Mapping[str, int]  # the container's limits


class DevicePlugin(Protocol):
    """One device plugin: what it advertises on a node, and Allocate for one container."""

    def advertise(self, node: Mapping[str, Any], cards: list[Card]) -> dict[str, int]: ...

    def allocate(self, call: Allocate) -> list[Grant] | str: ...


def cards_of(devices: Mapping[str, Any] | None) -> list[Card]:
    """The node's cards from its Devices object's hardware facts."""
    cards = []
    for vendor in ((devices or {}).get("spec") or {}).get("accelerators") or []:
        for card in vendor.get("devices") or []:
            mig = card.get("mig") or {}
            profiles = {
                p["name"]: tuple(
                    Placement(x["start"], x["size"]) for x in p.get("placements") or []
                )
                for p in (mig.get("profiles") or [] if mig.get("enabled") else [])
            }
            partitions = tuple(
                (
                    p["profile"],
                    Placement(p["placement"]["start"], p["placement"]["size"]),
                    p.get("uuid", ""),
                )
                for p in mig.get("partitions") or []
                if p.get("placement")
            )
            cards.append(
                Card(
                    uuid=card["uuid"],
                    index=card.get("index", 0),
                    manufacturer=vendor["manufacturer"],
                    memory_mib=card.get("memoryMiB", 0),
                    healthy=card.get("healthy", True),
                    profiles=profiles,
                    partitions=partitions,
                )
            )
    return sorted(cards, key=lambda c: c.index)


@dataclass
class _Books:
    """One card's use, from the grants on it."""

    mode: str = ""
    holders: int = 0
    units: int = 0
    occupied: list[Placement] = field(default_factory=list)


class GpustackPlugin:
    """gpustack's device plugin (the `gpustack` dialect)."""

    def advertise(self, node: Mapping[str, Any], cards: list[Card]) -> dict[str, int]:
        found: dict[str, int] = {}
        for card in cards:
            base = base_of(card.manufacturer)
            for key, amount in self._tokens(card, base).items():
                found[key] = found.get(key, 0) + amount
            found[visibility_key(card.manufacturer)] = (
                found.get(visibility_key(card.manufacturer), 0) + VISIBILITY_TOKENS
            )
        return found

    def _tokens(self, card: Card, base: str) -> dict[str, int]:
        if not card.healthy:
            return {}  # Allocate gives a faulty card to no one, in MIG mode or not
        if card.mig:
            return _partition_tokens(card, base)
        slots = SLICE_SLOTS.get(card.manufacturer, DEFAULT_SLICE_SLOTS)
        return {
            base: 1,
            base + SHARED: SHARES,
            base + SLICED: slots,
            base + SLICED_UNITS: PER_CARD,
            base + SLICED_MEMORY_PERCENTAGE: 100,
            base + SLICED_CORES_PERCENTAGE: slots * 100,
            base + SLICED_MEMORY_MIB: card.memory_mib,
        }

    def allocate(self, call: Allocate) -> list[Grant] | str:
        """Grants for one container's requests of this plugin's resources; or why not."""
        books = _books(call.held)
        grants: list[Grant] = []
        for card_base, suffixes in _requests_by_base(call.wanted, call.cards).items():
            manufacturer, base = card_base
            mine = [c for c in call.cards if c.manufacturer == manufacturer]
            found = self._grant(mine, books, base, suffixes)
            if isinstance(found, str):
                return found
            grants += found
        return grants

    def _grant(
        self, cards: list[Card], books: dict[str, _Books], base: str, wanted: Mapping[str, int]
    ) -> list[Grant] | str:
        if wanted.get(PARTITIONED):
            return _partition(cards, books, base, wanted)
        if wanted.get(SLICED):
            return _slice(cards, books, base, wanted.get(SLICED_UNITS, 0))
        if wanted.get(SHARED):
            return _shares(cards, books, base, wanted[SHARED])
        if wanted.get(""):
            return _whole(cards, books, base, wanted[""])
        return []


def _partition_tokens(card: Card, base: str) -> dict[str, int]:
    """A MIG-mode card's keys (reference §2.6, §6). Each profile counts its partitions held plus
    its placements still free; the held ones stay in because the scheduler subtracts the bound
    Pods' requests from what is advertised. `<base>.partitioned` counts every partition held
    plus the largest free count of any one profile: placements overlap, so a card's free
    partitions are never the sum over profiles.

    What is held is what the plugin granted: it makes a MIG instance for each grant and the
    instance goes with the Pod (`Grant.created`, the kubelet's checkpoint), so the instances on
    the card are its books."""
    held, taken = [profile for profile, _, _ in card.partitions], _existing(card)
    free = {name: len(_free_placements(card, name, taken)) for name in card.profiles}
    tokens = {
        base + PARTITIONED: len(held) + max(free.values(), default=0),
        base + PARTITIONED_UNITS: PER_CARD,
    }
    for name, count in free.items():
        tokens[partition_key(card.manufacturer, name)] = held.count(name) + count
    return tokens


def _existing(card: Card) -> list[Placement]:
    """Where the card's MIG instances sit."""
    return [placement for _, placement, _ in card.partitions]


def _free_placements(card: Card, profile: str, taken: list[Placement]) -> list[Placement]:
    """The profile's placements that overlap no partition taken (reference §6)."""
    return [p for p in card.profiles.get(profile, ()) if not any(p.overlaps(t) for t in taken)]


def _requests_by_base(
    wanted: Mapping[str, int], cards: Iterable[Card]
) -> dict[tuple[str, str], dict[str, int]]:
    """The container's accelerator requests by (manufacturer, base): suffix → amount."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    for manufacturer in sorted({c.manufacturer for c in cards}):
        base = base_of(manufacturer)
        for key, amount in wanted.items():
            if key == base or key.startswith(base + "."):
                found.setdefault((manufacturer, base), {})[key[len(base) :]] = amount
    return found


def _books(held: Iterable[Grant]) -> dict[str, _Books]:
    books: dict[str, _Books] = {}
    for grant in held:
        book = books.setdefault(grant.card, _Books())
        book.mode = grant.mode
        book.holders += 1
        book.units += grant.units
        if grant.placement is not None:
            book.occupied.append(grant.placement)
    return books


def _usable(card: Card, books: dict[str, _Books], mode: str) -> bool:
    book = books.get(card.uuid, _Books())
    return card.healthy and not card.mig and book.mode in ("", mode)


def _whole(cards: list[Card], books: dict[str, _Books], base: str, count: int) -> list[Grant] | str:
    free = [c for c in cards if _usable(c, books, "exclusive") and not books.get(c.uuid)]
    if len(free) < count:
        return f"{base}: {count} whole cards requested, {len(free)} free"
    return [Grant(base, (c.uuid,), c.uuid, "exclusive") for c in free[:count]]


def _shares(
    cards: list[Card], books: dict[str, _Books], base: str, count: int
) -> list[Grant] | str:
    open_cards = [
        c
        for c in cards
        if _usable(c, books, "shared") and books.get(c.uuid, _Books()).holders < SHARES
    ]
    if len(open_cards) < count:
        return f"{base}{SHARED}: a share on {count} distinct cards requested, {len(open_cards)} have one"
    grants = []
    for card in open_cards[:count]:
        replica = books.get(card.uuid, _Books()).holders
        grants.append(Grant(base + SHARED, (f"{card.uuid}::{replica}",), card.uuid, "shared"))
    return grants


def _slice(cards: list[Card], books: dict[str, _Books], base: str, units: int) -> list[Grant] | str:
    def free_units(card: Card) -> int:
        return PER_CARD - books.get(card.uuid, _Books()).units

    slots = SLICE_SLOTS
    fitting = [
        c
        for c in cards
        if _usable(c, books, "sliced")
        and books.get(c.uuid, _Books()).holders < slots.get(c.manufacturer, DEFAULT_SLICE_SLOTS)
        and 0 < units <= free_units(c)
    ]
    if not fitting:
        return f"{base}{SLICED}: no card has {units} units and a slice slot free"
    card = min(fitting, key=lambda c: (free_units(c), c.index))  # the fullest that still fits
    return [Grant(base + SLICED, (card.uuid,), card.uuid, "sliced", units=units)]


def _partition(
    cards: list[Card], books: dict[str, _Books], base: str, wanted: Mapping[str, int]
) -> list[Grant] | str:
    prefix = PARTITIONED + "."
    profiles = [
        s[len(prefix) :].split("-", 1)[1]
        for s in wanted
        if s.startswith(prefix) and s != PARTITIONED_UNITS
    ]
    if len(profiles) != 1:
        return f"{base}{PARTITIONED}: exactly one profile must be requested, got {profiles}"
    profile = profiles[0]
    for card in (c for c in cards if c.healthy):
        taken = _existing(card) + books.get(card.uuid, _Books()).occupied
        free = _free_placements(card, profile, taken)
        if free:
            units = wanted.get(PARTITIONED_UNITS, 0)
            return [_made_partition(card, base, profile, free[0], units)]
    return f"{base}{PARTITIONED}: no card has a free placement of {profile}"


def _made_partition(card: Card, base: str, profile: str, placement: Placement, units: int) -> Grant:
    """The grant of a MIG instance the plugin makes at `placement` (and unmakes after)."""
    mig_uuid = f"MIG-{card.uuid.removeprefix('GPU-')}-{placement.start}-{profile}"
    return Grant(
        base + PARTITIONED,
        (mig_uuid,),
        card.uuid,
        "partitioned",
        units=units,
        placement=placement,
        profile=profile,
        created=True,
    )
