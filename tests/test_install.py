"""The install meets the NVIDIA side of a cluster as NVIDIA ships it.

- The agent runs on every node once: its GPU DaemonSet selects the nodes NVIDIA's own
  device-plugin chart selects (k8s-device-plugin v0.20.0, deployments/helm/nvidia-device-plugin
  values.yaml `affinity`), its CPU DaemonSet every other node — judged as kube-scheduler's
  NodeAffinity filter (and the DaemonSet controller, which runs the same predicate) judges a
  node's labels.
- The runtime class is a setting (docs/operations.md, "The runtime class"): the default is the
  one the GPU Operator's ClusterPolicy names, and the documented edits give a valid DaemonSet.
- examples/device-plugins/gpu-operator.yaml's ClusterPolicy is valid against the GPU
  Operator's CRD (`gpu-operator/` in the schema directory), so `kubectl apply` takes it.
"""

from __future__ import annotations

import functools
import itertools
import re
import subprocess
from dataclasses import dataclass

import pytest
import yaml

from gpustack_sim import kube, validation
from gpustack_sim.schemas import KindSchema
from tests.support.schemas import ROOT, documents, require_schemas

AGENT = ROOT / "compositions" / "agent"
GPU_OPERATOR = ROOT / "examples" / "device-plugins" / "gpu-operator.yaml"
OPERATIONS = ROOT / "docs" / "operations.md"
PCI = "feature.node.kubernetes.io/pci-10de.present"  # NFD: an NVIDIA PCI device (vendor 10de)
TEGRA = "feature.node.kubernetes.io/cpu-model.vendor_id"  # NFD: the CPU vendor, NVIDIA on Tegra
PRESENT = "nvidia.com/gpu.present"  # GPU feature discovery, the GPU Operator, or an admin

# NVIDIA's chart: any one of these terms (each `In`) puts the device plugin on a node.
NVIDIA_CHART_TERMS = [
    {"matchExpressions": [{"key": PCI, "operator": "In", "values": ["true"]}]},
    {"matchExpressions": [{"key": TEGRA, "operator": "In", "values": ["NVIDIA"]}]},
    {"matchExpressions": [{"key": PRESENT, "operator": "In", "values": ["true"]}]},
]


def one(path) -> dict:
    [doc] = documents(path)
    return doc


def pod_spec(name: str) -> dict:
    return one(AGENT / f"daemonset-{name}.yaml")["spec"]["template"]["spec"]


def agents_on(labels: dict[str, str]) -> list[str]:
    """The agent DaemonSets whose Pods this node takes: nodeSelector and required node affinity
    as kube-scheduler's NodeAffinity filter reads them; both tolerate every taint."""
    found = []
    for name in ("cpu", "gpu"):
        spec = pod_spec(name)
        assert spec["tolerations"] == [{"operator": "Exists"}]  # tainted GPU nodes too
        if kube.selects(spec, {"kubernetes.io/os": "linux", **labels}):
            found.append(name)
    return found


# --- which agent a node gets ------------------------------------------------------------------


@dataclass
class Node:
    name: str
    labels: dict[str, str]
    agent: str


NODES = [
    Node("labelled only nvidia.com/gpu.present=true (GPU feature discovery)", {PRESENT: "true"}, "gpu"),
    Node("labelled only by NFD's NVIDIA PCI device", {PCI: "true"}, "gpu"),
    Node("a Tegra node: NFD reads its CPU vendor as NVIDIA", {TEGRA: "NVIDIA"}, "gpu"),
    Node("an NVIDIA PCI device, though gpu.present says false", {PCI: "true", PRESENT: "false"}, "gpu"),
    Node("a CPU node NFD has labelled", {TEGRA: "AMD"}, "cpu"),
    Node("gpu.present=false and no NVIDIA device", {PRESENT: "false", TEGRA: "Intel"}, "cpu"),
    Node("a node no one has labelled yet", {}, "cpu"),
]  # fmt: skip


@pytest.mark.parametrize("node", NODES, ids=lambda n: n.name)
def test_a_node_gets_the_agent_its_labels_call_for(node):
    assert agents_on(node.labels) == [node.agent]


def label_sets():
    """Every combination of the three keys: absent, or each value they take."""
    choices = {PCI: [None, "true", "false"], TEGRA: [None, "NVIDIA", "AMD", "Intel"],
               PRESENT: [None, "true", "false"]}  # fmt: skip
    for values in itertools.product(*choices.values()):
        yield {k: v for k, v in zip(choices, values, strict=True) if v is not None}


