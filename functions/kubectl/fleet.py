"""The fleet as `kubectl gpustack` shows it: one row per card and one per node, from Devices.

What a card row says, and where each figure comes from:
- the hardware (product, memory, cores, health, MIG partitions) and the holders come from the
  spec the agent writes (`functions.core.devices`): an allocation row names its card's UUID;
- the mode, the credits left and the MIG profiles left come from the ledger rows the devices
  handler publishes in `status.groups[].accelerators[]`, read with the status contract's readers
  (`functions.core.status`); the node's summary through `functions.core.status.devices`.

Free shares are the card's own arithmetic (`functions.core.modes`): memory is the credits left
(D = 1,600,000 per card) as a share of the card's VRAM. Cores follow memory, except on a Sliced
card, where each slice names its own cores percentage and slices may overcommit cores: there the
free cores are what no holder was promised, down to 0 %. A card the handler has not published a
row for yet reads as mode Unknown, with nothing free claimed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from functions.core.devices import Accelerator, Allocation, DevicesSpec, SpecError, parse_devices
from functions.core.modes import D, Mode
from functions.core.status import StatusError, read_int, read_list, read_object, read_str
from functions.core.status.devices import read_summary

UNKNOWN = "Unknown"  # a card without a published ledger row


@dataclass(frozen=True)
class LedgerRow:
    """One card of `status.groups[].accelerators[]`."""

    mode: Mode
    remaining: int
    allocated_slices: int = 0
    remaining_profiles: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Holder:
    """One container holding (part of) a card, as the agent reported it."""

    pod: str
    container: str
    mode: Mode
    share: str  # "20% mem, 100% cores", "1 share", "3g.40gb@0", "" for a whole card
    allocation: Allocation


@dataclass(frozen=True)
class Card:
    node: str
    card: Accelerator
    ledger: LedgerRow | None
    holders: tuple[Holder, ...]

    @property
    def mode(self) -> str:
        return self.ledger.mode.title if self.ledger else UNKNOWN

    @property
    def free_memory_percent(self) -> int | None:
        return self.ledger.remaining * 100 // D if self.ledger else None

    @property
    def free_memory_mib(self) -> int | None:
        return self.card.memory_mib * self.ledger.remaining // D if self.ledger else None

    @property
    def partitions(self) -> tuple[tuple[str, int, int], ...]:
        """The MIG layout as (profile, start, size), by start: the GPU instances the agent read,
        and those the holders' allocations name (a partition may be held before it is read)."""
        found = {(p.profile, p.placement.start, p.placement.size) for p in self.card.partitions}
        for holder in self.holders:
            placement = holder.allocation.placement
            if holder.mode is Mode.PARTITIONED and placement is not None:
                found.add((holder.allocation.profile, placement.start, placement.size))
        return tuple(sorted(found, key=lambda p: (p[1], p[0])))

    @property
    def free_cores_percent(self) -> int | None:
        if self.ledger is None:
            return None
        if self.ledger.mode is Mode.SLICED:
            promised = sum(h.allocation.cores_percentage for h in self.holders)
            return max(0, 100 - promised)
        return self.free_memory_percent


@dataclass(frozen=True)
class Node:
    name: str
    managed: bool
    os_arch: str
    cpu: str  # the general key and cores: `amd-epyc-7r32 ×4`
    cores: int
    gpus: str  # free/total per model: `nvidia-a10g 0/1`
    free_shares: int
    free_slice_percent: int
    cpu_model: str
    drivers: str  # the driver versions of the node's accelerators, `-` without any
    partitions: str  # MIG: the largest profile's instances left/possible (as the PT column), else -
    left_out: str = ""  # why no pool takes the node (status.leftOut), if that is so


@dataclass(frozen=True)
class Fleet:
    nodes: tuple[Node, ...]
    cards: tuple[Card, ...]
    problems: tuple[str, ...]  # objects skipped, and why


def fleet_of(objects: Iterable[Mapping[str, Any]]) -> Fleet:
    """Every Devices object's node and cards; an object that cannot be read is skipped, named."""
    nodes, cards, problems = [], [], []
    for obj in objects:
        name = (obj.get("metadata") or {}).get("name", "<unnamed>")
        try:
            spec = parse_devices(obj)
            node = node_of(spec, obj.get("status"))
            rows = ledger_rows(obj.get("status"))
        except (SpecError, StatusError) as error:
            problems.append(f"Devices {name}: {error}; skipped")
            continue
        if node is not None:
            nodes.append(node)
        cards.extend(cards_of(spec, rows))
    nodes.sort(key=lambda n: n.name)
    cards.sort(key=lambda c: (c.node, c.card.index, c.card.uuid))
    return Fleet(tuple(nodes), tuple(cards), tuple(problems))


