"""Metrics as the people on call read them: the function's per-handler counts, latency and
reasons, the agent's polls, writes, NVML errors and card health, and the agent's probes."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from dataclasses import dataclass

import grpc
import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from functions import metrics
from functions.agent.agent import MAX_BACKOFF_SECONDS, STALL_GRACE_SECONDS, Agent, NodeFacts
from functions.agent.nvml import FakeNvml
from functions.views import plain
from tests.support.grpc_server import free_port, function_server, wait_ready
from tests.support.patience import HANG
from tests.support.schemas import ROOT

NVML = ROOT / "tests" / "fixtures" / "nvml"
CPUINFO = ROOT / "tests" / "fixtures" / "cpuinfo"


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the endpoint, by name and sorted labels."""
    with urllib.request.urlopen(url, timeout=HANG) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=HANG) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


# --- the function server ------------------------------------------------------------------------


def catalog_request() -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.input.update(
        {"apiVersion": "fn.gpustack.ai/v1beta1", "kind": "Input", "handler": "catalog"}
    )
    req.observed.composite.resource.update(
        yaml.safe_load((ROOT / "examples" / "walkthrough" / "catalog.yaml").read_text())
    )
    return req


def test_after_one_request_the_function_endpoint_shows_the_handlers_count_and_latency():
    port = free_port()
    req = catalog_request()
    with function_server("--insecure", "--metrics-address", f"127.0.0.1:{port}") as address:
        with grpc.insecure_channel(address) as channel:
            wait_ready(channel)
            grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=HANG)
        samples = scrape(f"http://127.0.0.1:{port}/metrics")
        assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
    catalog = (("handler", "catalog"),)
    assert samples[("gpustack_function_requests_total", catalog)] == 1
    assert samples[("gpustack_function_request_duration_seconds_count", catalog)] == 1
    assert 0 < samples[("gpustack_function_request_duration_seconds_sum", catalog)] < HANG
    assert samples[("gpustack_function_request_bytes_sum", catalog)] == req.ByteSize()


@dataclass
class Case:
    name: str
    rsp: dict
    fatal: dict[str, float]
    refusals: dict[str, float]


def response(*, results=(), phase: str | None = None, conditions=()) -> dict:
    rsp = fnv1.RunFunctionResponse()
    for severity, reason in results:
        rsp.results.append(fnv1.Result(severity=severity, message="m", reason=reason))
    if phase is not None:
        rsp.desired.composite.resource.update({"status": {"phase": phase}})
    for reason in conditions:
        rsp.conditions.append(
            fnv1.Condition(type="Admitted", status=fnv1.STATUS_CONDITION_FALSE, reason=reason)
        )
    return rsp


CASES = [
    Case("a quiet response counts only the request", response(), {}, {}),
    Case(
        "a Fatal result without a reason counts as Crossplane's ComposeResources",
        response(results=[(fnv1.SEVERITY_FATAL, "")]),
        {"ComposeResources": 1},
        {},
    ),
    Case(
        "a Fatal result counts by its reason; warnings do not count",
        response(
            results=[(fnv1.SEVERITY_FATAL, "HostPathNotAllowed"), (fnv1.SEVERITY_WARNING, "X")]
        ),
        {"HostPathNotAllowed": 1},
        {},
    ),
    Case(
        "a refused Instance counts by its Admitted reason",
        response(
            results=[(fnv1.SEVERITY_WARNING, "HostPathNotAllowed")],
            phase="Refused",
            conditions=["HostPathNotAllowed"],
        ),
        {},
        {"HostPathNotAllowed": 1},
    ),
    Case(
        "a waiting Instance is no refusal",
        response(phase="Starting", conditions=["ReadingNode"]),
        {},
        {},
    ),
]


