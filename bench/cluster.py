"""A synthetic cluster as the API server hands it to Crossplane: realistic objects, any size.

Every node has 8 × H100 80GB and one of two CPU models. Nodes come in eight shapes that repeat:
idle ones, whole-card (Exclusive) jobs, shared cards (up to 10 holders), slices by percent and
by MiB, and — on a quarter of the nodes — cards in MIG mode with partitions taken, so every
sharing mode the ledger knows is allocated somewhere. Each node has:

- its `Devices` (the agent's spec, the status the devices handler writes, Crossplane's
  `spec.crossplane` and conditions), computed by the real devices handler;
- its summary `ConfigMap`, exactly as the devices handler composes it, with the metadata the
  API server and Crossplane add (uid, resourceVersion, owner, Crossplane's label);
- its `Node` as a kubelet publishes it (NFD and GFD labels, taints, capacity, conditions,
  addresses, node info, 20 images; managedFields left out, as in every object here);
- on every fourth node a KubeVirt launcher Pod holding two passthrough H100s.

Every fourth node serves VMs: the GPU Operator runs it in vm-passthrough mode, so its sandbox
device plugin advertises the passthrough resource and labels it so
(`nvidia.com/gpu.deploy.sandbox-device-plugin`); the others run in container mode. Every Node
carries virt-handler's `kubevirt.io/schedulable: "true"`, as KubeVirt's default placement
(virt-handler on every node) labels them; `vm_nodes_only()` gives the cluster whose
virt-handler is placed on the quarter of nodes that serve VMs.

`before()` gives the Devices as release 0.1.x stored them (no summary ConfigMap, no `inputs`
digest): what a pool reconcile carried until now. Objects are built once per shape and stamped
per node by replacing a token, so a 20,000-node cluster builds in seconds.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from functions.core import mig
from functions.core.labels import GPU_OPERATOR_VM_NODE
from functions.handlers import HANDLERS
from functions.handlers.base import Request

TOKEN = "@@@@@"  # five characters, replaced by the node's number
PRODUCT = "NVIDIA H100 80GB HBM3"
A_KEY = "nvidia-h100-80gb-hbm3"
VM_RESOURCE = "nvidia.com/GH100_H100_SXM5_80GB"  # KubeVirt's passthrough resource for it
# The GPU Operator's workload config per node: its sandbox device plugin, which advertises the
# VM resource, runs on the VM nodes (labelled GPU_OPERATOR_VM_NODE); its container device
# plugin on the others.
GPU_OPERATOR_CONTAINER_NODE = {"nvidia.com/gpu.deploy.device-plugin": "true"}
SYSTEM = "gpustack-system"
CPUS = (
    {"vendor": "Intel", "modelName": "Intel(R) Xeon(R) Platinum 8480+", "family": "6",
     "model": "143", "cores": 224},
    {"vendor": "AMD", "modelName": "AMD EPYC 9454 48-Core Processor", "family": "25",
     "model": "17", "cores": 192},
)  # fmt: skip
SHAPES = 8
STAMP = "2026-10-02T08:14:31Z"


def node_name(index: int) -> str:
    return f"gpu-h100-{index:05d}"


def card_uuid(card: int) -> str:
    return f"GPU-3f2a6c1e-{TOKEN}-4a1b-9c2d-8e7f0a{card:06d}"


def pod(namespace: str, name: str) -> dict[str, str]:
    return {
        "pod": f"{namespace}/{name}-{TOKEN}",
        "podUID": f"7f1c{TOKEN}-0000-4000-8000-{name[-4:]:0>12}",
    }


def exclusive(card: int, job: str) -> dict[str, Any]:
    return {
        **pod("research", job),
        "container": "main",
        "device": card_uuid(card),
        "mode": "Exclusive",
    }


def shared(card: int, job: str) -> dict[str, Any]:
    return {
        **pod("inference", job),
        "container": "main",
        "device": card_uuid(card),
        "mode": "Shared",
    }


def sliced(card: int, job: str, percent: int = 0, mib: int = 0) -> dict[str, Any]:
    size = {"memoryPercentage": percent} if percent else {"memoryMiB": mib}
    return {**pod("notebooks", job), "container": "main", "device": card_uuid(card),
            "mode": "Sliced", **size, "coresPercentage": 50}  # fmt: skip


def partition(card: int, job: str, profile: str, start: int, size: int) -> dict[str, Any]:
    return {**pod("batch", job), "container": "main", "device": card_uuid(card),
            "mode": "Partitioned", "profile": profile,
            "placement": {"start": start, "size": size}}  # fmt: skip


# Per shape: (cards in MIG mode, allocations). Shapes 6 and 7 carry the MIG cards.
ALLOCATIONS: tuple[tuple[int, list[dict[str, Any]]], ...] = (
    (0, []),
    (0, [exclusive(0, "train-0001"), exclusive(1, "train-0002"), exclusive(2, "train-0003")]),
    (0, [*(shared(0, f"serve-{i:04d}") for i in range(3)), shared(1, "serve-0011"),
         shared(1, "serve-0012"), exclusive(4, "train-0004")]),
    (0, [sliced(0, "nb-0001", percent=25), sliced(0, "nb-0002", percent=20),
         sliced(1, "nb-0003", mib=20480), shared(2, "serve-0021")]),
    (0, []),
    (0, [*(exclusive(c, f"train-{c + 10:04d}") for c in range(4)),
         *(shared(4, f"serve-{i + 30:04d}") for i in range(10)),
         *(sliced(5, f"nb-{i + 10:04d}", percent=10) for i in range(4))]),
    (2, [partition(0, "mig-0001", "3g.40gb", 0, 4), partition(0, "mig-0002", "1g.10gb", 4, 1),
         partition(1, "mig-0003", "7g.80gb", 0, 8), exclusive(3, "train-0020")]),
    (4, [*(partition(0, f"mig-{i + 10:04d}", "1g.10gb", i, 1) for i in range(4)),
         partition(1, "mig-0020", "2g.20gb", 0, 2), partition(1, "mig-0021", "2g.20gb", 2, 2),
         sliced(5, "nb-0030", percent=50)]),
)  # fmt: skip


def card(index: int, in_mig: bool, partitions: list[dict[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {
        "uuid": card_uuid(index),
        "index": index,
        "minor": index,
        "product": PRODUCT,
        "memoryMiB": 81559,
        "cores": 16896,
        "computeCapability": "9.0",
        "pciBusId": f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        "numaNode": index // 4,
        "healthy": True,
        "mig": {"enabled": in_mig},
    }
    if in_mig:
        found["mig"]["profiles"] = [
            {
                "name": p.name,
                "memoryMiB": p.memory_mib,
                "computeSlices": p.compute_slices,
                "memorySlices": p.memory_slices,
                "placements": [{"start": pl.start, "size": pl.size} for pl in p.placements],
            }
            for p in mig.profiles_for(PRODUCT)
        ]
        found["mig"]["partitions"] = partitions
    return found


def devices_spec(shape: int, cpu: int) -> dict[str, Any]:
    mig_cards, allocations = ALLOCATIONS[shape]
    taken = {
        a["device"]: [] for a in allocations if a["mode"] == "Partitioned"
    }  # the partitions that exist are the ones allocated
    for a in allocations:
        if a["mode"] == "Partitioned":
            taken[a["device"]].append({"profile": a["profile"], "placement": a["placement"]})
    return {
        "os": "linux",
        "arch": "amd64",
        "cpu": dict(CPUS[cpu]),
        "accelerators": [
            {
                "manufacturer": "nvidia",
                "driverVersion": "580.159.03",
                "runtimeVersion": "13.0",
                "devices": [card(i, i < mig_cards, taken.get(card_uuid(i), [])) for i in range(8)],
            }
        ],
        "allocations": allocations,
    }


def agent_labels(cpu: int) -> dict[str, str]:
    g_key = "intel-xeon-platinum-8480" if cpu == 0 else "amd-epyc-9454"
    return {
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        f"general.feature.gpustack.ai/{g_key}": "true",
        f"acceleratable.feature.gpustack.ai/{A_KEY}": "true",
    }


def conditions(generation: int) -> list[dict[str, Any]]:
    return [
        {"type": t, "status": "True", "reason": r, "lastTransitionTime": STAMP,
         "observedGeneration": generation}
        for t, r in (("Synced", "ReconcileSuccess"), ("Ready", "Available"))
    ]  # fmt: skip


def devices_object(shape: int, cpu: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A node's Devices and its summary ConfigMap, as stored, for the token node."""
    name = node_name(0).replace("00000", TOKEN)
    uid = f"0{TOKEN}00-4e2b-4c5d-9f11-2c0c8d6e{shape:02d}{cpu:02d}"
    obj = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {
            "name": name,
            "uid": uid,
            "resourceVersion": f"4{TOKEN}",
            "generation": 3,
            "creationTimestamp": STAMP,
            "labels": {**agent_labels(cpu), "crossplane.io/composite": name},
            "finalizers": ["composite.apiextensions.crossplane.io"],
        },
        "spec": devices_spec(shape, cpu),
    }
    desired = HANDLERS["devices"].compose(Request.of(obj, required={"catalog": []}))
    refs = [
        {"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
         "namespace": SYSTEM}
        for _, o in sorted(desired.resources.items())
    ]  # fmt: skip
    obj["spec"]["crossplane"] = {
        "compositionRef": {"name": "devices.worker.gpustack.ai"},
        "compositionRevisionRef": {"name": "devices.worker.gpustack.ai-5f7c2a1"},
        "compositionUpdatePolicy": "Automatic",
        "resourceRefs": refs,
    }
    obj["status"] = {**desired.status, "conditions": conditions(3)}
    summary = copy.deepcopy(desired.resources["summary"])
    summary["metadata"].update(
        uid=f"5{TOKEN}00-71aa-4c3e-8a0b-1d2e3f4a{shape:02d}{cpu:02d}",
        resourceVersion=f"5{TOKEN}",
        creationTimestamp=STAMP,
        annotations={"crossplane.io/composition-resource-name": "summary"},
        ownerReferences=[
            {"apiVersion": obj["apiVersion"], "kind": "Devices", "name": name, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}
        ],
    )  # fmt: skip
    summary["metadata"]["labels"]["crossplane.io/composite"] = name
    return obj, summary


