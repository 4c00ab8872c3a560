"""devices: a node's per-card ledger and summaries, and the two NodeFeatures NFD turns into labels.

`<node>-gpustack-worker` carries `gpustack.ai/managed` and the CPU keys; on accelerated nodes
`<node>-gpustack-device-manager` carries the accelerator keys and, with `workloadFitAffinity`,
the per-card fit labels. `<node>-gpustack-summary`, a ConfigMap, holds what pools read of this
node (core/status/summary.py), labelled as pools select nodes. Where KubeVirt runs on the node,
`<node>-gpustack-vm-node`, a ConfigMap, holds what GPU classes read of its Node
(core/status/vmnode.py), labelled as classes select VM nodes. All live in the Catalog's
systemNamespace.

A node the cluster's device plugin cannot serve as claims are written for it (the dialect's
`left_out`: the GPU Operator's plugin on cards in MIG mode without the `mixed` MIG strategy,
told by the Node's GPU feature discovery labels) is not managed, so no pool or flavor takes it;
`status.leftOut` and a `NodeLeftOut` Warning say why. So is a node whose Node does not exist.

A reconcile whose inputs — the node's name and spec, the Catalog settings read here, the VM
node state, the Node labels the dialect judges it by (or the Node's absence), this release —
hash to the digest the last status recorded (`status.inputs`) recomputes nothing: it returns
the observed status and composed objects as they are. So does the first call of a reconcile,
made before the Catalog and the Node are read: Crossplane calls again once they are. The agent
writes the spec only when a reading changed, and Crossplane reconciles the Devices on each such
write (and, where it watches required objects, on each change of the Node), so the TTL bounds
how late a Catalog setting or, on Crossplane v2.3, a change of the Node reaches the node's
objects. Until a Catalog exists the TTL is 30 s: the node's objects are composed with the
defaults meanwhile, and the Catalog's settings (its device plugin above all) reach them within
30 s of its creation.
"""

from __future__ import annotations

import datetime
from importlib import metadata
from typing import Any

from functions import structs
from functions.core import apis, labels, names, reasons
from functions.core.devices import DevicesSpec, SpecError, parse_devices
from functions.core.ledger import build_ledger
from functions.core.pools import NodeSummary, summarize_devices
from functions.core.settings import Settings
from functions.core.status import StatusError, vmnode
from functions.core.status import devices as devices_status
from functions.core.status import summary as node_summary
from functions.handlers.base import Handler, InputError, Request, Requirement
from functions.handlers.desired import Desired
from functions.handlers.inputs import (
    CATALOG,
    as_desired,
    catalog_missing,
    catalog_settings,
    observed_status,
    unreadable,
)
from functions.views import View, plain

TTL = datetime.timedelta(minutes=5)
# While Crossplane finds no Catalog: a node's agent is often installed before the Catalog, and
# what it composes then (the default device plugin's ledger, the default namespace) must follow
# the Catalog within a pool's TTL of its creation, not the node's five minutes.
WITHOUT_CATALOG_TTL = datetime.timedelta(seconds=30)
WORKER, DEVICE_MANAGER, SUMMARY, VM_NODE = "worker", "device-manager", "summary", "vm-node"
# What the VM node state reads of the Node, but the labels the Catalog's vm_nodes names: the rest
# of a Node (its images, its node labeller's labels, its managedFields) is left unparsed.
NODE_READS = (
    ("spec", "unschedulable"),
    ("spec", "taints"),
    ("status", "allocatable"),
    ("status", "conditions"),
)


def _release() -> str:
    try:
        return metadata.version("function-gpustack")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "source"


RELEASE = _release()  # in the digest: a new release recomputes every node once


def node_feature(name: str, namespace: str, node: str, node_labels: dict[str, str]) -> dict:
    return {
        "apiVersion": apis.NFD,
        "kind": "NodeFeature",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {labels.NFD_NODE_NAME: node},
        },
        "spec": {"labels": dict(sorted(node_labels.items()))},
    }


