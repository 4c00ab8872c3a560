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


_SUMMARY_FIELDS = {
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
    "total_cards": "totalCards",
    "slice_slots": "sliceSlots",
}


def summary_status(summary: NodeSummary) -> dict[str, Any]:
    groups = []
    for key in sorted(summary.facts):
        facts, counts = summary.facts[key], summary.groups.get(key, GroupSummary())
        row: dict[str, Any] = {"key": key}
        row.update({camel: getattr(facts, attr) for attr, camel in _FACT_FIELDS.items()})
        row.update({camel: getattr(counts, attr) for attr, camel in _SUMMARY_FIELDS.items()})
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
        f"{key} {summary.groups[key].free_cards}/{facts.total_cards}"
        for key, facts in sorted(summary.facts.items())
        if key in summary.groups
    ]
    return ", ".join(parts) or "-"


def summary_from_status(node: str, status: Mapping[str, Any]) -> NodeSummary:
    """The NodeSummary a devices handler published (the inverse of `summary_status`)."""
    groups, facts = {}, {}
    for row in status.get("groups") or []:
        key = row["key"]
        groups[key] = GroupSummary(
            **{attr: int(row.get(camel, 0)) for attr, camel in _SUMMARY_FIELDS.items()},
            allocated_profiles={
                p["name"]: int(p["count"]) for p in row.get("allocatedProfiles") or []
            },
            remaining_profiles={
                p["name"]: int(p["count"]) for p in row.get("remainingProfiles") or []
            },
        )
        values = {
            attr: row.get(camel)
            for attr, camel in _FACT_FIELDS.items()
            if row.get(camel) is not None
        }
        for attr in ("memory_mib", "cores", "total_cards", "slice_slots"):
            if attr in values:
                values[attr] = int(values[attr])
        profiles = tuple(
            ProfileFacts(p["name"], int(p["memoryMiB"]), int(p["count"]))
            for p in row.get("profiles") or []
        )
        facts[key] = GroupFacts(**values, profiles=profiles)
    cpu = status.get("cpu") or {}
    return NodeSummary(
        node=node,
        os=status.get("os", ""),
        arch=status.get("arch", ""),
        g_key=status.get("generalKey", ""),
        managed=bool(status.get("managed")),
        cpu_cores=int(status.get("cpuCores", 0)),
        groups=groups,
        facts=facts,
        cpu=Cpu(
            vendor=cpu.get("vendor", ""),
            model_name=cpu.get("modelName", ""),
            family=str(cpu.get("family", "")),
            model=str(cpu.get("model", "")),
            cores=int(status.get("cpuCores", 0)),
        ),
    )
