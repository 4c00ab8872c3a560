"""The frame every handler runs in: the one place that speaks protobuf.

It turns a RunFunctionRequest into a `Request`, runs the handler, and turns its `Desired` into a
RunFunctionResponse, keeping the protocol's promises (DESIGN §5) in one place:
- the request's tag, context and desired state from earlier steps are echoed untouched;
- requirements are declared identically on every call of a reconcile, from the composite (and,
  where a selector needs a setting, from the Catalog once read), never from what they return;
- "not resolved yet" (`Request.required()` is None) differs from "resolved, none" (`[]`);
- every composed resource carries the readiness the handler gave it;
- both Crossplane protocols: a caller that advertises `CAPABILITY_REQUIRED_RESOURCES` (2.2+) is
  asked through `requirements.resources`; any other (1.x, 2.0, 2.1) through the deprecated
  `requirements.extra_resources`, which every version answers. Answers are read from either
  field. A caller that may ignore a selector's namespace (1.x) gets namespaced selectors filtered
  here, and a Fatal for a namespaced match by name, which it cannot serve;
- bad input (`InputError`, or a Fatal the handler returns) becomes a Fatal result naming the
  field, and nothing composed earlier is dropped; any other exception becomes a Fatal result
  naming the handler, the exception's type and where it was raised — never its message, and
  the log gets its frames but no local variable (functions/logs.py: a request may hold a
  license token);
- a step whose input has `providerKubernetes` (Crossplane 1.x) composes each namespaced object
  inside a provider-kubernetes Object and shows the handler each observed Object as the object
  it carries (functions/envelope.py);
- the composite is checked before any handler reads it, as the API server would have: of
  the kind and apiVersion the handler serves; with a `metadata` object whose `name` (and a
  legacy XR's claim name) is a DNS-1123 subdomain and whose namespace (and claim namespace)
  is a DNS-1123 label; holding no infinite number or NaN (functions/core/checks.py). Each is
  refused naming the field, so no handler composes from a name or a number no cluster holds.
  `metadata.uid` must be a string when present; its absence is legal, because
  `crossplane render` (and the offline tools) send composites without one;
- every composed object's name and namespace is checked for its kind (a Service's is a
  DNS-1035 label) before the response is written: one the API server would refuse is refused
  here, naming the object, instead of failing its apply later;
- objects nested as deep as Kubernetes stores them (its JSON decoder allows 10,000 levels; a
  Struct level is three protobuf levels, and upb's default of 100 broke at 32) are parsed; one
  nested deeper than the handlers can walk is answered with a Fatal naming that object, never
  a transport error;
- a composed object is plain data by the time it is serialised: a value a handler copied from
  an observed object as a view is written as the data it views.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import operator
import re
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crossplane.function import logging, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from google.protobuf.internal import api_implementation
from google.protobuf.message import DecodeError

from functions import logs, wire
from functions.core import checks
from functions.core.labels import CLAIM_NAME, CLAIM_NAMESPACE
from functions.envelope import Envelope
from functions.handlers.base import Handler, InputError, Request, RequiredStrings, Requirement
from functions.handlers.desired import Desired, Severity
from functions.views import ListView, ShapeError, View, message_of, plain, view_of

_STATUS = {True: fnv1.STATUS_CONDITION_TRUE, False: fnv1.STATUS_CONDITION_FALSE}
_READY = {True: fnv1.READY_TRUE, False: fnv1.READY_FALSE}
_SEVERITY = {
    Severity.NORMAL: fnv1.SEVERITY_NORMAL,
    Severity.WARNING: fnv1.SEVERITY_WARNING,
    Severity.FATAL: fnv1.SEVERITY_FATAL,
}


@dataclass(frozen=True)
class Protocol:
    """Which requirements field the caller reads, and whether it honours namespaces."""

    required_resources: bool  # True: `requirements.resources`; False: `extra_resources`
    filters_namespaces: bool

    @classmethod
    def of(cls, req: fnv1.RunFunctionRequest) -> Protocol:
        capabilities = set(req.meta.capabilities)
        if fnv1.CAPABILITY_CAPABILITIES in capabilities:
            modern = fnv1.CAPABILITY_REQUIRED_RESOURCES in capabilities
            return cls(required_resources=modern, filters_namespaces=modern)
        return cls(required_resources=False, filters_namespaces=False)

    def refusal(self, requirements: Mapping[str, Requirement]) -> InputError | None:
        """A namespaced match by name that this caller cannot fetch, if any."""
        if self.filters_namespaces:
            return None
        for name in sorted(requirements):
            wanted = requirements[name]
            if wanted.namespace and wanted.match_name is not None:
                return InputError(
                    f"requirements.{name}",
                    f"this Crossplane does not advertise capabilities, so it may ignore a "
                    f"selector's namespace and cannot fetch {wanted.kind} {wanted.match_name} "
                    f"in namespace {wanted.namespace}; run Crossplane 2.2 or newer",
                )
        return None


_RESOURCE = operator.attrgetter("resource")


class _Required(Mapping[str, Sequence[struct_pb2.Struct]]):
    """Required objects by requirement name, read on demand from either protocol field, or
    from the encoded Resources `wire.split` held back, parsed when their objects are first read
    (a pool that reads one string of each never parses them: `strings`), and then only what
    the requirement says the handler `reads` of each. Each name's list is made once (a pool's
    holds thousands of objects). Through a handler's reader of each object (`read_each`), an
    object read before is not read again (`ReadOnce`)."""

    def __init__(self, req: fnv1.RunFunctionRequest, held: Mapping[str, wire.Encoded]):
        self.req, self.held = req, held
        self.lists: dict[str, Sequence[struct_pb2.Struct]] = {}
        self.gathered: dict[str, RequiredStrings] = {}
        self.reads: dict[str, tuple[tuple[str, ...], ...]] = {}  # by name: what a handler reads
        self.read: dict[tuple[str, Callable[[View], Any]], list[Any] | None] = {}  # read_each's

    def _resources(self, name: str) -> fnv1.Resources | None:
        if name in self.held:
            return _parsed(name, fnv1.Resources.FromString, self.held[name])
        if name in self.req.required_resources:
            return self.req.required_resources[name]
        if name in self.req.extra_resources:
            return self.req.extra_resources[name]
        return None

    def strings(self, name: str) -> RequiredStrings | None:
        """The strings two levels inside `name`'s objects, gathered without parsing them where
        they were held back (once per name); None where they were not."""
        if name not in self.held:
            return None
        if name not in self.gathered:
            self.gathered[name] = _parsed(name, wire.strings_in, self.held[name])
        return self.gathered[name]

    def read_each(self, name: str, read: Callable[[View], Any]) -> list[Any] | None:
        """What `read` reads of each object of `name`, in the order they came (READS remembers
        it by what was parsed of the object: of one held back, what the requirement reads of
        it); None where `name` is not resolved. Once per request."""
        if (name, read) not in self.read:
            self.read[name, read] = self._read_each(name, read)
        found = self.read[name, read]
        return None if found is None else list(found)

    def _read_each(self, name: str, read: Callable[[View], Any]) -> list[Any] | None:
        paths = self.reads.get(name)
        if name not in self.held:
            objects = self.get(name)
            if objects is None:
                return None
            if paths:  # what the requirement reads of each, as of one held back
                objects = [wire.struct_projected(obj, paths) for obj in objects]
            return [READS.read(read, obj) for obj in objects]
        parse = functools.partial(wire.object_of, paths=paths)
        items = _parsed(name, wire.objects_in, self.held[name])
        return [READS.read(read, _parsed(name, parse, item)) for item in items]

    def __getitem__(self, name: str) -> Sequence[struct_pb2.Struct]:
        if name not in self.lists and name in self.held and name in self.reads:
            paths = self.reads[name]  # only what the handler reads of each is parsed
            self.lists[name] = _parsed(name, lambda b: wire.projected(b, paths), self.held[name])
        if name not in self.lists:
            found = self._resources(name)
            if found is None:
                raise KeyError(name)
            self.lists[name] = tuple(map(_RESOURCE, found.items))  # in C: thousands of items
        return self.lists[name]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (
            name in self.held
            or name in self.req.required_resources
            or name in self.req.extra_resources
        )

    def __iter__(self) -> Iterator[str]:
        return iter({*self.held, *self.req.required_resources, *self.req.extra_resources})

    def __len__(self) -> int:
        return len(set(self))


class ReadOnce:
    """What a handler's reader read of a required object, by what was parsed of the object: a
    class requires every launcher Pod at every reconcile, and most have not changed since the
    last; every VM Instance requires the GPU classes, the Catalog and KubeVirt, as every other
    VM Instance does, and they rarely change. The key is the reader (a module's function: a
    closure made per call would never be found again) and the SHA-256 of the object (only
    what the handler reads of it, where its requirement says) serialised deterministically.
    The bytes it came in would not do: Crossplane's Go protobuf writes a map's entries in Go's
    random map order, so the same object comes as other bytes on each call.

    Bounded by the size of what it remembers, not by a count: `budget` bytes of the objects as
    read (what is made of an object is about as large as the part of it read: a launcher's
    projection and its `Launcher` are some hundreds of bytes, an InstanceType and its facts
    2.5 KiB). The least recently read is forgotten first: an InstanceType whose status a pool
    rewrites with every allocation leaves a stale reading behind each time."""

    def __init__(self, budget: int):
        self.budget, self.held = budget, 0
        self.found: OrderedDict[tuple[Any, bytes], tuple[Any, int]] = OrderedDict()

    def read(self, read: Callable[[View], Any], obj: struct_pb2.Struct) -> Any:
        encoded = obj.SerializeToString(deterministic=True)
        key = (read, hashlib.sha256(encoded).digest())
        if key in self.found:
            self.found.move_to_end(key)
            return self.found[key][0]
        value = read(view_of(obj))
        self.found[key] = (value, len(encoded))
        self.held += len(encoded)
        while self.held > self.budget:
            self.held -= self.found.popitem(last=False)[1][1]
        return value

    def clear(self) -> None:
        self.found.clear()
        self.held = 0


READS = ReadOnce(32 << 20)  # each process's own: 32 MiB of objects read, about as much again kept


def _parsed(name: str, parse: Callable[[Any], Any], encoded: wire.Encoded) -> Any:
    try:
        return parse(encoded)
    except DecodeError as error:
        raise InputError(
            f"required resources {name!r}",
            f"cannot be parsed ({error}); the request is damaged — check what sent it",
        ) from error


def allow_deep_messages() -> None:
    """Parse requests nested as deep as Kubernetes stores objects (see the module docstring).

    upb's parser stops at 100 message levels unless oversize protos are allowed, which lifts
    its depth limit to 65,535 levels; the pure-Python parser takes the limit directly."""
    if api_implementation.Type() == "upb":
        from google._upb import _message

        _message.SetAllowOversizeProtos(True)
    else:  # pragma: no cover - the pure-Python implementation, where it is chosen
        from google.protobuf.internal import decoder

        decoder.SetRecursionLimit(MAX_MESSAGE_DEPTH)


MAX_MESSAGE_DEPTH = 65_535
allow_deep_messages()


def request_of(
    req: fnv1.RunFunctionRequest, held: Mapping[str, wire.Encoded] | None = None
) -> Request:
    """The handler's view of `req`, whose required resources `held` holds back encoded, if
    any (`wire.split`)."""
    return _request_of(req, _Required(req, held or {}), Protocol.of(req))


def _request_of(req: fnv1.RunFunctionRequest, required: _Required, protocol: Protocol) -> Request:
    observed = {name: r.resource for name, r in req.observed.resources.items()}
    kept = protocol.filters_namespaces
    composite = req.observed.composite.resource
    return Request(composite, observed, required, None, req.input, kept, required)


def run(
    handler: Handler, req: fnv1.RunFunctionRequest, held: Mapping[str, wire.Encoded] | None = None
) -> fnv1.RunFunctionResponse:
    """Run `handler` on `req` (its required resources held back in `held`, if any) inside the
    frame; never raises."""
    required = _Required(req, held or {})
    protocol = Protocol.of(req)
    request = _request_of(req, required, protocol)
    try:
        envelope = Envelope.of(request.input)
        enveloped = request.observed_objects()
        if envelope is not None:  # Crossplane 1.x: namespaced objects inside Objects
            request = request.with_observed(envelope.observed(enveloped))
        check_composite(request, handler)
        check_numbers(req.observed.composite.resource)
        requirements = handler.requirements(request)
        required.reads = {name: r.reads for name, r in requirements.items() if r.reads}
        refusal = protocol.refusal(requirements)
        if refusal is not None:
            raise refusal
        desired = handler.compose(request.with_requirements(requirements))
        check_composed_names(request, desired)
        ttl = desired.ttl or handler.ttl
        if desired.failed:
            rsp = response.to(req, ttl)
            _results(rsp, desired)
            return rsp
        if envelope is not None:
            desired = envelope.desired(desired, enveloped)
        return respond(req, ttl, protocol, requirements, desired)
    except (InputError, ShapeError) as error:
        return refuse(req, str(error), handler.ttl)
    except RecursionError:
        return refuse(req, too_deep(req, required), handler.ttl)
    except Exception as error:  # the frame's promise: a result, never a raised exception
        return refuse(req, internal_failure(handler.name, req.meta.tag, error), handler.ttl)


def internal_failure(handler: str, tag: str, error: Exception) -> str:
    """Log an exception a handler raised, and the Fatal result's message: its type and where it
    was raised, never its message or the data it was raised on (functions/logs.py): a
    request may hold a license token, and an exception's message may quote what it read."""
    details = logs.failure(error)
    logging.get_logger().error("handler failed", handler=handler, tag=tag, **details)
    return (
        f"{handler} handler failed: {details['error']} at {details['at']}; this is a bug in "
        "function-gpustack — the function's log has the trace (by this request's tag)"
    )


