"""Pools and their views: which nodes a pool covers, and the four accelerator views plus CPU.

A pool is identified by (os, arch, aKey?, gKey?) — gKey only when pools are CPU-aware. Sibling
InstanceTypes with the same identity (a derived pool and a custom type) read the same nodes and
so show the same figures: one accelerator, two consistent views. Views are summed from per-node
summaries; pools never walk cards.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from functions.core import mig, names
from functions.core.devices import AcceleratorGroup, Cpu, DevicesSpec
from functions.core.ledger import (
    GroupSummary,
    NodeLedger,
    build_ledger,
    slice_slots,
    summarize_node,
)
from functions.core.modes import SHARES_PER_CARD, Mode


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


def summarize_devices(
    spec: DevicesSpec,
    node_management_manual: bool = False,
    ledger: NodeLedger | None = None,
    fixed_partitions: bool = False,
) -> NodeSummary:
    """One node's summary; `fixed_partitions` as `build_ledger` reads it."""
    return NodeSummary(
        node=spec.node,
        os=spec.os,
        arch=spec.arch,
        g_key=spec.g_key,
        managed=spec.is_managed(node_management_manual),
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
        if not node.managed or (node.os, node.arch) != (self.os, self.arch):
            return False
        if self.g_key is not None and node.g_key != self.g_key:
            return False
        if self.a_key is not None:
            return node.group_cards.get(self.a_key, 0) > 0
        return node.cpu_cores > 0 and (mixed_on_node or not node.accelerated)

    def covered(
        self, nodes: Iterable[NodeSummary], mixed_on_node: bool = True
    ) -> list[NodeSummary]:
        """The nodes this pool takes capacity from: `covers`, for thousands of nodes at once."""
        if self.a_key is None:
            return [n for n in nodes if self.covers(n, mixed_on_node)]
        os, arch, a_key, g_key = self.os, self.arch, self.a_key, self.g_key
        return [
            n
            for n in nodes
            if n.managed
            and n.os == os
            and n.arch == arch
            and (g_key is None or n.g_key == g_key)
            and n.group_cards.get(a_key, 0) > 0
        ]


def pools_of(node: NodeSummary, aware: bool, mixed_on_node: bool = True) -> list[PoolKey]:
    """The derived pools a managed node gives rise to under the awareness setting."""
    if not node.managed:
        return []
    g_key = node.g_key if aware else None
    pools = [
        PoolKey(node.os, node.arch, a_key, g_key)
        for a_key, count in sorted(node.group_cards.items())
        if count > 0
    ]
    if node.cpu_cores > 0 and (mixed_on_node or not node.accelerated):
        pools.append(PoolKey(node.os, node.arch, None, g_key))
    return pools


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
    exclusive: View = View()
    shared: View = View()
    sliced: View = View()
    partitioned: PartitionView = PartitionView()

    def offering(self, modes: Collection[Mode]) -> AcceleratorViews:
        """These views with each mode the pool does not offer reading 0/0 (the cluster's
        device plugin cannot express it), so no column shows what no Instance can take."""
        return AcceleratorViews(
            exclusive=self.exclusive if Mode.EXCLUSIVE in modes else View(),
            shared=self.shared if Mode.SHARED in modes else View(),
            sliced=self.sliced if Mode.SLICED in modes else View(),
            partitioned=self.partitioned if Mode.PARTITIONED in modes else PartitionView(),
        )

    @property
    def display(self) -> str:
        """The ACCELERATOR(EX/SH/SL/PT) column: `1/1 1/10 100/100 0/0`."""
        views = (self.exclusive, self.shared, self.sliced, self.partitioned)
        return " ".join(view.display for view in views)


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


def accelerator_views(
    summaries: Iterable[GroupSummary], draining: bool = False
) -> AcceleratorViews:
    """Sum node summaries into the four views (a draining queue shows all zeros).

    SH uses the card-count reading: its once-max is the most cards on one node that still have
    a free share (one free A10G reads `1/10`, not `10/10`). PT's once-max is 1 while any
    partitioned card can host an instance. Columns are summed whole (a pool reads thousands).
    """
    summaries = summaries if isinstance(summaries, list) else list(summaries)
    if draining or not summaries:
        return AcceleratorViews()
    cards = sum(map(_CARDS, summaries))
    pt_remaining = sum(map(_PT_REM, summaries))
    return AcceleratorViews(
        exclusive=View(cards, max(map(_FREE, summaries)), sum(map(_FREE, summaries))),
        shared=View(
            cards * SHARES_PER_CARD,
            max(map(_WITH_SHARE, summaries)),
            sum(map(_SHARES, summaries)),
        ),
        sliced=View(
            sum(map(_LOGICAL, summaries)) * 100,
            max(map(_ONCE_SLICED, summaries)),
            sum(map(_SLICED, summaries)),
        ),
        partitioned=PartitionView(
            sum(map(_PT_CAP, summaries)),
            int(pt_remaining > 0),
            pt_remaining,
            *profile_totals(summaries),
        ),
    )


def profile_totals(summaries: list[GroupSummary]) -> tuple[dict[str, int], dict[str, int]]:
    """Allocated and remaining partitions by profile, over the groups that have any."""
    allocated: dict[str, int] = {}
    remaining: dict[str, int] = {}
    for node in summaries:
        if not (node.allocated_profiles or node.remaining_profiles):
            continue
        for name, count in node.allocated_profiles.items():
            allocated[name] = allocated.get(name, 0) + count
        for name, count in node.remaining_profiles.items():
            remaining[name] = remaining.get(name, 0) + count
    return allocated, remaining


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
    nodes: tuple[str, ...]
    largest_node_cards: int = 0  # the whole-card request bound: unpartitioned cards on one node
    largest_node_cores: int = 0  # the CPU request bound of a CPU pool


def pool_views(
    pool: PoolKey,
    nodes: Iterable[NodeSummary],
    mixed_on_node: bool = True,
    reserved_cpu: int = 0,
    draining: bool = False,
) -> PoolViews:
    """Everything the InstanceType status shows for `pool`, from its nodes' summaries."""
    covered = sorted(pool.covered(nodes, mixed_on_node), key=operator.attrgetter("node"))
    node_names = tuple(n.node for n in covered)
    if pool.a_key is not None:  # pool.acceleratable, spelled so the type checker narrows a_key
        a_key = pool.a_key
        summaries = [n.groups[a_key] for n in covered]  # `covered` has cards of a_key
        # A MIG-mode card serves partitions only: the whole-card (and shared) request bound
        # counts the cards that can take a whole-card request, never every card of the model.
        largest = max(map(_CARDS, summaries), default=0)
        return PoolViews(accelerator_views(summaries, draining), View(), node_names, largest)
    cpu = View() if draining else cpu_view((n.cpu_cores for n in covered), reserved_cpu)
    largest = max((n.cpu_cores for n in covered), default=0)
    return PoolViews(AcceleratorViews(), cpu, node_names, largest_node_cores=largest)
