"""Prometheus metrics of the function server and the node agent, and the endpoint serving them.

What this module decides, and why:
- Where metrics are observed: each at the one boundary where it happens. The server counts a
  request in `RunFunction` (functions/server.py) and reads what came of it from the response it
  returns, so the frame and the handlers stay unaware of metrics; the agent counts in its poll
  loop (functions/agent/agent.py).
- Labels stay bounded: `handler` is a served handler's name or `unknown`; `reason` is a result's
  or a condition's reason, which are the constants of functions/core/reasons.py. A Fatal result
  without a reason reads as `ComposeResources`, the reason Crossplane gives it. No object names,
  messages or UUIDs as labels, except the agent's per-card health (a node has a handful).
- One registry per process, prometheus_client's default, so the process_* and python_* families
  come along. Each side's families are created on first use, so the function's endpoint shows
  no agent families and the other way round.
- Off unless asked: `--metrics-address` (env `METRICS_ADDRESS`) is empty by default, because the
  same console scripts run locally (render, tests, `crossplane render` in Development mode)
  where a fixed port would collide; the shipped manifests set `:8080` (docs/operations.md).
- One small HTTP server per process: `/metrics` is the exposition; `/healthz` and `/readyz`
  answer 200 or 503 from checks the process hands in (the agent's probes use them).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from functions.core import reasons

UNKNOWN_HANDLER = "unknown"
DEFAULT_RESULT_REASON = "ComposeResources"  # what Crossplane calls a result without a reason
# Latency: a trivial request takes about a millisecond, a 500-object pool tens (reference §6).
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Request size: from a bare XR (~1 KiB) to the 64 MiB receive limit, by fours.
BYTE_BUCKETS = tuple(1024 * 4**n for n in range(10))

Check = Callable[[], tuple[bool, str]]


# --- the function server ------------------------------------------------------------------------


class FunctionMetrics:
    """Per handler: requests, latency, request bytes, Fatal results and refusals by reason."""

    def __init__(self, registry: CollectorRegistry = REGISTRY):
        self.requests = Counter(
            "gpustack_function_requests",
            "RunFunction requests served, by the handler the step input names.",
            ["handler"],
            registry=registry,
        )
        self.latency = Histogram(
            "gpustack_function_request_duration_seconds",
            "Time to answer one RunFunction request.",
            ["handler"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.request_bytes = Histogram(
            "gpustack_function_request_bytes",
            "Size of each RunFunction request on the wire.",
            ["handler"],
            buckets=BYTE_BUCKETS,
            registry=registry,
        )
        self.fatal = Counter(
            "gpustack_function_fatal_results",
            "Fatal results returned (the pipeline stopped), by reason.",
            ["handler", "reason"],
            registry=registry,
        )
        self.refusals = Counter(
            "gpustack_function_refusals",
            "Composites refused (phase Refused: nothing composed until the spec changes), by reason.",
            ["handler", "reason"],
            registry=registry,
        )

    def observe(
        self, handler: str, request_bytes: int, seconds: float, rsp: fnv1.RunFunctionResponse
    ) -> None:
        """Count one answered request and what its response says."""
        self.requests.labels(handler).inc()
        self.latency.labels(handler).observe(seconds)
        self.request_bytes.labels(handler).observe(request_bytes)
        for reason in fatal_reasons(rsp):
            self.fatal.labels(handler, reason).inc()
        refused = refusal_reason(rsp)
        if refused is not None:
            self.refusals.labels(handler, refused).inc()


def summary_of(rsp: fnv1.RunFunctionResponse) -> fnv1.RunFunctionResponse:
    """All of a response that `observe` reads: its results, its conditions and its composite's
    desired phase — a worker hands this to the server, never the whole response again."""
    found = fnv1.RunFunctionResponse(results=rsp.results, conditions=rsp.conditions)
    status = rsp.desired.composite.resource.fields.get("status")
    if status is not None and "phase" in status.struct_value.fields:
        phase = status.struct_value.fields["phase"]
        found.desired.composite.resource.fields["status"].struct_value.fields["phase"].CopyFrom(
            phase
        )
    return found


def fatal_reasons(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [
        r.reason or DEFAULT_RESULT_REASON for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL
    ]


def refusal_reason(rsp: fnv1.RunFunctionResponse) -> str | None:
    """The reason a composite was refused (its desired phase is Refused), else None."""
    status = rsp.desired.composite.resource.fields.get("status")
    if status is None or not status.HasField("struct_value"):
        return None
    phase = status.struct_value.fields.get("phase")
    if phase is None or phase.string_value != reasons.REFUSED:
        return None
    for condition in rsp.conditions:
        if condition.type == reasons.ADMITTED and condition.status == fnv1.STATUS_CONDITION_FALSE:
            return condition.reason
    return DEFAULT_RESULT_REASON


@functools.cache
def function_metrics() -> FunctionMetrics:
    """The server's metrics, in the default registry (created on first use)."""
    return FunctionMetrics()


