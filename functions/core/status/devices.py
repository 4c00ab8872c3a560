"""`Devices.status`: written by the devices handler, read by every pool (version 2).

The status holds the per-card ledger (`groups`, for people and tools) and the node's summary
(`summary`, for pools): a pool reads one small summary per node and never walks cards or
re-derives the ledger from the spec.

Each summary group packs its figures into one list, `counts`, whose names the summary states
once in `countNames` — pools read thousands of these, and one list costs a fraction of eleven
lookups, yet nothing is positional by convention: a reader zips the names it finds with the
figures, ignores names it does not know (a newer release added a figure) and reads a name it
misses as 0. Version 1 (release 0.1.0) wrote the same list without `countNames`, in the order
`V1_COUNT_NAMES` keeps, plus every figure as a named field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from functions.core import mig
from functions.core.devices import Cpu
from functions.core.ledger import Conflict, GroupSummary, NodeLedger
from functions.core.pools import GroupFacts, NodeSummary, ProfileFacts
from functions.core.status import StatusError, read_int, read_list, read_object, read_str

VERSION = 2

# GroupSummary's figures by their published names, in the order version 2 writes them.
COUNT_FIELDS = {
    "totalCards": "total_cards",
    "cards": "cards",
    "freeCards": "free_cards",
    "freeShares": "free_shares",
    "cardsWithFreeShare": "cards_with_free_share",
    "logicalCards": "logical_cards",
    "freeSlicePercent": "free_slice_percent",
    "maxCardSlicePercent": "max_card_slice_percent",
    "maxCardSliceUnits": "max_card_slice_units",
    "partitionCapacity": "partition_capacity",
    "partitionRemaining": "partition_remaining",
}
COUNT_NAMES = tuple(COUNT_FIELDS)
V1_COUNT_NAMES = COUNT_NAMES  # frozen: the order release 0.1.0 packed its lists in

_FACT_FIELDS = {
    "manufacturer": "manufacturer",
    "product": "product",
    "memory_mib": "memoryMiB",
    "cores": "cores",
    "compute_capability": "computeCapability",
    "family": "family",
    "driver_version": "driverVersion",
    "runtime_version": "runtimeVersion",
    "slice_slots": "sliceSlots",
}
_INT_FACTS = frozenset({"memory_mib", "cores", "slice_slots"})


# --- writer -----------------------------------------------------------------------------------


def write(
    ledger: NodeLedger, summary: NodeSummary, inputs: str = "", left_out: str = ""
) -> dict[str, Any]:
    """The whole `Devices.status` the devices handler publishes; `inputs` is the digest of
    what it was computed from (`inputs_digest`), so an unchanged node is not recomputed;
    `left_out`, why no pool takes the node, if that is so."""
    status = {
        "version": VERSION,
        "groups": ledger_rows(ledger),
        "summary": summary_status(summary),
        "conflicts": [conflict_row(c) for c in ledger.conflicts],
    }
    if left_out:
        status["leftOut"] = left_out
    if inputs:
        status["inputs"] = inputs
    return status


def inputs_digest(
    node: str,
    spec: bytes,
    settings: Mapping[str, Any],
    release: str,
    vm_node: Mapping[str, Any] | None = None,
) -> str:
    """A digest of everything a Devices status is computed from: the node, its spec (as
    canonical bytes), the settings read, the release, and the VM node state composed from the
    Node (None: none), SHA-256.

    The release is part of it, so an upgrade recomputes every node once: a fix in the ledger
    reaches nodes whose spec never changes."""
    document = {"node": node, "settings": dict(settings), "release": release}
    if vm_node is not None:
        document["vmNode"] = dict(vm_node)
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode() + b"\0" + spec).hexdigest()[:32]


def conflict_row(conflict: Conflict) -> dict[str, str]:
    return {"pod": conflict.pod, "device": conflict.device, "reason": conflict.reason}


def _counts(counts: Mapping[str, int], keep_zero: bool = True) -> list[dict[str, Any]]:
    return [{"name": n, "count": c} for n, c in sorted(counts.items()) if c or keep_zero]


def ledger_rows(ledger: NodeLedger) -> list[dict[str, Any]]:
    """The per-card ledger: each card's mode (0..4), remaining credits, slices and profiles."""
    groups = []
    for group in ledger.groups:
        cards = []
        for card in sorted(group.cards, key=lambda c: c.index):
            row: dict[str, Any] = {
                "id": card.id,
                "index": card.index,
                "mode": int(card.mode),
                "remaining": card.remaining,
            }
            if card.allocated_slices:
                row["allocatedSlices"] = card.allocated_slices
            if card.partitioned:
                row["allocatedProfiles"] = _counts(card.allocated_profiles(), keep_zero=False)
                row["remainingProfiles"] = _counts(card.remaining_profiles())
            cards.append(row)
        groups.append(
            {
                "id": group.id,
                "key": group.key,
                "manufacturer": group.manufacturer,
                "accelerators": cards,
            }
        )
    return groups


def summary_status(summary: NodeSummary) -> dict[str, Any]:
    groups = []
    for key in sorted(summary.facts):
        facts, counts = summary.facts[key], summary.groups.get(key, GroupSummary())
        row: dict[str, Any] = {"key": key}
        row.update({camel: getattr(facts, attr) for attr, camel in _FACT_FIELDS.items()})
        row["counts"] = [getattr(counts, attr) for attr in COUNT_FIELDS.values()]
        if facts.profiles:
            row["profiles"] = [
                {"name": p.name, "memoryMiB": p.memory_mib, "count": p.count, "credits": p.credits}
                for p in facts.profiles
            ]
            row["allocatedProfiles"] = _counts(counts.allocated_profiles, keep_zero=False)
            row["remainingProfiles"] = _counts(counts.remaining_profiles)
        groups.append(row)
    cpu = summary.cpu
    return {
        "managed": summary.managed,
        "generalKey": summary.g_key,
        "os": summary.os,
        "arch": summary.arch,
        "cpuCores": summary.cpu_cores,
        "cpu": {
            "vendor": cpu.vendor,
            "modelName": cpu.model_name,
            "family": cpu.family,
            "model": cpu.model,
        },
        "display": display(summary),
        "countNames": list(COUNT_NAMES),
        "groups": groups,
    }


