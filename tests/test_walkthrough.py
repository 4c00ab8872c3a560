"""The walkthrough's figures, computed by the core from the four nodes' Devices reports.

Each test is one section of seed 000: the flavors and pools of §1, a node leaving management
(§2), a 20 % logical slice (§3), a whole card on a custom sibling type (§4) and CPU-manufacturer
awareness (§5). SH figures use the card-count reading (DESIGN §4): `1/10`, not the recorded `10/10`.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from functions.core import labels, names, pools
from functions.core.catalog import (
    Cluster,
    Settings,
    accelerated_row,
    catalog_rows,
    cpu_row,
    derived_instance_type_spec,
    derived_pools,
    unit_display,
)
from functions.core.devices import parse_devices
from functions.core.flavors import derive_flavors, queue_flavors
from functions.core.ledger import D
from functions.core.pools import NodeSummary, PoolKey, pool_views
from functions.core.quantity import format_decimal

A10G = "gpustack--nvidia-a10g-linux-amd64"
T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
GENERIC = "gpustack--generic-linux-amd64"
AWARE_T4 = "gpustack--intel-xeon-platinum-8259cl--nvidia-t-5b59e508edc027b7"  # fitted to 63
DEFAULT = Settings()
AWARE = Settings(aware_cpu_manufacturer=True)


def cluster_of(devices: dict[str, dict], settings: Settings = DEFAULT) -> Cluster:
    return Cluster.of((parse_devices(doc) for doc in devices.values()), settings)


def rows(devices: dict[str, dict], settings: Settings = DEFAULT, extra: dict | None = None):
    """{pool name: (entrance, unit, ACCELERATOR column, CPU column)} — the instancetypes table."""
    cluster = cluster_of(devices, settings)
    specs = {
        pool.name: derived_instance_type_spec(pool, cluster.nodes)
        for pool in cluster.pools(settings)
    }
    specs.update(extra or {})
    table = {}
    for name, spec in specs.items():
        views = pool_views(PoolKey.for_instance_type(spec), cluster.nodes, settings.mixed_on_node)
        table[name] = (
            names.entrance(name),
            unit_display(spec),
            views.accelerators.display,
            views.cpu.display,
        )
    return table


def view_columns(table):
    return {name: (row[2], row[3]) for name, row in table.items()}


INITIAL = {
    GENERIC: ("0/0 0/0 0/0 0/0", "48/72"),
    A10G: ("1/1 1/10 100/100 0/0", "0/0"),
    T4: ("4/5 4/50 100/500 0/0", "0/0"),
}


def test_section_1_seven_flavors_with_their_capacities(walkthrough):
    flavors = derive_flavors(cluster_of(walkthrough).nodes)
    assert {flavor.name: flavor.capacity for flavor in flavors} == {
        "gpustack--amd-epyc-7r13-linux-amd64-16c": 16,
        "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d": 1,
        "gpustack--amd-epyc-7r32-linux-amd64-4c": 4,
        "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d": 1,
        "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d": 4,
        "gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c": 48,
        "gpustack--intel-xeon-platinum-8259cl-linux-amd64-4c": 4,
    }


def test_section_1_the_accelerated_flavor_carries_the_walkthrough_labels(walkthrough):
    flavors = {f.name: f for f in derive_flavors(cluster_of(walkthrough).nodes)}
    a10g = flavors["gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"]
    assert a10g.labels() == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.gpustack.ai/acceleratable": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
        "acceleratable.feature.gpustack.ai/nvidia-a10g.count": "1",
        "acceleratable.feature.gpustack.ai/nvidia-a10g.capacity": "1",
        "resource.gpustack.ai/type": "nodes",
    }
    assert a10g.node_labels() == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
        "acceleratable.feature.gpustack.ai/nvidia-a10g.count": "1",
    }
    cpu = flavors["gpustack--amd-epyc-7r13-linux-amd64-16c"]
    assert cpu.labels() == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.gpustack.ai/acceleratable": "false",
        "general.feature.gpustack.ai/amd-epyc-7r13": "true",
        "general.feature.gpustack.ai/amd-epyc-7r13.count": "16",
        "general.feature.gpustack.ai/amd-epyc-7r13.capacity": "16",
        "resource.gpustack.ai/type": "nodes",
    }


def test_section_1_three_pools_with_entrances_units_and_views(walkthrough):
    table = rows(walkthrough)
    assert table == {
        GENERIC: ("gpustack-fnv64-3b93966fd73eb9ec", "1/2Gi/100Gi", "0/0 0/0 0/0 0/0", "48/72"),
        A10G: ("gpustack-fnv64-c4680bb149644f1c", "8/64Gi/100Gi", "1/1 1/10 100/100 0/0", "0/0"),
        T4: ("gpustack-fnv64-6b371caa2da0b799", "8/32Gi/100Gi", "4/5 4/50 100/500 0/0", "0/0"),
    }


def test_section_1_queues_list_flavors_small_nodes_first_with_credit_quotas(walkthrough):
    cluster = cluster_of(walkthrough)
    flavors = derive_flavors(cluster.nodes)
    t4 = queue_flavors(PoolKey("linux", "amd64", "nvidia-tesla-t4"), flavors)
    assert [(f.name, format_decimal(f.capacity * D)) for f in t4] == [
        ("gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d", "1600k"),
        ("gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d", "6400k"),
    ]
    a10g = queue_flavors(PoolKey("linux", "amd64", "nvidia-a10g"), flavors)
    assert [(f.name, format_decimal(f.capacity * D)) for f in a10g] == [
        ("gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d", "1600k")
    ]
    generic = queue_flavors(PoolKey("linux", "amd64"), flavors)
    assert [(f.count, f.capacity) for f in generic] == [(4, 4), (4, 4), (16, 16), (48, 48)]


def test_section_1_node_a10g_labels_are_the_walkthrough_node_labels(walkthrough):
    spec = parse_devices(walkthrough["node-a10g"])
    node = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    node |= labels.worker_labels(spec, managed=True) | labels.device_manager_labels(spec)
    assert node == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/amd": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32.count": "4",
        "feature.gpustack.ai/acceleratable": "true",
        "acceleratable.feature.gpustack.ai/nvidia": "true",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
        "acceleratable.feature.gpustack.ai/nvidia-a10g.count": "1",
        "acceleratable.feature.gpustack.ai/nvidia-a10g.memory": "24Gi",
        "acceleratable.feature.gpustack.ai/nvidia-a10g.cores": "10240",
        "acceleratable.feature.gpustack.ai/nvidia-a10g.family": "Ampere",
        "acceleratable.feature.gpustack.ai/nvidia-a10g.product": "NVIDIA-A10G",
        "acceleratable.feature.gpustack.ai/nvidia-a10g.comcap": "8.6",
        "acceleratable.feature.gpustack.ai/nvidia.driver-version": "580.159.03",
        "acceleratable.feature.gpustack.ai/nvidia.runtime-version": "13.0",
    }
    assert labels.devices_labels(spec, managed=True) == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "gpustack.ai/managed": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
    }


def test_section_1_node_cpu_has_no_accelerator_labels(walkthrough):
    spec = parse_devices(walkthrough["node-cpu"])
    assert labels.device_manager_labels(spec) == {}
    t4 = parse_devices(walkthrough["node-t4-b"])
    assert (
        labels.device_manager_labels(t4)["acceleratable.feature.gpustack.ai/nvidia-tesla-t4.memory"]
        == "16Gi"
    )
    assert (
        labels.device_manager_labels(t4)[
            "acceleratable.feature.gpustack.ai/nvidia-tesla-t4.product"
        ]
        == "Tesla-T4"
    )


def existing_types(devices: dict[str, dict], settings: Settings = DEFAULT) -> dict[str, dict]:
    """The derived InstanceTypes as first composed (they are create-only, so they stay)."""
    cluster = cluster_of(devices, settings)
    return {
        pool.name: derived_instance_type_spec(pool, cluster.nodes)
        for pool in cluster.pools(settings)
    }


def test_section_2_an_unmanaged_node_leaves_its_pools_and_comes_back(walkthrough):
    existing = existing_types(walkthrough)
    walkthrough["node-a10g"]["spec"]["managed"] = False
    assert view_columns(rows(walkthrough, extra=existing)) == {
        GENERIC: ("0/0 0/0 0/0 0/0", "48/68"),
        A10G: ("0/0 0/0 0/0 0/0", "0/0"),
        T4: ("4/5 4/50 100/500 0/0", "0/0"),
    }
    flavors = [f.name for f in derive_flavors(cluster_of(walkthrough).nodes)]
    assert "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d" not in flavors
    assert len(flavors) == 5
    walkthrough["node-a10g"]["spec"]["managed"] = True
    assert view_columns(rows(walkthrough)) == INITIAL


def test_section_2_manual_node_management_leaves_unset_nodes_out(walkthrough):
    manual = Settings(node_management_manual=True)
    assert derive_flavors(cluster_of(walkthrough, manual).nodes) == []
    walkthrough["node-cpu"]["spec"]["managed"] = True
    assert [f.name for f in derive_flavors(cluster_of(walkthrough, manual).nodes)] == [
        "gpustack--amd-epyc-7r13-linux-amd64-16c"
    ]


SLICE_20 = {
    "pod": "default/sliced-demo",
    "container": "main",
    "device": "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575",
    "mode": "Sliced",
    "memoryPercentage": 20,
    "coresPercentage": 100,
}


def test_section_3_a_20_percent_slice(walkthrough):
    walkthrough["node-a10g"]["spec"]["allocations"] = [SLICE_20]
    assert view_columns(rows(walkthrough))[A10G] == ("0/0 0/0 80/80 0/0", "0/0")
    walkthrough["node-a10g"]["spec"]["allocations"] = []
    assert view_columns(rows(walkthrough))[A10G] == ("1/1 1/10 100/100 0/0", "0/0")


CUSTOM = {
    "acceleratable": True,
    "acceleratorGroup": "nvidia-a10g",
    "os": "linux",
    "arch": "amd64",
    "unitResources": {"cpu": "12", "ram": "128Gi"},
    "localStorage": "200Gi",
}


def test_section_4_a_custom_type_is_a_sibling_on_the_same_accelerator(walkthrough):
    table = rows(walkthrough, extra={"a10g-12c128g": CUSTOM})
    assert table["a10g-12c128g"][1:] == ("12/128Gi/200Gi", "1/1 1/10 100/100 0/0", "0/0")
    whole_card = dict(SLICE_20, pod="default/custom-demo", mode="Exclusive")
    walkthrough["node-a10g"]["spec"]["allocations"] = [whole_card]
    table = rows(walkthrough, extra={"a10g-12c128g": CUSTOM})
    assert table["a10g-12c128g"][2] == table[A10G][2] == "0/0 0/0 0/0 0/0"
    assert table[T4][2] == "4/5 4/50 100/500 0/0"


def test_section_5_awareness_adds_cpu_aware_pools(walkthrough):
    table = view_columns(rows(walkthrough, AWARE))
    assert table == {
        "gpustack--amd-epyc-7r13-linux-amd64": ("0/0 0/0 0/0 0/0", "16/16"),
        "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64": ("1/1 1/10 100/100 0/0", "0/0"),
        "gpustack--amd-epyc-7r32-linux-amd64": ("0/0 0/0 0/0 0/0", "4/4"),
        AWARE_T4: ("4/5 4/50 100/500 0/0", "0/0"),
        "gpustack--intel-xeon-platinum-8259cl-linux-amd64": ("0/0 0/0 0/0 0/0", "48/52"),
    }
    entrances = {name: row[0] for name, row in rows(walkthrough, AWARE).items()}
    assert (
        entrances["gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64"]
        == "gpustack-fnv64-029fd9550e0c70bd"
    )
    # fitted to the 63 characters of a composite's name; its entrance is the fitted name's
    assert entrances[AWARE_T4] == "gpustack-fnv64-5a630b1bafc96f4d"


def test_section_5_retained_collapsed_types_still_read_the_same_accelerators(walkthrough):
    retained = existing_types(walkthrough)
    whole_card = dict(SLICE_20, pod="default/custom-demo", mode="Exclusive")
    walkthrough["node-a10g"]["spec"]["allocations"] = [whole_card]
    table = view_columns(rows(walkthrough, AWARE, extra=retained))
    assert len(table) == 8
    assert table["gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64"][0] == "0/0 0/0 0/0 0/0"
    assert table[A10G][0] == "0/0 0/0 0/0 0/0"
    assert table[GENERIC] == ("0/0 0/0 0/0 0/0", "48/72")


def test_section_5_flavors_do_not_change_with_awareness(walkthrough):
    assert derive_flavors(cluster_of(walkthrough, AWARE).nodes) == derive_flavors(
        cluster_of(walkthrough).nodes
    )


# --- pools and flavors are worked out once per node shape -------------------------------------


def covers_field_by_field(pool: PoolKey, node: NodeSummary, mixed_on_node: bool) -> bool:
    """Does `pool` take capacity from `node`, read from the node's own fields (reference §3.2)."""
    if not node.managed or (node.os, node.arch) != (pool.os, pool.arch):
        return False
    if pool.g_key is not None and node.g_key != pool.g_key:
        return False
    if pool.a_key is not None:
        return node.group_cards.get(pool.a_key, 0) > 0
    return node.cpu_cores > 0 and (mixed_on_node or not node.accelerated)


