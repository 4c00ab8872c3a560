"""A pool reconcile reads only what it needs (docs/performance.md).

- The devices handler publishes each node's summary as one ConfigMap: the figures every pool
  reads in one JSON string, the hardware facts in another, read only where a status needs them.
- Pools require those ConfigMaps, never the Devices objects; with none published yet they keep
  what they composed (right after an upgrade) and say so.
- A Devices whose inputs did not change since its last status recomputes nothing.

Figures and messages here are what users and other releases depend on; no test times anything
(`make bench` measures).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import struct_pb2

from bench import cluster as bench_cluster
from bench import least, remembering
from bench import requests as bench_requests
from functions import frame, pipeline, views
from functions.core import names
from functions.core.devices import parse_spec
from functions.core.ledger import build_ledger
from functions.core.modes import Mode
from functions.core.pools import NodeSummary, accelerator_views, summarize_devices
from functions.core.status import StatusError
from functions.core.status import summary as node_summary
from functions.handlers import HANDLERS, catalog, devices, inputs, instancetype
from functions.handlers.base import Request
from functions.handlers.desired import Desired
from functions.handlers.instance import lifecycle
from functions.server import run_function, serve_bytes
from functions.views import StructView
from tests.support.schemas import ROOT
from tests.test_mig import MIG_3G_ON_GPU0, h100_node
from tests.test_status import fixture as type_fixture

WALKTHROUGH = ROOT / "examples" / "walkthrough"
A10G = "gpustack--nvidia-a10g-linux-amd64"
INPUT = {"apiVersion": "fn.gpustack.ai/v1beta1", "kind": "Input"}


def summary_of(obj: dict, catalog_spec: dict | None = None) -> dict:
    """The summary ConfigMap the devices handler composes for a Devices object."""
    required = {"catalog": [catalog_object(catalog_spec)] if catalog_spec else []}
    desired = devices.compose(Request.of(obj, required=required))
    return desired.resources[devices.SUMMARY]


def catalog_object(spec: dict | None = None) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Catalog",
        "metadata": {"name": "default"},
        "spec": spec or {},
    }


def walkthrough_summaries() -> list[dict]:
    documents = [d for d in yaml.safe_load_all((WALKTHROUGH / "devices.yaml").read_text()) if d]
    return [summary_of(doc) for doc in documents]


# --- the summary contract ---------------------------------------------------------------------


def test_the_a10g_node_publishes_one_small_labelled_config_map(walkthrough):
    assert summary_of(walkthrough["node-a10g"]) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "node-a10g-gpustack-summary",
            "namespace": "gpustack-system",
            "labels": {
                "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
                "general.feature.gpustack.ai/amd-epyc-7r32": "true",
                "gpustack.ai/managed": "true",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "resource.gpustack.ai/type": "node-summary",
            },
        },
        "data": {
            "summary": '{"arch":"amd64","cores":4,"facts":"5924d15edae4ef89","gKey":"amd-epyc-7r32","groups":'
            '{"nvidia-a10g":[1,1,1,10,1,1,100,100,1600000,0,0]},"managed":true,'
            '"node":"node-a10g","os":"linux","v":1}',
            "facts": '{"cpu":{"family":"23","model":"49","modelName":"AMD EPYC 7R32",'
            '"vendor":"AMD"},"groups":{"nvidia-a10g":{"computeCapability":"8.6","cores":10240,'
            '"driverVersion":"580.159.03","family":"Ampere","manufacturer":"nvidia",'
            '"memoryMiB":24576,"product":"NVIDIA A10G","runtimeVersion":"13.0",'
            '"sliceSlots":128}},"v":1}',
        },
    }


def test_the_summary_lives_in_the_catalogs_system_namespace(walkthrough):
    moved = summary_of(walkthrough["node-a10g"], {"systemNamespace": "gpu-system"})
    assert moved["metadata"]["namespace"] == "gpu-system"


def test_a_summary_reads_back_as_the_core_computes_it():
    spec = parse_spec("node-h100", h100_node(3, [MIG_3G_ON_GPU0]))
    expected = summarize_devices(spec)
    data = node_summary.write(expected)
    read = node_summary.read(data["summary"], data["facts"])
    assert read == expected  # node, os, arch, gKey, managed, cores and every group's figures
    assert read.facts == expected.facts
    assert read.cpu == expected.cpu
    assert read.groups["nvidia-h100-80gb-hbm3"].remaining_profiles["3g.40gb"] == 5


def test_facts_are_parsed_only_when_a_caller_asks_for_them(monkeypatch):
    data = node_summary.write(summarize_devices(parse_spec("node-h100", h100_node(0))))
    asked = []
    read_facts = node_summary.read_facts
    monkeypatch.setattr(
        node_summary, "read_facts", lambda text, cores: asked.append(1) or read_facts(text, cores)
    )
    read = node_summary.read(data["summary"], data["facts"])
    assert read.groups["nvidia-h100-80gb-hbm3"].free_cards == 8
    assert asked == []
    assert read.facts["nvidia-h100-80gb-hbm3"].memory_mib == 81559
    assert read.cpu.model_name == "Intel(R) Xeon(R) Platinum 8480+"
    assert asked == [1]


def test_version_1_packs_these_figures_in_this_order_for_good():
    assert node_summary.LAYOUTS[1] == (
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
    )


def test_a_later_version_that_appends_a_figure_still_reads():
    data = node_summary.write(summarize_devices(parse_spec("node-h100", h100_node(0))))
    newer = json.loads(data["summary"])
    newer["v"] = 2
    newer["groups"]["nvidia-h100-80gb-hbm3"].append(42)
    read = node_summary.read(json.dumps(newer))
    assert read.groups == node_summary.read(data["summary"]).groups


def test_a_profile_count_of_null_reads_as_none_left():
    """JSON null reads as an absent figure does, 0, here too: the pool's sums never see it."""
    data = node_summary.write(
        summarize_devices(parse_spec("node-h100", h100_node(3, [MIG_3G_ON_GPU0])))
    )
    document = json.loads(data["summary"])
    document["partitions"]["nvidia-h100-80gb-hbm3"]["remaining"]["3g.40gb"] = None
    group = node_summary.read(json.dumps(document)).groups["nvidia-h100-80gb-hbm3"]
    assert group.remaining_profiles["3g.40gb"] == 0
    assert accelerator_views([group, group])[Mode.PARTITIONED].remaining_profiles["3g.40gb"] == 0


