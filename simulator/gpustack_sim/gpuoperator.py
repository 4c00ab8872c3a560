"""The NVIDIA GPU Operator's node labelling, as its ClusterPolicy controller does it.

Where a ClusterPolicy exists (the operator is installed), each round:

- a node NFD found an NVIDIA PCI device on (`feature.node.kubernetes.io/pci-10de.present`, or
  the display-class variants) is labelled `nvidia.com/gpu.present: "true"`; one that lost it is
  labelled "false" and loses every state label;
- a GPU node's workload config is `container` unless `spec.sandboxWorkloads.enabled`; then it
  is the node's `nvidia.com/gpu.workload.config` label when that names one of the three
  configs, else `spec.sandboxWorkloads.defaultWorkload` (`container` when unset);
- the node gets the `nvidia.com/gpu.deploy.*` state labels of its config, where it lacks them
  (a value already set is honoured), and loses those only other configs have; a node labelled
  `nvidia.com/gpu.deploy.operands: "false"` loses them all.

The state labels decide where each operand's DaemonSet runs: `sandbox-device-plugin` (the
plugin that advertises VM GPUs) on `vm-passthrough` and `vm-vgpu` nodes, the container
`device-plugin` on `container` nodes. The MIG manager's label is left out: nothing here reads
it. Facts from the operator's source (`controllers/state_manager.go`: `gpuStateLabels`,
`gpuNodeLabels`, `getWorkloadConfig`, `updateGPUStateLabels`); nothing here reads the product.
"""

from __future__ import annotations

from typing import Any

from gpustack_sim.client import Client
from gpustack_sim.store import copy_of

PRESENT = "nvidia.com/gpu.present"
WORKLOAD_CONFIG = "nvidia.com/gpu.workload.config"
OPERANDS = "nvidia.com/gpu.deploy.operands"
CONTAINER, VM_PASSTHROUGH, VM_VGPU = "container", "vm-passthrough", "vm-vgpu"
NFD_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
_DEPLOY = "nvidia.com/gpu.deploy."
STATE_LABELS = {
    CONTAINER: (
        "driver",
        "gpu-feature-discovery",
        "container-toolkit",
        "device-plugin",
        "dcgm",
        "dcgm-exporter",
        "node-status-exporter",
        "operator-validator",
    ),
    VM_PASSTHROUGH: (
        "sandbox-device-plugin",
        "sandbox-validator",
        "vfio-manager",
        "kata-manager",
        "cc-manager",
    ),
    VM_VGPU: (
        "sandbox-device-plugin",
        "vgpu-manager",
        "vgpu-device-manager",
        "sandbox-validator",
        "cc-manager",
    ),
}
ALL_STATE_LABELS = {_DEPLOY + name for names in STATE_LABELS.values() for name in names}


class GpuOperator:
    def __init__(self, api: Client):
        self.api = api

    def run(self) -> None:
        policy = cluster_policy(self.api)
        if policy is None:
            return  # the operator is not installed
        sandbox = policy.get("sandboxWorkloads") or {}
        for node in self.api.list("Node"):
            labels = dict(node["metadata"].get("labels") or {})
            wanted = node_labels(labels, sandbox)
            if wanted != labels:
                node["metadata"]["labels"] = wanted
                self.api.apply(node)


def cluster_policy(api: Client) -> dict[str, Any] | None:
    """The ClusterPolicy's spec (the operator reads the one there is); None where there is none:
    the operator is not installed."""
    policies = api.peek_list("ClusterPolicy")  # read; what is handed on is a copy
    return copy_of(policies[0].get("spec") or {}) if policies else None


def node_labels(labels: dict[str, str], sandbox: dict[str, Any]) -> dict[str, str]:
    """A node's labels once the operator has labelled it."""
    found = dict(labels)
    if any(found.get(key) == "true" for key in NFD_GPU_LABELS):
        found[PRESENT] = "true"
    elif found.get(PRESENT) == "true":  # its GPUs are gone
        return _without_state({**found, PRESENT: "false"})
    if found.get(PRESENT) != "true":
        return found  # not a GPU node: left as it is
    if found.get(OPERANDS) == "false":
        return _without_state(found)
    own = {_DEPLOY + name for name in STATE_LABELS[workload_config(found, sandbox)]}
    found = {k: v for k, v in found.items() if k not in ALL_STATE_LABELS - own}
    return {**{key: "true" for key in sorted(own)}, **found}  # a value already set stays


def _without_state(labels: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k not in ALL_STATE_LABELS}


def workload_config(labels: dict[str, str], sandbox: dict[str, Any]) -> str:
    if not sandbox.get("enabled"):
        return CONTAINER
    config = labels.get(WORKLOAD_CONFIG)
    if config in STATE_LABELS:
        return config
    default = sandbox.get("defaultWorkload") or CONTAINER
    return default if default in STATE_LABELS else CONTAINER
