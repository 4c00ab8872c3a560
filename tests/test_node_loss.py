"""Node loss: a lost node's Pods are evicted on Kubernetes' schedule and Instances come back.

The node lifecycle stand-in (simulator/gpustack_sim/nodelifecycle.py) plays kube-controller-manager's
NodeLifecycle and taint-eviction controllers and the API server's DefaultTolerationSeconds; the
ResourceFlavors the catalog composes decide what an admitted Pod tolerates. The scenario
`examples/node-loss/` is the acceptance test: a node goes NotReady, and 300 s later its
Instance runs on the other node of its pool.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction

import pytest
from click.testing import CliRunner

from functions.cli import main
from functions.handlers import devices
from functions.handlers.base import Request
from gpustack_sim import World, kube, load_documents, world_from
from gpustack_sim.client import Client
from gpustack_sim.nodelifecycle import (
    NodeLifecycle,
    default_tolerations,
    toleration_seconds,
)
from gpustack_sim.scheduler import Scheduler, Unfit, fit_error
from gpustack_sim.store import Key
from tests.support.schemas import ROOT
from tests.test_scale import catalog_object

NODE_LOSS = ROOT / "examples" / "node-loss"
NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
DEFAULTS = default_tolerations([])
EVERYTHING = {"operator": "Exists"}  # what flavors tolerated before: every taint
GPU = {"key": "nvidia.com/gpu", "operator": "Exists"}
DEDICATED_ANY = {"key": "dedicated", "operator": "Exists"}


def test_the_node_loss_scenario_prints_what_it_recorded():
    """After an intended change, review the difference and refresh the file with
    `gpustack-fn simulate examples/node-loss/scenario.yaml > examples/node-loss/expected.txt`."""
    result = CliRunner().invoke(main, ["simulate", str(NODE_LOSS / "scenario.yaml")])
    assert result.exit_code == 0, result.output
    assert result.output == (NODE_LOSS / "expected.txt").read_text()
    steps = result.output.split("== ")
    assert "Ready   node-t4-a" in steps[1]
    # its kubelet still posts the Pod's status: Ready, on a node that is not (kube-controller-
    # manager marks Pods not Ready only on a node it finds unreachable itself)
    assert "Ready   node-t4-a" in steps[2] and "Ready   node-t4-a" in steps[3]
    assert "Ready   node-t4-b" in steps[4]
    assert "node-t4-a" not in steps[5] and "nvidia-tesla-t4 0/1" in steps[5]


@dataclass(frozen=True)
class Case:
    name: str
    tolerations: list
    taints: list
    want: float | None  # seconds the Pod may stay; None: for ever


CASES = [
    Case(
        "a Pod with the defaults stays 300 s on a NotReady node", [*DEFAULTS, GPU], [NOT_READY], 300
    ),
    Case(
        "a Pod with the defaults stays 300 s on an unreachable node",
        [*DEFAULTS, GPU],
        [UNREACHABLE],
        300,
    ),
    Case("a Pod tolerating nothing of the node's is evicted at once", [GPU], [NOT_READY], 0),
    Case(
        "the first matching toleration decides: defaults before Exists",
        [*DEFAULTS, EVERYTHING],
        [UNREACHABLE],
        300,
    ),
    Case(
        "a Pod created tolerating every taint is never evicted", [EVERYTHING], [UNREACHABLE], None
    ),
    Case(
        "the least seconds among the taints' tolerations count",
        [{**DEFAULTS[0], "tolerationSeconds": 30}, DEFAULTS[1]],
        [NOT_READY, UNREACHABLE],
        30,
    ),
    Case("a node without NoExecute taints keeps every Pod", [], [], None),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_taint_eviction_counts_the_seconds_kubernetes_counts(case):
    assert toleration_seconds(case.tolerations, case.taints) == case.want


def test_default_toleration_seconds_adds_only_what_a_pod_does_not_tolerate():
    assert [t["key"] for t in default_tolerations([GPU])] == [NOT_READY["key"], UNREACHABLE["key"]]
    assert default_tolerations([EVERYTHING]) == []
    assert [t["key"] for t in default_tolerations([DEFAULTS[0]])] == [UNREACHABLE["key"]]
    assert all(t["tolerationSeconds"] == 300 for t in DEFAULTS)


def test_flavors_tolerate_the_gpu_taint_only(world_after_start):
    world = world_after_start
    flavors = {f["metadata"]["name"]: f["spec"] for f in world.list("ResourceFlavor")}
    accelerated = [s for n, s in flavors.items() if "nvidia-tesla-t4" in n]
    assert accelerated and all(s["tolerations"] == [GPU] for s in accelerated)
    assert all("tolerations" not in s for n, s in flavors.items() if "nvidia" not in n)


@pytest.fixture
def world_after_start() -> World:
    world = world_from(
        [NODE_LOSS / "devices.yaml", NODE_LOSS / "nodes.yaml", NODE_LOSS / "cluster.yaml"]
    )
    world.apply(*load_documents(NODE_LOSS / "instance.yaml"))
    world.reconcile()
    assert node_of(world) == "node-t4-a"
    return world


def node_of(world: World) -> str | None:
    pod = world.get("Pod", "trainer", "default")
    return pod["spec"].get("nodeName") if pod else None


def lifecycle(world: World) -> NodeLifecycle:
    return next(c for c in world.controllers if isinstance(c, NodeLifecycle))


def set_ready(world: World, node: str, status: str) -> None:
    condition = {"type": "Ready", "status": status, "reason": "Test", "message": ""}
    world.api.merge_patch(
        "Node", node, {"status": {"conditions": [condition]}}, subresource="status"
    )


def test_an_unreachable_nodes_pod_stays_terminating_until_the_node_is_out_of_service(
    world_after_start,
):
    world = world_after_start
    set_ready(world, "node-t4-a", "Unknown")  # the kubelet stopped posting status
    world.reconcile()
    taints = world.get("Node", "node-t4-a")["spec"]["taints"]
    assert {(t["key"], t["effect"]) for t in taints} == {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    lifecycle(world).sleep(300)
    world.reconcile()
    pod = world.get("Pod", "trainer", "default")
    assert pod["metadata"]["deletionTimestamp"] == "2026-01-01T00:05:30Z"  # evicted at 300 s
    assert node_of(world) == "node-t4-a"  # no kubelet to confirm it: Terminating
    node = world.get("Node", "node-t4-a")
    node["spec"]["taints"].append(
        {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}
    )
    world.api.apply(node)
    world.reconcile()
    assert node_of(world) == "node-t4-b"  # force-deleted, and composed again elsewhere


def test_a_node_that_comes_back_in_time_keeps_its_pod_and_loses_its_taints(world_after_start):
    world = world_after_start
    set_ready(world, "node-t4-a", "False")
    world.reconcile()
    lifecycle(world).sleep(299)
    world.reconcile()
    set_ready(world, "node-t4-a", "True")
    lifecycle(world).sleep(60)
    world.reconcile()
    assert node_of(world) == "node-t4-a"
    assert "taints" not in world.get("Node", "node-t4-a").get("spec", {})
    assert "deletionTimestamp" not in world.get("Pod", "trainer", "default")["metadata"]


# --- a node removed (a cluster autoscaler deleting it) ------------------------------------------

T4_POOL = "gpustack--nvidia-tesla-t4-linux-amd64"


def t4_quota(world: World) -> str:
    """The T4 pool's ClusterQueue quota in credits (one card: 1600k)."""
    queue = world.get("ClusterQueue", T4_POOL)
    (flavor,) = queue["spec"]["resourceGroups"][0]["flavors"]
    return flavor["resources"][0]["nominalQuota"]


