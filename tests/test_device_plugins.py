"""The device plugins clusters already run: the example of docs/device-plugins.md, played in the
simulated cluster with the NVIDIA GPU Operator's plugin and with HAMi.

An 8×H100 node (two cards in MIG mode, one 3g.40gb made by the MIG manager) and two 1×L4
nodes, one of them time-sliced. The stand-ins are the plugins' documented behaviour
(functions/simulate/nvidia.py, hami.py); Kueue charges through the shipped configuration of
each dialect; the node agent's real allocation join reads the plugins' device IDs.
"""

from __future__ import annotations

from functools import partial

import pytest
from click.testing import CliRunner

from functions.agent.agent import Agent
from functions.agent.nvml import FakeNvml
from functions.agent.podresources import list_devices
from functions.cli import main
from functions.simulate import World, load_documents, world_from
from tests.support.fake_kubelet import fake_kubelet
from tests.support.schemas import ROOT

EXAMPLE = ROOT / "examples" / "device-plugins"
L4 = "gpustack--nvidia-l4-linux-amd64"
H100 = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
L4_A, L4_B = "GPU-2b9d7e41-6c3a-4d8f-b105-8e7a9c0d1f2a", "GPU-5e0c3a92-1f4b-4a6d-8c27-3d9b0e6f4a7c"
H100_0 = "GPU-7c1e0d52-0a4b-4f3e-9d21-5b8e6f40a100"
MIG_3G = "MIG-4f6a2c1e-8b3d-5e7f-9a0b-1c2d3e4f5a60"


def cluster(device_plugin: str) -> World:
    files = ["devices.yaml", "nodes.yaml", "namespaces.yaml", "gpu-operator.yaml"]
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
    assert nvidia.get("Devices", "node-h100")["spec"]["allocations"] == [
        {
            "pod": "default/partition",
            "container": "main",
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
    for name, what in (("shared", "shares of a card"), ("partition", "a hardware partition")):
        message = phase_message(hami, name)
        assert message.startswith("Refused: ")
        assert f"devicePlugin: hami (HAMi) cannot give {what}" in message
        assert "must be gpustack or nvidia (the Catalog's spec.devicePlugin)" in message


@pytest.mark.parametrize("device_plugin", ["nvidia", "hami"])
def test_the_example_prints_what_docs_device_plugins_shows(device_plugin):
    """After an intended change, refresh with `gpustack-fn simulate
    examples/device-plugins/scenario-<plugin>.yaml > examples/device-plugins/expected-<plugin>.txt`."""
    scenario = EXAMPLE / f"scenario-{device_plugin}.yaml"
    result = CliRunner().invoke(main, ["simulate", str(scenario)])
    assert result.exit_code == 0, result.output
    assert result.output == (EXAMPLE / f"expected-{device_plugin}.txt").read_text()


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

        def node_cpu_capacity(self, node: str) -> int:
            return 224

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
    from functions.simulate.gpuoperator import node_labels

    found = node_labels(labels, sandbox)
    assert found.get("nvidia.com/gpu.present") == present
    deploy = "nvidia.com/gpu.deploy."
    on = {k.removeprefix(deploy) for k, v in found.items() if k.startswith(deploy) and v == "true"}
    assert deployed <= on
    assert ("sandbox-device-plugin" in on) == ("sandbox-device-plugin" in deployed)
    assert ("device-plugin" in on) == ("device-plugin" in deployed)


def test_the_gpu_operator_honours_a_state_label_already_set():
    """A state label the admin set (to keep one operand off, say) keeps its value."""
    from functions.simulate.gpuoperator import node_labels

    held = {**NFD_GPU, "nvidia.com/gpu.deploy.dcgm-exporter": "false"}
    assert node_labels(held, {})["nvidia.com/gpu.deploy.dcgm-exporter"] == "false"
