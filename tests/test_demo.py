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
