"""The frame's promises, on a handler that misbehaves on purpose, over both protocols."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from hypothesis import given
from hypothesis import strategies as st

from functions import frame, wire
from functions.handlers.base import Handler, InputError, Requirement
from functions.handlers.desired import Desired
from tests.test_wire import _field, in_order

CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
MODERN = (fnv1.CAPABILITY_CAPABILITIES, fnv1.CAPABILITY_REQUIRED_RESOURCES)
THING = "example.org/v1"  # the apiVersion of the composites these handlers serve


def exploding(error: Exception | None = None, secret: bool = False) -> Handler:
    def requirements(request):
        found = {"things": Requirement("example.org/v1", "Thing", match_labels={"a": "b"})}
        if secret:
            found["secret"] = Requirement("v1", "Secret", match_name="token", namespace="vault")
        return found

    def compose(request):
        desired = Desired()
        desired.compose("mine", CONFIG_MAP, request.observed("mine"))
        if error:
            raise error
        found = request.required("things")
        desired.status = {"resolved": found is not None, "count": len(found or [])}
        return desired

    return Handler(
        "exploding",
        frozenset({"Thing"}),
        compose,
        requirements,
        datetime.timedelta(seconds=42),
        api_version=THING,
    )


def request(capabilities=MODERN) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "t"
    req.meta.capabilities.extend(capabilities)
    req.observed.composite.resource.update(
        {"apiVersion": "example.org/v1", "kind": "Thing", "metadata": {"name": "n"}}
    )
    req.desired.resources["earlier"].resource.update({"kind": "Earlier"})
    req.context.update({"k": "v"})
    return req


def test_an_exception_becomes_a_fatal_result_and_keeps_what_was_composed_before():
    req = request()
    rsp = frame.run(exploding(ValueError("boom")), req)
    (result,) = rsp.results
    assert result.severity == fnv1.SEVERITY_FATAL
    assert result.message.startswith("exploding handler failed: ValueError at tests/test_frame.py:")
    # Never the exception's own message: it may quote what it failed on (tests/test_logs.py).
    assert "boom" not in result.message and "Traceback" not in result.message
    assert rsp.desired == req.desired and rsp.context == req.context and rsp.meta.tag == "t"
    assert rsp.meta.ttl.seconds == 42


def test_bad_input_names_the_field():
    rsp = frame.run(exploding(InputError("spec.size", "must be positive, got -1")), request())
    assert rsp.results[0].message == "spec.size: must be positive, got -1"


def test_not_resolved_yet_differs_from_resolved_none():
    req = request()
    first = frame.run(exploding(), req)
    assert first.desired.composite.resource["status"]["resolved"] is False
    assert first.desired.resources["mine"].ready == fnv1.READY_FALSE  # not created yet
    selector = first.requirements.resources["things"]
    assert (selector.kind, dict(selector.match_labels.labels)) == ("Thing", {"a": "b"})
    req.required_resources["things"].SetInParent()  # resolved: nothing matched
    req.observed.resources["mine"].resource.update(CONFIG_MAP)
    second = frame.run(exploding(), req)
    assert second.desired.composite.resource["status"]["resolved"] is True
    assert second.requirements == first.requirements  # declared identically on every call
    assert second.desired.resources["mine"].ready == fnv1.READY_TRUE  # ConfigMap: once it exists
    assert second.desired.resources["earlier"].resource["kind"] == "Earlier"


def test_a_caller_without_capabilities_is_asked_and_answered_through_extra_resources():
    req = request(capabilities=())
    first = frame.run(exploding(), req)
    assert not first.requirements.resources
    assert first.requirements.extra_resources["things"].kind == "Thing"
    thing = {"apiVersion": "example.org/v1", "kind": "Thing", "metadata": {"name": "t1"}}
    req.extra_resources["things"].items.add().resource.update(thing)
    second = frame.run(exploding(), req)
    assert second.desired.composite.resource["status"]["count"] == 1


def test_a_namespaced_match_by_name_is_fatal_where_the_caller_may_ignore_namespaces():
    rsp = frame.run(exploding(secret=True), request(capabilities=()))
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    assert rsp.results[0].message.startswith(
        "requirements.secret: this Crossplane does not advertise capabilities"
    )
    assert "Secret token in namespace vault" in rsp.results[0].message
    modern = frame.run(exploding(secret=True), request())
    assert not modern.results and modern.requirements.resources["secret"].namespace == "vault"


def test_a_fatal_result_the_handler_returns_keeps_the_desired_state_as_it_was():
    def compose(request):
        desired = Desired()
        desired.compose("mine", CONFIG_MAP, None)
        desired.fatal("spec.x: cannot change while running", "Immutable")
        return desired

    req = request()
    rsp = frame.run(Handler("h", frozenset({"Thing"}), compose, api_version=THING), req)
    assert [(r.severity, r.reason) for r in rsp.results] == [(fnv1.SEVERITY_FATAL, "Immutable")]
    assert rsp.desired == req.desired


# --- the composite's metadata, deep objects, and what a handler hands back --------------------


@dataclass(frozen=True)
class Case:
    name: str
    metadata: object  # the composite's metadata; MISSING: no key at all
    want: str  # the Fatal message's start; "" when served


MISSING = object()
METADATA = [
    Case("a composite without metadata is refused", MISSING, "metadata: the Thing has no metadata"),
    Case("metadata that is not an object is refused", "n", "metadata: the Thing has no metadata"),
    Case(
        "a composite without a name is refused",
        {"uid": "u"},
        "metadata.name: the Thing has no name",
    ),
    Case("an empty name is refused", {"name": ""}, "metadata.name: the Thing has no name"),
    Case(
        "a name that is not a string is refused",
        {"name": 7},
        "metadata.name: the Thing has no name",
    ),
    Case(
        "a uid that is not a string is refused",
        {"name": "n", "uid": 1},
        "metadata.uid: must be a string, got int",
    ),
    Case("a composite without a uid is served, as crossplane render sends it", {"name": "n"}, ""),
]


@pytest.mark.parametrize("case", METADATA, ids=lambda c: c.name)
def test_a_composite_needs_the_metadata_every_composed_name_comes_from(case):
    req = request()
    composite = {"apiVersion": "example.org/v1", "kind": "Thing"}
    if case.metadata is not MISSING:
        composite["metadata"] = case.metadata
    req.observed.composite.resource.Clear()
    req.observed.composite.resource.update(composite)
    rsp = frame.run(exploding(), req)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    if case.want:
        assert len(fatal) == 1 and fatal[0].startswith(case.want), fatal
        assert rsp.desired == req.desired
    else:
        assert fatal == [] and "mine" in rsp.desired.resources


def test_a_value_copied_from_an_observed_object_is_written_as_its_data():
    def compose(request):
        desired = Desired()
        observed = request.observed("mine")
        desired.compose("copy", {**CONFIG_MAP, "data": observed.view("data")}, None)
        desired.status = {"seen": observed.list("items")}
        return desired

    req = request()
    req.observed.resources["mine"].resource.update({"data": {"a": "1"}, "items": [{"b": 2}]})
    rsp = frame.run(Handler("h", frozenset({"Thing"}), compose, api_version=THING), req)
    assert list(rsp.results) == []
    assert dict(rsp.desired.resources["copy"].resource["data"]) == {"a": "1"}
    assert rsp.desired.composite.resource["status"]["seen"][0]["b"] == 2


def test_a_view_passed_on_is_copied_whole_into_the_same_bytes_its_data_would_give():
    """What a handler passes on as observed (the frame copies such views whole) reads back as
    the same response, byte for byte, as the plain data; an earlier step's status stays."""

    def passing_on(as_views: bool) -> Handler:
        def compose(request):
            desired = Desired()
            mine = request.observed("mine")
            data, items = mine.view("data"), mine.list("items")
            if not as_views:
                data, items = data.to_dict(), items.to_list()
            desired.compose("copy", {**CONFIG_MAP, "data": data}, None)
            desired.status = {"seen": items, "count": 1}
            return desired

        return Handler("h", frozenset({"Thing"}), compose, api_version=THING)

    req = request()
    req.observed.resources["mine"].resource.update(
        {"data": {"a": "1", "n": 3, "deep": {"l": [1.5, {"x": True}]}}, "items": [{"b": 2}, "s"]}
    )
    req.desired.composite.resource.update({"status": {"earlier": "kept"}})
    copied, converted = (frame.run(passing_on(as_views), req) for as_views in (True, False))
    assert list(copied.results) == []
    assert copied.SerializeToString(deterministic=True) == converted.SerializeToString(
        deterministic=True
    )
    assert copied.desired.composite.resource["status"]["earlier"] == "kept"
    assert copied.desired.resources["copy"].resource["data"]["deep"]["l"][1]["x"] is True


