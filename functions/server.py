"""The gRPC server: one FunctionRunnerService that dispatches to a handler by the step's input.

Crossplane (and `crossplane render`) start the console script `function` with `--insecure` or
with `TLS_SERVER_CERTS_DIR`; it takes the SDK's standard flags. Beyond the SDK's runtime it adds
a `grpc.health.v1` service and serialises responses deterministically, so the same request
always gives the same response bytes. An address it cannot listen at, or a TLS folder that is
not there or lacks a file, is bad input (`CannotServe`): one `Error:` line naming the flag,
exit status 2 (the traceback with `--debug`), and nothing it started is left running.

Every request is counted in `RunFunction` (functions/metrics.py): the handler the step input
names, latency, request bytes, and the Fatal results and refusals its response carries. With
`--metrics-address` (env `METRICS_ADDRESS`; off by default) they are served at `/metrics`.

Requests over `INLINE_MAX_BYTES` are parsed and handled by `--workers` worker processes (env
`WORKERS`; functions/workers.py), each on a pipe of its own: one that dies fails its own call
and is replaced while the others serve. A worker parses a large request without its required
objects (functions/wire.py), which a handler parses only if it reads them: a pool reads its
summaries from their bytes instead. A small request (an Instance, a Devices) is handled on
the server's one inline thread: its work takes about a millisecond, less than the hop to a
worker would (docs/reliability.md has the figures). Nothing is handled on the event loop,
which only accepts calls and moves bytes. Every request is decoded on a thread with a stack
deep enough for upb's own nesting limit, which then answers INVALID_ARGUMENT. What a large
request took goes back to the system once the worker, and the server, are idle
(functions/memory.py; docs/operations.md sizes the pod).

SIGTERM (or SIGINT) drains the server: health turns NOT_SERVING at once, new calls are refused
with UNAVAILABLE (Crossplane retries them, on another replica if there is one), every call
accepted before is answered within `--grace-period` seconds (env `GRACE_PERIOD`; 30, the pod's
default terminationGracePeriodSeconds) — those gRPC still held queued are taken and refused
before it stops, never cancelled — and the process exits 0. Whatever still runs at the
deadline is cancelled, before the kubelet's SIGKILL would. The log counts each kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import grpc
from crossplane.function import cli as sdkcli
from crossplane.function import logging, runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from functions import frame, logs, memory, metrics, wire
from functions.handlers import HANDLERS
from functions.views import view_of
from functions.workers import RequestUnreadable, WorkerFailed, WorkerLost, Workers

INPUT_API_VERSION = "fn.gpustack.ai/v1beta1"
INPUT_KIND = "Input"
DEFAULT_MAX_RECV_MESSAGE_MB = 64  # a pool's request carries every Devices object of the pool
DEFAULT_WORKERS = 4
# A request this small is handled on the event loop: the hop to a worker process and back costs
# more than its parse, handling and serialisation (about 1 ms at 20 KiB), so it stalls the loop
# less than it waits. A pool's request is far larger (1.5 MiB at 1,000 nodes).
INLINE_MAX_BYTES = 64 * 1024
DEFAULT_GRACE_SECONDS = 30.0  # Kubernetes' default terminationGracePeriodSeconds; none is set
DRAINING = "draining: this replica is shutting down; retry on another"
WORKER_LOST = "the worker handling this call stopped (out of memory?); retry"
WORKER_FAILED = "the worker handling this call failed outside the handlers (a bug; see its log)"
# A drain ends once no call has arrived for this long (and none is in flight): gRPC hands the
# loop a call it accepted within microseconds when the loop is free, so by then none is queued.
QUIET_SECONDS = 0.2
SERVICES = (
    "apiextensions.fn.proto.v1.FunctionRunnerService",
    "apiextensions.fn.proto.v1beta1.FunctionRunnerService",
)


TLS_FLAG = "--tls-server-certs-dir (or TLS_SERVER_CERTS_DIR)"
TLS_HINT = "give the folder of the function's PEM tls.crt, tls.key and ca.crt, or pass --insecure"
BIND_FAILED = "Failed to add port to server: "


class CannotServe(Exception):
    """The server cannot start as it was told to: an address it cannot listen at, a TLS folder
    that is not there or lacks a file. Bad input, not a bug: the message names the flag and the
    value, what is wrong and what to do, and the commands answer it in one `Error:` line."""


def worker_started(debug: bool) -> None:
    """A worker's set-up (functions/workers.py): the server decides when it stops, it logs as
    the server does, and what importing the handlers made is left out of its collections."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logs.configure(logs.Level.DEBUG if debug else logs.Level.INFO)
    memory.leave_startup_objects(collect=False)


