"""Every label and annotation key the product reads or writes, and the label sets built of them.

Keys and values exactly as the walkthrough's Node shows them (reference §2.4, §2.5, §2.7): what a
node's two NodeFeatures publish, what a Devices object is stamped with, what pools, flavors,
queues and Pods carry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from functions.core import names, quantity
from functions.core.devices import DevicesSpec
from functions.core.ledger import GroupSummary
from functions.core.modes import MODES, Mode

# --- Kubernetes' own -------------------------------------------------------------------------
OS = "kubernetes.io/os"
ARCH = "kubernetes.io/arch"
HOSTNAME = "kubernetes.io/hostname"

# --- nodes: NFD features and the per-card fit labels ------------------------------------------
MANAGED = "gpustack.ai/managed"
ACCELERATABLE = "feature.gpustack.ai/acceleratable"
GENERAL = "general.feature.gpustack.ai/"
DEVICE = "acceleratable.feature.gpustack.ai/"
# (the per-card fit labels' prefixes are the modes' own: core/modes.py, `ModeSpec.fit`)
NFD_NODE_NAME = "nfd.node.kubernetes.io/node-name"  # a NodeFeature's target node

# --- pools, flavors, queues -------------------------------------------------------------------
RESOURCE_TYPE = "resource.gpustack.ai/type"  # `nodes` on a flavor, `instancetypes` on a pool
DERIVED = "schedule.gpustack.ai/derived-from-node"
QUEUE_ENTRANCE = "schedule.gpustack.ai/queue-entrance"
QUEUE_ANNOTATION = "schedule.gpustack.ai/queue"  # a LocalQueue's pool
NOTE = "note.gpustack.ai/"  # annotation prefix: a flavor's hardware notes

# --- workloads --------------------------------------------------------------------------------
QUEUE_NAME = "kueue.x-k8s.io/queue-name"  # a Pod's LocalQueue
INSTANCE = "worker.gpustack.ai/instance"  # the Instance a Pod, Service or VMI belongs to
ALLOCATED = "device.gpustack.ai/accelerator.allocated"  # annotation: what the device plugin gave
SPEC_DIGEST = "worker.gpustack.ai/spec-digest"  # annotation: the Instance spec a Pod was made from
VIRT_LAUNCHER = {"kubevirt.io": "virt-launcher"}  # KubeVirt's launcher Pods
# virt-handler's heartbeat on a Node: "true" while it runs there and its heartbeat is fresh.
# KubeVirt puts it in every virt-launcher Pod's nodeSelector: no other node can run a VMI.
KUBEVIRT_HEARTBEAT = "kubevirt.io/schedulable"  # on every Node virt-handler runs on
KUBEVIRT_SCHEDULABLE = {KUBEVIRT_HEARTBEAT: "true"}
# What the NVIDIA GPU Operator labels a node whose GPUs serve VMs (its workload config
# vm-passthrough or vm-vgpu): its sandbox device plugin runs there and advertises them.
GPU_OPERATOR_VM_NODE = {"nvidia.com/gpu.deploy.sandbox-device-plugin": "true"}

# --- tenants (Cozystack's namespace conventions) -----------------------------------------------
# A tenant namespace carries `tenant.cozystack.io/<namespace>` for itself and for every ancestor
# tenant (packages/apps/tenant, `tenant.ancestorTenantLabels`).
TENANT = "tenant.cozystack.io/"
# A tenant's own vGPU entitlement: Cozystack publishes no namespace label for it yet; ours.
VGPU_ENTITLED = "gpu.cozystack.io/vgpu"

# --- Crossplane -------------------------------------------------------------------------------
CLAIM_NAMESPACE = "crossplane.io/claim-namespace"
CLAIM_NAME = "crossplane.io/claim-name"
COMPOSITE = "crossplane.io/composite"
COMPOSITION_RESOURCE_NAME = "crossplane.io/composition-resource-name"  # annotation

TRUE, FALSE = "true", "false"

# --- label syntax (Kubernetes' validation of label keys and values) ----------------------------
# A key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"


def boolean(value: bool) -> str:
    return TRUE if value else FALSE


def general_key_label(g_key: str) -> str:
    return f"{GENERAL}{g_key}"


def accelerator_key_label(a_key: str) -> str:
    return f"{DEVICE}{a_key}"


def worker_labels(spec: DevicesSpec, managed: bool) -> dict[str, str]:
    """`<node>-gpustack-worker`: managed, the CPU manufacturer, the CPU key and its core count."""
    g_key = spec.g_key
    labels = {
        MANAGED: boolean(managed),
        general_key_label(names.cpu_manufacturer(g_key)): TRUE,
        general_key_label(g_key): TRUE,
    }
    if spec.cpu.cores > 0:
        labels[f"{general_key_label(g_key)}.count"] = str(spec.cpu.cores)
    return labels


def device_manager_labels(
    spec: DevicesSpec, fit: Mapping[str, GroupSummary] | None = None
) -> dict[str, str]:
    """`<node>-gpustack-device-manager`: the accelerator keys, and the fit labels when given."""
    if not spec.groups:
        return {}
    labels = {ACCELERATABLE: TRUE}
    for vendor in spec.accelerators:
        if not vendor.devices:
            continue
        prefix = accelerator_key_label(vendor.manufacturer)
        labels[prefix] = TRUE
        if vendor.driver_version:
            labels[f"{prefix}.driver-version"] = names.label_value(vendor.driver_version)
        if vendor.runtime_version:
            labels[f"{prefix}.runtime-version"] = names.label_value(vendor.runtime_version)
    for group in spec.groups:
        key = accelerator_key_label(group.key)
        labels[key] = TRUE
        labels[f"{key}.count"] = str(len(group.devices))
        labels[f"{key}.memory"] = quantity.format_mebibytes(group.memory_mib)
        labels[f"{key}.cores"] = str(group.cores)
        if group.family:
            labels[f"{key}.family"] = group.family
        labels[f"{key}.product"] = names.label_value(group.product)
        major = group.compute_capability.partition(".")[0]
        if major not in ("", "0"):
            labels[f"{key}.comcap"] = group.compute_capability
        if fit is not None and group.key in fit:
            labels.update(fit_labels(group.key, fit[group.key]))
    return labels


# The figure of a node's group each mode's fit label carries, in the labels' order.
_FIT_FIGURES: Mapping[Mode, Callable[[GroupSummary], int]] = {
    Mode.SLICED: lambda summary: summary.max_card_slice_units,
    Mode.SHARED: lambda summary: summary.cards_with_free_share,
    Mode.EXCLUSIVE: lambda summary: summary.free_cards,
}


def fit_labels(a_key: str, summary: GroupSummary) -> dict[str, str]:
    """Per-card feasibility for the scheduler: the freest sliceable card, cards with a free
    share, and wholly free cards (a whole-card request; a card in MIG mode is never one)."""
    return {
        f"{MODES[mode].fit}{a_key}": str(figure(summary)) for mode, figure in _FIT_FIGURES.items()
    }


def devices_labels(spec: DevicesSpec, managed: bool | None = None) -> dict[str, str]:
    """The labels stamped on a Devices object so pools can find their nodes by selector."""
    labels = {OS: spec.os, ARCH: spec.arch, general_key_label(spec.g_key): TRUE}
    if managed is not None:
        labels[MANAGED] = boolean(managed)
    for group in spec.groups:
        labels[accelerator_key_label(group.key)] = TRUE
    return labels


def pool_labels(os: str, arch: str, a_key: str | None, g_key: str | None) -> dict[str, str]:
    """The schedule labels of a pool (its ClusterQueue and InstanceType carry them).

    The CPU key appears only on a CPU-aware pool: a collapsed pool aggregates every CPU.
    """
    labels = {ACCELERATABLE: boolean(a_key is not None)}
    if os:
        labels[OS] = os
    if arch:
        labels[ARCH] = arch
    if a_key:
        labels[accelerator_key_label(a_key)] = TRUE
    if g_key and g_key != names.GENERIC:
        labels[general_key_label(g_key)] = TRUE
    labels[RESOURCE_TYPE] = "instancetypes"
    return labels