def node_objects(world: World, node: str) -> list[str]:
    """What exists for a node beside the Node: its Devices and what the Devices composed."""
    found = [f"Devices/{node}"] if world.get("Devices", node) else []
    for kind in ("ConfigMap", "NodeFeature"):
        found += [
            f"{kind}/{o['metadata']['name']}"
            for o in world.list(kind)
            if o["metadata"]["name"].startswith(f"{node}-gpustack-")
        ]
    return found


def test_a_deleted_node_takes_its_devices_and_its_card_out_of_the_pool(world_after_start):
    """The agent made the Node own its Devices: the garbage collector deletes the Devices, and
    the objects Crossplane composed for it (each owned by the Devices), so the quota shrinks."""
    world = world_after_start
    assert world.get("Devices", "node-t4-b")["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "node-t4-b",
            "uid": world.get("Node", "node-t4-b")["metadata"]["uid"],
        }
    ]
    assert t4_quota(world) == "3200k"
    world.delete("Node", "node-t4-b")  # the idle one: the trainer runs on node-t4-a
    world.reconcile()
    assert node_objects(world, "node-t4-b") == []
    assert len(node_objects(world, "node-t4-a")) == 4  # Devices, summary, two NodeFeatures
    assert t4_quota(world) == "1600k"
    assert node_of(world) == "node-t4-a"


