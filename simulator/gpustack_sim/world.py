"""The simulated cluster: an API server, Crossplane running the real function, and stand-ins for
the controllers around it, settling round by round.

Each round, in the order a real cluster would get there: Crossplane reconciles every composite,
and the garbage collector deletes what lost its owners;
NFD labels the nodes, and the GPU Operator (where a ClusterPolicy installs it) by NFD's labels,
then its GPU feature discovery by the nodes' cards; NVIDIA's DRA driver (where the cluster runs
`devicePlugin: dra`) publishes each GPU node's ResourceSlice;
storage binds claims; KubeVirt starts launchers; Kueue gates, admits and accounts;
kube-controller-manager's resourceclaim controller makes the Pods' ResourceClaims from their
templates and releases those of Pods that are done; the scheduler allocates claims and binds;
the kubelet starts Pods with their devices; the node agents report allocations. `reconcile()` runs rounds until nothing changes. Nothing here decides a
figure: the handlers and the core do, and every stand-in judges them by the real component's
documented rules and the artefacts the package ships (DESIGN §7).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from functions import documents, pipeline
from functions.server import run_function
from gpustack_sim import kubectl
from gpustack_sim.agent import Agents
from gpustack_sim.apiserver import WARN, ApiServer
from gpustack_sim.client import Client
from gpustack_sim.crossplane import Crossplane
from gpustack_sim.dra import NvidiaDraDriver, ResourceClaimController
from gpustack_sim.garbagecollector import GarbageCollector
from gpustack_sim.gfd import GpuFeatureDiscovery
from gpustack_sim.gpuoperator import GpuOperator
from gpustack_sim.kubelet import Kubelet
from gpustack_sim.kubevirt import KubeVirt
from gpustack_sim.kueue import Kueue
from gpustack_sim.nfd import Nfd
from gpustack_sim.nodelifecycle import NodeLifecycle
from gpustack_sim.plugins import device_plugins
from gpustack_sim.scheduler import Scheduler
from gpustack_sim.storage import Provisioner
from gpustack_sim.store import Key, Store

ROOT = Path(__file__).resolve().parents[2]
MAX_ROUNDS = 16


def load_documents(path: Path) -> list[dict[str, Any]]:
    return [document.obj for document in documents.objects(path)]


class World:
    def __init__(
        self,
        run: pipeline.Runner = run_function,
        api_dir: Path = ROOT / "compositions",
        caller: pipeline.Caller = pipeline.CROSSPLANE_2,
        agents: bool = True,
    ):
        """`agents=False` leaves `Devices.spec.allocations` to the caller: a test that states
        what the nodes report, as the agent would, without Pods behind it."""
        self.store = Store()
        self.api = ApiServer(self.store)
        client = Client(self.api)
        self.crossplane = Crossplane(client, run, api_dir, caller)
        self.kueue = Kueue(client, api_dir / "kueue")
        self.kubelet = Kubelet(client, device_plugins(client))
        lifecycle = NodeLifecycle(client)
        self.api.clock = lambda: lifecycle.now(0)  # the cluster's one clock
        self.crossplane.clock = lambda: lifecycle.clock
        self.controllers: list[Any] = [
            self.crossplane,
            GarbageCollector(client),
            lifecycle,
            Nfd(client),
            GpuOperator(client),  # labels by NFD's labels
            GpuFeatureDiscovery(client),  # where the operator deployed it
            NvidiaDraDriver(client),  # its kubelet plugin, on each node with NVIDIA cards
            Provisioner(client),
            KubeVirt(client),
            self.kueue,
            ResourceClaimController(client),
            Scheduler(client, api_dir / "kube-scheduler"),
            self.kubelet,
            *([Agents(client, self.kubelet)] if agents else []),
        ]
        # The package as the README installs it: the agent's namespace, the Catalog's default
        # systemNamespace, where the devices handler composes each node's summary (the API
        # server refuses an object in a namespace that does not exist).
        agent_namespace = api_dir / "agent" / "namespace.yaml"
        if agent_namespace.exists():
            self.apply(*load_documents(agent_namespace))

    # --- what a user does ---------------------------------------------------------------------

    def apply(
        self,
        *objects: Mapping[str, Any],
        field_validation: str = WARN,
        duplicates: Sequence[str] = (),
    ) -> None:
        """`kubectl apply`; an object given with a status is a cluster already in that state.
        `field_validation` and `duplicates` (the fields the file gives twice): ApiServer's."""
        for obj in objects:
            options = {"field_validation": field_validation}
            stored = self.api.apply(obj, **options, duplicates=duplicates)
            if "status" in obj:
                self.api.update_status({**stored, "status": obj["status"]}, **options)

    def patch(self, kind: str, name: str, spec: Mapping[str, Any], namespace: str = "") -> None:
        """A merge patch of `spec` (None deletes a field)."""
        self.api.merge_patch(kind, name, {"spec": dict(spec)}, namespace)

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        self.crossplane.delete(Key(kind, namespace, name))

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The stored object itself: editing it edits the cluster's storage (as a test may)."""
        found = self.store.get(kind, name, namespace)
        if found is not None:
            self.crossplane.structs.taint(found)
        return found

    def list(self, kind: str) -> list[dict[str, Any]]:
        found = self.store.list(kind)
        for obj in found:
            self.crossplane.structs.taint(obj)
        return found

    @property
    def results(self) -> dict[Key, list[Any]]:
        return self.crossplane.results

    @property
    def events(self) -> list[str]:
        return self.kueue.events

    # --- what the controllers do --------------------------------------------------------------

    def reconcile(self) -> int:
        """Run rounds until nothing changes; returns how many it took."""
        for rounds in range(1, MAX_ROUNDS + 1):
            before = self.store.version
            for controller in self.controllers:
                controller.run()
            if self.store.version == before:
                return rounds
        raise RuntimeError(f"the simulated cluster did not settle in {MAX_ROUNDS} rounds")

    # --- what kubectl prints ------------------------------------------------------------------

    def table(self, kind: str, wide: bool = False) -> str:
        return kubectl.table(self.store.list(kind), self.crossplane.xrds.get(kind), wide)


def world_from(
    paths: Iterable[Path], run: Callable[..., Any] | None = None, **options: Any
) -> World:
    world = World(run or run_function, **options)
    for path in paths:
        world.apply(*load_documents(path))
    return world
