"""The simulated `devicePlugin: dra` cluster, judged by what a user of a real one sees: the
ResourceSlice NVIDIA's DRA driver publishes, the ResourceClaim kube-controller-manager makes from
a Pod's template, kube-scheduler's allocation and its refusals, Kueue's DRA messages, and devices
coming free with their Pods (simulator/gpustack_sim/dra.py, dynamicresources.py, kueuedra.py).

Small worlds of Pods and templates, built directly: no Instance, so the figures are the
stand-ins' alone.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from gpustack_sim import World, load_documents
from gpustack_sim.kueue import GATE, QUEUE_NAME
from tests.support.schemas import ROOT

EXAMPLE = ROOT / "examples" / "device-plugins"
NODE = "node-h100"
CREDITS = "credits.gpustack.ai/nvidia"
H100 = "NVIDIA H100 80GB HBM3"
CARD = "GPU-7c1e0d52-0a4b-4f3e-9d21-5b8e6f40a10{}"
MIG_3G = "MIG-4f6a2c1e-8b3d-5e7f-9a0b-1c2d3e4f5a60"
MIG_1G, MIG_2G = (
    "MIG-0b5e7a1c-2d3f-4a6b-8c9d-0e1f2a3b4c51",
    "MIG-0b5e7a1c-2d3f-4a6b-8c9d-0e1f2a3b4c52",
)
PROFILE = "device.attributes['gpu.nvidia.com'].profile == '{}'"


# --- the cluster ------------------------------------------------------------------------------


def h100_devices(mig: bool = True) -> dict[str, Any]:
    """The example's eight-H100 node: cards 0 and 1 in MIG mode (a 3g.40gb on card 0, a
    2g.20gb and a 1g.10gb on card 1), the others whole; `mig=False`, all eight whole."""
    devices = copy.deepcopy(
        next(d for d in load_documents(EXAMPLE / "devices.yaml") if d["metadata"]["name"] == NODE)
    )
    devices["spec"].pop("allocations", None)
    cards = devices["spec"]["accelerators"][0]["devices"]
    cards[1]["mig"]["partitions"] = [
        {"profile": "1g.10gb", "placement": {"start": 6, "size": 1}, "uuid": MIG_1G},
        {"profile": "2g.20gb", "placement": {"start": 0, "size": 2}, "uuid": MIG_2G},
    ]
    if not mig:
        for card in cards[:2]:
            card["mig"] = {"enabled": False}
    return devices


def cluster(devices: dict[str, Any] | None = None, classes: bool = True) -> World:
    """One H100 node under `devicePlugin: dra`, with the driver's DeviceClasses (`classes`)."""
    world = World(agents=False)
    node = next(n for n in load_documents(EXAMPLE / "nodes.yaml") if n["metadata"]["name"] == NODE)
    world.apply(devices or h100_devices(), node)
    if classes:
        world.apply(*load_documents(EXAMPLE / "dra-driver.yaml"))
    world.apply(*load_documents(EXAMPLE / "catalog-dra.yaml"))
    world.reconcile()
    return world


def exactly(device_class: str = "gpu.nvidia.com", count: int = 1, profile: str = "") -> dict:
    found: dict[str, Any] = {"deviceClassName": device_class, "allocationMode": "ExactCount"}
    found["count"] = count
    if profile:
        found["selectors"] = [{"cel": {"expression": PROFILE.format(profile)}}]
    return found


def template(name: str, request: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            **({"metadata": metadata} if metadata else {}),
            "spec": {"devices": {"requests": [{"name": "accelerators", "exactly": request}]}},
        },
    }


def pod(name: str, claim: dict[str, str] | None = None, **labels: str) -> dict[str, Any]:
    """A Pod as the product composes it under dra: its claim entry, `main` using it, and its
    price in credits, which no node advertises."""
    amounts = {"cpu": "1", "memory": "1Gi", CREDITS: "1600000"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "ubuntu:24.04",
                    "resources": {
                        "requests": amounts,
                        "limits": amounts,
                        "claims": [{"name": "accelerators"}],
                    },
                }
            ],
            "resourceClaims": [
                {"name": "accelerators", **(claim or {"resourceClaimTemplateName": name})}
            ],
        },
    }


