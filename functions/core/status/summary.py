"""The node summary: what a pool needs from one node, published as one small object per node.

The one codec of a node summary: written by the devices handler, read by the pools (catalog,
instancetype) from the node's ConfigMap and by `kubectl gpustack` from `Devices.status`, which
carries the same two documents as objects (`documents`, `read_documents`). A pool used to
require every full Devices object of its nodes (spec, per-card ledger and summary: 5-6 KiB a
node with 8 cards) to read a few dozen figures from each; now it requires one ConfigMap per
node holding only those figures (docs/performance.md has the bytes before and after).

The ConfigMap (`<node>-gpustack-summary` in the Catalog's systemNamespace) carries the labels
pools select nodes by, and two keys, each one compact JSON string:

- `summary`, read for every node of every pool reconcile: the node, os/arch, CPU key, managed,
  cores, and per accelerator group its figures packed into one list (and, for a group with
  partitions, the profile counts). One Struct value and one `json.loads` per node.
- `facts`, parsed only for the few nodes whose hardware a pool's status or a flavor's notes
  describe (the first node of a pool, of a flavor, of a catalog row): per group the product,
  memory, cores, versions, slice slots and partition profiles with their credits; the CPU.

`summary` names its `facts` by digest: equal summary texts go with equal facts, so a reader
may keep what it parsed of a text for as long as it sees that text again.

Versioned: both hold `"v": 1`. A packed list does not repeat its figures' names (5,000 nodes
would carry 0.9 MB of them per pool reconcile); `LAYOUTS` names them per version instead, and a
version's layout is frozen: a later release only appends figures under a new version. So a
newer release reads any older summary by that version's layout (a figure it lacks reads as 0),
and an older release reads a newer one by the figures it knows, which keep their positions —
and says so (`NodeSummary.version`: the pool names such nodes in a Warning, so a release left
behind is seen, not guessed).

The layout written is derived, not hand-written (`current_layout`): every whole-number figure of
the ledger's `GroupSummary` (`SUMMARY_COUNTS`) is published, and one the newest of
`RELEASED_LAYOUTS` lacks (a new mode's) is appended to it under the next version, so a new
figure cannot be left out. The release that first writes such a version adds its layout to
`RELEASED_LAYOUTS`, so that a later figure goes after it.

What is read is held to what the devices handler writes, or the summary is unreadable and its
node left out, named: every figure a whole number from 0 to `MAX_FIGURE` (a negative count, or
10**30 cards, would be summed into every pool's capacity as if true); the facts the one the
summary names by digest; the ConfigMap named after the summary's node (`object_name`: a copy
under another name, or one without metadata, is not its node's).

Nothing read depends on the order of a document's keys (the writer sorts them, so equal
summaries are equal texts, but no reader relies on it): where strings gathered from many objects
at once are told apart without parsing them (functions/wire.py), `summaries_among` and
`facts_among` look for a key only that document has, wherever it stands.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from functions.core import names
from functions.core.devices import Cpu
from functions.core.ledger import SUMMARY_COUNTS, GroupSummary
from functions.core.pools import GroupFacts, NodeSummary, ProfileFacts
from functions.core.status import StatusError, read_document

SUMMARY_KEY, FACTS_KEY = "summary", "facts"
SUMMARY_AT, FACTS_AT = f"data.{SUMMARY_KEY}", f"data.{FACTS_KEY}"
RESOURCE_TYPE = "node-summary"  # the value of labels.RESOURCE_TYPE on every summary
# A key only each document has (`gKey` is no facts' key, `cpu` no summary's), quoted and
# followed by its colon: no JSON string value holds that unescaped, and no name, uid or
# timestamp holds a quote. Searched for in C, a mark costs less than a `startswith` call.
_SUMMARY_KEY_MARK, _FACTS_KEY_MARK = '"gKey":', '"cpu":'

NAME_SUFFIX = "gpustack-summary"
# The largest figure a summary may hold. The largest real one is a card's slice units (its
# 1,600,000 credits); 2**32 is some 2,700 cards of them, and two million nodes of such figures
# still sum exactly in a status number (a double, exact to 2**53).
MAX_FIGURE = 1 << 32


def published_name(attr: str) -> str:
    """A GroupSummary figure's name in a summary: `free_cards` is `freeCards`."""
    head, *words = attr.split("_")
    return head + "".join(word.title() for word in words)


