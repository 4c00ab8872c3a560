"""The gRPC server: one FunctionRunnerService that dispatches to a handler by the step's input.

Crossplane (and `crossplane render`) start the console script `function` with `--insecure` or
with `TLS_SERVER_CERTS_DIR`; it takes the SDK's standard flags. Beyond the SDK's runtime it adds
a `grpc.health.v1` service and serialises responses deterministically, so the same request
always gives the same response bytes.

Every request is counted in `RunFunction` (functions/metrics.py): the handler the step input
names, latency, request bytes, and the Fatal results and refusals its response carries. With
`--metrics-address` (env `METRICS_ADDRESS`; off by default) they are served at `/metrics`.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Sequence
from typing import Any

import click
import grpc
from crossplane.function import cli as sdkcli
from crossplane.function import logging, runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from crossplane.function.proto.v1beta1 import run_function_pb2 as fnv1beta1
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from functions import frame, metrics
from functions.handlers import HANDLERS
from functions.views import view_of

INPUT_API_VERSION = "fn.gpustack.ai/v1beta1"
INPUT_KIND = "Input"
DEFAULT_MAX_RECV_MESSAGE_MB = 64  # a pool's request carries every Devices object of the pool
SERVICES = (
    "apiextensions.fn.proto.v1.FunctionRunnerService",
    "apiextensions.fn.proto.v1beta1.FunctionRunnerService",
)


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """Selects the handler named by the step input and runs it inside the frame."""

    async def RunFunction(
        self, req: fnv1.RunFunctionRequest, context: Any = None
    ) -> fnv1.RunFunctionResponse:
        started = time.perf_counter()
        rsp = run_function(req)
        metrics.function_metrics().observe(
            handler_name(req), req.ByteSize(), time.perf_counter() - started, rsp
        )
        return rsp


def handler_name(req: fnv1.RunFunctionRequest) -> str:
    """The served handler the step input names, else `unknown` (a bounded metrics label)."""
    name = view_of(req.input).get("handler")
    return name if isinstance(name, str) and name in HANDLERS else metrics.UNKNOWN_HANDLER


def run_function(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
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
    return frame.run(handler, req)


def _deterministic(message) -> bytes:
    return message.SerializeToString(deterministic=True)


def _runner_handler(service: str, request_type, response_type, call) -> grpc.GenericRpcHandler:
    method = grpc.unary_unary_rpc_method_handler(
        call,
        request_deserializer=request_type.FromString,
        response_serializer=_deterministic,
    )
    return grpc.method_handlers_generic_handler(service, {"RunFunction": method})


def build_server(
    runner: FunctionRunner, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Server:
    """A grpc.aio server with v1 and v1beta1 RunFunction, health and reflection registered."""
    server = grpc.aio.server(options=list(options))

    async def run_beta(req: fnv1beta1.RunFunctionRequest, context) -> fnv1beta1.RunFunctionResponse:
        # v1beta1 is byte-identical to v1: round-trip through the wire format.
        rsp = await runner.RunFunction(
            fnv1.RunFunctionRequest.FromString(req.SerializeToString()), context
        )
        return fnv1beta1.RunFunctionResponse.FromString(rsp.SerializeToString())

    server.add_generic_rpc_handlers(
        (
            _runner_handler(
                SERVICES[0], fnv1.RunFunctionRequest, fnv1.RunFunctionResponse, runner.RunFunction
            ),
            _runner_handler(
                SERVICES[1], fnv1beta1.RunFunctionRequest, fnv1beta1.RunFunctionResponse, run_beta
            ),
        )
    )
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    server.health = health_servicer  # type: ignore[attr-defined]
    reflection.enable_server_reflection(
        (*SERVICES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    return server


async def serve_async(
    address: str,
    *,
    creds: grpc.ServerCredentials | None,
    insecure: bool,
    options: Sequence[tuple[str, Any]] = (),
) -> None:
    if creds is None and not insecure:
        raise click.UsageError(
            "no TLS certificates: pass --tls-certs-dir (or set TLS_SERVER_CERTS_DIR) or --insecure"
        )
    server = build_server(FunctionRunner(), options)
    if insecure:
        server.add_insecure_port(address)
    else:
        server.add_secure_port(address, creds)
    await server.start()
    for service in ("", *SERVICES):
        await server.health.set(service, health_pb2.HealthCheckResponse.SERVING)
    logging.get_logger().info("serving", address=address, tls=not insecure)
    asyncio.get_running_loop().add_signal_handler(
        signal.SIGTERM,
        lambda: asyncio.ensure_future(server.stop(grace=runtime.SHUTDOWN_GRACE_PERIOD_SECONDS)),
    )
    await server.wait_for_termination()


def serve_with(
    *,
    debug: bool,
    address: str,
    tls_certs_dir: str | None,
    insecure: bool,
    max_recv_message_size: int,
    max_send_message_size: int | None,
    metrics_address: str = "",
) -> None:
    """Serve with the SDK's standard options (sizes in MB, as the SDK's CLI takes them)."""
    logging.configure(level=logging.Level.DEBUG if debug else logging.Level.INFO)
    if metrics_address:
        metrics.function_metrics()  # the families show from the first scrape on
        metrics.serve(metrics_address, {"/healthz": metrics.always_ok})
        logging.get_logger().info("serving metrics", address=metrics_address)
    send = max_send_message_size or max_recv_message_size
    options = [
        ("grpc.max_receive_message_length", max_recv_message_size * 1024 * 1024),
        ("grpc.max_send_message_length", send * 1024 * 1024),
    ]
    creds = None if insecure else runtime.load_credentials(tls_certs_dir) if tls_certs_dir else None
    asyncio.run(serve_async(address, creds=creds, insecure=insecure, options=options))


def standard_options(func):
    """The SDK's standard flags, with the receive limit raised to 64 MiB by default, and
    `--metrics-address`."""
    func = metrics_option(func)
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


@click.command()
@standard_options
def main(**options) -> None:
    """Serve the gpustack composition functions over gRPC."""
    serve_with(**options)