def run(world: World, name: str, request: dict[str, Any]) -> None:
    world.apply(template(name, request), pod(name))
    world.reconcile()


def claim_of(world: World, name: str) -> dict[str, Any]:
    statuses = world.get("Pod", name, "default")["status"]["resourceClaimStatuses"]
    return world.get("ResourceClaim", statuses[0]["resourceClaimName"], "default")


def allocated(world: World, name: str) -> list[str]:
    results = claim_of(world, name)["status"]["allocation"]["devices"]["results"]
    return [r["device"] for r in results]


def scheduled(world: World, name: str) -> tuple[str, str]:
    """(phase, PodScheduled's message) of a Pod."""
    status = world.get("Pod", name, "default")["status"]
    condition = next(c for c in status["conditions"] if c["type"] == "PodScheduled")
    return status.get("phase", ""), condition.get("message", "")


# --- NVIDIA's DRA driver: the ResourceSlice ----------------------------------------------------


def test_the_driver_publishes_one_slice_per_node_owned_by_the_node():
    world = cluster()
    (published,) = world.list("ResourceSlice")
    node = world.get("Node", NODE)
    assert re.fullmatch(
        r"00000-gpu\.nvidia\.com-node-h100-[bcdfghjklmnpqrstvwxz2456789]{5}",
        published["metadata"]["name"],
    )
    assert published["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": NODE,
            "uid": node["metadata"]["uid"],
            "controller": True,
        }
    ]
    assert {k: v for k, v in published["spec"].items() if k != "devices"} == {
        "driver": "gpu.nvidia.com",
        "nodeName": NODE,
        "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
    }


def test_a_card_in_mig_mode_is_published_as_its_mig_devices_only():
    world = cluster()
    devices = world.list("ResourceSlice")[0]["spec"]["devices"]
    assert [d["name"] for d in devices] == [
        "gpu-0-mig-3g40gb-9-0",
        "gpu-1-mig-2g20gb-14-0",
        "gpu-1-mig-1g10gb-19-6",
        *(f"gpu-{minor}" for minor in range(2, 8)),
    ]


def test_a_whole_cards_attributes_and_capacity():
    world = cluster()
    card = next(
        d for d in world.list("ResourceSlice")[0]["spec"]["devices"] if d["name"] == "gpu-2"
    )
    assert card["attributes"] == {
        "type": {"string": "gpu"},
        "uuid": {"string": CARD.format(2)},
        "productName": {"string": H100},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "580.159.3"},
        "cudaDriverVersion": {"version": "13.0.0"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:38:00.0"},
    }
    assert card["capacity"] == {"memory": {"value": "81559Mi"}}  # NVML's total, BinarySI
    assert "taints" not in card


@pytest.mark.parametrize(
    ("name", "uuid", "profile", "memory", "engines", "slices"),
    [
        ("gpu-0-mig-3g40gb-9-0", MIG_3G, "3g.40gb", "40448Mi", (60, 3, 0, 3, 3, 0), range(4)),
        ("gpu-1-mig-2g20gb-14-0", MIG_2G, "2g.20gb", "20096Mi", (32, 2, 0, 2, 2, 0), range(2)),
        ("gpu-1-mig-1g10gb-19-6", MIG_1G, "1g.10gb", "9984Mi", (16, 1, 0, 1, 1, 0), range(6, 7)),
    ],
)
def test_a_mig_devices_attributes_and_capacity(name, uuid, profile, memory, engines, slices):
    world = cluster()
    device = next(d for d in world.list("ResourceSlice")[0]["spec"]["devices"] if d["name"] == name)
    parent = CARD.format(name[4])
    assert device["attributes"] == {
        "type": {"string": "mig"},
        "uuid": {"string": uuid},
        "parentUUID": {"string": parent},
        "profile": {"string": profile},
        "productName": {"string": H100},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "580.159.3"},
        "cudaDriverVersion": {"version": "13.0.0"},
        "resource.kubernetes.io/pciBusID": {
            "string": "0000:18:00.0" if name[4] == "0" else "0000:28:00.0"
        },
    }
    keys = ("multiprocessors", "decoders", "encoders", "copyEngines", "jpegEngines", "ofaEngines")
    assert device["capacity"] == {
        "memory": {"value": memory},
        **{key: {"value": str(n)} for key, n in zip(keys, engines, strict=True)},
        **{f"memorySlice{i}": {"value": "1"} for i in slices},
    }