def nested(depth: int) -> struct_pb2.Struct:
    """`{a: {a: … "leaf"}}`, `depth` objects deep, built without recursion."""
    inner = struct_pb2.Struct()
    inner.fields["a"].string_value = "leaf"
    for _ in range(depth - 1):
        outer = struct_pb2.Struct()
        outer.fields["a"].struct_value.CopyFrom(inner)
        inner = outer
    return inner


def test_an_object_nested_deeper_than_a_handler_can_walk_gets_a_fatal_naming_it():
    def compose(request):
        request.xr.to_dict()  # walks the whole composite
        return Desired()

    req = request()
    req.observed.composite.resource.fields["spec"].struct_value.CopyFrom(nested(3000))
    req = fnv1.RunFunctionRequest.FromString(req.SerializeToString())  # parsed, not refused
    rsp = frame.run(Handler("h", frozenset({"Thing"}), compose, api_version=THING), req)
    assert [r.message for r in rsp.results] == [
        "composite Thing n: is nested 3001 levels deep, deeper than this function can read; "
        "flatten it (Kubernetes allows it, but no gpustack object needs nesting this deep)"
    ]
    assert rsp.desired == req.desired


def test_a_response_that_cannot_be_written_is_a_fatal_result_not_an_exception():
    def compose(request):
        desired = Desired()
        desired.compose("odd", {**CONFIG_MAP, "data": {1, 2}}, None)  # a set: no Struct value
        return desired

    req = request()
    rsp = frame.run(Handler("h", frozenset({"Thing"}), compose, api_version=THING), req)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    assert rsp.results[0].message.startswith("h handler failed: ")
    assert rsp.desired == req.desired


