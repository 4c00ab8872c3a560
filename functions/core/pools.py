"""Pools and their views: which nodes a pool covers, an accelerator view per mode, and CPU.

A pool is identified by (os, arch, aKey?, gKey?) — gKey only when pools are CPU-aware. Sibling
InstanceTypes with the same identity (a derived pool and a custom type) read the same nodes and
so show the same figures: one accelerator, two consistent views. Views are summed from per-node
summaries; pools never walk cards.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from functions.core import mig, names
from functions.core.devices import AcceleratorGroup, Cpu, DevicesSpec
from functions.core.ledger import (
    GroupSummary,
    NodeLedger,
    build_ledger,
    slice_slots,
    summarize_node,
)
from functions.core.modes import MODES, SHARES_PER_CARD, Mode


@dataclass(frozen=True)
class ProfileFacts:
    name: str
    memory_mib: int
    count: int  # the most instances of it one card holds
    credits: int  # what one instance costs (mig.units)


@dataclass(frozen=True)
class GroupFacts:
    """What the cards of one model on a node are: the pool's status detail is made of these."""

    manufacturer: str
    product: str
    memory_mib: int
    cores: int = 0
    compute_capability: str = ""
    family: str = ""
    driver_version: str = ""
    runtime_version: str = ""
    slice_slots: int = 0  # per logically sliceable card
    profiles: tuple[ProfileFacts, ...] = ()

    @classmethod
    def of(cls, group: AcceleratorGroup) -> GroupFacts:
        profiles = {
            p.name: (p, mig.units(p, card.profiles))
            for card in group.devices
            if card.partitioned
            for p in card.profiles
        }
        logical = any(not card.partitioned for card in group.devices)
        return cls(
            manufacturer=group.manufacturer,
            product=group.product,
            memory_mib=group.memory_mib,
            cores=group.cores,
            compute_capability=group.compute_capability,
            family=group.family,
            driver_version=group.driver_version,
            runtime_version=group.runtime_version,
            slice_slots=slice_slots(group.manufacturer) if logical else 0,
            profiles=tuple(
                ProfileFacts(p.name, p.memory_mib, p.max_count, credits)
                for p, credits in sorted(
                    profiles.values(),
                    key=lambda found: (
                        found[0].memory_slices,
                        found[0].compute_slices,
                        found[0].name,
                    ),
                )
            ),
        )


@dataclass(frozen=True)
class NodeSummary:
    """What a pool needs to know about one node, precomputed once per Devices object.

    `facts` and `cpu` describe the hardware; pools need them from a node or two only, so a
    summary read back from a status may load them lazily (`load_details`).
    """

    node: str
    os: str
    arch: str
    g_key: str
    managed: bool
    cpu_cores: int
    groups: Mapping[str, GroupSummary] = field(default_factory=dict)
    load_details: Callable[[], tuple[Mapping[str, GroupFacts], Cpu]] | None = field(
        default=None, compare=False, repr=False
    )
    # Once read back from its published form (core/status/summary.py): its version, which a
    # reader names when newer than it knows, and the digest of the facts it names ("": none).
    version: int = field(default=0, compare=False, repr=False)
    facts_id: str = field(default="", compare=False, repr=False)

    @functools.cached_property
    def _details(self) -> tuple[Mapping[str, GroupFacts], Cpu]:
        return self.load_details() if self.load_details else ({}, Cpu())

    @property
    def facts(self) -> Mapping[str, GroupFacts]:
        return self._details[0]

    @property
    def cpu(self) -> Cpu:
        return self._details[1]

    # Cached: pools ask for these of every node, and a summary may serve many requests.
    @functools.cached_property
    def group_cards(self) -> dict[str, int]:
        """Cards per accelerator key, MIG cards included."""
        return {key: group.total_cards for key, group in self.groups.items()}

    @functools.cached_property
    def accelerated(self) -> bool:
        return any(group.total_cards for group in self.groups.values())

    @functools.cached_property
    def shape(self) -> Shape:
        cards = tuple(self.group_cards.items())
        return _shape(self.managed, self.os, self.arch, self.g_key, self.cpu_cores, cards)


