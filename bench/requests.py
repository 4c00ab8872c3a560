"""Each handler's request built as Crossplane builds it, from the synthetic cluster.

`settled(handler, composite, cluster)` plays one reconcile the way Crossplane v2.3 does (call,
fetch what the response requires with the selector matching of functions/pipeline.py, call
again until the requirements are stable), then a second one with the first one's outcome fed
back: the composite carries the status it was given, the observed objects are what was composed
(with the status Kueue reports for queues). The second reconcile's final request is what a
steady cluster sends every TTL; the bytes of all its calls are the bytes per reconcile.

`before(...)` is the same final request as release 0.1.x was sent it: a pool's required nodes
are the full Devices objects (its selector then: the same labels on Devices), no summaries; a
VM Instance's carries every Node (it read the per-VM limit from them, not from the class).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from bench.cluster import A_KEY, VM_NODES_EVERY, Cluster, node_name, vm_nodes_only
from functions import pipeline
from functions.core.labels import GPU_OPERATOR_VM_NODE
from functions.server import run_function
from functions.views import StructView

INPUT = {"apiVersion": "fn.gpustack.ai/v1beta1", "kind": "Input"}
POOL = f"gpustack--{A_KEY}-linux-amd64"
GENERIC_POOL = "gpustack--generic-linux-amd64"


@dataclass(frozen=True)
class Built:
    """A handler's steady request: its bytes, and the bytes of every call of its reconcile."""

    handler: str
    payload: bytes
    calls: tuple[int, ...]  # request bytes of each call of one reconcile, the last = payload

    @property
    def reconcile_bytes(self) -> int:
        return sum(self.calls)


class Index:
    """The cluster's objects by (apiVersion, kind), to answer selectors without a full scan."""

    def __init__(self, cluster: Cluster):
        self.by_kind: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for name, objects in cluster.objects.items():
            if name in ("OldDevices", "VmNodeSelected"):
                continue  # only the `before` requests, and the vmNodeSelector's, carry these
            for obj in objects:
                key = (obj["apiVersion"], obj["kind"])
                self.by_kind.setdefault(key, []).append(obj)
        self.cache: dict[bytes, fnv1.Resources] = {}

    def fulfil(self, selector: fnv1.ResourceSelector) -> fnv1.Resources:
        key = selector.SerializeToString(deterministic=True)
        if key not in self.cache:
            candidates = self.by_kind.get((selector.api_version, selector.kind), [])
            self.cache[key] = pipeline.fulfil(selector, candidates)
        return self.cache[key]


def reconcile(
    handler: str,
    composite: Mapping[str, Any],
    observed: Mapping[str, Mapping[str, Any]],
    index: Index,
) -> tuple[fnv1.RunFunctionRequest, fnv1.RunFunctionResponse, list[int]]:
    """One reconcile's requirements loop (as pipeline.run_step), keeping each call's size."""
    req = pipeline.request(composite, observed, {**INPUT, "handler": handler})
    sizes, previous = [], None
    for _ in range(pipeline.MAX_ITERATIONS + 1):
        sizes.append(req.ByteSize())
        rsp = run_function(req)
        fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
        if fatal:
            raise RuntimeError(f"{handler}: {fatal[0]}")
        if previous is not None and rsp.requirements == previous:
            return req, rsp, sizes
        previous = rsp.requirements
        for name, selector in rsp.requirements.resources.items():
            req.required_resources[name].CopyFrom(index.fulfil(selector))
    raise RuntimeError(f"{handler}: requirements did not settle")


def settled(handler: str, composite: Mapping[str, Any], index: Index) -> Built:
    """The request of a reconcile after one that already composed and published."""
    _, rsp, _ = reconcile(handler, composite, {}, index)
    composite = with_status(composite, rsp)
    observed = {name: as_applied(name, r.resource) for name, r in rsp.desired.resources.items()}
    req, _, sizes = reconcile(handler, composite, observed, index)
    return Built(handler, req.SerializeToString(), tuple(sizes))