def old_devices(obj: dict[str, Any]) -> dict[str, Any]:
    """The same Devices as release 0.1.x stored it: no digest, no summary ConfigMap."""
    old = copy.deepcopy(obj)
    old["status"].pop("inputs", None)
    refs = old["spec"]["crossplane"]["resourceRefs"]
    old["spec"]["crossplane"]["resourceRefs"] = [r for r in refs if r["kind"] != "ConfigMap"]
    return old


NFD_CPU = [
    "cpuid.ADX", "cpuid.AESNI", "cpuid.AMXBF16", "cpuid.AMXINT8", "cpuid.AMXTILE", "cpuid.AVX",
    "cpuid.AVX2", "cpuid.AVX512BF16", "cpuid.AVX512BW", "cpuid.AVX512CD", "cpuid.AVX512DQ",
    "cpuid.AVX512F", "cpuid.AVX512VL", "cpuid.AVX512VNNI", "cpuid.FMA3", "cpuid.SHA",
    "cpuid.VMX", "hardware_multithreading", "model.family", "model.id", "model.vendor_id",
    "pstate.status", "pstate.turbo", "cstate.enabled",
]  # fmt: skip


def node_object(cpu: int) -> dict[str, Any]:
    """A Node as its kubelet, NFD, GPU feature discovery and our NodeFeatures label it."""
    name = node_name(0).replace("00000", TOKEN)
    g_key = "intel-xeon-platinum-8480" if cpu == 0 else "amd-epyc-9454"
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "topology.kubernetes.io/region": "eu-west-1",
        "topology.kubernetes.io/zone": "eu-west-1a",
        **{f"feature.node.kubernetes.io/cpu-{k}": "true" for k in NFD_CPU},
        "feature.node.kubernetes.io/kernel-version.full": "6.8.0-1015-aws",
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/cuda.driver.major": "580",
        **GPU_OPERATOR_VM_NODE,  # left on the VM nodes only (container_mode)
        "gpustack.ai/managed": "true",
        f"general.feature.gpustack.ai/{g_key}": "true",
        f"acceleratable.feature.gpustack.ai/{A_KEY}": "true",
        f"acceleratable.feature.gpustack.ai/{A_KEY}.count": "8",
        f"acceleratable.feature.gpustack.ai/{A_KEY}.memory": "81559Mi",
        "feature.gpustack.ai/acceleratable": "true",
        "kubevirt.io/schedulable": "true",  # virt-handler's default placement: every node
    }
    resources = {
        "cpu": str(CPUS[cpu]["cores"]),
        "ephemeral-storage": "7500000000Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "2097152000Ki",
        "pods": "250",
        VM_RESOURCE: "8",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"9{TOKEN}00-2b1c-4d3e-8f4a-5b6c7d8e9f{cpu:02d}",
            "resourceVersion": f"9{TOKEN}",
            "creationTimestamp": STAMP,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "nfd.node.kubernetes.io/feature-labels": ",".join(
                    f"cpu-{k}" for k in NFD_CPU
                ),
                "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-0{TOKEN}"}),
            },
        },
        "spec": {
            "podCIDR": "10.244.0.0/24",
            "podCIDRs": ["10.244.0.0/24"],
            "providerID": f"aws:///eu-west-1a/i-0{TOKEN}a1b2c3d4",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": m,
                 "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP}
                for t, s, r, m in (
                    ("MemoryPressure", "False", "KubeletHasSufficientMemory",
                     "kubelet has sufficient memory available"),
                    ("DiskPressure", "False", "KubeletHasNoDiskPressure",
                     "kubelet has no disk pressure"),
                    ("PIDPressure", "False", "KubeletHasSufficientPID",
                     "kubelet has sufficient PID available"),
                    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                )
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.12.34"},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"ec2{TOKEN}a1b2c3d4e5f60718293a4b5c6d",
                "systemUUID": f"ec2{TOKEN}-a1b2-c3d4-e5f6-0718293a4b5c",
                "bootID": f"{TOKEN}a1-b2c3-d4e5-f607-18293a4b5c6d",
                "kernelVersion": "6.8.0-1015-aws",
                "osImage": "Ubuntu 24.04.1 LTS",
                "containerRuntimeVersion": "containerd://1.7.24",
                "kubeletVersion": "v1.33.2",
                "kubeProxyVersion": "v1.33.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": [
                {"names": [f"registry.example.com/team/image-{i}@sha256:{i:064x}",
                           f"registry.example.com/team/image-{i}:v1.{i}.0"],
                 "sizeBytes": 100_000_000 + i * 7_654_321}
                for i in range(20)
            ],
        },
    }  # fmt: skip


