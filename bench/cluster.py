"""A synthetic cluster as the API server hands it to Crossplane: realistic objects, any size.

Every node has 8 × H100 80GB and one of two CPU models. Nodes come in eight shapes that repeat:
idle ones, whole-card (Exclusive) jobs, shared cards (up to 10 holders), slices by percent and
by MiB, and — on a quarter of the nodes — cards in MIG mode with partitions taken, so every
sharing mode the ledger knows is allocated somewhere. Each node has:

- its `Devices` (the agent's spec, the status the devices handler writes, Crossplane's
  `spec.crossplane` and conditions), computed by the real devices handler;
- its summary `ConfigMap`, exactly as the devices handler composes it, with the metadata the
  API server and Crossplane add (uid, resourceVersion, owner, Crossplane's label);
- its `Node` as its writers leave it: the kubelet (taints, capacity, conditions, addresses,
  node info, 20 images), NFD (with GPU feature discovery's labels and our NodeFeatures'), the
  GPU Operator, and virt-handler, whose node labeller adds 127 labels of CPU models, CPU
  features and Hyper-V enlightenments (as many of each family as KubeVirt's own fixture of a
  labelled node);
- its VM node state `ConfigMap`, as the devices handler keeps it from its Node (every node
  virt-handler runs on has one), stored as the summary is; with the Catalog's `vmNodeSelector`
  set, the VM nodes' states carry the GPU Operator's label too;
- on every fourth node a KubeVirt launcher Pod holding two passthrough H100s.

Every object carries `metadata.managedFields` as the API server keeps it, one entry per writer
listing what it set (bench/apiserver.py): Crossplane's cache keeps them, and so every request
that carries the object does: a summary ConfigMap is 2.3 KiB with them (1.5 KiB without), and
a Node 28 KiB with them and the node labeller's labels (9 KiB before either was modelled).

Every fourth node serves VMs: the GPU Operator runs it in vm-passthrough mode, so its sandbox
device plugin advertises the passthrough resource and labels it so
(`nvidia.com/gpu.deploy.sandbox-device-plugin`); the others run in container mode. Every Node
carries virt-handler's `kubevirt.io/schedulable: "true"`, as KubeVirt's default placement
(virt-handler on every node) labels them; `vm_nodes_only()` gives the cluster whose
virt-handler is placed on the quarter of nodes that serve VMs (the others then carry nothing
virt-handler sets).

`before()` gives the Devices as release 0.1.x stored them (no summary ConfigMap, no `inputs`
digest): what a pool reconcile carried until now. Objects are built once per shape and stamped
per node by replacing a token, so a 20,000-node cluster builds in seconds.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bench import apiserver
from functions.agent.agent import FIELD_MANAGER as AGENT
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
    obj["metadata"]["managedFields"] = devices_managed_fields(obj)
    summary = as_stored(
        desired.resources["summary"],
        obj,
        "summary",
        f"5{TOKEN}00-71aa-4c3e-8a0b-1d2e3f4a{shape:02d}{cpu:02d}",
    )
    return obj, summary


def as_stored(
    composed: dict[str, Any], owner: dict[str, Any], resource: str, uid: str
) -> dict[str, Any]:
    """An object the devices handler composed for `owner`, as the API server stores what
    Crossplane applied: uid, resourceVersion, its owner, Crossplane's label and annotation, and
    Crossplane's managedFields entry (a copy)."""
    stored = copy.deepcopy(composed)
    name = owner["metadata"]["name"]
    stored["metadata"].update(
        uid=uid,
        resourceVersion=f"5{TOKEN}",
        creationTimestamp=STAMP,
        annotations={"crossplane.io/composition-resource-name": resource},
        ownerReferences=[
            {"apiVersion": owner["apiVersion"], "kind": "Devices", "name": name,
             "uid": owner["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
        ],
    )  # fmt: skip
    stored["metadata"]["labels"]["crossplane.io/composite"] = name
    stored["metadata"]["managedFields"] = [
        apiserver.entry(
            composed_owner(name), "Apply", "v1",
            {"metadata": {k: stored["metadata"][k]
                          for k in ("labels", "annotations", "ownerReferences")},
             "data": stored["data"]},
            STAMP,
        )
    ]  # fmt: skip
    return stored


def vm_node_state(owner: dict[str, Any], node: dict[str, Any], catalog: dict[str, Any]) -> str:
    """The VM node state the devices handler keeps of `node` under `catalog`, as stored (its
    JSON; "" where KubeVirt does not run on the node)."""
    required = {"catalog": [catalog], "node": [node]}
    desired = HANDLERS["devices"].compose(Request.of(owner, required=required))
    if "vm-node" not in desired.resources:
        return ""
    uid = f"6{TOKEN}00-3c1d-4f0e-9a2b-7e6d5c4b{owner['metadata']['uid'][-4:]}"
    return json.dumps(as_stored(desired.resources["vm-node"], owner, "vm-node", uid))


def composed_owner(composite: str) -> str:
    """Crossplane's field manager for what it composes for a Devices (ComposedFieldOwnerName:
    its prefix and a SHA-256 of the composite's name and group kind)."""
    digest = hashlib.sha256(f"{composite}Devices.worker.gpustack.ai".encode()).hexdigest()
    return f"apiextensions.crossplane.io/composed/{digest}"


def devices_managed_fields(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """A Devices' writers: the agent applies its spec, Crossplane its resource references
    and status, and adds its finalizer."""
    spec = {k: v for k, v in obj["spec"].items() if k != "crossplane"}
    labels = {k: v for k, v in obj["metadata"]["labels"].items() if k != "crossplane.io/composite"}
    owner, api_version = "apiextensions.crossplane.io/composite", obj["apiVersion"]
    return [
        apiserver.entry(AGENT, "Apply", api_version,
                        {"metadata": {"labels": labels}, "spec": spec}, STAMP),
        apiserver.entry("crossplane", "Update", api_version,
                        {"metadata": {"finalizers": obj["metadata"]["finalizers"]}}, STAMP),
        apiserver.entry(owner, "Apply", api_version,
                        {"metadata": {"labels": {"crossplane.io/composite": obj["metadata"]["name"]}},
                         "spec": {"crossplane": obj["spec"]["crossplane"]}}, STAMP),
        apiserver.entry(owner, "Apply", api_version, {"status": obj["status"]}, STAMP, "status"),
    ]  # fmt: skip


def old_devices(obj: dict[str, Any]) -> dict[str, Any]:
    """The same Devices as release 0.1.x stored it: no digest, no summary ConfigMap."""
    old = copy.deepcopy(obj)
    old["status"].pop("inputs", None)
    refs = old["spec"]["crossplane"]["resourceRefs"]
    old["spec"]["crossplane"]["resourceRefs"] = [r for r in refs if r["kind"] != "ConfigMap"]
    old["metadata"]["managedFields"] = devices_managed_fields(old)
    return old


NFD_CPU = [
    "cpuid.ADX", "cpuid.AESNI", "cpuid.AMXBF16", "cpuid.AMXINT8", "cpuid.AMXTILE", "cpuid.AVX",
    "cpuid.AVX2", "cpuid.AVX512BF16", "cpuid.AVX512BW", "cpuid.AVX512CD", "cpuid.AVX512DQ",
    "cpuid.AVX512F", "cpuid.AVX512VL", "cpuid.AVX512VNNI", "cpuid.FMA3", "cpuid.SHA",
    "cpuid.VMX", "hardware_multithreading", "model.family", "model.id", "model.vendor_id",
    "pstate.status", "pstate.turbo", "cstate.enabled",
]  # fmt: skip


def node_object(cpu: int, vm: bool) -> dict[str, Any]:
    """A Node as its writers leave it, each of them named in managedFields with what it set:
    the kubelet (its registration, then its status), the controller manager, NFD (GPU feature
    discovery's labels and our NodeFeatures' go through it too), the GPU Operator and
    virt-handler. On a VM node (`vm`) the GPU Operator runs vm-passthrough: its sandbox device
    plugin advertises the VM resource and it labels the node so; on the others, container
    mode."""
    name = node_name(0).replace("00000", TOKEN)
    g_key = "intel-xeon-platinum-8480" if cpu == 0 else "amd-epyc-9454"
    resources = {
        "cpu": str(CPUS[cpu]["cores"]),
        "ephemeral-storage": "7500000000Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "2097152000Ki",
        "pods": "250",
        **({VM_RESOURCE: "8"} if vm else {}),
    }
    kubelet = {
        "metadata": {
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "topology.kubernetes.io/region": "eu-west-1",
                "topology.kubernetes.io/zone": "eu-west-1a",
            },
            "annotations": {
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-0{TOKEN}"}),
            },
        },
        "spec": {
            "providerID": f"aws:///eu-west-1a/i-0{TOKEN}a1b2c3d4",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
    }
    kubelet_status = {
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
    controller_manager = {
        "metadata": {"annotations": {"node.alpha.kubernetes.io/ttl": "0"}},
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"]},
    }
    nfd = {
        "metadata": {
            "labels": {
                **{f"feature.node.kubernetes.io/cpu-{k}": "true" for k in NFD_CPU},
                "feature.node.kubernetes.io/kernel-version.full": "6.8.0-1015-aws",
                "feature.node.kubernetes.io/pci-10de.present": "true",
                "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.memory": "81559",
                "nvidia.com/cuda.driver.major": "580",
                "gpustack.ai/managed": "true",
                f"general.feature.gpustack.ai/{g_key}": "true",
                f"acceleratable.feature.gpustack.ai/{A_KEY}": "true",
                f"acceleratable.feature.gpustack.ai/{A_KEY}.count": "8",
                f"acceleratable.feature.gpustack.ai/{A_KEY}.memory": "81559Mi",
                "feature.gpustack.ai/acceleratable": "true",
            },
            "annotations": {
                "nfd.node.kubernetes.io/feature-labels": ",".join(f"cpu-{k}" for k in NFD_CPU),
            },
        },
    }
    operator = {"metadata": {"labels": GPU_OPERATOR_VM_NODE if vm else GPU_OPERATOR_CONTAINER_NODE}}
    identity = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"9{TOKEN}00-2b1c-4d3e-8f4a-5b6c7d8e9f{cpu:02d}",
            "resourceVersion": f"9{TOKEN}",
            "creationTimestamp": STAMP,
        },
    }
    updates = (
        ("kubelet", "", kubelet),
        ("kubelet", "status", kubelet_status),
        ("kube-controller-manager", "", controller_manager),
        ("nfd-master", "", nfd),
        ("gpu-operator", "", operator),
        (VIRT_HANDLER, "", virt_handler(cpu)),
    )
    return apiserver.stored(identity, updates, STAMP)


VIRT_HANDLER = "virt-handler"
# What KubeVirt's node labeller (inside virt-handler) labels a node with, family by family, as
# many of each as KubeVirt's own fixture of a labelled node carries
# (pkg/virt-handler/node-labeller): the CPU features beyond the minimal model, the CPU models
# usable and usable as a migration target, the host model and the features it requires, the
# vendor, the TSC timer and the Hyper-V enlightenments.
CPU_FEATURES = (
    "3dnowprefetch abm adx aes amx-bf16 amx-int8 amx-tile arat arch-capabilities avx avx-vnni "
    "avx2 avx512-bf16 avx512-fp16 avx512bitalg avx512bw avx512cd avx512dq avx512f avx512ifma "
    "avx512vbmi avx512vbmi2 avx512vl avx512vnni bmi1 bmi2 clflushopt clwb erms f16c fma "
    "fsgsbase fsrm gfni hypervisor ibpb ibrs ibrs-all invpcid invtsc md-clear mds-no movbe "
    "pcid pclmuldq pdpe1gb pku rdseed rdtscp serialize sha-ni smap smep spec-ctrl ssbd "
    "tsc-deadline umip"
)
CPU_MODELS = {
    0: "Broadwell-noTSX Broadwell-noTSX-IBRS Cascadelake-Server-noTSX Haswell-noTSX "
    "Haswell-noTSX-IBRS Icelake-Server-noTSX IvyBridge IvyBridge-IBRS Nehalem Nehalem-IBRS "
    "Penryn SandyBridge SandyBridge-IBRS SapphireRapids Skylake-Server-noTSX-IBRS Westmere "
    "Westmere-IBRS",
    1: "EPYC EPYC-Genoa EPYC-IBPB EPYC-Milan EPYC-Milan-v2 EPYC-Rome EPYC-Rome-v4 Haswell-noTSX "
    "IvyBridge Nehalem Opteron_G1 Opteron_G2 Opteron_G3 Penryn SandyBridge Westmere "
    "Westmere-IBRS",
}
HOST_MODEL = {0: ("SapphireRapids", "Intel"), 1: ("EPYC-Genoa", "AMD")}
HYPERV = (
    "base frequencies ipi reenlightenment reset runtime synic synic2 synictimer time tlbflush "
    "vpindex"
)


def virt_handler(cpu: int) -> dict[str, Any]:
    """What virt-handler sets on every node it runs on: its heartbeat label and annotation
    and its node labeller's labels."""
    models = CPU_MODELS[cpu].split()
    host_model, vendor = HOST_MODEL[cpu]
    labels = {
        "kubevirt.io/schedulable": "true",
        "kubevirt.io/ksm-enabled": "false",
        **{f"cpu-feature.node.kubevirt.io/{f}": "true" for f in CPU_FEATURES.split()},
        **{f"cpu-model.node.kubevirt.io/{m}": "true" for m in models},
        **{f"cpu-model-migration.node.kubevirt.io/{m}": "true" for m in models},
        f"host-model-cpu.node.kubevirt.io/{host_model}": "true",
        **{
            f"host-model-required-features.node.kubevirt.io/{f}": "true"
            for f in CPU_FEATURES.split()[::3]
        },
        f"cpu-vendor.node.kubevirt.io/{vendor}": "true",
        "cpu-timer.node.kubevirt.io/tsc-frequency": "2000000000",
        "cpu-timer.node.kubevirt.io/tsc-scalable": "true",
        "scheduling.node.kubevirt.io/tsc-frequency-2000000000": "true",
        **{f"hyperv.node.kubevirt.io/{h}": "true" for h in HYPERV.split()},
    }
    annotations = {"kubevirt.io/heartbeat": STAMP, "kubevirt.io/ksm-handler-managed": "false"}
    return {"metadata": {"labels": labels, "annotations": annotations}}


def without_virt_handler(node: dict[str, Any]) -> dict[str, Any]:
    """The Node as it is where virt-handler does not run: none of what it set (a copy)."""
    entries = node["metadata"]["managedFields"]
    written = next(e for e in entries if e["manager"] == VIRT_HANDLER)["fieldsV1"]["f:metadata"]
    metadata = dict(node["metadata"])
    metadata["managedFields"] = [e for e in entries if e["manager"] != VIRT_HANDLER]
    for part in ("labels", "annotations"):
        keys = {key.removeprefix("f:") for key in written.get(f"f:{part}", {})}
        metadata[part] = {k: v for k, v in metadata[part].items() if k not in keys}
    return {**node, "metadata": metadata}


def launcher_pod(index: int) -> dict[str, Any]:
    """A KubeVirt launcher Pod holding two passthrough H100s on node `index`, as virt-controller
    created it and its kubelet reports it."""
    node, vm = node_name(index), f"vm-{index:05d}"
    created = {
        "metadata": {
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
    }  # fmt: skip
    reported = {
        "status": {"phase": "Running", "podIP": "10.244.3.17", "hostIP": "10.0.12.34",
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip
    identity = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"virt-launcher-{vm}-x7k2p",
            "namespace": "tenant-a",
            "uid": f"{index:08d}-7c1d-4e2f-9a3b-4c5d6e7f8a9b",
            "resourceVersion": f"7{index:05d}",
            "creationTimestamp": STAMP,
        },
    }
    updates = (("virt-controller", "", created), ("kubelet", "status", reported))
    return apiserver.stored(identity, updates, STAMP)


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


def vm_nodes_only(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Nodes as they are with virt-handler placed on the VM nodes alone: the others carry
    nothing of it, `kubevirt.io/schedulable` included (copies; the cluster's own Nodes are left
    as they are)."""
    return [
        node if index % VM_NODES_EVERY == 0 else without_virt_handler(node)
        for index, node in enumerate(nodes)
    ]


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


def templates() -> dict[tuple[int, int], dict[str, str]]:
    """Per (shape, cpu), as JSON: the Devices, its 0.1.x form, its summary; its Node and its VM
    node state (the default Catalog; "selected": the Catalog's vmNodeSelector set to the GPU
    Operator's label) as a VM node ("vm") and as a container node."""
    found = {}
    selecting = copy.deepcopy(CATALOG)
    selecting["spec"]["vmNodeSelector"] = dict(GPU_OPERATOR_VM_NODE)
    for shape in range(SHAPES):
        for cpu in range(len(CPUS)):
            obj, summary = devices_object(shape, cpu)
            texts = {
                "Devices": json.dumps(obj),
                "OldDevices": json.dumps(old_devices(obj)),
                "ConfigMap": json.dumps(summary),
            }
            for role, vm in (("vm", True), ("container", False)):
                node = node_object(cpu, vm)
                texts[f"Node {role}"] = json.dumps(node)
                texts[f"VmNode {role}"] = vm_node_state(obj, node, CATALOG)
                texts[f"VmNodeSelected {role}"] = vm_node_state(obj, node, selecting)
            found[shape, cpu] = texts
    return found


_TEMPLATES: dict[tuple[int, int], dict[str, str]] = {}


def build(nodes: int) -> Cluster:
    """A cluster of `nodes` nodes: Devices (new and 0.1.x), summaries, Nodes, launchers."""
    if not _TEMPLATES:
        _TEMPLATES.update(templates())
    cluster = Cluster(nodes)
    kinds = ("Devices", "OldDevices", "ConfigMap", "Node", "VmNode", "VmNodeSelected")
    for kind in kinds:
        cluster.objects[kind] = []
    for index in range(nodes):
        texts = _TEMPLATES[index % SHAPES, (index // SHAPES) % len(CPUS)]
        role = "container" if index % VM_NODES_EVERY else "vm"
        number = f"{index:05d}"
        for kind in kinds:
            text = texts.get(kind) or texts[f"{kind} {role}"]
            cluster.objects[kind].append(json.loads(text.replace(TOKEN, number)))
    cluster.objects["Pod"] = [launcher_pod(i) for i in range(0, nodes, VM_NODES_EVERY)]
    cluster.objects["GPUClass"] = copy.deepcopy(GPU_CLASSES)
    cluster.objects["KubeVirt"] = [copy.deepcopy(KUBEVIRT)]
    cluster.objects["Catalog"] = [copy.deepcopy(CATALOG)]
    cluster.objects["Namespace"] = copy.deepcopy(NAMESPACES)
    cluster.objects["RuntimeClass"] = [copy.deepcopy(RUNTIME_CLASS)]
    return cluster
