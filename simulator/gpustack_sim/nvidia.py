"""The NVIDIA GPU Operator's device plugin, as its documentation describes it.

- Whole cards: each healthy card not in MIG mode is one `nvidia.com/gpu` device, ID its UUID.
- Time-slicing: a node labelled `nvidia.com/device-plugin.config: <key>` runs the config under
  that key of the plugin's ConfigMap, an unlabelled node the ClusterPolicy's
  `spec.devicePlugin.config.default` (api/nvidia/v1/clusterpolicy_types.go,
  `DevicePluginConfig`); the ConfigMap is the ClusterPolicy's `spec.devicePlugin.config.name`
  in `gpu-operator` (`time-slicing-config`, the operator docs' name, without a ClusterPolicy).
  `sharing.timeSlicing.resources[{name: nvidia.com/gpu, replicas: r}]` makes each card r
  devices `<UUID>::<i>`, advertised as `nvidia.com/gpu.shared` when `renameByDefault` is true
  (else as more `nvidia.com/gpu`); the node then advertises no whole cards. The plugin prefers
  replicas of the least used cards, but may give one container two replicas of one card —
  unless `failRequestsGreaterThanOne` is true: then Allocate fails a container asking more than
  one replica ("maximum request size for shared resources is 1; found N", internal/rm/rm.go).
- MIG: the plugin serves the MIG devices the MIG manager made, ID their UUIDs, and makes and
  destroys none, by its MIG strategy: the ClusterPolicy's `spec.mig.strategy`, which the
  operator passes on as `MIG_STRATEGY`, else the plugin's own default `none`
  (controllers/object_controls.go, `applyMIGConfiguration`; the operator's Helm chart sets
  `single`). `mixed`: each MIG device is one `nvidia.com/mig-<profile>` device. `single`:
  each is one `nvidia.com/gpu` device, and a node that mixes MIG and whole cards, has a card
  in MIG mode without a MIG device, or MIG devices of two profiles, fails the plugin's start
  ("invalid MIG configuration", internal/rm/device_map.go): nothing is advertised there.
  `none`: a card in MIG mode is one whole `nvidia.com/gpu` like any other. (Time-slicing of
  MIG devices under `single` is not played.)
- Health: a faulty card is not offered, nor are its MIG devices. The plugin's health check
  (`internal/rm/health.go`, `checkHealth`) marks unhealthy each MIG device whose parent card
  NVML cannot open or watch, and on a critical Xid of the parent the MIG devices on it (every
  one with NVIDIA/k8s-device-plugin#1930; before it, one per resource, issue #1929);
  `ListAndWatch` sends them Unhealthy, and the kubelet counts only healthy devices allocatable.

Nothing here reads the product: names and ID formats are the plugin's own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, NamedTuple

import yaml

from gpustack_sim.client import Client
from gpustack_sim.deviceplugin import Allocate, Card, Grant
from gpustack_sim.gpuoperator import cluster_policy

GPU = "nvidia.com/gpu"
SHARED_SUFFIX = ".shared"
MIG_PREFIX = "nvidia.com/mig-"
CONFIG_LABEL = "nvidia.com/device-plugin.config"
CONFIG_MAP = ("gpu-operator", "time-slicing-config")
REPLICA = "::"
NONE, SINGLE, MIXED = "none", "single", "mixed"  # MIG strategies (api/config/v1/consts.go)


class TimeSlicing(NamedTuple):
    """A node's time-slicing config: the name its cards go by, devices per card, and whether a
    container may take only one replica (`failRequestsGreaterThanOne`)."""

    name: str
    replicas: int
    one_only: bool


class NvidiaPlugin:
    """The GPU Operator's `nvidia-device-plugin` (the `nvidia` dialect)."""

    def __init__(self, api: Client):
        self.api = api

    def advertise(self, node: Mapping[str, Any], cards: list[Card]) -> dict[str, int]:
        found: Counter[str] = Counter()
        name, replicas, _ = self.time_slicing(node)
        strategy = self.mig_strategy()
        if strategy == SINGLE and single_invalid(cards):
            return {}  # the plugin did not start
        for card in (c for c in cards if c.healthy and c.manufacturer == "nvidia"):
            if card.mig and strategy == MIXED:
                found.update(MIG_PREFIX + profile for profile, _, _ in card.partitions)
            elif card.mig and strategy == SINGLE:
                found[GPU] += len(card.partitions)
            else:
                found[name] += replicas
        return dict(found)

    def mig_strategy(self) -> str:
        return mig_strategy(self.cluster_policy())

    def time_slicing(self, node: Mapping[str, Any]) -> TimeSlicing:
        """The resource name whole-card devices go by on this node, devices per card, and
        whether a container may take more than one replica."""
        config = (self.cluster_policy().get("devicePlugin") or {}).get("config") or {}
        key = ((node.get("metadata") or {}).get("labels") or {}).get(CONFIG_LABEL)
        key = key or config.get("default")
        name = config.get("name") or CONFIG_MAP[1]
        config_map = self.api.get("ConfigMap", name, CONFIG_MAP[0]) if key else None
        text = ((config_map or {}).get("data") or {}).get(key or "")
        sharing = ((yaml.safe_load(text) if text else None) or {}).get("sharing") or {}
        slicing = sharing.get("timeSlicing") or {}
        for resource in slicing.get("resources") or []:
            if resource.get("name") == GPU and int(resource.get("replicas") or 1) > 1:
                renamed = resource.get("rename") or (
                    GPU + SHARED_SUFFIX if slicing.get("renameByDefault") else GPU
                )
                one_only = bool(slicing.get("failRequestsGreaterThanOne"))
                return TimeSlicing(renamed, int(resource["replicas"]), one_only)
        return TimeSlicing(GPU, 1, False)

    def cluster_policy(self) -> Mapping[str, Any]:
        return cluster_policy(self.api) or {}

    def allocate(self, call: Allocate) -> list[Grant] | str:
        grants: list[Grant] = []
        name, replicas, one_only = self.time_slicing(call.node)
        strategy = self.mig_strategy()
        migs = strategy == SINGLE and any(card.mig for card in call.cards)
        taken = {device for grant in call.held for device in grant.device_ids}
        for resource, count in sorted(call.wanted.items()):
            if resource.startswith(MIG_PREFIX) and strategy == MIXED:
                profile = resource[len(MIG_PREFIX) :]
                found = _mig_devices(call.cards, taken, resource, count, profile)
            elif resource == GPU and migs:
                found = _mig_devices(call.cards, taken, resource, count, None)
            elif resource == name and replicas > 1 and one_only and count > 1:
                found = f"maximum request size for shared resources is 1; found {count}"
            elif resource == name:
                found = _devices(call.cards, taken, resource, count, replicas, strategy == NONE)
            else:
                continue
            if isinstance(found, str):
                return found
            grants += found
            taken |= {device for grant in found for device in grant.device_ids}
        return grants