def launcher_pod(index: int) -> dict[str, Any]:
    """A KubeVirt launcher Pod holding two passthrough H100s on node `index`."""
    node, vm = node_name(index), f"vm-{index:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"virt-launcher-{vm}-x7k2p",
            "namespace": "tenant-a",
            "uid": f"{index:08d}-7c1d-4e2f-9a3b-4c5d6e7f8a9b",
            "resourceVersion": f"7{index:05d}",
            "creationTimestamp": STAMP,
            "labels": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": vm,
                       "vm.kubevirt.io/name": vm},
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                                 "name": vm, "uid": f"{index:08d}-aaaa-4bbb-8ccc-dddddddddddd",
                                 "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0",
                 "resources": {"limits": {VM_RESOURCE: "2", "cpu": "16", "memory": "128Gi"},
                               "requests": {VM_RESOURCE: "2", "cpu": "16", "memory": "128Gi"}}}
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {"phase": "Running", "podIP": "10.244.3.17", "hostIP": "10.0.12.34",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


GPU_CLASSES = [
    {
        "apiVersion": "cozystack.io/v1alpha1",
        "kind": "GPUClass",
        "metadata": {"name": name, "creationTimestamp": STAMP},
        "spec": {"displayName": display, "vendor": "nvidia", "model": model,
                 "mode": "passthrough", "source": {"devicePlugin": {"resourceName": resource}},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
    }
    for name, display, model, resource in (
        ("h100-80gb", "NVIDIA H100 80GB", "h100", VM_RESOURCE),
        ("a100-80gb", "NVIDIA A100 80GB", "a100", "nvidia.com/GA100_A100_SXM4_80GB"),
    )
]  # fmt: skip
KUBEVIRT = {
    "apiVersion": "kubevirt.io/v1",
    "kind": "KubeVirt",
    "metadata": {"name": "kubevirt", "namespace": "cozy-kubevirt"},
    "spec": {"configuration": {"permittedHostDevices": {"pciHostDevices": [
        {"pciVendorSelector": "10DE:2330", "resourceName": VM_RESOURCE},
        {"pciVendorSelector": "10DE:20B5", "resourceName": "nvidia.com/GA100_A100_SXM4_80GB"},
    ]}}},
}  # fmt: skip
CATALOG = {
    "apiVersion": "worker.gpustack.ai/v1alpha1",
    "kind": "Catalog",
    "metadata": {"name": "default", "uid": "00000000-0000-4000-8000-00000000ca7a"},
    "spec": {},
}
NAMESPACES = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
    for n in ("default", "gpustack-system", "kube-system", "tenant-a", "research", "inference",
              "notebooks", "batch", *(f"team-{i:02d}" for i in range(42)))
]  # fmt: skip
RUNTIME_CLASS = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "nvidia"},
    "handler": "nvidia",
}


