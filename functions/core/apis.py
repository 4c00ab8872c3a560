"""The API versions and kinds the functions read and compose, each defined once."""

from __future__ import annotations

WORKER = "worker.gpustack.ai/v1alpha1"  # Catalog, Devices, InstanceType, Instance, ...
GPU_CLASS = "cozystack.io/v1alpha1"
KUEUE = "kueue.x-k8s.io/v1beta2"
NFD = "nfd.k8s-sigs.io/v1alpha1"
KUBEVIRT = "kubevirt.io/v1"
CORE = "v1"
NODE_API = "node.k8s.io/v1"  # RuntimeClass
STORAGE = "storage.k8s.io/v1"  # StorageClass
RESOURCE = "resource.k8s.io/v1"  # Dynamic Resource Allocation: ResourceClaimTemplate


def group(api_version: str) -> str:
    """`kueue.x-k8s.io/v1beta2` → `kueue.x-k8s.io`; the core group is ``."""
    return api_version.rpartition("/")[0]
