"""Mutations of real requests, for the fuzz suite (tests/test_fuzz.py) and `make soak`.

A mutated request is a recorded one (tests/support/corpus.py) with one to three of its objects —
the composite, an observed or a required object — changed at a path that exists in it: a value
deleted or replaced by one of the wrong types, absurd numbers and deep nests that a cluster
can hold or that a broken writer could leave (an infinity or a NaN, which only protobuf can
carry). Each request also carries what the frame must echo untouched: a tag, a context, a
resource and a status key from an earlier pipeline step.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import random
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format
from hypothesis import strategies as st

from tests.support import corpus

TAG = "fuzz-tag"
CONTEXT = {"apiextensions.crossplane.io/environment": {"region": "eu"}, "n": 1}
EARLIER = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "from-earlier"}}
EARLIER_STATUS = {"fromAnEarlierStep": "kept"}
DEEP = 48  # deeper than Crossplane's 32 levels that broke the transport
# How many examples each fuzz test tries: a bounded count in `make test`, more in `make soak`.
EXAMPLES = int(os.environ.get("GPUSTACK_FUZZ_EXAMPLES", "40"))
EXPLORE = "GPUSTACK_FUZZ_EXAMPLES" in os.environ  # set: new examples each run (make soak)
PARSE_DEPTH = 10_000


def nested(depth: int, leaf: Any = "leaf") -> Any:
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


HAZARDS = [
    None,
    0,
    -1,
    0.5,
    1.5,
    1e300,
    -1e300,
    2.0**64,
    2**53,
    "",
    "-1",
    "1Ki",
    "abc",
    "1e400",
    math.inf,  # no JSON holds these; a protobuf number can (issue 35)
    -math.inf,
    math.nan,
    [],
    {},
    [None],
    [{}],
    {"status": "True"},
    nested(DEEP),
]
LEAVES = st.one_of(
    st.sampled_from(HAZARDS),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
VALUES = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Mutation:
    """One change: `value` at `path` of the `target`-th object (None: the key deleted)."""

    target: int
    path: Path
    delete: bool
    value: Any = None

    def __str__(self) -> str:
        where = "/".join(map(str, self.path))
        return f"object {self.target} {where}: " + ("deleted" if self.delete else repr(self.value))


def documents(handler: str) -> list[dict[str, Any]]:
    """The handler's recorded requests as JSON documents, each with the echo probes added."""
    found = []
    for req in corpus.load(handler):
        doc = json_format.MessageToDict(req)
        doc["meta"] = {**doc.get("meta", {}), "tag": TAG}
        doc["context"] = copy.deepcopy(CONTEXT)
        doc["desired"] = {
            "composite": {"resource": {"status": dict(EARLIER_STATUS)}},
            "resources": {"from-an-earlier-step": {"resource": EARLIER, "ready": "READY_TRUE"}},
        }
        found.append(doc)
    return found


