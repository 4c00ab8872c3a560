"""`gpustack-fn render`: what `crossplane render` prints, without Docker or a cluster.

It starts the real function server on loopback, runs the Composition's pipeline with the classic
render loop (requirements fulfilled from `--required-resources` files), and prints the classic
renderer's YAML stream: the XR with its status, the composed resources sorted by
composition-resource-name with the metadata Crossplane renders, then results (`-r`) and the
context (`-c`).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from functions import pipeline
from functions.core.labels import COMPOSITE as COMPOSITE_LABEL
from functions.core.labels import COMPOSITION_RESOURCE_NAME
from functions.views import StructView

RESULT_API = "render.crossplane.io/v1beta1"
SEVERITIES = {
    fnv1.SEVERITY_FATAL: "SEVERITY_FATAL",
    fnv1.SEVERITY_WARNING: "SEVERITY_WARNING",
    fnv1.SEVERITY_NORMAL: "SEVERITY_NORMAL",
}


class PipelineFailed(RuntimeError):
    pass


def documents(paths: Iterable[Path]) -> list[dict]:
    found = []
    for path in paths:
        files = (
            sorted(path.rglob("*.yaml")) + sorted(path.rglob("*.yml")) if path.is_dir() else [path]
        )
        for file in files:
            found += [doc for doc in yaml.safe_load_all(file.read_text()) if doc]
    return found


@contextlib.contextmanager
def local_function() -> Iterator[pipeline.Runner]:
    """The real server (`function --insecure`) on a free loopback port, and a runner for it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "function"), "--insecure", "--address", address],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            yield lambda req: stub.RunFunction(req, timeout=60)
    finally:
        server.terminate()
        server.wait(timeout=10)


def render_stream(
    run: pipeline.Runner,
    composite: dict,
    composition: dict,
    observed: Iterable[dict] = (),
    required: Iterable[dict] = (),
    include_results: bool = False,
    include_context: bool = False,
) -> list[dict]:
    """The documents `crossplane render` would print, in its order."""
    check(composite, composition)
    by_name = {
        (o.get("metadata", {}).get("annotations") or {}).get(COMPOSITION_RESOURCE_NAME): o
        for o in observed
    }
    by_name.pop(None, None)
    rsp, results = pipeline.run_pipeline(run, composition, composite, by_name, required)
    for step, result in results:
        if result.severity == fnv1.SEVERITY_FATAL:
            raise PipelineFailed(
                f"pipeline step {step!r} returned a fatal result: {result.message}"
            )
    out = [rendered_composite(composite, rsp)]
    for name in sorted(rsp.desired.resources):
        out.append(
            rendered_composed(
                composite, name, StructView(rsp.desired.resources[name].resource).to_dict()
            )
        )
    if include_results:
        out += [
            {
                "apiVersion": RESULT_API,
                "kind": "Result",
                "step": step,
                "severity": SEVERITIES[r.severity],
                "message": r.message,
            }
            for step, r in results
        ]
    if include_context:
        out.append(
            {
                "apiVersion": RESULT_API,
                "kind": "Context",
                "fields": StructView(rsp.context).to_dict(),
            }
        )
    return out


def check(composite: dict, composition: dict) -> None:
    ref = composition["spec"].get("compositeTypeRef", {})
    if (ref.get("apiVersion"), ref.get("kind")) != (
        composite.get("apiVersion"),
        composite.get("kind"),
    ):
        raise PipelineFailed(
            f"composition's compositeTypeRef.apiVersion and kind ({ref.get('apiVersion')}, {ref.get('kind')}) "
            f"do not match the XR's ({composite.get('apiVersion')}, {composite.get('kind')})"
        )
    if composition["spec"].get("mode", "Pipeline") != "Pipeline":
        raise PipelineFailed("render supports only Compositions in mode Pipeline")


def rendered_composite(composite: dict, rsp: fnv1.RunFunctionResponse) -> dict:
    metadata = {"name": composite["metadata"]["name"]}
    if composite["metadata"].get("namespace"):
        metadata["namespace"] = composite["metadata"]["namespace"]
    status = StructView(rsp.desired.composite.resource).to_dict().get("status", {})
    # Render pins transition times so its output is stable.
    conditions = [
        {**c, "lastTransitionTime": "2024-01-01T00:00:00Z"}
        for c in pipeline.composite_conditions(rsp)
    ]
    return {
        "apiVersion": composite["apiVersion"],
        "kind": composite["kind"],
        "metadata": metadata,
        "status": {**status, "conditions": conditions},
    }


def rendered_composed(composite: dict, name: str, obj: dict) -> dict:
    metadata = obj.setdefault("metadata", {})
    if "name" not in metadata:
        metadata["generateName"] = f"{composite['metadata']['name']}-"
    if composite["metadata"].get("namespace"):
        metadata["namespace"] = composite["metadata"]["namespace"]
    metadata.setdefault("labels", {})[COMPOSITE_LABEL] = composite["metadata"]["name"]
    metadata.setdefault("annotations", {})[COMPOSITION_RESOURCE_NAME] = name
    metadata["ownerReferences"] = [
        {
            "apiVersion": composite["apiVersion"],
            "kind": composite["kind"],
            "name": composite["metadata"]["name"],
            "uid": composite["metadata"].get("uid", ""),
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return obj


def dump(stream: list[dict[str, Any]]) -> str:
    return "".join("---\n" + yaml.safe_dump(doc, sort_keys=True) for doc in stream)