BROKEN = [
    ("not JSON", "{", "data.summary", "is not JSON"),
    ("a list", "[]", "data.summary", "must hold a JSON object"),
    ("no version", '{"node":"n"}', "data.summary", "v must be a version from 1 on, got None"),
    ("no node", '{"v":1}', "data.summary", "node must be a non-empty string, got None"),
    (
        "a figure short",
        '{"v":1,"node":"n","groups":{"nvidia-t4":[1,1]}}',
        "data.summary",
        "groups.nvidia-t4 must list 11 figures, got [1, 1]",
    ),
    (
        "a figure that is text",
        '{"v":1,"node":"n","groups":{"nvidia-t4":[1,1,"x",0,0,0,0,0,0,0,0]}}',
        "data.summary",
        "groups.nvidia-t4[2] must be a whole number, got 'x'",
    ),
    ("groups a list", '{"v":1,"node":"n","groups":[]}', "data.summary", "groups must be an object"),
]


@pytest.mark.parametrize(("case", "text", "field", "problem"), BROKEN, ids=[b[0] for b in BROKEN])
def test_an_unreadable_summary_names_what_is_wrong(case, text, field, problem):
    with pytest.raises(StatusError) as raised:
        node_summary.read(text)
    assert raised.value.field == field
    assert raised.value.problem.startswith(problem)


def test_a_node_name_too_long_for_an_object_name_is_cut_and_hashed():
    node = "n" * 250
    name = names.node_object_name(node, node_summary.NAME_SUFFIX)
    assert len(name) == 253 and name.endswith("-gpustack-summary")
    assert name != names.node_object_name("n" * 249 + "m", node_summary.NAME_SUFFIX)
    assert names.node_object_name("node-a10g", "gpustack-summary") == "node-a10g-gpustack-summary"


def test_the_walkthrough_summaries_example_is_what_the_devices_handler_composes():
    """examples/walkthrough/summaries.yaml: `render` the catalog or a pool against it.
    GPUSTACK_REGENERATE=1 writes it again."""
    path = WALKTHROUGH / "summaries.yaml"
    header = (
        "# The walkthrough nodes' summaries as each Devices composes them (see\n"
        "# docs/performance.md): what the catalog and pool handlers require. Regenerate with\n"
        "# GPUSTACK_REGENERATE=1 .venv/bin/python -m pytest tests/test_scale.py\n"
    )
    text = header + yaml.safe_dump_all(walkthrough_summaries(), sort_keys=False, width=1000)
    if os.environ.get("GPUSTACK_REGENERATE"):
        path.write_text(text)
    assert path.read_text() == text


