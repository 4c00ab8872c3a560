"""The device plugins clusters already run: the example of docs/device-plugins.md, played in the
simulated cluster with the NVIDIA GPU Operator's plugin, with HAMi, and with NVIDIA's DRA driver.

An 8×H100 node (two cards in MIG mode, one 3g.40gb made by the MIG manager) and two 1×L4
nodes, one of them time-sliced. The stand-ins are the plugins' documented behaviour
(simulator/gpustack_sim/nvidia.py, hami.py); Kueue charges through the shipped configuration of
each dialect; the node agent's real allocation join reads the plugins' device IDs.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import kubernetes_validate
import pytest
from click.testing import CliRunner
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions import frame
from functions.agent.agent import Agent, NodeFacts
from functions.agent.nvml import FakeNvml
from functions.agent.podresources import list_devices
from functions.cli import main
from functions.handlers import HANDLERS
from gpustack_sim import World, load_documents, world_from
from gpustack_sim.apiserver import ApiServer, Refused
from gpustack_sim.client import Client
from gpustack_sim.deviceplugin import Allocate, Card, Placement
from gpustack_sim.nvidia import NvidiaPlugin
from gpustack_sim.store import Store
from tests.support.fake_kubelet import fake_kubelet
from tests.support.schemas import ROOT
from tests.test_frame import MODERN

EXAMPLE = ROOT / "examples" / "device-plugins"
L4 = "gpustack--nvidia-l4-linux-amd64"
H100 = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
L4_A, L4_B = "GPU-2b9d7e41-6c3a-4d8f-b105-8e7a9c0d1f2a", "GPU-5e0c3a92-1f4b-4a6d-8c27-3d9b0e6f4a7c"
H100_0 = "GPU-7c1e0d52-0a4b-4f3e-9d21-5b8e6f40a100"
MIG_3G = "MIG-4f6a2c1e-8b3d-5e7f-9a0b-1c2d3e4f5a60"


def cluster(device_plugin: str) -> World:
    software = "dra-driver.yaml" if device_plugin == "dra" else "gpu-operator.yaml"
    files = ["devices.yaml", "nodes.yaml", "namespaces.yaml", software]
    world = world_from([EXAMPLE / f for f in [*files, f"catalog-{device_plugin}.yaml"]])
    world.reconcile()
    return world


def run(world: World, *names: str) -> None:
    for name in names:
        world.apply(load_documents(EXAMPLE / f"instance-{name}.yaml")[0])
    world.reconcile()


def row(world: World, pool: str) -> str:
    return world.get("InstanceType", pool)["status"]["display"]["accelerator"]


def keys(world: World, name: str) -> dict[str, str]:
    """The accelerator keys on the Instance's main container (limits)."""
    pod = world.get("Pod", name, "default")
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    return {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}


