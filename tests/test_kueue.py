"""Kueue charges exactly the core's credits, reading only the Kueue configuration we ship.

The simulated Kueue applies the shipped file's resource transformations to a Pod's container
requests (Kueue's own semantics); the Pods are the instance handler's, sized by `plan`. So
these tests hold the shipped configuration, the resource keys and the credit rule to each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import pytest
import yaml

from functions.core import dialects, mig
from functions.core.modes import Mode
from functions.core.quantity import GIB
from functions.core.requests import InstanceTypeFacts, Plan, plan
from gpustack_sim import kube, world_from
from gpustack_sim import kueue as simulated_kueue
from gpustack_sim.apiserver import ApiServer
from gpustack_sim.client import Client
from gpustack_sim.kueue import QUEUE_NAME as QUEUE
from gpustack_sim.kueue import Kueue
from gpustack_sim.store import Store
from tests.support.schemas import ROOT
from tools import kueue as kueue_tool

SHIPPED = ROOT / "compositions" / "kueue"
ALL_MODES = frozenset({Mode.EXCLUSIVE, Mode.SHARED, Mode.SLICED, Mode.PARTITIONED})


def test_the_shipped_configurations_are_what_make_kueue_writes():
    written = kueue_tool.render()
    assert sorted(p.name for p in written if p.parent == SHIPPED) == [
        "dra.yaml",
        "gpustack.yaml",
        "hami.yaml",
        "nvidia.yaml",
    ]
    for path, text in written.items():
        assert path.read_text() == text, f"{path.name} is stale: run `make kueue`"


def test_the_catalogs_device_plugin_enum_is_the_dialects():
    xrd = kueue_tool.catalog_xrd(kueue_tool.CATALOG_XRD.read_text())
    schema = yaml.safe_load(xrd)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["properties"]["devicePlugin"]["enum"] == list(
        dialects.DIALECTS
    )


def facts(manufacturer: str, card_mib: int, product: str = "", cards: int = 8) -> InstanceTypeFacts:
    return InstanceTypeFacts(
        name=f"pool-{manufacturer}",
        acceleratable=True,
        unit_cpu=12,
        unit_ram=192 * GIB,
        local_storage=100 * GIB,
        accelerator_group=f"{manufacturer}-card",
        manufacturer=manufacturer,
        card_memory_mib=card_mib,
        modes=ALL_MODES,
        profiles={p.name: p.memory_mib for p in mig.profiles_for(product)},
        profile_credits={
            p.name: mig.units(p, mig.profiles_for(product)) for p in mig.profiles_for(product)
        },
        largest_node_cards=cards,
    )


def pod_of(planned: Plan) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": planned.requests, "limits": planned.limits},
                }
            ]
        },
    }


@pytest.fixture(scope="module")
def kueue() -> Kueue:
    return Kueue(Client(ApiServer(Store())), SHIPPED)


def charged(kueue: Kueue, planned: Plan, manufacturer: str) -> int:
    counted = kueue.requests(pod_of(planned))
    return int(counted.get(f"credits.gpustack.ai/{manufacturer}", 0))


@dataclass(frozen=True)
class Case:
    name: str
    resources: dict
    credits: int
    manufacturer: str = "nvidia"
    card_mib: int = 24576


CASES = [
    Case("a whole card", {"accelerator": "1"}, 1_600_000),
    Case("two whole cards", {"accelerator": "2"}, 3_200_000),
    Case("one share", {"acceleratorShared": 1}, 160_000),
    Case("a share on each of two cards", {"acceleratorShared": 2}, 320_000),
    Case("the sliced demo's 20 %", {"acceleratorSlicedMemoryPercentage": 20}, 320_000),
    Case("a 7 % slice", {"acceleratorSlicedMemoryPercentage": 7}, 112_000),
    Case("a whole Ascend NPU", {"accelerator": "1"}, 1_600_000, "ascend"),
    Case("an AMD share", {"acceleratorShared": 3}, 480_000, "amd"),
    Case("a MetaX slice", {"acceleratorSlicedMemoryPercentage": 50}, 800_000, "metax"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kueue_charges_what_the_credit_rule_says(kueue, case):
    planned = plan(case.resources, facts(case.manufacturer, case.card_mib))
    assert isinstance(planned, Plan)
    assert planned.credits == case.credits
    assert charged(kueue, planned, case.manufacturer) == case.credits


PARTITIONS = [
    (product, profile.name, card_mib)
    for product, card_mib in (
        ("NVIDIA A100-SXM4-40GB", 40960),
        ("NVIDIA A100-SXM4-80GB", 81920),
        ("NVIDIA H100 80GB HBM3", 81559),
        ("NVIDIA H200", 143771),
        ("NVIDIA A30", 24576),
    )
    for profile in mig.profiles_for(product)
]


@pytest.mark.parametrize(("product", "profile", "card_mib"), PARTITIONS)
def test_kueue_charges_every_partition_profile_what_the_credit_rule_says(
    kueue, product, profile, card_mib
):
    planned = plan({"acceleratorPartitionedProfile": profile}, facts("nvidia", card_mib, product))
    assert isinstance(planned, Plan)
    assert planned.claim.mode is Mode.PARTITIONED and planned.credits > 0
    assert charged(kueue, planned, "nvidia") == planned.credits


def test_only_credits_and_the_host_resources_reach_the_quota(kueue):
    planned = plan({"acceleratorSlicedMemoryPercentage": 20}, facts("nvidia", 24576))
    counted = kueue.requests(pod_of(planned))
    assert set(counted) == {"cpu", "memory", "ephemeral-storage", "credits.gpustack.ai/nvidia"}


# --- what Kueue counts, and how it writes it ----------------------------------------------------


@pytest.mark.parametrize(
    ("resource", "amount", "counted"),
    [
        ("cpu", Fraction(4, 5), Fraction(4, 5)),  # 800m: CPU is counted in millicores
        ("cpu", Fraction(1, 3), Fraction(334, 1000)),  # rounded up to the millicore
        ("memory", Fraction(1, 2), Fraction(1)),  # anything else in whole units, rounded up
        ("credits.gpustack.ai/nvidia", Fraction(320000), Fraction(320000)),
    ],
)
def test_kueue_counts_cpu_in_millicores_and_the_rest_in_units(resource, amount, counted):
    assert simulated_kueue.charged(resource, amount) == counted


@pytest.mark.parametrize(
    ("amount", "written"),
    [
        (0, "0"),
        (4, "4"),
        (Fraction(3, 2), "1500m"),
        (Fraction(4, 5), "800m"),
        (320000, "320k"),
        (1600000, "1600k"),
        (3000000, "3M"),
        (Fraction(-1, 2), "-500m"),
    ],
)
def test_quantities_are_written_in_apimachinerys_canonical_form(amount, written):
    assert kube.format_quantity(amount) == written
    assert kube.quantity(written) == amount


def test_a_four_core_flavor_admits_five_one_core_instances_under_overcommit():
    """Each asks 800m (the overcommit request): Kueue counts 4000m against 4 cores, and the
    sixth waits, 800m short, in Kueue's words."""
    walkthrough = ROOT / "examples" / "walkthrough"
    world = world_from([walkthrough / "namespaces.yaml", walkthrough / "catalog.yaml"])
    world.apply(*small_cpu_node())
    world.reconcile()
    world.apply(*(cpu_instance(f"cpu-{index}") for index in range(6)))
    world.reconcile()
    phases = [world.get("Instance", f"cpu-{i}", "default")["status"]["phase"] for i in range(6)]
    assert phases == ["Ready"] * 5 + ["Pending"]
    (waiting,) = [w for w in world.list("Workload") if not w["status"].get("admission")]
    assert waiting["status"]["conditions"][0]["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        "gpustack--amd-epyc-7r13-linux-amd64-4c, 800m more needed"
    )
    queue = world.get("ClusterQueue", "gpustack--generic-linux-amd64")
    assert queue["status"]["flavorsReservation"][0]["resources"][0]["total"] == "4"


