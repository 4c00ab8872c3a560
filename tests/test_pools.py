"""The pool handlers over the walkthrough cluster (seed 000 §1, §2, §4, §5), run the way
Crossplane runs them: each composite's pipeline with the render loop, its desired state
applied, Kueue standing by. Every composed object validates against the upstream schemas."""

from __future__ import annotations

import copy

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions import pipeline
from functions.handlers import HANDLERS
from functions.handlers.base import InputError, Request
from functions.server import run_function
from gpustack_sim import World, kube, load_documents, world_from
from gpustack_sim.apiserver import Refused
from gpustack_sim.nodelifecycle import NodeLifecycle
from tests.support import schemas
from tests.support.schemas import ROOT

WALKTHROUGH = ROOT / "examples" / "walkthrough"
A10G, T4, GENERIC = (
    "gpustack--nvidia-a10g-linux-amd64",
    "gpustack--nvidia-tesla-t4-linux-amd64",
    "gpustack--generic-linux-amd64",
)
AWARE_A10G = "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64"
AWARE_T4 = "gpustack--intel-xeon-platinum-8259cl--nvidia-t-5b59e508edc027b7"  # fitted to 63
A10G_CARD = "GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575"


def cluster(run=None, agents=False) -> World:
    """The walkthrough cluster; the tests state what the nodes report (the agent's part)."""
    world = world_from(
        [
            WALKTHROUGH / "devices.yaml",
            WALKTHROUGH / "nodes.yaml",
            WALKTHROUGH / "namespaces.yaml",
            WALKTHROUGH / "catalog.yaml",
        ],
        run,
        agents=agents,
    )
    world.reconcile()
    return world


@pytest.fixture
def world() -> World:
    return cluster()


def rows(world: World, kind: str = "InstanceType") -> dict[str, list[str]]:
    """The table `kubectl get` prints, as {NAME: the other cells}."""
    lines = world.table(kind).splitlines()
    starts = [
        i for i, ch in enumerate(lines[0]) if ch != " " and (i == 0 or lines[0][i - 1] == " ")
    ]

    def cells(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]

    return {cells(line)[0]: cells(line)[1:] for line in lines[1:]}


def views(world: World) -> dict[str, tuple[str, str]]:
    return {name: (row[2], row[3]) for name, row in rows(world).items()}


INITIAL = {
    GENERIC: ("0/0 0/0 0/0 0/0", "48/72"),
    A10G: ("1/1 1/10 100/100 0/0", "0/0"),
    T4: ("4/5 4/50 100/500 0/0", "0/0"),
}


def test_section_1_instance_types(world):
    assert rows(world) == {
        GENERIC: [
            "gpustack-fnv64-3b93966fd73eb9ec",
            "1/2Gi/100Gi",
            "0/0 0/0 0/0 0/0",
            "48/72",
            "Active",
        ],
        A10G: [
            "gpustack-fnv64-c4680bb149644f1c",
            "8/64Gi/100Gi",
            "1/1 1/10 100/100 0/0",
            "0/0",
            "Active",
        ],
        T4: [
            "gpustack-fnv64-6b371caa2da0b799",
            "8/32Gi/100Gi",
            "4/5 4/50 100/500 0/0",
            "0/0",
            "Active",
        ],
    }


