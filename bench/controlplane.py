"""`python -m bench.controlplane [--nodes 1000]`: a Devices change to the InstanceType's status
through the real control plane (make e2e's), beside our function's own share of it.

Not a test: it prints figures. The cluster is bench/cluster.py's (8 × H100 per node, eight
shapes of allocations) registered as KWOK Nodes with what gpustack's device plugin advertises;
each node's Devices is applied as its agent would write it. Crossplane composes every Devices
(its summary ConfigMap) and the Catalog's pools through our function, served with metrics.

Each round takes one node out of management (`spec.managed: false`) or back, and times the
moment the H100 pool's `status.nodes` shows it. Our share is the time the
function spent answering RunFunction calls in that window (its latency histogram's sum, every
handler): an upper bound, since Crossplane's other reconciles in the window count too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import cluster
from e2e.cluster import FLEET
from e2e.environment import REPOSITORY, Environment, private_mounts
from e2e.kube import eventually

LATENCY_SUM = "gpustack_function_request_duration_seconds_sum"
ROUNDS = 6
APPLY_BATCH = 25  # Devices a kubectl apply writes (1,000 in one call outlast its 300 s)
POOL_TIMEOUT = 1800.0  # seconds the first composition of every node may take


def function_seconds(url: str) -> float:
    """The function's time answering RunFunction so far, every handler together."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(LATENCY_SUM)
    )


def applied_devices(stored: dict[str, Any]) -> dict[str, Any]:
    """A Devices as its agent applies it: its name, labels and hardware, nothing Crossplane or
    the API server added."""
    labels = {
        k: v for k, v in stored["metadata"]["labels"].items() if not k.startswith("crossplane.io/")
    }
    spec = {k: v for k, v in stored["spec"].items() if k != "crossplane"}
    return {
        "apiVersion": stored["apiVersion"],
        "kind": "Devices",
        "metadata": {"name": stored["metadata"]["name"], "labels": labels},
        "spec": spec,
    }


def registered_node(stored: dict[str, Any]) -> dict[str, Any]:
    metadata = stored["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": metadata["name"], "labels": metadata.get("labels") or {}},
        "spec": {k: v for k, v in stored.get("spec", {}).items() if k == "taints"},
        "status": {k: stored["status"][k] for k in ("capacity", "allocatable")},
    }


def pool_nodes(env: Environment) -> int:
    """The managed nodes the H100 pool covers (`status.nodes`), 0 before it is composed. (Not
    its cards: the cluster's allocations and partitions take some out of the exclusive view.)"""
    for pool in env.kubectl.get("instancetype"):
        if cluster.A_KEY in pool["metadata"]["name"]:
            return int((pool.get("status") or {}).get("nodes", 0))
    return 0


def run(nodes: int, root: Path) -> dict[str, Any]:
    built = cluster.build(nodes)
    env = Environment(root, "gpustack", scale=FLEET)
    started = time.monotonic()
    env.start()
    up = time.monotonic() - started
    try:
        devices = [applied_devices(d) for d in built.kind("Devices")]
        for node, found in zip(built.kind("Node"), devices, strict=True):
            env.register_node(registered_node(node), found)
        env.start_nfd_master(devices[0]["metadata"]["name"])
        for start in range(0, len(devices), APPLY_BATCH):  # one call each: within kubectl's limit
            env.kubectl.apply(devices[start : start + APPLY_BATCH])
        env.kubectl("apply", "-f", str(REPOSITORY / "examples" / "walkthrough" / "catalog.yaml"))
        composed = time.monotonic()
        eventually(
            f"the H100 pool covering {nodes} nodes",
            lambda: pool_nodes(env) == nodes,
            timeout=POOL_TIMEOUT,
            interval=2.0,
        )
        first = time.monotonic() - composed
        rounds = []
        for index in range(ROUNDS):
            name = devices[index // 2 % nodes]["metadata"]["name"]
            managed = index % 2 == 1  # a node out, the same node back in, the next out, ...
            want = nodes - (0 if managed else 1)
            before, t0 = function_seconds(env.crossplane.metrics_url), time.monotonic()
            env.kubectl(
                "patch", "devices", name, "--type=merge",
                "-p", json.dumps({"spec": {"managed": managed}}),
            )  # fmt: skip
            eventually(
                f"the pool at {want} nodes", lambda w=want: pool_nodes(env) == w, interval=0.1
            )
            seconds = time.monotonic() - t0
            rounds.append(
                {
                    "seconds": seconds,
                    "function": function_seconds(env.crossplane.metrics_url) - before,
                }
            )
    finally:
        env.stop()
    return {
        "nodes": nodes,
        "environment_seconds": up,
        "first_composition_seconds": first,
        "rounds": rounds,
        "median_seconds": statistics.median(r["seconds"] for r in rounds),
        "median_function_seconds": statistics.median(r["function"] for r in rounds),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controlplane", description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--out", help="write the figures here as JSON too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpustack-bench-") as scratch:
        figures = run(args.nodes, Path(scratch))
    print(
        f"{figures['nodes']} nodes: environment up in {figures['environment_seconds']:.0f} s; "
        f"every Devices and the pools composed in {figures['first_composition_seconds']:.0f} s"
    )
    for r in figures["rounds"]:
        print(f"  Devices change → InstanceType status: {r['seconds']:.2f} s, "
              f"of which the function answering: {r['function']:.2f} s")  # fmt: skip
    print(
        f"  median {figures['median_seconds']:.2f} s; the function's share "
        f"{figures['median_function_seconds']:.2f} s"
    )
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    private_mounts([sys.executable, "-m", "bench.controlplane", *sys.argv[1:]])
    sys.exit(main())
