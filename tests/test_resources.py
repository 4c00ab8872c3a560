"""Accelerator resource keys: every claim encodes to the keys a Pod carries, and reads back."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.core import resources
from functions.core.modes import Claim, Mode


@dataclass(frozen=True)
class Case:
    name: str
    manufacturer: str
    claim: Claim
    keys: dict[str, str]


CASES = [
    Case("a whole A10G", "nvidia", Claim(Mode.EXCLUSIVE, 1), {"nvidia.com/gpu": "1"}),
    Case("two Ascend NPUs", "ascend", Claim(Mode.EXCLUSIVE, 2), {"huawei.com/npu": "2"}),
    Case(
        "one share on each of two cards",
        "nvidia",
        Claim(Mode.SHARED, 2),
        {"nvidia.com/gpu.shared": "2"},
    ),
    Case(
        "the sliced demo's 20 %, with the units the Pod webhook would add",
        "nvidia",
        Claim(Mode.SLICED, 1, memory_percentage=20, cores_percentage=100, units=320_000),
        {
            "nvidia.com/gpu.sliced": "1",
            "nvidia.com/gpu.sliced.memory-percentage": "20",
            "nvidia.com/gpu.sliced.cores-percentage": "100",
            "nvidia.com/gpu.sliced.units": "320k",
        },
    ),
    Case(
        "a slice of 4096 MiB of a 24 GiB card",
        "nvidia",
        Claim(Mode.SLICED, 1, memory_mib=4096, cores_percentage=50, units=266_666),
        {
            "nvidia.com/gpu.sliced": "1",
            "nvidia.com/gpu.sliced.memory-mib": "4096",
            "nvidia.com/gpu.sliced.cores-percentage": "50",
            "nvidia.com/gpu.sliced.units": "266666",
        },
    ),
    Case(
        "a 3g.40gb partition of an H100",
        "nvidia",
        Claim(Mode.PARTITIONED, 1, profile="3g.40gb", units=800_000),
        {
            "nvidia.com/gpu.partitioned": "1",
            "nvidia.com/gpu.partitioned.mig-3g.40gb": "1",
            "nvidia.com/gpu.partitioned.units": "800k",
        },
    ),
    Case(
        "a manufacturer without a known base",
        "acme",
        Claim(Mode.EXCLUSIVE, 1),
        {"acme.com/gpu": "1"},
    ),
    Case("no card at all", "nvidia", Claim(), {}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_claim_encodes_to_the_keys_a_pod_carries_and_back(case):
    assert resources.encode(case.manufacturer, case.claim) == case.keys
    decoded = resources.decode(case.keys)
    if case.claim.mode is Mode.NONE:
        assert decoded is None
    else:
        assert decoded == (case.manufacturer, case.claim)


def test_decoding_reads_quantities_as_the_api_server_normalises_them():
    keys = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "320000"}
    assert resources.decode(keys) == (
        "nvidia",
        Claim(Mode.SLICED, 1, cores_percentage=100, units=320_000),
    )


def test_other_resources_and_the_sidecars_visibility_token_are_not_accelerators():
    keys = {"cpu": "8", "memory": "64Gi", resources.visibility_key("nvidia"): "1"}
    assert resources.decode(keys) is None
    assert resources.split("metax-tech.com/gpu.shared") == ("metax", ".shared")
    assert resources.split("example.com/fpga") is None


MANUFACTURERS = st.sampled_from([*resources.BASES, "acme", "new-vendor"])
PROFILES = st.sampled_from(["1g.10gb", "3g.40gb", "7g.80gb", "2g.20gb+me"])
COUNTS = st.integers(1, 16)
UNITS = st.integers(1, 1_600_000)
CLAIMS = st.one_of(
    st.builds(lambda n: Claim(Mode.EXCLUSIVE, n), COUNTS),
    st.builds(lambda n: Claim(Mode.SHARED, n), st.integers(1, 10)),
    st.builds(
        lambda pct, cores, units: Claim(
            Mode.SLICED, 1, memory_percentage=pct, cores_percentage=cores, units=units
        ),
        st.integers(1, 100),
        st.integers(1, 100),
        UNITS,
    ),
    st.builds(
        lambda mib, cores, units: Claim(
            Mode.SLICED, 1, memory_mib=mib, cores_percentage=cores, units=units
        ),
        st.integers(1, 200_000),
        st.integers(1, 100),
        UNITS,
    ),
    st.builds(lambda p, units: Claim(Mode.PARTITIONED, 1, profile=p, units=units), PROFILES, UNITS),
)


@given(manufacturer=MANUFACTURERS, claim=CLAIMS)
def test_decode_inverts_encode_for_every_claim(manufacturer, claim):
    assert resources.decode(resources.encode(manufacturer, claim)) == (manufacturer, claim)
