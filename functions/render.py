"""`gpustack-fn render`: what `crossplane render` prints, without Docker or a cluster.

It starts the real function server on loopback (or calls one already running:
`--function-address`, or the target the functions file's Development runtime names, as
`crossplane render` does), runs the Composition's pipeline with the classic render loop
(requirements fulfilled from `--required-resources` files), and prints the classic renderer's
YAML stream: the XR with its status, the composed resources sorted by composition-resource-name
with the metadata Crossplane renders, then results (`-r`) and the context (`-c`).

What the inputs get wrong is a `RenderError` naming the file (and line) and what to do, for
the command to print as one line: a file that is not YAML, an XR without a kind or name, a
Composition that is not a pipeline for that XR, a server that cannot be reached, a Fatal
result. The server it starts is waited for until it answers or exits, not for a fixed time.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import grpc
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from functions import documents as files
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


DEVELOPMENT = "render.crossplane.io/runtime"
DEVELOPMENT_TARGET = "render.crossplane.io/runtime-development-target"
STARTUP_BOUND = 600.0  # seconds a started server may take to answer: a hang, not a slow machine
CALL_TIMEOUT = 600.0  # seconds one RunFunction call may take


class RenderError(ValueError):
    """Input render cannot use: the message names the file and says what to do."""


class PipelineFailed(RenderError):
    """The pipeline refused the input: a Fatal result, or a Composition for another kind."""


def documents(paths: Iterable[Path]) -> list[dict]:
    """The objects of files, or of every YAML file below directories, in order."""
    found = []
    for path in paths:
        names = (
            sorted(path.rglob("*.yaml")) + sorted(path.rglob("*.yml")) if path.is_dir() else [path]
        )
        for name in names:
            found += [document.obj for document in files.objects(name)]
    return found


def composite_of(path: Path) -> files.Document:
    """The XR: the file's first object, with apiVersion, kind and metadata.name."""
    found = files.objects(path)
    if not found:
        raise RenderError(f"{path}: holds no object — give the XR to render")
    composite = found[0]
    for field in ("apiVersion", "kind"):
        if not isinstance(composite.obj.get(field), str) or not composite.obj[field]:
            raise RenderError(f"{path}:{composite.line}: the XR has no {field} — set it")
    if not isinstance((composite.obj.get("metadata") or {}).get("name"), str):
        raise RenderError(f"{path}:{composite.line}: the XR has no metadata.name — name it")
    return composite


def composition_of(path: Path) -> dict:
    """The Composition: a pipeline whose steps name their inputs."""
    found = files.objects(path)
    composition = found[0] if found else None
    line = composition.line if composition else 1
    if composition is None or composition.obj.get("kind") != "Composition":
        raise RenderError(
            f"{path}:{line}: not a Composition — give the Composition for the XR's kind "
            f"(compositions/pipelines/ has one for each of ours)"
        )
    steps = (composition.obj.get("spec") or {}).get("pipeline")
    if not isinstance(steps, list) or not all(isinstance(s, dict) and "step" in s for s in steps):
        raise RenderError(
            f"{path}:{line}: spec.pipeline must be a list of steps, each with `step:`"
        )
    return composition.obj


def development_target(functions_path: Path | None) -> str:
    """The address `crossplane render` calls for a Function in the Development runtime."""
    if functions_path is None:
        raise RenderError("--development-target reads the FUNCTIONS file: give one")
    for function in documents([functions_path]):
        annotations = (function.get("metadata") or {}).get("annotations") or {}
        if annotations.get(DEVELOPMENT) == "Development":
            return annotations.get(DEVELOPMENT_TARGET) or "localhost:9443"  # crossplane's default
    raise RenderError(
        f"{functions_path}: no Function in the Development runtime (annotation {DEVELOPMENT}: "
        "Development) — annotate it, or give --function-address"
    )


@contextlib.contextmanager
def function_at(address: str) -> Iterator[pipeline.Runner]:
    """A runner for a function server already running at `address` (plaintext gRPC)."""
    host, _, port = address.rpartition(":")
    try:  # nothing listening is said at once; a listener that is no gRPC server, in 10 s
        socket.create_connection((host.strip("[]") or "localhost", int(port)), timeout=10).close()
    except (OSError, ValueError):
        raise RenderError(
            f"no function server answers at {address} — start one "
            f"(`.venv/bin/function --insecure --address {address}`) or give its address"
        ) from None
    with grpc.insecure_channel(address) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=10)
        except grpc.FutureTimeoutError:
            raise RenderError(
                f"no function server answers at {address} — start one "
                f"(`.venv/bin/function --insecure --address {address}`) or give its address"
            ) from None
        yield _runner(channel, address)


def _runner(channel: grpc.Channel, address: str) -> pipeline.Runner:
    stub = grpcv1.FunctionRunnerServiceStub(channel)

    def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        try:
            return stub.RunFunction(req, timeout=CALL_TIMEOUT)
        except grpc.RpcError as error:
            raise RenderError(
                f"the function at {address} failed the call: {error.details()}"
            ) from None

    return run


@contextlib.contextmanager
def local_function() -> Iterator[pipeline.Runner]:
    """The real server (`function --insecure`) on a free loopback port, and a runner for it,
    once it answers (waited for until it does or exits, at most STARTUP_BOUND seconds)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "function"), "--insecure", "--address", address],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            with grpc.insecure_channel(address) as channel:
                _wait_until_up(channel, server, log)
                yield _runner(channel, address)
        finally:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


def _wait_until_up(channel: grpc.Channel, server: subprocess.Popen, log: Any) -> None:
    ready, started = grpc.channel_ready_future(channel), time.monotonic()
    while True:
        try:
            return ready.result(timeout=0.5)
        except grpc.FutureTimeoutError:
            pass
        if server.poll() is not None:
            log.seek(0)
            said = log.read().decode(errors="replace").strip().splitlines()
            raise RuntimeError(
                f"the function server exited ({server.returncode}): {said[-1:] or ''}"
            )
        if time.monotonic() - started > STARTUP_BOUND:
            raise RuntimeError(f"the function server did not answer within {STARTUP_BOUND:.0f} s")


def render_stream(
    run: pipeline.Runner,
    composite: dict,
    composition: dict,
    observed: Iterable[dict] = (),
    required: Iterable[dict] = (),
    include_results: bool = False,
    include_context: bool = False,
    include_full_xr: bool = False,
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
    if include_full_xr:  # `-x`: the input's spec and metadata, as crossplane render copies them
        out[0] = {
            **out[0],
            "metadata": composite.get("metadata", {}),
            "spec": composite.get("spec"),
        }
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
        raise RenderError(
            f"composition's compositeTypeRef.apiVersion and kind ({ref.get('apiVersion')}, {ref.get('kind')}) "
            f"do not match the XR's ({composite.get('apiVersion')}, {composite.get('kind')})"
        )
    if composition["spec"].get("mode", "Pipeline") != "Pipeline":
        raise RenderError("render supports only Compositions in mode Pipeline")


def rendered_composite(composite: dict, rsp: fnv1.RunFunctionResponse) -> dict:
    metadata = {"name": composite["metadata"]["name"]}
    if composite["metadata"].get("namespace"):
        metadata["namespace"] = composite["metadata"]["namespace"]
    status = StructView(rsp.desired.composite.resource).to_dict().get("status", {})
    # Render pins transition times so its output is stable.
    conditions = [
        {**c, "lastTransitionTime": "2024-01-01T00:00:00Z"}
        for c in pipeline.composite_conditions(rsp, reconciler=False)
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
