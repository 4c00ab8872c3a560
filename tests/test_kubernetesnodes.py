"""KubernetesNodes worker pools (seed 003): one VMI per worker, passthrough class entries only."""

from __future__ import annotations

import copy

import pytest
import yaml

from functions.core.status import instancetype as type_status
from gpustack_sim import World, load_documents, world_from
from gpustack_sim.apiserver import Refused
from tests.support import schemas
from tests.support.schemas import ROOT
from tests.support.vm_nodes import agent_devices
from tests.test_render import render
from tests.test_virtual_machines import VM_CLUSTER, one_round, synced

WALKTHROUGH, CLASSES = ROOT / "examples" / "walkthrough", ROOT / "examples" / "gpuclass"
POOLS = ROOT / "examples" / "kubernetesnodes"
PIPELINE = ROOT / "compositions" / "pipelines" / "kubernetesnodes.yaml"
NAMESPACE = "tenant-alpha"
# What an offline render of a worker pool is given as the cluster: its type and the classes.
OBSERVED = (
    "-e",
    POOLS / "instancetype.yaml",
    "-e",
    CLASSES / "cluster.yaml",
    "-e",
    CLASSES / "classes.yaml",
)


def gpu_node(name: str, gpus: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"example.com/whole-gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


@pytest.fixture
def world() -> World:
    """The GPU class cluster (gpu-a: 3 free whole GPUs) and two more nodes of 2, a tenant."""
    world = world_from(VM_CLUSTER)
    world.apply(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        gpu_node("gpu-d", 2),
        gpu_node("gpu-e", 2),
        agent_devices("gpu-d"),
        agent_devices("gpu-e"),
    )
    world.reconcile()
    return world


def pool(replicas: int = 3, class_name: str = "example-whole-gpu", count: int = 2) -> dict:
    found = load_documents(POOLS / "pool.yaml")[0]
    found["spec"]["replicas"] = replicas
    found["spec"]["gpus"] = [{"className": class_name, "count": count}]
    return found


def status(world: World) -> dict:
    return world.get("KubernetesNodes", "gpu-workers", NAMESPACE)["status"]


def workers(world: World) -> list[str]:
    return sorted(
        v["metadata"]["name"]
        for v in world.list("VirtualMachineInstance")
        if v["metadata"]["namespace"] == NAMESPACE
    )


def condition(world: World, type_: str) -> tuple[str, str]:
    found = next(c for c in status(world)["conditions"] if c["type"] == type_)
    return found["status"], found["reason"]


def test_three_workers_of_two_passthrough_gpus_each_then_scaled_to_one(world):
    world.apply(pool(replicas=3))
    world.reconcile()
    assert workers(world) == ["gpu-workers-0", "gpu-workers-1", "gpu-workers-2"]
    for name in workers(world):
        vmi = world.get("VirtualMachineInstance", name, NAMESPACE)
        assert [g["deviceName"] for g in vmi["spec"]["domain"]["devices"]["gpus"]] == [
            "example.com/whole-gpu"
        ] * 2
        assert vmi["spec"]["domain"]["cpu"] == {"cores": 4}
        assert schemas.validate_kubevirt({k: v for k, v in vmi.items() if k != "status"}) == []
    assert (status(world)["replicas"], status(world)["readyReplicas"]) == (3, 3)
    assert status(world)["phase"] == "Ready"
    assert {w["nodeName"] for w in status(world)["workers"]} == {"gpu-a", "gpu-d", "gpu-e"}
    world.patch("KubernetesNodes", "gpu-workers", {"replicas": 1}, NAMESPACE)
    world.reconcile()
    assert workers(world) == ["gpu-workers-0"]  # the highest-numbered workers go
    assert (status(world)["replicas"], status(world)["readyReplicas"]) == (1, 1)
    assert condition(world, "WorkersReady") == ("True", "Ready")


def test_a_vgpu_class_is_refused_with_the_seeds_reason(world):
    world.patch("Catalog", "default", {"vgpuEntitlement": True})
    world.apply(pool(class_name="example-licensed-vgpu", count=1))
    world.reconcile()
    assert workers(world) == []
    assert status(world)["phase"] == "Refused"
    assert status(world)["phaseMessage"] == (
        "spec.gpus[0].className: GPU class example-licensed-vgpu is a vGPU offer: class entries "
        "of a KubernetesNodes pool support passthrough only; select a passthrough class"
    )
    assert condition(world, "WorkersReady") == ("False", "Refused")


def test_running_workers_keep_their_vmis_while_new_ones_are_refused(world):
    world.apply(pool(replicas=1))
    world.reconcile()
    before = world.get("VirtualMachineInstance", "gpu-workers-0", NAMESPACE)["spec"]
    world.delete("GPUClass", "example-whole-gpu")
    world.patch("KubernetesNodes", "gpu-workers", {"replicas": 2}, NAMESPACE)
    world.reconcile()
    assert workers(world) == ["gpu-workers-0"]
    assert world.get("VirtualMachineInstance", "gpu-workers-0", NAMESPACE)["spec"] == before
    assert (status(world)["readyReplicas"], status(world)["phase"]) == (1, "Refused")
    assert condition(world, "RestartRequired") == ("True", "GPUClassNotFound")
    first, second = status(world)["workers"]
    assert (first["phase"], second["phase"]) == ("Ready", "Refused")
    assert first["phaseMessage"].endswith(
        "this applies at its next start (set spec.stop to true, then back to false)"
    )


def test_a_worker_waits_for_its_gpus_on_one_host(world):
    world.apply(pool(replicas=1, count=4))  # 4 fit gpu-a's allocatable, but only 3 are free
    world.reconcile()
    assert workers(world) == ["gpu-workers-0"]
    assert status(world)["phase"] == "Scheduling"
    assert status(world)["readyReplicas"] == 0
    launcher = world.get("Pod", "virt-launcher-gpu-workers-0", NAMESPACE)
    unplaced = next(c for c in launcher["status"]["conditions"] if c["type"] == "PodScheduled")
    assert unplaced["status"] == "False"
    worker = status(world)["workers"][0]  # the scheduler's words, as KubeVirt copies them
    assert (worker["phase"], worker["phaseMessage"]) == ("Scheduling", unplaced["message"])


def test_the_example_instance_type_is_what_the_handler_publishes():
    world = world_from(
        [WALKTHROUGH / n for n in ("devices.yaml", "nodes.yaml", "namespaces.yaml", "catalog.yaml")]
    )
    world.reconcile()
    published = world.get("InstanceType", "gpustack--generic-linux-amd64")
    example = load_documents(POOLS / "instancetype.yaml")[0]
    assert type_status.read(example) == type_status.read(published)


def test_the_worker_pool_renders_offline():
    result, stream = render(
        POOLS / "pool.yaml",
        PIPELINE,
        CLASSES / "functions.yaml",
        *OBSERVED,
    )
    assert result.exit_code == 0, result.output
    composite, composed = stream[0], stream[1:]
    assert (composite["kind"], composite["status"]["replicas"]) == ("KubernetesNodes", 3)
    assert [d["metadata"]["name"] for d in composed] == [f"gpu-workers-{i}" for i in range(3)]
    for vmi in composed:
        assert schemas.validate_kubevirt(vmi) == []


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"className": "example-whole-gpu", "count": 0},
            "spec.gpus[0].count: must be a whole number from 1 to 1024, got 0",
        ),
        (
            {"className": "example-whole-gpu", "count": -3},
            "spec.gpus[0].count: must be a whole number from 1 to 1024, got -3",
        ),
        (
            {"className": "g.with.dots"},
            "spec.gpus[0].className: 'g.with.dots' is not a GPU class name",
        ),
    ],
    ids=["count 0", "count -3", "a dotted class name"],
)
def test_render_refuses_what_the_schema_refuses(tmp_path, entry, message):
    bad = pool()
    bad["spec"]["gpus"] = [entry]
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(bad))
    result, stream = render(
        tmp_path / "pool.yaml",
        PIPELINE,
        "-r",
        *OBSERVED,
    )
    assert result.exit_code == 0, result.output
    assert stream[0]["status"]["phase"] == "Refused"
    assert stream[0]["status"]["phaseMessage"].startswith(message)
    assert [d["kind"] for d in stream[1:]] == ["Result"]
    world = World()
    with pytest.raises(Refused, match=r"spec\.gpus\[0\]"):
        world.apply(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            copy.deepcopy(bad),
        )


