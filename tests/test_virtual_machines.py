"""Instances of runtime VirtualMachine: GPUClass entries to a KubeVirt VMI (seed 003)."""

from __future__ import annotations

import copy

import pytest

from functions.simulate import World, load_documents, world_from
from tests.support import schemas
from tests.support.schemas import ROOT

WALKTHROUGH, CLASSES = ROOT / "examples" / "walkthrough", ROOT / "examples" / "gpuclass"
TOKEN = "c3ludGhldGljLXRva2Vu"


@pytest.fixture
def world() -> World:
    world = world_from(
        [
            WALKTHROUGH / "devices.yaml",
            WALKTHROUGH / "namespaces.yaml",
            WALKTHROUGH / "catalog.yaml",
            CLASSES / "cluster.yaml",
            CLASSES / "classes.yaml",
        ]
    )
    world.reconcile()
    return world


def vm(gpus: list[dict], name: str = "vm-1") -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "type": "gpustack--generic-linux-amd64",
            "runtime": "VirtualMachine",
            "image": "quay.io/containerdisks/ubuntu:24.04",
            "resources": {"cpu": "4"},
            "volume": {"ephemeral": {"capacity": "20Gi"}},
            "gpus": gpus,
        },
    }


def status(world: World, name: str = "vm-1") -> dict:
    return world.get("Instance", name, "default")["status"]


def test_a_class_entry_becomes_gpu_devices_named_by_the_resource(world):
    world.apply(vm([{"className": "example-whole-gpu", "count": 2}]))
    world.reconcile()
    vmi = world.get("VirtualMachineInstance", "vm-1", "default")
    assert vmi["spec"]["domain"]["devices"]["gpus"] == [
        {"name": "gpu-0", "deviceName": "example.com/whole-gpu"},
        {"name": "gpu-1", "deviceName": "example.com/whole-gpu"},
    ]
    assert vmi["spec"]["domain"]["cpu"] == {"cores": 4}
    assert vmi["spec"]["domain"]["memory"] == {"guest": "8Gi"}
    assert vmi["spec"]["volumes"][0] == {
        "name": "rootdisk",
        "containerDisk": {"image": "quay.io/containerdisks/ubuntu:24.04"},
    }
    assert (status(world)["phase"], status(world)["nodeName"]) == ("Ready", "gpu-a")
    assert world.get("GPUClass", "example-whole-gpu")["status"]["free"] == 1  # 4 − 1 − 2 on gpu-a
    assert schemas.validate_kubevirt({k: v for k, v in vmi.items() if k != "status"}) == []


def test_class_tolerations_are_copied_and_open_tainted_nodes(world):
    world.patch(
        "GPUClass",
        "example-whole-gpu",
        {
            "tolerations": [
                {"key": "gpu", "operator": "Equal", "value": "tenant", "effect": "NoSchedule"}
            ]
        },
    )
    world.reconcile()
    world.apply(vm([{"className": "example-whole-gpu", "count": 8}]))
    world.reconcile()
    vmi = world.get("VirtualMachineInstance", "vm-1", "default")
    assert vmi["spec"]["tolerations"] == [
        {"key": "gpu", "operator": "Equal", "value": "tenant", "effect": "NoSchedule"}
    ]
    assert status(world)["nodeName"] == "gpu-b"


def test_a_shortage_waits_and_is_never_a_refusal(world):
    world.apply(vm([{"className": "example-whole-gpu", "count": 4}]))  # gpu-a has 3 free
    world.reconcile()
    assert status(world)["phase"] == "Scheduling"
    assert world.get("VirtualMachineInstance", "vm-1", "default") is not None


