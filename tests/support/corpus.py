"""Real requests to fuzz from: what Crossplane sent each handler while the examples played.

`tests/fixtures/requests/<handler>.json` holds, for every handler, the last request each of its
composites received in the walkthrough scenario and in a cluster of GPU classes with a virtual
machine — composites, observed and required objects exactly as the simulated Crossplane built
them. The fuzz suite (tests/test_fuzz.py) mutates these. Regenerate after a handler starts
reading something new:

    .venv/bin/python -m tests.support.corpus
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from functions.server import handler_name, run_function
from functions.views import view_of
from tests.support.schemas import ROOT

CORPUS = ROOT / "tests" / "fixtures" / "requests"
WALKTHROUGH, CLASSES = ROOT / "examples" / "walkthrough", ROOT / "examples" / "gpuclass"
VM = {
    "apiVersion": "worker.gpustack.ai/v1alpha1",
    "kind": "Instance",
    "metadata": {"name": "vm-1", "namespace": "default"},
    "spec": {
        "type": "gpustack--generic-linux-amd64",
        "runtime": "VirtualMachine",
        "image": "quay.io/containerdisks/ubuntu:24.04",
        "resources": {"cpu": "4"},
        "volume": {"ephemeral": {"capacity": "20Gi"}},
        "gpus": [{"className": "example-whole-gpu", "count": 1}],
    },
}


class Recorder:
    """A runner that keeps the last request per (handler, composite) and answers for real."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, str, str], fnv1.RunFunctionRequest] = {}

    def __call__(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        composite = view_of(req.observed.composite.resource)
        key = (handler_name(req), composite.namespace, composite.name)
        copied = fnv1.RunFunctionRequest()
        copied.CopyFrom(req)
        self.last[key] = copied
        return run_function(req)


def record() -> dict[str, list[fnv1.RunFunctionRequest]]:
    from gpustack_sim import load_documents, play, world_from

    recorder = Recorder()
    for _ in play(WALKTHROUGH / "scenario.yaml", run=recorder):
        pass
    world = world_from(
        [
            WALKTHROUGH / "devices.yaml",
            WALKTHROUGH / "nodes.yaml",
            WALKTHROUGH / "namespaces.yaml",
            WALKTHROUGH / "catalog.yaml",
            CLASSES / "cluster.yaml",
            CLASSES / "classes.yaml",
        ],
        run=recorder,
    )
    world.reconcile()
    world.apply(VM)
    world.reconcile()
    pool = ROOT / "examples" / "kubernetesnodes" / "pool.yaml"
    if pool.exists():  # a tenant's worker pool, in a namespace of its own
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-alpha"}}
        world.apply(namespace, *load_documents(pool))
        world.reconcile()
    found: dict[str, list[fnv1.RunFunctionRequest]] = {}
    for (handler, _, _), req in sorted(recorder.last.items()):
        found.setdefault(handler, []).append(req)
    return found


def write(found: dict[str, list[fnv1.RunFunctionRequest]]) -> None:
    CORPUS.mkdir(parents=True, exist_ok=True)
    for handler, requests in sorted(found.items()):
        documents = [json_format.MessageToDict(req) for req in requests]
        text = json.dumps(documents, indent=1, sort_keys=True) + "\n"
        (CORPUS / f"{handler}.json").write_text(text)


def load(handler: str) -> list[fnv1.RunFunctionRequest]:
    documents = json.loads((CORPUS / f"{handler}.json").read_text())
    return [json_format.ParseDict(doc, fnv1.RunFunctionRequest()) for doc in documents]


def handlers() -> Iterator[str]:
    return (path.stem for path in sorted(CORPUS.glob("*.json")))


def main() -> None:
    found = record()
    write(found)
    for handler, requests in sorted(found.items()):
        print(f"{handler}: {len(requests)} requests")


if __name__ == "__main__":
    main()
