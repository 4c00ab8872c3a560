"""Instances of runtime VirtualMachine: GPUClass entries to a KubeVirt VMI (seed 003)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from gpustack_sim import World, kube, load_documents, world_from
from gpustack_sim.apiserver import ApiServer, Refused
from gpustack_sim.client import Client
from gpustack_sim.kubevirt import KubeVirt, launcher_of
from gpustack_sim.store import Store
from tests.support import schemas
from tests.support.schemas import ROOT
from tests.support.vm_nodes import agent_devices

WALKTHROUGH, CLASSES = ROOT / "examples" / "walkthrough", ROOT / "examples" / "gpuclass"
# The walkthrough's nodes and settings beside the GPU class cluster: where VM tests start.
VM_CLUSTER = [
    WALKTHROUGH / "devices.yaml",
    WALKTHROUGH / "namespaces.yaml",
    WALKTHROUGH / "catalog.yaml",
    CLASSES / "cluster.yaml",
    CLASSES / "classes.yaml",
]
TOKEN = "c3ludGhldGljLXRva2Vu"
FEATURE_TYPE_1 = (
    "RmVhdHVyZVR5cGU9MQo="  # base64 of "FeatureType=1\n", the licensing client's gridd.conf
)


@pytest.fixture
def world() -> World:
    world = world_from(VM_CLUSTER)
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
        # gpu-b (8) is tainted and gpu-c (8) cordoned: one eligible node, gpu-a, holds 4
        "spec.gpus: GPU class example-whole-gpu allows at most 4 units per VM, requested 9",
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
    assert copy_["data"] == {"client_configuration_token.tok": TOKEN, "gridd.conf": FEATURE_TYPE_1}
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


# --- a running VM keeps running; refusals apply to starts (seed 003) ---------------------------

LICENSE = {
    "apiVersion": "v1",
    "kind": "Secret",
    "metadata": {"name": "example-vgpu-license", "namespace": "cozy-system"},
    "data": {"client_configuration_token.tok": TOKEN},
}


def licensed(world: World) -> World:
    """A running licensed vGPU VM `vm-1`: entitled platform, the license Secret present."""
    world.patch("Catalog", "default", {"vgpuEntitlement": True})
    world.apply(LICENSE)
    world.apply(vm([{"className": "example-licensed-vgpu"}]))
    world.reconcile()
    assert status(world)["phase"] == "Ready"
    return world


def condition(world: World, type_: str, name: str = "vm-1") -> tuple[str, str, str]:
    found = next(c for c in status(world, name)["conditions"] if c["type"] == type_)
    return found["status"], found["reason"], found.get("message", "")


def workload(world: World, name: str = "vm-1") -> tuple[dict | None, dict | None]:
    """The VMI's spec and the license copy's data, as the cluster holds them."""
    vmi = world.get("VirtualMachineInstance", name, "default")
    copy_ = world.get("Secret", f"{name}-gpu-license", "default")
    return (vmi or {}).get("spec"), (copy_ or {}).get("data")


@dataclass(frozen=True)
class Change:
    name: str
    change: Callable[[World], None]
    reason: str  # RestartRequired's reason, and a new VM's refusal or wait


CHANGES = [
    Change(
        "the license Secret is deleted to rotate it",
        lambda w: w.delete("Secret", "example-vgpu-license", "cozy-system"),
        "WaitingForLicense",
    ),
    Change(
        "the class is deleted",
        lambda w: w.delete("GPUClass", "example-licensed-vgpu"),
        "GPUClassNotFound",
    ),
    Change(
        "vGPU entitlement is turned off",
        lambda w: w.patch("Catalog", "default", {"vgpuEntitlement": False}),
        "VGPUNotEntitled",
    ),
    Change(
        "the resource is un-permitted in KubeVirt",
        lambda w: w.get("KubeVirt", "kubevirt", "cozy-kubevirt")["spec"]["configuration"][
            "permittedHostDevices"
        ].pop("mediatedDevices"),
        "ResourceNotPermitted",
    ),
    Change(
        "the source resource is renamed",
        lambda w: w.patch(
            "GPUClass",
            "example-licensed-vgpu",
            {"source": {"devicePlugin": {"resourceName": "example.com/renamed-vgpu"}}},
        ),
        "ResourceNotPermitted",  # a new start checks the replacement resource against KubeVirt
    ),
    Change(
        "the license is rotated to a new token",
        lambda w: w.apply({**LICENSE, "data": {"client_configuration_token.tok": "bmV3LXRva2Vu"}}),
        "LicenseChanged",
    ),
]


@pytest.mark.parametrize("case", CHANGES, ids=[c.name for c in CHANGES])
def test_a_running_vm_keeps_its_vmi_and_says_the_change_applies_at_the_next_start(world, case):
    licensed(world)
    before = workload(world)
    assert condition(world, "RestartRequired")[:2] == ("False", "UpToDate")
    case.change(world)
    world.reconcile()
    assert workload(world) == before  # the VMI and its license copy, unchanged
    assert status(world)["phase"] == "Ready"
    found, reason, message = condition(world, "RestartRequired")
    assert (found, reason) == ("True", case.reason)
    assert message.endswith(
        "this applies at its next start (set spec.stop to true, then back to false)"
    )
    assert status(world)["phaseMessage"] == message
    assert TOKEN not in repr(world.get("Instance", "vm-1", "default"))


@pytest.mark.parametrize("case", CHANGES[:4], ids=[c.name for c in CHANGES[:4]])
def test_a_new_vm_in_the_same_state_is_refused_or_waits(world, case):
    licensed(world)
    case.change(world)
    world.apply(vm([{"className": "example-licensed-vgpu"}], name="vm-2"))
    world.reconcile()
    assert world.get("VirtualMachineInstance", "vm-2", "default") is None
    admitted = condition(world, "Admitted", "vm-2")
    assert (admitted[0], admitted[1]) == ("False", case.reason)
    assert status(world, "vm-2")["phase"] == (
        "Starting" if case.reason.startswith("Wait") else "Refused"
    )


def test_the_next_start_applies_the_change(world):
    licensed(world)
    world.patch(
        "GPUClass",
        "example-licensed-vgpu",
        {"source": {"devicePlugin": {"resourceName": "example.com/other-vgpu"}}},
    )
    world.get("KubeVirt", "kubevirt", "cozy-kubevirt")["spec"]["configuration"][
        "permittedHostDevices"
    ]["mediatedDevices"].append(
        {"mdevNameSelector": "OTHER", "resourceName": "example.com/other-vgpu"}
    )
    world.get("Node", "gpu-a")["status"]["allocatable"]["example.com/other-vgpu"] = "8"
    world.reconcile()
    assert condition(world, "RestartRequired")[1] == "GPUClassChanged"
    assert "GPU devices differ" in condition(world, "RestartRequired")[2]
    world.patch("Instance", "vm-1", {"stop": True}, "default")
    world.reconcile()
    assert world.get("VirtualMachineInstance", "vm-1", "default") is None
    world.patch("Instance", "vm-1", {"stop": False}, "default")
    world.reconcile()
    gpus = workload(world)[0]["domain"]["devices"]["gpus"]
    assert gpus == [{"name": "gpu-0", "deviceName": "example.com/other-vgpu"}]
    assert condition(world, "RestartRequired")[:2] == ("False", "UpToDate")


# --- a shortage waits; limits count eligible nodes only ----------------------------------------

NEW_GPU = {
    "apiVersion": "cozystack.io/v1alpha1",
    "kind": "GPUClass",
    "metadata": {"name": "example-new-gpu"},
    "spec": {
        "vendor": "example",
        "model": "example-model-2",
        "mode": "passthrough",
        "source": {"devicePlugin": {"resourceName": "example.com/new-gpu"}},
    },
}


def node(name: str, gpus: int, ready: str = "True") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"example.com/new-gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


@pytest.fixture
def new_gpu(world) -> World:
    world.get("KubeVirt", "kubevirt", "cozy-kubevirt")["spec"]["configuration"][
        "permittedHostDevices"
    ]["pciHostDevices"].append(
        {"pciVendorSelector": "10DE:2330", "resourceName": "example.com/new-gpu"}
    )
    world.apply(NEW_GPU)
    world.reconcile()
    return world


def test_a_class_no_node_advertises_yet_waits_and_starts_when_a_node_appears(new_gpu):
    world = new_gpu
    world.apply(vm([{"className": "example-new-gpu", "count": 2}]))
    world.reconcile()
    assert status(world)["phase"] == "Scheduling"
    assert status(world)["phaseMessage"] == (
        "spec.gpus: no eligible node (Ready, schedulable, its taints tolerated) advertises "
        "example.com/new-gpu yet; the VM waits and starts when one does"
    )
    assert condition(world, "Scheduled")[:2] == ("False", "WaitingForCapacity")
    assert condition(world, "Admitted")[0] == "True"  # composed, never refused
    world.apply(node("gpu-new", 2), agent_devices("gpu-new"))
    world.reconcile()
    assert (status(world)["phase"], status(world)["nodeName"]) == ("Ready", "gpu-new")
    assert condition(world, "Scheduled")[:2] == ("True", "Scheduled")


def test_the_per_vm_limit_counts_eligible_nodes_only(new_gpu):
    world = new_gpu
    world.apply(node("gpu-ready", 2), node("gpu-not-ready", 8, ready="False"))
    world.apply(agent_devices("gpu-ready"), agent_devices("gpu-not-ready"))
    world.apply(vm([{"className": "example-new-gpu", "count": 4}]))
    world.reconcile()
    assert status(world)["phaseMessage"] == (
        "spec.gpus: GPU class example-new-gpu allows at most 2 units per VM, requested 4"
    )


# --- why a VM is not placed: the scheduler's words, as KubeVirt copies them onto the VMI ------


def scheduler_says(world: World, name: str = "vm-1") -> str:
    """The launcher Pod's PodScheduled=False message, in the scheduler's own words ("")."""
    pod = world.get("Pod", f"virt-launcher-{name}", "default")
    unplaced = [
        c
        for c in (pod or {}).get("status", {}).get("conditions") or []
        if (c["type"], c["status"]) == ("PodScheduled", "False")
    ]
    return unplaced[0]["message"] if unplaced else ""


@dataclass(frozen=True)
class Placement:
    name: str
    count: int  # whole GPUs asked of example-whole-gpu; gpu-a, the one eligible node, has 3 free
    phase: str  # the Instance's
    scheduled: tuple[str, str]  # its Scheduled condition's status and reason
    vmi: tuple[str, str]  # the VMI's phase and Ready status, as KubeVirt writes them


PLACEMENTS = [
    Placement(
        "a VM no node can place shows the scheduler's reason",
        4,
        "Scheduling",
        ("False", "WaitingForCapacity"),
        ("Scheduling", "False"),
    ),
    Placement(
        "a VM placed and running reads Ready",
        2,
        "Ready",
        ("True", "Scheduled"),
        ("Running", "True"),
    ),
]


@pytest.mark.parametrize("case", PLACEMENTS, ids=[c.name for c in PLACEMENTS])
def test_the_instance_says_why_its_vm_is_not_placed(world, case):
    world.apply(vm([{"className": "example-whole-gpu", "count": case.count}]))
    world.reconcile()
    why = scheduler_says(world)  # "" once the launcher is placed
    assert why.startswith("0/") == (case.phase == "Scheduling")
    assert (status(world)["phase"], status(world).get("phaseMessage", "")) == (case.phase, why)
    assert condition(world, "Scheduled") == (*case.scheduled, why)
    found = world.get("VirtualMachineInstance", "vm-1", "default")["status"]
    ready = next(c for c in found["conditions"] if c["type"] == "Ready")
    assert (found["phase"], ready["status"]) == case.vmi


# --- vGPU entitlement: the platform's, each tenant's and every parent's ------------------------

ENTITLED = "gpu.cozystack.io/vgpu"


def tenant(name: str, *ancestors: str, entitled: bool = False) -> dict:
    """A Cozystack tenant namespace: a tenant label for itself and for each ancestor."""
    labels = {f"tenant.cozystack.io/{t}": "" for t in (*ancestors, name)}
    if entitled:
        labels[ENTITLED] = "true"
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def tenant_vm(namespace: str) -> dict:
    found = vm([{"className": "example-licensed-vgpu"}], name="vm-t")
    found["metadata"]["namespace"] = namespace
    return found


@dataclass(frozen=True)
class TenantCase:
    name: str
    namespaces: list[dict]
    vm_namespace: str
    refused: str  # "" when entitled


TENANTS = [
    TenantCase(
        "an entitled child of the root tenant starts",
        [tenant("tenant-root"), tenant("tenant-alpha", "tenant-root", entitled=True)],
        "tenant-alpha",
        "",
    ),
    TenantCase(
        "a child tenant without its own entitlement is refused",
        [tenant("tenant-root"), tenant("tenant-alpha", "tenant-root")],
        "tenant-alpha",
        "tenant namespace tenant-alpha is not entitled to vGPU: a tenant needs its own "
        "entitlement and an entitled parent; label namespace tenant-alpha with "
        'gpu.cozystack.io/vgpu: "true"',
    ),
    TenantCase(
        "a child tenant without an entitled parent is refused",
        [
            tenant("tenant-root"),
            tenant("tenant-alpha", "tenant-root"),
            tenant("tenant-alpha-beta", "tenant-root", "tenant-alpha", entitled=True),
        ],
        "tenant-alpha-beta",
        "the parent tenant namespace tenant-alpha of tenant-alpha-beta is not entitled to vGPU: "
        "a tenant needs its own entitlement and an entitled parent; label namespace tenant-alpha "
        'with gpu.cozystack.io/vgpu: "true"',
    ),
    TenantCase(
        "a grandchild with an entitled chain starts",
        [
            tenant("tenant-root"),
            tenant("tenant-alpha", "tenant-root", entitled=True),
            tenant("tenant-alpha-beta", "tenant-root", "tenant-alpha", entitled=True),
        ],
        "tenant-alpha-beta",
        "",
    ),
]


@pytest.mark.parametrize("case", TENANTS, ids=[c.name for c in TENANTS])
def test_a_tenant_is_entitled_when_it_and_every_parent_are(world, case):
    world.patch("Catalog", "default", {"vgpuEntitlement": True})
    world.apply(LICENSE, *case.namespaces)
    world.apply(tenant_vm(case.vm_namespace))
    world.reconcile()
    found = world.get("Instance", "vm-t", case.vm_namespace)["status"]
    if not case.refused:
        assert found["phase"] == "Ready"
        return
    assert (found["phase"], found["phaseMessage"]) == (
        "Refused",
        "spec.gpus[0].className: GPU class example-licensed-vgpu is a vGPU offer and "
        + case.refused,
    )
    assert world.get("VirtualMachineInstance", "vm-t", case.vm_namespace) is None


# --- a raw entry is no way around vGPU entitlement (seed 003) -----------------------------------

A10_4Q = "nvidia.com/NVIDIA_A10-4Q"  # a mediated-device resource no class offers


def permit_mediated(world: World, resource: str) -> None:
    kubevirt = copy.deepcopy(world.get("KubeVirt", "kubevirt", "cozy-kubevirt"))
    mediated = kubevirt["spec"]["configuration"]["permittedHostDevices"]["mediatedDevices"]
    mediated.append({"mdevNameSelector": "NVIDIA A10-4Q", "resourceName": resource})
    world.apply(kubevirt)


@dataclass(frozen=True)
class RawCase:
    name: str
    resource: str
    platform_entitled: bool  # the Catalog's vgpuEntitlement
    refused: str  # the message's end, after "<resource> is a vGPU (…) and "; "" when it starts
    namespaces: tuple[dict, ...] = ()
    namespace: str = "default"
    what: str = "a mediated device in KubeVirt's permitted-device table"


NOT_ENTITLED = 'vGPU is not entitled: enable the Catalog\'s "vgpuEntitlement" setting'
RAW_VGPUS = [
    RawCase("a mediated device KubeVirt permits, vGPU not entitled", A10_4Q, False, NOT_ENTITLED),
    RawCase("a mediated device KubeVirt permits, vGPU entitled", A10_4Q, True, ""),
    RawCase(
        "a vGPU class's resource, vGPU not entitled",
        "example.com/byol-vgpu",
        False,
        NOT_ENTITLED,
        what="the resource of vGPU class example-byol-vgpu",
    ),
    RawCase(
        "a mediated device in a tenant without its own entitlement",
        A10_4Q,
        True,
        "tenant namespace tenant-alpha is not entitled to vGPU: a tenant needs its own "
        "entitlement and an entitled parent; label namespace tenant-alpha with "
        'gpu.cozystack.io/vgpu: "true"',
        (tenant("tenant-root"), tenant("tenant-alpha", "tenant-root")),
        "tenant-alpha",
    ),
    RawCase(
        "a mediated device in an entitled tenant",
        A10_4Q,
        True,
        "",
        (tenant("tenant-root"), tenant("tenant-alpha", "tenant-root", entitled=True)),
        "tenant-alpha",
    ),
    RawCase("a passthrough resource needs no entitlement", "example.com/whole-gpu", False, ""),
]


@pytest.mark.parametrize("case", RAW_VGPUS, ids=[c.name for c in RAW_VGPUS])
def test_a_raw_vgpu_entry_needs_the_entitlement_a_vgpu_class_does(world, case):
    permit_mediated(world, A10_4Q)
    world.patch("Catalog", "default", {"vgpuEntitlement": case.platform_entitled})
    raw = vm([{"name": case.resource}], name="vm-raw")
    raw["metadata"]["namespace"] = case.namespace
    world.apply(*case.namespaces, raw)
    world.reconcile()
    found = world.get("Instance", "vm-raw", case.namespace)["status"]
    vmi = world.get("VirtualMachineInstance", "vm-raw", case.namespace)
    if not case.refused:
        assert found["phase"] != "Refused"
        assert vmi["spec"]["domain"]["devices"]["gpus"] == [
            {"name": "gpu-0", "deviceName": case.resource}
        ]
        return
    message = (
        f"spec.gpus[0].name: {case.resource} is a vGPU ({case.what}) and {case.refused}; a raw "
        "entry is no substitute for it"
    )
    assert (found["phase"], found["phaseMessage"]) == ("Refused", message)
    admitted = next(c for c in found["conditions"] if c["type"] == "Admitted")
    assert admitted["reason"] == "VGPUNotEntitled"
    assert vmi is None


def test_a_licensed_class_delivers_its_feature_type(world):
    world.patch("Catalog", "default", {"vgpuEntitlement": True})
    world.patch(
        "GPUClass",
        "example-licensed-vgpu",
        {"license": {"secretName": "example-vgpu-license", "featureType": 4}},
    )
    licensed(world)
    assert workload(world)[1]["gridd.conf"] == "RmVhdHVyZVR5cGU9NAo="  # FeatureType=4


# --- KubeVirt's stand-in: a VMI's phase and conditions, from its launcher -----------------------


VMI = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "VirtualMachineInstance",
    "metadata": {"name": "vm-1", "namespace": "default"},
    "spec": {"domain": {"devices": {}}},
}
UNSCHEDULABLE = "0/4 nodes are available: 4 Insufficient example.com/whole-gpu."
NOT_RUNNING = ("False", "GuestNotRunning", "Guest VM is not reported as running")
NO_LAUNCHER = ("False", "PodNotExists", "virt-launcher pod has not yet been scheduled")
LAUNCHER_DOWN = ("False", "PodTerminating", "virt-launcher pod is terminating")


def launcher(phase: str, *conditions: tuple[str, str, str, str]) -> dict:
    """vm-1's virt-launcher Pod as the scheduler and the kubelet leave it (bound once Running)."""
    pod = launcher_of(VMI)
    if phase != "Pending":
        pod["spec"]["nodeName"] = "gpu-a"
    pod["status"] = {
        "phase": phase,
        "conditions": [kube.condition(*c) for c in conditions],
        "podIPs": [{"ip": "10.244.1.1"}],
    }
    return pod


