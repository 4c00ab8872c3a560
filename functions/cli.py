"""`gpustack-fn`: the project's commands besides the function server itself.

Default input files are the repository's walkthrough, found from this file rather than from the
working directory, so `gpustack-fn demo` and `gpustack-fn simulate` work from anywhere in an
editable install (`make demo`).

Bad input ends every command the same way: one line, `Error: FILE:LINE: what is wrong — what to
do`, and exit status 2 (click's own usage errors keep its usage lines, with the same status).
A traceback is printed only with `--debug` (`gpustack-fn --debug simulate …`, or the flag after
the command); an exception no input explains is a bug, one line too, status 1, and `--debug`
shows where. `serve` and `agent` answer the same way an address they cannot listen at, a TLS
folder that is not there, no kubeconfig or in-cluster config, or an NVML fixture that is not
one (naming the flag, or the file and line); their `--debug` also turns on debug logs.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import click

from functions import documents, server
from functions.core import catalog, names, reasons
from functions.core.devices import SpecError, parse_devices
from functions.core.pools import pool_views
from functions.core.status import instancetype as type_status
from functions.kubectl import columns

REPOSITORY = Path(__file__).resolve().parent.parent
WALKTHROUGH = REPOSITORY / "examples" / "walkthrough"
WALKTHROUGH_DEVICES = WALKTHROUGH / "devices.yaml"
WALKTHROUGH_SCENARIO = WALKTHROUGH / "scenario.yaml"
INSTANCE_TYPE_XRD = REPOSITORY / "compositions" / "xrds" / "instancetype.yaml"
BAD_INPUT = 2  # click's own status for a usage error
SIMULATOR_MISSING = (
    "the simulator is not installed: it is its own distribution, gpustack-sim, which the "
    "function's image does not carry; from a checkout, run `pip install -e ./simulator`"
)


class BadInput(click.ClickException):
    """Input the user can fix: one `Error:` line, exit status 2."""

    exit_code = BAD_INPUT


def _bad_input_types() -> tuple[type[BaseException], ...]:
    """The exceptions that mean the input is wrong, each with a message that says where."""
    from functions import render
    from functions.agent.agent import NoCluster

    found = (documents.DocumentError, render.RenderError, server.CannotServe, NoCluster)
    try:
        from gpustack_sim import ScenarioError
    except ImportError:  # no simulator here (the image): no scenario was played
        return found
    return (*found, ScenarioError)


def bad_input(error: Exception) -> BadInput | None:
    """`error` as one `Error:` line and exit status 2 where it is the input's fault (its
    message says where, and what to do); None where it is not."""
    return BadInput(str(error)) if isinstance(error, _bad_input_types()) else None


def _simulator() -> ModuleType:
    """The simulator (simulator/, a distribution of its own), or one line on how to install it."""
    try:
        import gpustack_sim
    except ModuleNotFoundError as missing:
        if missing.name != "gpustack_sim":  # installed but broken: a bug, --debug shows where
            raise
        raise click.ClickException(SIMULATOR_MISSING) from None
    return gpustack_sim


class _Commands(click.Group):
    """Runs a command and turns what its input got wrong into one `Error:` line."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as error:
            if ctx.meta.get(DEBUG):  # the flag's callback set it, on this context or a command's
                raise
            if (answer := bad_input(error)) is not None:
                raise answer from None
            raise click.ClickException(
                f"unexpected {type(error).__name__}: {error} — this is a bug: run the command "
                "again with --debug for the traceback, and report it"
            ) from None


DEBUG = "gpustack.debug"


def _set_debug(ctx: click.Context, _: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[DEBUG] = True
    return value


def debug_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--debug",
        is_flag=True,
        expose_value=False,
        callback=_set_debug,
        help="Print the traceback of an error, not one line.",
    )(command)


@click.group(cls=_Commands)
@debug_option
def main() -> None:
    """function-gpustack: a GPU catalog with exact accelerator accounting."""


@main.command()
@server.standard_options
@click.pass_context
def serve(ctx: click.Context, **options) -> None:
    """Serve the composition functions over gRPC (the same as the `function` script)."""
    if options["debug"]:  # the SDK's flag: debug logs, and the traceback of an error
        ctx.meta[DEBUG] = True
    server.serve_with(**options)


@main.command()
@click.option(
    "--devices",
    "devices_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=WALKTHROUGH_DEVICES,
    help="A YAML stream of Devices objects, one per node. Default: the walkthrough's.",
)
@click.option("--aware", is_flag=True, help="Split pools by CPU manufacturer (awareness on).")
@debug_option
def demo(devices_file: Path, aware: bool) -> None:
    """Print `kubectl get instancetypes` for the derived pools of a cluster."""
    click.echo(instance_types_table(devices_file, catalog.Settings(aware_cpu_manufacturer=aware)))


