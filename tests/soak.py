"""`make soak`: the long reliability runs, each printed as a figure (docs/reliability.md).

- fuzz: mutated real requests (tests/support/fuzz.py) through the frame and through plain dicts,
  every failure counted by kind (escaped exception, dropped desired state, broken echo);
- load: 100 clients × 200 requests over mutual TLS against the real server;
- drain: SIGTERM with fifty pool requests queued behind one worker;
- latency: a small request sent while a 40 MiB one is handled, with 4 workers and with 1;
- agent: a card whose NVML readings flap, and random read failures, over many polls; and the
  real `gpustack-fn agent` given SIGTERM while its call to a silent API server hangs;
- determinism: every recorded request under several PYTHONHASHSEEDs (tests/test_determinism.py).

Times are this machine's, on this run: read them as ratios. Usage:
`python -m tests.soak [--fuzz N] [--clients N] [--calls N] [--only NAME ...] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from functions import frame
from functions.handlers import HANDLERS
from functions.handlers.base import InputError, Request
from functions.server import run_function
from functions.views import ShapeError
from tests.support import corpus, fuzz, load
from tests.support.grpc_server import throwaway_pki, wait_ready

BIG = [("grpc.max_send_message_length", 2**30), ("grpc.max_receive_message_length", 2**30)]


def soak_fuzz(per_handler: int, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every failure of every mutated request, by kind; the frame's and the dict path's."""
    with fuzz.memory_guard():
        return _soak_fuzz(per_handler, [h for h in sorted(HANDLERS) if h not in skip])


def _soak_fuzz(per_handler: int, handlers: list[str]) -> dict[str, Any]:
    chance, failures, known = random.Random(20261130), Counter(), Counter()
    examples: dict[str, str] = {}
    handlers = [h for h in handlers if h in set(corpus.handlers())]
    for handler in handlers:
        for _ in range(per_handler):
            case = fuzz.random_case(handler, chance)
            for kind in _fuzz_one(handler, case):
                defect = fuzz.known_defect(
                    handler, frame.request_of(fuzz.request_of(case.document()))
                )
                if defect and kind.startswith("escaped"):
                    known[defect] += 1
                    continue
                failures[kind] += 1
                examples.setdefault(kind, repr(case)[:400])
    return {
        "requests": per_handler * len(handlers),
        "handlers": handlers,
        "failures": dict(failures),
        "known_defects": dict(known),
        "examples": examples,
    }


def _fuzz_one(handler: str, case: fuzz.Case) -> list[str]:
    doc = case.document()
    req = fuzz.request_of(doc)
    kinds = []
    rsp = run_function(req)
    for message in (r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL):
        if " handler failed: " in message:
            kinds.append(f"escaped exception ({handler}): {message.split(': ', 1)[1][:80]}")
    earlier = rsp.desired.resources.get("from-an-earlier-step")
    if earlier != req.desired.resources["from-an-earlier-step"]:
        kinds.append(f"dropped desired state ({handler})")
    if rsp.meta.tag != req.meta.tag or rsp.context != req.context:
        kinds.append(f"broken echo ({handler})")
    served = HANDLERS[handler]
    composite, observed, required = fuzz.plain_request(doc)
    request = Request.of(composite, observed, required)
    try:
        desired = served.compose(request.with_requirements(served.requirements(request)))
        json.dumps([desired.resources, desired.status])
    except (InputError, ShapeError):
        pass
    except Exception as error:
        kinds.append(f"escaped exception, dict path ({handler}): {type(error).__name__}")
    return kinds


