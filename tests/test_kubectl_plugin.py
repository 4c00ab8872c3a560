"""`kubectl gpustack` as an administrator reads it: the walkthrough's fleet after §3 (a 20 % slice
on the A10G held by default/sliced-demo), MIG layouts, JSON for scripts, and what it says about
objects it cannot read.

The §3 fixture is the simulator's Devices objects; regenerate it with
`.venv/bin/python -m tests.test_kubectl_plugin` (see tests/fixtures/kubectl/README.md).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from functions.core.devices import parse_devices
from functions.core.ledger import build_ledger
from functions.core.status.devices import ledger_rows
from functions.kubectl.cli import main
from tests.support.schemas import ROOT

FIXTURES = ROOT / "tests" / "fixtures"
AFTER_SECTION_3 = FIXTURES / "kubectl" / "devices-after-section-3.yaml"
WALKTHROUGH = ROOT / "examples" / "walkthrough"
A10G = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"


def kubectl_gpustack(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), prog_name="kubectl gpustack")
    assert result.exit_code == 0, result.output
    return result.output


def fixture_objects() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(AFTER_SECTION_3.read_text()) if doc]


# --- the walkthrough after §3 ---------------------------------------------------------------------


def test_cards_show_the_a10g_holding_sliced_demos_20_percent_slice_and_the_t4s_free():
    assert kubectl_gpustack("cards", "-f", str(AFTER_SECTION_3)) == (
        "NODE        GPU   PRODUCT       MODE     HOLDERS                                     FREE MEM   FREE CORES   MIG\n"
        "node-a10g   0     NVIDIA A10G   Sliced   default/sliced-demo (20% mem, 100% cores)   80%        0%           off\n"
        "node-t4-a   0     Tesla T4      None     -                                           100%       100%         off\n"
        "node-t4-b   0     Tesla T4      None     -                                           100%       100%         off\n"
        "node-t4-b   1     Tesla T4      None     -                                           100%       100%         off\n"
        "node-t4-b   2     Tesla T4      None     -                                           100%       100%         off\n"
        "node-t4-b   3     Tesla T4      None     -                                           100%       100%         off\n"
    )


def test_nodes_show_each_nodes_free_cards_shares_and_slices():
    assert kubectl_gpustack("nodes", "-f", str(AFTER_SECTION_3)) == (
        "NODE        MANAGED   OS/ARCH       CPU                          CORES   GPUS(FREE/TOTAL)      SHARES   SLICE%   PT\n"
        "node-a10g   yes       linux/amd64   amd-epyc-7r32                4       nvidia-a10g 0/1       0        80       -\n"
        "node-cpu    yes       linux/amd64   amd-epyc-7r13                16      -                     0        0        -\n"
        "node-t4-a   yes       linux/amd64   intel-xeon-platinum-8259cl   4       nvidia-tesla-t4 1/1   10       100      -\n"
        "node-t4-b   yes       linux/amd64   intel-xeon-platinum-8259cl   48      nvidia-tesla-t4 4/4   40       400      -\n"
    )


@dataclass
class Case:
    name: str
    args: list[str]
    want: list[list[str]]  # each row's cells, split on runs of spaces


CASES = [
    Case(
        "--node narrows to one node's cards",
        ["cards", "--node", "node-a10g"],
        [
            ["NODE", "GPU", "PRODUCT", "MODE", "HOLDERS", "FREE MEM", "FREE CORES", "MIG"],
            [
                "node-a10g",
                "0",
                "NVIDIA A10G",
                "Sliced",
                "default/sliced-demo (20% mem, 100% cores)",
                "80%",
                "0%",
                "off",
            ],
        ],
    ),
    Case(
        "-o wide adds the container, the UUID, the size, the health and the MIG profiles left",
        ["cards", "--node", "node-a10g", "-o", "wide"],
        [
            [
                *["NODE", "GPU", "PRODUCT", "MODE", "HOLDERS", "FREE MEM", "FREE CORES", "MIG"],
                *["UUID", "MEMORY", "CORES", "HEALTHY", "MIG LEFT"],
            ],
            [
                *["node-a10g", "0", "NVIDIA A10G", "Sliced"],
                *["default/sliced-demo/main (20% mem, 100% cores)", "80%", "0%", "off"],
                *[A10G, "24576Mi", "10240", "yes", "-"],
            ],
        ],
    ),
    Case(
        "nodes -o wide adds the CPU model and the driver",
        ["nodes", "-o", "wide"],
        [
            [
                *["NODE", "MANAGED", "OS/ARCH", "CPU", "CORES", "GPUS(FREE/TOTAL)", "SHARES"],
                *["SLICE%", "PT", "CPU MODEL", "DRIVER"],
            ],
            [
                *["node-a10g", "yes", "linux/amd64", "amd-epyc-7r32", "4", "nvidia-a10g 0/1"],
                *["0", "80", "-", "AMD EPYC 7R32", "580.159.03"],
            ],
            [
                *["node-cpu", "yes", "linux/amd64", "amd-epyc-7r13", "16", "-", "0", "0", "-"],
                *["AMD EPYC 7R13 Processor", "-"],
            ],
            [
                *["node-t4-a", "yes", "linux/amd64", "intel-xeon-platinum-8259cl", "4"],
                *["nvidia-tesla-t4 1/1", "10", "100", "-"],
                *["Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "580.159.03"],
            ],
            [
                *["node-t4-b", "yes", "linux/amd64", "intel-xeon-platinum-8259cl", "48"],
                *["nvidia-tesla-t4 4/4", "40", "400", "-"],
                *["Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "580.159.03"],
            ],
        ],
    ),
]


def cells(output: str) -> list[list[str]]:
    """A table's rows as cells: kubectl separates columns by three spaces or more."""
    return [re.split(r" {3,}", line.strip()) for line in output.splitlines()]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_table_options(case):
    assert cells(kubectl_gpustack(*case.args, "-f", str(AFTER_SECTION_3))) == case.want