UNPLACED_LAUNCHER = launcher("Pending", ("PodScheduled", "False", "Unschedulable", UNSCHEDULABLE))
RUNNING_LAUNCHER = launcher("Running", ("PodScheduled", "True", "", ""), ("Ready", "True", "", ""))
FAILED_LAUNCHER = launcher("Failed")


def kubevirt_alone(vmi_status: dict, found: dict | None) -> tuple[dict, bool]:
    """KubeVirt's stand-in, one pass over a VMI (and its launcher): the VMI's status as it leaves
    it, and whether a launcher exists then."""
    api = ApiServer(Store())
    api.create({**VMI, "status": vmi_status})
    if found is not None:
        api.create(found)
    KubeVirt(Client(api)).run()
    launched = api.store.get("Pod", "virt-launcher-vm-1", "default") is not None
    return api.store.get("VirtualMachineInstance", "vm-1", "default")["status"], launched


@dataclass(frozen=True)
class Pass:
    name: str
    before: dict  # the VMI's status
    launcher: dict | None
    phase: str
    conditions: dict[str, tuple[str, str, str]]  # by type: status, reason, message


# KubeVirt v1.9.0: pkg/virt-controller/watch/vmi/lifecycle.go (`updateStatus`,
# `syncReadyConditionFromPod`) and pkg/virt-handler/vm.go (`calculateVmPhaseForStatusReason`).
PASSES = [
    Pass(
        "a new VMI gets its launcher and is Scheduling",
        {},
        None,
        "Scheduling",
        {"Ready": NOT_RUNNING},
    ),
    Pass("a Pending VMI alike", {"phase": "Pending"}, None, "Scheduling", {"Ready": NOT_RUNNING}),
    Pass(
        "an unschedulable launcher's PodScheduled condition is copied; Ready says only that the "
        "guest is not running",
        {"phase": "Scheduling"},
        UNPLACED_LAUNCHER,
        "Scheduling",
        {"Ready": NOT_RUNNING, "PodScheduled": ("False", "Unschedulable", UNSCHEDULABLE)},
    ),
    Pass(
        "a running launcher: Scheduled, then Running by virt-handler; PodScheduled dropped",
        {
            "phase": "Scheduling",
            "conditions": [kube.condition("PodScheduled", "False", "Unschedulable", "0/4")],
        },
        RUNNING_LAUNCHER,
        "Running",
        {"Ready": NOT_RUNNING},
    ),
    Pass(
        "a Running VMI's Ready is its launcher's",
        {"phase": "Running"},
        RUNNING_LAUNCHER,
        "Running",
        {"Ready": ("True", "Ready", "")},
    ),
    Pass(
        "a Scheduling VMI whose launcher is gone fails",
        {"phase": "Scheduling"},
        None,
        "Failed",
        {"Ready": NO_LAUNCHER},
    ),
    Pass(
        "a Scheduling VMI whose launcher failed fails",
        {"phase": "Scheduling"},
        FAILED_LAUNCHER,
        "Failed",
        {"Ready": LAUNCHER_DOWN},
    ),
    Pass(
        "a Running VMI whose launcher is gone fails",
        {"phase": "Running", "nodeName": "gpu-a"},
        None,
        "Failed",
        {"Ready": NO_LAUNCHER},
    ),
    Pass(
        "a Running VMI whose launcher failed fails",
        {"phase": "Running", "nodeName": "gpu-a"},
        FAILED_LAUNCHER,
        "Failed",
        {"Ready": LAUNCHER_DOWN},
    ),
    Pass(
        "a final VMI never gets a second launcher",
        {"phase": "Failed"},
        None,
        "Failed",
        {"Ready": NO_LAUNCHER},
    ),
]