def mig_strategy(policy: Mapping[str, Any]) -> str:
    """The MIG strategy a ClusterPolicy's spec gives the plugin and GPU feature discovery."""
    return (policy.get("mig") or {}).get("strategy") or NONE


def single_invalid(cards: list[Card]) -> bool:
    """Does the `single` strategy refuse this node's cards: MIG and whole cards mixed, a card
    in MIG mode without a MIG device, or MIG devices of two profiles?"""
    nvidia = [card for card in cards if card.manufacturer == "nvidia"]
    in_mig = [card for card in nvidia if card.mig]
    if not in_mig:
        return False
    profiles = {profile for card in in_mig for profile, _, _ in card.partitions}
    return len(in_mig) < len(nvidia) or not all(c.partitions for c in in_mig) or len(profiles) > 1


def _devices(
    cards: list[Card], taken: set[str], resource: str, count: int, replicas: int, with_mig: bool
) -> list[Grant] | str:
    """`count` devices: whole cards (`with_mig`: cards in MIG mode too, as the `none`
    strategy serves them), or replicas, each of the least used card at the time."""
    whole = [
        c for c in cards if c.healthy and (with_mig or not c.mig) and c.manufacturer == "nvidia"
    ]
    chosen, grants = set(taken), []
    for _ in range(count):
        used = Counter(device.split(REPLICA, 1)[0] for device in chosen)
        free = [(c, _device_id(c, i, replicas)) for c in whole for i in range(replicas)]
        free = [(card, device) for card, device in free if device not in chosen]
        if not free:
            return f"{resource}: {count} devices requested, {len(grants)} free"
        card, device = min(free, key=lambda found: (used[found[0].uuid], found[0].index))
        chosen.add(device)
        grants.append(Grant(resource, (device,), card.uuid, _mode(replicas)))
    return grants


def _device_id(card: Card, replica: int, replicas: int) -> str:
    return f"{card.uuid}{REPLICA}{replica}" if replicas > 1 else card.uuid


def _mode(replicas: int) -> str:
    return "shared" if replicas > 1 else "exclusive"


def _mig_devices(
    cards: list[Card], taken: set[str], resource: str, count: int, profile: str | None
) -> list[Grant] | str:
    """`count` free MIG devices of `profile` (None: of any, as `single` serves them)."""
    free = [
        (card, name, placement, uuid)
        for card in cards
        if card.healthy
        for name, placement, uuid in card.partitions
        if profile in (None, name) and uuid not in taken
    ]
    if len(free) < count:
        return f"{resource}: {count} MIG devices requested, {len(free)} free"
    return [
        Grant(resource, (uuid,), card.uuid, "partitioned", placement=placement, profile=name)
        for card, name, placement, uuid in free[:count]
    ]