def test_every_node_gets_exactly_one_agent_and_the_gpu_one_where_nvidias_plugin_runs():
    for labels in label_sets():
        nvidia_plugin_runs = kube.selects(
            {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": NVIDIA_CHART_TERMS}}}}, labels)  # fmt: skip
        assert agents_on(labels) == ["gpu" if nvidia_plugin_runs else "cpu"], labels


def test_the_gpu_agent_selects_by_the_terms_of_nvidias_chart():
    spec = pod_spec("gpu")
    assert "nodeSelector" not in spec  # a selector would AND with the terms
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == NVIDIA_CHART_TERMS


# --- the runtime class ------------------------------------------------------------------------


def test_the_gpu_agents_runtime_class_is_the_one_the_cluster_policy_names():
    """The GPU Operator's toolkit creates the RuntimeClass its ClusterPolicy names
    (`operator.runtimeClass`, default `nvidia`); a GPU agent naming another never starts."""
    policy = next(d for d in documents(GPU_OPERATOR) if d["kind"] == "ClusterPolicy")
    named = policy["spec"].get("operator", {}).get("runtimeClass", "nvidia")
    assert pod_spec("gpu")["runtimeClassName"] == named
    assert "runtimeClassName" not in pod_spec("cpu")  # a CPU node may have no NVIDIA runtime


def documented_edits() -> list[str]:
    """The shell lines docs/operations.md gives under "The runtime class"."""
    section = OPERATIONS.read_text().split("## The runtime class", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [line for block in blocks for line in block.splitlines() if line.startswith("sed ")]


@pytest.mark.parametrize("runtime_class", ["nvidia-cdi", None], ids=["another class", "no class"])
def test_the_documented_edits_set_or_drop_the_runtime_class_and_nothing_else(runtime_class):
    lines = documented_edits()
    assert len(lines) == 2, lines
    line = lines[0 if runtime_class else 1].replace("<name>", runtime_class or "")
    command = line.split(" | kubectl apply")[0]  # what kubectl would be given
    assert command.endswith("compositions/agent/daemonset-gpu.yaml"), line
    edited = subprocess.run(
        ["sh", "-c", command], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    [daemonset] = [doc for doc in yaml.safe_load_all(edited) if doc]
    want = one(AGENT / "daemonset-gpu.yaml")
    spec = want["spec"]["template"]["spec"]
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    else:
        del spec["runtimeClassName"]
    assert daemonset == want


# --- the GPU Operator's ClusterPolicy ---------------------------------------------------------


@functools.cache
def cluster_policy_schema() -> KindSchema:
    path = require_schemas() / "gpu-operator" / "nvidia.com_clusterpolicies.yaml"
    if not path.exists():
        pytest.skip(
            f"{path} not found: the schema directory predates the GPU Operator's CRD; run "
            "`make schemas` or point GPUSTACK_SCHEMAS at a newer one"
        )
    [crd] = documents(path)
    [version] = [v for v in crd["spec"]["versions"] if v.get("storage")]
    assert version["name"] == "v1"
    names = crd["spec"]["names"]
    root = version["schema"]["openAPIV3Schema"]
    return KindSchema(names["kind"], crd["spec"]["group"], names["plural"], root, True, True)


def test_the_example_cluster_policy_is_valid_against_the_gpu_operators_crd():
    [policy] = [d for d in documents(GPU_OPERATOR) if d["kind"] == "ClusterPolicy"]
    assert policy["apiVersion"] == "nvidia.com/v1"
    checked = validation.check(cluster_policy_schema(), policy, strict=True)
    assert [str(e) for e in checked.errors] == []


def test_the_cluster_policy_keeps_what_gpustack_needs_of_the_operator():
    """docs/device-plugins.md: MIG devices by profile (`mixed`), and the plugin's configs."""
    [policy] = [d for d in documents(GPU_OPERATOR) if d["kind"] == "ClusterPolicy"]
    spec = validation.check(cluster_policy_schema(), policy).obj["spec"]
    assert spec["mig"] == {"strategy": "mixed"}
    assert spec["devicePlugin"]["config"]["name"] == "time-slicing-config"
    assert spec["devicePlugin"]["enabled"] and spec["gfd"]["enabled"]
    configmaps = [
        d["metadata"]["name"] for d in documents(GPU_OPERATOR) if d["kind"] == "ConfigMap"
    ]
    assert configmaps == ["time-slicing-config"]


def test_a_cluster_policy_without_the_required_operands_is_refused():
    """What kube-apiserver says of the example as it was: only mig and devicePlugin set."""
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"mig": {"strategy": "mixed"}, "devicePlugin": {"config": {"name": "x"}}},
    }
    errors = [str(e) for e in validation.check(cluster_policy_schema(), policy).errors]
    required = ("daemonsets", "dcgm", "dcgmExporter", "driver", "gfd", "nodeStatusExporter",
                "operator", "toolkit")  # fmt: skip
    assert errors == [f"spec.{field}: Required value" for field in required]