def charged(world: World, name: str) -> str:
    """What Kueue charged the Instance's Pod in credits.gpustack.ai/nvidia."""
    workload = world.get("Workload", f"pod-{name}", "default")
    usage = workload["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]
    return usage["credits.gpustack.ai/nvidia"]


def reported(world: World, node: str) -> list[tuple[str, str, str]]:
    """(pod, card, mode) of each allocation the node agent reported for `node`."""
    rows = world.get("Devices", node)["spec"].get("allocations") or []
    return [(r["pod"].split("/")[1], r["device"], r["mode"]) for r in rows]


def device_ids(world: World, node: str) -> dict[str, list[str]]:
    """What the kubelet's pod-resources API lists for `node`: resource → device IDs."""
    return {e.resource: list(e.device_ids) for e in world.kubelet.pod_resources(node)}


def phase_message(world: World, name: str) -> str:
    status = world.get("Instance", name, "default")["status"]
    return f"{status['phase']}: {status.get('phaseMessage', '')}"


@pytest.fixture(scope="module")
def nvidia() -> World:
    world = cluster("nvidia")
    run(world, "whole", "shared", "partition", "slice")
    return world


def test_nvidia_writes_the_gpu_operators_names_and_kueue_charges_the_credit_rule(nvidia):
    assert keys(nvidia, "whole") == {"nvidia.com/gpu": "1"}
    assert keys(nvidia, "shared") == {"nvidia.com/gpu.shared": "2"}
    assert keys(nvidia, "partition") == {"nvidia.com/mig-3g.40gb": "1"}
    assert [charged(nvidia, n) for n in ("whole", "shared", "partition")] == [
        "1600k",
        "320k",
        "800k",
    ]


def test_nvidia_each_runs_and_the_agent_joins_the_plugins_device_ids(nvidia):
    for name in ("whole", "shared", "partition"):
        assert phase_message(nvidia, name) == "Ready: "
    assert device_ids(nvidia, "node-l4-a") == {"nvidia.com/gpu": [L4_A]}
    assert device_ids(nvidia, "node-l4-b") == {
        "nvidia.com/gpu.shared": [f"{L4_B}::0", f"{L4_B}::1"]
    }
    assert device_ids(nvidia, "node-h100") == {"nvidia.com/mig-3g.40gb": [MIG_3G]}
    assert reported(nvidia, "node-l4-a") == [("whole", L4_A, "Exclusive")]
    # Two time-slicing replicas of the one L4 (`<UUID>::0`, `<UUID>::1`): two shares of it.
    assert reported(nvidia, "node-l4-b") == [("shared", L4_B, "Shared")] * 2
    uid = nvidia.get("Pod", "partition", "default")["metadata"]["uid"]
    assert nvidia.get("Devices", "node-h100")["spec"]["allocations"] == [
        {
            "pod": "default/partition",
            "container": "main",
            "podUID": uid,  # the agent names the Pod it read, as the API server stamped it
            "device": H100_0,
            "mode": "Partitioned",
            "profile": "3g.40gb",
            "placement": {"start": 0, "size": 4},
        }
    ]


def test_nvidia_rows_move_as_the_ledger_says_and_slicing_reads_zero(nvidia):
    # L4: both cards taken (one whole, one shared by replicas), 8 shares left on the shared one;
    # H100: the one 3g.40gb the MIG manager made is taken; no column offers a slice.
    assert row(nvidia, L4) == "0/0 1/8 0/0 0/0"
    assert row(nvidia, H100) == "6/6 6/60 0/0 0/0"
    offers = nvidia.get("InstanceType", L4)["status"]["offers"]
    assert offers["modes"] == ["Exclusive", "Shared"]


def test_nvidia_refuses_a_slice_naming_the_setting(nvidia):
    assert phase_message(nvidia, "slice") == (
        "Refused: spec.resources.acceleratorSlicedMemoryPercentage: devicePlugin: nvidia "
        "(the NVIDIA GPU Operator's device plugin) cannot give a memory slice of a card of "
        f"instance type {L4}; the cluster's device plugin must be gpustack or hami "
        "(the Catalog's spec.devicePlugin) for this request"
    )
    assert nvidia.get("Pod", "slice", "default") is None


def test_nvidia_offers_only_the_mig_profiles_kueue_can_price():
    world = cluster("nvidia")
    assert row(world, H100) == "6/6 6/60 0/0 1/1"  # one free 3g.40gb, the one that exists
    offered = world.get("InstanceType", H100)["status"]["offers"]["profiles"]
    # 1g.10gb is an eighth of an H100 but a quarter of an A100 40GB: no one price by name.
    assert [p["name"] for p in offered] == ["1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert {p["name"]: p["credits"] for p in offered}["3g.40gb"] == 800_000


@pytest.fixture(scope="module")
def hami() -> World:
    world = cluster("hami")
    run(world, "whole", "slice", "shared", "partition")
    return world


def test_hami_runs_the_slice_on_the_card_its_scheduler_chose(hami):
    assert keys(hami, "slice") == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem-percentage": "20",
        "nvidia.com/gpucores": "20",
    }
    assert keys(hami, "whole") == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem-percentage": "100",
        "nvidia.com/gpucores": "100",
    }
    assert (charged(hami, "slice"), charged(hami, "whole")) == ("320k", "1600k")
    pod = hami.get("Pod", "slice", "default")
    chosen = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    card = chosen.split(",")[0]
    node = pod["spec"]["nodeName"]
    assert chosen == f"{card},NVIDIA,4606,20:;"  # 20 % of the L4's 23034 MiB
    # The kubelet's vGPU id names no choice; the agent reads HAMi's annotation instead.
    assert device_ids(hami, node) == {"nvidia.com/gpu": [f"{card}-0"]}
    rows = hami.get("Devices", node)["spec"]["allocations"]
    assert [
        (r["device"], r["mode"], r["memoryPercentage"], r["coresPercentage"]) for r in rows
    ] == [(card, "Sliced", 20, 20)]
    assert row(hami, L4) == "0/0 0/0 80/80 0/0"


def test_hami_refuses_shares_and_partitions_naming_the_setting(hami):
    for name, what, able in (
        ("shared", "shares of a card", "gpustack or nvidia"),
        ("partition", "a hardware partition", "gpustack, nvidia or dra"),
    ):
        message = phase_message(hami, name)
        assert message.startswith("Refused: ")
        assert f"devicePlugin: hami (HAMi) cannot give {what}" in message
        assert f"must be {able} (the Catalog's spec.devicePlugin)" in message


@pytest.mark.parametrize("device_plugin", ["nvidia", "hami", "dra"])
def test_the_example_prints_what_docs_device_plugins_shows(device_plugin):
    """After an intended change, refresh with `gpustack-fn simulate
    examples/device-plugins/scenario-<plugin>.yaml > examples/device-plugins/expected-<plugin>.txt`."""
    scenario = EXAMPLE / f"scenario-{device_plugin}.yaml"
    result = CliRunner().invoke(main, ["simulate", str(scenario)])
    assert result.exit_code == 0, result.output
    assert result.output == (EXAMPLE / f"expected-{device_plugin}.txt").read_text()


@pytest.fixture(scope="module")
def dra() -> World:
    world = cluster("dra")
    run(world, "whole", "partition", "shared", "slice")
    return world


def claim_template(world: World, name: str) -> dict[str, Any]:
    """The ResourceClaimTemplate the Instance's Pod claims its accelerators from."""
    pod = world.get("Pod", name, "default")
    (entry,) = pod["spec"]["resourceClaims"]
    found = world.get("ResourceClaimTemplate", entry["resourceClaimTemplateName"], "default")
    assert found is not None, entry
    return found


def allocated(world: World, name: str) -> list[tuple[str, str]]:
    """(pool, device) of each device kube-scheduler allocated the Pod's claim."""
    pod = world.get("Pod", name, "default")
    (status,) = pod["status"]["resourceClaimStatuses"]
    claim = world.get("ResourceClaim", status["resourceClaimName"], "default")
    results = claim["status"]["allocation"]["devices"]["results"]
    return [(r["pool"], r["device"]) for r in results]


