"""What the node really handed out: the kubelet's device assignments joined with the Pods.

The kubelet says which device ids each container holds; the Pod says how much of each card it
asked for (a slice's percentages, a share, a whole card), in whichever device plugin's dialect
wrote it (core/dialects.py). A MIG device id resolves to its parent card and placement, a
time-slicing replica (`GPU-…::3`) to its card. HAMi's ids name no card at all: its scheduler
writes the cards it chose on the Pod (`hami.io/vgpu-devices-allocated`), and those are read
instead. An id the agent cannot resolve is still reported, so the ledger flags it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from functions.agent.podresources import ContainerDevices
from functions.core import dialects
from functions.core.modes import NO_CLAIM, Claim, Mode

TERMINATED = ("Succeeded", "Failed")


def claim_of(resource: str, count: int, limits: Mapping[str, Any]) -> Claim:
    """What the container was given `resource` for: the claim its Pod's keys encode, when they
    agree with the resource the kubelet names; else what the resource name alone says."""
    named = dialects.decode_any({resource: str(count)})
    full = dialects.decode_any(limits)
    if named is None:
        return NO_CLAIM
    if full is not None and (full[1].mode is named[1].mode or dialects.is_vgpu(resource, limits)):
        return full[1]
    return named[1]


def _limits(pod: Mapping[str, Any] | None, container: str) -> Mapping[str, Any]:
    for spec in ((pod or {}).get("spec") or {}).get("containers") or []:
        if spec.get("name") == container:
            return (spec.get("resources") or {}).get("limits") or {}
    return {}


def allocations(
    assigned: Iterable[ContainerDevices],
    pods: Mapping[str, Mapping[str, Any]],
    accelerators: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """Allocation rows for `Devices.spec.allocations`, in a stable order."""
    partitions = {
        p["uuid"]: (d["uuid"], p)
        for vendor in accelerators
        for d in vendor.get("devices") or []
        for p in (d.get("mig") or {}).get("partitions") or []
        if p.get("uuid")
    }
    rows: dict[tuple, dict[str, Any]] = {}
    for entry in assigned:
        pod = pods.get(entry.pod)
        phase = ((pod or {}).get("status") or {}).get("phase", "")
        claim = claim_of(entry.resource, len(entry.device_ids), _limits(pod, entry.container))
        if claim.mode is Mode.NONE:
            continue  # a counter (`.units`), another resource, or no accelerator at all
        uid = ((pod or {}).get("metadata") or {}).get("uid")
        for device_id in _device_ids(entry, pod):
            row: dict[str, Any] = {"pod": entry.pod, "container": entry.container}
            if uid:
                row["podUID"] = uid
            if device_id in partitions:
                parent, partition = partitions[device_id]
                row |= {
                    "device": parent,
                    "mode": Mode.PARTITIONED.title,
                    "profile": partition["profile"],
                }
                row["placement"] = dict(partition["placement"])
            elif phase in TERMINATED:
                continue  # whole, shared and sliced cards are released with the Pod's end
            else:
                row |= {"device": dialects.card_of(device_id), **_size(claim)}
            # Keyed by the id, so two replicas of one card are two shares of it.
            rows[(row["pod"], row["container"], device_id, row["mode"])] = row
    return [rows[key] for key in sorted(rows)]


def _device_ids(entry: ContainerDevices, pod: Mapping[str, Any] | None) -> list[str]:
    """The ids the container's devices are known by: the kubelet's, or for a HAMi vGPU the
    cards HAMi's scheduler wrote on the Pod for this container."""
    annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
    chosen = annotations.get(dialects.HAMI_ALLOCATED)
    if not chosen or entry.resource != dialects.GPU:
        return list(entry.device_ids)
    containers = [c.get("name") for c in ((pod or {}).get("spec") or {}).get("containers") or []]
    per_container = dialects.hami_cards(chosen)
    index = containers.index(entry.container) if entry.container in containers else -1
    if not 0 <= index < len(per_container):
        return list(entry.device_ids)  # reported as the kubelet has them: the ledger flags them
    return [card for card, _, _ in per_container[index]]


def _size(claim: Claim) -> dict[str, Any]:
    """An allocation row's mode and, for a slice, its size."""
    size: dict[str, Any] = {"mode": claim.mode.title}
    if claim.mode is Mode.SLICED:
        if claim.memory_percentage:
            size["memoryPercentage"] = claim.memory_percentage
        elif claim.memory_mib:
            size["memoryMiB"] = claim.memory_mib
        size["coresPercentage"] = claim.cores_percentage
    return size
