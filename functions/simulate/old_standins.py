"""Small stand-ins for the controllers around the functions, for `World` (offline only).

- NFD: a node's labels are its own plus those of the NodeFeatures that target it.
- Kueue: a Pod with a queue label is admitted when its ClusterQueue is active and a flavor has
  the credits (or cores) left; the queue reports what it has reserved.
- Scheduler and device plugin: the Pod lands on a node of that flavor that satisfies its node
  selector and affinity and whose cards can take the request (decided by the core ledger).
- Node agent: what was allocated appears in the node's `Devices.spec.allocations`, and
  disappears with the Pod.

None of them decides a figure of its own: credits and card fits come from `functions.core`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from functions.core import labels, names, quantity, resources
from functions.core.devices import Allocation, parse_devices
from functions.core.ledger import AllocationRefused, CardLedger, build_ledger
from functions.core.modes import NO_CLAIM, Claim, Mode
from functions.handlers.gpuclass import eligible
from functions.views import DictView

QUEUE_LABEL = labels.QUEUE_NAME
NODE_NAME_LABEL = labels.NFD_NODE_NAME
ALLOCATION_ANNOTATION = labels.ALLOCATED
LAUNCHED_BY = "sim.gpustack.ai/launched-by"


def claim_of(limits: Mapping[str, Any]) -> Claim:
    """What a Pod's container asks of the cards, read from its resource keys."""
    decoded = resources.decode(limits)
    return decoded[1] if decoded is not None else NO_CLAIM


def place(cards: list[CardLedger], claim: Claim, pod: str) -> list[Allocation] | None:
    """Which cards take the claim: whole and shared spread over free cards; a slice or a
    partition packs onto the fullest card that still fits. None when it does not fit."""

    def attempt(card: CardLedger, mode: Mode) -> CardLedger | None:
        allocation = Allocation(
            pod,
            names.MAIN_CONTAINER,
            card.id,
            mode,
            memory_percentage=claim.memory_percentage,
            cores_percentage=claim.cores_percentage,
            profile=claim.profile,
        )
        try:
            return card.allocate(allocation)
        except AllocationRefused:
            return None

    if claim.mode in (Mode.EXCLUSIVE, Mode.SHARED):
        chosen = [c for c in cards if attempt(c, claim.mode) is not None][: claim.cards]
        if len(chosen) < claim.cards:
            return None
        return [Allocation(pod, names.MAIN_CONTAINER, c.id, claim.mode) for c in chosen]
    fullest_first = sorted(cards, key=lambda c: (c.mode == Mode.NONE, c.remaining, c.index))
    for card in fullest_first:
        taken = attempt(card, claim.mode)
        if taken is not None:
            placement = taken.occupied[-1][1] if claim.mode is Mode.PARTITIONED else None
            return [
                Allocation(
                    pod,
                    names.MAIN_CONTAINER,
                    card.id,
                    claim.mode,
                    memory_percentage=claim.memory_percentage,
                    cores_percentage=claim.cores_percentage,
                    profile=claim.profile,
                    placement=placement,
                )
            ]
    return None


def allocation_dict(allocation: Allocation, pod_uid: str) -> dict:
    row: dict[str, Any] = {
        "pod": allocation.pod,
        "podUID": pod_uid,
        "container": allocation.container,
        "device": allocation.device,
        "mode": allocation.mode.title,
    }
    if allocation.mode is Mode.SLICED:
        row["memoryPercentage"] = allocation.memory_percentage
        row["coresPercentage"] = allocation.cores_percentage
    if allocation.mode is Mode.PARTITIONED:
        row["profile"] = allocation.profile
        row["placement"] = {"start": allocation.placement.start, "size": allocation.placement.size}
    return row


def node_labels(
    node: Mapping[str, Any] | None, features: Iterable[Mapping[str, Any]]
) -> dict[str, str]:
    """NFD: the Node's labels plus every NodeFeature label that targets it."""
    merged = dict(((node or {}).get("metadata") or {}).get("labels") or {})
    for feature in sorted(features, key=lambda f: f["metadata"]["name"]):
        merged.update(feature.get("spec", {}).get("labels") or {})
    return merged