def test_dra_claims_cards_through_a_template_and_the_pod_states_its_price(dra):
    main = dra.get("Pod", "whole", "default")["spec"]["containers"][0]
    assert main["resources"]["claims"] == [{"name": "accelerators"}]
    assert main["resources"]["limits"]["credits.gpustack.ai/nvidia"] == "1600000"
    assert keys(dra, "whole") == {} and keys(dra, "partition") == {}  # no device-plugin key
    assert claim_template(dra, "whole")["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "accelerators",
            "exactly": {
                "allocationMode": "ExactCount",
                "deviceClassName": "gpu.nvidia.com",
                "count": 1,
            },
        }
    ]
    profile = "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"
    assert claim_template(dra, "partition")["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "accelerators",
            "exactly": {
                "allocationMode": "ExactCount",
                "deviceClassName": "mig.nvidia.com",
                "count": 1,
                "selectors": [{"cel": {"expression": profile}}],
            },
        }
    ]
    # Kueue charges the credits the Pod states, the same as every other dialect charges.
    assert [charged(dra, n) for n in ("whole", "partition")] == ["1600k", "800k"]


def test_dra_the_scheduler_allocates_and_the_agent_joins_the_claims_to_the_cards(dra):
    for name in ("whole", "partition"):
        assert phase_message(dra, name) == "Ready: "
    # kube-scheduler's ImageLocality: node-l4-b has the whole Instance's image
    assert allocated(dra, "whole") == [("node-l4-b", "gpu-0")]
    assert allocated(dra, "partition") == [("node-h100", "gpu-0-mig-3g40gb-9-0")]
    assert reported(dra, "node-l4-b") == [("whole", L4_B, "Exclusive")]
    rows = dra.get("Devices", "node-h100")["spec"]["allocations"]
    assert [(r["device"], r["mode"], r["profile"], r["placement"]) for r in rows] == [
        (H100_0, "Partitioned", "3g.40gb", {"start": 0, "size": 4})
    ]
    assert row(dra, L4) == "1/1 0/0 0/0 0/0"
    assert row(dra, H100) == "6/6 0/0 0/0 0/0"


def test_dra_the_templates_and_claims_are_valid_resource_k8s_io_v1():
    world = cluster("dra")
    run(world, "whole", "partition")
    for kind in ("ResourceClaimTemplate", "ResourceClaim", "ResourceSlice", "DeviceClass"):
        found = world.list(kind)
        assert found, kind
        for obj in found:
            kubernetes_validate.validate(obj, "1.37.0", strict=True)


def test_dra_refuses_shares_and_slices_naming_the_setting(dra):
    for name, field in (
        ("shared", "acceleratorShared"),
        ("slice", "acceleratorSlicedMemoryPercentage"),
    ):
        message = phase_message(dra, name)
        assert message.startswith(
            f"Refused: spec.resources.{field}: devicePlugin: dra (NVIDIA's DRA driver for GPUs) cannot give"
        )
    assert dra.get("Pod", "shared", "default") is None


def test_hami_the_agent_follows_hamis_choice_not_the_kubelets_vgpu_ids():
    world = cluster("hami")
    for name in ("whole", "slice"):
        instance = load_documents(EXAMPLE / f"instance-{name}.yaml")[0]
        instance["metadata"]["name"] = f"h100-{name}"
        instance["spec"]["type"] = H100
        world.apply(instance)
    world.reconcile()
    kubelet = {e.pod: e.device_ids[0] for e in world.kubelet.pod_resources("node-h100")}
    rows = {r["pod"]: r["device"] for r in world.get("Devices", "node-h100")["spec"]["allocations"]}
    # HAMi put the slice on the first card and the whole card (100 cores: alone) on the next;
    # the kubelet handed out the first free vGPU ids, both of the first card.
    first, second = (f"{H100_0[:-2]}{i:02d}" for i in (2, 3))
    assert kubelet == {"default/h100-slice": f"{first}-0", "default/h100-whole": f"{first}-1"}
    assert rows == {"default/h100-slice": first, "default/h100-whole": second}
    assert row(world, H100) == "4/4 0/0 100/480 0/0"


# --- HAMi's scheduler and webhook (the stand-in, from HAMi v2.10.0's code) ---------------------

# node-h100's cards by UUID; 0 and 1 are in MIG mode, so HAMi gives vGPUs of 2 to 7 only.
H100_INDEX = {f"{H100_0[:-2]}{i:02d}": i for i in range(8)}
WHOLE = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100", "nvidia.com/gpucores": "100"}
HALF = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "50"}
FIFTH = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "20", "nvidia.com/gpucores": "20"}
TWO_FIFTHS = {**FIFTH, "nvidia.com/gpu": "2"}  # two vGPUs of 20 %, on two cards


def container(name: str, limits: dict[str, str] | None = None, privileged: bool = False) -> dict:
    found: dict[str, Any] = {"name": name, "image": "ubuntu:24.04"}
    if limits:
        found["resources"] = {"requests": limits, "limits": limits}
    if privileged:
        found["securityContext"] = {"privileged": True}
    return found


def hami_pod(name: str, *containers: dict, **spec: Any) -> dict:
    """A Pod kept to node-h100 (HAMi's Pods come from the product; these test HAMi alone)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "node-h100"},
            "containers": list(containers),
            **spec,
        },
    }


def vgpus_of(world: World, name: str) -> list[tuple[int, str]]:
    """(card index, `<MiB>,<cores>`) of each vGPU HAMi's scheduler wrote on the Pod."""
    pod = world.get("Pod", name, "default")
    chosen = (pod["metadata"].get("annotations") or {}).get("hami.io/vgpu-devices-allocated", "")
    fields = [vgpu.split(",") for vgpu in chosen.replace(";", "").split(":") if vgpu]
    return [(H100_INDEX[card], f"{memory},{cores}") for card, _, memory, cores in fields]


