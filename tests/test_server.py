"""The function server over real gRPC on loopback: dispatch, echo, health, TLS, determinism."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from crossplane.function.proto.v1beta1 import run_function_pb2_grpc as grpcv1beta1
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.support import load
from tests.support.grpc_server import function_server, throwaway_pki, wait_ready
from tests.support.patience import HANG, exited, wait_until

VALID = "instancetypeflavor"
HANDLERS = "catalog, devices, gpuclass, instance, instancepersistentvolume, instancetype, instancetypeflavor, kubernetesnodes"


def request(handler: str | None, kind: str = "InstanceTypeFlavor") -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "tag-1"
    step_input = {"apiVersion": "fn.gpustack.ai/v1beta1", "kind": "Input"}
    if handler is not None:
        step_input["handler"] = handler
    req.input.update(step_input)
    req.observed.composite.resource.update(
        {"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": kind, "metadata": {"name": "x"}}
    )
    req.desired.resources["from-an-earlier-step"].resource.update(
        {"apiVersion": "v1", "kind": "ConfigMap"}
    )
    req.desired.resources["from-an-earlier-step"].ready = fnv1.READY_TRUE
    req.context.update({"apiextensions.crossplane.io/environment": {"region": "eu"}})
    return req


@pytest.fixture(scope="module")
def insecure_address():
    with function_server("--insecure") as address:
        with grpc.insecure_channel(address) as channel:
            wait_ready(channel)
        yield address


def call(address: str, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    with grpc.insecure_channel(address) as channel:
        return grpcv1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=HANG)


def test_unknown_handler_is_fatal_and_names_the_valid_ones(insecure_address):
    req = request("gpus")
    rsp = call(insecure_address, req)
    assert [(r.severity, r.message) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, f"input.handler: unknown handler 'gpus'; valid handlers: {HANDLERS}")
    ]
    assert rsp.meta.tag == "tag-1"
    assert rsp.desired == req.desired
    assert rsp.context == req.context


def test_missing_handler_and_wrong_input_kind_are_fatal(insecure_address):
    rsp = call(insecure_address, request(None))
    assert rsp.results[0].message == f"input.handler: is required; set it to one of {HANDLERS}"
    req = request(VALID)
    req.input.update({"kind": "Other"})
    rsp = call(insecure_address, req)
    assert rsp.results[0].severity == fnv1.SEVERITY_FATAL
    assert rsp.results[0].message.startswith(
        "input: expected apiVersion fn.gpustack.ai/v1beta1, kind Input"
    )


def test_a_composite_of_another_kind_is_refused(insecure_address):
    rsp = call(insecure_address, request(VALID, kind="Instance"))
    assert rsp.results[0].severity == fnv1.SEVERITY_FATAL
    assert rsp.results[0].message.startswith(
        "input.handler: handler 'instancetypeflavor' serves InstanceTypeFlavor; the composite is a Instance"
    )
    assert rsp.desired == request(VALID).desired


def test_a_handler_keeps_earlier_steps_and_sets_readiness(insecure_address):
    req = request(VALID)
    rsp = call(insecure_address, req)
    assert list(rsp.results) == []
    assert (
        rsp.desired.resources["from-an-earlier-step"]
        == req.desired.resources["from-an-earlier-step"]
    )
    assert rsp.desired.composite.ready == fnv1.READY_TRUE
    assert rsp.meta.ttl.seconds == 3600


def test_same_request_same_response_bytes(insecure_address):
    payload = request(VALID).SerializeToString()
    with grpc.insecure_channel(insecure_address) as channel:
        raw = channel.unary_unary(
            "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction",
            request_serializer=None,
            response_deserializer=None,
        )
        assert raw(payload, timeout=HANG) == raw(payload, timeout=HANG)


def test_v1beta1_is_served_too(insecure_address):
    req = fnv1beta1.RunFunctionRequest.FromString(request("gpus").SerializeToString())
    with grpc.insecure_channel(insecure_address) as channel:
        rsp = grpcv1beta1.FunctionRunnerServiceStub(channel).RunFunction(req, timeout=HANG)
    assert rsp.results[0].message.startswith("input.handler: unknown handler 'gpus'")


def test_health_reports_serving(insecure_address):
    with grpc.insecure_channel(insecure_address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "apiextensions.fn.proto.v1.FunctionRunnerService"):
            answer = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=HANG)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_mutual_tls_serves_clients_with_a_certificate_and_refuses_others(tmp_path):
    client = throwaway_pki(tmp_path)
    with function_server("--tls-certs-dir", str(tmp_path)) as address:
        good = grpc.ssl_channel_credentials(client["ca"], client["key"], client["cert"])
        with grpc.secure_channel(address, good) as channel:
            wait_ready(channel)
            rsp = grpcv1.FunctionRunnerServiceStub(channel).RunFunction(
                request("gpus"), timeout=HANG
            )
            assert rsp.results[0].severity == fnv1.SEVERITY_FATAL
        anonymous = grpc.ssl_channel_credentials(client["ca"])
        with grpc.secure_channel(address, anonymous) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request("gpus"), timeout=HANG)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError):
            grpcv1.FunctionRunnerServiceStub(channel).RunFunction(request("gpus"), timeout=HANG)


def test_gpustack_fn_serve_is_the_same_server():
    from click.testing import CliRunner

    from functions.cli import main

    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0
    assert "--tls-certs-dir" in result.output and "--max-recv-message-size" in result.output
    assert "[default: 64]" in result.output


@pytest.mark.parametrize("depth", [48, 1000], ids=["48 levels", "1000 levels"])
def test_a_deeply_nested_observed_object_is_served_not_failed_in_the_transport(
    insecure_address, depth
):
    from google.protobuf import struct_pb2

    inner = struct_pb2.Struct()
    inner.fields["a"].string_value = "leaf"
    for _ in range(depth - 1):
        outer = struct_pb2.Struct()
        outer.fields["a"].struct_value.CopyFrom(inner)
        inner = outer
    req = request(VALID)
    req.observed.resources["deep"].resource.fields["spec"].struct_value.CopyFrom(inner)
    rsp = call(insecure_address, req)  # upb's default limit answered UNKNOWN from 32 levels on
    assert list(rsp.results) == [] and rsp.desired.composite.ready == fnv1.READY_TRUE


def test_serve_takes_the_worker_and_grace_period_flags():
    from click.testing import CliRunner

    from functions.cli import main

    result = CliRunner().invoke(main, ["serve", "--help"])
    assert "--workers" in result.output and "--grace-period" in result.output
    assert "[default: 4;" in result.output and "[default: 30.0;" in result.output


def test_a_small_request_is_answered_while_every_worker_is_busy():
    """Requests of at most INLINE_MAX_BYTES are handled on the server's loop: with its only
    worker stopped in the middle of a pool's request, an Instance-sized one is still answered,
    and the pool's is answered once the worker resumes."""
    from functions.server import INLINE_MAX_BYTES
    from tests.support import load

    pool, small = load.pool_request(200), load.small_request()
    assert small.ByteSize() <= INLINE_MAX_BYTES < pool.ByteSize()
    with load.server_process("--insecure", "--workers", "1") as (process, address):
        with grpc.insecure_channel(address) as channel:
            wait_ready(channel)
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            with load.paused(load.descendants(process.pid)):
                waiting = stub.RunFunction.future(pool, timeout=HANG)
                answer = stub.RunFunction(small, timeout=HANG)
                assert not waiting.done()  # its worker is stopped
            assert answer.meta.tag == small.meta.tag
            assert waiting.result(timeout=HANG).meta.tag == pool.meta.tag
        process.terminate()
        exited(process, "the server to exit on SIGTERM")