def serve_in_worker(payload: bytes) -> tuple[bytes, bytes, str]:
    """`serve_bytes` in a worker, which hands the server the part of the response metrics
    read (its results, conditions and composite's phase), so the server never parses a large
    message; what the request took goes back once the worker is idle."""
    WORKER_MEMORY.started()
    try:
        answer, rsp, handler = serve_bytes(payload)
        return answer, metrics.summary_of(rsp).SerializeToString(), handler
    finally:
        WORKER_MEMORY.done()


WORKER_MEMORY = memory.IdleTrim()  # each worker's own: its thread starts after the fork


def serve_bytes(payload: bytes) -> tuple[bytes, fnv1.RunFunctionResponse, str]:
    """One call: the response's bytes, the response (for metrics), and the handler."""
    if len(payload) > INLINE_MAX_BYTES:  # its objects parsed only where, and as far as, read
        req, held = wire.split(payload)
    else:
        req, held = fnv1.RunFunctionRequest.FromString(payload), {}
    rsp = run_function(req, held)
    return rsp.SerializeToString(deterministic=True), rsp, handler_name(req)


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Hands each call's bytes to the inline thread or a worker, counts it, and drains.

    A call is counted in flight from the moment the loop hands it to this servicer, which,
    with no handler running on the loop, is as soon as gRPC accepts it. Once draining, a call
    that arrives is refused (UNAVAILABLE); the drain ends when none is in flight and none has
    arrived for `QUIET_SECONDS` — so none is left queued inside gRPC, which would cancel it
    at `server.stop` — or at the grace period's end."""

    def __init__(self, workers: Workers):
        self.workers = workers
        self.draining = False
        self.in_flight = 0
        self.answered = self.refused = 0  # while draining
        self.last_arrival = time.monotonic()
        self.memory = memory.IdleTrim()  # what receiving large requests took, once idle

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, context: Any = None
    ) -> fnv1.RunFunctionResponse:
        answer = await self.run_bytes(req.SerializeToString(), context)
        return fnv1.RunFunctionResponse.FromString(answer)

    async def run_bytes(self, payload: bytes, context: Any) -> bytes:
        self.last_arrival = time.monotonic()
        if self.draining:
            self.refused += 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, DRAINING)
        self.in_flight += 1
        large = len(payload) > INLINE_MAX_BYTES
        if large:
            self.memory.started()
        started = time.perf_counter()
        try:
            answer, summary, handler = await self._run(payload, large)
        except (DecodeError, RequestUnreadable) as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unreadable request: {error}")
        except WorkerLost:
            await context.abort(grpc.StatusCode.UNAVAILABLE, WORKER_LOST)
        except WorkerFailed as error:
            await context.abort(grpc.StatusCode.INTERNAL, f"{WORKER_FAILED}: {error}")
        finally:
            self.in_flight -= 1
            if self.draining:
                self.answered += 1
            if large:
                self.memory.done()
        metrics.function_metrics().observe(
            handler, len(payload), time.perf_counter() - started, summary
        )
        return answer

    async def _run(
        self, payload: bytes, large: bool
    ) -> tuple[bytes, fnv1.RunFunctionResponse, str]:
        """The call's answer, what metrics read of it, and the handler: a small request on the
        inline thread (never behind a large one, nor waiting for a free worker), the rest by a
        worker, which hands back only the part of its response metrics read."""
        if not large:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.workers.inline, serve_bytes, payload)
        answer, told, handler = await self.workers.run(payload)
        return answer, fnv1.RunFunctionResponse.FromString(told), handler

    async def drain(self, grace: float) -> None:
        """Refuse new calls and wait, at most `grace` seconds, for those in flight and for
        gRPC to have handed over every call it had accepted."""
        self.draining = True
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (
            self.in_flight or time.monotonic() - self.last_arrival < QUIET_SECONDS
        ):
            await asyncio.sleep(0.01)