def check_composite(request: Request, handler: Handler) -> None:
    """The composite is of a kind and apiVersion the handler serves, and has the metadata every
    composed name is made from, as the API server would have accepted it."""
    if request.kind not in handler.kinds:
        served = ", ".join(sorted(handler.kinds))
        raise InputError(
            "input.handler",
            f"handler {handler.name!r} serves {served}; the composite is a "
            f"{request.kind or 'resource without a kind'} — pick the handler for that kind",
        )
    api_version = request.xr.get("apiVersion")
    if api_version != handler.api_version:
        got = _shown(api_version) if api_version is not None else "missing"
        raise InputError(
            "apiVersion",
            f"handler {handler.name!r} serves {handler.api_version} {request.kind}, got {got}; "
            f"apply the {request.kind} with apiVersion {handler.api_version}",
        )
    metadata = request.xr.get("metadata")
    if not isinstance(metadata, View):
        raise InputError(
            "metadata",
            f"the {request.kind} has no metadata object; every object Crossplane sends has one "
            "(with at least a name) — check what sent this request",
        )
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(
            "metadata.name",
            f"the {request.kind} has no name; objects composed for it are named after it — "
            "give it a metadata.name",
        )
    _check_name("metadata.name", name, checks.subdomain_problem(name), request.kind)
    namespace = metadata.get("namespace")
    if namespace is not None:
        if not isinstance(namespace, str):
            raise InputError("metadata.namespace", f"must be a string, got {_shown(namespace)}")
        if namespace:
            _check_name("metadata.namespace", namespace, checks.label_problem(namespace), "")
    # A legacy XR is named after its claim. One composed by another XR on Crossplane 1.x
    # carries its parent's claim labels, empty where the parent has no claim: no claim either.
    claim = request.xr.view("metadata", "labels")
    for label, check in (
        (CLAIM_NAME, checks.subdomain_problem),
        (CLAIM_NAMESPACE, checks.label_problem),
    ):
        value = claim.get(label)
        if value is not None:
            field = f"metadata.labels[{label!r}]"
            if not isinstance(value, str):
                raise InputError(field, f"must be a string, got {_shown(value)}")
            if value:
                _check_name(field, value, check(value), request.kind)
    uid = metadata.get("uid")
    if uid is not None and not isinstance(uid, str):
        raise InputError("metadata.uid", f"must be a string, got {type(uid).__name__}")