# --- the node agent -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Card:
    """One card's health as the agent read it."""

    uuid: str
    index: int
    product: str
    healthy: bool


# How an agent's poll ended: its Devices applied because it changed, applied again though it did
# not (the resync), not applied, or the poll failed.
WRITTEN, RESYNCED, UNCHANGED, FAILED = "written", "resynced", "unchanged", "failed"


class AgentMetrics:
    """Polls by outcome, Devices writes, NVML errors and availability, each card's health."""

    def __init__(self, registry: CollectorRegistry = REGISTRY):
        self.polls = Counter(
            "gpustack_agent_polls",
            "Polls of NVML, the kubelet and the API server, by outcome (written, resynced, "
            "unchanged, failed).",
            ["outcome"],
            registry=registry,
        )
        self.writes = Counter(
            "gpustack_agent_writes", "Devices objects applied to the API server.", registry=registry
        )
        self.nvml_errors = Counter(
            "gpustack_agent_nvml_errors", "NVML calls that failed.", registry=registry
        )
        self.nvml_available = Gauge(
            "gpustack_agent_nvml_available",
            "1 when NVML answered on the last poll, 0 when it is missing (a CPU-only node).",
            registry=registry,
        )
        self.healthy = Gauge(
            "gpustack_agent_accelerator_healthy",
            "1 when the card read healthy on the last poll, 0 when not (see unhealthyReason).",
            ["uuid", "index", "product"],
            registry=registry,
        )
        self.last_poll = Gauge(
            "gpustack_agent_last_poll_timestamp_seconds",
            "Unix time of the last poll that succeeded.",
            registry=registry,
        )
        self._cards: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def polled(self, outcome: str) -> None:
        """A poll that succeeded: WRITTEN, RESYNCED or UNCHANGED."""
        self.polls.labels(outcome).inc()
        if outcome != UNCHANGED:
            self.writes.inc()
        self.last_poll.set_to_current_time()

    def poll_failed(self) -> None:
        self.polls.labels(FAILED).inc()

    def nvml_read(self, available: bool, errors: int, cards: list[Card]) -> None:
        """What one NVML reading found; cards gone since the last one leave the gauge."""
        self.nvml_available.set(1 if available else 0)
        self.nvml_errors.inc(errors)
        seen = {(c.uuid, str(c.index), c.product): c.healthy for c in cards}
        with self._lock:
            for gone in self._cards - set(seen):
                self.healthy.remove(*gone)
            for labels, healthy in seen.items():
                self.healthy.labels(*labels).set(1 if healthy else 0)
            self._cards = set(seen)


@functools.cache
def agent_metrics() -> AgentMetrics:
    """The agent's metrics, in the default registry (created on first use)."""
    return AgentMetrics()


# --- the endpoint -------------------------------------------------------------------------------


def parse_address(address: str) -> tuple[str, int]:
    """`:8080` → ("0.0.0.0", 8080); `127.0.0.1:0` → a free loopback port."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"metrics address {address!r}: expected HOST:PORT or :PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def serve(
    address: str,
    checks: Mapping[str, Check] | None = None,
    registry: CollectorRegistry = REGISTRY,
) -> ThreadingHTTPServer:
    """Serve /metrics and the `checks` (path → check) on `address` from a daemon thread."""
    routes = dict(checks or {})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in routes:
                ok, message = routes[path]()
                self._answer(200 if ok else 503, f"{message}\n".encode(), "text/plain")
            else:
                self._answer(404, b"not found\n", "text/plain")

        def _answer(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args) -> None:  # scrapes are not news
            pass

    server = ThreadingHTTPServer(parse_address(address), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def always_ok() -> tuple[bool, str]:
    return True, "ok"
