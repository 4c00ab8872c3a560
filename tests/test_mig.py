"""Hardware partitions: the reference's MIG examples on an 8 × H100 node (§4.5, §6), and what
the device plugins advertise for MIG cards, which the scheduler fits Pods against (§2.6)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from functions.core import mig
from functions.core.devices import Allocation, Placement, parse_spec
from functions.core.ledger import CardLedger, build_ledger
from functions.core.modes import Mode
from functions.core.pools import accelerator_views, summarize_devices
from gpustack_sim import World
from gpustack_sim.apiserver import ApiServer
from gpustack_sim.client import Client
from gpustack_sim.deviceplugin import GpustackPlugin, cards_of
from gpustack_sim.nvidia import NvidiaPlugin
from gpustack_sim.store import Store

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
    assert after[Mode.PARTITIONED].allocated_profiles == {"3g.40gb": 1}
    assert after[Mode.PARTITIONED].remaining_profiles == {
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
    assert (after[Mode.EXCLUSIVE].remaining, after[Mode.SHARED].remaining) == (4, 40)
    assert (after[Mode.SLICED].remaining, after[Mode.PARTITIONED].remaining) == (450, 17)


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


# --- What gpustack's device plugin advertises, and what the scheduler makes of it ----------------
#
# The node keys of reference §2.6 and §6: each profile counts its partitions held plus its free
# placements, `<base>.partitioned` the partitions held plus the largest free count of one
# profile. The stand-ins (simulator/gpustack_sim/deviceplugin.py, nvidia.py) judged against them.

PER_CARD = 1_600_000
PARTITIONED = "nvidia.com/gpu.partitioned"


def h100_devices(cards: int, on_first: tuple[str, ...] = (), healthy: bool = True) -> dict:
    """A Devices object of `cards` H100s in MIG mode; the first holds a MIG instance of each
    profile in `on_first` at that profile's first placement (as a grant of the plugin's)."""
    spec = h100_node(cards)
    spec["accelerators"][0]["devices"] = spec["accelerators"][0]["devices"][:cards]
    first = spec["accelerators"][0]["devices"][0]
    first["healthy"] = healthy
    placements = {p.name: p.placements[0] for p in mig.profiles_for(H100)}
    first["mig"]["partitions"] = [
        {
            "profile": name,
            "placement": {"start": placements[name].start, "size": placements[name].size},
            "uuid": f"MIG-h100-0-{name}",
        }
        for name in on_first
    ]
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {"name": "node-h100"},
        "spec": spec,
    }


PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


def partition_keys(*counts: int) -> dict[str, int]:
    """`<base>.partitioned.mig-<profile>` for each of PROFILES, in that order."""
    return {f"{PARTITIONED}.mig-{p}": n for p, n in zip(PROFILES, counts, strict=True)}


@dataclass(frozen=True)
class Advertised:
    name: str
    plugin: str  # the Catalog's devicePlugin
    devices: dict
    keys: dict[str, int]  # the nvidia.com/ keys on the node


ADVERTISED = [
    Advertised(
        "the reference's eight H100s, one holding a 3g.40gb at slices 0-3",
        "gpustack",
        h100_devices(8, ("3g.40gb",)),
        {
            PARTITIONED: 7 * 7 + 1 + 3,
            f"{PARTITIONED}.units": 8 * PER_CARD,
            **partition_keys(52, 30, 22, 16, 7, 7),
        },
    ),
    Advertised(
        "a 4g.40gb at slices 0-3 leaves three 1g.10gb and no 7g.80gb",
        "gpustack",
        h100_devices(1, ("4g.40gb",)),
        {
            PARTITIONED: 1 + 3,
            f"{PARTITIONED}.units": PER_CARD,
            **partition_keys(3, 2, 1, 1, 1, 0),
        },
    ),
    Advertised(
        "a 7g.80gb holds the card: each other profile reads zero, not gone",
        "gpustack",
        h100_devices(1, ("7g.80gb",)),
        {
            PARTITIONED: 1,
            f"{PARTITIONED}.units": PER_CARD,
            **partition_keys(0, 0, 0, 0, 0, 1),
        },
    ),
    Advertised(
        "gpustack: an unhealthy card in MIG mode offers no partition",
        "gpustack",
        h100_devices(1, healthy=False),
        {},
    ),
    Advertised(
        "nvidia: the MIG device on an unhealthy card is not offered (its health check)",
        "nvidia",
        h100_devices(1, ("3g.40gb",), healthy=False),
        {},
    ),
]


@pytest.mark.parametrize("case", ADVERTISED, ids=[c.name for c in ADVERTISED])
def test_what_the_device_plugin_advertises_for_mig_cards(case: Advertised):
    plugins = {"gpustack": GpustackPlugin(), "nvidia": NvidiaPlugin(Client(ApiServer(Store())))}
    advertised = plugins[case.plugin].advertise({}, cards_of(case.devices))
    # Only the plugin's accelerator keys: the SSH sidecar's visibility tokens are another matter.
    assert {k: v for k, v in advertised.items() if k.startswith("nvidia.com/")} == case.keys


def mig_pod(name: str, profile: str) -> dict:
    """A Pod asking gpustack's plugin for one partition of `profile` (reference §6's shape)."""
    limits = {PARTITIONED: "1", f"{PARTITIONED}.mig-{profile}": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
    }


def one_mig_h100() -> World:
    """One H100 in MIG mode under gpustack's plugin; no Catalog, so no queue stands between."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-h100", "labels": {"kubernetes.io/hostname": "node-h100"}},
        "status": {
            "capacity": {"cpu": "224", "memory": "2Ti", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}
    world = World()
    world.apply(namespace, node, h100_devices(1))
    world.reconcile()
    return world


def phase(world: World, name: str) -> str:
    return world.get("Pod", name, "default")["status"]["phase"]


def unschedulable(world: World, name: str) -> str:
    pod = world.get("Pod", name, "default")
    assert "nodeName" not in pod["spec"]
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    return scheduled["message"]


@dataclass(frozen=True)
class Fit:
    name: str
    held: str  # the partition a running Pod holds
    wanted: str  # what each later Pod asks for
    pods: int
    running: int  # how many of them fit
    insufficient: tuple[str, ...]  # the keys the scheduler names for the rest


FITS = [
    Fit(
        "a 4g.40gb at slices 0-3: three 1g.10gb fit in 4-6, the fourth waits",
        "4g.40gb",
        "1g.10gb",
        4,
        3,
        (PARTITIONED, f"{PARTITIONED}.mig-1g.10gb"),
    ),
    Fit(
        "a 1g.10gb at slice 0: one 3g.40gb fits in 4-7, the second waits",
        "1g.10gb",
        "3g.40gb",
        2,
        1,
        (f"{PARTITIONED}.mig-3g.40gb",),
    ),
    Fit(
        "a 7g.80gb holds the card: no 1g.10gb fits",
        "7g.80gb",
        "1g.10gb",
        1,
        0,
        (PARTITIONED, f"{PARTITIONED}.mig-1g.10gb"),
    ),
]


@pytest.mark.parametrize("case", FITS, ids=[c.name for c in FITS])
def test_a_partition_that_cannot_fit_waits_at_the_scheduler_not_at_allocate(case: Fit):
    world = one_mig_h100()
    world.apply(mig_pod("held", case.held))
    world.reconcile()
    assert phase(world, "held") == "Running"
    names = [f"wants-{i}" for i in range(case.pods)]
    world.apply(*(mig_pod(name, case.wanted) for name in names))
    world.reconcile()
    expected = ["Running"] * case.running + ["Pending"] * (case.pods - case.running)
    assert [phase(world, name) for name in names] == expected  # none bound to fail at Allocate
    assert unschedulable(world, names[-1]) == (
        "0/1 nodes are available: "
        + ", ".join(f"1 Insufficient {key}" for key in case.insufficient)
        + ". preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )


def test_the_waiting_partition_runs_once_the_one_in_its_way_is_gone():
    world = one_mig_h100()
    world.apply(mig_pod("held", "7g.80gb"))
    world.reconcile()
    world.apply(mig_pod("waits", "1g.10gb"))
    world.reconcile()
    assert phase(world, "waits") == "Pending"
    world.delete("Pod", "held", "default")
    world.reconcile()
    assert phase(world, "waits") == "Running"
    card = world.get("Devices", "node-h100")["spec"]["accelerators"][0]["devices"][0]
    assert [(p["profile"], p["placement"]) for p in card["mig"]["partitions"]] == [
        ("1g.10gb", {"start": 0, "size": 1})
    ]
