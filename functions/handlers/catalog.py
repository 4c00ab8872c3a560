"""catalog: ResourceFlavors, the derived InstanceTypes and the InstanceTypeFlavor catalog.

Flavors are the finest grain and never depend on settings. Derived InstanceTypes are
create-only: a pool's preset applies when its type is first composed; afterwards the type is
kept as observed. Types of another grouping (awareness flipped) are retained while they exist;
an admin who deletes one removes it for good, while a deleted type of the current grouping is
composed again.
"""

from __future__ import annotations

import datetime
import json

from functions.core import labels, names
from functions.core.catalog import Settings, catalog_rows, derived_instance_type_spec, derived_pools
from functions.core.flavors import Flavor, derive_flavors
from functions.core.pools import NodeSummary, PoolKey
from functions.frame import Handler, InputError, Output, Request, Requirement
from functions.handlers.common import API, node_summary

NOTE = "note.gpustack.ai/"
DERIVED = "schedule.gpustack.ai/derived-from-node"
ENTRANCE = "schedule.gpustack.ai/queue-entrance"
TYPE_PREFIX = "instancetype-"
# The fields a derived InstanceType is created with; afterwards they are echoed as observed.
OWNED_SPEC = (
    "acceleratable",
    "acceleratorGroup",
    "arch",
    "displayName",
    "generalGroup",
    "localStorage",
    "os",
    "unitResources",
)


class CatalogHandler(Handler):
    name = "catalog"
    kinds = frozenset({"Catalog"})
    ttl = datetime.timedelta(seconds=30)  # Devices are required resources, not watched on v2.3

    def requirements(self, request: Request) -> dict[str, Requirement]:
        return {"devices": Requirement(API, "Devices")}

    def compose(self, request: Request, out: Output) -> None:
        if request.xr.name != "default":
            raise InputError(
                "metadata.name",
                f"the Catalog is named {request.xr.name!r}; name it 'default' — every handler reads "
                "its settings from Catalog default",
            )
        settings = Settings.from_spec(request.xr.view("spec").to_dict())
        nodes = [node_summary(d, settings) for d in request.required("devices") or []]
        flavors = derive_flavors(nodes, settings.mixed_on_node)
        for flavor in flavors:
            out.compose(f"flavor-{flavor.name}", resource_flavor(flavor, nodes), ready=True)
        pools = derived_pools(nodes, settings)
        if settings.derived_from_node:
            self.compose_instance_types(request, out, pools, nodes)
        else:
            self.retain_instance_types(request, out, set())
        for row_name, row in catalog_rows(nodes, settings).items():
            key = f"instancetypeflavor-{row_name}"
            flavor_row = {
                "apiVersion": API,
                "kind": "InstanceTypeFlavor",
                "metadata": {"name": row_name},
                "spec": row,
            }
            out.compose(key, flavor_row, ready=request.observed(key) is not None)
        managed = [n for n in nodes if n.managed]
        out.status = {
            "nodes": len(nodes),
            "managedNodes": len(managed),
            "flavors": len(flavors),
            "pools": len(pools),
            "accelerators": sum(sum(n.group_cards.values()) for n in managed),
        }

    def compose_instance_types(
        self, request: Request, out: Output, pools: list[PoolKey], nodes: list[NodeSummary]
    ) -> None:
        current = set()
        for pool in pools:
            key = TYPE_PREFIX + pool.name
            current.add(key)
            observed = request.observed(key)
            if observed is not None:
                spec = {k: v for k, v in observed.view("spec").to_dict().items() if k in OWNED_SPEC}
            else:
                spec = derived_instance_type_spec(pool, nodes)
            out.compose(key, instance_type(pool, spec), ready=is_active(observed))
        self.retain_instance_types(request, out, current)

    def retain_instance_types(self, request: Request, out: Output, current: set[str]) -> None:
        """Keep derived types that still exist but are no longer derived (never re-create them)."""
        for key in request.observed_names():
            if not key.startswith(TYPE_PREFIX) or key in current:
                continue
            observed = request.observed(key)
            spec = {k: v for k, v in observed.view("spec").to_dict().items() if k in OWNED_SPEC}
            out.compose(
                key,
                instance_type(PoolKey.for_instance_type(spec), spec, observed.name),
                ready=is_active(observed),
            )


def is_active(observed) -> bool:
    return observed is not None and observed.str("status", "phase") == "Active"


def instance_type(pool: PoolKey, spec: dict, name: str | None = None) -> dict:
    name = name or pool.name
    metadata_labels = labels.pool_labels(pool.os, pool.arch, pool.a_key, pool.g_key)
    metadata_labels.pop("resource.gpustack.ai/type")
    metadata_labels[DERIVED] = labels.TRUE
    metadata_labels[ENTRANCE] = names.entrance(name)
    return {
        "apiVersion": API,
        "kind": "InstanceType",
        "metadata": {"name": name, "labels": dict(sorted(metadata_labels.items()))},
        "spec": dict(sorted(spec.items())),
    }


def resource_flavor(flavor: Flavor, nodes: list[NodeSummary]) -> dict:
    first = next(n for n in nodes if n.node == flavor.nodes[0])
    notes = {"acceleratable": labels.boolean(flavor.acceleratable), "generalGroup": flavor.g_key}
    if flavor.a_key:
        facts = first.facts[flavor.a_key]
        notes |= {
            "acceleratorGroup": flavor.a_key,
            "manufacturer": facts.manufacturer,
            "product": names.label_value(facts.product),
            "family": facts.family,
            "memory": f"{facts.memory_mib}Mi",
            "cores": str(facts.cores),
        }
    else:
        notes |= {
            "acceleratorGroup": "",
            "manufacturer": names.cpu_manufacturer(flavor.g_key),
            "product": first.cpu.model_name,
            "family": first.cpu.family,
        }
    if not flavor.a_key:  # never by setting: flavors stay byte-for-byte across an awareness flip
        cpu = {
            "vendor": first.cpu.vendor,
            "modelName": first.cpu.model_name,
            "family": first.cpu.family,
            "model": first.cpu.model,
        }
        notes["cpuDetail"] = json.dumps(cpu, sort_keys=True)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {
            "name": flavor.name,
            "labels": flavor.labels(),
            "annotations": {NOTE + key: value for key, value in sorted(notes.items())},
        },
        "spec": {"nodeLabels": flavor.node_labels(), "tolerations": [{"operator": "Exists"}]},
    }