def test_section_1_resource_flavors_and_cluster_queues(world):
    assert [f["metadata"]["name"] for f in world.list("ResourceFlavor")] == [
        "gpustack--amd-epyc-7r13-linux-amd64-16c",
        "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",
        "gpustack--amd-epyc-7r32-linux-amd64-4c",
        "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
        "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d",
        "gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c",
        "gpustack--intel-xeon-platinum-8259cl-linux-amd64-4c",
    ]
    flavor = world.get("ResourceFlavor", "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d")
    assert flavor["spec"] == {
        "nodeLabels": {
            "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
            "acceleratable.feature.gpustack.ai/nvidia-a10g.count": "1",
            "general.feature.gpustack.ai/amd-epyc-7r32": "true",
            "gpustack.ai/managed": "true",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
        },
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],  # not every taint
    }
    assert (
        flavor["metadata"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-a10g.capacity"]
        == "1"
    )
    assert flavor["metadata"]["annotations"]["note.gpustack.ai/product"] == "NVIDIA-A10G"
    queue = world.get("ClusterQueue", A10G)
    assert {
        k: v for k, v in queue["metadata"]["labels"].items() if not k.startswith("crossplane.io/")
    } == {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "feature.gpustack.ai/acceleratable": "true",
        "acceleratable.feature.gpustack.ai/nvidia-a10g": "true",
        "resource.gpustack.ai/type": "instancetypes",
    }
    assert queue["spec"]["resourceGroups"] == [
        {
            "coveredResources": ["credits.gpustack.ai/nvidia"],
            "flavors": [
                {
                    "name": "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",
                    "resources": [{"name": "credits.gpustack.ai/nvidia", "nominalQuota": "1600k"}],
                }
            ],
        }
    ]
    generic = world.get("ClusterQueue", GENERIC)["spec"]["resourceGroups"][0]
    assert [
        (f["name"].rsplit("-", 1)[1], f["resources"][0]["nominalQuota"]) for f in generic["flavors"]
    ] == [
        ("4c", "4"),
        ("4c", "4"),
        ("16c", "16"),
        ("48c", "48"),
    ]
    assert generic["coveredResources"] == ["cpu"]


def test_section_1_local_queues_in_every_namespace_but_the_reserved(world):
    queues = {(q["metadata"]["namespace"], q["metadata"]["name"]) for q in world.list("LocalQueue")}
    assert ("default", "gpustack-fnv64-c4680bb149644f1c") in queues
    assert {ns for ns, _ in queues} == {"default", "kube-public"}
    assert len(queues) == 6
    local = world.get("LocalQueue", "gpustack-fnv64-c4680bb149644f1c", "default")
    assert local["spec"]["clusterQueue"] == A10G
    assert local["metadata"]["annotations"]["schedule.gpustack.ai/queue"] == A10G


def test_the_api_server_gives_a_local_queue_kueues_default_stop_policy(world):
    schemas.require_schemas()  # the default comes from Kueue's schema
    local = world.get("LocalQueue", "gpustack-fnv64-c4680bb149644f1c", "default")
    assert local["spec"] == {"clusterQueue": A10G, "stopPolicy": "None"}


def test_section_1_catalog_and_instance_type_detail(world):
    assert rows(world, "InstanceTypeFlavor") == {
        "gpustack--generic": ["generic", "", "false", "generic", "", "", "", ""],
        "gpustack--nvidia-a10g": [
            "",
            "nvidia-a10g",
            "true",
            "nvidia",
            "NVIDIA-A10G",
            "24Gi",
            "10240",
            "true",
        ],
        "gpustack--nvidia-tesla-t4": [
            "",
            "nvidia-tesla-t4",
            "true",
            "nvidia",
            "Tesla-T4",
            "16Gi",
            "2560",
            "true",
        ],
    }
    a10g = world.get("InstanceType", A10G)
    assert a10g["metadata"]["labels"]["schedule.gpustack.ai/derived-from-node"] == "true"
    assert (
        a10g["metadata"]["labels"]["schedule.gpustack.ai/queue-entrance"]
        == "gpustack-fnv64-c4680bb149644f1c"
    )
    assert a10g["spec"]["unitResources"] == {"cpu": "8", "ram": "64Gi"}
    status = a10g["status"]
    assert status["accelerator"] == {"capacity": "1", "onceMaxRequest": "1", "remaining": "1"}
    assert status["acceleratorShared"] == {
        "capacity": "10",
        "onceMaxRequest": "1",
        "remaining": "10",
    }
    assert status["acceleratorSliced"] == {
        "capacity": "100",
        "onceMaxRequest": "100",
        "remaining": "100",
    }
    assert status["detail"]["manufacturer"] == "nvidia"
    assert status["detail"]["product"] == "NVIDIA-A10G"
    assert status["detail"]["family"] == "Ampere"
    assert status["detail"]["memory"] == "24Gi"
    assert status["detail"]["slicedDetail"]["logical"] == {
        "count": 128,
        "coresPercentageOvercommit": True,
    }
    status = world.get("Catalog", "default")["status"]
    counts = {k: status[k] for k in ("nodes", "managedNodes", "flavors", "pools", "accelerators")}
    assert counts == {"nodes": 4, "managedNodes": 4, "flavors": 7, "pools": 3, "accelerators": 6}


def test_section_1_node_features(world):
    worker = world.get("NodeFeature", "node-a10g-gpustack-worker", "gpustack-system")
    assert worker["spec"]["labels"] == {
        "general.feature.gpustack.ai/amd": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32": "true",
        "general.feature.gpustack.ai/amd-epyc-7r32.count": "4",
        "gpustack.ai/managed": "true",
    }
    assert worker["metadata"]["labels"]["nfd.node.kubernetes.io/node-name"] == "node-a10g"
    manager = world.get("NodeFeature", "node-a10g-gpustack-device-manager", "gpustack-system")
    assert (
        manager["spec"]["labels"]["acceleratable.feature.gpustack.ai/nvidia-a10g.product"]
        == "NVIDIA-A10G"
    )
    assert (
        manager["spec"]["labels"]["sliced-max-free-units.fit.gpustack.ai/nvidia-a10g"] == "1600000"
    )
    assert manager["spec"]["labels"]["shared-free-cards.fit.gpustack.ai/nvidia-a10g"] == "1"
    assert manager["spec"]["labels"]["exclusive-free-cards.fit.gpustack.ai/nvidia-a10g"] == "1"
    assert world.get("NodeFeature", "node-cpu-gpustack-device-manager", "gpustack-system") is None
    ledger = world.get("Devices", "node-a10g")["status"]["groups"]
    assert ledger == [
        {
            "id": "a10g",
            "key": "nvidia-a10g",
            "manufacturer": "nvidia",
            "accelerators": [{"id": A10G_CARD, "index": 0, "mode": 0, "remaining": 1600000}],
        }
    ]


def test_section_2_a_node_leaves_management_and_comes_back(world):
    world.patch("Devices", "node-a10g", {"managed": False})
    world.reconcile()
    assert views(world) == {
        GENERIC: ("0/0 0/0 0/0 0/0", "48/68"),
        A10G: ("0/0 0/0 0/0 0/0", "0/0"),
        T4: ("4/5 4/50 100/500 0/0", "0/0"),
    }
    flavors = [f["metadata"]["name"] for f in world.list("ResourceFlavor")]
    assert "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d" not in flavors
    assert world.get("ClusterQueue", A10G)["spec"]["resourceGroups"] == []
    assert (
        world.get("NodeFeature", "node-a10g-gpustack-worker", "gpustack-system")["spec"]["labels"][
            "gpustack.ai/managed"
        ]
        == "false"
    )
    world.patch("Devices", "node-a10g", {"managed": None})
    world.reconcile()
    assert views(world) == INITIAL
    assert len(world.list("ResourceFlavor")) == 7


CUSTOM = ROOT / "examples" / "walkthrough" / "instancetype-a10g-12c128g.yaml"


def allocate(world: World, node: str, *allocations: dict) -> None:
    world.patch("Devices", node, {"allocations": list(allocations)})
    world.reconcile()


def test_section_3_a_20_percent_slice(world):
    allocate(
        world,
        "node-a10g",
        {
            "pod": "default/sliced-demo",
            "container": "main",
            "device": A10G_CARD,
            "mode": "Sliced",
            "memoryPercentage": 20,
            "coresPercentage": 100,
        },
    )
    assert views(world)[A10G] == ("0/0 0/0 80/80 0/0", "0/0")
    manager = world.get("NodeFeature", "node-a10g-gpustack-device-manager", "gpustack-system")
    assert (
        manager["spec"]["labels"]["sliced-max-free-units.fit.gpustack.ai/nvidia-a10g"] == "1280000"
    )
    # A sliced card is no whole card any more.
    assert manager["spec"]["labels"]["exclusive-free-cards.fit.gpustack.ai/nvidia-a10g"] == "0"
    allocate(world, "node-a10g")
    assert views(world)[A10G] == INITIAL[A10G]


def test_section_4_custom_type_is_a_consistent_sibling(world):
    world.apply(*load_documents(CUSTOM))
    world.reconcile()
    assert rows(world)["a10g-12c128g"] == [
        "gpustack-fnv64-d4c0e6cd72686015",
        "12/128Gi/200Gi",
        "1/1 1/10 100/100 0/0",
        "0/0",
        "Active",
    ]
    allocate(
        world,
        "node-a10g",
        {
            "pod": "default/custom-demo",
            "container": "main",
            "device": A10G_CARD,
            "mode": "Exclusive",
        },
    )
    table = views(world)
    assert table["a10g-12c128g"] == table[A10G] == ("0/0 0/0 0/0 0/0", "0/0")
    assert table[T4] == INITIAL[T4]
    world.delete("InstanceType", "a10g-12c128g")
    allocate(world, "node-a10g")
    assert "a10g-12c128g" not in rows(world)
    assert world.get("ClusterQueue", "a10g-12c128g") is None
    assert views(world) == INITIAL


AWARE_ROWS = {
    "gpustack--amd-epyc-7r13-linux-amd64": ("0/0 0/0 0/0 0/0", "16/16"),
    AWARE_A10G: ("1/1 1/10 100/100 0/0", "0/0"),
    "gpustack--amd-epyc-7r32-linux-amd64": ("0/0 0/0 0/0 0/0", "4/4"),
    AWARE_T4: ("4/5 4/50 100/500 0/0", "0/0"),
    "gpustack--intel-xeon-platinum-8259cl-linux-amd64": ("0/0 0/0 0/0 0/0", "48/52"),
}


def test_section_5_awareness_adds_pools_and_keeps_the_old_ones(world):
    flavors_before = world.list("ResourceFlavor")
    world.patch("Catalog", "default", {"instanceTypeAwareCpuManufacturer": True})
    world.reconcile()
    assert views(world) == AWARE_ROWS | INITIAL
    assert rows(world)[AWARE_A10G][0] == "gpustack-fnv64-029fd9550e0c70bd"
    assert world.list("ResourceFlavor") == flavors_before
    assert list(rows(world, "InstanceTypeFlavor")) == [
        "gpustack--amd-epyc-7r13",
        "gpustack--amd-epyc-7r32",
        "gpustack--amd-epyc-7r32--nvidia-a10g",
        "gpustack--intel-xeon-platinum-8259cl",
        "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4",
    ]
    assert rows(world, "InstanceTypeFlavor")["gpustack--intel-xeon-platinum-8259cl"][:5] == [
        "intel-xeon-platinum-8259cl",
        "",
        "false",
        "intel",
        "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
    ]
    labels = world.get("ClusterQueue", AWARE_A10G)["metadata"]["labels"]
    assert labels["general.feature.gpustack.ai/amd-epyc-7r32"] == "true"
    allocate(
        world,
        "node-a10g",
        {
            "pod": "default/custom-demo",
            "container": "main",
            "device": A10G_CARD,
            "mode": "Exclusive",
        },
    )
    assert views(world)[AWARE_A10G] == views(world)[A10G] == ("0/0 0/0 0/0 0/0", "0/0")


def test_section_5_a_deleted_stale_type_stays_deleted_and_a_current_one_returns(world):
    world.patch("Catalog", "default", {"instanceTypeAwareCpuManufacturer": True})
    world.reconcile()
    world.delete("InstanceType", GENERIC)
    world.delete("InstanceType", AWARE_A10G)
    world.reconcile()
    names = set(rows(world))
    assert GENERIC not in names
    assert AWARE_A10G in names
    assert world.get("ClusterQueue", GENERIC) is None
    world.patch("Catalog", "default", {"instanceTypeAwareCpuManufacturer": False})
    world.reconcile()
    assert GENERIC in set(rows(world))  # current again: composed again
    assert list(rows(world, "InstanceTypeFlavor")) == [
        "gpustack--generic",
        "gpustack--nvidia-a10g",
        "gpustack--nvidia-tesla-t4",
    ]


def test_inactive_holds_the_queue(world):
    world.patch("InstanceType", T4, {"inactive": True})
    world.reconcile()
    assert world.get("ClusterQueue", T4)["spec"]["stopPolicy"] == "Hold"
    assert world.get("InstanceType", T4)["status"]["phase"] == "Inactive"
    assert world.get("InstanceType", T4)["status"]["phaseMessage"] == "cluster queue is held"
    # Kueue's own words for it, on the queue and on each of its LocalQueues
    (active,) = world.get("ClusterQueue", T4)["status"]["conditions"]
    assert (active["status"], active["reason"], active["message"]) == (
        "False",
        "Stopped",
        "Can't admit new workloads: is stopped.",
    )
    locals_ = [q for q in world.list("LocalQueue") if q["spec"]["clusterQueue"] == T4]
    assert locals_ and all(
        (c["status"], c["reason"]) == ("False", "ClusterQueueIsInactive")
        for q in locals_
        for c in q["status"]["conditions"]
    )


def test_every_composed_object_validates_against_the_upstream_schemas(world):
    world.apply(*__import__("gpustack_sim", fromlist=["load_documents"]).load_documents(CUSTOM))
    world.patch(
        "Catalog",
        "default",
        {"instanceTypeAwareCpuManufacturer": True, "nodeDevicesAdmissionCheck": True},
    )
    world.reconcile()
    checked = 0
    for kind in ("ResourceFlavor", "ClusterQueue", "LocalQueue", "NodeFeature"):
        for obj in world.list(kind):
            desired = {k: v for k, v in obj.items() if k != "status"}
            assert schemas.validate_upstream(desired) == [], obj["metadata"]["name"]
            checked += 1
    for kind in ("InstanceType", "InstanceTypeFlavor", "Devices", "Catalog"):
        for obj in world.list(kind):
            assert schemas.validate_xr(obj) == [], obj["metadata"]["name"]
            checked += 1
    assert checked > 40


def test_a_devices_spec_error_is_refused_by_the_api_server_and_fatal_offline(world):
    broken = {
        "accelerators": [
            {"manufacturer": "nvidia", "devices": [{"uuid": "GPU-x", "product": "Tesla T4"}]}
        ]
    }
    with pytest.raises(Refused) as refused:
        world.patch("Devices", "node-t4-a", broken)
    assert str(refused.value) == (
        'Devices.worker.gpustack.ai "node-t4-a" is invalid: '
        "spec.accelerators[0].devices[0].memoryMiB: Required value"
    )
    # Offline no API server checks the spec: the devices handler refuses it, naming the field,
    # and keeps what earlier steps composed.
    devices = copy.deepcopy(world.get("Devices", "node-t4-a"))
    devices["spec"].update(broken)
    composition = world.crossplane.compositions["Devices"]
    earlier = fnv1.State()
    earlier.resources["earlier"].resource.update({"kind": "Earlier"})
    req = pipeline.request(devices, {}, composition["spec"]["pipeline"][0]["input"], earlier)
    rsp = run_function(req)
    assert [(r.severity, r.message) for r in rsp.results] == [
        (
            fnv1.SEVERITY_FATAL,
            "spec.accelerators[0].devices[0].memoryMiB: is required; the node agent writes this field",
        )
    ]
    assert rsp.desired == earlier


@pytest.mark.parametrize("spec", [[1, {"a": 2}], "a string", 7], ids=["list", "string", "number"])
def test_a_devices_spec_that_is_no_object_is_refused_naming_spec_through_either_path(spec):
    """A fuzz finding: a list as `spec` raised TypeError computing the inputs digest from
    plain dicts (offline render, tests) while the protobuf path refused it."""
    devices = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {"name": "node-x"},
        "spec": spec,
        "status": {"inputs": "an earlier digest"},
    }
    request = Request.of(devices, required={"catalog": []})
    handler = HANDLERS["devices"]
    with pytest.raises(InputError) as refused:
        handler.compose(request.with_requirements(handler.requirements(request)))
    assert refused.value.field == "spec"
    req = pipeline.request(devices, {}, {"apiVersion": "fn.gpustack.ai/v1beta1", "kind": "Input",
                                         "handler": "devices"})  # fmt: skip
    messages = [(r.severity, r.message) for r in run_function(req).results]
    assert messages == [(fnv1.SEVERITY_FATAL, str(refused.value))]