# GroupSummary's figures (every whole number the ledger sums) by their published names.
COUNT_FIELDS = {published_name(attr): attr for attr in SUMMARY_COUNTS}
# The figures each released version packs, in order; frozen once released (see the module
# docstring). Only ever appended to: a new version's layout is the last one and what it adds.
RELEASED_LAYOUTS: dict[int, tuple[str, ...]] = {
    1: (
        "totalCards",
        "cards",
        "freeCards",
        "freeShares",
        "cardsWithFreeShare",
        "logicalCards",
        "freeSlicePercent",
        "maxCardSlicePercent",
        "maxCardSliceUnits",
        "partitionCapacity",
        "partitionRemaining",
    ),
}


def current_layout(
    released: Mapping[int, tuple[str, ...]], figures: Iterable[str]
) -> tuple[int, tuple[str, ...]]:
    """The version this release writes and its layout: the newest released one, or, when the
    ledger sums a figure that one lacks, the next version packing it and the new figures after
    it (in the ledger's order), so every figure is published and an older reader still finds
    the ones it knows where they were, and names the newer version."""
    newest = max(released)
    layout = released[newest]
    added = tuple(name for name in figures if name not in layout)
    return (newest + 1, layout + added) if added else (newest, layout)


VERSION, _LAYOUT = current_layout(RELEASED_LAYOUTS, COUNT_FIELDS)
LAYOUTS: dict[int, tuple[str, ...]] = {**RELEASED_LAYOUTS, VERSION: _LAYOUT}
_ATTRS = tuple(COUNT_FIELDS[name] for name in _LAYOUT)
_FIELD_ORDER = tuple(GroupSummary.__dataclass_fields__)
# This release's layout in GroupSummary's own field order: figures go in positionally.
_POSITIONAL = _FIELD_ORDER[: len(_ATTRS)] == _ATTRS


# --- writer -----------------------------------------------------------------------------------


def write(summary: NodeSummary) -> dict[str, str]:
    """The ConfigMap's `data`: the figures every pool reads, and the hardware facts, each
    document as its compact text."""
    return {key: _compact(document) for key, document in documents(summary).items()}


def documents(summary: NodeSummary) -> dict[str, dict[str, Any]]:
    """The summary's two documents by their keys (`summary`, `facts`): the ConfigMap holds
    each as its text, `Devices.status` each as an object."""
    facts = _facts_document(summary)
    return {
        SUMMARY_KEY: _summary_document(summary, facts_digest(_compact(facts))),
        FACTS_KEY: facts,
    }


def object_name(node: str) -> str:
    """The name of `node`'s summary ConfigMap, as the devices handler composes it."""
    return names.node_object_name(node, NAME_SUFFIX)


def facts_digest(facts: str) -> str:
    """Names the facts a summary goes with: equal summaries go with equal facts, so a reader
    may keep what it parsed of a summary text for as long as it sees that text again."""
    return hashlib.sha256(facts.encode()).hexdigest()[:16]