def objects(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's objects that a mutation may touch: composite, observed, required."""
    observed = doc.get("observed", {})
    found = [observed.setdefault("composite", {}).setdefault("resource", {})]
    for name in sorted(observed.get("resources") or {}):
        found.append(observed["resources"][name].setdefault("resource", {}))
    for field in ("requiredResources", "extraResources"):
        for name in sorted(doc.get(field) or {}):
            found += [item.setdefault("resource", {}) for item in doc[field][name].get("items", [])]
    return found


def paths(value: Any, prefix: Path = ()) -> Iterator[Path]:
    if prefix:
        yield prefix
    if isinstance(value, dict):
        for key in sorted(value):
            yield from paths(value[key], (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths(item, (*prefix, index))


def apply(doc: dict[str, Any], mutation: Mutation) -> None:
    obj: Any = objects(doc)[mutation.target]
    for key in mutation.path[:-1]:
        obj = obj[key]
    if mutation.delete:
        obj.pop(mutation.path[-1])
    else:
        obj[mutation.path[-1]] = copy.deepcopy(mutation.value)


@st.composite
def mutations(draw, doc: dict[str, Any]) -> Mutation:
    found = objects(doc)
    # The composite half the time: it is the object every rule of a handler reads.
    target = draw(st.one_of(st.just(0), st.integers(0, len(found) - 1)))
    where = list(paths(found[target]))
    if not where:
        return Mutation(target, ("metadata",), False, draw(VALUES))
    path = draw(st.sampled_from(where))
    if draw(st.integers(0, 3)) == 0:
        return Mutation(target, path, True)
    return Mutation(target, path, False, draw(VALUES))


@dataclass(frozen=True)
class Case:
    """Recorded request `index` of `handler` with `mutations` applied, in order."""

    handler: str
    index: int
    mutations: tuple[Mutation, ...]

    def document(self) -> dict[str, Any]:
        doc = copy.deepcopy(documents_of(self.handler)[self.index])
        for mutation in self.mutations:
            apply(doc, mutation)
        return doc

    def __repr__(self) -> str:
        changes = "; ".join(str(m)[:200] for m in self.mutations)
        return f"Case({self.handler} request {self.index}: {changes})"


@st.composite
def cases(draw, handler: str) -> Case:
    """A recorded request of `handler` with 1–3 mutations applied."""
    index = draw(st.integers(0, len(documents_of(handler)) - 1))
    doc = copy.deepcopy(documents_of(handler)[index])
    applied = []
    for _ in range(draw(st.integers(1, 3))):
        mutation = draw(mutations(doc))
        apply(doc, mutation)
        applied.append(mutation)
    return Case(handler, index, tuple(applied))


_DOCUMENTS: dict[str, list[dict[str, Any]]] = {}


def documents_of(handler: str) -> list[dict[str, Any]]:
    if handler not in _DOCUMENTS:
        _DOCUMENTS[handler] = documents(handler)
    return _DOCUMENTS[handler]


def request_of(doc: dict[str, Any]) -> fnv1.RunFunctionRequest:
    """The protobuf request, round-tripped through the wire format as Crossplane sends it."""
    req = json_format.ParseDict(doc, fnv1.RunFunctionRequest(), max_recursion_depth=PARSE_DEPTH)
    return fnv1.RunFunctionRequest.FromString(req.SerializeToString())


def plain_request(doc: dict[str, Any]) -> tuple[dict, dict, dict]:
    """The composite, observed and required objects as plain dicts (for `Request.of`)."""
    observed = doc.get("observed", {})
    composite = observed.get("composite", {}).get("resource", {})
    composed = {
        name: item.get("resource", {}) for name, item in (observed.get("resources") or {}).items()
    }
    required: dict[str, list[dict]] = {}
    for field in ("extraResources", "requiredResources"):
        for name, found in (doc.get(field) or {}).items():
            required[name] = [item.get("resource", {}) for item in found.get("items", [])]
    return composite, composed, required


def random_case(handler: str, chance: random.Random) -> Case:
    """A case drawn with `chance` rather than Hypothesis: for `make soak`'s long counted runs."""
    documents = documents_of(handler)
    index = chance.randrange(len(documents))
    doc = copy.deepcopy(documents[index])
    applied = []
    for _ in range(chance.randint(1, 3)):
        found = objects(doc)
        target = 0 if chance.random() < 0.5 else chance.randrange(len(found))
        where = list(paths(found[target]))
        if not where:
            continue
        path = chance.choice(where)
        if chance.random() < 0.25:
            mutation = Mutation(target, path, True)
        else:
            mutation = Mutation(target, path, False, _random_value(chance))
        apply(doc, mutation)
        applied.append(mutation)
    return Case(handler, index, tuple(applied))


def _random_value(chance: random.Random, depth: int = 0) -> Any:
    roll = chance.random()
    if roll < 0.5 or depth > 2:
        return copy.deepcopy(chance.choice(HAZARDS))
    if roll < 0.7:
        return chance.choice([True, False, chance.randint(-(2**53), 2**53), chance.random() * 1e9])
    if roll < 0.85:
        return [_random_value(chance, depth + 1) for _ in range(chance.randint(0, 3))]
    return {f"k{i}": _random_value(chance, depth + 1) for i in range(chance.randint(0, 3))}


# Defects the fuzz suite found in code outside the handlers' boundary, reported to its owners
# and recorded here until fixed: (file, exception type) → what is wrong and the fix. A test
# that meets one says so (xfail, with this text); it fails on anything else.
KNOWN: dict[tuple[str, str], str] = {}  # (file, exception) → a defect a fix is pending for


def known_defect(handler: str, request: Any) -> str | None:
    """The known defect this request meets in `handler`, if any (it raises where it is)."""
    from functions.handlers import HANDLERS

    served = HANDLERS[handler]
    try:
        served.compose(request.with_requirements(served.requirements(request)))
    except Exception as error:  # classifying whatever the handler raised
        where = traceback.extract_tb(error.__traceback__)[-1].filename
        for (file, kind), text in KNOWN.items():
            if where.endswith(file) and type(error).__name__ == kind:
                return text
    return None


@contextlib.contextmanager
def memory_guard(headroom: int = 3 * 2**30) -> Iterator[None]:
    """Let the process grow by `headroom` bytes at most, so a handler that allocates without
    bound (a count of 2**53 taken at its word) fails with MemoryError — a counted escaped
    exception — instead of the kernel killing the whole run."""
    try:
        import resource
    except ImportError:  # not on this platform: run unguarded
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = _address_space()
    limit = used + headroom if used else soft
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _address_space() -> int:
    """This process's virtual size in bytes (Linux), or 0 where it cannot be read."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0
