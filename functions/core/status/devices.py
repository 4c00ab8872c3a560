"""`Devices.status`: written by the devices handler, read by people and `kubectl gpustack`
(version 3). Pools never read it: they read the node's summary ConfigMap.

The status holds the per-card ledger (`groups`), the node's summary as its ConfigMap holds it
(`summary` and `facts`: the same two documents as objects, written and read by
core/status/summary.py, the one codec of a node summary), a line for people and the printer
columns (`display`), and the allocations the ledger could not place (`conflicts`).

Versions 2 and 1 (release 0.1.0) held the summary in a shape of their own, with a codec of their
own; this release does not read it (`read_summary` names `status.version`). The devices handler
writes a node's status afresh once after an upgrade: the release is in its inputs digest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from functions.core.ledger import Conflict, NodeLedger
from functions.core.pools import NodeSummary
from functions.core.status import StatusError, read_int, read_object
from functions.core.status import summary as node_summary

VERSION = 3


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
        **node_summary.documents(summary),
        "display": display(summary),
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

    Read by the summary's own codec, held to what it holds in the ConfigMap. Raises StatusError
    naming the field when the summary cannot be read: `status.version` for an earlier release's
    status, `status.summary.node` for a summary of another node.
    """
    status = read_object(status, "status")
    if status.get("summary") is None:
        return None
    found = status.get("version")
    if read_int(found, "status.version", default=1) < VERSION:  # none: release 0.1.0's
        raise StatusError(
            "status.version",
            f"must be {VERSION} or later, got {found if found is not None else 'none'}: an "
            "earlier release wrote this status, and the devices handler writes it afresh once "
            "it reconciles the node",
        )
    summary = node_summary.read_documents(
        status.get(node_summary.SUMMARY_KEY), status.get(node_summary.FACTS_KEY), "status"
    )
    if summary.node != node:
        raise StatusError("status.summary.node", f"must be {node}, got {summary.node}")
    return summary
