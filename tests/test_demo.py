"""`make demo` prints the walkthrough's `kubectl get instancetypes` for the initial state."""

from click.testing import CliRunner

from functions.cli import main
from tests.conftest import WALKTHROUGH_DEVICES


def test_demo_prints_the_initial_instancetypes_table():
    result = CliRunner().invoke(main, ["demo", "--devices", str(WALKTHROUGH_DEVICES)])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.output.splitlines()]
    assert lines == [
        ["NAME", "ENTRANCE", "UNIT(CPU/RAM)/STORAGE", "ACCELERATOR(EX/SH/SL/PT)", "CPU", "PHASE"],
        [
            "gpustack--generic-linux-amd64",
            "gpustack-fnv64-3b93966fd73eb9ec",
            "1/2Gi/100Gi",
            "0/0",
            "0/0",
            "0/0",
            "0/0",
            "48/72",
            "Active",
        ],
        [
            "gpustack--nvidia-a10g-linux-amd64",
            "gpustack-fnv64-c4680bb149644f1c",
            "8/64Gi/100Gi",
            "1/1",
            "1/10",
            "100/100",
            "0/0",
            "0/0",
            "Active",
        ],
        [
            "gpustack--nvidia-tesla-t4-linux-amd64",
            "gpustack-fnv64-6b371caa2da0b799",
            "8/32Gi/100Gi",
            "4/5",
            "4/50",
            "100/500",
            "0/0",
            "0/0",
            "Active",
        ],
    ]
    # Columns line up as kubectl prints them: every row starts each column at the same offset.
    header = result.output.splitlines()[0]
    for row in result.output.splitlines()[1:]:
        assert row.index("gpustack-fnv64-") == header.index("ENTRANCE")


def test_make_demo_plays_the_walkthrough_scenario():
    """The acceptance test: every table of the walkthrough, step by step (card-count SH reading).

    After an intended change, review the difference and refresh the file with
    `gpustack-fn simulate > examples/walkthrough/expected.txt`.
    """
    from tests.conftest import ROOT

    scenario = ROOT / "examples" / "walkthrough" / "scenario.yaml"
    result = CliRunner().invoke(main, ["simulate", str(scenario)])
    assert result.exit_code == 0, result.output
    expected = (ROOT / "examples" / "walkthrough" / "expected.txt").read_text()
    assert result.output == expected
    # The seed's own figures, as the walkthrough records them (with the card-count SH reading).
    sections = result.output.split("== ")
    assert "0/0 0/0 80/80 0/0" in sections[4]  # §3: the 20 % slice
    assert "48/68" in sections[2]  # §2: node-a10g's 4 cores leave the generic pool
    assert "12/128Gi/200Gi          0/0 0/0 0/0 0/0" in sections[7]  # §4: both siblings drop
    assert "custom-demo   a10g-12c128g   Stopped" in sections[8]