def test_a_pod_on_a_deleted_node_goes_after_the_quarantine_and_its_instance_runs_elsewhere(
    world_after_start,
):
    """The Pod garbage collector deletes a Pod bound to a node that has been missing for 40 s."""
    world = world_after_start
    world.delete("Node", "node-t4-a")
    world.reconcile()
    assert node_of(world) == "node-t4-a"  # bound to a node that is gone, in quarantine
    lifecycle(world).sleep(39)
    world.reconcile()
    assert node_of(world) == "node-t4-a"
    lifecycle(world).sleep(1)
    world.reconcile()
    assert node_of(world) == "node-t4-b"
    assert t4_quota(world) == "1600k"


def test_a_devices_its_node_does_not_own_is_left_out_once_the_node_is_gone():
    """A Devices written before the agent set its owner outlives its Node: the devices handler
    finds no Node, and the node leaves every pool, saying why."""
    world = world_from(
        [NODE_LOSS / "devices.yaml", NODE_LOSS / "nodes.yaml", NODE_LOSS / "cluster.yaml"],
        agents=False,  # no agent: nothing owns the Devices
    )
    world.reconcile()
    assert "ownerReferences" not in world.get("Devices", "node-t4-b")["metadata"]
    world.delete("Node", "node-t4-b")
    world.reconcile()
    devices = world.get("Devices", "node-t4-b")
    why = (
        "its Node does not exist; delete this Devices if the node is gone for good (an "
        "agent's Devices is owned by its Node and goes with it: docs/agent.md)"
    )
    assert devices["status"]["leftOut"] == why
    assert [r.message for r in world.results[Key("Devices", "", "node-t4-b")]] == [
        f"node node-t4-b is left out of every pool: {why}"
    ]
    assert world.table("Devices").splitlines()[1:] == [
        "node-t4-a   true      intel-xeon-platinum-8259cl   nvidia-tesla-t4 1/1",
        "node-t4-b   false     intel-xeon-platinum-8259cl   nvidia-tesla-t4 1/1",
    ]
    wide = world.table("Devices", wide=True).splitlines()  # kubectl get devices -o wide
    assert wide[0].split() == ["NAME", "MANAGED", "CPU", "ACCELERATORS", "LEFT-OUT"]
    assert wide[1].endswith("nvidia-tesla-t4 1/1")
    assert wide[2].endswith(f"nvidia-tesla-t4 1/1   {why}")
    assert t4_quota(world) == "1600k"


NODE_T4_A = load_documents(NODE_LOSS / "nodes.yaml")[0]