@pytest.mark.parametrize(
    ("asked", "cards"),
    [
        pytest.param([HALF, HALF], [(2,), (3,)], id="two halves go to two cards, not one"),
        pytest.param(
            [HALF] * 6 + [WHOLE],
            [(2,), (3,), (4,), (5,), (6,), (7,), ()],
            id="six halves take all six cards, so a whole card waits",
        ),
        pytest.param(
            [HALF] * 5 + [FIFTH, FIFTH],
            [(2,), (3,), (4,), (5,), (6,), (7,), (7,)],
            id="a slice goes to the least-used card, not the first with room",
        ),
        pytest.param(
            [FIFTH, TWO_FIFTHS],
            [(2,), (3, 4)],
            id="a container's vGPUs go to the least-used cards",
        ),
    ],
)
def test_hami_spreads_vgpus_over_the_least_used_cards(asked, cards):
    """HAMi's default `gpuSchedulerPolicy: spread`: its Fit tries the cards least-used first
    (score: vGPUs/10 + cores/100 + memory/total). Between cards of equal score HAMi's order is
    arbitrary; the stand-in takes the lowest index."""
    world = cluster("hami")
    for number, limits in enumerate(asked):
        world.apply(hami_pod(f"vgpu-{number}", container("main", limits)))
        world.reconcile()
    placed = [tuple(i for i, _ in vgpus_of(world, f"vgpu-{n}")) for n in range(len(asked))]
    assert placed == cards
    for number, chosen in enumerate(cards):
        if not chosen:  # the extender found no card: the Pod waits with its reason
            status = world.get("Pod", f"vgpu-{number}", "default")["status"]
            scheduled = next(c for c in status["conditions"] if c["type"] == "PodScheduled")
            assert status["phase"] == "Pending"
            assert "1 node(s) didn't fit HAMi's vGPU request" in scheduled["message"]


def test_hami_records_the_memory_and_cores_its_defaults_give():
    """The webhook gives `gpucores: 100` to a container asking vGPUs and no cores when it asks
    a `gpumem-percentage` of exactly 100, or neither memory name (defaultExclusiveCoreIfNeeded);
    the scheduler reads a percentage of 0 as unset, the whole memory (GenerateResourceRequests).
    Each row is a Pod alone on node-h100 (81559 MiB cards); the annotation says `<MiB>,<cores>`."""
    gpu = {"nvidia.com/gpu": "1"}
    table = {
        "no memory, no cores: the card alone": (gpu, "81559,100"),
        "100 % and MiB, no cores: 100 cores": (
            {**gpu, "nvidia.com/gpumem-percentage": "100", "nvidia.com/gpumem": "4096"},
            "4096,100",
        ),
        "0 %, no cores: all the memory, no cores": (
            {**gpu, "nvidia.com/gpumem-percentage": "0"},
            "81559,0",
        ),
        "MiB only: no cores": ({**gpu, "nvidia.com/gpumem": "4096"}, "4096,0"),
        "40 %, no cores: no cores": ({**gpu, "nvidia.com/gpumem-percentage": "40"}, "32623,0"),
        "cores asked: as asked": (
            {**gpu, "nvidia.com/gpumem-percentage": "100", "nvidia.com/gpucores": "30"},
            "81559,30",
        ),
    }
    recorded = {}
    for row_name, (limits, _) in table.items():
        world = cluster("hami")
        world.apply(hami_pod("vgpu", container("main", limits)))
        world.reconcile()
        recorded[row_name] = [slot for _, slot in vgpus_of(world, "vgpu")]
    assert recorded == {row_name: [slot] for row_name, (_, slot) in table.items()}


def test_hamis_webhook_denies_what_its_code_denies_and_lets_the_rest_through():
    """`vgpu.hami.io` (pkg/scheduler/webhook.go, pkg/device/nvidia/device.go) on Pod creation,
    in kube-apiserver's words for a webhook's denial."""
    denied = 'admission webhook "vgpu.hami.io" denied the request: '
    percentage = "nvidia.com/gpumem-percentage"
    table = {
        "a privileged container asking a vGPU": (
            hami_pod("p1", container("main", HALF, privileged=True)),
            f"{denied}container main is privileged",
        ),
        "any privileged container, when one asks a vGPU": (
            hami_pod("p2", container("main", HALF), container("sidecar", privileged=True)),
            f"{denied}container sidecar is privileged",
        ),
        "init containers first": (
            hami_pod(
                "p3",
                container("main", HALF, privileged=True),
                initContainers=[container("setup", privileged=True)],
            ),
            f"{denied}container setup is privileged",
        ),
        "a memory percentage above 100": (
            hami_pod("p4", container("main", {**HALF, percentage: "150"})),
            f"{denied}invalid {percentage} value 150 in container main: "
            "must be an integer between 0 and 100",
        ),
        "a node already assigned": (
            hami_pod("p5", container("main", HALF), nodeName="node-h100"),
            f"{denied}pod has node assigned",
        ),
        "a privileged container with no vGPU asked": (
            hami_pod("p6", container("main", privileged=True)),
            None,
        ),
        "a Pod another scheduler places: left alone": (
            hami_pod("p7", container("main", HALF, privileged=True), schedulerName="other"),
            None,
        ),
        "a memory percentage of exactly 100": (
            hami_pod("p8", container("main", {**HALF, percentage: "100"})),
            None,
        ),
    }
    world = cluster("hami")
    verdicts = {}
    for row_name, (pod, _) in table.items():
        try:
            world.apply(pod)
            verdicts[row_name] = None
        except Refused as refused:
            verdicts[row_name] = str(refused)
    assert verdicts == {row_name: verdict for row_name, (_, verdict) in table.items()}
    # Only where the cluster runs HAMi: the GPU Operator's cluster has no such webhook.
    cluster("nvidia").apply(hami_pod("p1", container("main", HALF, privileged=True)))