def _check_name(field: str, value: str, problem: str | None, kind: str) -> None:
    if problem is None:
        return
    made = f"; objects composed for this {kind} are named after it" if kind else ""
    raise InputError(
        field,
        f"{_shown(value)} is not a name the API server accepts: {problem}{made} — "
        "use lowercase letters, digits and '-'",
    )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# A Value's number_value (field 2, 64-bit) holding an infinity or a NaN: every exponent bit set.
_NON_FINITE = re.compile(rb"\x11[\x00-\xff]{6}[\xf0-\xff][\x7f\xff]", re.DOTALL)


def check_numbers(composite: struct_pb2.Struct) -> None:
    """Refuse a composite that holds an infinite number or a NaN, naming the first such field:
    no object the API server stores can (JSON has neither), and a handler reading one as a
    count or a quantity cannot tell what was meant. The bytes are searched first, in C; the
    objects are walked only where a match may be one."""
    if not _NON_FINITE.search(composite.SerializeToString()):
        return
    found = _non_finite(composite)
    if found is not None:
        path, value = found
        raise InputError(path, checks.number_problem(value) or "is not a finite number")


def _non_finite(struct: struct_pb2.Struct) -> tuple[str, float] | None:
    """The first field (keys sorted, depth first) holding a non-finite number, walked without
    recursion."""
    stack: list[tuple[str, struct_pb2.Value]] = [
        (key, struct.fields[key]) for key in sorted(struct.fields, reverse=True)
    ]
    while stack:
        path, value = stack.pop()
        kind = value.WhichOneof("kind")
        if kind == "number_value" and checks.number_problem(value.number_value):
            return path, value.number_value
        if kind == "struct_value":
            fields = value.struct_value.fields
            stack += [(f"{path}.{key}", fields[key]) for key in sorted(fields, reverse=True)]
        elif kind == "list_value":
            items = value.list_value.values
            stack += [(f"{path}[{i}]", items[i]) for i in reversed(range(len(items)))]
    return None


