"""What a GPU node would be, for the nodes KWOK runs: its cards, its device plugin, its
kubelet's device checkpoint and pod-resources socket, and the real node agent.

KWOK registers nothing and allocates nothing: it only moves bound Pods through their phases.
So each node here has
- NVML: a recording of the cards the scenario's Devices describe (`recording`), replayed by the
  agent's own `FakeNvml`, in which MIG instances appear and vanish as the plugin makes them;
- a device plugin: the simulator's stand-in for the one the Catalog names (gpustack's, the GPU
  Operator's or HAMi's), which decides the capacity the Node advertises and which devices a
  started container gets;
- the kubelet's device manager: the grants by Pod UID, served over a Unix socket as the
  kubelet's pod-resources API (`v1.PodResourcesLister/List`);
- the node agent (`functions.agent.agent.Agent`), unchanged: it reads NVML, the socket and the
  API server, and applies the node's Devices as it does on a node.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Mapping
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from e2e.api import Api
from functions.agent import podresources
from functions.agent.agent import Agent, KubernetesApi
from functions.agent.nvml import FakeNvml
from gpustack_sim import kube
from gpustack_sim.deviceplugin import (
    Allocate,
    Card,
    DevicePlugin,
    Grant,
    cards_of,
)

CPU_VENDOR_IDS = {"AMD": "AuthenticAMD", "Intel": "GenuineIntel", "Hygon": "HygonGenuine"}


def recording(devices: Mapping[str, Any]) -> dict[str, Any]:
    """What NVML reads on the node a Devices object describes (the inverse of the agent's
    report: memory without ECC, so the agent reports the same MiB)."""
    vendors = [
        v for v in devices["spec"].get("accelerators") or [] if v["manufacturer"] == "nvidia"
    ]
    if not vendors:
        return {"available": False, "reason": "NVML Shared Library Not Found"}
    vendor = vendors[0]
    major, minor = (vendor.get("runtimeVersion") or "0.0").split(".")
    cards = []
    for card in sorted(vendor["devices"], key=lambda c: c["index"]):
        mig = card.get("mig") or {}
        capability = (card.get("computeCapability") or "0.0").split(".")
        cards.append(
            {
                "uuid": card["uuid"],
                "minor": card.get("minor", card["index"]),
                "name": card["product"],
                "memoryTotalBytes": card["memoryMiB"] * 2**20,
                "memoryBusWidth": 0,
                "eccEnabled": False,
                "cores": card.get("cores", 0),
                "computeCapability": [int(capability[0]), int(capability[1])],
                "pciBusId": card.get("pciBusId", ""),
                "numaNode": card.get("numaNode", 0),
                "uncorrectedVolatileEcc": 0 if card.get("healthy", True) else 1,
                "migEnabled": bool(mig.get("enabled")),
                "profiles": copy.deepcopy(mig.get("profiles") or []),
                "instances": [
                    {
                        "profile": p["profile"],
                        "start": p["placement"]["start"],
                        "size": p["placement"]["size"],
                        **({"uuid": p["uuid"]} if p.get("uuid") else {}),
                    }
                    for p in mig.get("partitions") or []
                ],
            }
        )
    return {
        "driverVersion": vendor.get("driverVersion", ""),
        "cudaDriverVersion": int(major) * 1000 + int(minor) * 10,
        "devices": cards,
    }


def cpuinfo(devices: Mapping[str, Any]) -> str:
    cpu = devices["spec"].get("cpu") or {}
    return (
        f"processor\t: 0\nvendor_id\t: {CPU_VENDOR_IDS.get(cpu.get('vendor', ''), cpu.get('vendor', ''))}\n"
        f"cpu family\t: {cpu.get('family', '')}\nmodel\t\t: {cpu.get('model', '')}\n"
        f"model name\t: {cpu.get('modelName', '')}\n\n"
    )


class PodResources:
    """The kubelet's pod-resources List, answered from the node's checkpoint."""

    def __init__(self, node: SimulatedNode):
        self.node = node

    def serve(self, socket_path: Path) -> grpc.Server:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(
            self.list,
            request_deserializer=podresources.ListPodResourcesRequest.FromString,
            response_serializer=podresources.ListPodResourcesResponse.SerializeToString,
        )
        service, method = podresources.LIST_METHOD.strip("/").split("/")
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(service, {method: handler})]
        )
        server.add_insecure_port(f"unix://{socket_path}")
        server.start()
        return server

    def list(self, request: Any, context: Any) -> Any:
        response = podresources.ListPodResourcesResponse()
        for entry in self.node.pod_resources():
            namespace, name = entry.pod.split("/", 1)
            pod = next(
                (p for p in response.pod_resources if p.name == name and p.namespace == namespace),
                None,
            )
            if pod is None:
                pod = response.pod_resources.add(name=name, namespace=namespace)
            container = next((c for c in pod.containers if c.name == entry.container), None)
            if container is None:
                container = pod.containers.add(name=entry.container)
            container.devices.add(resource_name=entry.resource, device_ids=list(entry.device_ids))
        return response


class SimulatedNode:
    def __init__(
        self, name: str, devices: Mapping[str, Any], root: Path, api: Api, kubeconfig: Path
    ):
        self.name = name
        self.api = api
        self.root = root / "nodes" / name
        self.root.mkdir(parents=True, exist_ok=True)
        self.nvml = FakeNvml(recording(devices))
        (self.root / "cpuinfo").write_text(cpuinfo(devices))
        self.checkpoint: dict[str, dict[str, list[Grant]]] = {}  # Pod UID → container → grants
        self.pods: dict[str, str] = {}  # Pod UID → namespace/name
        self.lock = threading.Lock()
        self.socket = self.root / "kubelet.sock"
        self.server = PodResources(self).serve(self.socket)
        from e2e.api import configuration

        self.agent = Agent(
            name,
            self.nvml,
            KubernetesApi(configuration=configuration(kubeconfig)),
            lambda: podresources.list_devices(str(self.socket)),
            cpuinfo=self.root / "cpuinfo",
            os=devices["spec"].get("os", "linux"),
            arch=devices["spec"].get("arch", "amd64"),
        )

    # -- the device plugin and the kubelet's device manager ----------------------------------
    def cards(self) -> list[Card]:
        return cards_of(self.api.get("Devices", self.name))

    def sync(self, plugin: DevicePlugin, pods: list[dict[str, Any]]) -> None:
        """Release what finished Pods held; grant what started Pods ask for (a Pod the plugin
        cannot serve fails as the kubelet's device manager fails it)."""
        mine = {p["metadata"]["uid"]: p for p in pods if p["spec"].get("nodeName") == self.name}
        with self.lock:
            for uid in [u for u in self.checkpoint if u not in mine or not kube.running(mine[u])]:
                self.release(uid)
        for uid, pod in sorted(mine.items(), key=lambda e: kube.pod_key(e[1])):
            if (
                uid in self.checkpoint
                or not kube.running(pod)
                or pod["status"].get("phase") == "Failed"
            ):
                continue
            self.start(plugin, pod)

    def start(self, plugin: DevicePlugin, pod: dict[str, Any]) -> None:
        cards = self.cards()
        node = self.api.get("Node", self.name) or {}
        with self.lock:
            held = [
                g
                for containers in self.checkpoint.values()
                for gs in containers.values()
                for g in gs
            ]
        granted: dict[str, list[Grant]] = {}
        for container in pod["spec"].get("containers") or []:
            limits = (container.get("resources") or {}).get("limits") or {}
            wanted = {name: math.ceil(kube.quantity(value)) for name, value in limits.items()}
            grants = plugin.allocate(Allocate(node, cards, held, pod, container["name"], wanted))
            if isinstance(grants, str):
                self.api.patch_status(
                    "Pod",
                    pod["metadata"]["name"],
                    pod["metadata"]["namespace"],
                    {
                        "phase": "Failed",
                        "reason": "UnexpectedAdmissionError",
                        "message": f"Allocate failed due to {grants}, which is unexpected",
                    },
                )
                return
            granted[container["name"]] = grants
            held += grants
        with self.lock:
            self.checkpoint[pod["metadata"]["uid"]] = granted
            self.pods[pod["metadata"]["uid"]] = kube.pod_key(pod)
        self.edit_instances([g for gs in granted.values() for g in gs], add=True)

    def release(self, uid: str) -> None:
        grants = [g for gs in self.checkpoint.pop(uid).values() for g in gs]
        self.pods.pop(uid)
        self.edit_instances(grants, add=False)

    def edit_instances(self, grants: list[Grant], add: bool) -> None:
        """MIG instances the plugin made for a grant exist in NVML while it is held."""
        made = {g.device_ids[0]: g for g in grants if g.created}
        for card in self.nvml.recording.get("devices") or []:
            instances = [i for i in card["instances"] if i.get("uuid") not in made]
            if add:
                instances += [
                    {
                        "profile": g.profile,
                        "start": g.placement.start,
                        "size": g.placement.size,
                        "uuid": uuid,
                    }
                    for uuid, g in made.items()
                    if g.card == card["uuid"] and g.placement is not None
                ]
            card["instances"] = sorted(instances, key=lambda i: i["start"])

    def pod_resources(self) -> list[podresources.ContainerDevices]:
        with self.lock:
            entries = sorted(self.checkpoint.items(), key=lambda e: self.pods[e[0]])
            found = []
            for uid, containers in entries:
                for container, grants in sorted(containers.items()):
                    by_resource: dict[str, list[str]] = {}
                    for grant in grants:
                        by_resource.setdefault(grant.resource, []).extend(grant.device_ids)
                    found += [
                        podresources.ContainerDevices(
                            self.pods[uid], container, resource, tuple(ids)
                        )
                        for resource, ids in sorted(by_resource.items())
                    ]
            return found

    def stop(self) -> None:
        self.server.stop(0)
