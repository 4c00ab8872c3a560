"""A pool's request read from its bytes (functions/wire.py, docs/performance.md).

A worker parses a pool's request without its required objects, and a pool reads its nodes'
summaries from every string gathered two levels inside them. What it answers must be what it
answers from the objects parsed whole, byte for byte; where the strings cannot tell that
exactly (a repeated node, an unreadable summary, a caller that may ignore the namespace) the
objects are read one by one, and name what is wrong.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2
from google.protobuf.message import DecodeError
from hypothesis import given
from hypothesis import strategies as st

from functions import frame, pipeline, wire
from functions.core.status import summary as node_summary
from functions.core.status import vmnode
from functions.handlers import gpuclass, inputs
from functions.server import run_function
from functions.views import plain, view_of
from gpustack_sim import load_documents
from tests.support.schemas import ROOT
from tests.test_scale import INPUT, catalog_object, pool_type, summary_of

# --- the two readings ---------------------------------------------------------------------------


def test_a_request_is_split_from_its_required_resources_which_stay_as_they_came():
    req = pipeline.request(pool_type(), {"queue": {"kind": "ClusterQueue"}}, INPUT)
    req.meta.tag = "t"
    req.context.update({"k": "v"})
    req.required_resources["summaries"].items.add().resource.update({"kind": "ConfigMap"})
    req.required_resources["catalog"].SetInParent()  # resolved: none
    req.extra_resources["catalog"].items.add().resource.update({"kind": "Old"})  # 1.x's field
    req.extra_resources["namespaces"].items.add().resource.update({"kind": "Namespace"})

    rest, held = wire.split(req.SerializeToString())

    expected = copy.deepcopy(req)
    expected.ClearField("required_resources")
    expected.ClearField("extra_resources")
    assert rest == expected
    parsed = {name: fnv1.Resources.FromString(value) for name, value in held.items()}
    assert parsed == {
        "summaries": req.required_resources["summaries"],
        "catalog": req.required_resources["catalog"],  # the newer field wins, as in the frame
        "namespaces": req.extra_resources["namespaces"],
    }


def split_request() -> fnv1.RunFunctionRequest:
    req = pipeline.request(pool_type(), {"queue": {"kind": "ClusterQueue"}}, INPUT)
    req.meta.tag = "t"
    req.required_resources["summaries"].items.add().resource.update({"kind": "ConfigMap"})
    req.extra_resources["catalog"].items.add().resource.update({"kind": "Catalog"})
    return req


def test_what_is_held_back_is_the_request_s_own_bytes_not_a_copy():
    payload = split_request().SerializeToString()
    _, held = wire.split(payload)
    assert held and all(view.obj is payload for view in held.values())


def test_fields_this_release_does_not_know_pass_through_to_protobuf():
    # A later protocol's varint (field 100), 64-bit (101) and 32-bit (102) fields.
    unknown = b"\xa0\x06\x96\x01" + b"\xa9\x06" + bytes(8) + b"\xb5\x06" + bytes(4)
    payload = split_request().SerializeToString() + unknown
    rest, _ = wire.split(payload)
    whole = fnv1.RunFunctionRequest.FromString(payload)
    whole.ClearField("required_resources")
    whole.ClearField("extra_resources")
    assert rest == whole and rest.SerializeToString().endswith(unknown)


def test_a_request_cut_short_anywhere_is_refused_where_protobuf_refuses_it():
    payload = split_request().SerializeToString()
    for cut in range(len(payload)):
        try:
            fnv1.RunFunctionRequest.FromString(payload[:cut])
        except DecodeError:
            with pytest.raises(DecodeError):
                wire.split(payload[:cut])
        else:
            wire.split(payload[:cut])


@pytest.mark.parametrize(
    "payload",
    [b"\x0a\xff\x01", b"\x42\x02\x0a\x05", b"\x40\x01", b"\x0f", b"\x42\x03\x0a\x01\xff"],
    ids=["past the end", "name past its entry", "entry not delimited", "wire type 7", "not UTF-8"],
)
def test_a_request_whose_framing_is_broken_is_refused_whole(payload):
    with pytest.raises(DecodeError):
        wire.split(payload)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**50), 2**50) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(st.lists(st.dictionaries(st.text(max_size=5), JSON, max_size=4), max_size=6))
def test_every_string_two_levels_inside_the_objects_is_gathered_and_the_objects_counted(objects):
    resources = fnv1.Resources()
    for obj in objects:
        resources.items.add().resource.update(obj)
    found = wire.strings_in(resources.SerializeToString())
    expected = [
        inner
        for obj in objects
        for value in obj.values()
        if isinstance(value, dict)
        for inner in value.values()
        if isinstance(inner, str)
    ]
    assert found.objects == len(objects)
    assert Counter(found.strings) == Counter(expected)


KEY = st.sampled_from(["a", "b", "c"])  # few keys, so that paths find what objects hold
NESTED = st.recursive(
    st.none() | st.booleans() | st.integers(-9, 9) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(KEY, inner, max_size=3),
    max_leaves=10,
)


@given(
    st.lists(st.dictionaries(KEY, NESTED, max_size=3), max_size=4),
    st.lists(st.lists(KEY, min_size=2, max_size=3).map(tuple), max_size=4),
)
def test_a_projected_object_reads_as_the_whole_one_at_every_path_it_keeps(objects, paths):
    resources = fnv1.Resources()
    for obj in objects:
        resources.items.add().resource.update(obj)
    found = wire.projected(resources.SerializeToString(), paths)
    assert len(found) == len(objects)
    for whole, part in zip(resources.items, found, strict=True):
        for path in paths:
            assert plain(view_of(part).get(*path)) == plain(view_of(whole.resource).get(*path))


@given(
    st.lists(st.dictionaries(KEY, NESTED, max_size=3), max_size=4),
    st.lists(st.lists(KEY, min_size=2, max_size=3).map(tuple), max_size=4),
)
def test_an_object_that_came_parsed_is_projected_as_one_held_back(objects, paths):
    """A small request comes parsed whole: the frame keeps of each object what it would keep
    of the same object held back as bytes, so the two read, and are remembered, alike."""
    resources = fnv1.Resources()
    for obj in objects:
        resources.items.add().resource.update(obj)
    encoded = wire.objects_in(resources.SerializeToString())
    for item, held in zip(resources.items, encoded, strict=True):
        assert wire.struct_projected(item.resource, paths) == wire.object_of(held, tuple(paths))


def test_a_projected_object_leaves_out_what_no_path_names():
    resources = fnv1.Resources()
    resources.items.add().resource.update(
        {
            "metadata": {"name": "n", "labels": {"kept": "1", "left": "2"}, "uid": "u"},
            "status": {"images": [{"names": ["big"]}], "allocatable": {"gpu": "4"}},
        }
    )
    paths = [("metadata", "name"), ("metadata", "labels", "kept"), ("status", "allocatable")]
    (found,) = wire.projected(resources.SerializeToString(), paths)
    assert view_of(found).to_dict() == {
        "metadata": {"name": "n", "labels": {"kept": "1"}},
        "status": {"allocatable": {"gpu": "4"}},
    }


def in_another_order(found: dict) -> dict:
    """A summary ConfigMap as a writer that orders no keys might write it: each text's keys
    reversed, the summary naming the digest of the facts text as written."""
    found = copy.deepcopy(found)
    facts = json.loads(found["data"]["facts"])
    facts_text = json.dumps(dict(reversed(facts.items())), separators=(",", ":"))
    summary = json.loads(found["data"]["summary"])
    summary["facts"] = node_summary.facts_digest(facts_text)
    found["data"] = {
        "summary": json.dumps(dict(reversed(summary.items())), separators=(",", ":")),
        "facts": facts_text,
    }
    return found


def test_a_summary_and_its_facts_are_told_from_the_other_strings_whatever_their_keys_order(
    walkthrough,
):
    for obj in walkthrough.values():
        for found in (summary_of(obj), in_another_order(summary_of(obj))):
            data, metadata = found["data"], found["metadata"]
            strings = [metadata["name"], metadata["namespace"], data["summary"], data["facts"]]
            assert node_summary.summaries_among(strings) == [data["summary"]]
            assert node_summary.facts_among(strings) == {data["facts"]}


def test_a_vm_node_state_is_told_from_the_other_strings_whatever_its_keys_order():
    allocatable = {"allocatable": {"nvidia.com/GA102GL_A10": "1"}}
    state = vmnode.write(vmnode.of_node("node-a10g", {}, {}, allocatable))[vmnode.STATE_KEY]
    turned = json.dumps(dict(reversed(json.loads(state).items())), separators=(",", ":"))
    for text in (state, turned):
        strings = ["node-a10g-gpustack-vm-node", "gpustack-system", text]
        assert vmnode.states_among(strings) == [text]


# --- pools read from the gathered strings -------------------------------------------------------


def final_request(handler: str, objects: list[dict], caller=pipeline.CROSSPLANE_2) -> bytes:
    """The bytes of the last call of one reconcile of `handler`'s pool over `objects`."""
    composite = catalog_object() if handler == "catalog" else pool_type()
    calls: list[fnv1.RunFunctionRequest] = []

    def recording(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        calls.append(copy.deepcopy(req))
        return run_function(req)

    req = pipeline.request(composite, {}, {**INPUT, "handler": handler}, caller=caller)
    pipeline.run_step(recording, req, objects, caller)
    return calls[-1].SerializeToString()


def answers(payload: bytes, monkeypatch) -> tuple[bytes, bytes, bool]:
    """The response to `payload` parsed whole, and split as a worker reads it (each with an
    empty memo), and whether the split one read the summaries from their objects."""
    inputs.MEMO.clear()
    whole = run_function(fnv1.RunFunctionRequest.FromString(payload))
    inputs.MEMO.clear()
    read_objects = []
    real = inputs.MEMO.read_all
    monkeypatch.setattr(inputs.MEMO, "read_all", lambda *a: read_objects.append(1) or real(*a))
    split = run_function(*wire.split(payload))
    monkeypatch.undo()
    deterministic = [r.SerializeToString(deterministic=True) for r in (whole, split)]
    return deterministic[0], deterministic[1], bool(read_objects)


def summaries(walkthrough: dict) -> list[dict]:
    """Every node's summary, the A10G node's (which both pools read) first: the cases change
    that one."""
    nodes = sorted(walkthrough, key=lambda node: node != "node-a10g")
    return [summary_of(walkthrough[node]) for node in nodes]


def renamed(found: dict, name: str) -> dict:
    found = copy.deepcopy(found)
    found["metadata"]["name"] = name
    return found


def edited(found: dict, key: str, text: str | None) -> dict:
    found = copy.deepcopy(found)
    if text is None:
        del found["data"][key]
    else:
        found["data"][key] = text
    return found


Change = Callable[[list[dict]], list[dict]]
CASES: list[tuple[str, Change, bool]] = [
    ("as the devices handler writes them", lambda s: s, False),
    ("none published yet", lambda s: [], False),
    ("a node repeated", lambda s: [*s, renamed(s[0], "a-copy")], True),
    ("a summary unreadable", lambda s: [edited(s[0], "summary", "{"), *s[1:]], True),
    ("a summary missing", lambda s: [edited(s[0], "summary", None), *s[1:]], True),
    ("a summary that is not one", lambda s: [edited(s[0], "summary", "x"), *s[1:]], True),
    (
        "facts other than the summary names",
        lambda s: [edited(s[0], "facts", s[0]["data"]["facts"].replace("NVIDIA", "Other")), *s[1:]],
        True,
    ),
    ("facts missing", lambda s: [edited(s[0], "facts", None), *s[1:]], True),
    ("each text's keys in another order", lambda s: [in_another_order(f) for f in s], False),
]


@pytest.mark.parametrize("handler", ["catalog", "instancetype"])
@pytest.mark.parametrize(("case", "change", "objects_read"), CASES, ids=[c[0] for c in CASES])
def test_a_pool_answers_the_same_from_its_bytes(
    walkthrough, monkeypatch, handler, case, change, objects_read
):
    objects = [catalog_object(), *change(summaries(walkthrough))]
    whole, split, read = answers(final_request(handler, objects), monkeypatch)
    assert split == whole
    assert read == objects_read


@pytest.mark.parametrize("handler", ["catalog", "instancetype"])
def test_crossplane_1_may_ignore_the_namespace_so_its_summaries_are_read_one_by_one(
    walkthrough, monkeypatch, handler
):
    forged = renamed(summaries(walkthrough)[0], "forged")
    forged["metadata"]["namespace"] = "tenant-a"
    objects = [catalog_object(), *summaries(walkthrough), forged]
    payload = final_request(handler, objects, pipeline.CROSSPLANE_1)
    whole, split, read = answers(payload, monkeypatch)
    assert split == whole and read


def test_changed_nodes_are_read_from_the_strings_with_the_facts_they_name(walkthrough, monkeypatch):
    """A reconcile after some nodes changed: their new texts are parsed, and each finds its
    facts among the request's by digest — a new CUDA runtime's too, which no earlier request
    had."""
    objects = [catalog_object(), *summaries(walkthrough)]
    before = final_request("instancetype", objects)
    upgraded = copy.deepcopy(walkthrough)
    upgraded["node-a10g"]["spec"]["accelerators"][0]["runtimeVersion"] = "13.1"
    after = final_request("instancetype", [catalog_object(), *summaries(upgraded)])
    assert after != before

    inputs.MEMO.clear()
    run_function(*wire.split(before))  # the memo holds the earlier texts and facts
    warm = run_function(*wire.split(after)).SerializeToString(deterministic=True)
    whole, split, read = answers(after, monkeypatch)
    assert warm == split == whole and not read
    status = fnv1.RunFunctionResponse.FromString(warm).desired.composite.resource["status"]
    assert status["detail"]["runtimeVersion"] == "13.1"


# --- a devices handler reads only what it needs of its Node; a class, of each node's state -----

GPUCLASS = ROOT / "examples" / "gpuclass"


def last_call(composite: dict, handler: str, objects: list[dict]) -> bytes:
    """The bytes of the last call of one reconcile of `composite` by `handler` over `objects`."""
    calls: list[fnv1.RunFunctionRequest] = []

    def recording(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        calls.append(copy.deepcopy(req))
        return run_function(req)

    req = pipeline.request(composite, {}, {**INPUT, "handler": handler})
    pipeline.run_step(recording, req, objects)
    return calls[-1].SerializeToString()


def of_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def with_vm_node_states(objects: list[dict]) -> list[dict]:
    """`objects` and the VM node state the devices handler composes for each Devices."""
    states = []
    for devices in of_kind(objects, "Devices"):
        payload = last_call(devices, "devices", objects)
        rsp = run_function(fnv1.RunFunctionRequest.FromString(payload))
        states.append(plain(rsp.desired.resources["vm-node"].resource))
    return [*objects, *states]


def class_request(objects: list[dict], name: str) -> bytes:
    offer = next(o for o in of_kind(objects, "GPUClass") if o["metadata"]["name"] == name)
    return last_call(offer, "gpuclass", with_vm_node_states(objects))


def nodes_changed(objects: list[dict], change: Callable[[dict], None]) -> list[dict]:
    objects = copy.deepcopy(objects)
    for obj in of_kind(objects, "Node"):
        change(obj)
    return objects


NODE_CHANGES: list[tuple[str, Callable[[dict], None]]] = [
    ("as the kubelet publishes them", lambda node: None),
    ("not Ready", lambda node: node["status"]["conditions"][0].update(status="False")),
    ("no conditions", lambda node: node["status"].pop("conditions")),
    ("cordoned", lambda node: node.setdefault("spec", {}).update(unschedulable=True)),
    (
        "tainted",
        lambda node: node.setdefault("spec", {}).update(
            taints=[{"key": "k", "effect": "NoSchedule"}]
        ),
    ),
    (
        "allocatable unreadable",
        lambda node: node["status"]["allocatable"].update(
            dict.fromkeys(node["status"]["allocatable"], "four")
        ),
    ),
    ("no status", lambda node: node.pop("status")),
]


def gpu_class_cluster() -> list[dict]:
    return load_documents(GPUCLASS / "cluster.yaml") + load_documents(GPUCLASS / "classes.yaml")


@pytest.mark.parametrize(("case", "change"), NODE_CHANGES, ids=[c[0] for c in NODE_CHANGES])
def test_a_devices_answers_the_same_from_what_it_reads_of_its_node_as_from_the_whole(case, change):
    objects = nodes_changed(gpu_class_cluster(), change)
    for devices in of_kind(objects, "Devices"):
        payload = last_call(devices, "devices", objects)
        whole = run_function(fnv1.RunFunctionRequest.FromString(payload))
        split = run_function(*wire.split(payload))
        assert "vm-node" in whole.desired.resources
        assert split.SerializeToString(deterministic=True) == whole.SerializeToString(
            deterministic=True
        )


@pytest.mark.parametrize("name", ["example-whole-gpu", "example-licensed-vgpu"])
@pytest.mark.parametrize(("case", "change"), NODE_CHANGES, ids=[c[0] for c in NODE_CHANGES])
def test_a_class_answers_the_same_from_what_it_reads_of_each_state_as_from_the_whole(
    name, case, change
):
    payload = class_request(nodes_changed(gpu_class_cluster(), change), name)
    whole = run_function(fnv1.RunFunctionRequest.FromString(payload))
    split = run_function(*wire.split(payload))
    assert len(fnv1.RunFunctionRequest.FromString(payload).required_resources["states"].items) == 3
    assert split.SerializeToString(deterministic=True) == whole.SerializeToString(
        deterministic=True
    )


def projected_in(monkeypatch: pytest.MonkeyPatch, payload: bytes) -> list[Any]:
    """The objects a worker parsed only part of, handling `payload` (with nothing read before)."""
    seen: list[Any] = []
    many, one = wire.projected, wire.object_of

    def spy_many(*given: Any) -> list[Any]:
        found = many(*given)
        seen.extend(found)
        return found

    def spy_one(*given: Any, **named: Any) -> Any:
        found = one(*given, **named)
        seen.append(found)
        return found

    monkeypatch.setattr(wire, "projected", spy_many)
    monkeypatch.setattr(wire, "object_of", spy_one)
    monkeypatch.setattr(frame, "READS", frame.ReadOnce(1 << 20))
    run_function(*wire.split(payload))
    return [view_of(obj).to_dict() for obj in seen]


def test_a_devices_parses_of_its_node_only_what_it_reads(monkeypatch):
    objects = gpu_class_cluster()
    devices = of_kind(objects, "Devices")[0]
    (node,) = projected_in(monkeypatch, last_call(devices, "devices", objects))
    assert node == {
        "metadata": {"labels": {"kubevirt.io/schedulable": "true"}},
        "status": {
            "allocatable": {"example.com/licensed-vgpu": "8", "example.com/whole-gpu": "4"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_class_reads_the_states_from_their_strings_and_of_each_launcher_what_it_reads(
    monkeypatch,
):
    seen = projected_in(monkeypatch, class_request(gpu_class_cluster(), "example-whole-gpu"))
    whole_kinds = {"GPUClass", "KubeVirt"}  # read whole, each once while unchanged (READS)
    assert [obj for obj in seen if obj.get("kind") not in whole_kinds] == [
        # the one launcher Pod, and no state
        {
            "spec": {
                "nodeName": "gpu-a",
                "containers": [
                    {
                        "name": "compute",
                        "image": "quay.io/kubevirt/virt-launcher:v1.9.0",
                        "resources": {"limits": {"example.com/whole-gpu": "1"}},
                    }
                ],
            },
            "status": {"phase": "Running"},
        }
    ]


def class_status(payload: bytes, held: bool = True) -> dict[str, Any]:
    """The class's status from `payload`, its objects held back as bytes (as a worker parses a
    large request) or parsed whole (as the server parses a small one)."""
    req = wire.split(payload) if held else (fnv1.RunFunctionRequest.FromString(payload), {})
    return plain(run_function(*req).desired.composite.resource)["status"]


def _field(number: int, value: bytes) -> bytes:
    """A length-delimited protobuf field: its tag, its length, its bytes."""
    return _varint((number << 3) | 2) + _varint(len(value)) + value


def _varint(value: int) -> bytes:
    found = b""
    while value > 0x7F:
        found, value = found + bytes([0x80 | (value & 0x7F)]), value >> 7
    return found + bytes([value])


def in_order(struct: Any, descending: bool) -> bytes:
    """A Struct's encoding with every object's entries sorted by key, one way or the other."""
    found = b""
    for key in sorted(struct.fields, reverse=descending):
        value = struct.fields[key]
        if value.WhichOneof("kind") == "struct_value":
            encoded = _field(5, in_order(value.struct_value, descending))
        else:
            encoded = value.SerializeToString()
        found += _field(1, _field(1, key.encode()) + _field(2, encoded))
    return found


def with_launchers_in_another_order(payload: bytes) -> bytes:
    """The request with its launcher Pods' maps written in another order, as Crossplane's Go
    protobuf may write them on any call: the same request in other bytes (a map entry given
    twice is read as its last)."""
    req = fnv1.RunFunctionRequest.FromString(payload)
    number = 8 if "launchers" in req.required_resources else 6  # 2.2+, else extra_resources
    field = req.required_resources if number == 8 else req.extra_resources
    given = bytes(wire.split(payload)[1]["launchers"])
    for descending in (False, True):  # one of them is not the order they came in
        items = b"".join(
            _field(1, _field(1, in_order(item.resource, descending)))
            for item in field["launchers"].items
        )
        if items != given:
            break
    return payload + _field(number, _field(1, b"launchers") + _field(2, items))


@pytest.mark.parametrize("held", [True, False], ids=["held back", "parsed whole"])
def test_a_launcher_is_read_again_only_once_what_a_class_reads_of_it_changes(monkeypatch, held):
    """A class is reconciled every 30 s and its launchers rarely change between: each is read
    once while what the class reads of it stays the same — in whatever order its maps come,
    whatever else of it changes, however the request came — and anew (its units freed) once
    its VM has stopped."""
    objects = gpu_class_cluster()
    steady = class_request(objects, "example-whole-gpu")
    (launcher,) = of_kind(objects, "Pod")
    launcher["metadata"]["resourceVersion"] = "2"  # a status update of the kubelet's
    launcher["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    updated = class_request(objects, "example-whole-gpu")
    launcher["status"]["phase"] = "Succeeded"
    stopped = class_request(objects, "example-whole-gpu")
    reordered = with_launchers_in_another_order(steady)
    assert bytes(wire.split(reordered)[1]["launchers"]) != bytes(wire.split(steady)[1]["launchers"])

    monkeypatch.setattr(frame, "READS", frame.ReadOnce(1 << 20))
    reads: list[Any] = []
    real = gpuclass.read_launcher
    monkeypatch.setattr(gpuclass, "read_launcher", lambda pod: reads.append(pod) or real(pod))
    found = []
    for payload in (steady, steady, reordered, updated, stopped):
        found.append((class_status(payload, held)["free"], len(reads)))
    # gpu-a has 4 units, 1 held by the running launcher, until it stops
    assert found == [(3, 1), (3, 1), (3, 1), (3, 1), (4, 2)]


def reading_nodes(seen: list[str]) -> Callable[[Any], str]:
    def node(pod: Any) -> str:
        seen.append(pod.str("spec", "nodeName"))
        return seen[-1]

    return node


def pod_on(node: str) -> struct_pb2.Struct:
    pod = struct_pb2.Struct()
    pod.update({"spec": {"nodeName": node}})
    return pod


SMALL = len(pod_on("a").SerializeToString(deterministic=True))


def test_what_was_read_of_an_object_is_forgotten_least_recently_read_first():
    reads, seen = frame.ReadOnce(2 * SMALL), []  # room for two
    node = reading_nodes(seen)
    for name in ("a", "b", "a", "c", "a", "b"):
        assert reads.read(node, pod_on(name)) == name
    assert seen == ["a", "b", "c", "b"]  # "b" was the least recently read when "c" came


def test_what_is_remembered_is_bounded_by_the_size_of_the_objects_read():
    """A large object (an InstanceType is 2.5 KiB) takes the room of many small ones."""
    reads, seen = frame.ReadOnce(10 * SMALL), []
    node = reading_nodes(seen)
    for name in "abcdefghij":
        reads.read(node, pod_on(name))
    large = pod_on("k" * 4 * SMALL)  # about five small ones
    reads.read(node, large)
    assert reads.held <= reads.budget
    seen.clear()
    for name in ("j", "i", "k" * 4 * SMALL, "a"):
        reads.read(node, pod_on(name))
    assert seen == ["a"]  # the newest kept, the oldest forgotten for the large one's room


def test_where_the_strings_cannot_tell_a_class_parses_of_each_state_only_what_it_reads(
    monkeypatch,
):
    """A state that cannot be read: object by object, each one's name, namespace and text."""
    objects = with_vm_node_states(gpu_class_cluster())
    broken = next(o for o in objects if o["metadata"]["name"] == "gpu-b-gpustack-vm-node")
    broken["data"]["state"] = "{"
    offer = next(o for o in of_kind(objects, "GPUClass"))
    seen = [
        o for o in projected_in(monkeypatch, last_call(offer, "gpuclass", objects)) if "data" in o
    ]
    assert [state["metadata"]["name"] for state in seen] == [
        "gpu-a-gpustack-vm-node",
        "gpu-b-gpustack-vm-node",
        "gpu-c-gpustack-vm-node",
    ]
    assert {key for state in seen for key in state} == {"metadata", "data"}
    assert {key for state in seen for key in state["metadata"]} == {"name", "namespace"}


@pytest.mark.parametrize(
    "caller", [pipeline.CROSSPLANE_1, pipeline.CROSSPLANE_2], ids=lambda c: c.name
)
def test_a_look_alike_state_never_counts_whichever_crossplane_asks(caller):
    """1.x ignores a selector's namespace and hands the class a tenant's look-alike too (a node
    that does not exist, with 8 free units); the class drops it there. 2.2+ keeps to the
    namespace."""
    objects = with_vm_node_states(gpu_class_cluster())
    forged = copy.deepcopy(
        next(o for o in objects if o["metadata"].get("namespace") == "gpustack-system")
    )
    forged["metadata"] |= {"name": "evil-gpustack-vm-node", "namespace": "tenant-a"}
    forged["data"]["state"] = forged["data"]["state"].replace('"node":"gpu-a"', '"node":"evil"')
    forged["data"]["state"] = forged["data"]["state"].replace(
        '"example.com/whole-gpu":"4"', '"example.com/whole-gpu":"8"'
    )
    offer = next(
        o for o in of_kind(objects, "GPUClass") if o["metadata"]["name"] == "example-whole-gpu"
    )
    req = pipeline.request(offer, {}, {**INPUT, "handler": "gpuclass"}, caller=caller)
    rsp = pipeline.run_step(run_function, req, [*objects, forged], caller)
    status = plain(rsp.desired.composite.resource)["status"]
    assert (status["free"], status["nodes"]) == (3, 3)
