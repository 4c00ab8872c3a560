"""The whole-card request bound counts only cards that can take a whole-card request.

A MIG-mode card serves partitions only (reference §4.5): a node with one whole H100 and one in
MIG mode holds at most one whole card, so `accelerator: "2"` there is refused with the bound in
the message instead of being admitted to wait forever.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from functions.core.devices import parse_spec
from functions.core.modes import Mode
from functions.core.pools import PoolKey, pool_views, summarize_devices
from functions.core.requests import InstanceTypeFacts, Plan, Refusal, plan
from tests.test_mig import h100_node

POOL = PoolKey("linux", "amd64", "nvidia-h100-80gb-hbm3")


def two_card_node(mig_cards: int) -> dict:
    """The reference's H100 node cut to two cards, the first `mig_cards` of them in MIG mode."""
    spec = h100_node(mig_cards)
    spec["accelerators"][0]["devices"] = spec["accelerators"][0]["devices"][:2]
    return spec


@dataclass(frozen=True)
class Case:
    name: str
    mig_cards: int
    bound: int
    once_max: str  # the EX column


CASES = [
    Case("two whole cards: the bound is two", 0, 2, "2/2"),
    Case("one whole and one MIG card: only the whole one counts", 1, 1, "1/1"),
    Case("both in MIG mode: no whole-card request fits", 2, 0, "0/0"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_bound_and_once_max_count_whole_capable_cards(case: Case):
    node = summarize_devices(parse_spec("node-h100", two_card_node(case.mig_cards)))
    views = pool_views(POOL, [node])
    assert views.largest_node_cards == case.bound
    assert views.accelerators[Mode.EXCLUSIVE].display == case.once_max


def test_two_whole_cards_on_a_one_whole_one_mig_node_are_refused_not_left_pending():
    node = summarize_devices(parse_spec("node-h100", two_card_node(1)))
    facts = InstanceTypeFacts(
        name=POOL.name,
        acceleratable=True,
        unit_cpu=8,
        unit_ram=64 * 2**30,
        local_storage=100 * 2**30,
        accelerator_group=POOL.a_key or "",
        manufacturer="nvidia",
        card_memory_mib=81559,
        largest_node_cards=pool_views(POOL, [node]).largest_node_cards,
    )
    assert plan({"accelerator": "2"}, facts) == [
        Refusal(
            "spec.resources.accelerator",
            f"exceeds the maximum accelerator request 1 of instance type {POOL.name}",
        )
    ]
    assert isinstance(plan({"accelerator": "1"}, facts), Plan)
