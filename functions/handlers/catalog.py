"""catalog: ResourceFlavors, the derived InstanceTypes and the InstanceTypeFlavor catalog.

Flavors are the finest grain. A flavor tolerates only what the Instances it admits need: an
accelerated flavor tolerates its manufacturer's GPU taint (the `nvidia.com/gpu` that GPU node
pools carry to keep other Pods off) and the taints the Catalog's `acceleratedFlavorTolerations`
name (for accelerator nodes tainted with another key), a CPU flavor nothing. Kueue copies these
tolerations onto every admitted Pod, so the node-lifecycle taints
(`node.kubernetes.io/unreachable`, `not-ready`) stay untolerated: a Pod on a lost node is
evicted on Kubernetes' schedule (300 s, DefaultTolerationSeconds) and its Instance composes it
again elsewhere; and no Pod is scheduled onto a NotReady, unreachable or cordoned node. (The
reference tolerated every taint with `{operator: Exists}`: its Pods could be placed on a dead or
cordoned node, and outlived any NoExecute taint but the two the API server times by default.)

Derived InstanceTypes are
create-only: a pool's preset applies when its type is first composed; afterwards the type is
kept as observed. Types of another grouping (awareness flipped) are retained while they exist;
an admin who deletes one removes it for good, while a deleted type of the current grouping is
composed again.
"""

from __future__ import annotations

import datetime
import json
import operator
from collections.abc import Sequence
from typing import Any

from functions.core import apis, labels, names, resources
from functions.core.catalog import catalog_rows, derived_instance_type_spec, derived_pools
from functions.core.flavors import Flavor, derive_flavors
from functions.core.pools import NodeSummary, PoolKey
from functions.core.settings import FlavorToleration, Settings, SettingsError
from functions.handlers.base import Handler, InputError, Request, Requirement
from functions.handlers.desired import Desired
from functions.handlers.inputs import (
    SUMMARIES,
    keep_observed,
    node_summaries,
    summaries_missing,
    summaries_requirement,
)
from functions.views import View

TYPE_PREFIX = "instancetype-"
FLAVOR_PREFIX = "flavor-"
ROW_PREFIX = "instancetypeflavor-"
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


def requirements(request: Request) -> dict[str, Requirement]:
    try:
        settings = Settings.from_spec(request.xr.view("spec").to_dict())
    except SettingsError:
        settings = Settings()  # compose refuses it, naming the field
    return {SUMMARIES: summaries_requirement(settings)}


def compose(request: Request) -> Desired:
    if request.xr.name != names.CATALOG:
        raise InputError(
            "metadata.name",
            f"the Catalog is named {request.xr.name!r}; name it {names.CATALOG!r} — every "
            f"handler reads its settings from Catalog {names.CATALOG}",
        )
    try:
        settings = Settings.from_spec(request.xr.view("spec").to_dict())
    except SettingsError as error:
        raise InputError(error.field, error.message) from error
    desired = Desired()
    if summaries_missing(request, request.observed_names()):
        return keep_observed(request, desired, "every flavor, InstanceType and catalog row")
    nodes = node_summaries(request, desired)
    flavors = derive_flavors(nodes, settings.mixed_on_node)
    for flavor in flavors:
        key = FLAVOR_PREFIX + flavor.name
        flavor_object = resource_flavor(flavor, nodes, settings.accelerated_flavor_tolerations)
        desired.compose(key, flavor_object, request.observed(key))
    pools = derived_pools(nodes, settings)
    current = (
        compose_instance_types(request, desired, pools, nodes)
        if settings.derived_from_node
        else set()
    )
    retain_instance_types(request, desired, current)
    for row_name, row in catalog_rows(nodes, settings).items():
        key = ROW_PREFIX + row_name
        desired.compose(key, instance_type_flavor(row_name, row), request.observed(key))
    managed = list(filter(_MANAGED, nodes))  # in C: a Catalog reads every node
    cards = map(dict.values, map(_GROUP_CARDS, managed))
    desired.status = {
        "nodes": len(nodes),
        "managedNodes": len(managed),
        "flavors": len(flavors),
        "pools": len(pools),
        "accelerators": sum(map(sum, cards)),
    }
    return desired


