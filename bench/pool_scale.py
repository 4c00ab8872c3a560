"""An InstanceType over 5,000 nodes × 8 H100s, against protobuf parsing the same request.

The request carries every Devices object of the pool, as Crossplane sends it. The baseline is
parsing that request (what any function pays before it can look at it); the measured time is
the whole server path: parse, run the instancetype handler, serialise the response. Both are
measured in this run on this machine, so the ratio holds where absolute times would not.
"""

from __future__ import annotations

import time

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.core.devices import parse_spec
from functions.core.ledger import build_ledger
from functions.core.pools import summarize_devices
from functions.core.status import ledger_status, summary_status
from functions.server import run_function

NODES, CARDS = 5000, 8
PRODUCT = "NVIDIA H100 80GB HBM3"
POOL = "gpustack--nvidia-h100-80gb-hbm3-linux-amd64"
TARGET = 3.0


def devices(index: int) -> dict:
    node = f"node-{index:05d}"
    spec = {
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
                "devices": [
                    {
                        "uuid": f"GPU-{index:05d}-{card}",
                        "index": card,
                        "minor": card,
                        "product": PRODUCT,
                        "memoryMiB": 81559,
                        "cores": 16896,
                        "computeCapability": "9.0",
                        "pciBusId": f"00000000:{card:02X}:00.0",
                        "numaNode": card // 4,
                        "healthy": True,
                        "mig": {"enabled": False},
                    }
                    for card in range(CARDS)
                ],
            }
        ],
        "allocations": [
            {
                "pod": f"team/job-{index}",
                "container": "main",
                "device": f"GPU-{index:05d}-0",
                "mode": "Exclusive",
            }
        ]
        if index % 3 == 0
        else [],
    }
    parsed = parse_spec(node, spec)
    ledger = build_ledger(parsed)
    summary = summarize_devices(parsed, ledger=ledger)
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {
            "name": node,
            "labels": {
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "general.feature.gpustack.ai/intel-xeon-platinum-8480": "true",
                "acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3": "true",
            },
        },
        "spec": spec,
        "status": {"groups": ledger_status(ledger), "summary": summary_status(summary)},
    }


def catalog_request() -> bytes:
    """The Catalog over the same nodes: every Devices object, all ResourceFlavors and types."""
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "bench"
    req.input.update(
        {"apiVersion": "fn.gpustack.ai/v1beta1", "kind": "Input", "handler": "catalog"}
    )
    req.observed.composite.resource.update(
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "Catalog",
            "metadata": {"name": "default"},
            "spec": {},
        }
    )
    items = req.required_resources["devices"].items
    for index in range(NODES):
        items.add().resource.update(devices(index))
    return req.SerializeToString()


def build_request() -> bytes:
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "bench"
    req.input.update(
        {"apiVersion": "fn.gpustack.ai/v1beta1", "kind": "Input", "handler": "instancetype"}
    )
    req.observed.composite.resource.update(
        {
            "apiVersion": "worker.gpustack.ai/v1alpha1",
            "kind": "InstanceType",
            "metadata": {"name": POOL},
            "spec": {
                "acceleratable": True,
                "acceleratorGroup": "nvidia-h100-80gb-hbm3",
                "generalGroup": "generic",
                "os": "linux",
                "arch": "amd64",
                "unitResources": {"cpu": "12", "ram": "192Gi"},
                "localStorage": "100Gi",
            },
        }
    )
    items = req.required_resources["devices"].items
    for index in range(NODES):
        items.add().resource.update(devices(index))
    namespaces = req.required_resources["namespaces"].items
    for index in range(50):
        namespaces.add().resource.update(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{index}"}}
        )
    req.required_resources["catalog"].SetInParent()
    return req.SerializeToString()


def timed(work, repeat: int) -> float:
    """The fastest of `repeat` runs: on a shared machine noise only ever adds time."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        samples.append(time.perf_counter() - start)
    return min(samples)


def measure(title: str, payload: bytes, target: float | None) -> None:
    parse = timed(lambda: fnv1.RunFunctionRequest.FromString(payload), 9)

    def serve_once() -> None:
        rsp = run_function(fnv1.RunFunctionRequest.FromString(payload))
        rsp.SerializeToString(deterministic=True)

    rsp = run_function(fnv1.RunFunctionRequest.FromString(payload))
    assert not rsp.results, [r.message for r in rsp.results]
    handled = timed(serve_once, 7)
    ratio = handled / parse
    print(f"{title}: {NODES} nodes x {CARDS} GPUs, request {len(payload) / 2**20:.1f} MiB")
    print(f"  protobuf parse alone   {parse * 1000:8.1f} ms (baseline)")
    print(f"  parse + handle + reply {handled * 1000:8.1f} ms")
    verdict = (
        ""
        if target is None
        else f" (target < {target:.0f}x) {'OK' if ratio < target else 'OVER TARGET'}"
    )
    print(f"  ratio {ratio:.2f}x{verdict}")


def main() -> None:
    measure("instancetype over one pool", build_request(), TARGET)
    measure("catalog over the cluster", catalog_request(), None)


if __name__ == "__main__":
    main()
