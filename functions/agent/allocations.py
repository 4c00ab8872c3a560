"""What the node really handed out: the kubelet's device assignments joined with the Pods.

The kubelet says which device ids each container holds; the Pod says how much of each card it
asked for (a slice's percentages, a share, a whole card), in whichever device plugin's dialect
wrote it (core/dialects.py). A MIG device id resolves to its parent card and placement, a
time-slicing replica (`GPU-…::3`) to its card. HAMi's ids name no card at all: its scheduler
writes the cards it chose on the Pod (`hami.io/vgpu-devices-allocated`), and those are read
instead. An id the agent cannot resolve is still reported, so the ledger flags it.

Under Dynamic Resource Allocation (`devicePlugin: dra`) the kubelet hands out nothing by id:
the scheduler writes each ResourceClaim's allocated devices (by their names in the node's
ResourceSlices) and NVIDIA's DRA driver publishes each device's UUID there. The Pod names its
claims, the claim its devices, the slice their UUIDs, and a UUID resolves as a kubelet id does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from functions.agent.podresources import ContainerDevices
from functions.core import dialects
from functions.core.modes import NO_CLAIM, Claim, Mode

TERMINATED = ("Succeeded", "Failed")
# A device DRA allocated is held whole: a card, or a MIG device (which resolves to its partition)
EXCLUSIVE = {"mode": Mode.EXCLUSIVE.title}


@dataclass(frozen=True)
class DraState:
    """What Dynamic Resource Allocation handed out on a node: the ResourceClaims its Pods name,
    and the ResourceSlices published for it (NVIDIA's driver names the node's pool after it)."""

    node: str
    claims: Sequence[Mapping[str, Any]] = ()
    slices: Sequence[Mapping[str, Any]] = ()


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


# What one container was handed: (Pod `namespace/name`, container, device id, its mode and size)
Handed = tuple[str, str, str, Mapping[str, Any]]


def allocations(
    assigned: Iterable[ContainerDevices],
    pods: Mapping[str, Mapping[str, Any]],
    accelerators: Iterable[Mapping[str, Any]],
    dra: DraState | None = None,
) -> list[dict[str, Any]]:
    """Allocation rows for `Devices.spec.allocations`, in a stable order: what the kubelet's
    device plugins handed out, and what DRA allocated."""
    partitions = _partitions(accelerators)
    rows: dict[tuple, dict[str, Any]] = {}
    handed = [*_plugin_handed(assigned, pods), *_dra_handed(pods, dra)]
    for pod_key, container, device_id, size in handed:
        row = _row(pod_key, container, pods.get(pod_key), device_id, size, partitions)
        if row is not None:
            # Keyed by the id, so two replicas of one card are two shares of it.
            rows[(pod_key, container, device_id, row["mode"])] = row
    return [rows[key] for key in sorted(rows)]


def _partitions(accelerators: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, Any]]:
    """Each MIG device of the reading by its UUID: (its card's UUID, the partition)."""
    return {
        p["uuid"]: (d["uuid"], p)
        for vendor in accelerators
        for d in vendor.get("devices") or []
        for p in (d.get("mig") or {}).get("partitions") or []
        if p.get("uuid")
    }


def _row(
    pod_key: str,
    container: str,
    pod: Mapping[str, Any] | None,
    device_id: str,
    size: Mapping[str, Any],
    partitions: Mapping[str, tuple[str, Any]],
) -> dict[str, Any] | None:
    """One container's row for one device id: a MIG device is its card's partition, charged
    while the Pod exists; any other id is its card, released with the Pod's end (None)."""
    row: dict[str, Any] = {"pod": pod_key, "container": container}
    if uid := ((pod or {}).get("metadata") or {}).get("uid"):
        row["podUID"] = uid
    if device_id in partitions:
        parent, partition = partitions[device_id]
        return row | {
            "device": parent,
            "mode": Mode.PARTITIONED.title,
            "profile": partition["profile"],
            "placement": dict(partition["placement"]),
        }
    if ((pod or {}).get("status") or {}).get("phase", "") in TERMINATED:
        return None  # whole, shared and sliced cards are released with the Pod's end
    return row | {"device": dialects.card_of(device_id), **size}


def _plugin_handed(
    assigned: Iterable[ContainerDevices], pods: Mapping[str, Mapping[str, Any]]
) -> Iterator[Handed]:
    """Each id the kubelet handed a container, sized by what its Pod's keys claim."""
    for entry in assigned:
        pod = pods.get(entry.pod)
        claim = claim_of(entry.resource, len(entry.device_ids), _limits(pod, entry.container))
        if claim.mode is Mode.NONE:
            continue  # a counter (`.units`), another resource, or no accelerator at all
        for device_id in _device_ids(entry, pod):
            yield entry.pod, entry.container, device_id, _size(claim)


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


# --- Dynamic Resource Allocation ---------------------------------------------------------------


def pod_claims(pod: Mapping[str, Any]) -> dict[str, str]:
    """The ResourceClaim behind each of the Pod's claim entries, by the entry's name: the one
    kube-controller-manager made from the entry's template (`status.resourceClaimStatuses`), or
    the one the entry names itself. An entry whose claim is not made yet has none."""
    made = ((pod.get("status") or {}).get("resourceClaimStatuses")) or []
    named = (pod.get("spec") or {}).get("resourceClaims") or []
    return {
        entry["name"]: entry["resourceClaimName"]
        for entry in [*made, *named]
        if entry.get("name") and entry.get("resourceClaimName")
    }


def _dra_handed(pods: Mapping[str, Mapping[str, Any]], dra: DraState | None) -> Iterator[Handed]:
    """Each device DRA allocated a Pod on the node, by its UUID (by its name in the slice where
    the slice gives none: the ledger flags it), for each container using the claim. Nothing is
    indexed for a node whose Pods name no claim."""
    if dra is None:
        return
    named = [
        (key, pod, entry, name)
        for key, pod in pods.items()
        for entry, name in pod_claims(pod).items()
    ]
    if not named:
        return
    claims = {(_namespace(c), c["metadata"]["name"]): c for c in dra.claims}
    uuids = _published_uuids(dra)
    for key, pod, entry, name in named:
        for result in _node_results(claims.get((key.partition("/")[0], name)), dra.node):
            device_id = uuids.get(result["device"]) or result["device"]
            for container in _claim_users(pod, entry, result.get("request") or ""):
                yield key, container, device_id, EXCLUSIVE


def _namespace(obj: Mapping[str, Any]) -> str:
    return obj["metadata"].get("namespace") or ""


def _node_results(claim: Mapping[str, Any] | None, node: str) -> list[Mapping[str, Any]]:
    """The devices the scheduler allocated the claim from NVIDIA's driver's pool of this node
    (none while it is unallocated). An admin-access result is a look at a device another claim
    may hold, not a hold of it."""
    allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
    return [
        result
        for result in (allocation.get("devices") or {}).get("results") or []
        if result.get("driver") == dialects.DRA_DRIVER
        and result.get("pool") == node
        and result.get("device")
        and not result.get("adminAccess")
    ]


def _published_uuids(dra: DraState) -> dict[str, str]:
    """Each device of NVIDIA's driver's pool of the node, by name, to the UUID it is published
    with ("" for none). While the driver republishes the pool, slices of two generations are
    there: the newest is the pool."""
    pool = [
        spec
        for spec in ((s.get("spec") or {}) for s in dra.slices)
        if spec.get("driver") == dialects.DRA_DRIVER
        and (spec.get("pool") or {}).get("name") == dra.node
    ]
    newest = max((spec["pool"].get("generation") or 0 for spec in pool), default=0)
    return {
        device["name"]: _string_attribute(device, dialects.DRA_UUID)
        for spec in pool
        if (spec["pool"].get("generation") or 0) == newest
        for device in spec.get("devices") or []
        if device.get("name")
    }


def _string_attribute(device: Mapping[str, Any], name: str) -> str:
    value = ((device.get("attributes") or {}).get(name) or {}).get("string")
    return value if isinstance(value, str) else ""


def _claim_users(pod: Mapping[str, Any], entry: str, request: str) -> list[str]:
    """The containers given a claim's result of `request`: each that names the Pod's claim
    entry, for all its requests or for this one (a subrequest's result is `request/sub`). A
    Pod that holds the claim with no container using it still holds the device: one row with
    no container."""
    spec = pod.get("spec") or {}
    users = [
        container["name"]
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        for use in (container.get("resources") or {}).get("claims") or []
        if use.get("name") == entry
        and (use.get("request") or "") in ("", request.partition("/")[0])
    ]
    return users or [""]
