"""The derived catalog: which pools the nodes give rise to, and each derived InstanceType's spec.

Pure derivations for the catalog handler, the simulator and the demo (reference §3.2, §3.6).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from functions.core import names, presets, quantity
from functions.core.devices import DevicesSpec
from functions.core.pools import GroupFacts, NodeSummary, PoolKey, pools_of, summarize_devices
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
    """The pools the nodes give rise to under the current grouping, sorted by name."""
    keys = {
        pool
        for node in nodes
        for pool in pools_of(node, settings.aware_cpu_manufacturer, settings.mixed_on_node)
    }
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
    """The UNIT(CPU/RAM)/STORAGE column: `8/64Gi/100Gi`."""
    unit = spec.get("unitResources") or {}
    return f"{unit.get('cpu', '')}/{unit.get('ram', '')}/{spec.get('localStorage', '')}"


def kubectl_table(headers: list[str], rows: Iterable[list[str]]) -> str:
    """Columns as `kubectl get` prints them: left-aligned, three spaces apart."""
    rows = [headers, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    lines = [
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    return "\n".join(line.rstrip() for line in lines)


INSTANCE_TYPE_COLUMNS = [
    "NAME",
    "ENTRANCE",
    "UNIT(CPU/RAM)/STORAGE",
    "ACCELERATOR(EX/SH/SL/PT)",
    "CPU",
    "PHASE",
]


def catalog_rows(nodes: Iterable[NodeSummary], settings: Settings = DEFAULTS) -> dict[str, dict]:
    """The InstanceTypeFlavor catalog: one row per pool identity, regrouped by awareness.

    Collapsed (awareness off): `gpustack--generic` and `gpustack--<aKey>`; aware:
    `gpustack--<gKey>` and `gpustack--<gKey>--<aKey>`. Identity lives in the spec.
    """
    aware = settings.aware_cpu_manufacturer
    rows: dict[str, dict] = {}
    for node in sorted(nodes, key=lambda n: n.node):
        if not node.managed:
            continue
        g_key = node.g_key if aware else None
        for a_key, group in sorted(node.groups.items()):
            name = names.catalog_flavor_name(a_key, g_key)
            if group.total_cards and name not in rows:  # hardware facts only for a new row
                rows[name] = accelerated_row(a_key, node.facts[a_key], g_key)
        name = names.catalog_flavor_name(None, g_key)
        if (
            name not in rows
            and node.cpu_cores > 0
            and (settings.mixed_on_node or not node.accelerated)
        ):
            rows[name] = cpu_row(node, g_key)
    return dict(sorted(rows.items()))


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