def test_the_agent_joins_the_gpu_operators_ids_through_the_kubelets_socket(tmp_path):
    """The node agent end to end: NVML (recorded) and a kubelet pod-resources server on a real
    Unix socket answering with the GPU Operator plugin's IDs."""
    mig_uuid = "MIG-5f2a7c1e-0d3b-5e8a-9c4f-1a2b3c4d5e6f"
    whole = "GPU-9c1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e501"

    def pod(name: str, limits: dict) -> dict:
        return {
            "metadata": {"namespace": "team", "name": name},
            "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
            "status": {"phase": "Running"},
        }

    class Kube:
        pods = (
            pod("infer", {"nvidia.com/mig-3g.40gb": "1"}),
            pod("notebook", {"nvidia.com/gpu.shared": "2"}),
        )

        def node_facts(self, node: str) -> NodeFacts:
            return NodeFacts("node-h100-uid", 224)

        def pods_on(self, node: str) -> list[dict]:
            return list(self.pods)

        def apply_devices(self, devices: dict) -> None:
            pass

    with fake_kubelet(tmp_path) as (kubelet, socket):
        kubelet.assign("team", "infer", "main", "nvidia.com/mig-3g.40gb", mig_uuid)
        kubelet.assign(
            "team", "notebook", "main", "nvidia.com/gpu.shared", f"{whole}::0", f"{whole}::4"
        )
        agent = Agent(
            "node-h100",
            FakeNvml.from_file(ROOT / "tests" / "fixtures" / "nvml" / "h100-mig.yaml"),
            Kube(),
            partial(list_devices, socket),
            ROOT / "tests" / "fixtures" / "cpuinfo" / "node-t4-b.txt",
            os="linux",
            arch="amd64",
        )
        rows = agent.build()["spec"]["allocations"]
    assert [(r["pod"], r["device"], r["mode"], r.get("profile")) for r in rows] == [
        ("team/infer", "GPU-9c1e2f3a-4b5c-6d7e-8f90-a1b2c3d4e500", "Partitioned", "3g.40gb"),
        ("team/notebook", whole, "Shared", None),
        ("team/notebook", whole, "Shared", None),
    ]


def test_a_key_the_gpu_operators_plugin_does_not_advertise_stays_pending():
    world = cluster("nvidia")
    sliced = {"nvidia.com/gpu.sliced": "1", "nvidia.com/gpu.sliced.units": "320k"}
    world.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpustack-keys", "namespace": "default"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "ubuntu:24.04",
                        "resources": {"requests": sliced, "limits": sliced},
                    }
                ]
            },
        }
    )
    world.reconcile()
    status = world.get("Pod", "gpustack-keys", "default")["status"]
    scheduled = next(c for c in status["conditions"] if c["type"] == "PodScheduled")
    assert (status["phase"], scheduled["reason"]) == ("Pending", "Unschedulable")
    assert "3 Insufficient nvidia.com/gpu.sliced" in scheduled["message"]


# --- the GPU Operator's node labels (the simulator's stand-in, from the operator's source) ------

NFD_GPU = {"feature.node.kubernetes.io/pci-10de.present": "true"}
SANDBOX_ON = {"enabled": True, "defaultWorkload": "container"}


@pytest.mark.parametrize(
    ("labels", "sandbox", "present", "deployed"),
    [
        pytest.param({}, SANDBOX_ON, None, set(), id="no NVIDIA device: left alone"),
        pytest.param(NFD_GPU, {}, "true", {"device-plugin"}, id="sandbox workloads off"),
        pytest.param(
            {**NFD_GPU, "nvidia.com/gpu.workload.config": "vm-passthrough"},
            {},
            "true",
            {"device-plugin"},
            id="a VM config is ignored while sandbox workloads are off",
        ),
        pytest.param(
            {**NFD_GPU, "nvidia.com/gpu.workload.config": "vm-passthrough"},
            SANDBOX_ON,
            "true",
            {"sandbox-device-plugin", "vfio-manager"},
            id="vm-passthrough",
        ),
        pytest.param(
            {**NFD_GPU, "nvidia.com/gpu.workload.config": "vm-vgpu"},
            SANDBOX_ON,
            "true",
            {"sandbox-device-plugin", "vgpu-manager"},
            id="vm-vgpu",
        ),
        pytest.param(
            {**NFD_GPU, "nvidia.com/gpu.workload.config": "vm-bogus"},
            {"enabled": True, "defaultWorkload": "vm-passthrough"},
            "true",
            {"sandbox-device-plugin"},
            id="an unknown config takes the default workload",
        ),
        pytest.param(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.deploy.sandbox-device-plugin": "true",
            },
            SANDBOX_ON,
            "false",
            set(),
            id="a node that lost its GPUs loses every state label",
        ),
        pytest.param(
            {
                **NFD_GPU,
                "nvidia.com/gpu.workload.config": "vm-passthrough",
                "nvidia.com/gpu.deploy.operands": "false",
            },
            SANDBOX_ON,
            "true",
            set(),
            id="operands off",
        ),
    ],
)
def test_the_gpu_operator_labels_each_node_by_its_workload_config(
    labels, sandbox, present, deployed
):
    from gpustack_sim.gpuoperator import node_labels

    found = node_labels(labels, sandbox)
    assert found.get("nvidia.com/gpu.present") == present
    deploy = "nvidia.com/gpu.deploy."
    on = {k.removeprefix(deploy) for k, v in found.items() if k.startswith(deploy) and v == "true"}
    assert deployed <= on
    assert ("sandbox-device-plugin" in on) == ("sandbox-device-plugin" in deployed)
    assert ("device-plugin" in on) == ("device-plugin" in deployed)