def selects(pod_spec: Mapping[str, Any], node: Mapping[str, str]) -> bool:
    """Does the Pod's nodeSelector and required node affinity accept a node with these labels?"""
    if any(node.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    affinity = (
        pod_spec.get("affinity", {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if not affinity:
        return True
    return any(
        all(_matches(e, node) for e in term.get("matchExpressions", []))
        for term in affinity["nodeSelectorTerms"]
    )


def _matches(expression: Mapping[str, Any], node: Mapping[str, str]) -> bool:
    value, operator, values = (
        node.get(expression["key"]),
        expression["operator"],
        expression.get("values", []),
    )
    if operator == "In":
        return value in values
    if operator == "Gt":
        return value is not None and int(value) > int(values[0])
    if operator == "Exists":
        return value is not None
    return False


def cpu_request(pod_spec: Mapping[str, Any]) -> int:
    total = sum(
        quantity.parse(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
        for c in pod_spec["containers"]
    )
    return quantity.ceil(total) if total else 0


def run_cluster(world) -> None:
    """One pass of storage, KubeVirt, Kueue, the scheduler, the device plugin and the agents."""
    _bind_claims(world)
    _run_virtual_machines(world)
    pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in world.list("Pod")}
    _release_allocations_of_gone_pods(world, pods)
    for key in sorted(pods):
        pod = pods[key]
        if not pod["spec"].get("nodeName"):
            _admit_and_bind(world, key, pod)
    _report_queue_usage(world, pods)


def _run_virtual_machines(world) -> None:
    """KubeVirt: a VMI runs, through a virt-launcher Pod holding its GPUs, on the first Ready,
    uncordoned node it tolerates that has the units free; otherwise it stays Scheduling."""
    vmis = {
        (v["metadata"]["namespace"], f"virt-launcher-{v['metadata']['name']}"): v
        for v in world.list("VirtualMachineInstance")
    }
    for pod in world.list("Pod"):  # a launcher this stand-in started goes with its VMI
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if LAUNCHED_BY in (pod["metadata"].get("annotations") or {}) and key not in vmis:
            world.delete("Pod", key[1], key[0])
    for (namespace, name), vmi in sorted(vmis.items()):
        if vmi.get("status", {}).get("phase") == "Running":
            continue
        wanted: dict[str, int] = {}
        for gpu in vmi["spec"]["domain"]["devices"].get("gpus", []):
            wanted[gpu["deviceName"]] = wanted.get(gpu["deviceName"], 0) + 1
        node = _node_for(world, vmi["spec"], wanted)
        if node is None:
            ready = {"type": "Ready", "status": "False", "reason": "Unschedulable"}
            vmi["status"] = {"phase": "Scheduling", "conditions": [ready]}
            continue
        limits = {resource: str(count) for resource, count in wanted.items()}
        world.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "labels": {"kubevirt.io": "virt-launcher"},
                    "annotations": {LAUNCHED_BY: "simulate"},
                },
                "spec": {
                    "nodeName": node,
                    "containers": [
                        {
                            "name": "compute",
                            "image": "virt-launcher",
                            "resources": {"limits": limits},
                        }
                    ],
                },
                "status": {"phase": "Running"},
            }
        )
        vmi["status"] = {
            "phase": "Running",
            "nodeName": node,
            "conditions": [{"type": "Ready", "status": "True"}],
            "interfaces": [{"ipAddress": f"10.245.0.{len(vmis)}"}],
        }


def _node_for(world, spec: Mapping[str, Any], wanted: Mapping[str, int]) -> str | None:
    used: dict[tuple[str, str], int] = {}
    for pod in world.list("Pod"):
        for container in pod["spec"].get("containers", []):
            for resource, value in container.get("resources", {}).get("limits", {}).items():
                key = (pod["spec"].get("nodeName", ""), resource)
                used[key] = used.get(key, 0) + int(quantity.parse(value))
    tolerated = spec.get("tolerations") or []
    for node in sorted(world.list("Node"), key=lambda n: n["metadata"]["name"]):
        name, status = node["metadata"]["name"], node.get("status", {})
        if not eligible(DictView(node), tolerated):  # the gpuclass handler's rule
            continue
        node_labels_ = node["metadata"].get("labels", {})
        if any(node_labels_.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            continue
        allocatable = status.get("allocatable", {})
        if all(
            int(quantity.parse(allocatable.get(r, "0"))) - used.get((name, r), 0) >= n
            for r, n in wanted.items()
        ):
            return name
    return None


def _bind_claims(world) -> None:
    """A claim of an existing Immediate StorageClass is bound to a new network volume."""
    classes = {c["metadata"]["name"]: c for c in world.list("StorageClass")}
    default = next(
        (
            n
            for n, c in classes.items()
            if c["metadata"]
            .get("annotations", {})
            .get("storageclass.kubernetes.io/is-default-class")
            == "true"
        ),
        None,
    )
    for claim in world.list("PersistentVolumeClaim"):
        if claim.get("status", {}).get("phase") == "Bound":
            continue
        storage_class = classes.get(claim["spec"].get("storageClassName") or default or "")
        if (
            storage_class is None
            or storage_class.get("volumeBindingMode") == "WaitForFirstConsumer"
        ):
            claim["status"] = {"phase": "Pending"}
            continue
        name = f"pv-{claim['metadata']['namespace']}-{claim['metadata']['name']}"
        world.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "accessModes": claim["spec"]["accessModes"],
                    "capacity": {"storage": claim["spec"]["resources"]["requests"]["storage"]},
                    "storageClassName": storage_class["metadata"]["name"],
                    "csi": {"driver": storage_class["provisioner"], "volumeHandle": name},
                },
            }
        )
        claim["spec"]["volumeName"] = name
        claim["status"] = {"phase": "Bound"}