def ledger_rows(status: Any) -> dict[str, LedgerRow]:
    """The published ledger rows by card UUID (none before the handler published a status)."""
    rows = {}
    status = read_object(status, "status")
    for g, group in enumerate(read_list(status.get("groups"), "status.groups")):
        at = f"status.groups[{g}]"
        cards = read_object(group, at).get("accelerators")
        for c, row in enumerate(read_list(cards, f"{at}.accelerators")):
            here = f"{at}.accelerators[{c}]"
            row = read_object(row, here)
            rows[read_str(row.get("id"), f"{here}.id")] = LedgerRow(
                mode=_mode(read_int(row.get("mode"), f"{here}.mode"), f"{here}.mode"),
                remaining=read_int(row.get("remaining"), f"{here}.remaining"),
                allocated_slices=read_int(row.get("allocatedSlices"), f"{here}.allocatedSlices"),
                remaining_profiles=_profile_counts(row.get("remainingProfiles"), here),
            )
    return rows


def _mode(value: int, at: str) -> Mode:
    try:
        return Mode(value)
    except ValueError:
        raise StatusError(at, f"must be 0..{max(Mode).value}, got {value}") from None


def _profile_counts(rows: Any, at: str) -> dict[str, int]:
    path = f"{at}.remainingProfiles"
    return {
        read_str(read_object(row, path).get("name"), f"{path}[].name"): read_int(
            row.get("count"), f"{path}[].count"
        )
        for row in read_list(rows, path)
    }


def cards_of(spec: DevicesSpec, ledger: Mapping[str, LedgerRow]) -> list[Card]:
    holders: dict[str, list[Holder]] = {}
    for allocation in spec.allocations:
        holders.setdefault(allocation.device, []).append(holder_of(allocation))
    return [
        Card(
            spec.node,
            card,
            ledger.get(card.uuid),
            tuple(sorted(holders.get(card.uuid, ()), key=lambda h: (h.pod, h.container))),
        )
        for group in spec.groups
        for card in group.devices
    ]


def holder_of(allocation: Allocation) -> Holder:
    return Holder(
        allocation.pod, allocation.container, allocation.mode, share(allocation), allocation
    )


def share(allocation: Allocation) -> str:
    """What part of the card one allocation holds, in the words of its mode."""
    if allocation.mode is Mode.SHARED:
        return "1 share"
    if allocation.mode is Mode.SLICED:
        memory = (
            f"{allocation.memory_percentage}% mem"
            if allocation.memory_percentage
            else f"{allocation.memory_mib}Mi mem"
        )
        return f"{memory}, {allocation.cores_percentage}% cores"
    if allocation.mode is Mode.PARTITIONED:
        start = allocation.placement.start if allocation.placement else "?"
        return f"{allocation.profile}@{start}"
    return ""


def node_of(spec: DevicesSpec, status: Any) -> Node | None:
    """The node's row from its published summary; None before the handler published one."""
    summary = read_summary(spec.node, status)
    if summary is None:
        return None
    groups = summary.groups
    capacity = sum(g.partition_capacity for g in groups.values())
    remaining = sum(g.partition_remaining for g in groups.values())
    return Node(
        name=summary.node,
        managed=summary.managed,
        os_arch=f"{summary.os}/{summary.arch}",
        cpu=summary.g_key,
        cores=summary.cpu_cores,
        gpus=", ".join(f"{key} {g.free_cards}/{g.total_cards}" for key, g in sorted(groups.items()))
        or "-",
        free_shares=sum(g.free_shares for g in groups.values()),
        free_slice_percent=sum(g.free_slice_percent for g in groups.values()),
        cpu_model=summary.cpu.model_name,
        drivers=",".join(sorted({f.driver_version for f in summary.facts.values()})) or "-",
        partitions=f"{remaining}/{capacity}" if capacity else "-",
        left_out=read_str(read_object(status, "status").get("leftOut", ""), "status.leftOut"),
    )
