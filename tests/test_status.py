"""Status contracts: what one handler publishes, another reads — this release's and 0.1.0's;
and the Devices status, which people and `kubectl gpustack` read: the node summary's documents."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from functions.core.devices import parse_devices, parse_spec
from functions.core.ledger import build_ledger
from functions.core.modes import Mode
from functions.core.pools import summarize_devices
from functions.core.status import StatusError
from functions.core.status import devices as devices_status
from functions.core.status import instancetype as type_status
from functions.core.status import summary as node_summary
from tests.support.schemas import errors_of
from tests.test_mig import MIG_3G_ON_GPU0, h100_node

FIXTURES = Path(__file__).parent / "fixtures" / "status"


def fixture(name: str) -> dict:
    return yaml.safe_load((FIXTURES / name).read_text())


def published(node: str, spec: dict) -> dict:
    parsed = parse_spec(node, spec)
    ledger = build_ledger(parsed)
    return devices_status.write(ledger, summarize_devices(parsed, ledger=ledger))


def test_a_summary_reads_back_as_it_was_published():
    spec = h100_node(3, [MIG_3G_ON_GPU0])
    expected = summarize_devices(parse_spec("node-h100", spec))
    status = published("node-h100", spec)
    read = devices_status.read_summary("node-h100", status)
    assert read.groups == expected.groups
    assert read.facts == expected.facts
    assert read.cpu == expected.cpu
    assert (read.os, read.arch, read.g_key, read.managed, read.cpu_cores) == (
        "linux",
        "amd64",
        "intel-xeon-platinum-8480",
        True,
        224,
    )
    assert status["version"] == 3
    assert status["display"] == "nvidia-h100-80gb-hbm3 5/8"


def test_the_status_holds_the_documents_the_summary_config_map_holds_as_text():
    parsed = parse_spec("node-h100", h100_node(3, [MIG_3G_ON_GPU0]))
    ledger = build_ledger(parsed)
    summary = summarize_devices(parsed, ledger=ledger)
    status = devices_status.write(ledger, summary)
    data = node_summary.write(summary)
    assert status["summary"] == json.loads(data["summary"])
    assert status["facts"] == json.loads(data["facts"])


def reversed_keys(value):
    """`value` with every object's keys in the opposite order (as another writer might)."""
    if isinstance(value, dict):
        return {key: reversed_keys(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_keys(item) for item in value]
    return value


def test_the_summary_reads_the_same_whatever_order_its_keys_are_in():
    status = published("node-h100", h100_node(3, [MIG_3G_ON_GPU0]))
    turned = {**status, "summary": reversed_keys(status["summary"])}
    turned["facts"] = reversed_keys(status["facts"])
    assert list(turned["summary"]) != list(status["summary"])
    read, expected = (devices_status.read_summary("node-h100", s) for s in (turned, status))
    assert (read.groups, read.facts, read.cpu) == (expected.groups, expected.facts, expected.cpu)


@pytest.mark.parametrize("legacy", [False, True], ids=["v2 XRD", "legacy XRD"])
def test_the_status_of_a_node_with_partitions_is_what_the_devices_xrd_holds(legacy):
    """Nothing pruned and nothing refused: the API server keeps every figure the codec wrote."""
    recording = fixture("devices-node-h100-mig-0.1.0.yaml")
    devices = {key: recording[key] for key in ("apiVersion", "kind", "metadata", "spec")}
    spec = parse_devices(devices)
    ledger = build_ledger(spec)
    devices["status"] = devices_status.write(ledger, summarize_devices(spec, ledger=ledger))
    assert devices["status"]["summary"]["partitions"] and devices["status"]["facts"]["groups"]
    assert errors_of(devices, legacy=legacy) == []


@pytest.mark.parametrize(
    "name", ["devices-node-a10g-0.1.0.yaml", "devices-node-h100-mig-0.1.0.yaml"]
)
def test_a_devices_status_of_an_earlier_release_is_named_not_guessed_at(name):
    old = fixture(name)
    assert "version" not in old["status"]  # the stored contract, untouched
    with pytest.raises(StatusError) as raised:
        devices_status.read_summary(parse_devices(old).node, old["status"])
    assert raised.value.field == "status.version"
    assert raised.value.problem.startswith("must be 3 or later, got none: an earlier release")


def test_a_devices_status_before_its_summary_was_published_reads_none():
    assert devices_status.read_summary("node-a10g", {"groups": []}) is None


@dataclass(frozen=True)
class Broken:
    name: str
    change: callable
    field: str


def _a_figure_missing(status):
    status["summary"]["groups"]["nvidia-a10g"].pop()


def _a_figure_that_is_text(status):
    status["summary"]["groups"]["nvidia-a10g"][2] = "many"


def _groups_a_list(status):
    status["summary"]["groups"] = [status["summary"]["groups"]]


def _other_facts(status):
    status["facts"]["groups"]["nvidia-a10g"]["memoryMiB"] += 1


def _no_facts(status):
    del status["facts"]


def _another_node(status):
    status["summary"]["node"] = "node-t4-a"


def _an_earlier_version(status):
    status["version"] = 2


BROKEN = [
    Broken("a figure missing", _a_figure_missing, "status.summary"),
    Broken("a figure that is text", _a_figure_that_is_text, "status.summary"),
    Broken("groups that are a list", _groups_a_list, "status.summary"),
    Broken("facts other than those the summary names", _other_facts, "status.facts"),
    Broken("no facts", _no_facts, "status.facts"),
    Broken("the summary of another node", _another_node, "status.summary.node"),
    Broken("version 2", _an_earlier_version, "status.version"),
]


@pytest.mark.parametrize("case", BROKEN, ids=[c.name for c in BROKEN])
def test_an_unreadable_summary_names_its_field(walkthrough, case):
    status = published("node-a10g", walkthrough["node-a10g"]["spec"])
    case.change(status)
    with pytest.raises(StatusError) as raised:
        devices_status.read_summary("node-a10g", status)
    assert raised.value.field == case.field


def test_an_instance_type_status_written_by_release_0_1_0_offers_what_it_did():
    a10g = type_status.read(fixture("instancetype-a10g-0.1.0.yaml"))
    assert (a10g.name, a10g.manufacturer, a10g.card_memory_mib) == (
        "gpustack--nvidia-a10g-linux-amd64",
        "nvidia",
        24576,
    )
    assert a10g.modes == {Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED}
    assert (a10g.unit_cpu, a10g.unit_ram, a10g.largest_node_cards) == (8, 64 * 2**30, 1)
    assert (a10g.entrance, a10g.phase) == ("gpustack-fnv64-c4680bb149644f1c", "Active")
    h100 = type_status.read(fixture("instancetype-h100-mig-0.1.0.yaml"))
    assert h100.modes == {Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.PARTITIONED}
    assert h100.profiles["3g.40gb"] == 40448 and h100.card_memory_mib == 81559
    assert h100.profile_credits["3g.40gb"] == 800_000  # priced by the core's table


def test_this_releases_instance_type_status_reads_the_same_as_0_1_0s():
    old = fixture("instancetype-h100-mig-0.1.0.yaml")
    new = copy.deepcopy(old)
    new["status"] = {
        "version": 2,
        "entrance": old["status"]["entrance"],
        "phase": "Active",
        "offers": {
            "manufacturer": "nvidia",
            "cardMemoryMiB": 81559,
            "modes": ["Exclusive", "Shared", "Sliced", "Partitioned"],
            "profiles": [
                {"name": p["name"], "memoryMiB": p["memoryMiB"], "credits": credits}
                for p, credits in zip(
                    old["status"]["detail"]["slicedDetail"]["physical"]["profiles"],
                    (200_000, 400_000, 400_000, 800_000, 800_000, 1_600_000),
                    strict=True,
                )
            ],
            "largestNodeCards": 8,
            "largestNodeCores": 0,
            "cpuCapacity": 0,
        },
    }
    assert type_status.read(new) == type_status.read(old)


def test_an_unreadable_instance_type_status_names_its_field():
    broken = fixture("instancetype-a10g-0.1.0.yaml")
    broken["status"]["detail"]["slicedDetail"]["logical"]["count"] = "lots"
    with pytest.raises(StatusError) as raised:
        type_status.read(broken)
    assert raised.value.field == "status.detail.slicedDetail.logical.count"


def test_an_instance_type_status_with_a_profile_that_is_no_object_names_it():
    status = copy.deepcopy(fixture("instancetype-h100-mig-0.1.0.yaml"))
    status["status"] = {"version": 2, "offers": {"profiles": [{"name": "3g.40gb"}, "7g.80gb"]}}
    with pytest.raises(StatusError) as raised:
        type_status.read(status)
    assert raised.value.field == "status.offers.profiles[1]"