def test_the_same_through_real_grpc():
    import grpc
    from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

    from tests.support.grpc_server import function_server, wait_ready
    from tests.support.patience import HANG

    with function_server("--insecure") as address, grpc.insecure_channel(address) as channel:
        wait_ready(channel)
        stub = grpcv1.FunctionRunnerServiceStub(channel)
        over_grpc = cluster(run=lambda req: stub.RunFunction(req, timeout=HANG))
        over_grpc.patch("Catalog", "default", {"instanceTypeAwareCpuManufacturer": True})
        over_grpc.reconcile()
    in_process = cluster()
    in_process.patch("Catalog", "default", {"instanceTypeAwareCpuManufacturer": True})
    in_process.reconcile()
    assert over_grpc.store.snapshot() == in_process.store.snapshot()
    assert views(over_grpc) == AWARE_ROWS | INITIAL


TRAINING = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "training",
        "namespace": "default",
        "labels": {"kueue.x-k8s.io/queue-name": "gpustack-fnv64-c4680bb149644f1c"},
    },
    "spec": {
        "containers": [
            {"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        ]
    },
}
DRAINED = [  # Kueue's events: evict.go `reportEvictedWorkload`, reconciler.go `stopJob`
    "Workload default/pod-training EvictedDueToClusterQueueStopped: The ClusterQueue is stopped",
    "Pod default/training Stopped: The ClusterQueue is stopped",
]


def training_on_the_a10g() -> World:
    world = cluster(agents=True)
    world.apply(TRAINING)
    world.reconcile()
    assert world.get("Pod", "training", "default")["spec"]["nodeName"] == "node-a10g"
    return world


def set_ready(world: World, node: str, status: str) -> None:
    condition = {"type": "Ready", "status": status, "reason": "Test", "message": ""}
    world.api.merge_patch(
        "Node", node, {"status": {"conditions": [condition]}}, subresource="status"
    )


def round_until_stopped(world: World) -> dict:
    """Run rounds, every controller once each, until Kueue has stopped the Pod; the Pod then."""
    for _ in range(8):
        for controller in world.controllers:
            controller.run()
        pod = world.get("Pod", "training", "default")
        if pod is None or "deletionTimestamp" in pod["metadata"]:
            return pod
    raise AssertionError("Kueue never stopped the Pod")


def test_a_pool_that_lost_every_flavor_drains_its_queue_while_it_holds_work():
    world = training_on_the_a10g()
    world.patch("Devices", "node-a10g", {"managed": False})
    world.reconcile()
    # The queue was set to HoldAndDrain, Kueue evicted the workload and deleted its Pod
    # gracefully, the kubelet confirmed, and the queue, holding nothing, opens again.
    assert world.events == DRAINED
    assert world.get("Pod", "training", "default") is None
    assert world.get("ClusterQueue", A10G)["spec"]["stopPolicy"] == "None"
    assert views(world)[A10G] == ("0/0 0/0 0/0 0/0", "0/0")


def test_a_drained_pod_terminates_and_goes_once_its_kubelet_confirms():
    world = training_on_the_a10g()
    world.patch("Devices", "node-a10g", {"managed": False})
    pod = round_until_stopped(world)
    assert pod is not None, "deleted outright: Kueue's Stop deletes gracefully"
    (target,) = [c for c in pod["status"]["conditions"] if c["type"] == "TerminationTarget"]
    assert (target["status"], target["reason"], target["message"]) == (
        "True",
        "WorkloadEvictedDueToClusterQueueStopped",
        "The ClusterQueue is stopped",
    )
    assert world.get("ClusterQueue", A10G)["status"]["reservingWorkloads"] == 0
    for controller in world.controllers:  # one more round: node-a10g's kubelet confirms
        controller.run()
    assert world.get("Pod", "training", "default") is None
    assert world.get("Workload", "pod-training", "default") is None  # it went with its Pod


def test_a_drain_releases_the_quota_of_a_pod_left_terminating_on_an_unreachable_node():
    """Kueue finishes the Workload of a Pod being deleted (FinalizeOrphanedWorkload), so the
    queue's reservation drops when the drain starts, not when the Pod is gone."""
    world = training_on_the_a10g()
    set_ready(world, "node-a10g", "Unknown")  # its kubelet stopped posting; the Pod tolerates
    world.reconcile()  # the unreachable taint for 300 s, and no time passes
    world.patch("Devices", "node-a10g", {"managed": False})
    assert round_until_stopped(world) is not None
    status = world.get("ClusterQueue", A10G)["status"]  # in the round Kueue stopped the Pod
    assert (status["reservingWorkloads"], status["admittedWorkloads"]) == (0, 0)
    world.reconcile()
    pod = world.get("Pod", "training", "default")
    assert pod is not None and "deletionTimestamp" in pod["metadata"]  # Terminating: no kubelet
    assert pod["spec"]["nodeName"] == "node-a10g"
    workload = world.get("Workload", "pod-training", "default")
    conditions = {c["type"]: (c["status"], c["reason"]) for c in workload["status"]["conditions"]}
    assert conditions["Evicted"] == ("True", "ClusterQueueStopped")
    assert conditions["Finished"] == ("True", "OwnerNotFound")
    assert "admission" not in workload["status"]
    assert world.events == DRAINED


def test_a_pod_left_terminating_on_an_unreachable_node_gives_its_quota_back_at_once():
    """No drain: the taint evicts the Pod after its 300 s, its kubelet cannot confirm, and
    Kueue still finishes its Workload as the deletion starts (pod_controller.go `Load`)."""
    world = training_on_the_a10g()
    set_ready(world, "node-a10g", "Unknown")
    world.reconcile()
    lifecycle = next(c for c in world.controllers if isinstance(c, NodeLifecycle))
    lifecycle.sleep(300)
    world.reconcile()
    pod = world.get("Pod", "training", "default")
    assert pod is not None and "deletionTimestamp" in pod["metadata"]
    assert world.get("ClusterQueue", A10G)["status"]["reservingWorkloads"] == 0
    workload = world.get("Workload", "pod-training", "default")
    assert kube.condition_status(workload, "Finished") == "True"
    assert world.events == []  # evicted by the node's taint, not by Kueue


def test_without_drain_when_no_flavors_the_queue_stays_open(world):
    world.patch("Catalog", "default", {"instanceTypeDrainWhenNoFlavors": False})
    world.get("ClusterQueue", A10G)["status"]["admittedWorkloads"] = 1
    world.patch("Devices", "node-a10g", {"managed": False})
    world.reconcile()
    assert world.get("ClusterQueue", A10G)["spec"]["stopPolicy"] == "None"


# --- a pool of many node shapes -----------------------------------------------------------------


def cpu_node(cores: int) -> dict:
    """A CPU-only node's Devices, as its agent reports it: one shape per core count."""
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {"name": f"node-{cores}c", "labels": {}},
        "spec": {
            "os": "linux",
            "arch": "amd64",
            "cpu": {
                "vendor": "AMD",
                "modelName": "AMD EPYC 7R13 Processor",
                "family": "25",
                "model": "1",
                "cores": cores,
            },
            "accelerators": [],
            "allocations": [],
        },
    }


