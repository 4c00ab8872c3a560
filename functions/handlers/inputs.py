"""What several handlers read: the Catalog's settings and the nodes' published summaries.

A required object a handler cannot read is skipped and named — kind, name and field — in a
Warning result and the `InputsReadable` condition; the rest composes. One bad summary never
stops a pool.

Pools require each node's summary ConfigMap (core/status/summary.py), never the Devices object:
one string per node is read from it, and the hardware facts only for the nodes that a status or
a flavor describes. A pool that finds no summary at all while it still has what it composed
keeps that as observed (`keep_observed`): right after an upgrade, before every devices handler
has published its node's summary, a pool must not drop or drain its queues.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

from google.protobuf import struct_pb2

from functions import structs
from functions.core import apis, labels, names, reasons
from functions.core.pools import NodeSummary
from functions.core.settings import Settings, SettingsError
from functions.core.status import StatusError
from functions.core.status import summary as node_summary
from functions.handlers.base import Request, RequiredStrings, Requirement
from functions.handlers.desired import Desired
from functions.views import View

CATALOG = Requirement(apis.WORKER, "Catalog", match_name=names.CATALOG)
SUMMARIES = "summaries"  # the requirement every pool reads its nodes' summaries through
CROSSPLANE_KEYS = "crossplane.io/"  # labels and annotations Crossplane stamps on what it composes


def catalog_settings(request: Request, desired: Desired, requirement: str = "catalog") -> Settings:
    """The Catalog `default`'s settings; the defaults while it is missing, not yet read, or
    unreadable (then a Warning names the field: the Catalog's own reconcile refuses it)."""
    found = request.required_read(requirement, read_settings)
    if not found:
        return Settings()
    name, settings = found[0]  # the Catalog is required by name: there is one
    if isinstance(settings, SettingsError):
        unreadable(desired, "Catalog", name, settings.field, settings.message)
        return Settings()
    return settings


def catalog_missing(request: Request, requirement: str = "catalog") -> bool:
    """Crossplane looked for the Catalog `default` and found none (not: not asked yet). The
    same read as `catalog_settings`, so the Catalog is read once per request."""
    return request.required_read(requirement, read_settings) == []


def read_settings(catalog: View) -> tuple[str, Settings | SettingsError]:
    """A Catalog's name, and its settings or why they cannot be read. Every handler reads
    them on every call, and they rarely change: read once while unchanged (`required_read`)."""
    try:
        return catalog.name, Settings.from_spec(catalog.view("spec").to_dict())
    except SettingsError as error:
        return catalog.name, error.with_traceback(None)


def summaries_requirement(
    settings: Settings, selector: dict[str, str] | None = None
) -> Requirement:
    """The summary ConfigMaps of the nodes `selector` picks (every node: None), in the
    Catalog's systemNamespace — where only the devices handler writes them."""
    match = {labels.RESOURCE_TYPE: node_summary.RESOURCE_TYPE, **(selector or {})}
    return Requirement(
        apis.CORE, "ConfigMap", match_labels=match, namespace=settings.system_namespace
    )


def node_summaries(request: Request, desired: Desired) -> list[NodeSummary]:
    """Every required node summary, one per node, by node name; unreadable ones are skipped
    and named. One string is read from each ConfigMap (its facts only where asked for).

    Nothing is allocated per node that outlives the call but the summary itself: objects that
    survive a request's young collections bring on a full one over every summary kept."""
    summaries = _gathered_summaries(request)
    if summaries is not None:
        inputs_readable(desired, "node summaries", [])
        newer_summaries(desired, summaries)
        return summaries
    given = request.required_objects(SUMMARIES) or ()
    namespace = namespace_to_keep(request)
    # A caller that ignored the selector's namespace (Crossplane 1.x) may hand over others.
    objects = [o for o in given if structs.namespace_of(o) == namespace] if namespace else given
    problems: list[tuple[str, str, str]] = []
    found = MEMO.read_all(objects, problems)
    if problems:  # rare: leave out the unreadable, keeping each summary beside its object
        objects = [obj for obj, summary in zip(objects, found, strict=True) if summary is not None]
        found = [summary for summary in found if summary is not None]
    summaries = cast(list[NodeSummary], found)  # each one read
    if len(set(map(_NODE, summaries))) < len(summaries):  # rare: see _one_per_node
        summaries = _one_per_node(objects, summaries, problems)
    for where, field, problem in sorted(problems):
        unreadable(desired, "ConfigMap", where, field, problem)
    inputs_readable(desired, "node summaries", sorted({p[0] for p in problems}))
    newer_summaries(desired, summaries)
    return sorted(summaries, key=_NODE)


def newer_summaries(desired: Desired, summaries: Sequence[NodeSummary]) -> None:
    """Name the nodes whose summaries a newer release wrote: read by the figures this one
    knows (core/status/summary.py), which keep their places — but a release left behind."""
    newer = sorted(s.node for s in summaries if s.version > node_summary.VERSION)
    if not newer:
        return
    shown = ", ".join(newer[:5]) + (f" and {len(newer) - 5} more" if len(newer) > 5 else "")
    versions = sorted({s.version for s in summaries if s.version > node_summary.VERSION})
    desired.warning(
        f"node summaries of {shown} are version {', '.join(map(str, versions))}, newer than "
        f"this release reads ({node_summary.VERSION}): read by the figures it knows — upgrade "
        "function-gpustack so every replica runs the same release",
        reasons.NODE_SUMMARY_NEWER,
    )


_NODE = operator.attrgetter("node")


def _gathered_summaries(request: Request) -> list[NodeSummary] | None:
    """Every summary, read from the strings gathered out of the request's bytes without
    reading the objects one by one (functions/wire.py: what the frame held back); None where
    that cannot be told exactly, and the objects are read one by one, which names what is wrong.

    A summary's text is told from the objects' other strings (names, uids, timestamps, facts
    texts) by a key only it has (`summaries_among`), and gives its facts by digest. So this holds
    only where there are as many such texts as objects, each readable, each of another node:
    one per object, as the devices handler writes them. (A hand-made ConfigMap could still
    pass: one whose `data.summary` is not a summary, but which holds one under another key.)"""
    gathered = gathered_strings(request)
    if gathered is None:
        return None
    texts = node_summary.summaries_among(gathered.strings)
    if len(texts) != gathered.objects:
        return None
    summaries = MEMO.read_texts(texts, gathered.strings)
    if summaries is None or len(set(map(_NODE, summaries))) < len(summaries):
        return None
    if not _named_after_their_nodes(summaries, gathered.strings):
        return None
    return sorted(summaries, key=_NODE)


def _named_after_their_nodes(summaries: Sequence[NodeSummary], strings: list[str]) -> bool:
    """Each summary's node has a ConfigMap of its summary's name among the strings (where each
    object's `metadata.name` is): with one text per object and each of another node, every
    object is then its node's. And the facts each names are there, on every request (a summary
    the memo kept was not read again)."""
    found = set(strings)
    suffix = f"-{node_summary.NAME_SUFFIX}"  # as object_name makes it, but for long names
    names = [node + suffix for node in map(_NODE, summaries)]
    if not found.issuperset(names) and not all(
        node_summary.object_name(s.node) in found for s in summaries
    ):
        return False
    named = {s.facts_id for s in summaries} - {""}
    if all(MEMO.facts.get(digest) in found for digest in named):  # the steady state
        return True
    texts = node_summary.facts_among(strings)
    return named <= {node_summary.facts_digest(text) for text in texts}


def gathered_strings(request: Request, name: str = SUMMARIES) -> RequiredStrings | None:
    """The strings of the required objects `name` gathered from the request's bytes, where the
    caller kept to their namespace (none other's can be told apart)."""
    return None if namespace_to_keep(request, name) else request.required_strings(name)


def _one_per_node(
    objects: Sequence[Any], summaries: list[NodeSummary], problems: list[tuple[str, str, str]]
) -> list[NodeSummary]:
    """Only a hand-made ConfigMap repeats a node: the first by namespace and name counts, the
    others are named."""
    found: dict[str, NodeSummary] = {}
    source: dict[str, Any] = {}  # the object each node's summary was read from
    for obj, summary in zip(objects, summaries, strict=True):
        node = summary.node
        if node not in found:
            found[node], source[node] = summary, obj
            continue
        first, second = sorted((source[node], obj), key=_where)
        if first is obj:
            found[node], source[node] = summary, obj
        problems.append((_where(second), "data.summary", f"repeats node {node}"))
    return list(found.values())


def namespace_to_keep(request: Request, name: str = SUMMARIES) -> str:
    """The namespace the required objects `name` must be in, unless the caller already kept to
    it ("": nothing to drop)."""
    wanted = request.requirements.get(name)
    if wanted is None or request.namespaces_kept:
        return ""
    return wanted.namespace or ""


def _not_its_nodes(
    obj: Any, summary: NodeSummary, facts: Mapping[str, str]
) -> tuple[str, str] | None:
    """Why `obj` is not `summary`'s node's summary as its devices handler writes it, if it is
    not: named after another node (or not at all), or with none of the facts it names in the
    request (a node's own facts may be another node's: equal hardware, equal facts)."""
    expected = node_summary.object_name(summary.node)
    if structs.name_of(obj) != expected:
        return "metadata.name", _misnamed(expected)
    if summary.facts_id and summary.facts_id not in facts:
        return node_summary.FACTS_AT, f"is not the one the summary names (facts {summary.facts_id})"
    return None


def _where(obj: Any) -> str:
    return f"{structs.namespace_of(obj)}/{structs.name_of(obj) or '<no name>'}"


def _misnamed(expected: str) -> str:
    return (
        f"must be {expected}, the name the devices handler gives its node's summary; a "
        "ConfigMap of another name (or none) is not the node's"
    )


class SummaryMemo:
    """Summaries parsed before, by their text: pure, input-keyed memoization in each worker.

    A pool is reconciled every 30 s and most of its nodes' summaries have not changed since;
    a summary's text names its facts (by digest), so the same text always reads the same.

    A changed node leaves its old text behind, so the memo forgets what is no longer read, in
    two generations: `parsed` holds the texts read since the memo last turned, `earlier` those
    of the turn before. A text read again moves back to `parsed`; one not read for a whole turn
    is dropped. The memo turns before a request would take `parsed` past `TURN` times the
    largest request this worker has read (at least `TURN` × `SMALLEST`), so between requests it
    holds at most twice that: three times the nodes of its largest pool (about 2 KiB each),
    however fast they change; a pool read at least once a turn is never parsed whole again.
    (It was emptied past 60,000 texts: twelve times a 5,000-node fleet, 130 MiB a worker.)
    With 5 % of a pool's nodes changing per reconcile it turns every twelve reconciles, and the
    one after pays about 1 ms (at 5,000 nodes) to move its texts back."""

    TURN = 1.5
    SMALLEST = 1_000

    def __init__(self) -> None:
        self.parsed: dict[str, NodeSummary] = {}
        self.earlier: dict[str, NodeSummary] = {}
        # One copy of each facts text, shared by its nodes, by the digest summaries name it by.
        self.facts: dict[str, str] = {}
        self.digests: dict[str, str] = {}  # and each facts text's digest, hashed once
        self.largest = 0  # objects in the largest request read

    def read_all(
        self, objects: Sequence[Any], problems: list[tuple[str, str, str]]
    ) -> list[NodeSummary | None]:
        """Each object's summary; None for one that cannot be read, named in `problems`.

        Texts seen before are looked up for the whole request at once; the rest (new texts,
        and anything not a string) are read from their object, which names what is wrong."""
        texts = list(summary_texts(objects))

        facts = self._facts_of(objects)

        def parse(index: int) -> NodeSummary | None:
            try:
                return self._parse(objects[index], texts[index], facts)
            except StatusError as error:
                problems.append((_where(objects[index]), error.field, error.problem))
                return None

        found = self._look_up(texts, parse)
        # What the memo cannot tell, asked of each object on every request: it is keyed by text.
        for index, summary in enumerate(found):
            if summary is None:
                continue
            problem = _not_its_nodes(objects[index], summary, facts)
            if problem is not None:
                found[index] = None
                problems.append((_where(objects[index]), *problem))
        return found

    def _facts_of(self, objects: Sequence[Any]) -> dict[str, str]:
        """The facts texts the objects hold, by their digest (each text hashed once a turn)."""
        texts = {structs.string_at(obj, "data", node_summary.FACTS_KEY) for obj in objects}
        found = {}
        for text in texts - {None}:
            assert text is not None
            digest = self.digests.get(text)
            if digest is None:
                digest = self.digests[text] = node_summary.facts_digest(text)
            found[digest] = self.facts.setdefault(digest, text)
        return found

    def read_texts(self, texts: list[str], strings: list[str]) -> list[NodeSummary] | None:
        """The summaries of these texts, each text's facts found among `strings` by the digest
        it names; None if one cannot be read (its object then names what is wrong)."""
        facts = _FactsByDigest(self.facts, strings)
        try:
            found = self._look_up(texts, lambda index: node_summary.read(texts[index], facts))
        except StatusError:
            return None
        return cast(list[NodeSummary], found)  # each one read, or `read` raised

    def _look_up(
        self, texts: list[str], parse: Callable[[int], NodeSummary | None]
    ) -> list[NodeSummary | None]:
        """Each text's summary: kept, or parsed (`parse` of its index) and kept."""
        self.largest = max(self.largest, len(texts))
        found = list(map(self.parsed.get, texts))
        # The steady state: every text seen before. (`all`, as a summary is always true:
        # `None in found` would call each summary's __eq__.)
        if all(found):
            return found
        missing = [i for i, summary in enumerate(found) if summary is None]
        if len(self.parsed) + len(missing) > self.TURN * max(self.largest, self.SMALLEST):
            self._turn({texts[index] for index in missing})
        for index in missing:
            text = texts[index]
            summary = self.parsed.get(text) or self.earlier.pop(text, None) or parse(index)
            if summary is not None:
                self.parsed[text] = summary
            found[index] = summary
        return found

    def _turn(self, wanted: set[str]) -> None:
        """`parsed` becomes `earlier`, and what `earlier` held is dropped but for the `wanted`
        texts, which the request about to read them keeps."""
        kept = {text: self.earlier[text] for text in wanted if text in self.earlier}
        self.parsed, self.earlier = kept, self.parsed
        self.facts, self.digests = {}, {}  # the summaries kept hold their own; new ones share

    def _parse(self, obj: Any, text: str, facts: Mapping[str, str]) -> NodeSummary:
        if not text:  # missing, empty or not a string: the general reader raises, saying which
            node_summary.read(structs.view(obj).get("data", node_summary.SUMMARY_KEY))
        return node_summary.read(text, facts)  # the facts it names, from any object's

    def clear(self) -> None:
        """Forget every summary and request (a worker's first sight of its pools)."""
        self.parsed, self.earlier, self.facts, self.digests, self.largest = {}, {}, {}, {}, 0


class _FactsByDigest(Mapping[str, str]):
    """Facts texts by the digest summaries name them by: those found before, and once one is
    asked for that is not among them, every facts text among a request's `strings`."""

    def __init__(self, known: dict[str, str], strings: list[str]):
        self.known, self.strings = known, strings
        self.searched = False

    def __getitem__(self, digest: str) -> str:
        if digest not in self.known and not self.searched:
            self.searched = True
            for text in node_summary.facts_among(self.strings):
                self.known.setdefault(node_summary.facts_digest(text), text)
        return self.known[digest]

    def __iter__(self) -> Iterator[str]:
        return iter(self.known)

    def __len__(self) -> int:
        return len(self.known)


MEMO = SummaryMemo()

# obj.fields["data"].struct_value.fields["summary"].string_value of a protobuf Struct, step by
# step in C: a missing key reads as an empty Value, and anything but a string as "" (which no
# summary text is: the memo misses, and `read` says what is wrong).
_NO_VALUE = struct_pb2.Value()
_SUMMARY_TEXT = (
    operator.attrgetter("fields"),
    operator.methodcaller("get", "data", _NO_VALUE),
    operator.attrgetter("struct_value.fields"),
    operator.methodcaller("get", node_summary.SUMMARY_KEY, _NO_VALUE),
    operator.attrgetter("string_value"),
)


def summary_texts(objects: Sequence[Any]) -> Iterable[str]:
    """Each object's `data.summary` text to look up in the memo ("" where it has none): a
    request's thousands of Structs without a Python call per object; other objects (a test's
    dicts) one by one."""
    if set(map(type, objects)) <= {struct_pb2.Struct}:
        texts: Iterable[Any] = objects
        for step in _SUMMARY_TEXT:
            texts = map(step, texts)
        return texts
    return (structs.string_at(obj, "data", node_summary.SUMMARY_KEY) or "" for obj in objects)


def summaries_missing(request: Request, composed: Iterable[str]) -> bool:
    """No summary read (not resolved yet, or none published) while something was composed."""
    gathered = gathered_strings(request)
    found = gathered.objects if gathered is not None else request.required_objects(SUMMARIES)
    return not found and any(request.observed(name) is not None for name in composed)


def keep_observed(request: Request, desired: Desired, what: str) -> Desired:
    """Every composed object and the status as observed, and a Warning saying why."""
    namespace = request.requirements[SUMMARIES].namespace
    desired.warning(
        f"no node summaries found (ConfigMaps labelled {labels.RESOURCE_TYPE}="
        f"{node_summary.RESOURCE_TYPE} in namespace {namespace}): {what} kept as observed "
        "until the devices handler has published them — after an upgrade, once each Devices "
        "is reconciled",
        reasons.NODE_SUMMARIES_MISSING,
    )
    desired.status = observed_status(request)
    for name in request.observed_names():
        observed = request.observed(name)
        if observed is not None:
            desired.compose(name, as_desired(observed), observed)
    return desired


def observed_status(request: Request) -> dict[str, Any]:
    """The composite's status as observed, but the conditions Crossplane owns. Each value stays
    a view of the request, which the frame copies whole (a Devices' per-card ledger is most of
    its request: converting it to Python and back cost more than the rest of the call)."""
    return {key: value for key, value in request.xr.view("status").items() if key != "conditions"}


def as_desired(observed: View) -> dict[str, Any]:
    """An observed composed object as it was desired: what the API server and Crossplane add
    (identity, ownership, status, Crossplane's own labels) left out. The rest stays views of
    the request, which the frame copies whole."""
    found = {key: value for key, value in observed.items() if key not in ("metadata", "status")}
    metadata = observed.view("metadata")
    kept: dict[str, Any] = {key: metadata.str(key) for key in ("name", "namespace")}
    kept = {key: value for key, value in kept.items() if value}
    for field in ("labels", "annotations"):
        values = {
            k: v for k, v in metadata.view(field).items() if not k.startswith(CROSSPLANE_KEYS)
        }
        if values:
            kept[field] = values
    found["metadata"] = kept
    return found


def unreadable(desired: Desired, kind: str, name: str, field: str, problem: str) -> None:
    desired.warning(
        f"{kind} {name}: {field}: {problem}; it is left out until it is fixed",
        reasons.UNREADABLE_OBJECT,
    )


def inputs_readable(desired: Desired, kind: str, skipped: list[str]) -> None:
    if skipped:
        message = f"left out unreadable {kind}: {', '.join(skipped)} (see the Warning events)"
        desired.condition(reasons.INPUTS_READABLE, False, reasons.UNREADABLE_OBJECT, message)
    else:
        desired.condition(reasons.INPUTS_READABLE, True, reasons.ALL_READABLE)
