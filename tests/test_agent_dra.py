"""The node agent under Dynamic Resource Allocation: the claims its Pods name, joined with the
node's ResourceSlices of NVIDIA's DRA driver (k8s-dra-driver-gpu v0.4.0), to allocation rows."""

from __future__ import annotations

import copy
import http.server
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from functions.agent.agent import Agent, NodeFacts
from functions.agent.allocations import DraState, allocations
from functions.agent.nvml import FakeNvml
from functions.core import dialects
from tests.support.schemas import ROOT

NODE = "node-h100"
CARD_0, CARD_1, CARD_2 = "GPU-0000-a", "GPU-0000-b", "GPU-0000-m"
MIG_3G = "MIG-0000-3g"
READING = [
    {
        "manufacturer": "nvidia",
        "devices": [
            {"uuid": CARD_0},
            {"uuid": CARD_1},
            {
                "uuid": CARD_2,
                "mig": {
                    "partitions": [
                        {
                            "profile": "3g.40gb",
                            "placement": {"start": 4, "size": 4},
                            "uuid": MIG_3G,
                        }
                    ]
                },
            },
        ],
    }
]


def card(minor: int, uuid: str) -> dict[str, Any]:
    """A whole card as the driver publishes it."""
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": uuid},
            "minor": {"int": minor},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
        },
        "capacity": {"memory": {"value": "85520809984"}},
    }


def mig_device(parent_minor: int, parent: str, uuid: str, start: int) -> dict[str, Any]:
    """A MIG device of a card in MIG mode (3g.40gb: GPU-instance profile 9)."""
    return {
        "name": f"gpu-{parent_minor}-mig-3g40gb-9-{start}",
        "attributes": {
            "type": {"string": "mig"},
            "uuid": {"string": uuid},
            "parentUUID": {"string": parent},
            "profile": {"string": "3g.40gb"},
        },
        "capacity": {
            "memory": {"value": "42949672960"},
            **{f"memorySlice{i}": {"value": "1"} for i in range(start, start + 4)},
        },
    }


def resource_slice(*devices: dict, node: str = NODE, driver: str = dialects.DRA_DRIVER) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver}-x2v9k"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


SLICES = [
    resource_slice(card(0, CARD_0), card(1, CARD_1), mig_device(2, CARD_2, MIG_3G, 4)),
]


def result(device: str, pool: str = NODE, driver: str = dialects.DRA_DRIVER) -> dict:
    return {"request": "accelerators", "driver": driver, "pool": pool, "device": device}


def claim(name: str, *results: dict, namespace: str = "team") -> dict:
    """A claim made from the Pod's template; allocated when it has results."""
    status: dict[str, Any] = {}
    if results:
        status = {
            "allocation": {"devices": {"results": list(results)}},
            "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-{name}"}],
        }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{name}-accelerators-7xk2p", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "accelerators", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
                ]
            }
        },
        "status": status,
    }


def pod(name: str, phase: str = "Running", made: bool = True) -> dict:
    """An Instance's Pod: one claim entry from its template, used by `main`, not the sidecar;
    `made` once kube-controller-manager has made its claim."""
    status: dict[str, Any] = {"phase": phase}
    if made:
        claim_name = f"{name}-accelerators-7xk2p"
        status["resourceClaimStatuses"] = [
            {"name": "accelerators", "resourceClaimName": claim_name}
        ]
    return {
        "metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}"},
        "spec": {
            "nodeName": NODE,
            "resourceClaims": [
                {"name": "accelerators", "resourceClaimTemplateName": f"{name}-3f2a9c81d0"}
            ],
            "containers": [
                {"name": "main", "resources": {"claims": [{"name": "accelerators"}]}},
                {"name": "sshd", "resources": {}},
            ],
        },
        "status": status,
    }


def whole(name: str, device: str) -> dict:
    return {
        "pod": f"team/{name}",
        "container": "main",
        "podUID": f"uid-{name}",
        "device": device,
        "mode": "Exclusive",
    }


PARTITION_ROW = {
    "pod": "team/infer",
    "container": "main",
    "podUID": "uid-infer",
    "device": CARD_2,
    "mode": "Partitioned",
    "profile": "3g.40gb",
    "placement": {"start": 4, "size": 4},
}


@dataclass
class Case:
    id: str
    pods: list[dict]
    claims: list[dict]
    expected: list[dict]
    slices: list[dict] = field(default_factory=lambda: SLICES)


