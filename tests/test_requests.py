"""Instance requests: the reference's sizing examples, resource keys, credits and refusals."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.core.modes import Mode
from functions.core.quantity import GIB
from functions.core.requests import InstanceTypeFacts, Plan, Wait, plan

LOGICAL = frozenset({Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED})

A10G = InstanceTypeFacts(
    name="gpustack--nvidia-a10g-linux-amd64",
    acceleratable=True,
    unit_cpu=8,
    unit_ram=64 * GIB,
    local_storage=100 * GIB,
    manufacturer="nvidia",
    card_memory_mib=24576,
    modes=LOGICAL,
    largest_node_cards=1,
)
H100_MIG = InstanceTypeFacts(
    name="gpustack--nvidia-h100-80gb-hbm3-linux-amd64",
    acceleratable=True,
    unit_cpu=12,
    unit_ram=192 * GIB,
    local_storage=100 * GIB,
    manufacturer="nvidia",
    card_memory_mib=81920,
    modes=frozenset({Mode.EXCLUSIVE, Mode.SHARED, Mode.PARTITIONED}),
    profiles={"1g.10gb": 9984, "3g.40gb": 40960, "7g.80gb": 81152},
    profile_credits={"1g.10gb": 200_000, "3g.40gb": 800_000, "7g.80gb": 1_600_000},
    largest_node_cards=8,
)
GENERIC = InstanceTypeFacts(
    name="gpustack--generic-linux-amd64",
    acceleratable=False,
    unit_cpu=1,
    unit_ram=2 * GIB,
    local_storage=100 * GIB,
    largest_node_cores=48,
    cpu_capacity=72,
)


def planned(resources, facts=A10G, overcommit=True) -> Plan:
    result = plan(resources, facts, overcommit)
    assert isinstance(result, Plan), result
    return result


def refused(resources, facts=A10G, overcommit=True) -> list[tuple[str, str]]:
    result = plan(resources, facts, overcommit)
    assert isinstance(result, list), result
    return [(r.field, r.message) for r in result]


def test_whole_a10g_with_overcommit():
    p = planned({"accelerator": "1"})
    assert p.claim.mode is Mode.EXCLUSIVE
    assert p.limits == {
        "cpu": "8",
        "memory": "64Gi",
        "ephemeral-storage": "15Gi",
        "nvidia.com/gpu": "1",
    }
    assert p.requests == {
        "cpu": "800m",
        "memory": "8Gi",
        "ephemeral-storage": "1920Mi",
        "nvidia.com/gpu": "1",
    }
    assert p.credits == 1_600_000


def test_whole_a10g_without_overcommit_keeps_the_tenants_figures():
    p = planned({"accelerator": "1", "cpu": "2", "ram": "8Gi"}, overcommit=False)
    assert (
        p.limits
        == p.requests
        == {
            "cpu": "2",
            "memory": "8Gi",
            "ephemeral-storage": "15Gi",
            "nvidia.com/gpu": "1",
        }
    )


def test_sliced_demo_20_percent():
    p = planned(
        {
            "accelerator": "1",
            "acceleratorSlicedMemoryPercentage": 20,
            "acceleratorSlicedCoresPercentage": 100,
        }
    )
    assert p.claim.mode is Mode.SLICED
    # The keys in their final, admitted form: the units the reference's Pod webhook would add.
    assert p.limits == {
        "cpu": "1",
        "memory": "13743895347",
        "ephemeral-storage": "15Gi",
        "nvidia.com/gpu.sliced": "1",
        "nvidia.com/gpu.sliced.memory-percentage": "20",
        "nvidia.com/gpu.sliced.cores-percentage": "100",
        "nvidia.com/gpu.sliced.units": "320k",
    }
    assert p.credits == 320_000


def test_one_percentage_is_copied_to_the_other():
    p = planned({"acceleratorSlicedMemoryPercentage": 20})
    assert p.limits["nvidia.com/gpu.sliced.cores-percentage"] == "20"
    p = planned({"acceleratorSlicedCoresPercentage": 30})
    assert p.limits["nvidia.com/gpu.sliced.memory-percentage"] == "30"


def test_partition_3g_40gb_on_h100_sizes_host_resources_at_half():
    p = planned({"accelerator": "1", "acceleratorPartitionedProfile": "3g.40gb"}, H100_MIG)
    assert p.limits["cpu"] == "6" and p.limits["memory"] == "96Gi"
    assert p.limits["nvidia.com/gpu.partitioned"] == "1"
    assert p.limits["nvidia.com/gpu.partitioned.mig-3g.40gb"] == "1"
    assert p.limits["nvidia.com/gpu.partitioned.units"] == "800k"
    assert p.credits == 800_000


def test_shared_takes_one_share_on_each_of_n_cards():
    p = planned({"acceleratorShared": 2}, H100_MIG)
    assert p.limits["nvidia.com/gpu.shared"] == "2"
    assert p.credits == 320_000


def test_two_whole_cards_cost_two_cards_of_credits():
    assert planned({"accelerator": 2}, H100_MIG).credits == 3_200_000


def test_a_card_less_instance_on_an_accelerated_type_gets_no_accelerator_key():
    p = planned({"accelerator": "0"})
    assert p.claim.mode is Mode.NONE and p.credits == 0
    assert set(p.limits) == {"cpu", "memory", "ephemeral-storage"}
    assert p.limits["cpu"] == "8"


def test_cpu_only_type():
    p = planned({"cpu": "4"}, GENERIC)
    assert p.limits == {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "15Gi"}
    assert p.requests == {"cpu": "3200m", "memory": "1Gi", "ephemeral-storage": "1920Mi"}
    assert planned({}, GENERIC).limits["cpu"] == "1"


def test_a_request_under_one_core_is_not_raised_by_overcommit():
    assert planned({"cpu": "500m"}, GENERIC).requests["cpu"] == "500m"


@pytest.mark.parametrize(
    ("resources", "facts", "field", "message"),
    [
        (
            {"accelerator": "2"},
            A10G,
            "spec.resources.accelerator",
            "exceeds the maximum accelerator request 1 of instance type gpustack--nvidia-a10g-linux-amd64",
        ),
        (
            {"accelerator": "-1"},
            A10G,
            "spec.resources.accelerator",
            "accelerator request cannot be negative",
        ),
        (
            {"accelerator": "1500m"},
            A10G,
            "spec.resources.accelerator",
            "accelerator request must be a whole number of cards",
        ),
        (
            {"accelerator": "2", "acceleratorSlicedMemoryPercentage": 20},
            A10G,
            "spec.resources.accelerator",
            "accelerator request must be exactly 1 for a sliced request",
        ),
        (
            {"acceleratorSlicedMemoryPercentage": 120},
            A10G,
            "spec.resources.acceleratorSlicedMemoryPercentage",
            "must be between 0 and 100",
        ),
        (
            {"acceleratorSlicedMemoryPercentage": 20},
            H100_MIG,
            "spec.resources.acceleratorSlicedMemoryPercentage",
            "instance type gpustack--nvidia-h100-80gb-hbm3-linux-amd64 does not offer logical slicing",
        ),
        (
            {"acceleratorPartitionedProfile": "3g.40gb", "acceleratorSlicedMemoryPercentage": 50},
            H100_MIG,
            "spec.resources.acceleratorSlicedMemoryPercentage",
            "a hardware partition and a logical slice percentage are mutually exclusive; clear "
            "acceleratorSlicedMemoryPercentage and acceleratorSlicedCoresPercentage",
        ),
        (
            {"acceleratorPartitionedProfile": "2g.20gb"},
            H100_MIG,
            "spec.resources.acceleratorPartitionedProfile",
            "instance type gpustack--nvidia-h100-80gb-hbm3-linux-amd64 does not offer this partition profile; "
            "offered: [1g.10gb 3g.40gb 7g.80gb]",
        ),
        (
            {"acceleratorPartitionedProfile": "3g.40gb"},
            A10G,
            "spec.resources.acceleratorPartitionedProfile",
            "instance type gpustack--nvidia-a10g-linux-amd64 does not offer hardware partitioning",
        ),
        (
            {"acceleratorPartitionedProfile": "3g.40gb", "accelerator": "2"},
            H100_MIG,
            "spec.resources.accelerator",
            "accelerator request must be exactly 1 for a partitioned request",
        ),
        (
            {"accelerator": "1"},
            GENERIC,
            "spec.resources.accelerator",
            "accelerator request must not be specified for non-acceleratable instance type",
        ),
        (
            {"cpu": "64"},
            GENERIC,
            "spec.resources.cpu",
            "exceeds the maximum CPU request 48 of instance type gpustack--generic-linux-amd64",
        ),
        ({"cpu": "-1"}, GENERIC, "spec.resources.cpu", "CPU request cannot be negative"),
        (
            {"localStorage": "200Gi"},
            A10G,
            "spec.resources.localStorage",
            "exceeds the local storage 100Gi of instance type gpustack--nvidia-a10g-linux-amd64",
        ),
        ({"cpu": "8.5"}, A10G, "spec.resources.cpu", None),
        (
            {"accelerator": "lots"},
            A10G,
            "spec.resources.accelerator",
            "'lots' is not a quantity (expected e.g. 8, 500m, 64Gi)",
        ),
    ],
)
def test_refusals_name_the_field(resources, facts, field, message):
    reasons = refused(resources, facts, overcommit=message is not None)
    if message is None:  # without overcommit the tenant's CPU is kept, and capped
        assert reasons == [
            (field, "exceeds the maximum CPU 8 of instance type gpustack--nvidia-a10g-linux-amd64")
        ]
    else:
        assert reasons == [(field, message)]


def test_a_cpu_pool_with_no_nodes_says_so():
    empty = InstanceTypeFacts("gpustack--generic-linux-arm64", False, 1, 2 * GIB, 100 * GIB)
    assert refused({"cpu": "2"}, empty) == [
        (
            "spec.resources.cpu",
            "instance type gpustack--generic-linux-arm64 has no CPU capacity: no managed node currently backs it",
        )
    ]


@pytest.mark.parametrize(
    "resources",
    [{"acceleratorSlicedMemoryPercentage": 20}, {"acceleratorPartitionedProfile": "3g.40gb"}],
)
def test_a_slice_or_partition_on_a_type_whose_detail_is_not_published_waits(resources):
    unready = InstanceTypeFacts("a10g-12c128g", True, 12, 128 * GIB, 200 * GIB)
    assert plan(resources, unready) == Wait(
        "InstanceTypeNotReady", "spec.type: instance type a10g-12c128g is not ready yet; retry"
    )


def test_a_whole_card_is_bounded_first_and_then_waits_for_the_hardware_to_be_published():
    unready = InstanceTypeFacts("a10g-12c128g", True, 12, 128 * GIB, 200 * GIB)
    assert refused({"accelerator": "1"}, unready) == [
        (
            "spec.resources.accelerator",
            "exceeds the maximum accelerator request 0 of instance type a10g-12c128g",
        )
    ]
    bounded = InstanceTypeFacts(
        "a10g-12c128g", True, 12, 128 * GIB, 200 * GIB, largest_node_cards=1
    )
    assert isinstance(plan({"accelerator": "1"}, bounded), Wait)


quantities = st.one_of(
    st.none(),
    st.integers(-3, 20),
    st.sampled_from(["1", "2", "500m", "1500m", "64Gi", "0", "-1", "bogus", "1e3", "200Gi"]),
)
resources = st.fixed_dictionaries(
    {},
    optional={
        "accelerator": quantities,
        "cpu": quantities,
        "ram": quantities,
        "localStorage": quantities,
        "acceleratorShared": st.integers(-2, 12),
        "acceleratorSlicedMemoryPercentage": st.integers(-10, 120),
        "acceleratorSlicedCoresPercentage": st.integers(-10, 120),
        "acceleratorPartitionedProfile": st.sampled_from(
            ["", "3g.40gb", "1g.10gb", "9g.99gb", "bad/name"]
        ),
    },
)


@settings(max_examples=400, deadline=None)
@given(spec=resources, facts=st.sampled_from([A10G, H100_MIG, GENERIC]), overcommit=st.booleans())
def test_every_request_is_either_planned_within_its_bounds_or_refused_by_field(
    spec, facts, overcommit
):
    result = plan(spec, facts, overcommit)
    assert not isinstance(result, Wait)  # every sampled type has published its hardware
    if isinstance(result, list):
        assert result and all(
            r.field.startswith(("spec.resources", "spec.type")) and r.message for r in result
        )
        return
    assert (
        0 <= result.credits <= facts.largest_node_cards * 1_600_000 or facts.largest_node_cards == 0
    )
    assert result.claim.cards <= max(facts.largest_node_cards, 1)
    assert result.cpu > 0 and result.ram >= 0 and 0 < result.local_storage <= facts.local_storage
    for key in result.requests:
        assert result.requests[key] == result.limits[key] or key in (
            "cpu",
            "memory",
            "ephemeral-storage",
        )
