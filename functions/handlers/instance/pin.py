"""Steering Kueue to the pinned node's flavor, and to nodes large enough for a multi-card claim.

Kueue picks a flavor by quota, judging a Pod's node selector and required node affinity only on
the flavor's own label keys (Kueue's flavor assigner): the `kubernetes.io/hostname` pin means
nothing to it, so a pin into a pool of several node shapes could be charged to another shape's
flavor and then stay Pending (seed 000 §6 warns of exactly this). So a pinned Pod also carries,
for every other flavor of its pool, one expression on a key of that flavor which the pinned node
does not match: Kueue then rules those flavors out, and the scheduler, on the pinned node, finds
every expression true.

A claim of N ≥ 2 whole cards, or of a share on N ≥ 2 distinct cards, carries
`<aKey>.count Gt N−1` (what the reference's Pod webhook adds for shares): a flavor's count label
is one of its keys, so Kueue never charges it to a flavor whose nodes are too small.
"""

from __future__ import annotations

from collections.abc import Mapping

from functions.core import labels
from functions.core.modes import MODES, Claim
from functions.views import View

Expression = dict[str, object]


def flavor_expressions(node_labels: Mapping[str, str], flavors: list[View]) -> list[Expression]:
    """One expression per flavor the pinned node is not in, on a key where they differ."""
    found: list[Expression] = []
    for flavor in flavors:
        wanted = {k: v for k, v in flavor.view("spec", "nodeLabels").items() if isinstance(v, str)}
        differing = sorted(k for k, v in wanted.items() if node_labels.get(k) != v)
        if not differing:
            continue  # the pinned node's own flavor
        key = differing[0]
        if key in node_labels:
            found.append({"key": key, "operator": "NotIn", "values": [wanted[key]]})
        else:
            found.append({"key": key, "operator": "DoesNotExist"})
    return found


def card_count_expressions(claim: Claim, accelerator_key: str) -> list[Expression]:
    spec = MODES.get(claim.mode)  # a mode that counts cards, not one that lives on one card
    if spec is None or spec.one_card or claim.cards < 2 or not accelerator_key:
        return []
    key = f"{labels.accelerator_key_label(accelerator_key)}.count"
    return [{"key": key, "operator": "Gt", "values": [str(claim.cards - 1)]}]