def _release_allocations_of_gone_pods(world, pods: Mapping[str, Any]) -> None:
    for devices in world.list("Devices"):
        allocations = devices.get("spec", {}).get("allocations") or []
        kept = [
            a for a in allocations if a["pod"] in pods or not a.get("podUID", "").startswith("sim-")
        ]
        if len(kept) != len(allocations):
            devices["spec"]["allocations"] = kept


def _admit_and_bind(world, key: str, pod: dict) -> None:
    namespace = pod["metadata"]["namespace"]
    local = world.get(
        "LocalQueue", pod["metadata"].get("labels", {}).get(QUEUE_LABEL, ""), namespace
    )
    queue = world.get("ClusterQueue", local["spec"]["clusterQueue"]) if local else None
    if queue is None or queue["spec"].get("stopPolicy", "None") != "None":
        _pending(
            pod,
            "SchedulingGated",
            "waiting for Kueue: no active ClusterQueue fronts this Pod's queue",
        )
        return
    main = pod["spec"]["containers"][0]
    claim = claim_of(main.get("resources", {}).get("limits", {}))
    instance_type = world.get("InstanceType", queue["metadata"]["name"]) or {}
    a_key = instance_type.get("spec", {}).get("acceleratorGroup", "")
    for group in queue["spec"].get("resourceGroups", []):
        for flavor_entry in group["flavors"]:
            flavor = world.get("ResourceFlavor", flavor_entry["name"])
            if flavor is None:
                continue
            bound = _try_flavor(world, key, pod, claim, a_key, queue, flavor_entry, flavor)
            if bound:
                return
    _pending(
        pod, "Unschedulable", "no node of the pool can take the request now; it waits in its queue"
    )