@pytest.mark.parametrize("case", PASSES, ids=[c.name for c in PASSES])
def test_kubevirt_writes_a_vmis_phase_and_conditions_from_its_launcher(case):
    found, launched = kubevirt_alone(case.before, case.launcher)
    conditions = {c["type"]: (c["status"], c["reason"], c["message"]) for c in found["conditions"]}
    assert (found["phase"], conditions) == (case.phase, case.conditions)
    # virt-controller creates a launcher for an unprocessed (new or Pending) VMI only
    assert launched == (case.launcher is not None or case.before.get("phase") in (None, "Pending"))


def test_kubevirt_keeps_the_first_scheduler_message_it_copied():
    """`AddPodCondition` (pkg/controller/conditions.go) adds a condition the VMI lacks only."""
    before = {
        "phase": "Scheduling",
        "conditions": [kube.condition("PodScheduled", "False", "Unschedulable", "0/3 nodes")],
    }
    found, _ = kubevirt_alone(before, UNPLACED_LAUNCHER)
    unplaced = next(c for c in found["conditions"] if c["type"] == "PodScheduled")
    assert unplaced["message"] == "0/3 nodes"


# --- a VMI that ends Failed is replaced: the next start ------------------------------------------


def test_a_vmi_that_lost_its_launcher_fails_and_the_instance_starts_a_new_one(world):
    licensed(world)
    world.delete("Pod", "virt-launcher-vm-1", "default")  # evicted, or its node gone
    one_round(world)  # KubeVirt: Failed, its Ready condition PodNotExists
    one_round(world)  # the Instance: the failed VMI goes, and why
    assert status(world)["phaseMessage"] == (
        "the VirtualMachineInstance failed (its virt-launcher Pod is gone); replacing it with a "
        "new one"
    )
    world.reconcile()
    assert status(world)["phase"] == "Ready"
    vmi = world.get("VirtualMachineInstance", "vm-1", "default")
    assert vmi["status"]["phase"] == "Running"
    assert world.get("Pod", "virt-launcher-vm-1", "default") is not None