def check_composed_names(request: Request, desired: Desired) -> None:
    """Every composed object's name and namespace is one the API server accepts for its kind,
    or the request is refused naming it: its apply would fail later, far from the field the
    name was made from (the composite's name, mostly)."""
    for key in sorted(desired.resources):
        obj = view_of(desired.resources[key])
        kind = obj.str("kind")
        for part, check in (("name", checks.name_problem), ("namespace", _namespace_problem)):
            value = obj.get("metadata", part)
            if not isinstance(value, str) or not value:
                continue  # none: Crossplane names it (a namespace: the composite's, or none)
            problem = check(kind, value)
            if problem is not None:
                field = "metadata.name" if request.xr.name and request.xr.name in value else key
                raise InputError(
                    field,
                    f"the {kind or 'object'} {key!r} composed for this {request.kind} would have "
                    f"metadata.{part} {_shown(value)}, which the API server refuses: {problem} "
                    f"— it is made from the {request.kind}'s name or spec: shorten or rename it",
                )


def _namespace_problem(_kind: str, value: str) -> str | None:
    return checks.label_problem(value)


def too_deep(req: fnv1.RunFunctionRequest, required: Mapping[str, Sequence[Any]]) -> str:
    """A Fatal message naming the most deeply nested object of the request."""
    depth, where = max(_depths(req, required), default=(0, "an object"))
    return (
        f"{where}: is nested {depth} levels deep, deeper than this function can read; "
        "flatten it (Kubernetes allows it, but no gpustack object needs nesting this deep)"
    )


