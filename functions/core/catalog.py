"""The derived catalog: which pools the nodes give rise to, and each derived InstanceType's spec.

Pure derivations for the catalog handler, the simulator and the demo (reference §3.2, §3.6).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from functions.core import names, presets
from functions.core.devices import DevicesSpec
from functions.core.pools import NodeSummary, PoolKey, pools_of, summarize_devices

DISPLAY_NAME_MAX = 64


@dataclass(frozen=True)
class Settings:
    """The Catalog's settings that shape the derivation (DESIGN §3.1, same defaults)."""

    aware_cpu_manufacturer: bool = False
    mixed_on_node: bool = True
    node_management_manual: bool = False


@dataclass(frozen=True)
class Cluster:
    """Every node's report and its summary, read once per request."""

    specs: tuple[DevicesSpec, ...]
    nodes: tuple[NodeSummary, ...]

    @classmethod
    def of(cls, specs: Iterable[DevicesSpec], settings: Settings = Settings()) -> Cluster:
        specs = tuple(sorted(specs, key=lambda spec: spec.node))
        nodes = tuple(summarize_devices(spec, settings.node_management_manual) for spec in specs)
        return cls(specs, nodes)

    def pools(self, settings: Settings = Settings()) -> list[PoolKey]:
        """The derived pools under the current awareness setting, sorted by name."""
        keys = {
            pool
            for node in self.nodes
            for pool in pools_of(node, settings.aware_cpu_manufacturer, settings.mixed_on_node)
        }
        return sorted(keys, key=lambda pool: pool.name)

    def product_of(self, a_key: str) -> tuple[str, str]:
        """(manufacturer, product) of an accelerator key, from the first node that has it."""
        for spec in self.specs:
            group = spec.group(a_key)
            if group is not None:
                return group.manufacturer, group.product
        return a_key.split("-", 1)[0], ""


def derived_instance_type_spec(pool: PoolKey, cluster: Cluster) -> dict:
    """The spec a derived InstanceType is created with (presets apply at creation only)."""
    spec: dict = {
        "acceleratable": pool.acceleratable,
        "generalGroup": pool.g_key or names.GENERIC,
        "os": pool.os,
        "arch": pool.arch,
        "localStorage": presets.LOCAL_STORAGE,
    }
    if pool.a_key:
        manufacturer, product = cluster.product_of(pool.a_key)
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