def test_a_failed_vmi_is_replaced_under_the_catalog_as_it_is_then(world):
    licensed(world)
    world.delete("GPUClass", "example-licensed-vgpu")
    world.reconcile()
    assert condition(world, "RestartRequired")[:2] == ("True", "GPUClassNotFound")
    world.delete("Pod", "virt-launcher-vm-1", "default")
    world.reconcile()
    assert world.get("VirtualMachineInstance", "vm-1", "default") is None
    assert (status(world)["phase"], condition(world, "Admitted")[1]) == (
        "Refused",
        "GPUClassNotFound",
    )


# --- a VMI's spec never changes: one that has not started is replaced ---------------------------

TOLERATION = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


def one_round(world: World) -> None:
    """One round of every controller: what the cluster shows between two reconciles."""
    for controller in world.controllers:
        controller.run()


def synced(world: World, kind: str, name: str, namespace: str) -> bool:
    """Whether Crossplane's last apply went through (no write refused)."""
    conditions = world.get(kind, name, namespace)["status"].get("conditions") or []
    return not any(c["type"] == "Synced" and c["status"] == "False" for c in conditions)


def test_the_api_server_refuses_a_change_to_a_vmis_spec_as_kubevirt_does(world):
    world.apply(vm([{"className": "example-whole-gpu"}]))
    world.reconcile()
    vmi = copy.deepcopy(world.get("VirtualMachineInstance", "vm-1", "default"))
    vmi["spec"]["tolerations"] = [TOLERATION]
    with pytest.raises(Refused) as refused:
        world.api.update(vmi)
    assert str(refused.value) == (
        'admission webhook "virtualmachineinstances-update-validator.kubevirt.io" denied the '
        "request: update of VMI object is restricted"
    )
    assert "tolerations" not in world.get("VirtualMachineInstance", "vm-1", "default")["spec"]
    labelled = copy.deepcopy(world.get("VirtualMachineInstance", "vm-1", "default"))
    labelled["metadata"]["labels"]["team"] = "a"  # metadata stays writable
    assert world.api.update(labelled)["metadata"]["labels"]["team"] == "a"