# --- required resources held back as bytes (functions/wire.py) ---------------------------------


def test_required_objects_held_back_as_bytes_read_as_if_parsed_whole():
    seen = {}

    def compose(request):
        seen["objects"] = [view.to_dict() for view in request.required("found") or ()]
        seen["strings"] = request.required_strings("found")
        return Desired()

    req = request()
    for name in ("b", "a"):
        req.required_resources["found"].items.add().resource.update(
            {**CONFIG_MAP, "metadata": {"name": name}, "data": {"k": f"v-{name}"}}
        )
    handler = Handler("h", frozenset({"Thing"}), compose, api_version=THING)
    parsed = frame.run(handler, req)
    parsed_objects = seen["objects"]
    assert seen["strings"] is None  # nothing held back: nothing gathered
    split = frame.run(handler, *wire.split(req.SerializeToString()))
    assert split == parsed and seen["objects"] == parsed_objects
    assert [o["metadata"]["name"] for o in parsed_objects] == ["a", "b"]
    assert seen["strings"].objects == 2
    assert sorted(seen["strings"].strings) == ["a", "b", "v-a", "v-b"]


def test_held_back_objects_that_cannot_be_parsed_get_a_fatal_naming_them():
    def compose(request):
        request.required("found")
        return Desired()

    req = request()
    rsp = frame.run(
        Handler("h", frozenset({"Thing"}), compose, api_version=THING),
        req,
        {"found": b"\x0a\xff\x01"},
    )
    assert [r.message.split(" (")[0] for r in rsp.results] == [
        "required resources 'found': cannot be parsed"
    ]
    assert rsp.results[0].message.endswith("the request is damaged — check what sent it")
    assert rsp.desired == req.desired