# --- reading summaries: once per text, in the requirement's namespace, one per node -----------


def pool_request(summaries: list[dict], observed: dict | None = None) -> Request:
    request = Request.of(
        pool_type(),
        observed=observed,
        required={"catalog": [], "summaries": summaries, "namespaces": []},
    )
    return request.with_requirements(instancetype.requirements(Request.of(pool_type())))


def test_a_summary_text_seen_before_is_not_parsed_again(walkthrough, monkeypatch):
    summary = summary_of(walkthrough["node-a10g"])
    inputs.MEMO.clear()
    parsed = []
    real = node_summary.read
    monkeypatch.setattr(node_summary, "read", lambda *a: parsed.append(1) or real(*a))
    first = inputs.node_summaries(pool_request([summary]), Desired())
    again = inputs.node_summaries(pool_request([copy.deepcopy(summary)]), Desired())
    assert parsed == [1] and again[0] is first[0]
    upgraded = walkthrough["node-a10g"]  # the agent reports another driver: other facts,
    upgraded["spec"]["accelerators"][0]["driverVersion"] = "580.200.01"  # same figures
    changed = summary_of(upgraded)
    assert changed["data"]["summary"] != summary["data"]["summary"]  # it names its facts
    newer = inputs.node_summaries(pool_request([changed]), Desired())
    assert parsed == [1, 1]
    assert newer[0].facts["nvidia-a10g"].driver_version == "580.200.01"


def test_the_summary_memo_forgets_the_texts_no_request_reads_any_more(walkthrough, monkeypatch):
    """A changed node leaves its old text behind: the memo keeps two generations, so what is
    read again survives a turn and what is not is dropped."""
    memo, parsed = counted_memo(walkthrough, monkeypatch, turn=2)  # turns at 2 × 2 texts
    for version in range(4):  # node a changes on every reconcile, node b never
        memo.reconcile(f"a{version}", "b")
    memo.reconcile("a3", "b")  # just after a turn: read again, kept
    for version in range(4, 7):  # a turn, and another
        memo.reconcile(f"a{version}", "b")
    memo.reconcile("a0", "b")  # a0 was not read for a whole turn: forgotten
    assert parsed == ["a0", "b", "a1", "a2", "a3", "a4", "a5", "a6", "a0"]


def test_the_summary_memo_holds_at_most_twice_its_turn_however_fast_nodes_change(
    walkthrough, monkeypatch
):
    memo, parsed = counted_memo(walkthrough, monkeypatch, turn=2)
    for version in range(30):  # every text new on every reconcile
        memo.reconcile(f"a{version}", f"b{version}")
        assert len(memo.parsed) + len(memo.earlier) <= 2 * 2 * 2
    assert len(parsed) == 60


def test_the_summary_memo_turns_by_the_largest_request_it_has_read(walkthrough, monkeypatch):
    """The catalog reads every node and a small pool a few: the small pool's changes must not
    turn the memo so often that the catalog's nodes are parsed again."""
    memo, parsed = counted_memo(walkthrough, monkeypatch, turn=1)
    catalog = [f"n{index}" for index in range(6)]
    memo.reconcile(*catalog)
    for version in range(3):  # one turn, when a0 comes to a memo holding six texts
        memo.reconcile(f"a{version}")
    memo.reconcile(*catalog)
    assert parsed == [*catalog, "a0", "a1", "a2"]


def counted_memo(walkthrough: dict, monkeypatch, turn: float) -> tuple[Any, list[str]]:
    """A summary memo that turns at `turn` × the largest request (however small), whose
    `reconcile(*nodes)` reads one summary per node as a pool does; and the nodes it parsed."""
    base = summary_of(walkthrough["node-a10g"])
    parsed: list[str] = []
    real = node_summary.read
    monkeypatch.setattr(
        node_summary, "read", lambda *a: parsed.append(json.loads(a[0])["node"]) or real(*a)
    )

    class Memo(inputs.SummaryMemo):
        TURN, SMALLEST = turn, 1

        def reconcile(self, *nodes: str) -> None:
            objects = [named(base, node) for node in nodes]
            assert [summary.node for summary in self.read_all(objects, [])] == list(nodes)

    return Memo(), parsed


