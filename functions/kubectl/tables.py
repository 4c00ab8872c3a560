"""How `kubectl gpustack` prints the fleet: kubectl-style tables, `-o wide`, or `-o json`.

The default table answers "which card is free, for whom is it held": node, index, product, mode,
holders, free memory and cores, MIG layout. `-o wide` adds the card's UUID, size and health, the
holders' containers, and the MIG profiles left. `-o json` holds every figure, unformatted, for
scripts (`jq`).
"""

from __future__ import annotations

import json
from typing import Any

from functions.kubectl.columns import kubectl_table
from functions.kubectl.fleet import Card, Fleet, Holder, Node

CARD_COLUMNS = ["NODE", "GPU", "PRODUCT", "MODE", "HOLDERS", "FREE MEM", "FREE CORES", "MIG"]
CARD_WIDE_COLUMNS = [*CARD_COLUMNS, "UUID", "MEMORY", "CORES", "HEALTHY", "MIG LEFT"]
NODE_COLUMNS = [
    "NODE",
    "MANAGED",
    "OS/ARCH",
    "CPU",
    "CORES",
    "GPUS(FREE/TOTAL)",
    "SHARES",
    "SLICE%",
    "PT",
]
NODE_WIDE_COLUMNS = [*NODE_COLUMNS, "CPU MODEL", "DRIVER"]


def cards_table(fleet: Fleet, wide: bool = False) -> str:
    columns = CARD_WIDE_COLUMNS if wide else CARD_COLUMNS
    return kubectl_table(columns, (card_cells(card, wide) for card in fleet.cards))


def card_cells(card: Card, wide: bool) -> list[str]:
    cells = [
        card.node,
        str(card.card.index),
        card.card.product,
        card.mode,
        ", ".join(holder_text(h, wide) for h in card.holders) or "-",
        _percent(card.free_memory_percent),
        _percent(card.free_cores_percent),
        mig_layout(card),
    ]
    if wide:
        cells += [
            card.card.uuid,
            f"{card.card.memory_mib}Mi",
            str(card.card.cores),
            "yes" if card.card.healthy else "no",
            mig_left(card),
        ]
    return cells


def holder_text(holder: Holder, wide: bool) -> str:
    who = f"{holder.pod}/{holder.container}" if wide and holder.container else holder.pod
    return f"{who} ({holder.share})" if holder.share else who


def mig_layout(card: Card) -> str:
    """`off`, `on (empty)`, or the partitions as profile@start, in placement order."""
    if not card.card.mig_enabled:
        return "off"
    return ",".join(f"{profile}@{start}" for profile, start, _ in card.partitions) or "on (empty)"


def mig_left(card: Card) -> str:
    left = card.ledger.remaining_profiles if card.ledger else {}
    return ",".join(f"{name}×{count}" for name, count in sorted(left.items()) if count) or "-"


def _percent(value: int | None) -> str:
    return "?" if value is None else f"{value}%"


def nodes_table(fleet: Fleet, wide: bool = False) -> str:
    columns = NODE_WIDE_COLUMNS if wide else NODE_COLUMNS
    return kubectl_table(columns, (node_cells(node, wide) for node in fleet.nodes))


def node_cells(node: Node, wide: bool) -> list[str]:
    cells = [
        node.name,
        "yes" if node.managed else "no",
        node.os_arch,
        node.cpu,
        str(node.cores),
        node.gpus,
        str(node.free_shares),
        str(node.free_slice_percent),
        node.partitions,
    ]
    return [*cells, node.cpu_model, node.drivers] if wide else cells


# --- -o json ------------------------------------------------------------------------------------


def cards_json(fleet: Fleet) -> str:
    return _dump([card_document(card) for card in fleet.cards])


def nodes_json(fleet: Fleet) -> str:
    return _dump([vars(node) for node in fleet.nodes])


def card_document(card: Card) -> dict[str, Any]:
    hardware = card.card
    return {
        "node": card.node,
        "index": hardware.index,
        "uuid": hardware.uuid,
        "product": hardware.product,
        "memoryMiB": hardware.memory_mib,
        "cores": hardware.cores,
        "healthy": hardware.healthy,
        "mode": card.mode,
        "remaining": card.ledger.remaining if card.ledger else None,
        "freeMemoryPercent": card.free_memory_percent,
        "freeMemoryMiB": card.free_memory_mib,
        "freeCoresPercent": card.free_cores_percent,
        "holders": [holder_document(h) for h in card.holders],
        "mig": {
            "enabled": hardware.mig_enabled,
            "partitions": [
                {"profile": profile, "start": start, "size": size}
                for profile, start, size in card.partitions
            ],
            "remainingProfiles": dict(card.ledger.remaining_profiles) if card.ledger else {},
        },
    }


def holder_document(holder: Holder) -> dict[str, Any]:
    allocation = holder.allocation
    document: dict[str, Any] = {
        "pod": holder.pod,
        "container": holder.container,
        "mode": holder.mode.title,
    }
    optional = {
        "memoryPercentage": allocation.memory_percentage,
        "memoryMiB": allocation.memory_mib,
        "coresPercentage": allocation.cores_percentage,
        "profile": allocation.profile,
    }
    document.update({key: value for key, value in optional.items() if value})
    if allocation.placement is not None:
        document["placement"] = {
            "start": allocation.placement.start,
            "size": allocation.placement.size,
        }
    return document


def _dump(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2)