def test_a_vmi_that_has_not_started_is_recreated_with_the_new_spec(new_gpu):
    world = new_gpu
    world.apply(vm([{"className": "example-new-gpu", "count": 2}]))
    world.reconcile()
    assert status(world)["phase"] == "Scheduling"  # no node advertises example.com/new-gpu yet
    world.patch("GPUClass", "example-new-gpu", {"tolerations": [TOLERATION]})
    one_round(world)  # one reconcile: the VMI goes, the Instance says why
    assert world.get("VirtualMachineInstance", "vm-1", "default") is None
    assert status(world)["phase"] == "Starting"
    admitted = condition(world, "Admitted")
    assert admitted[:2] == ("False", "ReplacingVirtualMachine")
    message = (
        "the VirtualMachineInstance has not started and a start now would make another one "
        "(tolerations differ); recreating it with the new spec"
    )
    assert admitted[2] == status(world)["phaseMessage"] == message
    world.reconcile()  # the next reconcile composes the new VMI
    vmi = world.get("VirtualMachineInstance", "vm-1", "default")
    assert vmi["spec"]["tolerations"] == [TOLERATION]
    assert status(world)["phase"] == "Scheduling"
    assert synced(world, "Instance", "vm-1", "default")


def test_a_quantity_kubevirt_stores_in_canonical_form_is_no_new_spec(new_gpu):
    world = new_gpu
    found = vm([{"className": "example-new-gpu"}])
    found["spec"]["volume"] = {"ephemeral": {"capacity": "1024Mi"}}
    world.apply(found)
    world.reconcile()
    stored = world.get("VirtualMachineInstance", "vm-1", "default")
    assert stored["spec"]["volumes"][1] == {
        "name": "workspace",
        "emptyDisk": {"capacity": "1024Mi"},
    }
    # KubeVirt's defaulting stores the spec it decoded, its quantities in canonical form
    stored["spec"]["volumes"][1]["emptyDisk"]["capacity"] = "1Gi"
    one_round(world)
    assert world.get("VirtualMachineInstance", "vm-1", "default") is not None  # kept, not replaced
    assert (status(world)["phase"], condition(world, "Admitted")[:2]) == (
        "Scheduling",
        ("True", "VirtualMachineInstanceComposed"),
    )
    assert synced(world, "Instance", "vm-1", "default")


def test_a_stopped_vm_no_longer_reads_scheduled(world):
    """Crossplane keeps a condition a function stops sending: a stopped VM says both of its
    conditions anew, or it would go on reading Scheduled=True on the node it left."""
    world.apply(vm([{"className": "example-whole-gpu"}]))
    world.reconcile()
    assert condition(world, "Scheduled")[:2] == ("True", "Scheduled")
    world.patch("Instance", "vm-1", {"stop": True}, "default")
    world.reconcile()
    assert status(world)["phase"] == "Stopped"
    assert condition(world, "Scheduled")[:2] == ("False", "Stopped")
    assert condition(world, "RestartRequired")[:2] == ("False", "NotRunning")
    world.patch("Instance", "vm-1", {"stop": False}, "default")
    world.reconcile()
    assert condition(world, "Scheduled")[:2] == ("True", "Scheduled")
    assert condition(world, "RestartRequired")[:2] == ("False", "UpToDate")