def handler_name(req: fnv1.RunFunctionRequest) -> str:
    """The served handler the step input names, else `unknown` (a bounded metrics label)."""
    name = view_of(req.input).get("handler")
    return name if isinstance(name, str) and name in HANDLERS else metrics.UNKNOWN_HANDLER


def run_function(
    req: fnv1.RunFunctionRequest, held: Mapping[str, wire.Encoded] | None = None
) -> fnv1.RunFunctionResponse:
    """The response of the handler the step input names; `held`: the required resources
    `wire.split` held back, as they came."""
    valid = ", ".join(sorted(HANDLERS))
    step_input = view_of(req.input)
    api_version, kind = step_input.str("apiVersion"), step_input.str("kind")
    if (api_version, kind) != (INPUT_API_VERSION, INPUT_KIND):
        return frame.refuse(
            req,
            f"input: expected apiVersion {INPUT_API_VERSION}, kind {INPUT_KIND}, got "
            f"{api_version or '<none>'}, {kind or '<none>'}; set the pipeline step's input to "
            f"{{apiVersion: {INPUT_API_VERSION}, kind: {INPUT_KIND}, handler: <one of {valid}>}}",
        )
    name = step_input.get("handler")
    if not name:
        return frame.refuse(req, f"input.handler: is required; set it to one of {valid}")
    handler = HANDLERS.get(name) if isinstance(name, str) else None
    if handler is None:
        return frame.refuse(
            req, f"input.handler: unknown handler {name!r}; valid handlers: {valid}"
        )
    return frame.run(handler, req, held)


def _runner_handler(service: str, call) -> grpc.GenericRpcHandler:
    """RunFunction on bytes: v1 and v1beta1 are byte-identical, and workers parse them."""
    method = grpc.unary_unary_rpc_method_handler(call)
    return grpc.method_handlers_generic_handler(service, {"RunFunction": method})