def named(summary: dict, node: str) -> dict:
    """The same summary object, for a node named `node`."""
    found = copy.deepcopy(summary)
    old = summary["data"]["summary"]
    found["data"]["summary"] = old.replace('"node":"node-a10g"', f'"node":"{node}"')
    found["metadata"]["name"] = node_summary.object_name(node)  # as its devices handler names it
    assert found["data"]["summary"] != old
    return found


def test_a_summary_outside_the_system_namespace_is_not_read(walkthrough):
    """Crossplane 1.x may ignore a selector's namespace: a tenant's look-alike never counts."""
    forged = summary_of(walkthrough["node-t4-b"])
    forged["metadata"]["namespace"] = "tenant-a"
    forged["metadata"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-a10g"] = "true"
    desired = Desired()
    nodes = inputs.node_summaries(
        pool_request([summary_of(walkthrough["node-a10g"]), forged]), desired
    )
    assert [n.node for n in nodes] == ["node-a10g"]
    assert desired.results == []


@pytest.mark.parametrize(
    "caller", [pipeline.CROSSPLANE_1, pipeline.CROSSPLANE_2], ids=lambda c: c.name
)
def test_a_look_alike_summary_never_counts_whichever_crossplane_asks(walkthrough, caller):
    """1.x ignores a selector's namespace and hands the pool a tenant's look-alike too; the
    handler drops it there. 2.2+ keeps to the namespace, and nothing is read twice."""
    forged = summary_of(walkthrough["node-t4-b"])
    forged["metadata"] |= {"name": "evil-gpustack-summary", "namespace": "tenant-a"}
    forged["metadata"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-a10g"] = "true"
    cluster = [summary_of(walkthrough["node-a10g"]), forged]
    req = pipeline.request(pool_type(), {}, {**INPUT, "handler": "instancetype"}, caller=caller)
    rsp = pipeline.run_step(run_function, req, cluster, caller)
    status = StructView(rsp.desired.composite.resource).to_dict()["status"]
    assert (status["nodes"], status["display"]["accelerator"]) == (1, "1/1 1/10 100/100 0/0")


def test_two_summaries_of_one_node_count_once_and_the_second_is_named(walkthrough):
    first = summary_of(walkthrough["node-a10g"])
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "zz-node-a10g-copy"
    desired = Desired()
    nodes = inputs.node_summaries(pool_request([second, first]), desired)
    assert [n.node for n in nodes] == ["node-a10g"]
    # A copy under another name is not the node's summary (only node-a10g-gpustack-summary is).
    assert [r.message for r in desired.results] == [
        "ConfigMap gpustack-system/zz-node-a10g-copy: metadata.name: must be "
        "node-a10g-gpustack-summary, the name the devices handler gives its node's summary; a "
        "ConfigMap of another name (or none) is not the node's; it is left out until it is fixed"
    ]


def test_summaries_from_protobuf_read_as_from_plain_data(walkthrough):
    """Crossplane sends Structs, read a whole request at a time: the same nodes come out, and
    the same unreadable or repeated ConfigMaps are named the same way as from plain data."""
    good = [summary_of(doc) for doc in walkthrough.values()]

    def broken(name: str, data: Any) -> dict:
        found = copy.deepcopy(good[1])
        found["metadata"]["name"] = name
        if data is None:
            del found["data"]
        else:
            found["data"] = data
        return found

    repeat = copy.deepcopy(good[0])
    repeat["metadata"]["name"] = "a-copy"  # under another name: not the node's, and named
    objects = [
        *good,
        repeat,
        broken("a-number", {"summary": 3}),
        broken("empty", {"summary": ""}),
        broken("no-summary", {"facts": "{}"}),
        broken("no-data", None),
        broken("data-text", "x"),
        broken("not-json", {"summary": "{"}),
    ]

    def read(given: list[Any]) -> tuple[list[NodeSummary], list[str], list[Any]]:
        desired = Desired()
        nodes = inputs.node_summaries(pool_request(given), desired)
        return nodes, [r.message for r in desired.results], desired.conditions

    as_structs = []
    for obj in objects:
        found = struct_pb2.Struct()
        found.update(obj)
        as_structs.append(found)
    nodes, messages, conditions = read(as_structs)
    assert (nodes, messages, conditions) == read(objects)
    assert [n.node for n in nodes] == sorted(walkthrough)
    assert [m.split(";")[0] for m in messages] == [
        f"ConfigMap gpustack-system/a-copy: metadata.name: must be {next(iter(walkthrough))}"
        "-gpustack-summary, the name the devices handler gives its node's summary",
        "ConfigMap gpustack-system/a-number: data.summary: must be a string",
        "ConfigMap gpustack-system/data-text: data.summary: is missing",
        "ConfigMap gpustack-system/empty: data.summary: is not JSON: Expecting value: line 1 "
        "column 1 (char 0)",
        "ConfigMap gpustack-system/no-data: data.summary: is missing",
        "ConfigMap gpustack-system/no-summary: data.summary: is missing",
        "ConfigMap gpustack-system/not-json: data.summary: is not JSON: Expecting property name "
        "enclosed in double quotes: line 1 column 2 (char 1)",
    ]


def test_summaries_read_in_any_order_give_the_same_pool(walkthrough):
    summaries = [summary_of(doc) for doc in walkthrough.values()]
    one = instancetype.compose(pool_request(summaries))
    other = instancetype.compose(pool_request(list(reversed(summaries))))
    assert (one.resources, one.status) == (other.resources, other.status)


# --- the devices handler does no work on unchanged inputs ---------------------------------------


def settled_devices(obj: dict, catalog_spec: dict | None = None) -> tuple[Request, Any]:
    """A Devices as Crossplane sends it once its last reconcile was applied."""
    required = {"catalog": [catalog_object(catalog_spec)] if catalog_spec else []}
    first = devices.compose(Request.of(obj, required=required))
    settled = {**copy.deepcopy(obj), "status": first.status}
    observed = {name: applied(o) for name, o in first.resources.items()}
    return Request.of(settled, observed=observed, required=required), first


def applied(obj: dict) -> dict:
    """What the API server returns of an object Crossplane applied."""
    found = copy.deepcopy(obj)
    found["metadata"]["uid"] = "00000000-0000-4000-8000-000000000001"
    found["metadata"]["resourceVersion"] = "42"
    found["metadata"].setdefault("labels", {})["crossplane.io/composite"] = "node"
    found["metadata"].setdefault("annotations", {})["crossplane.io/composition-resource-name"] = "x"
    return found


def test_an_unchanged_devices_returns_its_status_and_objects_without_recomputing(
    walkthrough, monkeypatch
):
    node = walkthrough["node-a10g"]
    node["spec"]["allocations"] = [
        {"pod": "default/a", "container": "main", "device": "GPU-nope", "mode": "Exclusive"}
    ]
    request, first = settled_devices(node)

    def recomputed(*args):
        raise AssertionError("recomputed")

    monkeypatch.setattr(devices, "parse_devices", recomputed)
    again = devices.compose(request)
    assert views.plain(again.status) == first.status
    assert views.plain(again.resources) == first.resources
    assert again.ready == {"worker": True, "device-manager": True, "summary": True}
    assert again.results == first.results  # the conflict is still reported, from the status
    assert [r.reason for r in again.results] == ["AllocationConflict"]


def test_the_benchs_least_answer_is_the_devices_handlers_answer_byte_for_byte():
    """bench/least.py bounds the devices handler's floor ratio only while it answers as the
    handler does (the bench checks it too, before it times anything)."""
    built = bench_requests.devices_requests(bench_cluster.build(8))["devices (unchanged)"]
    assert least.answer(built.payload) == serve_bytes(built.payload)[0]


@pytest.mark.parametrize("name", ["instance (VM)", "instance (Container)"])
def test_the_benchs_server_with_the_rules_skipped_answers_as_ours(monkeypatch, name):
    """bench/remembering.py times our server and frame alone only while it answers the request
    it is sent again and again as ours does, and runs the handler's rules once."""
    payload = bench_requests.build_all(bench_cluster.build(8))[name].payload
    ours = serve_bytes(payload)[0]
    composed = []
    handler = HANDLERS["instance"]
    counted = dataclasses.replace(
        handler, compose=lambda r: composed.append(1) or handler.compose(r)
    )
    monkeypatch.setitem(HANDLERS, "instance", remembering.remembering(counted))
    assert [serve_bytes(payload)[0] for _ in range(3)] == [ours] * 3
    assert composed == [1]


CHANGES = [
    ("the spec", lambda obj, observed, settings: obj["spec"]["cpu"].update(cores=8)),
    ("a setting it reads", lambda obj, observed, settings: settings.update(devicePlugin="nvidia")),
    ("a composed object gone", lambda obj, observed, settings: observed.pop("summary")),
    ("a status from 0.1.0", lambda obj, observed, settings: obj["status"].pop("inputs")),
]


@pytest.mark.parametrize("change", CHANGES, ids=[c[0] for c in CHANGES])
def test_a_devices_is_recomputed_when_an_input_changed(walkthrough, monkeypatch, change):
    request, _ = settled_devices(walkthrough["node-a10g"])
    obj = request.xr.to_dict()
    observed = {name: request.observed(name).to_dict() for name in request.observed_names()}
    settings: dict = {}
    change[1](obj, observed, settings)
    ledgers = []
    monkeypatch.setattr(devices, "build_ledger", lambda *a: ledgers.append(1) or build_ledger(*a))
    again = devices.compose(
        Request.of(obj, observed=observed, required={"catalog": [catalog_object(settings)]})
    )
    assert ledgers == [1]
    assert set(again.resources) == {"worker", "device-manager", "summary"}


def test_a_digest_of_another_setting_leaves_the_node_alone(walkthrough):
    """Awareness is the catalog's and the pools' business, not a node's."""
    request, first = settled_devices(walkthrough["node-a10g"])
    aware = devices.inputs_digest(
        Request.of(
            request.xr.to_dict(),
            required={"catalog": [catalog_object({"instanceTypeAwareCpuManufacturer": True})]},
        ),
        catalog.Settings.from_spec({"instanceTypeAwareCpuManufacturer": True}),
        None,
        {},
    )
    assert aware == first.status["inputs"]


def test_the_first_call_of_a_reconcile_computes_nothing_before_the_catalog_is_read(
    walkthrough, monkeypatch
):
    """Crossplane calls again once the Catalog is fetched; that call does the work."""
    request, first = settled_devices(walkthrough["node-a10g"])
    obj = request.xr.to_dict()
    obj["spec"]["cpu"]["cores"] = 8  # changed, but the settings are not known yet
    observed = {name: request.observed(name).to_dict() for name in request.observed_names()}
    monkeypatch.setattr(devices, "build_ledger", lambda *a: pytest.fail("recomputed"))
    again = devices.compose(Request.of(obj, observed=observed))
    assert again.status["inputs"] == first.status["inputs"]


def test_the_devices_handler_asks_to_be_called_every_five_minutes(walkthrough):
    """Once the Catalog exists (before it, every 30 s: tests/test_device_plugins.py)."""
    composition = yaml.safe_load((ROOT / "compositions/pipelines/devices.yaml").read_text())
    req = pipeline.request(
        walkthrough["node-a10g"], {}, composition["spec"]["pipeline"][0]["input"]
    )
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a10g"}}
    catalog = yaml.safe_load((ROOT / "examples/walkthrough/catalog.yaml").read_text())
    rsp = pipeline.run_step(run_function, req, [node, catalog])
    assert rsp.meta.ttl.seconds == 300
    assert [r.severity for r in rsp.results] == []


# --- pools require summaries, never Devices; none at all keeps what they composed --------------


def pool_type() -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "InstanceType",
        "metadata": {"name": A10G},
        "spec": {
            "acceleratable": True,
            "acceleratorGroup": "nvidia-a10g",
            "os": "linux",
            "arch": "amd64",
            "unitResources": {"cpu": "8", "ram": "64Gi"},
        },
    }


def test_a_pool_requires_its_nodes_summaries_in_the_system_namespace():
    wanted = instancetype.requirements(Request.of(pool_type()))
    assert wanted["summaries"].kind == "ConfigMap"
    assert wanted["summaries"].namespace == "gpustack-system"
    assert dict(wanted["summaries"].match_labels) == {
        "resource.gpustack.ai/type": "node-summary",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
    }
    moved = Request.of(
        pool_type(), required={"catalog": [catalog_object({"systemNamespace": "gpu-system"})]}
    )
    assert instancetype.requirements(moved)["summaries"].namespace == "gpu-system"
    assert "devices" not in wanted and not any(r.kind == "Devices" for r in wanted.values())
    assert catalog.requirements(Request.of(catalog_object()))["summaries"].match_labels == {
        "resource.gpustack.ai/type": "node-summary"
    }


OBSERVED_QUEUE = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "ClusterQueue",
    "metadata": {
        "name": A10G,
        "uid": "u",
        "labels": {"crossplane.io/composite": A10G, "resource.gpustack.ai/type": "instancetypes"},
        "annotations": {"crossplane.io/composition-resource-name": "clusterqueue"},
    },
    "spec": {
        "resourceGroups": [
            {
                "coveredResources": ["nvidia.com/gpu.credits"],
                "flavors": [
                    {
                        "name": "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",
                        "resources": [{"name": "nvidia.com/gpu.credits", "nominalQuota": "1600k"}],
                    }
                ],
            }
        ],
        "stopPolicy": "None",
    },
    "status": {"admittedWorkloads": 1, "conditions": [{"type": "Active", "status": "True"}]},
}