def test_an_unhealthy_cards_devices_are_tainted_as_the_health_check_taints_them():
    devices = h100_devices()
    cards = devices["spec"]["accelerators"][0]["devices"]
    cards[0]["healthy"] = cards[7]["healthy"] = False
    world = cluster(devices)
    found = {d["name"]: d.get("taints") for d in world.list("ResourceSlice")[0]["spec"]["devices"]}
    lost = [{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}]
    assert (found["gpu-0-mig-3g40gb-9-0"], found["gpu-7"], found["gpu-6"]) == (lost, lost, None)


def test_nothing_is_published_where_the_cluster_runs_another_device_plugin():
    world = cluster()
    world.patch("Catalog", "default", {"devicePlugin": "nvidia"})
    world.reconcile()
    assert world.list("ResourceSlice") == []


def test_no_nvidia_card_is_advertised_in_allocatable():
    world = cluster()
    allocatable = world.get("Node", NODE)["status"]["allocatable"]
    assert not [k for k in allocatable if k.startswith("nvidia.com/")]


# --- the resourceclaim controller ----------------------------------------------------------


def test_the_controller_makes_the_claim_from_the_pods_template():
    world = cluster()
    labelled = template("whole", exactly(), labels={"app": "x"}, annotations={"note": "y"})
    world.apply(labelled, pod("whole"))
    world.reconcile()
    made = world.get("Pod", "whole", "default")
    (status,) = made["status"]["resourceClaimStatuses"]
    assert status["name"] == "accelerators"
    assert re.fullmatch(
        r"whole-accelerators-[bcdfghjklmnpqrstvwxz2456789]{5}", status["resourceClaimName"]
    )
    claim = claim_of(world, "whole")
    assert claim["metadata"]["annotations"] == {
        "note": "y",
        "resource.kubernetes.io/pod-claim-name": "accelerators",
    }
    assert claim["metadata"]["labels"] == {"app": "x"}
    assert claim["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "whole",
            "uid": made["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert claim["spec"] == labelled["spec"]["spec"]


def test_a_pod_whose_template_is_missing_waits_for_it():
    world = cluster()
    world.apply(pod("late"))
    world.reconcile()
    assert world.list("ResourceClaim") == []
    assert "nodeName" not in world.get("Pod", "late", "default")["spec"]
    world.apply(template("late", exactly()))
    world.reconcile()
    assert world.get("Pod", "late", "default")["status"]["phase"] == "Running"


# --- kube-scheduler's DynamicResources ----------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "devices"),
    [
        (exactly(count=2), ["gpu-2", "gpu-3"]),  # whole cards, in the slice's order
        (exactly("mig.nvidia.com", profile="3g.40gb"), ["gpu-0-mig-3g40gb-9-0"]),
        (exactly("mig.nvidia.com", profile="1g.10gb"), ["gpu-1-mig-1g10gb-19-6"]),
    ],
    ids=["two-cards", "3g.40gb", "1g.10gb"],
)
def test_the_scheduler_allocates_and_reserves_before_binding(request_, devices):
    world = cluster()
    run(world, "p", request_)
    claim, bound = claim_of(world, "p"), world.get("Pod", "p", "default")
    assert allocated(world, "p") == devices
    assert claim["status"]["allocation"] == {
        "devices": {
            "results": [
                {"request": "accelerators", "driver": "gpu.nvidia.com", "pool": NODE, "device": d}
                for d in devices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
            ]
        },
    }
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p", "uid": bound["metadata"]["uid"]}
    ]
    assert claim["metadata"]["finalizers"] == ["resource.kubernetes.io/delete-protection"]
    # Its credits key is ignored by NodeResourcesFit (ignoredResourceGroups) and dropped by the
    # kubelet, as no node has it.
    assert (bound["spec"]["nodeName"], bound["status"]["phase"]) == (NODE, "Running")


