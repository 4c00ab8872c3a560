"""Hardware partitions: the reference's MIG examples on an 8 × H100 node (§4.5, §6)."""

from __future__ import annotations

import pytest

from functions.core import mig
from functions.core.devices import Allocation, Placement, parse_spec
from functions.core.ledger import CardLedger, build_ledger
from functions.core.modes import Mode
from functions.core.pools import accelerator_views, summarize_devices

H100 = "NVIDIA H100 80GB HBM3"


def h100_node(mig_cards: int, allocations: list[dict] = ()) -> dict:
    """An 8 × H100 node whose first `mig_cards` cards are in MIG mode (profiles from the table)."""
    devices = []
    for index in range(8):
        in_mig = index < mig_cards
        profiles = [
            {
                "name": p.name,
                "memoryMiB": p.memory_mib,
                "computeSlices": p.compute_slices,
                "memorySlices": p.memory_slices,
                "placements": [{"start": pl.start, "size": pl.size} for pl in p.placements],
            }
            for p in mig.profiles_for(H100)
        ]
        devices.append(
            {
                "uuid": f"GPU-h100-{index}",
                "index": index,
                "product": H100,
                "memoryMiB": 81559,
                "cores": 16896,
                "computeCapability": "9.0",
                "mig": {"enabled": in_mig, "profiles": profiles if in_mig else []},
            }
        )
    return {
        "os": "linux",
        "arch": "amd64",
        "cpu": {"vendor": "Intel", "modelName": "Intel(R) Xeon(R) Platinum 8480+", "cores": 224},
        "accelerators": [{"manufacturer": "nvidia", "devices": devices}],
        "allocations": list(allocations),
    }


def views(spec: dict):
    node = summarize_devices(parse_spec("node-h100", spec))
    return accelerator_views(node.groups.values())


MIG_3G_ON_GPU0 = {
    "pod": "default/mig-demo",
    "container": "main",
    "device": "GPU-h100-0",
    "mode": "Partitioned",
    "profile": "3g.40gb",
    "placement": {"start": 0, "size": 4},
}


def test_all_logical():
    assert views(h100_node(0)).display == "8/8 8/80 100/800 0/0"


def test_all_mig_then_one_3g_40gb():
    assert views(h100_node(8)).display == "0/0 0/0 0/0 1/56"
    after = views(h100_node(8, [MIG_3G_ON_GPU0]))
    assert after.display == "0/0 0/0 0/0 1/52"
    assert after.partitioned.allocated_profiles == {"3g.40gb": 1}
    assert after.partitioned.remaining_profiles == {
        "1g.10gb": 7 * 7 + 3,
        "1g.20gb": 7 * 4 + 2,
        "2g.20gb": 7 * 3 + 1,
        "3g.40gb": 7 * 2 + 1,
        "4g.40gb": 7,
        "7g.80gb": 7,
    }


def test_remaining_profiles_after_one_3g_40gb_at_slices_0_to_3():
    remaining = mig.remaining_profiles(mig.profiles_for(H100), [Placement(0, 4)])
    assert remaining == {
        "1g.10gb": 3,
        "1g.20gb": 2,
        "2g.20gb": 1,
        "3g.40gb": 1,
        "4g.40gb": 0,
        "7g.80gb": 0,
    }
    assert mig.largest_remaining(remaining) == 3  # a card counts its largest, never the sum


def test_mixed_node_five_whole_three_mig():
    # Cards 0-2 in MIG mode, 3-7 logical: recorded `5/5 50/50 100/500 7/21` under the old readings.
    assert views(h100_node(3)).display == "5/5 5/50 100/500 1/21"
    slice_half_of_gpu5 = {
        "pod": "default/half",
        "container": "main",
        "device": "GPU-h100-5",
        "mode": "Sliced",
        "memoryPercentage": 50,
    }
    after = views(h100_node(3, [MIG_3G_ON_GPU0, slice_half_of_gpu5]))
    assert (after.exclusive.remaining, after.shared.remaining) == (4, 40)
    assert (after.sliced.remaining, after.partitioned.remaining) == (450, 17)


def test_partition_placement_is_chosen_when_not_reported_and_overlaps_are_refused():
    spec = parse_spec("node-h100", h100_node(1))
    card = CardLedger.for_card(spec.groups[0].devices[0], "nvidia")
    first = card.allocate(Allocation("a", "main", card.id, Mode.PARTITIONED, profile="3g.40gb"))
    second = first.allocate(Allocation("b", "main", card.id, Mode.PARTITIONED, profile="3g.40gb"))
    assert [p for _, p in second.occupied] == [Placement(0, 4), Placement(4, 4)]
    assert second.mode is Mode.PARTITIONED
    assert second.remaining_profiles()["1g.10gb"] == 0
    ledger = build_ledger(parse_spec("node-h100", h100_node(1, [MIG_3G_ON_GPU0, MIG_3G_ON_GPU0])))
    assert [c.reason for c in ledger.conflicts] == [
        "Placement(start=0, size=4) of 3g.40gb overlaps a partition"
    ]


@pytest.mark.parametrize(
    "product", ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", H100, "NVIDIA H200"]
)
def test_seven_slice_geometries(product):
    profiles = mig.profiles_for(product)
    assert mig.capacity(profiles) == 7
    assert [p.max_count for p in profiles] == [7, 4, 3, 2, 1, 1]
    assert all(pl.end <= 8 for p in profiles for pl in p.placements)


def test_a30_geometry():
    profiles = mig.profiles_for("NVIDIA A30")
    assert [(p.name, p.max_count) for p in profiles] == [
        ("1g.6gb", 4),
        ("2g.12gb", 2),
        ("4g.24gb", 1),
    ]
    assert mig.remaining_profiles(profiles, [Placement(0, 1)]) == {
        "1g.6gb": 3,
        "2g.12gb": 1,
        "4g.24gb": 0,
    }


def test_cards_without_a_mig_table_are_not_partitionable():
    assert mig.profiles_for("NVIDIA A10G") == ()