def soak_load(clients: int, calls: int) -> dict[str, Any]:
    """`clients` threads, each on its own mutual-TLS channel, `calls` requests each."""
    requests = [fuzz.request_of(doc) for h in corpus.handlers() for doc in fuzz.documents_of(h)]
    with tempfile.TemporaryDirectory() as directory:
        pki = throwaway_pki(Path(directory))
        with load.server_process("--tls-certs-dir", directory) as (_, address):
            creds = grpc.ssl_channel_credentials(pki["ca"], pki["key"], pki["cert"])
            outcomes, latencies = Counter(), []
            lock = threading.Lock()

            def client(number: int) -> None:
                with grpc.secure_channel(address, creds) as channel:
                    wait_ready(channel, 60)
                    stub = grpcv1.FunctionRunnerServiceStub(channel)
                    for call in range(calls):
                        req = requests[(number + call) % len(requests)]
                        started = time.perf_counter()
                        try:
                            rsp = stub.RunFunction(req, timeout=120)
                            code = "OK" if rsp.meta.tag == req.meta.tag else "WRONG TAG"
                        except grpc.RpcError as error:
                            code = error.code().name
                        with lock:
                            outcomes[code] += 1
                            latencies.append(time.perf_counter() - started)

            started = time.perf_counter()
            threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            wall = time.perf_counter() - started
    latencies.sort()
    return {
        "clients": clients,
        "calls": clients * calls,
        "outcomes": dict(outcomes),
        "seconds": round(wall, 1),
        "per_second": round(clients * calls / wall),
        "p50_ms": round(latencies[len(latencies) // 2] * 1000, 1),
        "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 1),
    }


def soak_drain(calls: int = 50, nodes: int = 400) -> dict[str, Any]:
    """SIGTERM while `calls` pool requests wait behind one worker: what became of each."""
    req = load.pool_request(nodes)
    args = ("--insecure", "--workers", "1", "--grace-period", "60")
    with load.server_process(*args) as (process, address):
        with grpc.insecure_channel(address) as channel:
            wait_ready(channel)
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            stub.RunFunction(load.small_request(), timeout=30)
            futures = [stub.RunFunction.future(req, timeout=120) for _ in range(calls)]
            while not any(f.done() for f in futures):
                time.sleep(0.01)
            process.send_signal(signal.SIGTERM)
            outcomes = Counter(_outcome(f) for f in futures)
        output, _ = process.communicate(timeout=120)
    draining = load.logged(output, "draining")
    return {
        "calls": calls,
        "in_flight_at_sigterm": draining[0]["in_flight"] if draining else None,
        "outcomes": dict(outcomes),
        "cancelled_by_server": load.logged(output, "stopped")[0]["cancelled"],
        "exit_code": process.returncode,
    }


def _outcome(future: grpc.Future) -> str:
    try:
        future.result(timeout=120)
    except grpc.RpcError as error:
        return error.code().name
    return "OK"


def soak_latency(mebibytes: float = 40, workers: tuple[str, ...] = ("4", "1")) -> dict[str, Any]:
    """A small request's latency alone, and while a `mebibytes` pool request is handled."""
    big = load.pool_request(load.nodes_for(mebibytes))
    small = load.small_request()
    found: dict[str, Any] = {"request_mib": round(big.ByteSize() / 2**20, 1)}
    for count in workers:
        args = ("--insecure", "--workers", count, "--max-recv-message-size", "128")
        with load.server_process(*args) as (_, address), grpc.insecure_channel(address, BIG) as ch:
            wait_ready(ch)
            stub = grpcv1.FunctionRunnerServiceStub(ch)
            call = stub.RunFunction
            alone = [_timed(lambda call=call: call(small, timeout=30)) for _ in range(30)]
            stub.RunFunction(big, timeout=300)  # warm
            found[f"workers={count}"] = _during(stub, big, small) | {
                "small_alone_median_ms": round(statistics.median(alone) * 1000, 1)
            }
    return found


def _during(stub: Any, big: fnv1.RunFunctionRequest, small: fnv1.RunFunctionRequest) -> dict:
    done: dict[str, float] = {}
    large = threading.Thread(
        target=lambda: done.update(seconds=_timed(lambda: stub.RunFunction(big, timeout=300)))
    )
    large.start()
    time.sleep(0.05)
    during = []
    while large.is_alive():
        during.append(_timed(lambda: stub.RunFunction(small, timeout=300)))
        time.sleep(0.01)
    large.join()
    worst = max(during)
    return {
        "large_s": round(done["seconds"], 2),
        "small_sent_during": len(during),
        "small_median_ms": round(statistics.median(during) * 1000, 1),
        "small_max_ms": round(worst * 1000, 1),
        "small_max_over_large": round(worst / done["seconds"], 3),
    }


def _timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def soak_agent(polls: int = 1000) -> dict[str, Any]:
    """Writes under a flapping card, and identities under random read failures."""
    import yaml

    from functions.agent.agent import Agent, NodeFacts
    from functions.agent.nvml import FakeNvml

    fixture = corpus.ROOT / "tests" / "fixtures" / "nvml" / "node-t4-b.yaml"

    class Kube:
        def __init__(self) -> None:
            self.applied: list = []

        def node_facts(self, node):
            return NodeFacts("node-t4-b-uid", 48)

        def pods_on(self, node):
            return []

        def apply_devices(self, devices):
            self.applied.append(devices)

    def agent(recording):
        kube = Kube()
        return Agent(
            "node-t4-b", FakeNvml(recording), kube, list, Path("/nonexistent"), "linux", "amd64"
        ), kube

    recording = yaml.safe_load(fixture.read_text())
    flapping, kube = agent(recording)
    for poll in range(polls):
        recording["devices"][2]["fail"] = {"uuid": "NVML_ERROR_UNKNOWN"} if poll % 2 else {}
        flapping.poll()
    flap_writes = len(kube.applied) - 1  # after the first report
    recording = yaml.safe_load(fixture.read_text())
    uuids = {c["uuid"] for c in recording["devices"]}
    flaky, kube = agent(recording)
    flaky.poll()
    chance = random.Random(7)
    for _ in range(polls):
        for card in recording["devices"]:
            card["fail"] = {"uuid": "NVML_ERROR_UNKNOWN"} if chance.random() < 0.3 else {}
        flaky.poll()
    changed = sum(
        {c["uuid"] for c in written["spec"]["accelerators"][0]["devices"]} != uuids
        for written in kube.applied
    )
    return {
        "polls": polls,
        "writes_under_flapping": flap_writes,
        "writes_under_30pct_random_failures": len(kube.applied) - 1,
        "writes_with_a_changed_identity": changed,
    }


def soak_agent_sigterm() -> dict[str, Any]:
    """`gpustack-fn agent` against an API server that never answers, given SIGTERM mid-call."""
    import socket
    import subprocess

    root = corpus.ROOT
    with tempfile.TemporaryDirectory() as directory, socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        kubeconfig = Path(directory) / "kubeconfig"
        kubeconfig.write_text(_KUBECONFIG.format(port=silent.getsockname()[1]))
        agent = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gpustack-fn"),
                "agent",
                "--node-name=node-a10g",
                f"--nvml-fixture={root / 'tests/fixtures/nvml/node-a10g.yaml'}",
                f"--cpuinfo={root / 'tests/fixtures/cpuinfo/node-a10g.txt'}",
                f"--pod-resources-socket={directory}/kubelet.sock",
                "--api-timeout=60",
            ],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(3)  # started, and its first poll hangs on the silent API server
        signalled = time.perf_counter()
        agent.send_signal(signal.SIGTERM)
        code = agent.wait(timeout=60)
        return {
            "api_timeout_s": 60,
            "exit_code": code,
            "stopped_in_s": round(time.perf_counter() - signalled, 1),
        }


_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: silent, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: nobody, user: {{}}}}]
contexts: [{{name: silent, context: {{cluster: silent, user: nobody}}}}]
current-context: silent
"""


def soak_determinism() -> dict[str, Any]:
    from tests import test_determinism

    runs = [test_determinism.digests(seed) for seed in test_determinism.SEEDS]
    mismatched = sum(any(run[i] != runs[0][i] for run in runs) for i in range(len(runs[0])))
    return {
        "seeds": list(test_determinism.SEEDS),
        "responses": len(runs[0]),
        "mismatched": mismatched,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak")
    parser.add_argument("--fuzz", type=int, default=2000, help="mutated requests per handler")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--calls", type=int, default=200, help="requests per client")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--skip-handler", nargs="*", default=(), help="handlers not to fuzz")
    parser.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    options = parser.parse_args(argv)
    logging.configure(logging.Level.DISABLED)
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "fuzz": lambda: soak_fuzz(options.fuzz, tuple(options.skip_handler)),
        "load": lambda: soak_load(options.clients, options.calls),
        "drain": soak_drain,
        "latency": soak_latency,
        "agent": soak_agent,
        "agent_sigterm": soak_agent_sigterm,
        "determinism": soak_determinism,
    }
    figures = {}
    for name, run in runs.items():
        if options.only is None or name in options.only:
            started = time.perf_counter()
            figures[name] = run()
            print(
                f"{name} ({time.perf_counter() - started:.0f} s):",
                json.dumps(figures[name], indent=1),
            )
            sys.stdout.flush()
    if options.out:
        options.out.parent.mkdir(parents=True, exist_ok=True)
        options.out.write_text(json.dumps(figures, indent=1) + "\n")
    return 1 if _failed(figures) else 0


def _failed(figures: dict[str, Any]) -> bool:
    """Whether a figure breaks a promise (timings excepted: they are this machine's)."""
    return bool(
        figures.get("fuzz", {}).get("failures")
        or set(figures.get("load", {}).get("outcomes", {"OK": 0})) != {"OK"}
        or "CANCELLED" in figures.get("drain", {}).get("outcomes", {})
        or figures.get("drain", {}).get("exit_code", 0) != 0
        or figures.get("agent", {}).get("writes_under_flapping", 0)
        or figures.get("agent", {}).get("writes_with_a_changed_identity", 0)
        or figures.get("agent_sigterm", {}).get("exit_code", 0) != 0
        or figures.get("determinism", {}).get("mismatched", 0)
    )


if __name__ == "__main__":
    sys.exit(main())
