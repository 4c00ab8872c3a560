"""ResourceFlavors: the finest, setting-independent grain (reference §3.1).

Every managed node contributes one CPU flavor `gpustack--<gKey>-<os>-<arch>-<cores>c` (unless it
is accelerated and mixing is off) and one device flavor `gpustack--<gKey>--<aKey>-<os>-<arch>-<n>d`
per accelerator model. Nodes of the same shape share a flavor; its capacity is nodes × count.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from functions.core import labels as L
from functions.core import names
from functions.core.modes import D
from functions.core.pools import NodeSummary, PoolKey, Shape
from functions.core.quantity import format_decimal
from functions.core.resources import credits_resource


@dataclass(frozen=True)
class Flavor:
    name: str
    os: str
    arch: str
    g_key: str
    count: int  # per node: cores (CPU flavor) or cards (device flavor)
    nodes: tuple[str, ...]
    a_key: str | None = None

    @property
    def capacity(self) -> int:
        return self.count * len(self.nodes)

    @property
    def acceleratable(self) -> bool:
        return self.a_key is not None

    def own_key(self) -> str:
        if self.a_key:
            return L.accelerator_key_label(self.a_key)
        return L.general_key_label(self.g_key)

    def labels(self) -> dict[str, str]:
        own = self.own_key()
        labels = {
            L.OS: self.os,
            L.ARCH: self.arch,
            L.ACCELERATABLE: L.boolean(self.acceleratable),
            L.general_key_label(self.g_key): L.TRUE,
            own: L.TRUE,
            f"{own}.count": str(self.count),
            f"{own}.capacity": str(self.capacity),
            L.RESOURCE_TYPE: "nodes",
        }
        return dict(sorted(labels.items()))

    def node_labels(self) -> dict[str, str]:
        own = self.own_key()
        labels = {
            L.OS: self.os,
            L.ARCH: self.arch,
            L.MANAGED: L.TRUE,
            L.general_key_label(self.g_key): L.TRUE,
            own: L.TRUE,
            f"{own}.count": str(self.count),
        }
        return dict(sorted(labels.items()))

    def serves(self, pool: PoolKey) -> bool:
        """Would the pool's ClusterQueue select this flavor?"""
        if (self.os, self.arch, self.a_key) != (pool.os, pool.arch, pool.a_key):
            return False
        return pool.g_key is None or pool.g_key == self.g_key


def derive_flavors(nodes: Iterable[NodeSummary], mixed_on_node: bool = True) -> list[Flavor]:
    """All flavors of the cluster, sorted by name; nodeless flavors simply do not appear."""
    by_shape: defaultdict[Shape, list[str]] = defaultdict(list)  # one shape, the same flavors
    for shape, node in map(_SHAPE_AND_NODE, nodes):
        by_shape[shape].append(node)
    members: dict[tuple, list[str]] = {}
    for shape, node_names in by_shape.items():
        for key in flavor_keys(shape, mixed_on_node):
            members.setdefault(key, []).extend(node_names)
    flavors = [
        Flavor(
            name=names.flavor_name(g_key, os, arch, count, a_key),
            os=os,
            arch=arch,
            g_key=g_key,
            count=count,
            nodes=tuple(sorted(node_names)),
            a_key=a_key,
        )
        for (os, arch, g_key, count, a_key), node_names in members.items()
    ]
    return sorted(flavors, key=lambda flavor: flavor.name)


_SHAPE_AND_NODE = operator.attrgetter("shape", "node")


def flavor_keys(shape: Shape, mixed_on_node: bool) -> list[tuple]:
    """The flavors a node of this shape belongs to, as (os, arch, gKey, count, aKey): its CPU
    flavor, then one per accelerator key it has cards of."""
    if not shape.managed:
        return []
    os, arch, g_key = shape.os, shape.arch, shape.g_key
    cpu = [(os, arch, g_key, shape.cpu_cores, None)] if shape.takes_cpu(mixed_on_node) else []
    return cpu + [
        (os, arch, g_key, count, a_key) for a_key, count in shape.group_cards if count > 0
    ]


def queue_flavors(pool: PoolKey, flavors: Iterable[Flavor]) -> list[Flavor]:
    """The flavors a pool's ClusterQueue lists, small nodes first (then by name, for stability)."""
    return sorted((f for f in flavors if f.serves(pool)), key=lambda f: (f.count, f.name))


# Kueue covers each resource by one resource group of a ClusterQueue, which lists at most 64
# flavors (its webhook refuses a resource covered twice; its CRD, a 65th flavor).
MAX_QUEUE_FLAVORS = 64


def resource_groups(pool: PoolKey, flavors: Iterable[Flavor], manufacturer: str = "") -> list[dict]:
    """The ClusterQueue's resource group: `cpu` cores, or the manufacturer's credits.

    One entry per flavor with capacity, small nodes first, the first 64 of them
    (`flavors_left_out` names the rest); nominal quota = capacity cores, or capacity ×
    1,600,000 credits. (The reference opened a group per 16 flavors, all covering the same
    resource, which Kueue refuses: docs/decisions.md.)
    """
    if pool.acceleratable:
        resource, unit = credits_resource(manufacturer), D
    else:
        resource, unit = "cpu", 1
    entries = [
        {
            "name": f.name,
            "resources": [{"name": resource, "nominalQuota": format_decimal(f.capacity * unit)}],
        }
        for f in queued(pool, flavors)[:MAX_QUEUE_FLAVORS]
    ]
    return [{"coveredResources": [resource], "flavors": entries}] if entries else []


def flavors_left_out(pool: PoolKey, flavors: Iterable[Flavor]) -> list[Flavor]:
    """The flavors with capacity past the 64 a pool's ClusterQueue can list: the largest."""
    return queued(pool, flavors)[MAX_QUEUE_FLAVORS:]


def queued(pool: PoolKey, flavors: Iterable[Flavor]) -> list[Flavor]:
    """The pool's flavors that give its queue quota, in the queue's order."""
    return [f for f in queue_flavors(pool, flavors) if f.capacity > 0]