VM_NODES_EVERY = 4  # launchers run on every fourth node: the VM nodes


def container_mode(node: dict[str, Any]) -> None:
    """A node the GPU Operator runs in container mode: no sandbox device plugin, so no VM
    resource advertised."""
    labels = node["metadata"]["labels"]
    for key in GPU_OPERATOR_VM_NODE:
        del labels[key]
    labels.update(GPU_OPERATOR_CONTAINER_NODE)
    for part in ("capacity", "allocatable"):
        node["status"][part].pop(VM_RESOURCE)


def vm_nodes_only(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Nodes as virt-handler placed on the VM nodes alone labels them: the others carry no
    `kubevirt.io/schedulable` (copies; the cluster's own Nodes are left as they are)."""
    found = []
    for index, node in enumerate(nodes):
        if index % VM_NODES_EVERY:
            node = {**node, "metadata": dict(node["metadata"])}
            node["metadata"]["labels"] = {
                k: v
                for k, v in node["metadata"]["labels"].items()
                if k != "kubevirt.io/schedulable"
            }
        found.append(node)
    return found


@dataclass
class Cluster:
    """`nodes` nodes' objects (as dicts) and the cluster-wide ones, by kind."""

    nodes: int
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def all(self) -> Iterator[dict[str, Any]]:
        for found in self.objects.values():
            yield from found

    def kind(self, kind: str) -> list[dict[str, Any]]:
        return self.objects.get(kind, [])


def templates() -> dict[tuple[int, int], tuple[str, str, str, str]]:
    """Per (shape, cpu): the JSON of the Devices, its 0.1.x form, its summary and its Node."""
    found = {}
    for shape in range(SHAPES):
        for cpu in range(len(CPUS)):
            obj, summary = devices_object(shape, cpu)
            found[shape, cpu] = tuple(
                json.dumps(o) for o in (obj, old_devices(obj), summary, node_object(cpu))
            )
    return found


_TEMPLATES: dict[tuple[int, int], tuple[str, str, str, str]] = {}


def build(nodes: int) -> Cluster:
    """A cluster of `nodes` nodes: Devices (new and 0.1.x), summaries, Nodes, launchers."""
    if not _TEMPLATES:
        _TEMPLATES.update(templates())
    cluster = Cluster(nodes)
    kinds = ("Devices", "OldDevices", "ConfigMap", "Node")
    for kind in kinds:
        cluster.objects[kind] = []
    for index in range(nodes):
        texts = _TEMPLATES[index % SHAPES, (index // SHAPES) % len(CPUS)]
        number = f"{index:05d}"
        for kind, text in zip(kinds, texts, strict=True):
            cluster.objects[kind].append(json.loads(text.replace(TOKEN, number)))
    for index, node in enumerate(cluster.objects["Node"]):
        if index % VM_NODES_EVERY:
            container_mode(node)
    cluster.objects["Pod"] = [launcher_pod(i) for i in range(0, nodes, VM_NODES_EVERY)]
    cluster.objects["GPUClass"] = copy.deepcopy(GPU_CLASSES)
    cluster.objects["KubeVirt"] = [copy.deepcopy(KUBEVIRT)]
    cluster.objects["Catalog"] = [copy.deepcopy(CATALOG)]
    cluster.objects["Namespace"] = copy.deepcopy(NAMESPACES)
    cluster.objects["RuntimeClass"] = [copy.deepcopy(RUNTIME_CLASS)]
    return cluster