def _depths(
    req: fnv1.RunFunctionRequest, required: Mapping[str, Sequence[Any]]
) -> Iterator[tuple[int, str]]:
    objects = [("composite", req.observed.composite.resource)]
    objects += [(f"observed {n}", r.resource) for n, r in req.observed.resources.items()]
    objects += [(f"required {n}", obj) for n, found in required.items() for obj in found]
    for label, struct in objects:
        view = view_of(struct)
        kind, name = view.str("kind") or "object", view.name or "without a name"
        yield _depth(struct), f"{label} {kind} {name}"


def _depth(struct: struct_pb2.Struct) -> int:
    """How many objects and lists deep a Struct goes, walked without recursion."""
    deepest = 0
    stack: list[tuple[struct_pb2.Struct | struct_pb2.ListValue, int]] = [(struct, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        values = node.fields.values() if isinstance(node, struct_pb2.Struct) else node.values
        for value in values:
            kind = value.WhichOneof("kind")
            if kind == "struct_value":
                stack.append((value.struct_value, depth + 1))
            elif kind == "list_value":
                stack.append((value.list_value, depth + 1))
    return deepest


def refuse(
    req: fnv1.RunFunctionRequest, message: str, ttl: datetime.timedelta = response.DEFAULT_TTL
) -> fnv1.RunFunctionResponse:
    """A Fatal result that keeps the request's desired state and context as they were."""
    rsp = response.to(req, ttl)
    response.fatal(rsp, message)
    return rsp


def respond(
    req: fnv1.RunFunctionRequest,
    ttl: datetime.timedelta,
    protocol: Protocol,
    requirements: Mapping[str, Requirement],
    desired: Desired,
) -> fnv1.RunFunctionResponse:
    rsp = response.to(req, ttl)
    selectors = (
        rsp.requirements.resources
        if protocol.required_resources
        else rsp.requirements.extra_resources
    )
    for name in sorted(requirements):
        _select(selectors[name], requirements[name])
    for name in sorted(desired.resources):
        composed = rsp.desired.resources[name]
        composed.resource.Clear()
        _put(composed.resource, desired.resources[name])
        composed.ready = _READY[desired.ready.get(name, False)]
    if desired.status:
        _merge_status(rsp.desired.composite, desired.status)
    if desired.composite_ready is not None:
        rsp.desired.composite.ready = _READY[desired.composite_ready]
    for condition in desired.conditions:
        found = fnv1.Condition(
            type=condition.type, status=_STATUS[condition.status], reason=condition.reason
        )
        if condition.message:
            found.message = condition.message
        rsp.conditions.append(found)
    _results(rsp, desired)
    return rsp


def _results(rsp: fnv1.RunFunctionResponse, desired: Desired) -> None:
    for result in desired.results:
        found = fnv1.Result(severity=_SEVERITY[result.severity], message=result.message)
        if result.reason:
            found.reason = result.reason
        rsp.results.append(found)


def _select(selector: fnv1.ResourceSelector, requirement: Requirement) -> None:
    selector.api_version = requirement.api_version
    selector.kind = requirement.kind
    if requirement.match_name is not None:
        selector.match_name = requirement.match_name
    else:  # no labels: an empty selector, every object (1.x refuses a selector of neither)
        selector.match_labels.SetInParent()
        selector.match_labels.labels.update(dict(requirement.match_labels or {}))
    if requirement.namespace:
        selector.namespace = requirement.namespace


def _merge_status(composite: fnv1.Resource, status: Mapping[str, Any]) -> None:
    """Set our status keys, keeping any an earlier step set."""
    _put(composite.resource.fields["status"].struct_value, status)


def _put(target: struct_pb2.Struct, data: Mapping[str, Any]) -> None:
    """Set `data`'s keys in `target` as `Struct.update` does (an object or a list replaces what
    was there), at a third of its cost: this writes every composed object of every call."""
    fields = target.fields
    for key, value in data.items():
        _set(fields[key], value)


def _set(target: struct_pb2.Value, value: Any) -> None:
    """`value` into `target`. One a handler passes on as it observed it (a view of the
    request's Struct: a Devices' per-card ledger, a composed object's spec) is copied whole,
    never converted to Python and back."""
    if isinstance(value, str):
        target.string_value = value
    elif isinstance(value, bool):  # before the numbers: a bool is an int
        target.bool_value = value
    elif isinstance(value, int | float):
        target.number_value = value
    elif value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, Mapping):
        struct = target.struct_value
        struct.Clear()  # also marks it set: an empty object stays an object
        _put(struct, value)
    elif isinstance(value, list | tuple):
        items = target.list_value
        items.Clear()
        for item in value:
            _set(items.values.add(), item)
    elif isinstance(value, View | ListView):
        _copy(target, value)
    else:
        raise TypeError(f"a composed object cannot hold a {type(value).__name__}: {value!r}")


def _copy(target: struct_pb2.Value, value: View | ListView) -> None:
    found = message_of(value)
    if isinstance(found, struct_pb2.Struct):
        target.struct_value.CopyFrom(found)
    elif isinstance(found, struct_pb2.ListValue):
        target.list_value.CopyFrom(found)
    else:  # a view of plain data
        _set(target, plain(value))
