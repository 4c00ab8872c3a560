"""A bad node summary is left out and named, on both of a pool's read paths (issue 35, item 6).

Negative cores, a count of 10**30 (the pool's capacity read `1000000000000000000000000000004`),
facts that are not the summary's, a ConfigMap without metadata: each was summed into the pool
as if true. A summary is now held to what its devices handler writes (core/status/summary.py)
or left out with a Warning naming the ConfigMap and the field; one of a newer release is read
by the figures this one knows, and named.

A pool reads its summaries one by one from a small request (parsed whole), and from the strings
gathered out of a large request's bytes (functions/wire.py); each case runs both.
"""

from __future__ import annotations

import json

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.core import reasons
from functions.core.ledger import SUMMARY_COUNTS, GroupSummary
from functions.core.pools import NodeSummary
from functions.core.status import summary as node_summary
from functions.server import INLINE_MAX_BYTES, serve_bytes
from functions.views import StructView
from tests.support import load

PATHS = {"parsed whole": 3, "gathered from the bytes": 100}  # nodes: under and over the inline size
BROKEN = "node-00001"


def served(nodes: int, change) -> tuple[dict, list[fnv1.Result]]:
    """A pool of `nodes` nodes, node-00001's summary ConfigMap changed by `change(obj)`: the
    pool's status and its results."""
    req = load.pool_request(nodes)
    item = req.required_resources["summaries"].items[1].resource
    obj = json.loads(json.dumps(StructView(item).to_dict()))
    assert obj["metadata"]["name"] == f"{BROKEN}-gpustack-summary"
    change(obj)
    item.Clear()
    item.update(obj)
    payload = req.SerializeToString()
    assert (len(payload) > INLINE_MAX_BYTES) == (nodes > 3)
    _, rsp, _ = serve_bytes(payload)
    return StructView(rsp.desired.composite.resource).to_dict()["status"], list(rsp.results)


def summary_changed(**changes):
    def change(obj):
        document = json.loads(obj["data"]["summary"])
        document.update(changes)
        obj["data"]["summary"] = json.dumps(document, separators=(",", ":"), sort_keys=True)

    return change


def figure(index: int, value):
    def change(obj):
        document = json.loads(obj["data"]["summary"])
        document["groups"][load.A_KEY][index] = value
        obj["data"]["summary"] = json.dumps(document, separators=(",", ":"), sort_keys=True)

    return change


def facts(text, named_elsewhere: bool):
    """The node's facts replaced (None: removed); unless `named_elsewhere`, its summary names
    facts of its own, which no other node holds (equal hardware shares its facts)."""

    def change(obj):
        if text is None:
            del obj["data"]["facts"]
        else:
            obj["data"]["facts"] = text
        if not named_elsewhere:
            summary_changed(facts=node_summary.facts_digest('{"cpu":{"vendor":"Other"}}'))(obj)

    return change


def no_metadata(obj):
    del obj["metadata"]


LEFT_OUT = {
    "negative cores": (summary_changed(cores=-4), "data.summary", "cores must be from 0 to "),
    "10**30 free cards": (figure(2, 10**30), "data.summary", "groups.nvidia-h100-80gb-hbm3[2] "),
    "a negative figure": (figure(0, -8), "data.summary", "groups.nvidia-h100-80gb-hbm3[0] must"),
    "garbage facts": (facts('{"cpu": 1}', False), "data.facts", "is not the one the summary"),
    "facts missing": (facts(None, False), "data.facts", "is not the one the summary names"),
    "no metadata": (no_metadata, "metadata.name", f"must be {BROKEN}-gpustack-summary"),
}


@pytest.mark.parametrize("nodes", PATHS.values(), ids=PATHS.keys())
@pytest.mark.parametrize(("change", "field", "problem"), LEFT_OUT.values(), ids=LEFT_OUT.keys())
def test_a_summary_its_devices_handler_would_not_write_is_left_out_and_named(
    nodes, change, field, problem
):
    status, results = served(nodes, change)
    assert status["nodes"] == nodes - 1
    # Seven cards of every remaining node are free (the pool reads `onceMax/remaining`).
    assert status["display"]["accelerator"].split()[0] == f"8/{8 * (nodes - 1)}"
    (warning,) = [r for r in results if r.severity == fnv1.SEVERITY_WARNING]
    where = f"gpustack-system/{BROKEN}-gpustack-summary" if field != "metadata.name" else None
    prefix = f"ConfigMap {where or '/<no name>'}: {field}: {problem}"
    assert warning.message.startswith(prefix), warning.message


@pytest.mark.parametrize("nodes", PATHS.values(), ids=PATHS.keys())
def test_a_summary_of_a_newer_release_is_read_and_named(nodes):
    status, results = served(nodes, summary_changed(v=99))
    assert status["nodes"] == nodes  # by the figures this release knows, which keep their places
    (warning,) = [r for r in results if r.severity == fnv1.SEVERITY_WARNING]
    assert warning.reason == reasons.NODE_SUMMARY_NEWER
    assert warning.message.startswith(
        f"node summaries of {BROKEN} are version 99, newer than this release reads "
        f"({node_summary.VERSION}): read by the figures it knows"
    )


@pytest.mark.parametrize("nodes", PATHS.values(), ids=PATHS.keys())
@pytest.mark.parametrize("text", ['{"cpu": 1}', None], ids=["garbage", "missing"])
def test_a_nodes_own_facts_may_be_another_nodes_that_the_summary_names(nodes, text):
    """Equal hardware has equal facts, named by one digest: the summary reads them wherever
    they are in the request, so its own being broken changes nothing it reads."""
    status, results = served(nodes, facts(text, named_elsewhere=True))
    assert status["nodes"] == nodes and results == []


@pytest.mark.parametrize("nodes", PATHS.values(), ids=PATHS.keys())
def test_good_summaries_pass_without_a_word(nodes):
    status, results = served(nodes, lambda obj: None)
    assert status["nodes"] == nodes and results == []


# Every figure the ledger sums is published (item 2 of the modes audit): a new mode's figure
# in GroupSummary used to be dropped from every summary unless the layout was edited by hand.


def test_every_figure_the_ledger_sums_is_in_the_layout_this_release_writes():
    layout = node_summary.LAYOUTS[node_summary.VERSION]
    assert sorted(node_summary.COUNT_FIELDS.values()) == sorted(SUMMARY_COUNTS)
    assert set(layout) == set(node_summary.COUNT_FIELDS)
    for released in node_summary.RELEASED_LAYOUTS.values():  # each keeps its figures' places
        assert layout[: len(released)] == released


def test_every_figure_the_ledger_sums_reads_back_as_written():
    figures = GroupSummary(**{name: n for n, name in enumerate(SUMMARY_COUNTS, start=1)})
    written = NodeSummary("node-a", "linux", "amd64", "", True, 8, {"a": figures})
    data = node_summary.write(written)
    assert node_summary.read(data["summary"], data["facts"]).groups == {"a": figures}


def test_a_figure_the_newest_released_layout_lacks_is_appended_under_the_next_version():
    released = {1: ("totalCards", "cards")}
    today = ("totalCards", "cards")
    assert node_summary.current_layout(released, today) == (1, today)
    added = ("totalCards", "freeTicks", "cards")  # in the ledger's order, wherever it stands
    assert node_summary.current_layout(released, added) == (2, (*today, "freeTicks"))
    assert node_summary.current_layout({**released, 2: (*today, "freeTicks")}, added)[0] == 2