def test_the_gpu_operator_honours_a_state_label_already_set():
    """A state label the admin set (to keep one operand off, say) keeps its value."""
    from gpustack_sim.gpuoperator import node_labels

    held = {**NFD_GPU, "nvidia.com/gpu.deploy.dcgm-exporter": "false"}
    assert node_labels(held, {})["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"


def test_hami_refuses_a_privileged_instance_that_asks_a_card_naming_why():
    """HAMi's webhook denies such a Pod, so the Instance is refused before one is composed:
    otherwise it would wait for ever, its Pod refused at each reconcile."""
    world = cluster("hami")
    world.patch("Catalog", "default", {"instancePrivilegedAllowed": True})
    instance = load_documents(EXAMPLE / "instance-whole.yaml")[0]
    instance["spec"]["privileged"] = True
    world.apply(instance)
    world.reconcile()
    assert world.get("Pod", "whole", "default") is None
    assert phase_message(world, "whole") == (
        "Refused: spec.privileged: a privileged container cannot ask for accelerators under HAMi"
        " (the Catalog's devicePlugin): its admission webhook denies the Pod; drop "
        "spec.privileged, or ask for no accelerator"
    )


# --- the GPU Operator's device-plugin config, as the plugin reads it ----------------------------

TEN_REPLICAS = "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n" + (
    "    resources:\n    - {name: nvidia.com/gpu, replicas: 10}\n"
)
ONE_ONLY = TEN_REPLICAS.replace(
    "renameByDefault: true", "renameByDefault: true\n    failRequestsGreaterThanOne: true"
)


def gpu_operator(
    labels: dict[str, str],
    policy_config: dict | None,
    data: dict[str, str],
    name: str = "time-slicing-config",
) -> tuple[NvidiaPlugin, dict]:
    """The plugin, the node it runs on, the operator's ConfigMap and (if any) ClusterPolicy."""
    api = Client(ApiServer(Store()))
    api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}})
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "gpu-operator"},
        "data": data,
    }
    api.apply(config_map)
    if policy_config is not None:
        api.apply(
            {
                "apiVersion": "nvidia.com/v1",
                "kind": "ClusterPolicy",
                "metadata": {"name": "cluster-policy"},
                "spec": {"devicePlugin": {"config": policy_config}},
            }
        )
    return NvidiaPlugin(api), {"metadata": {"name": "n", "labels": labels}}


@pytest.mark.parametrize(
    ("labels", "policy_config", "name", "expected"),
    [
        (
            {"nvidia.com/device-plugin.config": "sliced"},
            None,
            "time-slicing-config",
            ("nvidia.com/gpu.shared", 10, False),
        ),
        ({}, None, "time-slicing-config", ("nvidia.com/gpu", 1, False)),
        (
            {},
            {"name": "plugin-config", "default": "sliced"},
            "plugin-config",
            ("nvidia.com/gpu.shared", 10, False),
        ),
        (
            {"nvidia.com/device-plugin.config": "whole"},
            {"name": "plugin-config", "default": "sliced"},
            "plugin-config",
            ("nvidia.com/gpu", 1, False),
        ),
        ({}, {"default": "one-only"}, "time-slicing-config", ("nvidia.com/gpu.shared", 10, True)),
    ],
    ids=[
        "by the node's label",
        "no label, no default: whole cards",
        "the ClusterPolicy's default and ConfigMap",
        "the label before the default",
        "failRequestsGreaterThanOne",
    ],
)
def test_the_gpu_operators_plugin_reads_its_config_by_label_then_default(
    labels, policy_config, name, expected
):
    data = {"sliced": TEN_REPLICAS, "one-only": ONE_ONLY, "whole": "version: v1\n"}
    plugin, node = gpu_operator(labels, policy_config, data, name)
    assert tuple(plugin.time_slicing(node)) == expected


def test_with_fail_requests_greater_than_one_a_share_on_two_cards_fails_at_allocate():
    plugin, node = gpu_operator({}, {"default": "one-only"}, {"one-only": ONE_ONLY})
    cards = [Card(f"GPU-{i}", i, "nvidia", 23034, True, {}) for i in range(2)]
    call = Allocate(node, cards, [], {}, "main", {"nvidia.com/gpu.shared": 2})
    assert plugin.allocate(call) == "maximum request size for shared resources is 1; found 2"
    one = Allocate(node, cards, [], {}, "main", {"nvidia.com/gpu.shared": 1})
    assert [grant.device_ids for grant in plugin.allocate(one)] == [("GPU-0::0",)]


# --- the GPU Operator's MIG strategy: gpustack needs `mixed` ------------------------------------

WHOLE_H100 = {
    "apiVersion": "worker.gpustack.ai/v1alpha1",
    "kind": "Instance",
    "metadata": {"name": "whole-h100", "namespace": "default"},
    "spec": {
        "type": H100,
        "image": "ubuntu:24.04",
        "command": ["sleep", "86400"],
        "resources": {"accelerator": "1"},
        "volume": {"ephemeral": {"capacity": "1Gi"}},
    },
}


def mig_strategy_cluster(strategy: str | None) -> World:
    """The example's cluster where the GPU Operator runs its operands on node-h100 (NFD found
    its NVIDIA cards), its ClusterPolicy's MIG strategy `strategy` (None: unset)."""
    documents = [
        doc
        for name in ("devices.yaml", "nodes.yaml", "namespaces.yaml", "gpu-operator.yaml")
        for doc in load_documents(EXAMPLE / name)
    ]
    for doc in documents:
        if doc["kind"] == "ClusterPolicy":
            doc["spec"]["mig"] = {"strategy": strategy} if strategy else {}
        if doc["kind"] == "Node" and doc["metadata"]["name"] == "node-h100":
            doc["metadata"]["labels"]["feature.node.kubernetes.io/pci-10de.present"] = "true"
    world = World()
    world.apply(*documents, *load_documents(EXAMPLE / "catalog-nvidia.yaml"))
    world.reconcile()
    return world


def left_out_warnings(world: World, node: str) -> list[str]:
    results = world.results[("Devices", "", node)]
    return [r.message for r in results if r.reason == "NodeLeftOut"]


