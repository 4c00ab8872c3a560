"""The per-card ledger: modes, credits and the invariants no allocation sequence may break."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.core import mig
from functions.core.devices import Accelerator, Allocation, Placement
from functions.core.ledger import AllocationRefused, CardLedger, summarize
from functions.core.modes import (
    SHARE,
    D,
    Mode,
    partition_units,
    slice_units_by_mib,
    slice_units_by_percent,
)
from functions.core.pools import accelerator_views

A10G = Accelerator(uuid="GPU-a10g", index=0, product="NVIDIA A10G", memory_mib=24576)
H100_MIG = Accelerator(
    uuid="GPU-h100",
    index=0,
    product="NVIDIA H100 80GB HBM3",
    memory_mib=81920,
    mig_enabled=True,
    profiles=mig.profiles_for("NVIDIA H100 80GB HBM3"),
)


EXCLUSIVE, SHARED, SLICED, PARTITIONED = (
    Mode.EXCLUSIVE,
    Mode.SHARED,
    Mode.SLICED,
    Mode.PARTITIONED,
)


def alloc(mode: Mode, **size) -> Allocation:
    return Allocation(pod="default/p", container="main", device="GPU", mode=mode, **size)


def test_credit_vectors():
    assert D == 1_600_000 and SHARE == 160_000
    assert slice_units_by_percent(20) == 320_000
    assert slice_units_by_mib(12288, 24576) == 800_000
    assert slice_units_by_mib(4096, 24576) == 266_666
    assert partition_units(4, 8) == 800_000  # 3g.40gb: 4 of 8 memory slices, as 40960 of 81920 MiB
    h100 = mig.profiles_for("NVIDIA H100 80GB HBM3")
    assert {p.name: mig.units(p, h100) for p in h100} == {
        "1g.10gb": 200_000,
        "1g.20gb": 400_000,
        "2g.20gb": 400_000,
        "3g.40gb": 800_000,
        "4g.40gb": 800_000,
        "7g.80gb": 1_600_000,
    }
    a30 = mig.profiles_for("NVIDIA A30")
    assert [mig.units(p, a30) for p in a30] == [400_000, 800_000, 1_600_000]


def test_a_fresh_card_is_free_and_whole():
    card = CardLedger.for_card(A10G, "nvidia")
    assert (card.mode, card.remaining, card.slice_slots) == (Mode.NONE, D, 128)


def test_exclusive_takes_the_whole_card_and_blocks_every_other_mode():
    card = CardLedger.for_card(A10G, "nvidia").allocate(alloc(EXCLUSIVE))
    assert (card.mode, card.remaining) == (Mode.EXCLUSIVE, 0)
    for mode, size in ((EXCLUSIVE, {}), (SHARED, {}), (SLICED, {"memory_percentage": 1})):
        with pytest.raises(AllocationRefused):
            card.allocate(alloc(mode, **size))


def test_shares_charge_a_tenth_each_up_to_ten_holders():
    card = CardLedger.for_card(A10G, "nvidia")
    for _ in range(10):
        card = card.allocate(alloc(SHARED))
    assert (card.mode, card.remaining, card.free_shares()) == (Mode.SHARED, 0, 0)
    with pytest.raises(AllocationRefused, match="no free share"):
        card.allocate(alloc(SHARED))


def test_slices_by_percent_and_by_mib_share_one_budget():
    card = CardLedger.for_card(A10G, "nvidia").allocate(alloc(SLICED, memory_percentage=20))
    card = card.allocate(alloc(SLICED, memory_mib=12288))
    assert card.remaining == D - 320_000 - 800_000
    assert card.allocated_slices == 2
    assert card.slice_percent() == 30
    with pytest.raises(AllocationRefused, match="credits left"):
        card.allocate(alloc(SLICED, memory_percentage=31))


def test_a_mig_card_serves_only_partitions():
    card = CardLedger.for_card(H100_MIG, "nvidia")
    with pytest.raises(AllocationRefused, match="serves only partitions"):
        card.allocate(alloc(EXCLUSIVE))
    card = card.allocate(alloc(PARTITIONED, profile="3g.40gb", placement=Placement(4, 4)))
    assert card.remaining == D - 800_000
    assert card.remaining_profiles()["3g.40gb"] == 1


def test_unhealthy_cards_take_nothing_and_offer_nothing():
    sick = CardLedger.for_card(
        Accelerator("GPU-x", 0, "NVIDIA A10G", 24576, healthy=False), "nvidia"
    )
    with pytest.raises(AllocationRefused, match="unhealthy"):
        sick.allocate(alloc(SHARED))
    summary = summarize([sick])
    assert (summary.cards, summary.free_cards, summary.free_shares, summary.free_slice_percent) == (
        1,
        0,
        0,
        0,
    )


requests = st.one_of(
    st.builds(lambda: alloc(EXCLUSIVE)),
    st.builds(lambda: alloc(SHARED)),
    st.builds(lambda pct: alloc(SLICED, memory_percentage=pct), st.integers(-5, 120)),
    st.builds(lambda mib: alloc(SLICED, memory_mib=mib), st.integers(0, 30000)),
    st.builds(
        lambda profile, start: alloc(PARTITIONED, profile=profile, placement=Placement(start, 1)),
        st.sampled_from(["1g.10gb", "3g.40gb", "7g.80gb", "9g.90gb"]),
        st.integers(0, 8),
    ),
    st.builds(
        lambda profile: alloc(PARTITIONED, profile=profile),
        st.sampled_from(["1g.10gb", "2g.20gb", "4g.40gb"]),
    ),
)


@settings(max_examples=300, deadline=None)
@given(card=st.sampled_from([A10G, H100_MIG]), sequence=st.lists(requests, max_size=40))
def test_no_allocation_sequence_breaks_the_ledger(card, sequence):
    ledger = CardLedger.for_card(card, "nvidia")
    for request in sequence:
        with contextlib.suppress(AllocationRefused):
            ledger = ledger.allocate(request)
        assert 0 <= ledger.remaining <= D
        if ledger.mode is Mode.NONE:
            assert ledger.remaining == D and ledger.holders == 0
        if ledger.partitioned:
            occupied = [p for _, p in ledger.occupied]
            assert all(not a.overlaps(b) for i, a in enumerate(occupied) for b in occupied[i + 1 :])
            assert all(
                0 <= count <= mig.capacity(ledger.profiles)
                for count in ledger.remaining_profiles().values()
            )
        views = accelerator_views([summarize([ledger])])
        for view in views.views.values():
            assert 0 <= view.remaining <= view.capacity
            assert 0 <= view.once_max <= view.remaining