def summary_config_map(namespace: str, spec: DevicesSpec, summary: NodeSummary) -> dict:
    """The node's summary, labelled with the selectors pools use (labels.devices_labels)."""
    found = labels.devices_labels(spec, summary.managed)
    found[labels.RESOURCE_TYPE] = node_summary.RESOURCE_TYPE
    return {
        "apiVersion": apis.CORE,
        "kind": "ConfigMap",
        "metadata": {
            "name": names.node_object_name(spec.node, node_summary.NAME_SUFFIX),
            "namespace": namespace,
            "labels": dict(sorted(found.items())),
        },
        "data": node_summary.write(summary),
    }


def vm_node_config_map(request: Request, settings: Settings, desired: Desired) -> dict | None:
    """The node's VM node state, labelled with the Node's values of the labels classes select
    VM nodes by (settings.vm_nodes); None where KubeVirt does not run on the node, or the Node
    is not read (yet, or at all), or cannot be (then a Warning names the field)."""
    node = request.required_one("node")
    if node is None:
        return None
    node_labels = node.view("metadata", "labels")
    if not node_labels.has(labels.KUBEVIRT_HEARTBEAT):  # KubeVirt does not run there
        return None
    kept = {key: node_labels.str(key) for key in settings.vm_nodes if node_labels.has(key)}
    read = node_reads(node)
    try:
        state = vmnode.of_node(request.xr.name, kept, read.get("spec", {}), read.get("status", {}))
    except StatusError as error:
        unreadable(desired, "Node", request.xr.name, error.field, error.problem)
        return None
    found = {**kept, labels.RESOURCE_TYPE: vmnode.RESOURCE_TYPE}
    return {
        "apiVersion": apis.CORE,
        "kind": "ConfigMap",
        "metadata": {
            "name": names.node_object_name(request.xr.name, vmnode.NAME_SUFFIX),
            "namespace": settings.system_namespace,
            "labels": dict(sorted(found.items())),
        },
        "data": vmnode.write(state),
    }


def node_reads(node: View) -> dict[str, dict[str, Any]]:
    """What NODE_READS names of the Node, as plain data: the rest of its spec and status (its
    images, its addresses, its node info) is never converted."""
    found: dict[str, dict[str, Any]] = {}
    for top, key in NODE_READS:
        value = node.get(top, key)
        if value is not None:
            found.setdefault(top, {})[key] = plain(value)
    return found


def requirements(request: Request) -> dict[str, Requirement]:
    # Which of the Node's labels are read is the Catalog's to say (the defaults until it is
    # read, when the Node is not read either); Crossplane is asked for the same Node each call.
    settings = catalog_settings(request, Desired())
    keys = sorted({*settings.vm_nodes, *settings.dialect.node_labels})
    labelled = tuple(("metadata", "labels", key) for key in keys)
    node = Requirement(apis.CORE, "Node", match_name=request.xr.name, reads=NODE_READS + labelled)
    return {"catalog": CATALOG, "node": node}


NODE_GONE = (
    "its Node does not exist; delete this Devices if the node is gone for good (an agent's "
    "Devices is owned by its Node and goes with it: docs/agent.md)"
)


def node_gone(request: Request) -> bool:
    """Crossplane looked for the Node and found none: a node removed while its Devices stayed
    (one written before the agent set its Node as the owner). Its cards are nowhere to run on.
    Not asked yet (the first call of a reconcile) is not gone."""
    return request.required("node") == []


def dialect_labels(request: Request, settings: Settings) -> dict[str, str]:
    """The Node's labels the device plugin's dialect judges the node by (`left_out`): none
    until the Node is read."""
    node = request.required_one("node")
    if node is None:
        return {}
    found = node.view("metadata", "labels")
    return {key: found.str(key) for key in settings.dialect.node_labels if found.has(key)}


def inputs_digest(
    request: Request, settings: Settings, vm_node: dict | None, judged: dict[str, str]
) -> str:
    """What this handler's output depends on, hashed: the node, its spec, the settings read,
    the VM node state, the Node labels the dialect judges it by."""
    read = {
        "devicePlugin": settings.device_plugin,
        "nodeManagementManual": settings.node_management_manual,
        "systemNamespace": settings.system_namespace,
        "workloadFitAffinity": settings.workload_fit_affinity,
    }
    if judged:
        read["nodeLabels"] = judged
    if node_gone(request):
        read["nodeGone"] = True
    return devices_status.inputs_digest(
        request.xr.name, structs.canonical(request.xr, "spec"), read, RELEASE, vm_node
    )