def test_json_holds_every_figure_of_the_held_card():
    listed = json.loads(kubectl_gpustack("cards", "-o", "json", "-f", str(AFTER_SECTION_3)))
    a10g = listed["items"][0]
    assert a10g == {
        "node": "node-a10g",
        "index": 0,
        "uuid": A10G,
        "product": "NVIDIA A10G",
        "memoryMiB": 24576,
        "cores": 10240,
        "healthy": True,
        "mode": "Sliced",
        "remaining": 1_280_000,
        "freeMemoryPercent": 80,
        "freeMemoryMiB": 19660,
        "freeCoresPercent": 0,
        "holders": [
            {
                "pod": "default/sliced-demo",
                "container": "main",
                "mode": "Sliced",
                "memoryPercentage": 20,
                "coresPercentage": 100,
            }
        ],
        "mig": {"enabled": False, "partitions": [], "remainingProfiles": {}},
    }
    assert [c["freeMemoryPercent"] for c in listed["items"][1:]] == [100] * 5


# --- sources ------------------------------------------------------------------------------------


def test_a_directory_and_a_kubectl_list_read_the_same_as_the_stream(tmp_path):
    listed = {"apiVersion": "v1", "kind": "List", "items": fixture_objects()}
    (tmp_path / "devices.json").write_text(json.dumps(listed))
    (tmp_path / "notes.txt").write_text("not read: a directory reads .yaml, .yml and .json")
    assert kubectl_gpustack("cards", "-f", str(tmp_path)) == kubectl_gpustack(
        "cards", "-f", str(AFTER_SECTION_3)
    )


def test_repeated_files_add_up_and_other_kinds_are_ignored(tmp_path):
    objects = fixture_objects()
    (tmp_path / "a10g.yaml").write_text(yaml.safe_dump(objects[0]))
    (tmp_path / "rest.yaml").write_text(
        yaml.safe_dump_all([*objects[1:], {"apiVersion": "v1", "kind": "Node", "metadata": {}}])
    )
    output = kubectl_gpustack(
        "cards", "-f", str(tmp_path / "a10g.yaml"), "-f", str(tmp_path / "rest.yaml")
    )
    assert output == kubectl_gpustack("cards", "-f", str(AFTER_SECTION_3))


def test_a_devices_object_it_cannot_read_is_named_and_skipped(tmp_path):
    objects = fixture_objects()
    broken = copy.deepcopy(objects[0])
    broken["status"]["groups"][0]["accelerators"][0]["mode"] = 9
    (tmp_path / "devices.yaml").write_text(yaml.safe_dump_all([broken, *objects[1:]]))
    result = CliRunner().invoke(main, ["cards", "-f", str(tmp_path / "devices.yaml")])
    assert result.exit_code == 0
    assert (
        "warning: Devices node-a10g: status.groups[0].accelerators[0].mode: must be 0..4, got 9; "
        "skipped" in result.stderr
    )
    assert "node-a10g" not in result.stdout and "node-t4-b" in result.stdout


def test_a_devices_status_an_earlier_release_wrote_is_named_and_skipped(tmp_path):
    objects = fixture_objects()
    earlier = copy.deepcopy(objects[0])
    earlier["status"]["version"] = 2
    (tmp_path / "devices.yaml").write_text(yaml.safe_dump_all([earlier, *objects[1:]]))
    result = CliRunner().invoke(main, ["nodes", "-f", str(tmp_path / "devices.yaml")])
    assert result.exit_code == 0
    assert result.stderr == (
        "warning: Devices node-a10g: status.version: must be 3 or later, got 2: an earlier "
        "release wrote this status, and the devices handler writes it afresh once it "
        "reconciles the node; skipped\n"
    )
    assert "node-a10g" not in result.stdout and "node-t4-b" in result.stdout


def test_a_node_the_handler_has_not_published_yet_reads_unknown(tmp_path):
    unpublished = copy.deepcopy(fixture_objects()[0])
    del unpublished["status"]
    (tmp_path / "devices.yaml").write_text(yaml.safe_dump(unpublished))
    assert cells(kubectl_gpustack("cards", "-f", str(tmp_path)))[1] == [
        *["node-a10g", "0", "NVIDIA A10G", "Unknown"],
        *["default/sliced-demo (20% mem, 100% cores)", "?", "?", "off"],
    ]
    assert kubectl_gpustack("nodes", "-f", str(tmp_path)).splitlines()[1:] == []