@pytest.mark.parametrize(
    ("nodes", "managed", "left_out"),
    [
        (None, True, None),  # the first call of a reconcile: the Node not asked for yet
        ([NODE_T4_A], True, None),
        ([], False, devices.NODE_GONE),  # asked for, and none found
    ],
    ids=["not read yet", "there", "gone"],
)
def test_the_devices_handler_leaves_out_a_node_whose_node_is_gone(nodes, managed, left_out):
    obj = load_documents(NODE_LOSS / "devices.yaml")[0]
    required = {"catalog": [catalog_object()]} | ({"node": nodes} if nodes is not None else {})
    desired = devices.compose(Request.of(obj, required=required))
    summary = desired.resources[devices.SUMMARY]["data"]["summary"]
    assert json.loads(summary)["managed"] is managed
    assert desired.status.get("leftOut") == left_out
    there = devices.compose(Request.of(obj, required={"catalog": [catalog_object()]}))
    assert (desired.status["inputs"] == there.status["inputs"]) is (left_out is None)


# --- accelerator nodes tainted with another key -----------------------------------------------

DEDICATED = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}  # the cluster's own


@pytest.mark.parametrize(
    ("tolerated", "flavor_tolerations", "node", "why"),
    [
        (
            [],
            [GPU],
            None,
            "0/2 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu}. preemption: "
            "0/2 nodes are available: 2 Preemption is not helpful for scheduling.",
        ),
        (
            [{"key": "dedicated", "value": "gpu"}],
            [GPU, {"key": "dedicated", "operator": "Equal", "value": "gpu"}],
            "node-t4-a",
            "",
        ),
        ([{"key": "dedicated", "operator": "Exists"}, GPU], [GPU, DEDICATED_ANY], "node-t4-a", ""),
    ],
    ids=["not tolerated", "tolerated by value", "tolerated by key, the GPU taint once"],
)
def test_gpu_nodes_tainted_with_another_key_take_pods_once_the_catalog_tolerates_it(
    tolerated, flavor_tolerations, node, why
):
    world = tainted_world(tolerated)
    flavors = [
        f for f in world.list("ResourceFlavor") if "nvidia-tesla-t4" in f["metadata"]["name"]
    ]
    assert flavors and all(f["spec"]["tolerations"] == flavor_tolerations for f in flavors)
    assert node_of(world) == node
    status = world.get("Instance", "trainer", "default")["status"]
    assert (status["phase"], status.get("phaseMessage", "")) == (
        ("Pending", why) if node is None else ("Ready", "")
    )


def test_a_pod_on_a_node_tainted_with_another_key_is_still_evicted_when_the_node_is_lost():
    world = tainted_world([{"key": "dedicated", "operator": "Exists"}])
    assert node_of(world) == "node-t4-a"
    set_ready(world, "node-t4-a", "False")
    world.reconcile()
    lifecycle(world).sleep(300)
    world.reconcile()
    assert node_of(world) == "node-t4-b"


def tainted_world(tolerated: list[dict]) -> World:
    """The node-loss cluster with both GPU nodes tainted `dedicated=gpu:NoSchedule`, the
    Catalog tolerating `tolerated`, after the Instance's first reconcile."""
    world = world_from([NODE_LOSS / "devices.yaml", NODE_LOSS / "nodes.yaml"])
    for name in ("node-t4-a", "node-t4-b"):
        found = world.get("Node", name)
        found.setdefault("spec", {})["taints"] = [DEDICATED]
        world.api.apply(found)
    cluster = load_documents(NODE_LOSS / "cluster.yaml")
    catalog = next(d for d in cluster if d["kind"] == "Catalog")
    catalog["spec"] = {"acceleratedFlavorTolerations": tolerated}
    world.apply(*cluster, *load_documents(NODE_LOSS / "instance.yaml"))
    world.reconcile()
    return world


# --- what kube-scheduler reads of a node: its taints and its cordon, never its Ready ------------

