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
from functions.core.requests import RESOURCE_NAMES

TERMINATED = ("Succeeded", "Failed")


def _base_of(resource: str) -> str | None:
    for base in RESOURCE_NAMES.values():
        if resource == base or resource.startswith(base + "."):
            return base
    return None


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
        base = _base_of(entry.resource)
        if base is None:
            continue  # not an accelerator family (the SSH sidecar's visibility token, CPUs, ...)
        pod = pods.get(entry.pod)
        phase = ((pod or {}).get("status") or {}).get("phase", "")
        limits = _limits(pod, entry.container)
        for device_id in entry.device_ids:
            device = device_id.split("::", 1)[0]  # time-sliced replicas: GPU-…::3
            row: dict[str, Any] = {"pod": entry.pod, "container": entry.container}
            uid = ((pod or {}).get("metadata") or {}).get("uid")
            if uid:
                row["podUID"] = uid
            if device in partitions:
                parent, partition = partitions[device]
                row |= {"device": parent, "mode": "Partitioned", "profile": partition["profile"]}
                row["placement"] = dict(partition["placement"])
            elif phase in TERMINATED:
                continue  # whole, shared and sliced cards are released with the Pod's end
            else:
                row |= {"device": device, **_size(entry.resource, base, limits)}
            rows[(row["pod"], row["container"], row["device"], row["mode"])] = row
    return [rows[key] for key in sorted(rows)]


def _size(resource: str, base: str, limits: Mapping[str, Any]) -> dict[str, Any]:
    suffix = resource[len(base) :]
    if suffix.startswith(".sliced"):
        size: dict[str, Any] = {"mode": "Sliced"}
        percent = limits.get(f"{base}.sliced.memory-percentage")
        mib = limits.get(f"{base}.sliced.memory-mib")
        if percent is not None:
            size["memoryPercentage"] = int(percent)
        elif mib is not None:
            size["memoryMiB"] = int(mib)
        size["coresPercentage"] = int(limits.get(f"{base}.sliced.cores-percentage", 100))
        return size
    if suffix.startswith(".shared"):
        return {"mode": "Shared"}
    return {"mode": "Exclusive"}
