"""Requests of a chosen size for the server's load, latency and shutdown tests.

`pool_request(nodes)` is an InstanceType's request over a pool of `nodes` nodes with 8 H100s
each, every node's summary ConfigMap as the devices handler composes it (computed by the
handler itself, once, and copied).
`small_request()` is an InstanceTypeFlavor's request: a few hundred bytes, answered at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.handlers import HANDLERS
from functions.handlers.base import Request
from tests.support.grpc_server import FUNCTION, free_port
from tests.support.patience import HANG, wait_until

INPUT = {"apiVersion": "fn.gpustack.ai/v1beta1", "kind": "Input"}
PRODUCT = "NVIDIA H100 80GB HBM3"
A_KEY = "nvidia-h100-80gb-hbm3"
POOL = f"gpustack--{A_KEY}-linux-amd64"


def devices(name: str = "node-00000", cards: int = 8) -> dict[str, Any]:
    """One node's Devices object, its status as the devices handler writes it."""
    obj = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "general.feature.gpustack.ai/intel-xeon-platinum-8480": "true",
                f"acceleratable.feature.gpustack.ai/{A_KEY}": "true",
            },
        },
        "spec": {
            "os": "linux",
            "arch": "amd64",
            "cpu": {
                "vendor": "Intel",
                "modelName": "Intel(R) Xeon(R) Platinum 8480+",
                "family": "6",
                "model": "143",
                "cores": 224,
            },
            "accelerators": [
                {
                    "manufacturer": "nvidia",
                    "driverVersion": "580.159.03",
                    "runtimeVersion": "13.0",
                    "devices": [card(name, index) for index in range(cards)],
                }
            ],
            "allocations": [],
        },
    }
    desired = HANDLERS["devices"].compose(Request.of(obj, required={"catalog": []}))
    return {**obj, "status": desired.status, "summary": desired.resources["summary"]}


def card(node: str, index: int) -> dict[str, Any]:
    return {
        "uuid": f"GPU-{node}-{index}",
        "index": index,
        "minor": index,
        "product": PRODUCT,
        "memoryMiB": 81559,
        "cores": 16896,
        "computeCapability": "9.0",
        "pciBusId": f"00000000:{index:02X}:00.0",
        "numaNode": index // 4,
        "healthy": True,
        "mig": {"enabled": False},
    }


def pool_request(nodes: int, tag: str = "pool") -> fnv1.RunFunctionRequest:
    """The pool's InstanceType request with `nodes` node summaries, as Crossplane sends it."""
    req = fnv1.RunFunctionRequest()
    req.meta.tag = tag
    req.meta.capabilities.extend([fnv1.CAPABILITY_CAPABILITIES, fnv1.CAPABILITY_REQUIRED_RESOURCES])
    req.input.update({**INPUT, "handler": "instancetype"})
    req.observed.composite.resource.update(
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "InstanceType",
            "metadata": {"name": POOL, "uid": "00000000-0000-4000-8000-000000000001"},
            "spec": {
                "acceleratable": True,
                "acceleratorGroup": A_KEY,
                "generalGroup": "generic",
                "os": "linux",
                "arch": "amd64",
                "unitResources": {"cpu": "12", "ram": "192Gi"},
                "localStorage": "100Gi",
            },
        }
    )
    summary = devices()["summary"]
    template = fnv1.Resource()
    template.resource.update(summary)
    items = req.required_resources["summaries"].items
    for index in range(nodes):
        item = items.add()
        item.CopyFrom(template)
        item.resource["metadata"]["name"] = f"node-{index:05d}-gpustack-summary"
        text = summary["data"]["summary"].replace("node-00000", f"node-{index:05d}")
        item.resource["data"]["summary"] = text
    namespaces = req.required_resources["namespaces"].items
    for name in ("default", "team-a", "team-b"):
        namespaces.add().resource.update(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    req.required_resources["catalog"].SetInParent()
    return req


def nodes_for(mebibytes: float) -> int:
    """How many nodes make a pool request of about `mebibytes` MiB."""
    per_node = pool_request(100).ByteSize() / 100
    return int(mebibytes * 2**20 / per_node)


def small_request(tag: str = "small") -> fnv1.RunFunctionRequest:
    """An InstanceTypeFlavor's request: nothing to read, answered at once."""
    req = fnv1.RunFunctionRequest()
    req.meta.tag = tag
    req.input.update({**INPUT, "handler": "instancetypeflavor"})
    req.observed.composite.resource.update(
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "InstanceTypeFlavor",
            "metadata": {"name": "gpustack--nvidia-h100-80gb-hbm3", "uid": "u-1"},
        }
    )
    return req


@contextlib.contextmanager
def server_process(*args: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """`function ARGS` on a free loopback port, its output collected: (process, address)."""
    address = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if k != "TLS_SERVER_CERTS_DIR"}
    process = subprocess.Popen(
        [str(FUNCTION), *args, "--address", address],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield process, address
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=HANG)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (the server's forkserver and its workers), from /proc."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            # `pid (comm) state ppid ...`: comm may hold spaces, so read after its `)`.
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def stopped(pid: int) -> bool:
    """Whether every thread of the process is stopped (or it is gone), from /proc."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return True
    for task in tasks:
        with contextlib.suppress(OSError, IndexError):  # a thread that ended meanwhile
            if (task / "stat").read_text().rsplit(")", 1)[1].split()[0] not in "TtZX":
                return False
    return True


def stop(pids: list[int]) -> None:
    """SIGSTOP these processes, and wait until they are stopped: `kill` returns before the
    kernel has run them to their stop, which on a busy machine can come after the next call's
    bytes reached a worker, and it read them."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: all(stopped(pid) for pid in pids), f"SIGSTOP to stop {pids}", every=0.01)


@contextlib.contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """Stopped (`stop`) for the block, SIGCONT after: a worker that cannot finish yet."""
    stop(pids)
    try:
        yield
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def logged(output: str, message: str) -> list[dict[str, Any]]:
    """The server's JSON log lines with this `msg`."""
    found = []
    for line in output.splitlines():
        with contextlib.suppress(ValueError):
            entry = json.loads(line)
            if entry.get("msg") == message:
                found.append(entry)
    return found