def small_cpu_node() -> list[dict]:
    """A 4-core CPU node: its agent's Devices and its kubelet's Node."""
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    allocatable = {"cpu": "4", "memory": "32Gi", "ephemeral-storage": "200Gi", "pods": "110"}
    cpu = {"vendor": "AMD", "modelName": "AMD EPYC 7R13 Processor", "family": "25", "model": "1"}
    return [
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "Devices",
            "metadata": {"name": "node-small", "labels": {}},
            "spec": {
                "os": "linux",
                "arch": "amd64",
                "cpu": {**cpu, "cores": 4},
                "accelerators": [],
                "allocations": [],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "node-small",
                "labels": {**labels, "kubernetes.io/hostname": "node-small"},
            },
            "status": {
                "capacity": allocatable,
                "allocatable": allocatable,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            },
        },
    ]


def cpu_instance(name: str) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "gpustack--generic-linux-amd64",
            "image": "ubuntu:24.04",
            "command": ["sleep", "86400"],
            "resources": {"cpu": "1"},
            "volume": {"ephemeral": {"capacity": "1Gi"}},
        },
    }


@pytest.mark.parametrize(
    ("selector", "labels", "selected"),
    [
        (None, {"team": "a"}, False),  # a ClusterQueue without a selector admits no namespace
        ({}, {}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "a"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, {"team": "b"}, True),
        (
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["b"]}]},
            {"team": "b"},
            False,
        ),
    ],
)
def test_a_cluster_queues_namespace_selector_is_a_label_selector(selector, labels, selected):
    assert kube.label_selector_matches(selector, labels) is selected


def test_without_the_pod_integration_kueue_leaves_pods_alone(tmp_path):
    """Kueue's Pod webhook runs only when the configuration lists `pod`: a labelled Pod is
    then neither gated nor given a Workload."""
    shipped = yaml.safe_load((SHIPPED / "gpustack.yaml").read_text())
    shipped["integrations"]["frameworks"] = ["batch/job"]
    configuration = tmp_path / "kueue.yaml"
    configuration.write_text(yaml.safe_dump(shipped))
    kueue = Kueue(Client(ApiServer(Store())), configuration)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "labels": {QUEUE: "q"}},
        "spec": {"containers": [{"name": "main", "image": "x"}]},
    }
    kueue.api.apply(pod)
    kueue.run()
    stored = kueue.api.get("Pod", "p", "default")
    assert "schedulingGates" not in stored["spec"]
    assert kueue.api.list("Workload") == []