UNREACHABLE_NODE = {
    "metadata": {"name": "lost", "labels": {}},
    "spec": {"taints": [{**UNREACHABLE, "effect": "NoSchedule"}, UNREACHABLE]},
    "status": {"conditions": [{"type": "Ready", "status": "Unknown"}], "allocatable": {}},
}
CORDONED_NODE = {
    "metadata": {"name": "cordoned", "labels": {}},
    "spec": {"unschedulable": True},
    "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {}},
}
CORDON = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("node", "tolerations", "node_selector", "why"),
    [
        (
            UNREACHABLE_NODE,
            [GPU],
            {},
            "node(s) had untolerated taint {node.kubernetes.io/unreachable: }",
        ),
        (UNREACHABLE_NODE, [EVERYTHING], {}, None),  # why flavors no longer tolerate everything
        (CORDONED_NODE, [GPU], {}, "node(s) were unschedulable"),
        (CORDONED_NODE, [CORDON], {}, None),
        (  # the first filter that fails is the reason: taints before affinity
            UNREACHABLE_NODE,
            [],
            {"pool": "a"},
            "node(s) had untolerated taint {node.kubernetes.io/unreachable: }",
        ),
    ],
    ids=[
        "an unreachable node, by its taint",
        "an unreachable node takes a Pod tolerating every taint",
        "a cordoned node",
        "a cordoned node takes a Pod tolerating the cordon",
        "taints are judged before affinity",
    ],
)
def test_the_scheduler_judges_a_node_by_its_taints_and_cordon_not_its_ready(
    node, tolerations, node_selector, why
):
    scheduler = Scheduler(Client(world_from([]).api))
    pod = {"spec": {"tolerations": tolerations, "nodeSelector": node_selector, "containers": []}}
    unfit = scheduler.unfit(pod, {}, node)
    assert (unfit.reasons if unfit else None) == ((why,) if why else None)


def test_a_cordoned_node_is_tainted_until_it_is_uncordoned(world_after_start):
    world = world_after_start
    world.api.merge_patch("Node", "node-t4-b", {"spec": {"unschedulable": True}})
    world.reconcile()
    assert world.get("Node", "node-t4-b")["spec"]["taints"] == [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ]
    world.api.merge_patch("Node", "node-t4-b", {"spec": {"unschedulable": False}})
    world.reconcile()
    assert "taints" not in world.get("Node", "node-t4-b")["spec"]


@pytest.mark.parametrize(
    ("affinity_terms", "labels", "selected"),
    [
        ([{}], {"pool": "a"}, False),  # an empty term selects no node
        ([{}, {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}], {"pool": "a"}, True),
        (
            [{"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["9"]}]}],
            {"n": "10"},
            True,
        ),
        (
            [{"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["9"]}]}],
            {"n": "1_0"},
            False,
        ),
    ],
    ids=["empty term", "empty term ORed", "Gt", "Gt reads Go's integers"],
)
def test_required_node_affinity_as_kube_scheduler_reads_it(affinity_terms, labels, selected):
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": affinity_terms
                }
            }
        }
    }
    assert kube.selects(spec, labels) is selected


def test_an_unschedulable_pods_message_is_kube_schedulers_fit_error():
    full = {"metadata": {"name": "full", "labels": {}}, "status": {"allocatable": {"pods": "0"}}}
    scheduler = Scheduler(Client(world_from([]).api))
    pod = {"spec": {"containers": []}}
    short = scheduler.unfit(pod, {"cpu": Fraction(1)}, full)
    assert short == Unfit(("Too many pods", "Insufficient cpu"), resolvable=True)
    tainted = scheduler.unfit(pod, {}, UNREACHABLE_NODE)
    assert fit_error(3, [short, tainted, tainted]) == (
        "0/3 nodes are available: 1 Insufficient cpu, 1 Too many pods, 2 node(s) had untolerated"
        " taint {node.kubernetes.io/unreachable: }. preemption: 0/3 nodes are available: 1 No "
        "preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
    )


# --- zone disruption: when the node lifecycle controller stops tainting -------------------------


