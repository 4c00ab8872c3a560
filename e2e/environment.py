"""The whole environment `make e2e` plays scenarios in: the control plane, Kueue, NFD and
Crossplane from upstream's manifests, this package installed as the README says, and the nodes.

Order, as an operator installs a cluster: the control plane (with HAMi's scheduler extender
where the scenario's device plugin is HAMi); Node Feature Discovery; the GPU Operator's and
KubeVirt's CRDs; Kueue with this package's configuration fragment for the scenario's device
plugin; Crossplane; the function package; the RBAC, XRDs and Compositions (README, "Install in a
cluster"); the agent's ServiceAccount and role. Then each scenario's nodes register and their
agents start, and the GPU Operator's labelling and GPU feature discovery run beside them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import yaml

from e2e import install, kubevirt, provisioner
from e2e.api import Api
from e2e.binaries import binary, module_dir, versions
from e2e.cluster import SCENARIO, ControlPlane, Scale, free_port
from e2e.crossplane import Crossplane
from e2e.extender import HamiExtender
from e2e.kube import Kubectl, documents, eventually
from e2e.node import SimulatedNode
from gpustack_sim import kube
from gpustack_sim.deviceplugin import cards_of
from gpustack_sim.dra import NvidiaDraDriver
from gpustack_sim.gfd import GpuFeatureDiscovery
from gpustack_sim.gpuoperator import GpuOperator
from gpustack_sim.plugins import device_plugins
from gpustack_sim.schemas import SCHEMAS_MISSING, schema_dir

REPOSITORY = Path(__file__).resolve().parent.parent
COMPOSITIONS = REPOSITORY / "compositions"
NODE_PERIOD = 0.5  # seconds between two passes of the simulated nodes
PRIVATE_MARK = "GPUSTACK_E2E_PRIVATE_MOUNTS"
GPU_OPERATOR_CRD = "nvidia.com_clusterpolicies.yaml"
NOT_RUNNING = {"key": ".status.phase", "operator": "NotIn", "values": ["Running"]}


def private_mounts(argv: list[str]) -> None:
    """Re-run this command in a private mount namespace whose /etc/hosts also maps the webhook
    Services' names to 127.0.0.1 (install.WEBHOOK_HOSTS); the machine's own file is untouched."""
    if os.environ.get(PRIVATE_MARK) == "1":
        return
    hosts = Path(tempfile.mkdtemp(prefix="gpustack-e2e-hosts-")) / "hosts"
    hosts.write_text(
        Path("/etc/hosts").read_text() + "\n" + "\n".join(install.hosts_entries()) + "\n"
    )
    script = f'mount --bind "{hosts}" /etc/hosts && exec "$@"'
    unshare = shutil.which("unshare")
    if unshare is None:
        sys.exit("make e2e: unshare (util-linux) is needed for a private /etc/hosts")
    prefix = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        prefix.insert(1, "--map-root-user")
    env = {**os.environ, PRIVATE_MARK: "1"}
    code = subprocess.call([*prefix, "sh", "-c", script, "sh", *argv], env=env)
    sys.exit(code)


def kwok_stages() -> list[dict[str, Any]]:
    """KWOK's own stages: nodes initialized and kept Ready with their leases, Pods run to Ready,
    completed and deleted. One change: KWOK's `node-initialize` takes every node not Ready,
    so it would at once undo a kubelet's report of NotReady (the node-loss scenario's status
    patch); here it takes only nodes it has not initialized (no `Running` phase yet). A
    NotReady node then stays NotReady, its lease still renewed, as a node whose kubelet runs
    but whose container runtime is down."""
    stage = module_dir("sigs.k8s.io/kwok", versions()["KWOK"]) / "kustomize" / "stage"
    paths = [
        stage / "node" / "fast" / "node-initialize.yaml",
        *sorted(
            path
            for path in (stage / "node" / "heartbeat-with-lease").glob("*.yaml")
            if path.name != "kustomization.yaml"
        ),
        stage / "pod" / "fast" / "pod-ready.yaml",
        stage / "pod" / "fast" / "pod-complete.yaml",
        stage / "pod" / "fast" / "pod-delete.yaml",
    ]
    stages = [d for path in paths for d in documents(path.read_text())]
    for found in stages:
        if found["metadata"]["name"] == "node-initialize":
            found["spec"]["selector"]["matchExpressions"].append(NOT_RUNNING)
    return stages


class Environment:
    def __init__(
        self,
        root: Path,
        device_plugin: str = "gpustack",
        crossplane: str = "CROSSPLANE",
        legacy_set: bool | None = None,
        scale: Scale = SCENARIO,
    ):
        """`legacy_set`: the legacy set (v1 XRDs with claims) rather than the 2.x one; by
        default, on Crossplane 1.x only. `scale`: a scenario's few nodes, or a fleet's."""
        self.root = root
        self.device_plugin = device_plugin
        self.crossplane_pin = crossplane
        self.legacy_set = legacy_set
        # HAMi schedules through kube-scheduler's extender: served before the scheduler starts
        self.extender = HamiExtender(free_port()) if device_plugin == "hami" else None
        self.plane = ControlPlane(root, kwok_stages(), self.scheduler_configuration(), scale)
        self.kubectl = Kubectl(self.plane.kubeconfig)
        self.nodes: dict[str, SimulatedNode] = {}
        self.stop_nodes = threading.Event()
        self.node_errors: list[str] = []

    def scheduler_configuration(self) -> dict[str, Any]:
        """What kube-scheduler's configuration adds for the device plugin: HAMi's extender, or
        the profiles the package ships for it (compositions/kube-scheduler/<devicePlugin>.yaml:
        under dra, NodeResourcesFit ignores the credits a Pod carries)."""
        if self.extender is not None:
            return {"extenders": [self.extender.config()]}
        shipped = COMPOSITIONS / "kube-scheduler" / f"{self.device_plugin}.yaml"
        if not shipped.exists():
            return {}
        return {"profiles": yaml.safe_load(shipped.read_text())["profiles"]}

    @property
    def legacy(self) -> bool:
        if self.legacy_set is not None:
            return self.legacy_set
        return versions()[self.crossplane_pin].startswith("v1.")

    # -- bring-up ----------------------------------------------------------------------------
    def start(self) -> None:
        if self.extender is not None:
            self.extender.start()
        self.plane.start()
        self.install_nfd()
        self.install_gpu_operator_crd()
        self.install_kubevirt_crds()
        install.install_kueue(
            self.plane, self.kubectl, COMPOSITIONS / "kueue" / f"{self.device_plugin}.yaml"
        )
        self.crossplane = Crossplane(self.plane, self.kubectl, self.crossplane_pin)
        self.crossplane.install()
        self.crossplane.install_function()
        if self.crossplane.major < 2:  # the legacy set composes through provider-kubernetes
            install.install_provider_kubernetes(self.plane, self.kubectl)
        self.install_package_api()
        self.api = Api(self.plane.kubeconfig)
        if self.extender is not None:
            self.extender.api = self.api
        self.plugins = device_plugins(self.api)  # it calls only what Api has of the client
        # what runs on the nodes beside the device plugin: the GPU Operator's node labelling
        # and GPU feature discovery, and NVIDIA's DRA driver publishing ResourceSlices
        self.operands = [
            GpuOperator(self.api),
            GpuFeatureDiscovery(self.api),
            NvidiaDraDriver(self.api),
        ]

    def install_nfd(self) -> None:
        """NFD's release manifests (`deployment/overlays/default`) but its workloads: the
        function's NodeFeatures stand for what nfd-worker would publish."""
        source = module_dir("sigs.k8s.io/node-feature-discovery", versions()["NFD"])
        objects = documents(Kubectl.kustomize(source / "deployment" / "overlays" / "default"))
        self.kubectl.apply([o for o in objects if o["kind"] not in ("Deployment", "DaemonSet")])

    def install_gpu_operator_crd(self) -> None:
        """The GPU Operator's ClusterPolicy CRD, so a scenario can apply its ClusterPolicy. The
        operator cannot run without GPUs: its node labelling and GPU feature discovery are
        played with the nodes (simulator/gpustack_sim/gpuoperator.py, gfd.py)."""
        found = schema_dir()
        if found is None:
            raise RuntimeError(f"make e2e: {SCHEMAS_MISSING}")
        self.kubectl("apply", "-f", str(found / "gpu-operator" / GPU_OPERATOR_CRD))
        self.kubectl.wait("condition=Established", ["crd", "clusterpolicies.nvidia.com"])

    def install_kubevirt_crds(self) -> None:
        """KubeVirt's KubeVirt and VirtualMachineInstance CRDs, from its own API spec
        (e2e/kubevirt.py): a scenario's KubeVirt CR and our VMIs are stored and validated;
        nothing runs a VMI."""
        found = schema_dir()
        if found is None:
            raise RuntimeError(f"make e2e: {SCHEMAS_MISSING}")
        definitions = kubevirt.crds(found)
        self.kubectl.apply(definitions)
        names = [d["metadata"]["name"] for d in definitions]
        self.kubectl.wait("condition=Established", ["crd", *names])

    def start_nfd_master(self, node: str) -> None:
        """nfd-master as its Pod on `node`: it annotates the Node it runs on, and refuses to
        start until that Node exists."""
        if "nfd-master" in self.plane.processes:
            return
        kubeconfig = self.kubectl.token_kubeconfig(
            self.root / "nfd-master.kubeconfig",
            self.plane.server,
            self.plane.ca.cert,
            "nfd-master",
            "node-feature-discovery",
        )
        port = free_port()
        self.plane.run(
            "nfd-master",
            [
                str(binary("nfd-master")),
                f"-kubeconfig={kubeconfig}",
                f"-port={port}",
                "-config=/dev/null",
            ],
            env={
                "NODE_NAME": node,
                "POD_NAME": "nfd-master",
                "POD_NAMESPACE": "node-feature-discovery",
                "KUBERNETES_NAMESPACE": "node-feature-discovery",
            },
        )
        self.plane.wait_healthy_http("nfd-master", port, "/healthz")

    def install_package_api(self) -> None:
        """README, "Install in a cluster", step 3 (on 1.x, the legacy set, its Compositions
        composing through provider-kubernetes)."""
        xrds = COMPOSITIONS / ("legacy/xrds" if self.legacy else "xrds")
        pipelines = COMPOSITIONS / "pipelines"
        if self.legacy:
            pipelines = (
                COMPOSITIONS
                / "legacy"
                / ("crossplane-1" if self.crossplane.major < 2 else "pipelines")
            )
        self.kubectl("apply", "-f", str(COMPOSITIONS / "rbac"), "-f", str(xrds))
        self.kubectl.wait("condition=Established", ["xrd", "--all"])
        self.kubectl("apply", "-f", str(pipelines))
        agent = COMPOSITIONS / "agent"
        for name in ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml"):
            self.kubectl("apply", "-f", str(agent / name))
        agent_objects = documents((agent / "serviceaccount.yaml").read_text())
        account = agent_objects[0]["metadata"]
        self.agent_kubeconfig = self.kubectl.token_kubeconfig(
            self.root / "agent.kubeconfig",
            self.plane.server,
            self.plane.ca.cert,
            account["name"],
            account["namespace"],
        )

    # -- nodes -------------------------------------------------------------------------------
    def register_nodes(self, nodes: list[dict[str, Any]], devices: list[dict[str, Any]]) -> None:
        """Each Node as its kubelet registers it, and a simulated node whose agent writes the
        Devices."""
        by_name = {d["metadata"]["name"]: d for d in devices}
        for node in nodes:
            self.register_node(node, by_name.get(node["metadata"]["name"]))
        if nodes:
            self.start_nfd_master(nodes[0]["metadata"]["name"])
        for name, found in by_name.items():
            self.nodes[name] = SimulatedNode(
                name, found, self.root, self.api, self.agent_kubeconfig
            )
        threading.Thread(target=self.run_nodes, name="nodes", daemon=True).start()

    def register_node(self, node: dict[str, Any], devices: dict[str, Any] | None) -> None:
        """A Node as its kubelet registers it, with what the device plugin advertises for the
        cards its Devices describes; KWOK then keeps it Ready."""
        plugin = self.plugins[self.device_plugin]
        status = dict(node.get("status") or {})
        status.pop("conditions", None)  # KWOK's node stage reports them
        advertised = {k: str(v) for k, v in plugin.advertise(node, cards_of(devices)).items()}
        for key in ("capacity", "allocatable"):
            status[key] = {**(status.get(key) or {}), **advertised}
        # Created with its status, as a kubelet registers: KWOK gives a Node it sees without
        # capacity its own (1k CPUs), and a status written after the create came too late.
        self.api.create({**node, "status": status})

    def run_nodes(self) -> None:
        while not self.stop_nodes.wait(NODE_PERIOD):
            try:
                for operand in self.operands:  # node labels, before the plugin reads them
                    operand.run()
                plugin = self.plugins[kube.device_plugin(self.api)]
                pods = self.api.list("Pod")
                for node in list(self.nodes.values()):
                    if self.api.get("Node", node.name) is None:
                        continue  # its agent ran on the node
                    node.sync(plugin, pods)
                    node.agent.poll()
                provisioner.provision(self.api)
            except Exception as error:  # a pass that failed is retried; the last reason is kept
                self.node_errors = [f"{type(error).__name__}: {error}"]

    def stop(self) -> None:
        self.stop_nodes.set()
        for node in self.nodes.values():
            node.stop()
        self.plane.stop()
        if self.extender is not None:
            self.extender.stop()


def settle_devices(env: Environment, names: list[str]) -> None:
    for name in names:
        eventually(f"the agent's Devices {name}", lambda n=name: env.api.get("Devices", n))