@dataclass(frozen=True, eq=False)
class Shape:
    """All that decides which pools and flavors a node falls in (not its name, nor what is
    free on it). Thousands of nodes share a handful of shapes, so what follows from a shape is
    worked out once per shape. Nodes of equal shapes share one object (`_shape`), compared
    and hashed by identity: grouping thousands of nodes by shape reads no field of it."""

    managed: bool
    os: str
    arch: str
    g_key: str
    cpu_cores: int
    group_cards: tuple[tuple[str, int], ...]  # NodeSummary.group_cards' items, in its order

    def takes_cpu(self, mixed_on_node: bool) -> bool:
        """Does a CPU pool (and a CPU flavor) take capacity from nodes of this shape?"""
        accelerated = any(count for _, count in self.group_cards)
        return self.cpu_cores > 0 and (mixed_on_node or not accelerated)


# Bounded: past it, an equal shape may be a second object, which costs time, never a result.
@functools.lru_cache(maxsize=4096)
def _shape(
    managed: bool, os: str, arch: str, g_key: str, cores: int, cards: tuple[tuple[str, int], ...]
) -> Shape:
    return Shape(managed, os, arch, g_key, cores, cards)


def summarize_devices(
    spec: DevicesSpec,
    node_management_manual: bool = False,
    ledger: NodeLedger | None = None,
    fixed_partitions: bool = False,
    left_out: bool = False,
) -> NodeSummary:
    """One node's summary; `fixed_partitions` as `build_ledger` reads it. A node `left_out`
    (its device plugin cannot serve it as claims are written) is not managed: no pool and no
    flavor takes it."""
    return NodeSummary(
        node=spec.node,
        os=spec.os,
        arch=spec.arch,
        g_key=spec.g_key,
        managed=spec.is_managed(node_management_manual) and not left_out,
        cpu_cores=spec.cpu.cores,
        groups=summarize_node(ledger or build_ledger(spec, fixed_partitions)),
        load_details=lambda: ({group.key: GroupFacts.of(group) for group in spec.groups}, spec.cpu),
    )


@dataclass(frozen=True, order=True)
class PoolKey:
    os: str
    arch: str
    a_key: str | None = None  # None: the CPU pool
    g_key: str | None = None  # None: collapsed across CPUs (awareness off)

    @classmethod
    def for_instance_type(cls, spec: Mapping) -> PoolKey:
        """The pool an InstanceType spec selects (derived or admin-authored alike)."""
        general = spec.get("generalGroup") or names.GENERIC
        return cls(
            os=spec.get("os", ""),
            arch=spec.get("arch", ""),
            a_key=spec.get("acceleratorGroup") if spec.get("acceleratable") else None,
            g_key=None if general == names.GENERIC else general,
        )

    @property
    def name(self) -> str:
        return names.pool_name(self.os, self.arch, self.a_key, self.g_key)

    @property
    def acceleratable(self) -> bool:
        return self.a_key is not None

    def covers(self, node: NodeSummary, mixed_on_node: bool = True) -> bool:
        """Does this pool take capacity from `node`?"""
        return self in shape_pools(node.shape, self.g_key is not None, mixed_on_node)

    def covered(
        self, nodes: Iterable[NodeSummary], mixed_on_node: bool = True
    ) -> list[NodeSummary]:
        """The nodes this pool takes capacity from: `covers`, decided once per shape."""
        nodes = list(nodes)
        shapes = set(map(_SHAPE, nodes))
        aware = self.g_key is not None
        covering = {s for s in shapes if self in shape_pools(s, aware, mixed_on_node)}
        if covering == shapes:  # the usual: a pool's request selects the pool's nodes
            return nodes
        return list(itertools.compress(nodes, map(covering.__contains__, map(_SHAPE, nodes))))


_SHAPE = operator.attrgetter("shape")