def test_a_pool_without_any_summary_keeps_its_queue_and_status_and_says_so():
    composite = {
        **pool_type(),
        "status": {
            "phase": "Active",
            "display": {"accelerator": "1/1 1/10 100/100 0/0"},
            "conditions": [{"type": "Ready"}],
        },
    }
    request = Request.of(
        composite,
        observed={"clusterqueue": OBSERVED_QUEUE},
        required={"catalog": [], "summaries": [], "namespaces": []},
    ).with_requirements(instancetype.requirements(Request.of(pool_type())))
    desired = instancetype.compose(request)
    assert views.plain(desired.resources["clusterqueue"]) == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": A10G, "labels": {"resource.gpustack.ai/type": "instancetypes"}},
        "spec": OBSERVED_QUEUE["spec"],
    }
    assert views.plain(desired.status) == {
        "phase": "Active",
        "display": {"accelerator": "1/1 1/10 100/100 0/0"},
    }
    assert [(r.severity.value, r.reason, r.message) for r in desired.results] == [
        (
            "Warning",
            "NodeSummariesMissing",
            "no node summaries found (ConfigMaps labelled resource.gpustack.ai/type=node-summary "
            "in namespace gpustack-system): the ClusterQueue, its LocalQueues and the status kept "
            "as observed until the devices handler has published them — after an upgrade, once "
            "each Devices is reconciled",
        )
    ]