# --- MIG ----------------------------------------------------------------------------------------


def mig_node() -> dict:
    """Eight H100s, two in MIG mode, one 3g.40gb partition on GPU 0 held by default/mig-demo."""
    from functions.core.pools import summarize_devices
    from functions.core.status.devices import write

    recording = yaml.safe_load(
        (FIXTURES / "status" / "devices-node-h100-mig-0.1.0.yaml").read_text()
    )
    devices = {k: recording[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    spec = parse_devices(devices)
    devices["status"] = write(build_ledger(spec), summarize_devices(spec))
    return devices


def test_a_mig_card_shows_its_layout_its_holders_and_the_profiles_left(tmp_path):
    devices = mig_node()
    (tmp_path / "h100.yaml").write_text(yaml.safe_dump(devices))
    rows = cells(kubectl_gpustack("cards", "-o", "wide", "-f", str(tmp_path)))
    mode_to_mig, mig_left = slice(3, 8), -1
    assert [(row[mode_to_mig], row[mig_left]) for row in rows[1:4]] == [
        (
            ["Partitioned", "default/mig-demo/main (3g.40gb@0)", "50%", "50%", "3g.40gb@0"],
            "1g.10gb×3,1g.20gb×2,2g.20gb×1,3g.40gb×1",
        ),
        (
            ["None", "-", "100%", "100%", "on (empty)"],
            "1g.10gb×7,1g.20gb×4,2g.20gb×3,3g.40gb×2,4g.40gb×1,7g.80gb×1",
        ),
        (["None", "-", "100%", "100%", "off"], "-"),
    ]


# --- the fixture --------------------------------------------------------------------------------


def test_the_fixtures_ledger_rows_are_what_the_core_ledger_writes_for_its_spec():
    for obj in fixture_objects():
        assert obj["status"]["groups"] == ledger_rows(build_ledger(parse_devices(obj)))


def devices_after_section_3() -> list[dict]:
    """The walkthrough's Devices objects after §3, played by the simulator."""
    from gpustack_sim import load_documents, world_from

    world = world_from(
        [
            WALKTHROUGH / name
            for name in (
                "devices.yaml",
                "nodes.yaml",
                "namespaces.yaml",
                "storage.yaml",
                "catalog.yaml",
                "instancepersistentvolume-datasets.yaml",
            )
        ]
    )
    world.reconcile()
    world.apply(*load_documents(WALKTHROUGH / "instance-sliced-demo.yaml"))
    world.reconcile()
    return world.list("Devices")


HEADER = """\
# The walkthrough's Devices objects after §3 (the 20 % slice on the A10G held by
# default/sliced-demo), as the simulator leaves them: the input of tests/test_kubectl_plugin.py.
# Regenerate: .venv/bin/python -m tests.test_kubectl_plugin
"""


def write_fixture(path: Path = AFTER_SECTION_3) -> None:
    path.write_text(HEADER + yaml.safe_dump_all(devices_after_section_3(), sort_keys=False))


if __name__ == "__main__":
    write_fixture()
    print(f"wrote {AFTER_SECTION_3.relative_to(ROOT)}")


@pytest.mark.parametrize(
    ("rows", "printed"),
    [
        ([["ID", "NAME"], ["0", "node-a"]], "ID    NAME\n0     node-a"),
        ([["NAME", "CPU"], ["node-a", "-"]], "NAME     CPU\nnode-a   -"),
        ([["NAME", "NOTE"], ["a", ""]], "NAME   NOTE\na"),
    ],
    ids=[
        "a column under six wide is six wide",
        "three blanks past the widest",
        "no trailing blanks",
    ],
)
def test_tables_are_laid_out_as_kubectls_tab_writer_lays_them_out(rows, printed):
    """The plugin's tables (the product's) and the simulated kubectl's (from cli-runtime's tab
    writer: minimum width 6, padding 3) agree, each written on its own."""
    from functions.kubectl.columns import kubectl_table
    from gpustack_sim.kubectl import tabwritten

    assert tabwritten(rows) == printed
    assert kubectl_table(rows[0], rows[1:]) == printed


def test_a_node_left_out_of_every_pool_reads_unmanaged_and_says_why(tmp_path):
    left_out = copy.deepcopy(fixture_objects()[0])
    left_out["status"]["summary"]["managed"] = False
    left_out["status"]["leftOut"] = "2 card(s) in MIG mode, and …"
    (tmp_path / "devices.yaml").write_text(yaml.safe_dump(left_out))
    result = CliRunner().invoke(main, ["nodes", "-f", str(tmp_path / "devices.yaml")])
    assert result.exit_code == 0
    assert cells(result.stdout)[1][:2] == ["node-a10g", "no"]
    assert result.stderr == (
        "warning: node node-a10g is left out of every pool: 2 card(s) in MIG mode, and …\n"
    )