def _try_flavor(world, key, pod, claim, a_key, queue, flavor_entry, flavor) -> bool:
    resource = flavor_entry["resources"][0]
    nominal = quantity.parse(resource["nominalQuota"])
    used = _usage(world, queue["metadata"]["name"]).get(flavor["metadata"]["name"], 0)
    for node_name in _nodes_of(world, flavor):
        devices = world.get("Devices", node_name)
        labels_of_node = node_labels(
            world.get("Node", node_name),
            [
                f
                for f in world.list("NodeFeature")
                if f["metadata"].get("labels", {}).get(NODE_NAME_LABEL) == node_name
            ],
        )
        labels_of_node.setdefault(labels.HOSTNAME, node_name)
        if not selects(pod["spec"], labels_of_node):
            continue
        allocations: list[Allocation] = []
        charge = 0 if resource["name"].startswith("credits.") else cpu_request(pod["spec"])
        if resource["name"].startswith("credits.") and claim.mode is not Mode.NONE:
            spec = parse_devices(devices)
            group = spec.group(a_key)
            ledger = next((g for g in build_ledger(spec).groups if g.key == a_key), None)
            if group is None or ledger is None:
                continue
            profile_mib = next(
                (
                    p.memory_mib
                    for card in group.devices
                    for p in card.profiles
                    if p.name == claim.profile
                ),
                0,
            )
            charge = claim.sized(group.memory_mib, profile_mib).credits
            allocations = place(list(ledger.cards), claim, key) or []
            if not allocations:
                continue
        if used + charge > nominal:
            return False
        uid = f"sim-{key}"
        if allocations:
            devices["spec"].setdefault("allocations", []).extend(
                allocation_dict(a, uid) for a in allocations
            )
            pod["metadata"].setdefault("annotations", {})[ALLOCATION_ANNOTATION] = json.dumps(
                [allocation_dict(a, uid) for a in allocations], sort_keys=True
            )
        pod["spec"]["nodeName"] = node_name
        pod["metadata"].setdefault("annotations", {})["sim.gpustack.ai/admission"] = json.dumps(
            {
                "queue": queue["metadata"]["name"],
                "flavor": flavor["metadata"]["name"],
                "charge": charge,
            }
        )
        pod["status"] = {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True"}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "hostIPs": [{"ip": f"10.0.0.{_index(world, node_name)}"}],
            "podIPs": [{"ip": f"10.244.{_index(world, node_name)}.{len(world.list('Pod'))}"}],
        }
        return True
    return False


def _nodes_of(world, flavor: Mapping[str, Any]) -> list[str]:
    wanted = flavor["spec"].get("nodeLabels", {})
    found = []
    for devices in world.list("Devices"):
        name = devices["metadata"]["name"]
        node = node_labels(
            world.get("Node", name),
            [
                f
                for f in world.list("NodeFeature")
                if f["metadata"].get("labels", {}).get(NODE_NAME_LABEL) == name
            ],
        )
        if all(node.get(k) == v for k, v in wanted.items()):
            found.append(name)
    return sorted(found)


def _index(world, node: str) -> int:
    names = sorted(d["metadata"]["name"] for d in world.list("Devices"))
    return names.index(node) + 1 if node in names else 0


def _usage(world, queue: str) -> dict[str, int]:
    usage: dict[str, int] = {}
    for pod in world.list("Pod"):
        admission = pod["metadata"].get("annotations", {}).get("sim.gpustack.ai/admission")
        if admission:
            found = json.loads(admission)
            if found["queue"] == queue:
                usage[found["flavor"]] = usage.get(found["flavor"], 0) + found["charge"]
    return usage


def _pending(pod: dict, reason: str, message: str) -> None:
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
        ],
    }


def _report_queue_usage(world, pods: Mapping[str, Any]) -> None:
    for queue in world.list("ClusterQueue"):
        name = queue["metadata"]["name"]
        usage = _usage(world, name)
        status = queue.setdefault("status", {})
        status["admittedWorkloads"] = sum(
            1
            for p in pods.values()
            if json.loads(
                p["metadata"].get("annotations", {}).get("sim.gpustack.ai/admission", "{}")
            ).get("queue")
            == name
        )
        covered = (queue["spec"].get("resourceGroups") or [{}])[0].get("coveredResources", ["cpu"])[
            0
        ]
        status["flavorsReservation"] = [
            {
                "name": flavor,
                "resources": [
                    {"name": covered, "total": quantity.format_decimal(total), "borrowed": "0"}
                ],
            }
            for flavor, total in sorted(usage.items())
        ]