@pytest.mark.parametrize("mixed_on_node", [True, False])
def test_a_pool_covers_the_nodes_whose_own_fields_say_so(walkthrough, mixed_on_node):
    walkthrough["node-t4-a"]["spec"]["managed"] = False
    nodes = list(cluster_of(walkthrough).nodes)
    candidates = {
        PoolKey(node.os, node.arch, a_key, g_key)
        for node in nodes
        for a_key in (None, *node.group_cards, "nvidia-h100")
        for g_key in (None, node.g_key)
    }
    for pool in candidates:
        for order in (nodes, nodes[::-1]):
            expected = [n for n in order if covers_field_by_field(pool, n, mixed_on_node)]
            assert pool.covered(order, mixed_on_node) == expected
            assert pool.covered(expected, mixed_on_node) == expected
            assert [pool.covers(n, mixed_on_node) for n in order] == [n in expected for n in order]


def test_nodes_of_one_shape_count_alike_whether_or_not_they_share_its_object(walkthrough):
    nodes = list(cluster_of(walkthrough).nodes)
    twins = [replace(node, node=f"{node.node}-twin") for node in nodes]
    assert all(node.shape is twin.shape for node, twin in zip(nodes, twins, strict=True))
    pools._shape.cache_clear()  # as once the shapes' memo is full: an equal shape, a new object
    apart = [replace(twin) for twin in twins]
    assert not any(node.shape is twin.shape for node, twin in zip(nodes, apart, strict=True))
    for settings in (DEFAULT, AWARE, Settings(mixed_on_node=False)):
        shared, separate = nodes + twins, nodes + apart
        mixed = settings.mixed_on_node
        assert derive_flavors(separate, mixed) == derive_flavors(shared, mixed)
        assert derived_pools(separate, settings) == derived_pools(shared, settings)
        for pool in derived_pools(shared, settings):
            assert pool_views(pool, separate, mixed) == pool_views(pool, shared, mixed)