CANNOT = (
    "0/1 nodes are available: 1 cannot allocate all claims. "
    "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
)


@pytest.mark.parametrize(
    ("first", "then"),
    [
        (exactly(count=8), exactly()),  # a 9th card
        (None, exactly(count=9)),  # nine at once
        (
            exactly("mig.nvidia.com", profile="3g.40gb"),
            exactly("mig.nvidia.com", profile="3g.40gb"),
        ),
        (None, exactly("mig.nvidia.com", profile="7g.80gb")),  # no such MIG device
    ],
    ids=["ninth-card", "nine-cards", "second-3g.40gb", "no-7g.80gb"],
)
def test_the_scheduler_refuses_what_the_devices_cannot_give(first, then):
    world = cluster(h100_devices(mig="selectors" in then))
    if first is not None:
        run(world, "first", first)
        assert world.get("Pod", "first", "default")["status"]["phase"] == "Running"
    run(world, "then", then)
    assert scheduled(world, "then") == ("Pending", CANNOT)
    assert "allocation" not in (claim_of(world, "then").get("status") or {})


@pytest.mark.parametrize(
    ("expression", "device"),
    [
        ("device.attributes['resource.kubernetes.io'].pciBusID == '0000:58:00.0'", "gpu-4"),
        (
            "device.attributes['gpu.nvidia.com'].uuid == 'GPU-7c1e0d52-0a4b-4f3e-9d21-5b8e6f40a105'",
            "gpu-5",
        ),
        (
            "device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))",
            "gpu-2",
        ),
        ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.major() == 9", "gpu-2"),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('79Gi')) > 0", "gpu-2"),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('80Gi'))", "gpu-2"),
    ],
)
def test_request_selectors_see_the_device_as_the_allocator_binds_it(expression, device):
    """Unqualified names are the driver's domain; versions are semver, capacities quantities."""
    world = cluster()
    request = exactly()
    request["selectors"] = [{"cel": {"expression": expression}}]
    run(world, "p", request)
    assert allocated(world, "p") == [device]


def test_no_tainted_device_is_allocated():
    devices = h100_devices(mig=False)
    for card in devices["spec"]["accelerators"][0]["devices"][1:]:
        card["healthy"] = False
    world = cluster(devices)
    run(world, "one", exactly())
    assert allocated(world, "one") == ["gpu-0"]
    run(world, "two", exactly())
    assert scheduled(world, "two") == ("Pending", CANNOT)


def test_a_missing_device_class_refuses_the_pod_before_any_node():
    world = cluster(classes=False)
    run(world, "p", exactly())
    assert scheduled(world, "p") == (
        "Pending",
        "0/1 nodes are available: request accelerators: device class gpu.nvidia.com does not "
        "exist. preemption: 0/1 nodes are available: 1 Preemption "
        "is not helpful for scheduling.",
    )


@pytest.mark.parametrize("end", ["deleted", "succeeded"])
def test_a_pods_devices_come_free_when_it_ends(end):
    world = cluster(h100_devices(mig=False))
    run(world, "first", exactly(count=8))
    run(world, "then", exactly())
    assert scheduled(world, "then")[0] == "Pending"
    first_claim = claim_of(world, "first")["metadata"]["name"]
    if end == "deleted":
        world.api.delete("Pod", "first", "default")
    else:
        ended = world.get("Pod", "first", "default")
        world.api.update_status({**ended, "status": {**ended["status"], "phase": "Succeeded"}})
    world.reconcile()
    assert world.get("ResourceClaim", first_claim, "default") is None  # deallocated, then deleted
    assert world.get("Pod", "then", "default")["status"]["phase"] == "Running"
    assert allocated(world, "then") == ["gpu-0"]


def test_a_claim_is_released_and_deallocated_before_it_goes():
    """The controller's own steps, a Pod done: reservation removed, allocation cleared,
    finalizer off (then the claim is deleted, the Pod being done)."""
    world = cluster()
    run(world, "p", exactly())
    claim = claim_of(world, "p")
    controller = next(c for c in world.controllers if type(c).__name__ == "ResourceClaimController")
    ended = world.get("Pod", "p", "default")
    world.api.update_status({**ended, "status": {**ended["status"], "phase": "Failed"}})
    released = controller.deallocated(copy.deepcopy(claim), [])
    assert "allocation" not in released["status"] and "reservedFor" not in released["status"]
    assert "finalizers" not in released["metadata"]


