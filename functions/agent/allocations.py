"""What the node really handed out: the kubelet's device assignments joined with the Pods.

The kubelet says which device ids each container holds; the Pod says how much of each card it
asked for (a slice's percentages, a share, a whole card). A MIG device id resolves to its
parent card and placement. An id the agent cannot resolve is still reported, so the ledger
flags it instead of hiding it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from functions.agent.podresources import ContainerDevices
from functions.core import resources
from functions.core.modes import NO_CLAIM, Claim, Mode

TERMINATED = ("Succeeded", "Failed")


def claim_of(resource: str, count: int, limits: Mapping[str, Any]) -> Claim:
    """What the container was given `resource` for: the claim its Pod's keys encode, when they
    agree with the resource the kubelet names; else what the resource name alone says."""
    named = resources.decode({resource: str(count)})
    full = resources.decode(limits)
    if named is None:
        return NO_CLAIM
    if full is not None and full[1].mode is named[1].mode:
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
        if resources.split(entry.resource) is None:
            continue  # not an accelerator family (the SSH sidecar's visibility token, CPUs, ...)
        pod = pods.get(entry.pod)
        phase = ((pod or {}).get("status") or {}).get("phase", "")
        claim = claim_of(entry.resource, len(entry.device_ids), _limits(pod, entry.container))
        if claim.mode is Mode.NONE:
            continue  # a counter resource (`.units`, `.memory-percentage`): no device of its own
        for device_id in entry.device_ids:
            device = device_id.split("::", 1)[0]  # time-sliced replicas: GPU-…::3
            row: dict[str, Any] = {"pod": entry.pod, "container": entry.container}
            uid = ((pod or {}).get("metadata") or {}).get("uid")
            if uid:
                row["podUID"] = uid
            if device in partitions:
                parent, partition = partitions[device]
                row |= {
                    "device": parent,
                    "mode": Mode.PARTITIONED.title,
                    "profile": partition["profile"],
                }
                row["placement"] = dict(partition["placement"])
            elif phase in TERMINATED:
                continue  # whole, shared and sliced cards are released with the Pod's end
            else:
                row |= {"device": device, **_size(claim)}
            rows[(row["pod"], row["container"], row["device"], row["mode"])] = row
    return [rows[key] for key in sorted(rows)]


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
