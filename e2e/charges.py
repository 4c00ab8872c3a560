"""Kueue's charge against the ledger: what the real Kueue charged each admitted Workload, in
`credits.gpustack.ai/<manufacturer>`, beside what the node agents report its Pod holds, priced by
the core's credit rule. The two are reached apart — Kueue from the Pod's keys (through the shipped
transformations) or, under dra, the price the Pod states; the ledger from the devices the
kubelet or the scheduler really gave — so a Pod written one way and given another shows here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from e2e.api import Api
from functions.core import mig
from functions.core.modes import Claim, Mode
from functions.core.quantity import count
from functions.core.resources import credits_resource

CREDITS_PREFIX = credits_resource("")  # `credits.gpustack.ai/`


def disagreements(api: Api) -> list[str]:
    """Each Pod whose Workload Kueue charged other credits than its allocations cost."""
    return [line for line in compared(api) if "differ" in line]


def compared(api: Api) -> list[str]:
    """What Kueue charged each admitted Pod the agents report, and whether its allocations
    cost the same (a Pod no agent reports yet is not judged)."""
    held = _held(api.list("Devices"))
    found = []
    for workload in api.list("Workload"):
        pod = _pod_of(workload)
        charged = _charged(workload)
        if pod is None or not charged or pod not in held:
            continue
        verdict = "as" if charged == held[pod] else "differ: its allocations cost"
        found.append(f"{pod}: Kueue charged {charged}, {verdict} {held[pod]}")
    return sorted(found)


def _pod_of(workload: Mapping[str, Any]) -> str | None:
    """`namespace/name` of the Pod a pod-integration Workload stands for."""
    metadata = workload.get("metadata") or {}
    owners = [o for o in metadata.get("ownerReferences") or [] if o.get("kind") == "Pod"]
    return f"{metadata.get('namespace')}/{owners[0]['name']}" if owners else None


def _charged(workload: Mapping[str, Any]) -> int:
    admission = (workload.get("status") or {}).get("admission") or {}
    return sum(
        count(amount)
        for assignment in admission.get("podSetAssignments") or []
        for resource, amount in (assignment.get("resourceUsage") or {}).items()
        if resource.startswith(CREDITS_PREFIX)
    )


def _held(devices: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """What each Pod's allocations cost, over every node's Devices."""
    held: dict[str, int] = {}
    for found in devices:
        spec = found.get("spec") or {}
        cards = {
            card["uuid"]: card
            for vendor in spec.get("accelerators") or []
            for card in vendor.get("devices") or []
        }
        for row in spec.get("allocations") or []:
            card = cards.get(row.get("device", ""), {})
            held[row["pod"]] = held.get(row["pod"], 0) + price(row, card)
    return held


def price(row: Mapping[str, Any], card: Mapping[str, Any]) -> int:
    """One allocation row's credits by the core's rule (`Claim.credits`), on the card it names:
    a row is one card, or one share, slice or partition of it."""
    profiles = mig.profiles_for(card.get("product", ""))
    profile = next((p for p in profiles if p.name == row.get("profile")), None)
    claim = Claim(
        Mode.named(row.get("mode", "")),
        1,
        memory_percentage=int(row.get("memoryPercentage") or 0),
        memory_mib=int(row.get("memoryMiB") or 0),
        profile=row.get("profile", ""),
    )
    partition = mig.units(profile, profiles) if profile is not None else 0
    return claim.sized(int(card.get("memoryMiB") or 0), partition).credits
