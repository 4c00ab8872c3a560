"""make e2e's differential check of Kueue's charges (e2e/charges.py): each allocation row the
agents report is priced by the core's credit rule, and a Workload charged otherwise is named."""

from __future__ import annotations

import pytest

from e2e import charges

H100 = {"uuid": "GPU-h", "product": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559}
L4 = {"uuid": "GPU-l", "product": "NVIDIA L4", "memoryMiB": 23034}


@pytest.mark.parametrize(
    ("row", "card", "credits"),
    [
        ({"mode": "Exclusive"}, L4, 1_600_000),
        ({"mode": "Shared"}, L4, 160_000),
        ({"mode": "Sliced", "memoryPercentage": 20}, L4, 320_000),
        ({"mode": "Sliced", "memoryMiB": 11517}, L4, 800_000),
        ({"mode": "Partitioned", "profile": "3g.40gb"}, H100, 800_000),
        ({"mode": "Partitioned", "profile": "1g.10gb"}, H100, 200_000),
    ],
    ids=lambda v: v.get("mode", "") + v.get("profile", "") if isinstance(v, dict) else str(v),
)
def test_a_row_costs_what_the_credit_rule_says(row, card, credits):
    assert charges.price(row, card) == credits


class Cluster:
    def __init__(self, **kinds):
        self.kinds = kinds

    def list(self, kind):
        return self.kinds.get(kind, [])


def workload(pod: str, usage: str) -> dict:
    owner = {"kind": "Pod", "name": pod}
    assignment = {"resourceUsage": {"credits.gpustack.ai/nvidia": usage, "cpu": "8"}}
    return {
        "metadata": {"namespace": "default", "ownerReferences": [owner]},
        "status": {"admission": {"podSetAssignments": [assignment]}},
    }


def test_a_workload_charged_other_than_its_allocations_cost_is_named():
    rows = [
        {"pod": "default/whole", "device": "GPU-h", "mode": "Exclusive"},
        {"pod": "default/part", "device": "GPU-h", "mode": "Partitioned", "profile": "3g.40gb"},
    ]
    devices = [{"spec": {"accelerators": [{"devices": [H100]}], "allocations": rows}}]
    cluster = Cluster(
        Devices=devices,
        Workload=[
            workload("whole", "1600k"),
            workload("part", "400k"),
            workload("unreported", "1600k"),  # no agent reports it yet: not judged
        ],
    )
    assert charges.compared(cluster) == [
        "default/part: Kueue charged 400000, differ: its allocations cost 800000",
        "default/whole: Kueue charged 1600000, as 1600000",
    ]
    assert charges.disagreements(cluster) == [
        "default/part: Kueue charged 400000, differ: its allocations cost 800000"
    ]