def node_of(devices: dict) -> dict:
    """The Node a Devices reports on (a node whose Node is gone is in no pool)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": devices["metadata"]["name"]}}


def test_a_pool_of_more_flavors_than_kueue_lists_queues_the_first_64_and_says_so():
    world = world_from([WALKTHROUGH / "namespaces.yaml", WALKTHROUGH / "catalog.yaml"])
    world.apply(*(cpu_node(cores) for cores in range(1, 71)))
    world.apply(*(node_of(cpu_node(cores)) for cores in range(1, 71)))
    world.reconcile()
    queue = world.get("ClusterQueue", GENERIC)
    assert queue is not None, "Kueue refused the ClusterQueue"
    (group,) = queue["spec"]["resourceGroups"]  # Kueue covers a resource by one group only
    assert group["coveredResources"] == ["cpu"]
    flavors = [f["name"] for f in group["flavors"]]
    assert len(flavors) == 64
    assert (flavors[0], flavors[-1]) == (
        "gpustack--amd-epyc-7r13-linux-amd64-1c",
        "gpustack--amd-epyc-7r13-linux-amd64-64c",
    )
    results = world.results[next(k for k in world.results if k.name == GENERIC)]
    assert [(r.severity, r.reason, r.message) for r in results] == [
        (
            fnv1.SEVERITY_WARNING,
            "FlavorsLeftOut",
            "the pool has 70 flavors and its ClusterQueue lists the first 64, Kueue's most for "
            "one resource: the nodes of the 6 largest (gpustack--amd-epyc-7r13-linux-amd64-65c, "
            "gpustack--amd-epyc-7r13-linux-amd64-66c, gpustack--amd-epyc-7r13-linux-amd64-67c, "
            "...) take no Instance; split the pools by CPU: set the Catalog's "
            "instanceTypeAwareCpuManufacturer",
        )
    ]


def test_kueue_refuses_a_resource_covered_by_two_groups():
    world = world_from([])
    group = {
        "coveredResources": ["cpu"],
        "flavors": [{"name": "small", "resources": [{"name": "cpu", "nominalQuota": "4"}]}],
    }
    second = copy.deepcopy(group)
    second["flavors"][0]["name"] = "large"
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "two-groups"},
        "spec": {"namespaceSelector": {}, "resourceGroups": [group, second]},
    }
    with pytest.raises(Refused) as refused:
        world.api.create(queue)
    assert str(refused.value) == (
        'admission webhook "vclusterqueue.kb.io" denied the request: '
        'spec.resourceGroups[1].coveredResources[0]: Duplicate value: "cpu"'
    )
    world.api.create({**queue, "spec": {**queue["spec"], "resourceGroups": [group]}})
