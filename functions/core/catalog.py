"""The derived catalog: which pools the nodes give rise to, and each derived InstanceType's spec.

Pure derivations for the catalog handler, the simulator and the demo (reference §3.2, §3.6).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from dataclasses import dataclass

from functions.core import names, presets, quantity
from functions.core.devices import DevicesSpec
from functions.core.pools import (
    GroupFacts,
    NodeSummary,
    PoolKey,
    Shape,
    shape_pools,
    summarize_devices,
)
from functions.core.settings import DEFAULTS, Settings

DISPLAY_NAME_MAX = 64


@dataclass(frozen=True)
class Cluster:
    """Every node's report and its summary, read once per request."""

    specs: tuple[DevicesSpec, ...]
    nodes: tuple[NodeSummary, ...]

    @classmethod
    def of(cls, specs: Iterable[DevicesSpec], settings: Settings = DEFAULTS) -> Cluster:
        specs = tuple(sorted(specs, key=lambda spec: spec.node))
        fixed = settings.dialect.fixed_partitions
        nodes = tuple(
            summarize_devices(spec, settings.node_management_manual, fixed_partitions=fixed)
            for spec in specs
        )
        return cls(specs, nodes)

    def pools(self, settings: Settings = DEFAULTS) -> list[PoolKey]:
        return derived_pools(self.nodes, settings)


def product_of(nodes: Iterable[NodeSummary], a_key: str) -> tuple[str, str]:
    """(manufacturer, product) of an accelerator key, from the first node that has it."""
    for node in nodes:
        facts = node.facts.get(a_key)
        if facts is not None:
            return facts.manufacturer, facts.product
    return a_key.split("-", 1)[0], ""


def derived_pools(nodes: Iterable[NodeSummary], settings: Settings) -> list[PoolKey]:
    """The pools the nodes give rise to under the current grouping, sorted by name: worked out
    once per node shape (a Catalog reads every node; they come in a handful of shapes)."""
    aware, mixed = settings.aware_cpu_manufacturer, settings.mixed_on_node
    keys = {pool for shape in set(map(_SHAPE, nodes)) for pool in shape_pools(shape, aware, mixed)}
    return sorted(keys, key=lambda pool: pool.name)


def derived_instance_type_spec(pool: PoolKey, nodes: Iterable[NodeSummary]) -> dict:
    """The spec a derived InstanceType is created with (presets apply at creation only)."""
    spec: dict = {
        "acceleratable": pool.acceleratable,
        "generalGroup": pool.g_key or names.GENERIC,
        "os": pool.os,
        "arch": pool.arch,
        "localStorage": presets.LOCAL_STORAGE,
    }
    if pool.a_key:
        manufacturer, product = product_of(nodes, pool.a_key)
        unit = presets.unit_resources_for(manufacturer, product)
        spec["acceleratorGroup"] = pool.a_key
        spec["displayName"] = product[:DISPLAY_NAME_MAX]
    else:
        unit = presets.CPU_ONLY
        spec["displayName"] = "CPU-only"
    spec["unitResources"] = {"cpu": str(unit.cpu), "ram": unit.ram}
    return dict(sorted(spec.items()))


def unit_display(spec: dict) -> str:
    """An InstanceType's `status.display.unit`, its UNIT(CPU/RAM)/STORAGE column: `8/64Gi/100Gi`."""
    unit = spec.get("unitResources") or {}
    return f"{unit.get('cpu', '')}/{unit.get('ram', '')}/{spec.get('localStorage', '')}"


def catalog_rows(nodes: Iterable[NodeSummary], settings: Settings = DEFAULTS) -> dict[str, dict]:
    """The InstanceTypeFlavor catalog: one row per pool identity, regrouped by awareness.

    Collapsed (awareness off): `gpustack--generic` and `gpustack--<aKey>`; aware:
    `gpustack--<gKey>` and `gpustack--<gKey>--<aKey>`. Identity lives in the spec. The first
    node by name that gives rise to a row describes it; once every row is described, later
    nodes change nothing (a Catalog reads every node, and a few describe them all).
    """
    aware, mixed = settings.aware_cpu_manufacturer, settings.mixed_on_node
    ordered = sorted(nodes, key=_NODE)
    wanted = {row for shape in set(map(_SHAPE, ordered)) for row in shape_rows(shape, aware, mixed)}
    rows: dict[str, dict] = {}
    for node in ordered:
        if len(rows) == len(wanted):
            break
        g_key = node.g_key if aware else None
        for name, a_key in shape_rows(node.shape, aware, mixed):
            if name in rows:
                continue
            rows[name] = (
                accelerated_row(a_key, node.facts[a_key], g_key) if a_key else cpu_row(node, g_key)
            )
    return dict(sorted(rows.items()))


@functools.lru_cache(maxsize=4096)  # a cluster has a handful of shapes; a bound all the same
def shape_rows(shape: Shape, aware: bool, mixed_on_node: bool) -> tuple[tuple[str, str], ...]:
    """The catalog rows a node of this shape gives rise to, as (name, aKey; "" for CPU): one
    per accelerator key it has cards of, then its CPU row."""
    if not shape.managed:
        return ()
    g_key = shape.g_key if aware else None
    rows = [
        (names.catalog_flavor_name(a_key, g_key), a_key)
        for a_key, cards in sorted(shape.group_cards)
        if cards
    ]
    if shape.takes_cpu(mixed_on_node):
        rows.append((names.catalog_flavor_name(None, g_key), ""))
    return tuple(rows)


_NODE, _SHAPE = operator.attrgetter("node"), operator.attrgetter("shape")


def accelerated_row(a_key: str, facts: GroupFacts, g_key: str | None) -> dict:
    row = {
        "acceleratable": True,
        "acceleratorGroup": a_key,
        "manufacturer": facts.manufacturer,
        "product": names.label_value(facts.product),
        "family": facts.family,
        "memory": quantity.format_mebibytes(facts.memory_mib),
        "cores": str(facts.cores),
        "sliceable": facts.slice_slots > 0,
    }
    if g_key:
        row["generalGroup"] = g_key
    return dict(sorted(row.items()))


def cpu_row(node: NodeSummary, g_key: str | None) -> dict:
    if not g_key:
        return {
            "acceleratable": False,
            "generalGroup": names.GENERIC,
            "manufacturer": names.GENERIC,
        }
    row = {
        "acceleratable": False,
        "generalGroup": g_key,
        "manufacturer": names.cpu_manufacturer(g_key),
        "product": node.cpu.model_name,
        "family": node.cpu.family,
    }
    return dict(sorted(row.items()))