def rows_node_by_node(nodes: list[NodeSummary], settings: Settings) -> dict[str, dict]:
    """The catalog's rows read node by node, in name order (reference §3.6): the first node
    that gives rise to a row describes it."""
    rows: dict[str, dict] = {}
    for node in sorted(nodes, key=lambda n: n.node):
        if not node.managed:
            continue
        g_key = node.g_key if settings.aware_cpu_manufacturer else None
        for a_key, group in sorted(node.groups.items()):
            name = names.catalog_flavor_name(a_key, g_key)
            if group.total_cards and name not in rows:
                rows[name] = accelerated_row(a_key, node.facts[a_key], g_key)
        name = names.catalog_flavor_name(None, g_key)
        takes_cpu = node.cpu_cores > 0 and (settings.mixed_on_node or not node.accelerated)
        if takes_cpu and name not in rows:
            rows[name] = cpu_row(node, g_key)
    return dict(sorted(rows.items()))


@pytest.mark.parametrize("settings", [DEFAULT, AWARE, Settings(mixed_on_node=False)])
def test_the_catalog_rows_are_described_by_the_first_node_by_name(walkthrough, settings):
    walkthrough["node-t4-a"]["spec"]["managed"] = False
    nodes = list(cluster_of(walkthrough).nodes)

    def renamed(node: NodeSummary) -> NodeSummary:
        """A node of the same shape, sorting first, whose cards and CPU read differently."""
        facts = {key: replace(f, product=f"{f.product} rev2") for key, f in node.facts.items()}
        cpu = replace(node.cpu, model_name=f"{node.cpu.model_name} rev2")
        return replace(node, node=f"a-{node.node}", load_details=lambda: (facts, cpu))

    for given in (nodes, nodes + [renamed(n) for n in nodes]):
        assert catalog_rows(given, settings) == rows_node_by_node(given, settings)
    products = {row.get("product") for row in catalog_rows(given, settings).values()}
    assert all(product is None or "rev2" in product for product in products)
