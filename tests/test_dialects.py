"""The device-plugin dialects: each writes what its plugin understands, reads it back, is charged
exactly by the Kueue configuration shipped for it, and refuses what it cannot express."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from functions.agent.allocations import allocations
from functions.agent.podresources import ContainerDevices
from functions.core import dialects, mig
from functions.core.devices import (
    Accelerator,
    AcceleratorVendor,
    Allocation,
    Cpu,
    DevicesSpec,
    Partition,
    Placement,
)
from functions.core.ledger import AllocationRefused, CardLedger
from functions.core.modes import PERCENT, SHARE, Claim, D, Mode
from functions.core.quantity import GIB
from functions.core.requests import InstanceTypeFacts, Plan, Refusal, plan
from gpustack_sim.apiserver import ApiServer
from gpustack_sim.client import Client
from gpustack_sim.kueue import Kueue
from gpustack_sim.store import Store
from tests.support.schemas import ROOT

GPUSTACK, NVIDIA, HAMI, DRA = (dialects.DIALECTS[n] for n in ("gpustack", "nvidia", "hami", "dra"))
H100 = "NVIDIA H100 80GB HBM3"
ALL_MODES = frozenset({Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.PARTITIONED})


def facts(product: str = H100, cards: int = 8, manufacturer: str = "nvidia") -> InstanceTypeFacts:
    profiles = mig.profiles_for(product)
    return InstanceTypeFacts(
        name="pool",
        acceleratable=True,
        unit_cpu=12,
        unit_ram=192 * GIB,
        local_storage=100 * GIB,
        accelerator_group="nvidia-card",
        manufacturer=manufacturer,
        card_memory_mib=81559,
        modes=ALL_MODES,
        profiles={p.name: p.memory_mib for p in profiles},
        profile_credits={p.name: mig.units(p, profiles) for p in profiles},
        largest_node_cards=cards,
    )


# --- the encode/decode pair -------------------------------------------------------------------


def claims(mode: Mode) -> st.SearchStrategy[Claim]:
    if mode is Mode.EXCLUSIVE:
        return st.builds(Claim, st.just(mode), st.integers(1, 8))
    if mode is Mode.SHARED:
        return st.builds(Claim, st.just(mode), st.integers(1, 8))
    if mode is Mode.SLICED:
        return st.builds(
            lambda memory, cores: Claim(
                mode, 1, memory_percentage=memory, cores_percentage=cores, units=memory * PERCENT
            ),
            st.integers(1, 100),
            st.integers(1, 99),
        )
    profiles = sorted(dialects.chargeable_profiles().items())
    return st.sampled_from(profiles).map(
        lambda found: Claim(mode, 1, profile=found[0], units=found[1])
    )


@st.composite
def expressed(draw: st.DrawFn) -> tuple[dialects.Dialect, Claim]:
    dialect = draw(st.sampled_from(list(dialects.DIALECTS.values())))
    mode = draw(st.sampled_from(sorted(dialect.modes("nvidia"))))
    claim = draw(claims(mode))
    if dialect is HAMI and mode is Mode.SLICED and claim.memory_percentage == 100:
        claim = Claim(
            mode,
            1,
            memory_percentage=99,
            cores_percentage=claim.cores_percentage,
            units=99 * PERCENT,
        )
    return dialect, claim


@given(expressed())
def test_every_dialect_reads_back_what_it_writes(found):
    dialect, claim = found
    keys = dialect.encode("nvidia", claim)
    request = dialect.device_request("nvidia", claim)
    assert dialect.decode_claim(keys, request) == ("nvidia", claim)
    if request is None:  # a DRA claim's devices are read from its ResourceClaim instead
        assert dialects.decode_any(keys) == ("nvidia", claim)  # as the agent reads a Pod


@pytest.mark.parametrize("dialect", [NVIDIA, HAMI, DRA], ids=lambda d: d.name)
def test_another_manufacturers_cards_are_whole_cards_under_its_own_plugins_name(dialect):
    assert dialect.modes("amd") == {Mode.EXCLUSIVE}
    assert dialect.encode("amd", Claim(Mode.EXCLUSIVE, 2)) == {"amd.com/gpu": "2"}
    assert dialect.decode({"amd.com/gpu": "2"}) == ("amd", Claim(Mode.EXCLUSIVE, 2))


def test_what_each_dialect_expresses():
    assert {name: sorted(d.modes("nvidia")) for name, d in dialects.DIALECTS.items()} == {
        "gpustack": [Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.PARTITIONED],
        "nvidia": [Mode.EXCLUSIVE, Mode.SHARED, Mode.PARTITIONED],
        "hami": [Mode.EXCLUSIVE, Mode.SLICED],
        "dra": [Mode.EXCLUSIVE, Mode.PARTITIONED],
    }


def test_the_nvidia_dialect_prices_a_mig_profile_only_where_its_name_has_one_price():
    prices = dialects.chargeable_profiles()
    assert prices["3g.40gb"] == prices["4g.40gb"] == D // 2  # A100 80GB and H100 alike
    assert prices["1g.5gb"] == D // 8 and prices["1g.6gb"] == D // 4  # one model each
    assert "1g.10gb" not in prices  # an eighth of an 80 GB card, a quarter of an A100 40GB
    assert not NVIDIA.charges("1g.10gb", D // 8) and NVIDIA.charges("3g.40gb", D // 2)


# --- Kueue charges exactly what the credit rule says, under each dialect's configuration -----


def pod_of(planned: Plan) -> dict:
    resources = {"requests": planned.requests, "limits": planned.limits}
    return {"spec": {"containers": [{"name": "main", "resources": resources}]}}


@dataclass(frozen=True)
class Shape:
    name: str
    resources: dict
    credits: int


SHAPES = [
    Shape("a whole card", {"accelerator": "1"}, D),
    Shape("three whole cards", {"accelerator": "3"}, 3 * D),
    Shape("two shares", {"acceleratorShared": 2}, 2 * SHARE),
    Shape("a 20 % slice", {"acceleratorSlicedMemoryPercentage": 20}, 20 * PERCENT),
    Shape(
        "a 7 % slice, 30 % cores",
        {"acceleratorSlicedMemoryPercentage": 7, "acceleratorSlicedCoresPercentage": 30},
        7 * PERCENT,
    ),
] + [
    Shape(
        f"a {profile}",
        {"acceleratorPartitionedProfile": profile},
        mig.units(p, mig.profiles_for(H100)),
    )
    for p in mig.profiles_for(H100)
    for profile in [p.name]
]


def kueue_for(name: str) -> Kueue:
    return Kueue(Client(ApiServer(Store())), ROOT / "compositions" / "kueue" / f"{name}.yaml")


@pytest.mark.parametrize("dialect", list(dialects.DIALECTS.values()), ids=lambda d: d.name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_the_shipped_configuration_charges_every_offered_shape_its_credits(dialect, shape):
    planned = plan(shape.resources, facts(), dialect=dialect)
    if isinstance(planned, list):
        mode = planned[0]
        assert "devicePlugin" in mode.message or "offer" in mode.message, mode
        return  # the dialect does not offer the shape: refused, nothing to charge
    assert isinstance(planned, Plan)
    assert planned.credits == shape.credits
    counted = kueue_for(dialect.name).requests(pod_of(planned))
    assert counted.get("credits.gpustack.ai/nvidia") == shape.credits
    # Only the credits reach the quota among the accelerator keys.
    assert not {k for k in counted if k.startswith("nvidia.com/")}


def test_every_dialect_offers_at_least_whole_cards_and_charges_them():
    for dialect in dialects.DIALECTS.values():
        assert isinstance(plan({"accelerator": "2"}, facts(), dialect=dialect), Plan)


# --- refusals name the setting ---------------------------------------------------------------


def refusal(resources: dict, dialect: dialects.Dialect, **changes) -> Refusal:
    found = plan(resources, facts(**changes), dialect=dialect)
    assert isinstance(found, list), found
    return found[0]


def test_a_slice_under_nvidia_is_refused_naming_the_setting_and_the_plugins_that_can():
    found = refusal({"acceleratorSlicedMemoryPercentage": 20}, NVIDIA)
    assert found.field == "spec.resources.acceleratorSlicedMemoryPercentage"
    assert found.message == (
        "devicePlugin: nvidia (the NVIDIA GPU Operator's device plugin) cannot give a memory "
        "slice of a card of instance type pool; the cluster's device plugin must be gpustack "
        "or hami (the Catalog's spec.devicePlugin) for this request"
    )


def test_hami_refuses_a_slice_asking_all_the_cores():
    found = refusal(
        {"acceleratorSlicedMemoryPercentage": 20, "acceleratorSlicedCoresPercentage": 100}, HAMI
    )
    assert found.field == "spec.resources.acceleratorSlicedCoresPercentage"
    assert "HAMi gives a slice with 100 % of the cores the whole card" in found.message


def test_shares_are_bounded_by_distinct_cards_or_by_replicas():
    one_card = {"cards": 1}
    assert isinstance(plan({"acceleratorShared": 10}, facts(**one_card), dialect=NVIDIA), Plan)
    assert refusal({"acceleratorShared": 11}, NVIDIA, **one_card).message == (
        "a shared request of 11 time-slicing replicas exceeds the 10 of the largest node of "
        "instance type pool"
    )
    assert "distinct cards" in refusal({"acceleratorShared": 2}, GPUSTACK, **one_card).message


# --- device IDs and HAMi's annotation --------------------------------------------------------


def test_device_ids_name_their_cards():
    assert dialects.card_of("GPU-a::3") == "GPU-a"
    assert dialects.card_of("GPU-a") == "GPU-a"
    assert dialects.hami_cards(
        "GPU-a,NVIDIA,4606,20:;;GPU-b,NVIDIA,100,100:GPU-c,NVIDIA,100,100:;"
    ) == [
        [("GPU-a", 4606, 20)],
        [],
        [("GPU-b", 100, 100), ("GPU-c", 100, 100)],
    ]


CARDS = [
    {
        "manufacturer": "nvidia",
        "devices": [
            {"uuid": "GPU-a"},
            {"uuid": "GPU-b"},
            {
                "uuid": "GPU-m",
                "mig": {
                    "partitions": [
                        {
                            "profile": "3g.40gb",
                            "placement": {"start": 4, "size": 4},
                            "uuid": "MIG-1",
                        }
                    ]
                },
            },
        ],
    }
]


def pod(
    limits: dict, annotations: dict | None = None, containers: tuple[str, ...] = ("main",)
) -> dict:
    return {
        "metadata": {"uid": "u", "annotations": annotations or {}},
        "spec": {"containers": [{"name": c, "resources": {"limits": limits}} for c in containers]},
        "status": {"phase": "Running"},
    }


def test_the_agent_reads_two_replicas_of_one_card_as_two_shares():
    assigned = [
        ContainerDevices("default/p", "main", "nvidia.com/gpu.shared", ("GPU-a::0", "GPU-a::7"))
    ]
    rows = allocations(assigned, {"default/p": pod({"nvidia.com/gpu.shared": "2"})}, CARDS)
    assert [(r["device"], r["mode"]) for r in rows] == [("GPU-a", "Shared")] * 2


def test_the_agent_resolves_a_mig_device_of_the_nvidia_plugin():
    assigned = [ContainerDevices("default/p", "main", "nvidia.com/mig-3g.40gb", ("MIG-1",))]
    rows = allocations(assigned, {"default/p": pod({"nvidia.com/mig-3g.40gb": "1"})}, CARDS)
    assert rows == [
        {
            "pod": "default/p",
            "container": "main",
            "podUID": "u",
            "device": "GPU-m",
            "mode": "Partitioned",
            "profile": "3g.40gb",
            "placement": {"start": 4, "size": 4},
        }
    ]


def test_the_agent_takes_hamis_cards_from_the_pod_not_the_kubelets_ids():
    limits = {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem-percentage": "20",
        "nvidia.com/gpucores": "20",
    }
    chosen = {"hami.io/vgpu-devices-allocated": ";GPU-b,NVIDIA,4606,20:;"}
    assigned = [ContainerDevices("default/p", "main", "nvidia.com/gpu", ("GPU-a-0",))]
    the_pod = pod(limits, chosen, containers=("sidecar", "main"))
    rows = allocations(assigned, {"default/p": the_pod}, CARDS)
    assert [
        (r["device"], r["mode"], r["memoryPercentage"], r["coresPercentage"]) for r in rows
    ] == [("GPU-b", "Sliced", 20, 20)]


# --- MIG devices made ahead of time ----------------------------------------------------------


def test_a_card_with_fixed_partitions_offers_only_its_free_existing_instances():
    card = Accelerator(
        uuid="GPU-m",
        index=0,
        product=H100,
        memory_mib=81559,
        mig_enabled=True,
        profiles=mig.profiles_for(H100),
        partitions=(Partition("3g.40gb", Placement(0, 4)), Partition("1g.10gb", Placement(4, 1))),
    )
    made_on_demand = CardLedger.for_card(card, "nvidia")
    fixed = CardLedger.for_card(card, "nvidia", fixed_partitions=True)
    assert made_on_demand.remaining_profiles()["3g.40gb"] == 2  # both legal placements
    assert fixed.remaining_profiles() == {
        "1g.10gb": 1,
        "1g.20gb": 0,
        "2g.20gb": 0,
        "3g.40gb": 1,
        "4g.40gb": 0,
        "7g.80gb": 0,
    }
    taken = fixed.allocate(Allocation("p", "main", "GPU-m", Mode.PARTITIONED, profile="3g.40gb"))
    assert taken.remaining_profiles()["3g.40gb"] == 0 and taken.remaining == D - D // 2
    with pytest.raises(AllocationRefused, match=r"no free placement of 3g\.40gb"):
        taken.allocate(Allocation("q", "main", "GPU-m", Mode.PARTITIONED, profile="3g.40gb"))
    with pytest.raises(AllocationRefused, match=r"has no 3g\.40gb at"):
        fixed.allocate(
            Allocation(
                "q", "main", "GPU-m", Mode.PARTITIONED, profile="3g.40gb", placement=Placement(4, 4)
            )
        )


def test_a_mig_profile_kueue_cannot_price_by_name_is_refused_under_nvidia():
    found = refusal({"acceleratorPartitionedProfile": "1g.10gb"}, NVIDIA)
    assert found.field == "spec.resources.acceleratorPartitionedProfile"
    assert "cannot charge it exactly; ask for another profile" in found.message
    assert isinstance(plan({"acceleratorPartitionedProfile": "1g.10gb"}, facts()), Plan)


def node_with(cards_in_mig_mode: int, whole: int = 8) -> DevicesSpec:
    cards = tuple(
        Accelerator(f"GPU-{i}", i, H100, 81559, mig_enabled=i < cards_in_mig_mode)
        for i in range(whole)
    )
    return DevicesSpec(
        "node", "linux", "amd64", Cpu(), (AcceleratorVendor("nvidia", devices=cards),)
    )


GFD = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


@pytest.mark.parametrize(
    ("dialect", "in_mig", "labels", "left_out"),
    [
        (NVIDIA, 2, GFD, "none"),
        (NVIDIA, 8, {**GFD, "nvidia.com/mig.strategy": "single"}, "single"),
        (NVIDIA, 2, {**GFD, "nvidia.com/mig.strategy": "mixed"}, ""),
        (NVIDIA, 0, {**GFD, "nvidia.com/mig.strategy": "single"}, ""),
        (NVIDIA, 2, {}, ""),
        (GPUSTACK, 2, {**GFD, "nvidia.com/mig.strategy": "single"}, ""),
        (HAMI, 2, GFD, ""),
    ],
    ids=[
        "nvidia, no strategy label: none",
        "nvidia, single",
        "nvidia, mixed",
        "nvidia, no card in MIG mode",
        "nvidia, GPU feature discovery not running: nothing told",
        "gpustack's plugin makes its own partitions",
        "hami",
    ],
)
def test_a_node_with_cards_in_mig_mode_needs_the_gpu_operators_mixed_strategy(
    dialect, in_mig, labels, left_out
):
    why = dialect.left_out(node_with(in_mig), labels)
    if not left_out:
        assert why == ""
        return
    told = (
        f"GPU feature discovery's label nvidia.com/mig.strategy={left_out}"
        if "nvidia.com/mig.strategy" in labels
        else "GPU feature discovery sets no nvidia.com/mig.strategy label"
    )
    given = "its MIG devices" if left_out == "single" else "a card in MIG mode"
    assert why == (
        f"{in_mig} card(s) in MIG mode, and the NVIDIA GPU Operator's device plugin runs MIG "
        f"strategy {left_out} here ({told}), which advertises {given} as nvidia.com/gpu: a "
        "whole-card Instance could be given one; set mig.strategy: mixed in the GPU "
        "Operator's ClusterPolicy (docs/device-plugins.md)"
    )


def test_under_dra_kube_scheduler_ignores_the_credits_the_pod_carries():
    """The Pod's price is a resource no node advertises: the shipped scheduler configuration
    must name its group, or every Pod waits `Insufficient credits.gpustack.ai/nvidia`."""
    shipped = yaml.safe_load((ROOT / "compositions" / "kube-scheduler" / "dra.yaml").read_text())
    (profile,) = shipped["profiles"]
    (fit,) = [c for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit"]
    price = next(iter(DRA.encode("nvidia", Claim(Mode.EXCLUSIVE, 1))))
    assert fit["args"]["ignoredResourceGroups"] == [price.split("/")[0]]