def display(summary: NodeSummary) -> str:
    """`nvidia-a10g 1/1` — free over total cards per model; `-` for a CPU-only node."""
    parts = [
        f"{key} {group.free_cards}/{group.total_cards}"
        for key, group in sorted(summary.groups.items())
    ]
    return ", ".join(parts) or "-"


# --- reader -----------------------------------------------------------------------------------


def read_summary(node: str, status: Any) -> NodeSummary | None:
    """The node's summary as its devices handler published it; None before it published one.

    Counts are read now; the hardware facts only if a caller asks for them. Raises StatusError
    naming the field when the summary cannot be read.
    """
    status = read_object(status, "status")
    summary = status.get("summary")
    if summary is None:
        return None
    summary = read_object(summary, "status.summary")
    names = _count_names(status, summary)
    groups = {}
    for index, row in enumerate(read_list(summary.get("groups"), "status.summary.groups")):
        at = f"status.summary.groups[{index}]"
        row = read_object(row, at)
        groups[read_str(row.get("key"), f"{at}.key")] = _group(row, names, at)
    cores = read_int(summary.get("cpuCores"), "status.summary.cpuCores")
    return NodeSummary(
        node=node,
        os=read_str(summary.get("os"), "status.summary.os"),
        arch=read_str(summary.get("arch"), "status.summary.arch"),
        g_key=read_str(summary.get("generalKey"), "status.summary.generalKey"),
        managed=summary.get("managed") is True,
        cpu_cores=cores,
        groups=groups,
        load_details=lambda: (_facts(summary), _cpu(summary, cores)),
    )


def _count_names(status: Any, summary: Any) -> tuple[str, ...] | None:
    """The names of each group's packed counts; None: version 1 without a packed list."""
    names = summary.get("countNames")
    if names is not None:
        return tuple(
            read_str(n, "status.summary.countNames[]")
            for n in read_list(names, "status.summary.countNames")
        )
    if read_int(status.get("version"), "status.version", default=1) >= 2:
        raise StatusError("status.summary.countNames", "is required from version 2 on")
    return V1_COUNT_NAMES


def _group(row: Any, names: tuple[str, ...] | None, at: str) -> GroupSummary:
    packed = row.get("counts")
    if packed is not None:
        values = [
            read_int(v, f"{at}.counts[{i}]")
            for i, v in enumerate(read_list(packed, f"{at}.counts"))
        ]
        if names is None or len(values) != len(names):
            expected = len(names) if names is not None else 0
            raise StatusError(f"{at}.counts", f"holds {len(values)} figures for {expected} names")
        by_name = dict(zip(names, values, strict=True))
    else:  # version 1 also wrote each figure under its own name
        by_name = {name: read_int(row.get(name), f"{at}.{name}") for name in COUNT_FIELDS}
    counts: dict[str, Any] = {attr: by_name.get(name, 0) for name, attr in COUNT_FIELDS.items()}
    if counts["partition_capacity"]:
        counts["allocated_profiles"] = _profile_counts(
            row.get("allocatedProfiles"), f"{at}.allocatedProfiles"
        )
        counts["remaining_profiles"] = _profile_counts(
            row.get("remainingProfiles"), f"{at}.remainingProfiles"
        )
    return GroupSummary(**counts)


def _facts(summary: Any) -> dict[str, GroupFacts]:
    """The hardware facts of each group. Read lazily, after the counts were accepted, so a
    malformed descriptor reads as its default instead of failing a pool mid-way."""
    facts = {}
    for row in _items(summary.get("groups")):
        found: dict[str, Any] = {
            attr: (_int if attr in _INT_FACTS else _str)(row.get(camel))
            for attr, camel in _FACT_FIELDS.items()
        }
        profiles = tuple(
            ProfileFacts(
                _str(p.get("name")),
                _int(p.get("memoryMiB")),
                _int(p.get("count")),
                _int(p.get("credits"))
                or mig.unpriced_units(
                    found["product"],
                    _str(p.get("name")),
                    _int(p.get("memoryMiB")),
                    found["memory_mib"],
                ),
            )
            for p in _items(row.get("profiles"))
        )
        facts[_str(row.get("key"))] = GroupFacts(**found, profiles=profiles)
    return facts


def _cpu(summary: Any, cores: int) -> Cpu:
    cpu = summary.get("cpu")
    cpu = cpu if hasattr(cpu, "get") else {}
    return Cpu(
        vendor=_str(cpu.get("vendor")),
        model_name=_str(cpu.get("modelName")),
        family=_str(cpu.get("family")),
        model=_str(cpu.get("model")),
        cores=cores,
    )


def _items(value: Any) -> list[Any]:
    """The objects of a list; anything else reads as none."""
    try:
        return [item for item in read_list(value, "") if hasattr(item, "get")]
    except StatusError:
        return []


def _int(value: Any) -> int:
    try:
        return read_int(value, "")
    except StatusError:
        return 0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _profile_counts(rows: Any, at: str) -> dict[str, int]:
    return {
        read_str(row.get("name"), f"{at}[].name"): read_int(row.get("count"), f"{at}[].count")
        for row in read_list(rows, at)
    }