@pytest.mark.parametrize(
    ("strategy", "labels", "advertised"),
    [
        pytest.param(
            None,
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8"},
            {"nvidia.com/gpu": "8"},
            id="unset: the plugin's none serves the two cards in MIG mode as whole cards",
        ),
        pytest.param(
            "single",
            {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID",
                "nvidia.com/gpu.count": "0",
                "nvidia.com/mig.strategy": "single",
            },
            {},
            id="the Helm chart's single: MIG and whole cards mixed, the plugin does not start",
        ),
    ],
)
def test_a_mig_node_without_the_mixed_strategy_is_left_out_of_every_pool(
    strategy, labels, advertised
):
    """The plugin would hand a whole-card Pod one of the cards in MIG mode (none), or has no
    device to hand (single), and Kueue and the scheduler cannot tell: the node takes no pool."""
    world = mig_strategy_cluster(strategy)
    node = world.get("Node", "node-h100")
    gfd = {k: v for k, v in node["metadata"]["labels"].items() if k in labels or "mig." in k}
    assert gfd == labels
    on_node = {k: v for k, v in node["status"]["allocatable"].items() if k.startswith("nvidia")}
    assert {k: v for k, v in on_node.items() if v != "0"} == advertised

    why = world.get("Devices", "node-h100")["status"]["leftOut"]
    assert why.startswith(
        "2 card(s) in MIG mode, and the NVIDIA GPU Operator's device plugin runs MIG strategy "
        f"{strategy or 'none'} here ("
    )
    assert why.endswith(
        "a whole-card Instance could be given one; set mig.strategy: mixed in the GPU "
        "Operator's ClusterPolicy (docs/device-plugins.md)"
    )
    assert left_out_warnings(world, "node-h100") == [
        f"node node-h100 is left out of every pool: {why}"
    ]
    assert world.table("Devices").splitlines()[:2] == [
        "NAME        MANAGED   CPU                         ACCELERATORS",
        "node-h100   false     intel-xeon-platinum-8480c   nvidia-h100-80gb-hbm3 6/8",
    ]
    # The pool was derived before GPU feature discovery labelled the node (derived types stay);
    # it has no node now, and the other nodes serve as before.
    assert row(world, H100) == "0/0 0/0 0/0 0/0"
    assert row(world, L4) == "1/2 1/20 0/0 0/0"  # as in the example
    world.apply(WHOLE_H100)
    world.reconcile()
    assert world.get("Pod", "whole-h100", "default") is None
    assert phase_message(world, "whole-h100") == (
        "Refused: spec.resources.accelerator: exceeds the maximum accelerator request 0 of "
        f"instance type {H100}"
    )


MIXED = "mixed"


def test_once_the_strategy_is_mixed_the_node_serves_and_no_whole_card_is_in_mig_mode():
    world = mig_strategy_cluster("single")
    assert row(world, H100) == "0/0 0/0 0/0 0/0"
    world.api.merge_patch("ClusterPolicy", "cluster-policy", {"spec": {"mig": {"strategy": MIXED}}})
    world.reconcile()
    node = world.get("Node", "node-h100")
    assert node["metadata"]["labels"]["nvidia.com/mig.strategy"] == "mixed"
    assert "leftOut" not in world.get("Devices", "node-h100")["status"]
    assert left_out_warnings(world, "node-h100") == []
    assert row(world, H100) == "6/6 6/60 0/0 1/1"
    world.apply(WHOLE_H100)
    world.reconcile()
    assert phase_message(world, "whole-h100") == "Ready: "
    assert keys(world, "whole-h100") == {"nvidia.com/gpu": "1"}
    (allocated,) = device_ids(world, "node-h100")["nvidia.com/gpu"]
    assert allocated not in (H100_0, H100_0[:-1] + "1")  # never a card in MIG mode


def mig_card(index: int, *profiles: str) -> Card:
    """A card in MIG mode with one MIG device of each of `profiles` (placements made up)."""
    partitions = tuple(
        (profile, Placement(4 * i, 4), f"MIG-{index}-{i}") for i, profile in enumerate(profiles)
    )
    return Card(f"GPU-{index}", index, "nvidia", 81559, True, {"3g.40gb": ()}, partitions)


def whole_card(index: int) -> Card:
    return Card(f"GPU-{index}", index, "nvidia", 81559, True, {})


def plugin_under(strategy: str | None) -> NvidiaPlugin:
    api = Client(ApiServer(Store()))
    spec = {"mig": {"strategy": strategy}} if strategy else {}
    api.apply(
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "spec": spec,
        }
    )
    return NvidiaPlugin(api)


NODE = {"metadata": {"name": "n", "labels": {}}}