def test_a_pool_with_some_summaries_composes_from_them(walkthrough):
    request = Request.of(
        pool_type(),
        observed={"clusterqueue": OBSERVED_QUEUE},
        required={
            "catalog": [],
            "summaries": [summary_of(walkthrough["node-a10g"])],
            "namespaces": [],
        },
    ).with_requirements(instancetype.requirements(Request.of(pool_type())))
    desired = instancetype.compose(request)
    assert [r.reason for r in desired.results] == []
    assert desired.status["display"]["accelerator"] == "1/1 1/10 100/100 0/0"


def test_a_new_pool_without_summaries_composes_an_empty_queue():
    request = Request.of(pool_type(), required={"catalog": [], "summaries": [], "namespaces": []})
    desired = instancetype.compose(request.with_requirements(instancetype.requirements(request)))
    assert desired.results == []
    assert desired.resources["clusterqueue"]["spec"]["resourceGroups"] == []


def test_the_catalog_without_any_summary_keeps_every_flavor_type_and_row(walkthrough):
    summaries = [summary_of(doc) for doc in walkthrough.values()]
    full = catalog.compose(Request.of(catalog_object(), required={"summaries": summaries}))
    observed = {name: applied(obj) for name, obj in full.resources.items()}
    composite = {**catalog_object(), "status": full.status}
    request = Request.of(composite, observed=observed, required={"summaries": []})
    kept = catalog.compose(request.with_requirements(catalog.requirements(request)))
    assert views.plain(kept.resources) == full.resources
    assert views.plain(kept.status) == full.status
    assert [r.reason for r in kept.results] == ["NodeSummariesMissing"]
    assert "every flavor, InstanceType and catalog row kept as observed" in kept.results[0].message


