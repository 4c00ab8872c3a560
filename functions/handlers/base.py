"""What a handler is given and what it is made of: plain data, no protobuf.

A handler is a name, the composite kinds (and apiVersion) it serves, a TTL, and two functions
of a `Request`: `requirements` (the objects it needs Crossplane to fetch, declared from the
composite alone so every call of a reconcile asks the same) and `compose` (the desired state,
as plain data). The frame (functions/frame.py) builds the Request from a RunFunctionRequest
and turns the Desired into a response; tests build Requests from dicts with `Request.of`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from functions.core import apis, labels
from functions.handlers.desired import Desired
from functions.views import View, view_of


class InputError(Exception):
    """Bad input: a Fatal result whose message names the field and says what to do."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Requirement:
    """A resource selector: by name, by labels, or (neither) every object of the kind."""

    api_version: str
    kind: str
    match_name: str | None = None
    match_labels: Mapping[str, str] | None = None
    namespace: str | None = None
    # What the handler reads of each object, when it reads nothing else of it: key paths two or
    # three deep (("status", "allocatable"), or a label: ("metadata", "labels", key)). The frame
    # may then hand over objects holding only these; it is never sent to Crossplane.
    reads: tuple[tuple[str, ...], ...] | None = None


Objects = Mapping[str, Any]  # name → a Struct, a dict, or a View


@dataclass(frozen=True)
class RequiredStrings:
    """Every string two levels inside some required objects (each object's `metadata.name`,
    a ConfigMap's `data.<key>`, ...), in the order they came, and how many objects there are."""

    objects: int
    strings: list[str]


T = TypeVar("T")


class HeldBack(Protocol):
    """What the frame reads of required objects: the strings of those it holds back as they
    came (functions/wire.py; None for a name it does not hold back), and each object through
    a reader that it does not call again on an object it has read before (None for a name
    not resolved)."""

    def strings(self, name: str) -> RequiredStrings | None: ...

    def read_each(self, name: str, read: Callable[[View], T]) -> list[T] | None: ...


class Request:
    """Read access to one function call: the composite, observed and required objects.

    `required(name)` is None while Crossplane has not resolved the requirement yet and a list
    (maybe empty) once it has; items are sorted by namespace and name, and a namespaced
    requirement's items are kept to its namespace even when the caller could not filter.
    """

    def __init__(
        self,
        composite: Any,
        observed: Objects | None = None,
        required: Mapping[str, Sequence[Any] | None] | None = None,
        requirements: Mapping[str, Requirement] | None = None,
        step_input: Any = None,
        namespaces_kept: bool = False,
        held: HeldBack | None = None,
    ):
        self.xr: View = view_of(composite)
        self.input: View = view_of(step_input)
        self._observed = observed or {}
        self._required = required or {}
        self.requirements: Mapping[str, Requirement] = requirements or {}
        # The caller fetched each namespaced requirement from its namespace only (Crossplane
        # 2.2+): `required_objects` need not be filtered again.
        self.namespaces_kept = namespaces_kept
        self._held = held
        self._views: dict[str, list[View]] = {}  # required(name), built once per request

    @classmethod
    def of(
        cls,
        composite: Mapping[str, Any],
        observed: Mapping[str, Mapping[str, Any]] | None = None,
        required: Mapping[str, Sequence[Mapping[str, Any]] | None] | None = None,
    ) -> Request:
        """A request from plain dicts (tests, the simulator)."""
        return cls(composite, observed, required)

    def with_requirements(self, requirements: Mapping[str, Requirement]) -> Request:
        return self._with(self._observed, requirements)

    def with_observed(self, observed: Objects) -> Request:
        return self._with(observed, self.requirements)

    def _with(self, observed: Objects, requirements: Mapping[str, Requirement]) -> Request:
        return Request(
            self.xr,
            observed,
            self._required,
            requirements,
            self.input,
            self.namespaces_kept,
            self._held,
        )

    @property
    def kind(self) -> str:
        return self.xr.str("kind")

    @property
    def namespace(self) -> str:
        """The XR's namespace, or a legacy claim's (from Crossplane's claim label)."""
        return self.xr.namespace or self.xr.labels().get(labels.CLAIM_NAMESPACE, "")

    @property
    def name(self) -> str:
        """The tenant-facing name: a legacy XR answers with its claim's name."""
        return self.xr.labels().get(labels.CLAIM_NAME) or self.xr.name

    def observed(self, name: str) -> View | None:
        found = self._observed.get(name)
        return view_of(found) if found is not None else None

    def observed_objects(self) -> Objects:
        return self._observed

    def observed_names(self) -> list[str]:
        return sorted(self._observed)

    def required(self, name: str) -> list[View] | None:
        if name not in self._required or self._required[name] is None:
            return None
        if name not in self._views:
            items = [view_of(item) for item in self._required[name] or ()]
            requirement = self.requirements.get(name)
            if requirement is not None and requirement.namespace:
                items = [item for item in items if item.namespace == requirement.namespace]
            self._views[name] = sorted(items, key=lambda view: (view.namespace, view.name))
        return list(self._views[name])

    def required_objects(self, name: str) -> Sequence[Any] | None:
        """The required objects as given (Structs or dicts): unwrapped, unsorted, and not kept
        to the requirement's namespace — for a hot path that reads one value from thousands of
        objects and orders and filters what it computes itself (functions/structs.py)."""
        if name not in self._required or self._required[name] is None:
            return None
        return self._required[name] or ()

    def required_strings(self, name: str) -> RequiredStrings | None:
        """The strings two levels inside the required objects, gathered from the request's
        bytes without reading the objects (functions/wire.py); None where they are not
        resolved, or came already parsed (or as dicts). Which object a string came from is not
        told: `required_objects` tells that."""
        if self._held is None or name not in self._required:
            return None
        return self._held.strings(name)

    def required_read(self, name: str, read: Callable[[View], T]) -> list[T] | None:
        """What `read` reads of each required object, in the order they came and not kept to
        the requirement's namespace (as `required_objects`). In the frame, an object whose
        like it has read before (what the requirement reads of it, however its maps were
        ordered on the wire) is not read again: `read` must be a pure function of the object,
        and what it returns must not be changed."""
        if self._held is not None and name in self._required:
            found = self._held.read_each(name, read)
            if found is not None:
                return found
        objects = self.required_objects(name)
        return None if objects is None else [read(view_of(obj)) for obj in objects]

    def required_one(self, name: str) -> View | None:
        items = self.required(name)
        return items[0] if items else None


@dataclass(frozen=True)
class Handler:
    """One handler: what it serves and its two functions of a Request."""

    name: str
    kinds: frozenset[str]
    compose: Callable[[Request], Desired]
    requirements: Callable[[Request], dict[str, Requirement]] = field(default=lambda request: {})
    # Required resources are fetched, not watched (Crossplane v2.3): the TTL is how soon a
    # change in them is seen.
    ttl: datetime.timedelta = datetime.timedelta(seconds=60)
    # The composite's apiVersion: every kind is worker.gpustack.ai's but GPUClass.
    api_version: str = apis.WORKER