@functools.lru_cache(maxsize=4096)  # a cluster has a handful of shapes; a bound all the same
def shape_pools(shape: Shape, aware: bool, mixed_on_node: bool) -> tuple[PoolKey, ...]:
    """The derived pools the nodes of one shape give rise to, by accelerator key, then CPU."""
    if not shape.managed:
        return ()
    os, arch, g_key = shape.os, shape.arch, shape.g_key if aware else None
    cards = sorted(shape.group_cards)
    pools = [_pool(os, arch, a_key, g_key) for a_key, count in cards if count > 0]
    if shape.takes_cpu(mixed_on_node):
        pools.append(_pool(os, arch, None, g_key))
    return tuple(pools)


@functools.lru_cache(maxsize=4096)
def _pool(os: str, arch: str, a_key: str | None, g_key: str | None) -> PoolKey:
    """One object for each pool, whichever shapes give rise to it: a set of the pools of
    thousands of nodes then finds each by identity, without calling PoolKey.__eq__."""
    return PoolKey(os, arch, a_key, g_key)


@dataclass(frozen=True)
class View:
    capacity: int = 0
    once_max: int = 0
    remaining: int = 0

    @property
    def display(self) -> str:
        return f"{self.once_max}/{self.remaining}"

    def as_status(self) -> dict[str, str]:
        return {
            "capacity": str(self.capacity),
            "onceMaxRequest": str(self.once_max),
            "remaining": str(self.remaining),
        }


@dataclass(frozen=True)
class PartitionView(View):
    allocated_profiles: Mapping[str, int] = field(default_factory=dict)
    remaining_profiles: Mapping[str, int] = field(default_factory=dict)

    def as_status(self) -> dict:
        status: dict = super().as_status()
        status["allocatedProfiles"] = [
            {"name": name, "count": count}
            for name, count in sorted(self.allocated_profiles.items())
            if count
        ]
        status["remainingProfiles"] = [
            {"name": name, "count": count}
            for name, count in sorted(self.remaining_profiles.items())
        ]
        return status


@dataclass(frozen=True)
class AcceleratorViews:
    """A pool's view of each sharing mode, in the table's order (core/modes.py)."""

    views: Mapping[Mode, View] = field(default_factory=lambda: _EMPTY)

    def __getitem__(self, mode: Mode) -> View:
        return self.views[mode]

    def offering(self, modes: Collection[Mode]) -> AcceleratorViews:
        """These views with each mode the pool does not offer reading 0/0 (the cluster's
        device plugin cannot express it), so no column shows what no Instance can take."""
        return AcceleratorViews(
            {mode: view if mode in modes else _EMPTY[mode] for mode, view in self.views.items()}
        )

    @property
    def display(self) -> str:
        """The ACCELERATOR(EX/SH/SL/PT) column: `1/1 1/10 100/100 0/0`."""
        return " ".join(self.views[mode].display for mode in MODES)


# Each figure of a node's group, read in C for a whole column: no object per node is made.
_CARDS, _FREE, _SHARES, _WITH_SHARE, _LOGICAL, _SLICED, _ONCE_SLICED, _PT_CAP, _PT_REM = (
    operator.attrgetter(name)
    for name in (
        "cards",
        "free_cards",
        "free_shares",
        "cards_with_free_share",
        "logical_cards",
        "free_slice_percent",
        "max_card_slice_percent",
        "partition_capacity",
        "partition_remaining",
    )
)
_ALLOCATED = operator.attrgetter("allocated_profiles")
_REMAINING = operator.attrgetter("remaining_profiles")