@pytest.mark.parametrize("told", ["whole", "summary"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_fatal_results_and_refusals_are_counted_by_reason(case, told):
    """Counted alike from the response and from the summary of it a worker hands the server."""
    registry = CollectorRegistry()
    counted = metrics.FunctionMetrics(registry)
    rsp = case.rsp if told == "whole" else metrics.summary_of(case.rsp)
    counted.observe("instance", 1234, 0.002, rsp)

    def by_reason(name: str) -> dict[str, float]:
        return {
            s.labels["reason"]: s.value
            for family in registry.collect()
            for s in family.samples
            if s.name == name
        }

    assert registry.get_sample_value("gpustack_function_requests_total", {"handler": "instance"})
    assert by_reason("gpustack_function_fatal_results_total") == case.fatal
    assert by_reason("gpustack_function_refusals_total") == case.refusals


def test_a_worker_hands_the_server_only_what_metrics_read_of_a_response():
    rsp = response(results=[(fnv1.SEVERITY_FATAL, "X")], phase="Refused", conditions=["Y"])
    rsp.desired.composite.resource.update({"status": {"phase": "Refused", "ledger": ["big"]}})
    rsp.desired.resources["pod"].resource.update({"kind": "Pod", "spec": {"containers": []}})
    summary = metrics.summary_of(rsp)
    assert plain(summary.desired.composite.resource) == {"status": {"phase": "Refused"}}
    assert (list(summary.results), list(summary.conditions)) == (
        list(rsp.results),
        list(rsp.conditions),
    )
    assert not summary.desired.resources
    assert metrics.summary_of(response()) == fnv1.RunFunctionResponse()


# --- the node agent -----------------------------------------------------------------------------


class FakeKube:
    def __init__(self, fail_with: Exception | None = None, stop: threading.Event | None = None):
        self.fail_with, self.stop, self.applied = fail_with, stop, []

    def node_facts(self, node: str) -> NodeFacts:
        return NodeFacts("node-t4-b-uid", 48)

    def pods_on(self, node: str) -> list[dict]:
        return []

    def apply_devices(self, devices: dict) -> None:
        if self.stop is not None:
            self.stop.set()
        if self.fail_with is not None:
            raise self.fail_with
        self.applied.append(devices)


def t4_node(registry: CollectorRegistry, kube: FakeKube, lost_card: bool = False) -> Agent:
    recording = yaml.safe_load((NVML / "node-t4-b.yaml").read_text())
    if lost_card:
        recording["devices"][2]["fail"] = {"memoryTotalBytes": "NVML_ERROR_GPU_IS_LOST"}
    return Agent(
        "node-t4-b",
        FakeNvml(recording),
        kube,
        list,
        CPUINFO / "node-t4-b.txt",
        os="linux",
        arch="amd64",
        metrics=metrics.AgentMetrics(registry),
    )


def test_the_agent_endpoint_shows_its_polls_writes_nvml_errors_and_card_health():
    registry = CollectorRegistry()
    agent = t4_node(registry, FakeKube(), lost_card=True)
    server = metrics.serve("127.0.0.1:0", {"/readyz": agent.ready}, registry=registry)
    now = [1000.0]
    agent.clock = lambda: now[0]
    try:
        agent.poll()
        agent.poll()
        now[0] += agent.resync  # the same Devices, applied again
        agent.poll()
        samples = scrape(f"http://127.0.0.1:{server.server_address[1]}/metrics")
    finally:
        server.shutdown()
    assert samples[("gpustack_agent_polls_total", (("outcome", "written"),))] == 1
    assert samples[("gpustack_agent_polls_total", (("outcome", "unchanged"),))] == 1
    assert samples[("gpustack_agent_polls_total", (("outcome", "resynced"),))] == 1
    assert samples[("gpustack_agent_writes_total", ())] == 2
    assert samples[("gpustack_agent_nvml_errors_total", ())] == 3  # the lost card, each poll
    assert samples[("gpustack_agent_nvml_available", ())] == 1
    health = {
        dict(labels)["index"]: value
        for (name, labels), value in samples.items()
        if name == "gpustack_agent_accelerator_healthy"
    }
    assert health == {"0": 1, "1": 1, "2": 0, "3": 1}


def test_a_card_that_disappears_leaves_the_health_gauge():
    registry = CollectorRegistry()
    agent = t4_node(registry, FakeKube())
    agent.poll()
    agent.nvml.recording["devices"].pop()
    agent.poll()
    uuids = {
        s.labels["uuid"]
        for family in registry.collect()
        for s in family.samples
        if s.name == "gpustack_agent_accelerator_healthy"
    }
    assert len(uuids) == 3 and "GPU-7a2b9c4d-1e3f-4a5b-8c6d-0e1f2a3b4c04" not in uuids


@dataclass
class ProbeCase:
    name: str
    fail_with: Exception | None
    seconds_later: float
    live: tuple[bool, str]
    ready: tuple[bool, str]


STALLED = 30 + MAX_BACKOFF_SECONDS + STALL_GRACE_SECONDS + 1
PROBES = [
    ProbeCase("a poll that wrote: live and ready", None, 0, (True, "ok"), (True, "ok")),
    ProbeCase(
        "a poll the API server refused: live, not ready, and why",
        ConnectionError("API server unavailable"),
        0,
        (True, "ok"),
        (False, "last poll failed: ConnectionError: API server unavailable"),
    ),
    ProbeCase(
        "no poll for longer than the period and the longest back-off: not live",
        None,
        STALLED,
        (False, f"no poll for {STALLED:.0f}s (limit {STALLED - 1:.0f}s)"),
        (True, "ok"),
    ),
]


def test_a_first_poll_that_never_ends_fails_liveness():
    now, seen = [1000.0], []
    stop = threading.Event()

    class StuckKube(FakeKube):
        def apply_devices(self, devices):
            now[0] += STALLED  # the API call hangs this long while the probe looks
            seen.append(agent.live())
            stop.set()

    agent = t4_node(CollectorRegistry(), StuckKube())
    agent.clock = lambda: now[0]
    agent.run(period=30, stop=stop)
    assert seen == [(False, f"no poll for {STALLED:.0f}s (limit {STALLED - 1:.0f}s)")]
    assert agent.live() == (True, "ok")  # it ended after all


@pytest.mark.parametrize("case", PROBES, ids=lambda c: c.name)
def test_the_agent_probes(case):
    now = [1000.0]
    stop = threading.Event()
    agent = t4_node(CollectorRegistry(), FakeKube(case.fail_with, stop))
    agent.clock = lambda: now[0]
    assert agent.ready() == (False, "no poll yet")
    assert agent.live() == (True, "starting")
    agent.run(period=30, stop=stop)
    now[0] += case.seconds_later
    assert agent.live() == case.live
    assert agent.ready() == case.ready


def test_the_probes_answer_over_http_with_their_status_code():
    agent = t4_node(CollectorRegistry(), FakeKube())
    server = metrics.serve("127.0.0.1:0", {"/healthz": agent.live, "/readyz": agent.ready})
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert get(f"{base}/healthz") == (200, "starting\n")
        assert get(f"{base}/readyz") == (503, "no poll yet\n")
        assert get(f"{base}/nothing")[0] == 404
    finally:
        server.shutdown()
