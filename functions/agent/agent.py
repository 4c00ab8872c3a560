"""`gpustack-fn agent`: keep this node's Devices object true, without churning the API server.

Each poll reads NVML, the CPU, the Node and what the kubelet (or, under Dynamic Resource
Allocation, the scheduler) handed out, and builds the whole Devices object. It is applied
(server-side, as field manager `gpustack-agent`, never touching `spec.managed`) when its
content changed, and again every `resync` seconds however quiet the node (an apply of the same
content writes nothing, and one deleted comes back); API errors back off exponentially. The
Node owns the Devices, so the garbage collector deletes it with the Node.

A card's reading is reported only once two polls in a row agree (`steady`), and a failed
reading never changes what a card is (`report`): a flapping GPU makes no writes. When a change
waits for its confirming poll, that poll comes after `CONFIRM_SECONDS`, not a whole period.
Every call to the API server and the kubelet has a timeout (`--api-timeout`); SIGTERM ends the
agent within `STOP_SECONDS` whatever the loop is waiting on (`run_until_stopped`, then
`exit_now` where the poll still hangs).

It logs through the server's structlog configuration (`crossplane.function.logging`: JSON lines,
or console lines with `--debug`) and counts polls, writes, NVML errors and each card's health in
functions/metrics.py. Its probes read `live()` (the loop still turns) and `ready()` (the last
poll reached the API server).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

from crossplane.function import logging

from functions.agent import report
from functions.agent.allocations import DraState, allocations, pod_claims
from functions.agent.nvml import Nvml
from functions.agent.podresources import ContainerDevices
from functions.agent.steady import Steady, by_key, vendors_of
from functions.core import apis, labels
from functions.core.devices import parse_spec
from functions.metrics import RESYNCED, UNCHANGED, WRITTEN, AgentMetrics, Card, agent_metrics

API_VERSION = "worker.gpustack.ai/v1alpha1"
FIELD_MANAGER = "gpustack-agent"
MAX_BACKOFF_SECONDS = 300
EVENT_WAIT_SLICE_SECONDS = 5.0  # how long a stop request may wait behind an NVML wait
STALL_GRACE_SECONDS = 60.0  # beyond the period and the longest back-off: the loop is stuck
CONFIRM_SECONDS = 5.0  # how soon a changed reading is read again, to confirm it
STOP_SECONDS = 5.0  # SIGTERM ends the agent within this, whatever the loop waits on
EXIT_SECONDS = 1.0  # of which the process keeps this much to log and exit
JOIN_SECONDS = STOP_SECONDS - EXIT_SECONDS  # and the loop has the rest to end its poll
API_TIMEOUT_SECONDS = 10.0  # each call to the API server and the kubelet
RESYNC_SECONDS = 600.0  # how often an unchanged Devices is applied again
DRA_GROUP, _, DRA_VERSION = apis.RESOURCE.rpartition("/")  # resource.k8s.io, v1


@dataclass(frozen=True)
class NodeFacts:
    """What the agent reads of its Node: its uid (the Devices' owner) and its CPU capacity."""

    uid: str
    cpu_capacity: int | None


class Kube(Protocol):
    def node_facts(self, node: str) -> NodeFacts: ...
    def pods_on(self, node: str) -> list[dict[str, Any]]: ...
    # Under DRA: a ResourceClaim a Pod names (None: gone, or no DRA API), the node's slices.
    def resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def resource_slices(self, node: str) -> list[dict[str, Any]]: ...
    def apply_devices(self, devices: dict[str, Any]) -> None: ...


@dataclass
class Agent:
    node: str
    nvml: Nvml
    kube: Kube
    list_devices: Callable[[], list[ContainerDevices]]
    cpuinfo: Path = Path("/proc/cpuinfo")
    os: str = field(default_factory=report.node_os)
    arch: str = field(default_factory=report.node_arch)
    last_applied: str | None = None
    writes: int = 0
    metrics: AgentMetrics = field(default_factory=agent_metrics)
    clock: Callable[[], float] = time.monotonic
    period: float = 30.0
    resync: float = RESYNC_SECONDS
    started: float | None = None  # clock() when the loop started
    last_write: float | None = None  # clock() when the Devices was last applied
    last_attempt: float | None = None  # clock() when a poll last ended, either way
    last_error: str | None = None  # why the last poll failed; None after a success
    # Each card as reported, and changes held; a placeholder identity is replaced at once.
    steady: Steady = field(default_factory=lambda: Steady(unknown=report.unidentified))
    cpu_facts: dict[str, str] = field(default_factory=dict)  # the CPU as last read
    # The last poll's problems: one that lasts is logged once, when it appears (a node without
    # NVML would otherwise say so on every poll, twice a second after an event).
    problems: frozenset[str] = frozenset()

    def build(self) -> dict[str, Any]:
        """The Devices object as this node is now, each card as it has held for two polls."""
        reading = report.read_accelerators(self.nvml, previous=vendors_of(self.steady.reported))
        accelerators = vendors_of(self.steady.settle(by_key(reading.vendors)))
        self.metrics.nvml_read(reading.available, len(reading.errors), cards(accelerators))
        for problem in reading.problems:
            if problem not in self.problems:
                logging.get_logger().warning(problem, node=self.node)
        self.problems = frozenset(reading.problems)
        pods = {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p
            for p in self.kube.pods_on(self.node)
        }
        self.cpu_facts = report.read_cpu(self.cpuinfo) or self.cpu_facts  # unread: as before
        node = self.kube.node_facts(self.node)
        cpu = {**self.cpu_facts, "cores": report.cpu_cores(node.cpu_capacity)}
        spec = {
            "os": self.os,
            "arch": self.arch,
            "cpu": cpu,
            "accelerators": accelerators,
            # MIG devices resolve against this poll's reading: the kubelet hands out what exists
            "allocations": allocations(self.list_devices(), pods, reading.vendors, self.dra(pods)),
        }
        selector = labels.devices_labels(parse_spec(self.node, spec))
        metadata = {"name": self.node, "labels": dict(sorted(selector.items()))}
        if node.uid:
            metadata["ownerReferences"] = [owner_reference(self.node, node.uid)]
        return {"apiVersion": API_VERSION, "kind": "Devices", "metadata": metadata, "spec": spec}

    def dra(self, pods: dict[str, dict[str, Any]]) -> DraState | None:
        """The ResourceClaims the node's Pods name, and the node's ResourceSlices: read only
        where a Pod names a claim, so a cluster without DRA costs no call."""
        named = sorted(
            {
                (key.partition("/")[0], claim)
                for key, pod in pods.items()
                for claim in pod_claims(pod).values()
            }
        )
        if not named:
            return None
        found = [self.kube.resource_claim(namespace, name) for namespace, name in named]
        claims = [claim for claim in found if claim is not None]
        return DraState(self.node, claims, self.kube.resource_slices(self.node) if claims else [])

    def poll(self) -> bool:
        """Build and apply if anything changed, or the resync is due; True when it wrote."""
        devices = self.build()
        content = json.dumps(devices, sort_keys=True)
        changed = content != self.last_applied
        if not changed and not self.resync_due():
            self.metrics.polled(UNCHANGED)
            return False
        self.kube.apply_devices(devices)
        self.last_applied, self.last_write = content, self.clock()
        self.writes += 1
        self.metrics.polled(WRITTEN if changed else RESYNCED)
        return True

    def resync_due(self) -> bool:
        return self.last_write is not None and self.clock() - self.last_write >= self.resync

    def run(self, period: float, stop: threading.Event) -> None:
        """Poll on the period, sooner on an NVML event; back off while polls fail."""
        self.period, self.started = period, self.clock()
        backoff = 0.0
        while not stop.is_set():
            try:
                if self.poll():
                    logging.get_logger().info("applied Devices", node=self.node)
                backoff = 0.0
                self.last_error = None
            except Exception as error:  # keep the node reported: retry, slower each time
                backoff = min(MAX_BACKOFF_SECONDS, max(1.0, backoff * 2))
                self.last_error = f"{type(error).__name__}: {error}"
                self.metrics.poll_failed()
                logging.get_logger().warning(
                    "poll failed", node=self.node, error=self.last_error, retry_in=backoff
                )
            self.last_attempt = self.clock()
            if backoff:
                stop.wait(backoff)
            else:
                self.pause(min(period, CONFIRM_SECONDS) if self.steady.unsettled else period, stop)

    def pause(self, period: float, stop: threading.Event) -> None:
        """Until the period ends, an NVML event arrives, or the agent is stopped."""
        deadline = time.monotonic() + period
        while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
            event = self.nvml.wait_for_event(min(left, EVENT_WAIT_SLICE_SECONDS))
            if event is None:  # no events here: just wait out the period
                stop.wait(left)
            elif event:
                return

    def live(self) -> tuple[bool, str]:
        """The liveness probe: the loop ended a poll (or started) within the period and the
        longest back-off."""
        since = self.last_attempt if self.last_attempt is not None else self.started
        if since is None:
            return True, "starting"
        age = self.clock() - since
        limit = self.period + MAX_BACKOFF_SECONDS + STALL_GRACE_SECONDS
        if age > limit:
            return False, f"no poll for {age:.0f}s (limit {limit:.0f}s)"
        return True, "ok" if self.last_attempt is not None else "starting"

    def ready(self) -> tuple[bool, str]:
        """The readiness probe: the last poll reached the API server."""
        if self.last_attempt is None:
            return False, "no poll yet"
        if self.last_error is not None:
            return False, f"last poll failed: {self.last_error}"
        return True, "ok"


def owner_reference(node: str, uid: str) -> dict[str, str]:
    """The Devices' owner: its Node, so that deleting the Node (a cluster autoscaler removing
    it, say) deletes the Devices, and Crossplane what the Devices composed, and the node's cards
    leave every pool. Not a controller reference (Crossplane's are: the Node controls nothing),
    and no `blockOwnerDeletion`, which would need the right to update the Node's finalizers."""
    return {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}


def cards(vendors: list[dict[str, Any]]) -> list[Card]:
    """Each reported card's health, for the per-card gauge."""
    return [
        Card(d["uuid"], d["index"], d["product"], d["healthy"])
        for vendor in vendors
        for d in vendor["devices"]
    ]


def run_until_stopped(
    agent: Agent, period: float, stop: threading.Event, grace: float = JOIN_SECONDS
) -> bool:
    """Run the loop on its own thread until `stop` is set (by SIGTERM), then give it `grace`
    seconds to end its poll: a call that hangs past its timeout, or an NVML wait, never keeps
    the agent from stopping. False when the loop is still in its poll: the caller then ends
    the process at once (`exit_now`), since the interpreter's own shutdown would wait on what
    the poll holds, for however long (it took the agent 5.8-8.9 s to stop under load)."""
    loop = threading.Thread(target=agent.run, args=(period, stop), name="poll", daemon=True)
    loop.start()
    while not stop.wait(1.0) and loop.is_alive():
        pass
    loop.join(grace)
    if loop.is_alive():
        logging.get_logger().warning("stopping mid-poll", node=agent.node, waited=grace)
        return False
    return True


def exit_now(code: int = 0) -> None:
    """End the process now, its output flushed, without the interpreter's shutdown: nothing
    the agent holds needs it (every write is one API call, whole or not at all)."""
    import os
    import sys

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


class NoCluster(Exception):
    """Neither the in-cluster config nor a kubeconfig: the agent has no API server to report
    to. Bad input, not a bug: the message says where it looked and what to do."""


class KubernetesApi:
    """The real API server, through the official client (in-cluster, else kubeconfig); every
    call gives up after `timeout` seconds (connecting, and reading the answer), once: the
    client's own retries are off, since the poll loop retries with its back-off."""

    def __init__(self, timeout: float = API_TIMEOUT_SECONDS, configuration: Any = None):
        import kubernetes

        if configuration is None:
            configuration = kubernetes.client.Configuration()
            try:
                kubernetes.config.load_incluster_config(client_configuration=configuration)
            except kubernetes.config.ConfigException as not_in_a_pod:
                try:
                    kubernetes.config.load_kube_config(client_configuration=configuration)
                except Exception as no_kubeconfig:  # whatever its reader makes of the file
                    raise no_cluster(not_in_a_pod, no_kubeconfig) from no_kubeconfig
        configuration.retries = False
        client = kubernetes.client.ApiClient(configuration)
        self.core = kubernetes.client.CoreV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self.timeout = (timeout, timeout)

    def node_facts(self, node: str) -> NodeFacts:
        from functions.core import quantity

        found = self.core.read_node(node, _request_timeout=self.timeout)
        capacity = ((found.status and found.status.capacity) or {}).get("cpu")
        cpu = quantity.ceil(quantity.parse(capacity)) if capacity else None
        return NodeFacts(found.metadata.uid or "", cpu)

    def pods_on(self, node: str) -> list[dict[str, Any]]:
        pods = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", _request_timeout=self.timeout
        )
        return [self.core.api_client.sanitize_for_serialization(p) for p in pods.items]

    def resource_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._dra_read(
            self.custom.get_namespaced_custom_object, namespace, "resourceclaims", name
        )

    def resource_slices(self, node: str) -> list[dict[str, Any]]:
        found = self._dra_read(
            self.custom.list_cluster_custom_object,
            "resourceslices",
            field_selector=f"spec.nodeName={node}",
        )
        return (found or {}).get("items") or []

    def _dra_read(
        self, read: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> dict[str, Any] | None:
        """One read of resource.k8s.io/v1; None where the API server answers 404: the claim
        is gone since the Pods were listed, or the cluster serves no DRA at all."""
        from kubernetes.client.exceptions import ApiException

        try:
            found = read(DRA_GROUP, DRA_VERSION, *args, _request_timeout=self.timeout, **kwargs)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast(dict[str, Any], found)

    def apply_devices(self, devices: dict[str, Any]) -> None:
        self.custom.patch_cluster_custom_object(
            "worker.gpustack.ai",
            "v1alpha1",
            "devices",
            devices["metadata"]["name"],
            devices,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
            _request_timeout=self.timeout,
        )


def no_cluster(not_in_a_pod: Exception, no_kubeconfig: Exception) -> NoCluster:
    """Where the agent looked for its cluster, and why each failed, in one line."""
    import os

    given = os.environ.get("KUBECONFIG")
    where = f"KUBECONFIG={given}" if given else "~/.kube/config"
    why = " ".join(str(no_kubeconfig).split())
    return NoCluster(
        f"{where}: no cluster to report to: no usable kubeconfig there ({why}), and not in a "
        f"pod ({' '.join(str(not_in_a_pod).split())}) — run the agent in its DaemonSet's pods, "
        "or point KUBECONFIG at a kubeconfig for this node's cluster"
    )