# --- the InstanceType names a reservation it cannot read ----------------------------------------


def test_a_malformed_cluster_queue_reservation_is_named_in_a_warning(walkthrough):
    queue = copy.deepcopy(OBSERVED_QUEUE)
    queue["status"]["flavorsReservation"] = [
        {"name": "f", "resources": [{"name": "cpu", "total": "lots"}, "cpu"]},
        7,
    ]
    generic = {
        **pool_type(),
        "metadata": {"name": "gpustack--generic-linux-amd64"},
        "spec": {"os": "linux", "arch": "amd64", "unitResources": {"cpu": "1", "ram": "2Gi"}},
    }
    queue["metadata"]["name"] = "gpustack--generic-linux-amd64"
    request = Request.of(
        generic,
        observed={"clusterqueue": queue},
        required={
            "catalog": [],
            "summaries": [summary_of(walkthrough["node-cpu"])],
            "namespaces": [],
        },
    )
    desired = instancetype.compose(request.with_requirements(instancetype.requirements(request)))
    prefix = "ClusterQueue gpustack--generic-linux-amd64: status.flavorsReservation"
    suffix = (
        "; this reservation is not counted, so the CPU view may show more cores remaining "
        "than Kueue holds"
    )
    assert [(r.reason, r.message) for r in desired.results] == [
        (
            "UnreadableObject",
            f"{prefix}[0].resources[0].total: 'lots' is not a quantity (expected e.g. 8, 500m, "
            f"64Gi){suffix}",
        ),
        ("UnreadableObject", f"{prefix}[0].resources[1]: must be an object{suffix}"),
        ("UnreadableObject", f"{prefix}[1]: must be an object{suffix}"),
    ]
    assert desired.status["display"]["cpu"] == "16/16"