def _compact(document: Mapping[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _summary_document(summary: NodeSummary, facts: str) -> dict[str, Any]:
    groups = sorted(summary.groups.items())
    document: dict[str, Any] = {
        "v": VERSION,
        "facts": facts,
        "node": summary.node,
        "os": summary.os,
        "arch": summary.arch,
        "gKey": summary.g_key,
        "managed": summary.managed,
        "cores": summary.cpu_cores,
        "groups": {key: [getattr(group, attr) for attr in _ATTRS] for key, group in groups},
    }
    partitions = {
        key: {
            "allocated": {n: c for n, c in sorted(group.allocated_profiles.items()) if c},
            "remaining": dict(sorted(group.remaining_profiles.items())),
        }
        for key, group in groups
        if group.partition_capacity
    }
    if partitions:
        document["partitions"] = partitions
    return document


def _facts_document(summary: NodeSummary) -> dict[str, Any]:
    cpu = summary.cpu
    return {
        "v": VERSION,
        "cpu": {
            "vendor": cpu.vendor,
            "modelName": cpu.model_name,
            "family": cpu.family,
            "model": cpu.model,
        },
        "groups": {key: _facts_row(facts) for key, facts in sorted(summary.facts.items())},
    }


def _facts_row(facts: GroupFacts) -> dict[str, Any]:
    row: dict[str, Any] = {
        "manufacturer": facts.manufacturer,
        "product": facts.product,
        "memoryMiB": facts.memory_mib,
        "cores": facts.cores,
        "computeCapability": facts.compute_capability,
        "family": facts.family,
        "driverVersion": facts.driver_version,
        "runtimeVersion": facts.runtime_version,
        "sliceSlots": facts.slice_slots,
    }
    if facts.profiles:  # [name, MiB, most per card, credits]: the list is the costly part
        row["profiles"] = [[p.name, p.memory_mib, p.count, p.credits] for p in facts.profiles]
    return row


# --- reader -----------------------------------------------------------------------------------


def summaries_among(strings: Iterable[str]) -> list[str]:
    """The summary texts among strings gathered from many objects at once, in their order."""
    return [text for text in strings if _SUMMARY_KEY_MARK in text]


def facts_among(strings: Iterable[str]) -> set[str]:
    """The facts texts among strings gathered from many objects at once."""
    return {text for text in strings if _FACTS_KEY_MARK in text}


def read_documents(summary: Any, facts: Any, at: str) -> NodeSummary:
    """A summary published as its two documents rather than their texts (`Devices.status`
    holds them so): read as their texts are, held to the same bounds and the facts to the
    digest the summary names. A problem is named under `at` (`status`: `status.summary.cores`).
    """
    try:
        return read(_text_of(summary, SUMMARY_AT), _text_of(facts, FACTS_AT))
    except StatusError as error:
        field = error.field.replace("data.", f"{at}.", 1)
        raise StatusError(field, error.problem) from None


def _text_of(document: Any, at: str) -> str | None:
    if document is None:
        return None if at == SUMMARY_AT else ""  # no facts: the summary names some, missing
    if not isinstance(document, dict):
        raise StatusError(at, f"must be an object, got {_shown(document)}")
    try:
        return _compact(document)
    except (TypeError, ValueError) as error:  # a value YAML made that JSON has no word for
        raise StatusError(at, f"must hold JSON values only: {error}") from None


def read(text: Any, facts: Any = None) -> NodeSummary:
    """A node's summary from its `summary` string, with its `facts` string parsed only when a
    caller first asks for the hardware. Raises StatusError naming what cannot be read.

    `facts` may instead map facts texts by their digest, for a reader that cannot tell which
    object a facts text came from: the summary names its own, which must be there.

    The summary holds plain data and one `partial`, no closure: a worker keeps thousands of
    summaries, and every object the garbage collector tracks is one it walks on each full
    collection (the closures it held, with the memo's, were seven such objects per node)."""
    document = read_document(text, SUMMARY_AT)
    layout = _layout(document.get("v"))
    partitions = _object(document.get("partitions"), "partitions")
    groups = {}
    for key, packed in _object(document.get("groups"), "groups").items():
        groups[key] = _group(key, packed, layout, partitions.get(key))
    cores = _whole(document.get("cores"), "cores")
    named = _text(document.get("facts"), "facts")
    if isinstance(facts, Mapping):
        facts = facts.get(named)
        if facts is None:
            raise StatusError(FACTS_AT, f"is not the one the summary names (facts {named})")
    elif isinstance(facts, str) and named and facts_digest(facts) != named:
        raise StatusError(
            FACTS_AT,
            "is missing" if not facts else "is not the one the summary names (its digest differs)",
        )
    return NodeSummary(
        node=_text(document.get("node"), "node", required=True),
        os=_text(document.get("os"), "os"),
        arch=_text(document.get("arch"), "arch"),
        g_key=_text(document.get("gKey"), "gKey"),
        managed=document.get("managed") is True,
        cpu_cores=cores,
        groups=groups,
        load_details=functools.partial(read_facts, facts, cores),
        version=document["v"],
        facts_id=named,
    )


def _layout(version: Any) -> tuple[str, ...]:
    """The figure names of `version`; a newer one reads by the newest layout known here."""
    if type(version) is not int or version < 1:
        raise StatusError(SUMMARY_AT, f"v must be a version from 1 on, got {version!r}")
    return LAYOUTS.get(version) or LAYOUTS[max(LAYOUTS)]


def _group(key: str, packed: Any, layout: tuple[str, ...], partitions: Any) -> GroupSummary:
    at = f"groups.{key}"
    if type(packed) is not list or len(packed) < len(layout):
        raise StatusError(SUMMARY_AT, f"{at} must list {len(layout)} figures, got {packed!r}")
    for index, value in enumerate(packed[: len(layout)]):
        if type(value) is not int or not 0 <= value <= MAX_FIGURE:
            _refuse_figure(f"{at}[{index}]", value)
    if _POSITIONAL and layout == LAYOUTS[VERSION] and not partitions:
        return GroupSummary(*packed[: len(layout)])
    counts: dict[str, Any] = dict.fromkeys(_FIELD_ORDER, 0)
    counts.update(
        (COUNT_FIELDS[name], value)
        for name, value in zip(layout, packed, strict=False)
        if name in COUNT_FIELDS
    )
    if partitions:
        where = _object(partitions, f"partitions.{key}")
        counts["allocated_profiles"] = _profile_counts(where.get("allocated"), key, "allocated")
        counts["remaining_profiles"] = _profile_counts(where.get("remaining"), key, "remaining")
    return GroupSummary(**counts)


def _profile_counts(value: Any, key: str, which: str) -> dict[str, int]:
    at = f"partitions.{key}.{which}"
    counts = _object(value, at)
    return {name: _whole(count, f"{at}.{name}") for name, count in counts.items()}


def _object(value: Any, at: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise StatusError(SUMMARY_AT, f"{at} must be an object, got {value!r}")
    return value


def _whole(value: Any, at: str) -> int:
    if value is None:
        return 0
    if type(value) is not int or not 0 <= value <= MAX_FIGURE:
        _refuse_figure(at, value)
    return value


def _refuse_figure(at: str, value: Any) -> None:
    if type(value) is not int:
        raise StatusError(SUMMARY_AT, f"{at} must be a whole number, got {_shown(value)}")
    raise StatusError(SUMMARY_AT, f"{at} must be from 0 to {MAX_FIGURE}, got {_shown(value)}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _text(value: Any, at: str, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise StatusError(SUMMARY_AT, f"{at} must be a non-empty string, got {value!r}")
    return value


def read_facts(text: Any, cores: int = 0) -> tuple[Mapping[str, GroupFacts], Cpu]:
    """The hardware facts of each group and the CPU. Read leniently, after the figures were
    accepted: a malformed descriptor reads as its default instead of failing a pool mid-way."""
    try:
        document = read_document(text, FACTS_AT)
    except StatusError:
        return {}, Cpu(cores=cores)
    cpu = _dict(document.get("cpu"))
    groups = _dict(document.get("groups"))
    return (
        {key: _group_facts(_dict(row)) for key, row in sorted(groups.items())},
        Cpu(
            vendor=_str(cpu.get("vendor")),
            model_name=_str(cpu.get("modelName")),
            family=_str(cpu.get("family")),
            model=_str(cpu.get("model")),
            cores=cores,
        ),
    )


def _group_facts(row: dict[str, Any]) -> GroupFacts:
    profiles = tuple(
        ProfileFacts(_str(p[0]), _int(p[1]), _int(p[2]), _int(p[3]))
        for p in row.get("profiles") or ()
        if isinstance(p, list) and len(p) >= 4
    )
    return GroupFacts(
        manufacturer=_str(row.get("manufacturer")),
        product=_str(row.get("product")),
        memory_mib=_int(row.get("memoryMiB")),
        cores=_int(row.get("cores")),
        compute_capability=_str(row.get("computeCapability")),
        family=_str(row.get("family")),
        driver_version=_str(row.get("driverVersion")),
        runtime_version=_str(row.get("runtimeVersion")),
        slice_slots=_int(row.get("sliceSlots")),
        profiles=profiles,
    )


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if type(value) is int else 0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