def with_status(composite: Mapping[str, Any], rsp: fnv1.RunFunctionResponse) -> dict[str, Any]:
    found = copy.deepcopy(dict(composite))
    status = StructView(rsp.desired.composite.resource).to_dict().get("status", {})
    found["status"] = {**status, "conditions": [
        {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
        {"type": "Ready", "status": "True", "reason": "Available"},
    ]}  # fmt: skip
    return found


def as_applied(name: str, desired: Any) -> dict[str, Any]:
    """A composed object as the API server returns it, with the status its controller writes."""
    obj = StructView(desired).to_dict()
    metadata = obj.setdefault("metadata", {})
    metadata.update(uid=f"00000000-0000-4000-8000-{abs(hash(name)) % 10**12:012d}",
                    resourceVersion="123456", creationTimestamp="2026-10-02T08:14:31Z")  # fmt: skip
    metadata.setdefault("annotations", {})["crossplane.io/composition-resource-name"] = name
    if obj.get("kind") == "ClusterQueue":
        obj["status"] = queue_status(obj)
    elif obj.get("kind") == "LocalQueue":
        obj["status"] = {"conditions": [{"type": "Active", "status": "True", "reason": "Ready"}]}
    elif obj.get("kind") == "InstanceType":
        obj["status"] = {"phase": "Active"}
    return obj


def queue_status(queue: Mapping[str, Any]) -> dict[str, Any]:
    """What Kueue reports of a busy queue: every flavor reserved half-way."""
    reservation = [
        {"name": entry["name"], "resources": [
            {"name": r["name"], "total": r["nominalQuota"], "borrowed": "0"}
            for r in entry["resources"]
        ]}
        for group in queue.get("spec", {}).get("resourceGroups", [])
        for entry in group["flavors"]
    ]  # fmt: skip
    return {
        "admittedWorkloads": 120,
        "reservingWorkloads": 120,
        "pendingWorkloads": 7,
        "flavorsReservation": reservation,
        "flavorsUsage": copy.deepcopy(reservation),
        "conditions": [{"type": "Active", "status": "True", "reason": "Ready"}],
    }


# --- the composites -----------------------------------------------------------------------------


def instance_type(name: str, index: Index) -> dict[str, Any]:
    """A derived InstanceType as the catalog composes it (its spec)."""
    catalog = next(iter(index.by_kind[("worker.gpustack.ai/v1alpha1", "Catalog")]))
    _, rsp, _ = reconcile("catalog", catalog, {}, index)
    derived = StructView(rsp.desired.resources[f"instancetype-{name}"].resource).to_dict()
    derived["metadata"]["uid"] = "00000000-0000-4000-8000-0000000000a1"
    return derived


def vm_instance() -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "vm-bench", "namespace": "tenant-a", "uid": "1", "generation": 1},
        "spec": {
            "type": GENERIC_POOL,
            "runtime": "VirtualMachine",
            "image": "quay.io/containerdisks/ubuntu:24.04",
            "resources": {"cpu": "4"},
            "volume": {"ephemeral": {"capacity": "20Gi"}},
            "gpus": [{"className": "h100-80gb", "count": 1}],
        },
    }


def container_instance() -> dict[str, Any]:
    """A tenant's Container Instance: one whole H100 (its request carries no node)."""
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "job-bench", "namespace": "research", "uid": "2", "generation": 1},
        "spec": {
            "type": POOL,
            "image": "nvcr.io/nvidia/pytorch:25.01-py3",
            "command": ["python", "train.py"],
            "resources": {"accelerator": "1"},
            "volume": {"ephemeral": {"capacity": "100Gi"}},
        },
    }


def build_all(cluster: Cluster) -> dict[str, Built]:
    """Every pool handler's steady request over `cluster`, and the two kinds of Instance."""
    index = Index(cluster)
    found = {"catalog": settled("catalog", cluster.kind("Catalog")[0], index)}
    pool = instance_type(POOL, index)
    found["instancetype"] = settled("instancetype", pool, index)
    found["gpuclass"] = settled("gpuclass", gpu_class(cluster), index)
    found["gpuclass, VM nodes only"] = settled(
        "gpuclass", gpu_class(cluster), vm_nodes_index(index, cluster)
    )
    found["gpuclass, vmNodeSelector"] = settled(
        "gpuclass", gpu_class(cluster), vm_node_selector_index(index, cluster)
    )
    classes = index.by_kind[("cozystack.io/v1alpha1", "GPUClass")]
    _, rsp, _ = reconcile("gpuclass", classes[0], {}, index)
    classes[0] = with_status(classes[0], rsp)  # a VM reads its per-VM limit there
    types = []
    for name in (POOL, GENERIC_POOL):
        derived = instance_type(name, index)
        _, rsp, _ = reconcile("instancetype", derived, {}, index)
        types.append(with_status(derived, rsp))
    index.by_kind[("worker.gpustack.ai/v1alpha1", "InstanceType")] = types
    index.cache.clear()
    found["instance (VM)"] = settled("instance", vm_instance(), index)
    found["instance (Container)"] = settled("instance", container_instance(), index)
    return found


def vm_nodes_index(index: Index, cluster: Cluster) -> Index:
    """The same cluster with virt-handler placed on the VM nodes only (cluster.vm_nodes_only):
    the other nodes have no VM node state."""
    found = copy.copy(index)
    found.by_kind = dict(index.by_kind)
    found.by_kind[("v1", "Node")] = vm_nodes_only(index.by_kind[("v1", "Node")])
    states = cluster.kind("VmNode")[::VM_NODES_EVERY]
    found.by_kind[("v1", "ConfigMap")] = [*cluster.kind("ConfigMap"), *states]
    found.cache = {}
    return found