_MANAGED, _GROUP_CARDS = operator.attrgetter("managed"), operator.attrgetter("group_cards")


def compose_instance_types(
    request: Request, desired: Desired, pools: list[PoolKey], nodes: list[NodeSummary]
) -> set[str]:
    """One derived InstanceType per pool of the current grouping; returns their keys."""
    current = set()
    for pool in pools:
        key = TYPE_PREFIX + pool.name
        current.add(key)
        observed = request.observed(key)
        spec = (
            owned_spec(observed)
            if observed is not None
            else derived_instance_type_spec(pool, nodes)
        )
        desired.compose(key, instance_type(pool, spec), observed)
    return current


def retain_instance_types(request: Request, desired: Desired, current: set[str]) -> None:
    """Keep derived types that still exist but are no longer derived (never re-create them)."""
    for key in request.observed_names():
        observed = request.observed(key)
        if not key.startswith(TYPE_PREFIX) or key in current or observed is None:
            continue
        spec = owned_spec(observed)
        pool = PoolKey.for_instance_type(spec)
        desired.compose(key, instance_type(pool, spec, observed.name), observed)


def owned_spec(observed: View) -> dict[str, Any]:
    return {k: v for k, v in observed.view("spec").to_dict().items() if k in OWNED_SPEC}


def instance_type(pool: PoolKey, spec: dict, name: str | None = None) -> dict:
    name = name or pool.name
    metadata_labels = labels.pool_labels(pool.os, pool.arch, pool.a_key, pool.g_key)
    metadata_labels.pop(labels.RESOURCE_TYPE)
    metadata_labels[labels.DERIVED] = labels.TRUE
    metadata_labels[labels.QUEUE_ENTRANCE] = names.entrance(name)
    return {
        "apiVersion": apis.WORKER,
        "kind": "InstanceType",
        "metadata": {"name": name, "labels": dict(sorted(metadata_labels.items()))},
        "spec": dict(sorted(spec.items())),
    }


def instance_type_flavor(name: str, row: dict) -> dict:
    return {
        "apiVersion": apis.WORKER,
        "kind": "InstanceTypeFlavor",
        "metadata": {"name": name},
        "spec": row,
    }


def resource_flavor(
    flavor: Flavor, nodes: list[NodeSummary], tolerated: Sequence[FlavorToleration]
) -> dict:
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
        cpu = {
            "vendor": first.cpu.vendor,
            "modelName": first.cpu.model_name,
            "family": first.cpu.family,
            "model": first.cpu.model,
        }
        notes |= {
            "acceleratorGroup": "",
            "manufacturer": names.cpu_manufacturer(flavor.g_key),
            "product": first.cpu.model_name,
            "family": first.cpu.family,
            # never by setting: flavors stay byte-for-byte across an awareness flip
            "cpuDetail": json.dumps(cpu, sort_keys=True),
        }
    return {
        "apiVersion": apis.KUEUE,
        "kind": "ResourceFlavor",
        "metadata": {
            "name": flavor.name,
            "labels": flavor.labels(),
            "annotations": {labels.NOTE + key: value for key, value in sorted(notes.items())},
        },
        "spec": {
            "nodeLabels": flavor.node_labels(),
            **flavor_tolerations(flavor, first, tolerated),
        },
    }


def flavor_tolerations(
    flavor: Flavor, node: NodeSummary, tolerated: Sequence[FlavorToleration]
) -> dict[str, list[dict[str, str]]]:
    """The taint an accelerated flavor's nodes carry for their GPUs, under any effect, then the
    Catalog's own, each once; none for a CPU flavor (see the module docstring)."""
    if not flavor.a_key:
        return {}
    key = resources.base_of(node.facts[flavor.a_key].manufacturer)
    found = [{"key": key, "operator": "Exists"}]
    for toleration in (t.toleration() for t in tolerated):
        if toleration not in found:
            found.append(toleration)
    return {"tolerations": found}


HANDLER = Handler(
    "catalog",
    frozenset({"Catalog"}),
    compose,
    requirements,
    ttl=datetime.timedelta(seconds=30),  # summaries are required resources, not watched on v2.3
)