@main.command()
@click.argument(
    "scenario",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=WALKTHROUGH_SCENARIO,
)
@click.option(
    "--dump-to",
    type=click.Path(file_okay=False, path_type=Path),
    help="After each step, write every object of the cluster to DIR/NN/<Kind>.yaml.",
)
@debug_option
def simulate(scenario: Path, dump_to: Path | None) -> None:
    """Play SCENARIO through the real handlers and print the tables after each step.

    A scenario is a YAML file (default: the walkthrough). `apply:` lists the files of the
    cluster to start from; each of its `steps:` has a `title:`, kubectl commands to `run:`
    (`kubectl apply -f FILE`, `kubectl patch KIND NAME --type=merge|json -p JSON`,
    `kubectl delete KIND NAME`, with `-n NAMESPACE` anywhere), and the kinds to `show:` once
    the cluster has settled. Paths are relative to the scenario file. Every write goes through
    a simulated API server that validates it as a real one would, with kubectl's Strict field
    validation; a refused write, or a key the format does not know, stops the scenario with
    one `Error:` line naming the file and line. See docs/scenarios.md.
    """
    play = _simulator().play

    # A run of a few seconds that allocates millions of short-lived objects: what the imports
    # made is frozen out of the collector's sight, and it runs a tenth as often (7 % of the CPU).
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    try:
        for output in play(scenario, dump_to=dump_to):
            click.echo(output)
    finally:  # as they were, for a caller that goes on (a test runner, say)
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@main.command(name="render")
@click.argument("composite_resource", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("composition", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.argument("functions", type=click.Path(exists=True, path_type=Path), required=False)
@click.option(
    "-r", "--include-function-results", is_flag=True, help="Print results as kind: Result."
)
@click.option(
    "-c", "--include-context", is_flag=True, help="Print the final context as kind: Context."
)
@click.option(
    "-x",
    "--include-full-xr",
    is_flag=True,
    help="Print the input XR's spec and metadata in the rendered XR (what validation needs).",
)
@click.option(
    "-o",
    "--observed-resources",
    type=click.Path(exists=True, path_type=Path),
    multiple=True,
    help="File or directory of observed composed resources (with their composition-resource-name).",
)
@click.option(
    "-e",
    "--required-resources",
    "--extra-resources",
    type=click.Path(exists=True, path_type=Path),
    multiple=True,
    help="File or directory of objects the requirements are matched against.",
)
@click.option(
    "-a",
    "--function-address",
    metavar="HOST:PORT",
    help="Render against the function server already running there (plaintext gRPC, as "
    "`function --insecure` serves it) instead of starting one.",
)
@click.option(
    "--development-target",
    is_flag=True,
    help="Render against the server the FUNCTIONS file's Development runtime names "
    "(annotation render.crossplane.io/runtime-development-target), as `crossplane render` does.",
)
@debug_option
def render_command(
    composite_resource,
    composition,
    functions,
    include_function_results,
    include_context,
    include_full_xr,
    observed_resources,
    required_resources,
    function_address,
    development_target,
) -> None:
    """Render like `crossplane render`, against the real server (no Docker).

    By default the server is started on loopback for the render and stopped after it; with
    --function-address (or --development-target) a server you run is called instead, e.g.
    one started with `.venv/bin/function --insecure --address 127.0.0.1:9443`.
    """
    from functions import render

    composite = render.composite_of(composite_resource)
    pipeline = render.composition_of(composition)
    try:
        render.check(composite.obj, pipeline)
    except render.RenderError as error:
        raise BadInput(f"{composition}: {error} — give the Composition of the XR's kind") from None
    observed, required = render.documents(observed_resources), render.documents(required_resources)
    address = function_address
    if development_target:
        if address:
            raise click.UsageError("give --function-address or --development-target, not both")
        address = render.development_target(functions)
    try:
        with render.function_at(address) if address else render.local_function() as run:
            stream = render.render_stream(
                run,
                composite.obj,
                pipeline,
                observed,
                required,
                include_function_results,
                include_context,
                include_full_xr,
            )
    except render.PipelineFailed as failed:
        raise BadInput(_at_the_field(composite, str(failed))) from None
    click.echo(render.dump(stream), nl=False)


_FIELD = re.compile(r"\b((?:metadata|spec|status)(?:[.\[][\w./\-\]]*)?): ")


def _at_the_field(document: documents.Document, message: str) -> str:
    """The message, at the XR's file and the line of the first field it names."""
    found = _FIELD.search(message)
    line = documents.line_of(document, found[1]) if found else document.line
    return f"{document.file}:{line}: {message} — correct the XR there"


def instance_types_table(devices_file: Path, settings: catalog.Settings) -> str:
    """Each derived pool's InstanceType with the status its handler publishes once Kueue has
    activated the pool's ClusterQueue, printed by the XRD's printer columns."""
    cluster = catalog.Cluster.of(
        (_devices(doc) for doc in documents.objects(devices_file)), settings
    )
    instance_types = []
    for pool in cluster.pools(settings):
        spec = catalog.derived_instance_type_spec(pool, cluster.nodes)
        status = type_status.publish(
            pool,
            pool_views(pool, cluster.nodes, settings.mixed_on_node),
            settings.dialect,
            phase=reasons.ACTIVE,
            message="",
            entrance=names.entrance(pool.name),
            unit=catalog.unit_display(spec),
        )
        instance_types.append({"metadata": {"name": pool.name}, "spec": spec, "status": status})
    return columns.printed(
        instance_types, columns.printer_columns(documents.load(INSTANCE_TYPE_XRD))
    )


def _devices(document: documents.Document) -> Any:
    """One Devices object of the file, or the field that is wrong with it, at its line."""
    try:
        return parse_devices(document.obj)
    except SpecError as error:
        line = documents.line_of(document, error.path)
        raise BadInput(
            f"{document.file}:{line}: {error} — a Devices object is the node agent's report "
            "(docs/agent.md shows one)"
        ) from None


@main.command()
@click.option(
    "--node-name", envvar="NODE_NAME", required=True, help="This node (the Devices object's name)."
)
@click.option(
    "--period", type=float, default=30.0, show_default=True, help="Seconds between polls."
)
@click.option(
    "--pod-resources-socket",
    default="/var/lib/kubelet/pod-resources/kubelet.sock",
    show_default=True,
    envvar="POD_RESOURCES_SOCKET",
)
@click.option(
    "--nvml-fixture",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Replay recorded NVML readings instead of the real NVML (tests and demos only).",
)
@click.option(
    "--cpuinfo", type=click.Path(path_type=Path), default=Path("/proc/cpuinfo"), show_default=True
)
@click.option(
    "--resync",
    type=click.FloatRange(min=1),
    default=600.0,
    show_default=True,
    envvar="RESYNC",
    help="Seconds after which an unchanged Devices is applied again (one deleted comes back).",
)
@click.option("--once", is_flag=True, help="Poll once, apply if changed, and exit.")
@click.option(
    "--api-timeout",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    envvar="API_TIMEOUT",
    help="Seconds each call to the API server or the kubelet may take before it fails.",
)
@click.option(
    "--debug",
    "-d",
    is_flag=True,
    envvar="DEBUG",
    help="Emit debug logs (console lines), and the traceback of an error.",
)
@server.metrics_option
@click.pass_context
def agent(
    ctx: click.Context,
    node_name,
    period,
    pod_resources_socket,
    nvml_fixture,
    cpuinfo,
    resync,
    once,
    api_timeout,
    debug,
    metrics_address,
) -> None:
    """Report this node's GPUs and allocations as its Devices object.

    Logs are JSON lines (console lines with --debug), as the function server's. With
    --metrics-address it serves /metrics, /healthz (the loop turns) and /readyz (the last poll
    reached the API server) for the DaemonSet's probes.
    """
    import signal
    import threading
    from functools import partial

    from crossplane.function import logging

    from functions import logs, metrics
    from functions.agent.agent import Agent, KubernetesApi, exit_now, run_until_stopped
    from functions.agent.nvml import FakeNvml, PynvmlBackend
    from functions.agent.podresources import list_devices

    if debug:
        ctx.meta[DEBUG] = True
    logs.configure(logs.Level.DEBUG if debug else logs.Level.INFO)
    nvml = FakeNvml.from_file(nvml_fixture) if nvml_fixture else PynvmlBackend()
    node_agent = Agent(
        node_name,
        nvml,
        KubernetesApi(api_timeout),
        partial(list_devices, pod_resources_socket, timeout=api_timeout),
        cpuinfo,
        resync=resync,
    )
    if once:
        node_agent.poll()
        return
    if metrics_address:
        metrics.agent_metrics()  # the families show from the first scrape on
        server.serve_metrics(
            metrics_address, {"/healthz": node_agent.live, "/readyz": node_agent.ready}
        )
        logging.get_logger().info("serving metrics", address=metrics_address)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if not run_until_stopped(node_agent, period, stop):
        exit_now(0)  # the poll still hangs: the interpreter's shutdown would wait on it