CASES = [
    Case("a whole card", [pod("p")], [claim("p", result("gpu-0"))], [whole("p", CARD_0)]),
    Case(
        "two whole cards",
        [pod("p")],
        [claim("p", result("gpu-1"), result("gpu-0"))],
        [whole("p", CARD_0), whole("p", CARD_1)],
    ),
    Case(
        "a 3g.40gb MIG device is its card's partition",
        [pod("infer")],
        [claim("infer", result("gpu-2-mig-3g40gb-9-4"))],
        [PARTITION_ROW],
    ),
    Case("a claim not yet allocated holds nothing", [pod("p")], [claim("p")], []),
    Case("a claim not yet made holds nothing", [pod("p", made=False)], [], []),
    Case(
        "a terminated Pod releases its whole card",
        [pod("p", phase="Succeeded")],
        [claim("p", result("gpu-0"))],
        [],
    ),
    Case(
        "a terminated Pod's partition stays charged while the Pod exists",
        [pod("infer", phase="Failed")],
        [claim("infer", result("gpu-2-mig-3g40gb-9-4"))],
        [PARTITION_ROW],
    ),
    Case(
        "a device no slice publishes is reported by its name: the ledger flags it",
        [pod("p")],
        [claim("p", result("gpu-7"))],
        [whole("p", "gpu-7")],
    ),
    Case(
        "a device published without a UUID is reported by its name",
        [pod("p")],
        [claim("p", result("gpu-0"))],
        [whole("p", "gpu-0")],
        slices=[resource_slice({"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}})],
    ),
    Case(
        "another node's and another driver's slices and results are not this node's",
        [pod("p")],
        [
            claim(
                "p",
                result("gpu-0"),
                result("gpu-1", pool="node-other"),
                result("gpu-1", driver="gpu.example.com"),
            )
        ],
        [whole("p", CARD_0)],
        slices=[
            resource_slice(card(0, "GPU-other-node"), node="node-other"),
            resource_slice(card(0, "GPU-other-driver"), driver="gpu.example.com"),
            *SLICES,
        ],
    ),
    Case(
        "a claim of the same name in another namespace is not the Pod's",
        [pod("p")],
        [claim("p", result("gpu-0"), namespace="elsewhere")],
        [],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_dra_allocations_join_claims_and_slices_to_the_nodes_cards(case):
    pods = {f"team/{p['metadata']['name']}": p for p in case.pods}
    dra = DraState(NODE, case.claims, case.slices)
    assert allocations([], pods, READING, dra) == case.expected


def test_dra_rows_merge_with_the_kubelets_in_one_sorted_list():
    from functions.agent.podresources import ContainerDevices

    plugin = {
        "metadata": {"uid": "uid-a"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
        "status": {"phase": "Running"},
    }
    pods = {"team/a": plugin, "team/p": pod("p")}
    assigned = [ContainerDevices("team/a", "main", "nvidia.com/gpu", (CARD_1,))]
    dra = DraState(NODE, [claim("p", result("gpu-0"))], SLICES)
    assert allocations(assigned, pods, READING, dra) == [
        whole("a", CARD_1),
        whole("p", CARD_0),
    ]


def test_a_newer_generation_of_the_pool_replaces_the_older():
    old, new = resource_slice(card(0, "GPU-stale")), resource_slice(card(0, CARD_0))
    old["spec"]["pool"]["generation"], new["spec"]["pool"]["generation"] = 1, 2
    dra = DraState(NODE, [claim("p", result("gpu-0"))], [new, old])
    assert allocations([], {"team/p": pod("p")}, READING, dra) == [whole("p", CARD_0)]


def test_a_container_naming_one_request_of_the_claim_is_given_only_that_requests_devices():
    the_pod = pod("p")
    the_pod["spec"]["containers"][1]["resources"] = {
        "claims": [{"name": "accelerators", "request": "extra"}]
    }
    extra = {**result("gpu-1"), "request": "extra/h100"}  # a subrequest's result
    dra = DraState(NODE, [claim("p", result("gpu-0"), extra)], SLICES)
    assert allocations([], {"team/p": the_pod}, READING, dra) == [
        whole("p", CARD_0),
        whole("p", CARD_1),
        {**whole("p", CARD_1), "container": "sshd"},
    ]


# --- the agent reading claims and slices through its Kube -------------------------------------


FIXTURE = ROOT / "tests" / "fixtures" / "nvml" / "h100-mig.yaml"  # GPU 0 in MIG mode, GPU 1 whole
H100_MIG_PARENT = "GPU-9c1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e500"
H100_MIG = "MIG-5f2a7c1e-0d3b-5e8a-9c4f-1a2b3c4d5e6f"
H100_WHOLE = "GPU-9c1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e501"


class DraKube:
    """The API server as the agent reads it, recording each DRA read."""

    def __init__(self, pods: list[dict], claims: list[dict], slices: list[dict]):
        self.pods, self.slices, self.applied = pods, slices, []
        self.claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
        self.reads: list[tuple[str, ...]] = []

    def node_facts(self, node: str) -> NodeFacts:
        return NodeFacts("node-h100-uid", 224)

    def pods_on(self, node: str) -> list[dict]:
        return copy.deepcopy(self.pods)

    def resource_claim(self, namespace: str, name: str) -> dict | None:
        self.reads.append(("claim", namespace, name))
        return copy.deepcopy(self.claims.get((namespace, name)))

    def resource_slices(self, node: str) -> list[dict]:
        self.reads.append(("slices", node))
        return copy.deepcopy([s for s in self.slices if s["spec"]["nodeName"] == node])

    def apply_devices(self, devices: dict) -> None:
        self.applied.append(devices)


def agent_with(kube: DraKube) -> Agent:
    return Agent(
        NODE,
        FakeNvml.from_file(FIXTURE),
        kube,
        list,  # the kubelet hands out nothing under DRA
        ROOT / "tests" / "fixtures" / "cpuinfo" / "node-t4-b.txt",
        os="linux",
        arch="amd64",
    )


def test_the_agent_reports_what_dra_allocated_its_pods():
    slices = [
        resource_slice(mig_device(0, H100_MIG_PARENT, H100_MIG, 0), card(1, H100_WHOLE), node=NODE),
        resource_slice(card(0, "GPU-elsewhere"), node="node-other"),
    ]
    kube = DraKube(
        [pod("infer"), pod("train"), pod("waiting", made=False)],
        [claim("infer", result("gpu-0-mig-3g40gb-9-0")), claim("train", result("gpu-1"))],
        slices,
    )
    rows = agent_with(kube).build()["spec"]["allocations"]
    assert rows == [
        {
            "pod": "team/infer",
            "container": "main",
            "podUID": "uid-infer",
            "device": H100_MIG_PARENT,
            "mode": "Partitioned",
            "profile": "3g.40gb",
            "placement": {"start": 0, "size": 4},
        },
        whole("train", H100_WHOLE),
    ]
    assert kube.reads == [
        ("claim", "team", "infer-accelerators-7xk2p"),
        ("claim", "team", "train-accelerators-7xk2p"),
        ("slices", NODE),
    ]


def test_a_node_whose_pods_name_no_claim_reads_nothing_of_dra():
    plugin = pod("plugin", made=False)
    del plugin["spec"]["resourceClaims"]
    kube = DraKube([plugin, pod("waiting", made=False)], [], [])
    assert agent_with(kube).build()["spec"]["allocations"] == []
    assert kube.reads == []


def test_a_claim_gone_since_the_pods_were_listed_reads_no_slices():
    kube = DraKube([pod("p")], [], SLICES)
    assert agent_with(kube).build()["spec"]["allocations"] == []
    assert kube.reads == [("claim", "team", "p-accelerators-7xk2p")]


# --- the real client on a cluster without resource.k8s.io/v1 ----------------------------------


def test_a_cluster_without_the_dra_api_has_no_claims_and_no_slices():
    import kubernetes

    from functions.agent.agent import KubernetesApi

    asked: list[str] = []

    class NoDra(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = json.dumps({"kind": "Status", "code": 404, "reason": "NotFound"}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NoDra)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        host = f"http://127.0.0.1:{server.server_address[1]}"
        api = KubernetesApi(5, kubernetes.client.Configuration(host=host))
        assert api.resource_claim("team", "p-accelerators-7xk2p") is None
        assert api.resource_slices(NODE) == []
    finally:
        server.shutdown()
        server.server_close()
    assert asked == [
        "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/p-accelerators-7xk2p",
        f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3D{NODE}",
    ]
