"""SIGTERM under load: every call accepted is answered, new ones are turned away, exit 0.

The real server (`function`) with one worker and fifty pool requests sent at once. After the
first answer the worker is paused (SIGSTOP), so most calls wait in line when SIGTERM arrives
however fast the handler is; it resumes once the draining server has been probed. While it
drains, health says NOT_SERVING, `/readyz` says 503 and a new call is refused with UNAVAILABLE
(Crossplane retries it); every call the server had accepted is answered, none CANCELLED; then
the process exits 0. (A call still on the wire at SIGTERM is new: refused.) The figures (how
many were in flight) go to the log; this test asserts the outcomes, never a time.

Small calls never wait in the server's own count: each is answered in about a millisecond, so
between two of them none is in flight. Under fifty clients SIGTERM once found `in_flight 0`,
stopped gRPC at once, and gRPC cancelled the 47 calls it had accepted and still held queued
(issue 35). Now the drain ends only when none is in flight and none has arrived for a moment:
every call is answered or refused, none CANCELLED.
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

import grpc
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support import load
from tests.support.grpc_server import wait_ready

CALLS = 50
NODES = 400  # about 0.4 MiB of node summaries a request


def outcome(future: grpc.Future) -> str:
    try:
        future.result(timeout=120)
    except grpc.RpcError as error:
        return error.code().name
    return "OK"


def readyz(address: str) -> tuple[int, str]:
    """The kubelet's readiness probe: `/readyz` on the metrics port."""
    try:
        with urllib.request.urlopen(f"http://{address}/readyz", timeout=10) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode().strip()


def test_sigterm_answers_every_call_in_flight_and_exits_zero():
    req = load.pool_request(NODES)
    metrics = f"127.0.0.1:{load.free_port()}"
    args = ("--insecure", "--workers", "1", "--grace-period", "60", "--metrics-address", metrics)
    with load.server_process(*args) as (process, address):
        with grpc.insecure_channel(address) as channel:
            wait_ready(channel)
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            stub.RunFunction(load.small_request(), timeout=30)  # the worker is up
            ready_before = readyz(metrics)
            calls = [stub.RunFunction.future(req, timeout=120) for _ in range(CALLS)]
            while not any(call.done() for call in calls):  # the first answer: all sent by now
                time.sleep(0.01)
            # The worker pauses: what is queued stays in flight through SIGTERM and the checks,
            # however fast the handler, and is answered once it resumes.
            with load.paused(load.descendants(process.pid)):
                process.send_signal(signal.SIGTERM)
                time.sleep(0.2)
                health = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=10
                )
                refused = stub.RunFunction.future(load.small_request(), timeout=30)
                late = outcome(refused)
                ready_draining = readyz(metrics)
            outcomes = Counter(outcome(call) for call in calls)
        output, _ = process.communicate(timeout=60)
    draining = load.logged(output, "draining")
    assert process.returncode == 0, output
    assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert ready_before[0] == 200
    assert ready_draining == (503, "draining: this replica is shutting down; retry on another")
    assert late == "UNAVAILABLE"
    # Every call is answered or, if it reached the server after SIGTERM, turned away; none is
    # CANCELLED, and every call in flight at SIGTERM (and the one answered before) is answered.
    assert set(outcomes) <= {"OK", "UNAVAILABLE"} and sum(outcomes.values()) == CALLS, outcomes
    assert len(draining) == 1 and draining[0]["in_flight"] > 1, draining  # it did drain
    assert outcomes["OK"] >= draining[0]["in_flight"] + 1, (outcomes, draining)
    assert load.logged(output, "stopped")[0]["cancelled"] == 0


CLIENTS = 50


def test_sigterm_under_fifty_clients_of_small_calls_answers_or_refuses_every_one():
    outcomes: Counter[str] = Counter()
    lock, started = threading.Lock(), threading.Event()
    args = ("--insecure", "--workers", "1", "--grace-period", "30")
    with load.server_process(*args) as (process, address):

        def client() -> None:
            """Small calls back to back, until one is not answered (a retry goes elsewhere)."""
            with grpc.insecure_channel(address) as channel:
                wait_ready(channel, 60)
                call = grpcv1.FunctionRunnerServiceStub(channel).RunFunction
                while True:
                    code = outcome(call.future(load.small_request(), timeout=60))
                    with lock:
                        outcomes[code] += 1
                        if outcomes["OK"] >= 10 * CLIENTS:
                            started.set()
                    if code != "OK":
                        return

        clients = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for thread in clients:
            thread.start()
        assert started.wait(120), outcomes  # every client busy
        process.send_signal(signal.SIGTERM)
        for thread in clients:
            thread.join(120)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    assert set(outcomes) <= {"OK", "UNAVAILABLE"}, outcomes  # none CANCELLED
    (stopped,) = load.logged(output, "stopped")
    assert stopped["cancelled"] == 0, stopped
    assert stopped["refused"] >= 1, stopped  # the drain saw the calls that came after SIGTERM