def test_the_kubelet_starts_no_pod_whose_claim_is_not_reserved_for_it():
    world = cluster()
    bypassing = pod("direct")
    bypassing["spec"]["nodeName"] = NODE  # no scheduler: nothing allocates its claim
    world.apply(template("direct", exactly()), bypassing)
    world.reconcile()
    assert world.get("Pod", "direct", "default").get("status", {}).get("phase") != "Running"


# --- Kueue's DRA integration ------------------------------------------------------------------


def workload_conditions(world: World, name: str) -> dict[str, tuple[str, str, str]]:
    found = world.get("Workload", f"pod-{name}", "default")
    return {
        c["type"]: (c["status"], c["reason"], c["message"]) for c in found["status"]["conditions"]
    }


CLAIM_PATH = "spec.podSets[0].template.spec.resourceClaims[0]"


@pytest.mark.parametrize(
    ("claim", "request_", "message", "requeued"),
    [
        (
            {"resourceClaimName": "shared"},
            None,
            "KueueDRAIntegration feature does not support use of resource claims",
            "DRA resource claims not supported",
        ),
        (
            None,
            exactly("vfio.gpu.nvidia.com"),
            f'{CLAIM_PATH}.resourceClaimTemplateName: Not found: "DeviceClass vfio.gpu.nvidia.com '
            'is not mapped in DRA configuration for podset main"',
            None,
        ),
        (
            None,
            {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"},
            f'{CLAIM_PATH}.devices.requests[0].exactly.allocationMode: Invalid value: "All": '
            "ResourceClaimTemplate q: AllocationMode 'All' is not supported",
            None,
        ),
        (
            None,
            exactly("mig.nvidia.com", profile="7g.80gb"),
            f"{CLAIM_PATH}.devices.requests[0].exactly.selectors: Internal error: "
            "ResourceClaimTemplate q: insufficient matching devices for CEL selector in "
            "DeviceClass mig.nvidia.com: 0 device(s) match in the cluster but 1 requested",
            None,
        ),
        (
            None,
            "missing",
            f"{CLAIM_PATH}: Internal error: failed to get claim spec for ResourceClaimTemplate q "
            'in podset main: resourceclaimtemplates.resource.k8s.io "q" not found',
            None,
        ),
    ],
    ids=["resource-claim", "unmapped-class", "all", "no-such-mig-device", "no-template"],
)
def test_kueue_refuses_claims_it_cannot_count(claim, request_, message, requeued):
    world = cluster()
    if request_ not in (None, "missing"):
        world.apply(template("q", request_))
    world.apply(pod("q", claim or {"resourceClaimTemplateName": "q"}, **{QUEUE_NAME: "gpu"}))
    world.reconcile()
    conditions = workload_conditions(world, "q")
    assert conditions["QuotaReserved"] == ("False", "Inadmissible", message)
    assert conditions["Requeued"] == ("False", "Inadmissible", requeued or message)
    assert GATE in [g["name"] for g in world.get("Pod", "q", "default")["spec"]["schedulingGates"]]


def test_kueue_counts_a_claims_devices_after_the_transformations():
    world = cluster()
    world.apply(template("q", exactly(count=2)), pod("q", **{QUEUE_NAME: "gpu"}))
    world.reconcile()
    requested = world.get("Workload", "pod-q", "default")["status"]["resourceRequests"]
    assert requested[0]["resources"] == {
        "cpu": "1",
        "memory": "1073741824",
        CREDITS: "1600k",  # charged as it is: no transformation reads it
        "dra.gpustack.ai/nvidia": "2",  # the mapping's name for gpu.nvidia.com, uncovered
    }
    # No ClusterQueue here: the Workload waits on its LocalQueue, not on its claims.
    assert workload_conditions(world, "q")["QuotaReserved"][1] == "Pending"
    assert "Requeued" not in workload_conditions(world, "q")