def compose(request: Request) -> Desired:
    desired = Desired()
    if catalog_missing(request):
        desired.ttl = WITHOUT_CATALOG_TTL
    settings = catalog_settings(request, desired)
    vm_node = vm_node_config_map(request, settings, desired)
    judged = dialect_labels(request, settings)
    if unchanged(request, settings, vm_node, judged):
        return keep_observed(request, desired)
    digest = inputs_digest(request, settings, vm_node, judged)
    try:
        # Only what the spec is read from: the status (the last ledger) is as large again.
        spec = parse_devices({part: plain(request.xr.get(part)) for part in ("metadata", "spec")})
    except SpecError as error:
        raise InputError(
            error.path, f"{error.problem}; the node agent writes this field"
        ) from error
    left_out = NODE_GONE if node_gone(request) else settings.dialect.left_out(spec, judged)
    ledger = build_ledger(spec, settings.dialect.fixed_partitions)
    summary = summarize_devices(
        spec, settings.node_management_manual, ledger, left_out=bool(left_out)
    )
    desired.status = devices_status.write(ledger, summary, digest, left_out)
    if left_out:
        left_out_warning(desired, spec.node, left_out)
    for conflict in ledger.conflicts:
        conflict_warning(desired, conflict.device, conflict.pod, conflict.reason)
    namespace, node = settings.system_namespace, spec.node
    worker = labels.worker_labels(spec, summary.managed)
    desired.compose(
        WORKER,
        node_feature(f"{node}-gpustack-worker", namespace, node, worker),
        request.observed(WORKER),
    )
    if spec.groups:
        fit = summary.groups if settings.workload_fit_affinity else None
        device_labels = labels.device_manager_labels(spec, fit)
        desired.compose(
            DEVICE_MANAGER,
            node_feature(f"{node}-gpustack-device-manager", namespace, node, device_labels),
            request.observed(DEVICE_MANAGER),
        )
    config_map = summary_config_map(namespace, spec, summary)
    desired.compose(SUMMARY, config_map, request.observed(SUMMARY))
    if vm_node is not None:
        desired.compose(VM_NODE, vm_node, request.observed(VM_NODE))
    return desired


def conflict_warning(desired: Desired, device: str, pod: str, reason: str) -> None:
    desired.warning(
        f"accelerator {device}: the allocation of pod {pod} does not fit the ledger "
        f"({reason}); it is reported in status.conflicts",
        reasons.ALLOCATION_CONFLICT,
    )


def left_out_warning(desired: Desired, node: str, why: str) -> None:
    desired.warning(
        f"node {node} is left out of every pool: {why}",
        reasons.NODE_LEFT_OUT,
    )


def unchanged(
    request: Request, settings: Settings, vm_node: dict | None, judged: dict[str, str]
) -> bool:
    """Everything the last status composed is there, and it was computed from these inputs —
    or the Catalog is not read yet: then this is the first call of a reconcile, which Crossplane
    calls again with it and the Node, so nothing is worth computing now."""
    status = request.xr.view("status")
    digest = status.str("inputs")
    expected = {WORKER, SUMMARY} | ({DEVICE_MANAGER} if len(status.list("groups")) else set())
    if request.required("catalog") is None:
        observed = set(request.observed_names())
        return bool(digest) and observed - {VM_NODE} == expected
    if vm_node is not None:
        expected.add(VM_NODE)
    if not digest or set(request.observed_names()) != expected:
        return False
    return digest == inputs_digest(request, settings, vm_node, judged)


def keep_observed(request: Request, desired: Desired) -> Desired:
    """The observed status and composed objects, as they are (nothing is recomputed)."""
    desired.status = observed_status(request)
    left_out = request.xr.str("status", "leftOut")
    if left_out:
        left_out_warning(desired, request.xr.name, left_out)
    for conflict in request.xr.list("status", "conflicts").views():
        conflict_warning(
            desired, conflict.str("device"), conflict.str("pod"), conflict.str("reason")
        )
    for name in request.observed_names():
        observed: View | None = request.observed(name)
        if observed is not None:
            desired.compose(name, as_desired(observed), observed)
    return desired


HANDLER = Handler("devices", frozenset({"Devices"}), compose, requirements, ttl=TTL)