def vm_node_selector_index(index: Index, cluster: Cluster) -> Index:
    """The same cluster (virt-handler on every node) with the Catalog's vmNodeSelector set to
    the GPU Operator's label of the VM nodes, which their states then carry too."""
    found = copy.copy(index)
    found.by_kind = dict(index.by_kind)
    key = ("worker.gpustack.ai/v1alpha1", "Catalog")
    catalog = copy.deepcopy(index.by_kind[key][0])
    catalog["spec"]["vmNodeSelector"] = dict(GPU_OPERATOR_VM_NODE)
    found.by_kind[key] = [catalog]
    states = cluster.kind("VmNodeSelected")
    found.by_kind[("v1", "ConfigMap")] = [*cluster.kind("ConfigMap"), *states]
    found.cache = {}
    return found


def gpu_class(cluster: Cluster) -> dict[str, Any]:
    return copy.deepcopy(cluster.kind("GPUClass")[0])


def devices_requests(cluster: Cluster) -> dict[str, Built]:
    """One node's Devices (a MIG node, the largest) on a TTL reconcile — nothing changed — and
    after its agent reported a change (one allocation ended)."""
    index = Index(cluster)
    node = next(d for d in cluster.kind("Devices") if d["metadata"]["name"] == node_name(7))
    fresh = copy.deepcopy(node)
    fresh.pop("status")
    unchanged = settled("devices", fresh, index)
    req = fnv1.RunFunctionRequest.FromString(unchanged.payload)
    allocations = req.observed.composite.resource["spec"]["allocations"]
    del allocations.values[-1]
    return {
        "devices (unchanged)": unchanged,
        "devices (changed)": Built("devices", req.SerializeToString(), unchanged.calls),
    }


# --- release 0.1.x's requests: every full Devices object ------------------------------------------


def before(built: Built, cluster: Cluster) -> Built:
    """The final request as 0.1.x was sent it: Devices instead of node summaries; every Node
    for a VM Instance and for a GPUClass (it did not select the nodes KubeVirt can use)."""
    req = fnv1.RunFunctionRequest.FromString(built.payload)
    if built.handler == "gpuclass" or (
        "gpuclasses" in req.required_resources and "nodes" not in req.required_resources
    ):
        if "states" in req.required_resources:  # a class reads its nodes' states now
            del req.required_resources["states"]
        items = req.required_resources["nodes"].items
        del items[:]
        for obj in cluster.kind("Node"):
            items.add().resource.update(obj)
        payload = req.SerializeToString()
        return Built(built.handler, payload, (*built.calls[:-1], len(payload)))
    if "summaries" not in req.required_resources:
        return built
    selector = req.required_resources  # the summaries' labels, less the type, select Devices
    composite = StructView(req.observed.composite.resource)
    del selector["summaries"]
    wanted = old_selector(composite)
    items = req.required_resources["devices"].items
    for obj in cluster.kind("OldDevices"):
        labels = obj["metadata"]["labels"]
        if all(labels.get(k) == v for k, v in wanted.items()):
            items.add().resource.update(obj)
    payload = req.SerializeToString()
    return Built(built.handler, payload, (*built.calls[:-1], len(payload)))


def old_selector(composite: StructView) -> dict[str, str]:
    """0.1.x's Devices selector: the catalog took every Devices, a pool its labels."""
    if composite.str("kind") != "InstanceType":
        return {}
    spec = composite.view("spec")
    found = {"kubernetes.io/os": spec.str("os"), "kubernetes.io/arch": spec.str("arch")}
    if spec.bool("acceleratable"):
        found[f"acceleratable.feature.gpustack.ai/{spec.str('acceleratorGroup')}"] = "true"
    return found


def churned(built: Built, fraction: float, count: int) -> list[bytes]:
    """`count` versions of a pool's request, each with another `fraction` of its nodes'
    changed since the one before — what a busy pool sees from one reconcile to the next: a
    changed summary, VM node state or launcher Pod is one its reader has not read before."""
    req = fnv1.RunFunctionRequest.FromString(built.payload)
    changes = CLASS_CHANGES if built.handler == "gpuclass" else POOL_CHANGES
    step = max(1, round(1 / fraction))
    found = []
    for version in range(count):
        for name, change in changes.items():
            items = req.required_resources[name].items
            for index in range(version % step, len(items), step):
                change(items[index].resource, version)
        found.append(req.SerializeToString())
    return found


def _summary_changed(summary: Any, version: int) -> None:
    text = summary["data"]["summary"]
    summary["data"]["summary"] = text[: text.rindex("}")] + f',"churn":{version}}}'


def _state_changed(state: Any, version: int) -> None:
    """The same state in another text (as a changed node's would be: read anew)."""
    head, tail = state["data"]["state"].split('"ready":', 1)
    state["data"]["state"] = f'{head.rstrip(" ")}{" " * (version + 1)}"ready":{tail}'


def _pod_changed(pod: Any, version: int) -> None:
    """A launcher that changed what a class reads of it: its phase, as its VM starts (a Pod
    scheduled and starting holds its units as a running one does)."""
    pod["status"]["phase"] = "Pending" if version % 2 == 0 else "Running"


POOL_CHANGES = {"summaries": _summary_changed}
CLASS_CHANGES = {"states": _state_changed, "launchers": _pod_changed}