def profile_totals(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Partitions by profile, summed over the groups' counts (most groups have none)."""
    totals: dict[str, int] = {}
    for found in filter(None, counts):
        for name, count in found.items():
            totals[name] = totals.get(name, 0) + count
    return totals


def _exclusive_view(summaries: list[GroupSummary]) -> View:
    free = list(map(_FREE, summaries))
    return View(sum(map(_CARDS, summaries)), max(free, default=0), sum(free))


def _shared_view(summaries: list[GroupSummary]) -> View:
    """The card-count reading: once-max is the most cards on one node that still have a free
    share (one free A10G reads `1/10`, not `10/10`)."""
    return View(
        sum(map(_CARDS, summaries)) * SHARES_PER_CARD,
        max(map(_WITH_SHARE, summaries), default=0),
        sum(map(_SHARES, summaries)),
    )


def _sliced_view(summaries: list[GroupSummary]) -> View:
    return View(
        sum(map(_LOGICAL, summaries)) * 100,
        max(map(_ONCE_SLICED, summaries), default=0),
        sum(map(_SLICED, summaries)),
    )


def _partitioned_view(summaries: list[GroupSummary]) -> PartitionView:
    """Once-max is 1 while any partitioned card can host an instance."""
    remaining = sum(map(_PT_REM, summaries))
    return PartitionView(
        sum(map(_PT_CAP, summaries)),
        int(remaining > 0),
        remaining,
        profile_totals(map(_ALLOCATED, summaries)),
        profile_totals(map(_REMAINING, summaries)),
    )


# How each mode's view is summed from the nodes' summaries (of none: the empty view).
_VIEWS: Mapping[Mode, Callable[[list[GroupSummary]], View]] = {
    Mode.EXCLUSIVE: _exclusive_view,
    Mode.SHARED: _shared_view,
    Mode.SLICED: _sliced_view,
    Mode.PARTITIONED: _partitioned_view,
}
_EMPTY: Mapping[Mode, View] = MappingProxyType({mode: _VIEWS[mode]([]) for mode in MODES})


def accelerator_views(
    summaries: Iterable[GroupSummary], draining: bool = False
) -> AcceleratorViews:
    """Sum node summaries into the view of each mode (a draining queue shows all zeros).

    Columns are summed whole (a pool reads thousands).
    """
    summaries = summaries if isinstance(summaries, list) else list(summaries)
    if draining or not summaries:
        return AcceleratorViews()
    return AcceleratorViews({mode: _VIEWS[mode](summaries) for mode in MODES})


def cpu_view(node_cores: Iterable[int], reserved: int = 0) -> View:
    """The CPU column: capacity Σ cores; once-max the largest node, capped at what remains."""
    cores = list(node_cores)
    capacity = sum(cores)
    remaining = max(0, capacity - reserved)
    return View(capacity, min(max(cores, default=0), remaining), remaining)


@dataclass(frozen=True)
class PoolViews:
    accelerators: AcceleratorViews
    cpu: View
    members: tuple[NodeSummary, ...]  # the nodes the pool covers, by name
    largest_node_cards: int = 0  # the whole-card request bound: unpartitioned cards on one node
    largest_node_cores: int = 0  # the CPU request bound of a CPU pool


_NODE, _GROUPS = operator.attrgetter("node"), operator.attrgetter("groups")


def pool_views(
    pool: PoolKey,
    nodes: Iterable[NodeSummary],
    mixed_on_node: bool = True,
    reserved_cpu: int = 0,
    draining: bool = False,
) -> PoolViews:
    """Everything the InstanceType status shows for `pool`, from its nodes' summaries."""
    covered = tuple(sorted(pool.covered(nodes, mixed_on_node), key=_NODE))
    if pool.a_key is not None:  # pool.acceleratable, spelled so the type checker narrows a_key
        a_key = pool.a_key
        summaries = list(map(operator.itemgetter(a_key), map(_GROUPS, covered)))  # all have it
        # A MIG-mode card serves partitions only: the whole-card (and shared) request bound
        # counts the cards that can take a whole-card request, never every card of the model.
        largest = max(map(_CARDS, summaries), default=0)
        return PoolViews(accelerator_views(summaries, draining), View(), covered, largest)
    cpu = View() if draining else cpu_view((n.cpu_cores for n in covered), reserved_cpu)
    largest = max((n.cpu_cores for n in covered), default=0)
    return PoolViews(AcceleratorViews(), cpu, covered, largest_node_cores=largest)