def test_the_legacy_claim_is_generated():
    xrd = yaml.safe_load(
        (ROOT / "compositions" / "legacy" / "xrds" / "kubernetesnodes.yaml").read_text()
    )
    assert xrd["spec"]["claimNames"]["kind"] == "KubernetesNodes"
    assert xrd["spec"]["names"]["kind"] == "XKubernetesNodes"


def test_a_failed_worker_is_replaced(world):
    world.apply(pool(replicas=2))
    world.reconcile()
    world.delete("Pod", "virt-launcher-gpu-workers-1", NAMESPACE)  # its node gone
    world.reconcile()
    assert workers(world) == ["gpu-workers-0", "gpu-workers-1"]
    assert (status(world)["readyReplicas"], status(world)["phase"]) == (2, "Ready")


def test_a_worker_that_has_not_started_is_recreated_with_the_new_spec(world):
    world.apply(pool(replicas=1, count=4))  # only 3 free on gpu-a: the worker waits
    world.reconcile()
    assert status(world)["phase"] == "Scheduling"
    toleration = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}  # opens gpu-b
    world.patch("GPUClass", "example-whole-gpu", {"tolerations": [toleration]})
    one_round(world)  # one reconcile: the worker's VMI goes, the pool says why
    assert workers(world) == []
    message = (
        "the VirtualMachineInstance has not started and a start now would make another one "
        "(tolerations differ); recreating it with the new spec"
    )
    assert status(world)["workers"][0] == {
        "name": "gpu-workers-0",
        "phase": "Starting",
        "phaseMessage": message,
    }
    assert (status(world)["phase"], status(world)["phaseMessage"]) == (
        "Starting",
        f"gpu-workers-0: {message}",
    )
    world.reconcile()  # the next reconcile composes the new VMI, which fits on gpu-b
    vmi = world.get("VirtualMachineInstance", "gpu-workers-0", NAMESPACE)
    assert vmi["spec"]["tolerations"] == [toleration]
    assert (status(world)["phase"], status(world)["workers"][0]["nodeName"]) == ("Ready", "gpu-b")
    assert synced(world, "KubernetesNodes", "gpu-workers", NAMESPACE)