def build_server(
    runner: FunctionRunner, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Server:
    """A grpc.aio server with v1 and v1beta1 RunFunction, health and reflection registered."""
    server = grpc.aio.server(options=list(options))
    server.add_generic_rpc_handlers(
        tuple(_runner_handler(service, runner.run_bytes) for service in SERVICES)
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    server.health = health_servicer  # type: ignore[attr-defined]
    reflection.enable_server_reflection(
        (*SERVICES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    return server


class Readiness:
    """What `/readyz` answers: ready while serving, not while starting or draining (the
    kubelet's probe cannot speak the gRPC health service through the function's mutual TLS)."""

    def __init__(self) -> None:
        self.ready, self.why = False, "starting"

    def set(self, ready: bool, why: str) -> None:
        self.ready, self.why = ready, why

    def check(self) -> tuple[bool, str]:
        return self.ready, self.why


async def serve_async(
    address: str,
    *,
    creds: grpc.ServerCredentials | None,
    insecure: bool,
    options: Sequence[tuple[str, Any]] = (),
    workers: int = DEFAULT_WORKERS,
    grace_period: float = DEFAULT_GRACE_SECONDS,
    debug: bool = False,
    readiness: Readiness | None = None,
) -> None:
    readiness = readiness or Readiness()
    if creds is None and not insecure:
        raise click.UsageError(
            "no TLS certificates: pass --tls-certs-dir (or set TLS_SERVER_CERTS_DIR) or --insecure"
        )
    pool = Workers(workers, debug)
    try:
        memory.leave_startup_objects()
        runner = FunctionRunner(pool)
        server = build_server(runner, options)
        listen(server, address, creds if not insecure else None)
        await server.start()
    except BaseException:  # the workers ignore SIGTERM: left running, the exit would wait on them
        pool.stop(kill=True)
        raise
    for service in ("", *SERVICES):
        await server.health.set(service, health_pb2.HealthCheckResponse.SERVING)
    readiness.set(True, "serving")
    logging.get_logger().info("serving", address=address, tls=not insecure, workers=workers)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    readiness.set(False, DRAINING)
    await shut_down(server, runner, grace_period)


def listen(server: grpc.aio.Server, address: str, creds: grpc.ServerCredentials | None) -> None:
    """Bind the server's port (plaintext where `creds` is None), or CannotServe with gRPC's
    reason, which gRPC's core writes to stderr and its exception only points to."""
    with _stderr_kept() as said:
        try:
            if creds is None:
                server.add_insecure_port(address)
            else:
                server.add_secure_port(address, creds)
        except RuntimeError as error:
            # gRPC core's lines: `E1206 09:46:16.877 7891 add_port.cc:83] what it says`
            lines = [line.partition("] ")[2].strip() for line in said().splitlines()]
            found = [line for line in lines if line]
            bind = [line for line in found if line.startswith(BIND_FAILED)]
            if creds is not None and found and not bind:  # the credentials, before any address
                raise CannotServe(
                    f"{TLS_FLAG}: the certificates cannot be used ({'; '.join(found)}) — {TLS_HINT}"
                ) from error
            why = bind[0].removeprefix(BIND_FAILED) if bind else "gRPC could not bind it"
            raise CannotServe(
                f"--address {address}: cannot listen there ({why}) — give a HOST:PORT this "
                f"machine can listen at, free and its own (default {sdkcli.DEFAULT_ADDRESS})"
            ) from error


@contextlib.contextmanager
def _stderr_kept() -> Iterator[Callable[[], str]]:
    """What is written to file descriptor 2 meanwhile (gRPC's core writes there, not to
    sys.stderr), readable inside; whatever it was is written out after, unless it was read."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to keep
        yield lambda: ""
        return
    with tempfile.TemporaryFile() as kept:
        os.dup2(kept.fileno(), 2)
        read = False

        def said() -> str:
            nonlocal read
            read = True
            kept.seek(0)
            return kept.read().decode(errors="replace")

        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if not read:
                kept.seek(0)
                os.write(2, kept.read())


def load_credentials(tls_certs_dir: str) -> grpc.ServerCredentials:
    """The mTLS credentials in the folder, or CannotServe naming the folder or the file."""
    flag = f"{TLS_FLAG} {tls_certs_dir}"
    if not Path(tls_certs_dir).is_dir():
        raise CannotServe(f"{flag}: no such folder — {TLS_HINT}")
    try:
        return runtime.load_credentials(tls_certs_dir)
    except OSError as error:
        where = error.filename or tls_certs_dir
        raise CannotServe(f"{flag}: {where}: {error.strerror or error} — {TLS_HINT}") from error


def serve_metrics(address: str, checks: Mapping[str, metrics.Check]) -> None:
    """`metrics.serve`, or CannotServe where it cannot listen at the address."""
    try:
        metrics.serve(address, checks)
    except (OSError, ValueError, OverflowError) as error:
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        why = why.removeprefix(f"metrics address {address!r}: ")
        raise CannotServe(
            f"--metrics-address {address}: cannot listen there ({why}) — give a HOST:PORT or "
            ":PORT this machine can listen at, free and its own (e.g. :8080)"
        ) from error


async def shut_down(server: grpc.aio.Server, runner: FunctionRunner, grace: float) -> None:
    """Health NOT_SERVING, new calls refused, calls in flight finished within `grace`."""
    log = logging.get_logger()
    log.info("draining", in_flight=runner.in_flight, grace_period=grace)
    await server.health.enter_graceful_shutdown()
    await runner.drain(grace)
    left = runner.in_flight
    await server.stop(grace=None)  # anything still running past the deadline is cancelled
    runner.workers.stop(kill=left > 0)
    log.info("stopped", answered=runner.answered, refused=runner.refused, cancelled=left)


def serve_with(
    *,
    debug: bool,
    address: str,
    tls_certs_dir: str | None,
    insecure: bool,
    max_recv_message_size: int,
    max_send_message_size: int | None,
    metrics_address: str = "",
    workers: int = DEFAULT_WORKERS,
    grace_period: float = DEFAULT_GRACE_SECONDS,
) -> None:
    """Serve with the SDK's standard options (sizes in MB, as the SDK's CLI takes them)."""
    logs.configure(logs.Level.DEBUG if debug else logs.Level.INFO)
    creds = None if insecure else load_credentials(tls_certs_dir) if tls_certs_dir else None
    readiness = Readiness()
    if metrics_address:
        metrics.function_metrics()  # the families show from the first scrape on
        serve_metrics(metrics_address, {"/healthz": metrics.always_ok, "/readyz": readiness.check})
        logging.get_logger().info("serving metrics", address=metrics_address)
    send = max_send_message_size or max_recv_message_size
    options = [
        ("grpc.max_receive_message_length", max_recv_message_size * 1024 * 1024),
        ("grpc.max_send_message_length", send * 1024 * 1024),
    ]
    asyncio.run(
        serve_async(
            address,
            creds=creds,
            insecure=insecure,
            options=options,
            workers=workers,
            grace_period=grace_period,
            debug=debug,
            readiness=readiness,
        )
    )


def standard_options(func):
    """The SDK's standard flags, with the receive limit raised to 64 MiB by default, and
    `--metrics-address`, `--workers` and `--grace-period`."""
    func = metrics_option(func)
    func = workers_option(func)
    func = grace_period_option(func)
    func = sdkcli.standard_options(func)
    for param in func.__click_params__:
        if param.name == "max_recv_message_size":
            param.default = DEFAULT_MAX_RECV_MESSAGE_MB
    return func


metrics_option = click.option(
    "--metrics-address",
    envvar="METRICS_ADDRESS",
    default="",
    help="Serve Prometheus metrics at HOST:PORT/metrics (e.g. :8080). Default: off.",
)


workers_option = click.option(
    "--workers",
    envvar="WORKERS",
    type=click.IntRange(min=1),
    default=DEFAULT_WORKERS,
    show_default=True,
    help="Worker processes: requests handled at once; more wait in line.",
)
grace_period_option = click.option(
    "--grace-period",
    envvar="GRACE_PERIOD",
    type=click.FloatRange(min=0),
    default=DEFAULT_GRACE_SECONDS,
    show_default=True,
    help="Seconds that calls in flight may take to finish after SIGTERM: the pod's "
    "terminationGracePeriodSeconds (30 unless the pod sets it).",
)


@click.command()
@standard_options
def main(**options) -> None:
    """Serve the gpustack composition functions over gRPC.

    An address it cannot listen at, or TLS files that are not there, is one `Error:` line and
    exit status 2, as `gpustack-fn`'s bad input is; with --debug, the traceback.
    """
    try:
        serve_with(**options)
    except CannotServe as error:
        if options["debug"]:
            raise
        refused = click.ClickException(str(error))
        refused.exit_code = click.UsageError.exit_code  # 2, as gpustack-fn's BadInput
        raise refused from None
