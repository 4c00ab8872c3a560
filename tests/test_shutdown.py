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
import urllib.error
import urllib.request
from collections import Counter

import grpc
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support import load
from tests.support.grpc_server import wait_ready
from tests.support.patience import HANG, exited, wait_until

CALLS = 50
NODES = 400  # about 0.4 MiB of node summaries a request
# The drain's bound (`--grace-period`), far beyond the drain these tests make: past it, calls
# still in flight are cancelled, and a busy machine answering fifty pool requests is slow.
GRACE = f"{HANG:.0f}"


def outcome(future: grpc.Future) -> str:
    try:
        future.result(timeout=HANG)
    except grpc.RpcError as error:
        return error.code().name
    return "OK"


def draining_health(channel: grpc.Channel) -> health_pb2.HealthCheckResponse | None:
    """The server's health answer once it says NOT_SERVING, else None."""
    answer = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=""), timeout=HANG
    )
    return answer if answer.status == health_pb2.HealthCheckResponse.NOT_SERVING else None


def readyz(address: str) -> tuple[int, str]:
    """The kubelet's readiness probe: `/readyz` on the metrics port."""
    try:
        with urllib.request.urlopen(f"http://{address}/readyz", timeout=HANG) as answer:
            return answer.status, answer.read().decode().strip()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode().strip()


def test_sigterm_answers_every_call_in_flight_and_exits_zero():
    req = load.pool_request(NODES)
    metrics = f"127.0.0.1:{load.free_port()}"
    args = ("--insecure", "--workers", "1", "--grace-period", GRACE, "--metrics-address", metrics)
    with load.server_process(*args) as (process, address):
        with grpc.insecure_channel(address) as channel:
            wait_ready(channel)
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            stub.RunFunction(load.small_request(), timeout=HANG)  # the worker is up
            ready_before = readyz(metrics)
            calls = [stub.RunFunction.future(req, timeout=HANG) for _ in range(CALLS)]
            wait_until(  # the first answer: all sent by now
                lambda: any(call.done() for call in calls), "the first call's answer", every=0.01
            )
            # The worker pauses: what is queued stays in flight through SIGTERM and the checks,
            # however fast the handler, and is answered once it resumes.
            with load.paused(load.descendants(process.pid)):
                process.send_signal(signal.SIGTERM)
                # Health turns NOT_SERVING in the same turn of the server's loop as it starts
                # refusing calls (functions/server.py, `shut_down`): from then on it drains.
                health = wait_until(
                    lambda: draining_health(channel), "health NOT_SERVING after SIGTERM", every=0.01
                )
                refused = stub.RunFunction.future(load.small_request(), timeout=HANG)
                late = outcome(refused)
                ready_draining = readyz(metrics)
            outcomes = Counter(outcome(call) for call in calls)
        output = exited(process, "the server to exit once drained")
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
    args = ("--insecure", "--workers", "1", "--grace-period", GRACE)
    with load.server_process(*args) as (process, address):

        def client() -> None:
            """Small calls back to back, until one is not answered (a retry goes elsewhere)."""
            with grpc.insecure_channel(address) as channel:
                wait_ready(channel)
                call = grpcv1.FunctionRunnerServiceStub(channel).RunFunction
                while True:
                    code = outcome(call.future(load.small_request(), timeout=HANG))
                    with lock:
                        outcomes[code] += 1
                        if outcomes["OK"] >= 10 * CLIENTS:
                            started.set()
                    if code != "OK":
                        return

        clients = [threading.Thread(target=client) for _ in range(CLIENTS)]
        for thread in clients:
            thread.start()
        assert started.wait(HANG), f"not every client busy in {HANG:.0f} s: {outcomes}"
        process.send_signal(signal.SIGTERM)
        wait_until(
            lambda: not any(thread.is_alive() for thread in clients),
            lambda: f"every client turned away after SIGTERM: {outcomes}",
        )
        output = exited(process, "the server to exit once drained")
    assert process.returncode == 0, output
    assert set(outcomes) <= {"OK", "UNAVAILABLE"}, outcomes  # none CANCELLED
    (stopped,) = load.logged(output, "stopped")
    assert stopped["cancelled"] == 0, stopped
    assert stopped["refused"] >= 1, stopped  # the drain saw the calls that came after SIGTERM