REFUSALS = [
    (
        [{"className": "nope"}],
        "GPUClassNotFound",
        "spec.gpus[0].className: GPU class nope not found: select one from `kubectl get gpuclasses`",
    ),
    (
        [{"className": "example-byol-vgpu"}],
        "ResourceNotPermitted",
        "spec.gpus[0].className: GPU class example-byol-vgpu: its resource example.com/byol-vgpu is missing from "
        "KubeVirt's permitted-device table",
    ),
    (
        [{"className": "example-licensed-vgpu"}],
        "VGPUNotEntitled",
        "spec.gpus[0].className: GPU class example-licensed-vgpu is a vGPU offer and vGPU is not entitled: enable the "
        'Catalog\'s "vgpuEntitlement" setting',
    ),
    (
        [
            {"className": "example-whole-gpu", "count": 5},
            {"className": "example-whole-gpu", "count": 4},
        ],
        "InvalidGPUs",
        "spec.gpus: GPU class example-whole-gpu allows at most 8 units per VM, requested 9",
    ),
]


@pytest.mark.parametrize(("gpus", "reason", "message"), REFUSALS, ids=[r[1] for r in REFUSALS])
def test_refusals_use_the_seeds_terms(world, gpus, reason, message):
    world.apply(vm(gpus))
    world.reconcile()
    assert (status(world)["phase"], status(world)["phaseMessage"]) == ("Refused", message)
    admitted = next(c for c in status(world)["conditions"] if c["type"] == "Admitted")
    assert admitted["reason"] == reason
    assert world.get("VirtualMachineInstance", "vm-1", "default") is None


def test_vgpus_come_from_one_class_only_and_within_its_limit(world):
    second = copy.deepcopy(load_documents(CLASSES / "classes.yaml")[1])
    second["metadata"] = {"name": "other-vgpu"}
    second["spec"]["source"]["devicePlugin"]["resourceName"] = "example.com/licensed-vgpu-2"
    kubevirt = world.get("KubeVirt", "kubevirt", "cozy-kubevirt")
    kubevirt["spec"]["configuration"]["permittedHostDevices"]["mediatedDevices"].append(
        {"mdevNameSelector": "OTHER", "resourceName": "example.com/licensed-vgpu-2"}
    )
    world.apply(second)
    world.patch("Catalog", "default", {"vgpuEntitlement": True})
    world.apply(vm([{"className": "example-licensed-vgpu"}, {"className": "other-vgpu"}]))
    world.reconcile()
    assert status(world)["phaseMessage"] == (
        "spec.gpus: a VM may take vGPUs from only one class, got example-licensed-vgpu and other-vgpu"
    )


def test_a_licensed_vgpu_waits_for_its_license_then_gets_a_gpulicense_disk(world):
    world.patch("Catalog", "default", {"vgpuEntitlement": True})
    world.apply(vm([{"className": "example-licensed-vgpu"}]))
    world.reconcile()
    assert status(world)["phase"] == "Starting"
    assert status(world)["phaseMessage"].startswith(
        "spec.gpus: waiting for license Secret example-vgpu-license in cozy-system"
    )
    assert world.get("VirtualMachineInstance", "vm-1", "default") is None
    world.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "example-vgpu-license", "namespace": "cozy-system"},
            "data": {"client_configuration_token.tok": TOKEN},
        }
    )
    world.reconcile()
    copy_ = world.get("Secret", "vm-1-gpu-license", "default")
    assert copy_["data"] == {"client_configuration_token.tok": TOKEN}
    vmi = world.get("VirtualMachineInstance", "vm-1", "default")
    assert {"name": "gpulicense", "serial": "GPULICENSE", "disk": {"bus": "virtio"}} in vmi["spec"][
        "domain"
    ]["devices"]["disks"]
    assert {"name": "gpulicense", "secret": {"secretName": "vm-1-gpu-license"}} in vmi["spec"][
        "volumes"
    ]
    assert status(world)["phase"] == "Ready"
    assert TOKEN not in repr(world.get("Instance", "vm-1", "default"))
    assert TOKEN not in repr(world.results)


def test_raw_entries_pass_through(world):
    world.apply(vm([{"name": "example.com/whole-gpu"}]))
    world.reconcile()
    assert world.get("VirtualMachineInstance", "vm-1", "default")["spec"]["domain"]["devices"][
        "gpus"
    ] == [{"name": "gpu-0", "deviceName": "example.com/whole-gpu"}]