def _memory_mib(pid: int) -> tuple[float, float]:
    """A process's resident memory now and at its peak, in MiB, from /proc."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    status = dict(line.split(":", 1) for line in lines)
    now, peak = (int(status[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM"))
    return now, peak


HANDED_BACK_MIB = 24  # well above the few MiB an untrimmed heap gives back, well below a trim's


def test_idle_processes_hand_back_what_large_requests_took():
    """A pool's request parses to several times its size and the worker keeps each parsed
    summary: without handing freed pages back, a worker stays at its largest request's peak
    while idle, and the server at what the requests' bytes took (the pod holds both). Both give
    it back once idle (functions/memory.py), never while a request waits on them."""
    from functions.memory import MALLOC_TRIM

    if MALLOC_TRIM is None:
        pytest.skip("this C library cannot hand freed memory back (no malloc_trim)")
    pool = load.pool_request(load.nodes_for(24))
    with load.server_process("--insecure", "--workers", "1") as (process, address):
        with grpc.insecure_channel(address) as channel:
            wait_ready(channel)
            (worker,) = _workers(process.pid)
            pids = (process.pid, worker)
            before = {pid: _memory_mib(pid)[0] for pid in pids}
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            for _ in range(3):
                assert stub.RunFunction(pool, timeout=HANG).meta.tag == pool.meta.tag
            busy = {pid: _memory_mib(pid) for pid in pids}  # (now, peak)
            took = {pid: busy[pid][1] - before[pid] for pid in pids}
            for pid in pids:
                assert took[pid] > 64, "the requests went through this process"
            # Each process keeps what it holds for good (a worker's parsed summaries: 100 MiB and
            # more) and hands back the rest of its peak, 40-60 MiB here: without a trim, both stay
            # within a few MiB of it. Each trims once idle (functions.memory.IDLE_SECONDS); a busy
            # machine may run the trim late, so this waits on the memory itself.
            idle: dict[int, float] = {}

            def handed_back() -> bool:
                idle.update({pid: _memory_mib(pid)[0] for pid in pids})
                return all(busy[pid][1] - idle[pid] > HANDED_BACK_MIB for pid in pids)

            def what() -> str:
                return f"each to hand back over {HANDED_BACK_MIB} MiB once idle: " + ", ".join(
                    f"{'server' if pid == process.pid else 'worker'} idle {idle[pid]:.0f} MiB, "
                    f"peak {busy[pid][1]:.0f}, at start {before[pid]:.0f}"
                    for pid in pids
                )

            wait_until(handed_back, what, every=0.1)
        process.terminate()
        exited(process, "the server to exit on SIGTERM")


def _workers(server: int) -> list[int]:
    """The server's workers: forked by its forkserver, so not the server's own children."""
    below = load.descendants(server)
    return [pid for pid in below if _parent(pid) in below]


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_workers_leave_what_start_up_made_out_of_every_garbage_collection():
    """A worker keeps thousands of summaries, so pools that change run full collections; the
    modules it loaded at start-up (tens of thousands of objects) are frozen, never walked by
    them (functions/memory.py)."""
    import gc

    from functions.server import Workers

    workers = Workers(1)
    try:
        frozen = workers.ask(gc.get_freeze_count)
    finally:
        workers.stop(kill=False)
    assert frozen > 10_000
