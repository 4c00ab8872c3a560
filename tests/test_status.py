"""Status contracts: what one handler publishes, another reads — this release's and 0.1.0's."""

from __future__ import annotations

import copy
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
    assert status["version"] == 2
    assert status["summary"]["display"] == "nvidia-h100-80gb-hbm3 5/8"


@pytest.mark.parametrize(
    "name", ["devices-node-a10g-0.1.0.yaml", "devices-node-h100-mig-0.1.0.yaml"]
)
def test_a_devices_status_written_by_release_0_1_0_reads_as_this_release_computes_it(name):
    old = fixture(name)
    assert "version" not in old["status"]  # the stored contract, untouched
    spec = parse_devices(old)
    expected = summarize_devices(spec)
    read = devices_status.read_summary(spec.node, old["status"])
    assert read.groups == expected.groups
    assert read.facts == expected.facts
    assert read.cpu == expected.cpu


def test_release_0_1_0_named_counts_serve_without_the_packed_list():
    old = fixture("devices-node-a10g-0.1.0.yaml")
    for row in old["status"]["summary"]["groups"]:
        del row["counts"]
    read = devices_status.read_summary("node-a10g", old["status"])
    slice_20 = read.groups["nvidia-a10g"]
    assert (slice_20.free_cards, slice_20.free_slice_percent, slice_20.max_card_slice_units) == (
        0,
        80,
        1_280_000,
    )


def test_counts_are_read_by_the_names_the_status_states_not_by_position():
    status = published("node-h100", h100_node(3, [MIG_3G_ON_GPU0]))
    group = status["summary"]["groups"][0]
    names, counts = status["summary"]["countNames"], group["counts"]
    # A later release reorders the figures and adds one: this reader still gets every figure.
    status["summary"]["countNames"] = ["futureFigure", *reversed(names)]
    group["counts"] = [7, *reversed(counts)]
    expected = devices_status.read_summary(
        "node-h100", published("node-h100", h100_node(3, [MIG_3G_ON_GPU0]))
    )
    assert devices_status.read_summary("node-h100", status).groups == expected.groups


@dataclass(frozen=True)
class Broken:
    name: str
    change: callable
    field: str


def _counts(status):
    status["summary"]["groups"][0]["counts"] = status["summary"]["groups"][0]["counts"][:-1]


def _text_count(status):
    status["summary"]["groups"][0]["counts"][2] = "many"


def _groups_object(status):
    status["summary"]["groups"] = {"nvidia-a10g": {}}


def _no_names(status):
    del status["summary"]["countNames"]


BROKEN = [
    Broken("a count missing", _counts, "status.summary.groups[0].counts"),
    Broken("a count that is text", _text_count, "status.summary.groups[0].counts[2]"),
    Broken("groups that are not a list", _groups_object, "status.summary.groups"),
    Broken("version 2 without the count names", _no_names, "status.summary.countNames"),
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