def node(name: str, ready: str, zone: str = "") -> dict:
    labels = {"topology.kubernetes.io/zone": zone} if zone else {}
    conditions = [{"type": "Ready", "status": ready}]
    return {"metadata": {"name": name, "labels": labels}, "status": {"conditions": conditions}}


@pytest.mark.parametrize(
    ("nodes", "tainting"),
    [
        ([node("a", "True"), node("b", "False")], {"": "tainting"}),
        ([node("a", "Unknown"), node("b", "False")], {"": "untainting"}),
        ([node(n, "False") for n in "abc"] + [node("d", "True")], {"": "halted"}),
        ([node(n, "False") for n in "ab"] + [node("c", "True")], {"": "tainting"}),
        (
            [node(n, "False") for n in "abc"] + [node(f"r{i}", "True") for i in range(3)],
            {"": "tainting"},
        ),
        (
            [node(n, "False") for n in "abc"] + [node(f"r{i}", "True") for i in range(48)],
            {"": "tainting"},
        ),
        (
            [node(f"d{i}", "False") for i in range(40)]
            + [node(f"r{i}", "True") for i in range(20)],
            {"": "tainting"},
        ),
        (
            [node("a", "False", "z1"), node("b", "True", "z2")],
            {":\x00:z1": "tainting", ":\x00:z2": "tainting"},
        ),
    ],
    ids=[
        "half down: normal",
        "every node down: the controller blames itself and untaints",
        "three of four down in a small zone: tainting halts",
        "two down: never partial",
        "half down, three: under 55 %",
        "three of 51: normal",
        "40 of 60 down in a large zone: slowed, not halted (rates not played)",
        "one zone fully down beside a healthy one: tainted at the normal rate",
    ],
)
def test_the_zones_disruption_decides_the_noexecute_tainting(nodes, tainting):
    from gpustack_sim.nodelifecycle import no_execute_tainting

    assert no_execute_tainting(nodes) == tainting


def test_when_every_node_is_lost_no_pod_is_evicted_and_the_instance_waits(world_after_start):
    """Kubernetes reads a cluster whose every node stopped at once as its own outage: it takes the
    NoExecute taints off and evicts nothing, so the Instance stays on its node, not Ready."""
    world = world_after_start
    set_ready(world, "node-t4-a", "Unknown")  # unreachable: its Pod is marked not Ready
    world.reconcile()
    assert ("node.kubernetes.io/unreachable", "NoExecute") in {
        (t["key"], t["effect"]) for t in world.get("Node", "node-t4-a")["spec"]["taints"]
    }
    set_ready(world, "node-t4-b", "False")
    lifecycle(world).sleep(600)
    world.reconcile()
    for name in ("node-t4-a", "node-t4-b"):
        effects = {t["effect"] for t in world.get("Node", name)["spec"].get("taints", [])}
        assert effects == {"NoSchedule"}
    assert node_of(world) == "node-t4-a"
    assert "deletionTimestamp" not in world.get("Pod", "trainer", "default")["metadata"]
    assert world.get("Instance", "trainer", "default")["status"]["phase"] == "NotReady"


def test_in_a_halted_zone_a_lost_node_keeps_its_taint_until_it_is_ready_again():
    from gpustack_sim.apiserver import ApiServer
    from gpustack_sim.nodelifecycle import HALTED
    from gpustack_sim.store import Store

    api = Client(ApiServer(Store()))
    lifecycle = NodeLifecycle(api)
    tainted = {
        "key": "node.kubernetes.io/not-ready",
        "effect": "NoExecute",
        "timeAdded": "2026-01-01T00:00:00Z",
    }

    def taints_after(name: str, ready: str) -> list:
        api.apply(
            {"apiVersion": "v1", "kind": "Node", **node(name, ready), "spec": {"taints": [tainted]}}
        )
        lifecycle.taint(api.get("Node", name), HALTED)
        return api.get("Node", name)["spec"].get("taints", [])

    not_ready_no_schedule = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    assert taints_after("lost", "False") == [tainted, not_ready_no_schedule]
    assert taints_after("back", "True") == []