@pytest.mark.parametrize(
    ("strategy", "cards", "advertised"),
    [
        (None, [mig_card(0, "3g.40gb"), whole_card(1)], {"nvidia.com/gpu": 2}),
        (
            "mixed",
            [mig_card(0, "3g.40gb"), whole_card(1)],
            {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.40gb": 1},
        ),
        (
            "single",
            [mig_card(0, "3g.40gb", "3g.40gb"), mig_card(1, "3g.40gb")],
            {"nvidia.com/gpu": 3},
        ),
        ("single", [mig_card(0, "3g.40gb"), whole_card(1)], {}),
        ("single", [mig_card(0, "3g.40gb", "1g.20gb")], {}),
        ("single", [mig_card(0, "3g.40gb"), mig_card(1)], {}),
        ("single", [whole_card(0), whole_card(1)], {"nvidia.com/gpu": 2}),
    ],
    ids=[
        "unset is none: a card in MIG mode is a whole card",
        "mixed",
        "single: the MIG devices",
        "single refuses MIG and whole cards mixed",
        "single refuses two profiles",
        "single refuses a card in MIG mode without a MIG device",
        "single without a card in MIG mode",
    ],
)
def test_the_gpu_operators_plugin_advertises_by_its_mig_strategy(strategy, cards, advertised):
    assert plugin_under(strategy).advertise(NODE, cards) == advertised


def test_under_single_a_whole_card_request_gets_a_mig_device_and_under_none_a_card_in_mig_mode():
    single = Allocate(NODE, [mig_card(0, "3g.40gb")], [], {}, "main", {"nvidia.com/gpu": 1})
    (grant,) = plugin_under("single").allocate(single)
    assert (grant.device_ids, grant.mode, grant.profile) == (("MIG-0-0",), "partitioned", "3g.40gb")
    cards = [mig_card(0, "3g.40gb"), whole_card(1)]
    none = Allocate(NODE, cards, [], {}, "main", {"nvidia.com/gpu": 1})
    assert [g.device_ids for g in plugin_under(None).allocate(none)] == [("GPU-0",)]
    assert [g.device_ids for g in plugin_under("mixed").allocate(none)] == [("GPU-1",)]


@pytest.mark.parametrize(
    ("strategy", "cards", "labels"),
    [
        (
            None,
            [False, True],
            {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2"},
        ),
        (
            "mixed",
            [False, True],
            {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": "2",
                "nvidia.com/mig.strategy": "mixed",
            },
        ),
        (
            "single",
            [True, True],
            {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb",
                "nvidia.com/gpu.count": "2",
                "nvidia.com/mig.strategy": "single",
            },
        ),
        (
            "single",
            [False, True],
            {
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID",
                "nvidia.com/gpu.count": "0",
                "nvidia.com/mig.strategy": "single",
            },
        ),
    ],
    ids=["none: no strategy label", "mixed", "single", "single, invalid"],
)
def test_gpu_feature_discovery_labels_the_product_and_the_mig_strategy(strategy, cards, labels):
    from gpustack_sim.gfd import gfd_labels

    devices = {
        "spec": {
            "accelerators": [
                {
                    "manufacturer": "nvidia",
                    "devices": [
                        {
                            "uuid": f"GPU-{i}",
                            "index": i,
                            "product": "NVIDIA H100 80GB HBM3",
                            "mig": {
                                "enabled": in_mig,
                                "profiles": [{"name": "3g.40gb", "placements": []}],
                                "partitions": [
                                    {
                                        "profile": "3g.40gb",
                                        "placement": {"start": 0, "size": 4},
                                        "uuid": f"MIG-{i}",
                                    }
                                ]
                                if in_mig
                                else [],
                            },
                        }
                        for i, in_mig in enumerate(cards)
                    ],
                }
            ]
        }
    }
    assert gfd_labels(devices, strategy or "none") == labels


def test_a_pod_made_again_under_its_name_is_another_pod_to_the_kubelet():
    """The kubelet's device manager keeps its checkpoint by Pod UID: a Pod deleted and made
    again under the same name before the kubelet saw it go gets its devices afresh, and the old
    one's go back (keyed by name, the new Pod met the old one's card as taken, and failed)."""
    world = cluster("nvidia")
    whole = {"nvidia.com/gpu": "1"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "again", "namespace": "default"},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "node-l4-a"},
            "containers": [
                {"name": "main", "image": "ubuntu:24.04", "resources": {"limits": whole}}
            ],
        },
    }
    world.apply(pod)
    world.reconcile()
    first = world.get("Pod", "again", "default")["metadata"]["uid"]
    world.delete("Pod", "again", "default")
    world.apply(pod)
    world.reconcile()
    made_again = world.get("Pod", "again", "default")
    assert made_again["metadata"]["uid"] != first
    assert made_again["status"]["phase"] == "Running"
    assert device_ids(world, "node-l4-a") == {"nvidia.com/gpu": [L4_A]}


def named(file: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in load_documents(EXAMPLE / file) if d["metadata"]["name"] == name]
    return found


def devices_call(catalog: dict[str, Any] | None) -> fnv1.RunFunctionResponse:
    """The devices handler's answer for node-h100 once Crossplane has looked for the Catalog
    and found `catalog` (or none), and found the node's Node."""
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "node-h100"
    req.meta.capabilities.extend(MODERN)
    req.observed.composite.resource.update(named("devices.yaml", "node-h100"))
    req.required_resources["catalog"].SetInParent()
    if catalog is not None:
        req.required_resources["catalog"].items.add().resource.update(catalog)
    req.required_resources["node"].items.add().resource.update(named("nodes.yaml", "node-h100"))
    return frame.run(HANDLERS["devices"], req)


def test_a_node_reported_before_its_catalog_follows_the_catalogs_device_plugin_within_30_s():
    """An operator installs the agents, then creates the Catalog: meanwhile the node is composed
    with the default device plugin (which makes MIG instances on demand: four 3g.40gb fit the two
    MIG cards), and asked again in 30 s instead of the node's 5 minutes, so the GPU Operator's
    one 3g.40gb reaches the pool within a pool's TTL of the Catalog. make e2e's nvidia scenario
    read PT 1/14 for its step's whole 300 s when the Devices waited out the 5 minutes."""
    (catalog,) = load_documents(EXAMPLE / "catalog-nvidia.yaml")
    answers = {"before": devices_call(None), "after": devices_call(catalog)}
    seen = {
        when: (
            rsp.meta.ttl.seconds,
            [r.message for r in rsp.results],
            rsp.desired.composite.resource["status"]["summary"]["partitions"][
                "nvidia-h100-80gb-hbm3"
            ]["remaining"]["3g.40gb"],
        )
        for when, rsp in answers.items()
    }
    assert seen == {"before": (30, [], 4), "after": (300, [], 1)}