# --- an Instance reads its InstanceType once per distinct status ------------------------------


def struct_of(obj: dict) -> struct_pb2.Struct:
    struct = struct_pb2.Struct()
    struct.update(obj)
    return struct


def keys_reversed(obj: Any) -> Any:
    """The same object, every mapping's keys in reverse order."""
    if isinstance(obj, dict):
        return {key: keys_reversed(value) for key, value in reversed(obj.items())}
    if isinstance(obj, list):
        return [keys_reversed(value) for value in obj]
    return obj


def test_an_instance_type_is_read_once_while_it_is_unchanged(monkeypatch):
    """As the frame reads it for every Instance of the type (`Request.required_read`)."""
    h100 = type_fixture("instancetype-h100-mig-0.1.0.yaml")
    parsed = []
    real = lifecycle.type_status.read
    monkeypatch.setattr(lifecycle.type_status, "read", lambda obj: parsed.append(1) or real(obj))
    reads = frame.ReadOnce(1 << 20)
    first = reads.read(lifecycle.read_type, struct_of(h100))
    again = reads.read(lifecycle.read_type, struct_of(keys_reversed(h100)))
    assert parsed == [1] and again is first and first.facts == real(views.view_of(h100))
    resized = copy.deepcopy(h100)
    resized["spec"]["unitResources"]["cpu"] = "3"  # the spec alone changed
    assert reads.read(lifecycle.read_type, struct_of(resized)).facts.unit_cpu == 3
    assert first.facts.unit_cpu != 3
    h100["status"]["detail"]["slicedDetail"]["physical"]["profiles"].pop()  # the status alone
    changed = reads.read(lifecycle.read_type, struct_of(h100)).facts
    assert parsed == [1, 1, 1]
    assert "7g.80gb" in first.facts.profiles and "7g.80gb" not in changed.profiles


def test_an_unreadable_instance_type_status_is_read_as_the_field_it_breaks():
    broken = type_fixture("instancetype-a10g-0.1.0.yaml")
    broken["status"]["detail"]["slicedDetail"]["logical"]["count"] = "lots"
    found = lifecycle.read_type(views.view_of(broken))
    assert isinstance(found.facts, StatusError)
    assert found.facts.field == "status.detail.slicedDetail.logical.count"
    assert (found.draining, found.deleting) == (False, False)


def test_what_an_instance_type_offers_is_read_only():
    """One reading serves every Instance of the type: no caller may change it for the rest."""
    facts = lifecycle.read_type(
        views.view_of(type_fixture("instancetype-h100-mig-0.1.0.yaml"))
    ).facts
    with pytest.raises(TypeError):
        facts.profiles["7g.80gb"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        facts.profile_credits["7g.80gb"] = 1  # type: ignore[index]


# --- in the simulated cluster ------------------------------------------------------------------


def test_a_pool_reconcile_fetches_summaries_and_no_devices():
    from gpustack_sim import world_from

    world = world_from(
        [WALKTHROUGH / n for n in ("devices.yaml", "nodes.yaml", "namespaces.yaml", "catalog.yaml")]
    )
    world.reconcile()
    fetched = []

    def recording(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        for name, found in req.required_resources.items():
            fetched.extend((name, item.resource["kind"]) for item in found.items)
        return run_function(req)

    for kind, name in (("InstanceType", A10G), ("Catalog", "default")):
        handler = "instancetype" if kind == "InstanceType" else "catalog"
        req = pipeline.request(world.get(kind, name), {}, {**INPUT, "handler": handler})
        rsp = pipeline.run_step(recording, req, list(world.store.values()))
        assert [r.severity for r in rsp.results] == []
    assert ("summaries", "ConfigMap") in fetched
    assert not [kind for _, kind in fetched if kind == "Devices"]
    assert len([1 for name, _ in fetched if name == "summaries"]) == 1 + 4  # a10g pool, catalog
