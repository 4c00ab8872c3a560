"""Devices.status as the devices handler writes it, and the node summary read back from it.

The status holds the per-card ledger (for people and the AdmissionCheck) and the node summary
(for pools): a pool reads one small `summary` per node and never walks cards or re-derives the
ledger from the spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from functions.core.devices import Cpu
from functions.core.ledger import GroupSummary, NodeLedger
from functions.core.pools import GroupFacts, NodeSummary, ProfileFacts


def _counts(counts: Mapping[str, int], keep_zero: bool = True) -> list[dict[str, Any]]:
    return [{"name": n, "count": c} for n, c in sorted(counts.items()) if c or keep_zero]


def ledger_status(ledger: NodeLedger) -> list[dict[str, Any]]:
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


_COUNT_FIELDS = {
    "total_cards": "totalCards",
    "cards": "cards",
    "free_cards": "freeCards",
    "free_shares": "freeShares",
    "cards_with_free_share": "cardsWithFreeShare",
    "logical_cards": "logicalCards",
    "free_slice_percent": "freeSlicePercent",
    "max_card_slice_percent": "maxCardSlicePercent",
    "max_card_slice_units": "maxCardSliceUnits",
    "partition_capacity": "partitionCapacity",
    "partition_remaining": "partitionRemaining",
}
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


def summary_status(summary: NodeSummary) -> dict[str, Any]:
    groups = []
    for key in sorted(summary.facts):
        facts, counts = summary.facts[key], summary.groups.get(key, GroupSummary())
        row: dict[str, Any] = {"key": key}
        row.update({camel: getattr(facts, attr) for attr, camel in _FACT_FIELDS.items()})
        row.update({camel: getattr(counts, attr) for attr, camel in _COUNT_FIELDS.items()})
        # The same figures as one list, in _COUNT_FIELDS order: pools read thousands of rows,
        # and one list costs a fraction of eleven lookups.
        row["counts"] = [getattr(counts, attr) for attr in _COUNT_FIELDS]
        if facts.profiles:
            row["profiles"] = [
                {"name": p.name, "memoryMiB": p.memory_mib, "count": p.count}
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
        "groups": groups,
    }


def display(summary: NodeSummary) -> str:
    """`nvidia-a10g 1/1` — free over total cards per model; `-` for a CPU-only node."""
    parts = [
        f"{key} {group.free_cards}/{group.total_cards}"
        for key, group in sorted(summary.groups.items())
    ]
    return ", ".join(parts) or "-"


def summary_from_status(node: str, status: Any) -> NodeSummary:
    """The NodeSummary a devices handler published (the inverse of `summary_status`).

    `status` may be a dict or any lazy view with `.get(key)` and `.items()` (the handlers' view
    over the protobuf Struct): counts are read now, the hardware facts only if asked for.
    """
    groups = {}
    for row in status.get("groups") or ():  # only the counts: a pool reads thousands of these
        packed = row.get("counts")
        if packed is not None:
            counts = dict(zip(_COUNT_FIELDS, map(int, packed), strict=True))
        else:
            counts = {attr: int(row.get(camel) or 0) for attr, camel in _COUNT_FIELDS.items()}
        if counts["partition_capacity"]:
            counts["allocated_profiles"] = _profile_counts(row.get("allocatedProfiles"))
            counts["remaining_profiles"] = _profile_counts(row.get("remainingProfiles"))
        groups[row.get("key")] = GroupSummary(**counts)
    cores = int(status.get("cpuCores") or 0)
    return NodeSummary(
        node=node,
        os=status.get("os") or "",
        arch=status.get("arch") or "",
        g_key=status.get("generalKey") or "",
        managed=bool(status.get("managed")),
        cpu_cores=cores,
        groups=groups,
        load_details=lambda: (_facts(status), _cpu(status, cores)),
    )


def _facts(status: Any) -> dict[str, GroupFacts]:
    facts = {}
    for row in status.get("groups") or ():
        values = dict(row.items())
        found = {attr: values.get(camel) for attr, camel in _FACT_FIELDS.items()}
        found = {attr: value for attr, value in found.items() if value is not None}
        for attr in ("memory_mib", "cores", "total_cards", "slice_slots"):
            if attr in found:
                found[attr] = int(found[attr])
        profiles = tuple(
            ProfileFacts(p.get("name"), int(p.get("memoryMiB") or 0), int(p.get("count") or 0))
            for p in values.get("profiles") or ()
        )
        facts[values["key"]] = GroupFacts(**found, profiles=profiles)
    return facts


def _cpu(status: Any, cores: int) -> Cpu:
    cpu = status.get("cpu")
    read = (lambda key: cpu.get(key) or "") if cpu else (lambda key: "")
    return Cpu(
        vendor=read("vendor"),
        model_name=read("modelName"),
        family=str(read("family")),
        model=str(read("model")),
        cores=cores,
    )


def _profile_counts(rows: Any) -> dict[str, int]:
    return {row.get("name"): int(row.get("count") or 0) for row in rows or ()}