def test_a_held_back_object_nested_too_deep_gets_a_fatal_naming_it():
    def compose(request):
        for view in request.required("found") or ():
            view.to_dict()
        return Desired()

    req = request()
    deep = req.required_resources["found"].items.add().resource
    deep.update({"kind": "ConfigMap", "metadata": {"name": "deep"}})
    deep.fields["data"].struct_value.CopyFrom(nested(3000))
    rsp = frame.run(
        Handler("h", frozenset({"Thing"}), compose, api_version=THING),
        *wire.split(req.SerializeToString()),
    )
    assert [r.message.split(":")[0] for r in rsp.results] == ["required found ConfigMap deep"]


def reading_things(seen: list[str]) -> Handler:
    """A handler whose status is what it reads of each Thing; `seen` logs each read."""

    def size(thing):
        seen.append(thing.name)
        return thing.get("spec", "size")

    def compose(request):
        desired = Desired()
        desired.status = {"sizes": request.required_read("things", size)}
        return desired

    return Handler(
        "reading", frozenset({"Thing"}), compose, exploding().requirements, api_version=THING
    )


def thing(name: str, size: int) -> struct_pb2.Struct:
    found = struct_pb2.Struct()
    found.update(
        {
            "apiVersion": "example.org/v1",
            "kind": "Thing",
            "metadata": {"name": name, "labels": {"x": "1", "y": "2"}},
            "spec": {"size": size, "unit": "Gi"},
        }
    )
    return found


def with_things(*things: struct_pb2.Struct, descending: bool = False, name: str = "n") -> bytes:
    """A request of composite `name` requiring `things`, their maps written in one order or
    the other, as Crossplane's Go protobuf may write them on any call."""
    req = request()
    req.observed.composite.resource["metadata"]["name"] = name
    items = b"".join(_field(1, _field(1, in_order(t, descending))) for t in things)
    return req.SerializeToString() + _field(8, _field(1, b"things") + _field(2, items))


def test_a_required_object_read_before_is_not_read_again_in_a_small_request_either(monkeypatch):
    """Every VM Instance requires the GPU classes, the Catalog and KubeVirt, which rarely
    change: each object is read once while it is unchanged, however its maps are ordered, by
    whichever composite requires it."""
    monkeypatch.setattr(frame, "READS", frame.ReadOnce(1 << 20))
    seen: list[str] = []
    calls = [
        with_things(thing("a", 1), thing("b", 2)),
        with_things(thing("a", 1), thing("b", 2), descending=True, name="another"),
        with_things(thing("b", 2), thing("a", 3)),  # a changed
    ]
    assert calls[0][-100:] != calls[1][-100:]  # the same things in other bytes
    handler, sizes = reading_things(seen), []
    for payload in calls:
        rsp = frame.run(handler, fnv1.RunFunctionRequest.FromString(payload))
        assert list(rsp.results) == []
        sizes.append(list(rsp.desired.composite.resource["status"]["sizes"]))
    assert sizes == [[1, 2], [1, 2], [2, 3]]
    assert seen == ["a", "b", "a"]


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=12,
)
OBJECTS = st.dictionaries(st.text(max_size=3), JSON, max_size=4)


@given(earlier=OBJECTS, data=OBJECTS)
def test_the_frame_writes_plain_data_as_protobuf_s_own_struct_update_does(earlier, data):
    """Its own writer, a third of the cost of `Struct.update`: empty objects stay objects, and
    an object or list replaces what an earlier step set under its key."""
    ours, theirs = struct_pb2.Struct(), struct_pb2.Struct()
    ours.update(earlier)
    theirs.update(earlier)
    frame._put(ours, data)
    theirs.update(data)
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )
