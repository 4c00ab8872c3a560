"""`gpustack-fn`: the project's commands besides the function server itself.

Default input files are the repository's walkthrough, found from this file rather than from the
working directory, so `gpustack-fn demo` and `gpustack-fn simulate` work from anywhere in an
editable install (`make demo`).
"""

from __future__ import annotations

from pathlib import Path

import click
import yaml

from functions import server
from functions.core import catalog, names
from functions.core.devices import parse_devices
from functions.core.pools import pool_views

REPOSITORY = Path(__file__).resolve().parent.parent
WALKTHROUGH = REPOSITORY / "examples" / "walkthrough"
WALKTHROUGH_DEVICES = WALKTHROUGH / "devices.yaml"
WALKTHROUGH_SCENARIO = WALKTHROUGH / "scenario.yaml"


@click.group()
def main() -> None:
    """function-gpustack: a GPU catalog with exact accelerator accounting."""


@main.command()
@server.standard_options
def serve(**options) -> None:
    """Serve the composition functions over gRPC (the same as the `function` script)."""
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
def simulate(scenario: Path, dump_to: Path | None) -> None:
    """Play SCENARIO through the real handlers and print the tables after each step.

    A scenario is a YAML file (default: the walkthrough). `apply:` lists the files of the
    cluster to start from; each of its `steps:` has a `title:`, kubectl commands to `run:`
    (`kubectl apply -f FILE`, `kubectl patch KIND NAME --type=merge|json -p JSON`,
    `kubectl delete KIND NAME`, with `-n NAMESPACE` anywhere), and the kinds to `show:` once
    the cluster has settled. Paths are relative to the scenario file. Every write goes through
    a simulated API server that validates it as a real one would; a refused write stops the
    scenario with the API server's message. See docs/scenarios.md.
    """
    from functions.simulate import ScenarioError, play

    try:
        for output in play(scenario, dump_to=dump_to):
            click.echo(output)
    except ScenarioError as error:
        raise click.ClickException(str(error)) from error


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
def render_command(
    composite_resource,
    composition,
    functions,
    include_function_results,
    include_context,
    observed_resources,
    required_resources,
) -> None:
    """Render like `crossplane render`, against the real server on loopback (no Docker)."""
    from functions import render

    composite = render.documents([composite_resource])[0]
    pipeline = render.documents([composition])[0]
    try:
        with render.local_function() as run:
            stream = render.render_stream(
                run,
                composite,
                pipeline,
                render.documents(observed_resources),
                render.documents(required_resources),
                include_function_results,
                include_context,
            )
    except render.PipelineFailed as error:
        raise click.ClickException(str(error)) from error
    click.echo(render.dump(stream), nl=False)


def instance_types_table(devices_file: Path, settings: catalog.Settings) -> str:
    documents = [doc for doc in yaml.safe_load_all(devices_file.read_text()) if doc]
    cluster = catalog.Cluster.of((parse_devices(doc) for doc in documents), settings)
    rows = []
    for pool in cluster.pools(settings):
        spec = catalog.derived_instance_type_spec(pool, cluster.nodes)
        views = pool_views(pool, cluster.nodes, settings.mixed_on_node)
        rows.append(
            [
                pool.name,
                names.entrance(pool.name),
                catalog.unit_display(spec),
                views.accelerators.display,
                views.cpu.display,
                "Active",
            ]
        )
    return catalog.kubectl_table(catalog.INSTANCE_TYPE_COLUMNS, rows)


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
    "--debug", "-d", is_flag=True, envvar="DEBUG", help="Emit debug logs (console lines)."
)
@server.metrics_option
def agent(
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
    from functions.agent.agent import Agent, KubernetesApi, run_until_stopped
    from functions.agent.nvml import FakeNvml, PynvmlBackend
    from functions.agent.podresources import list_devices

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
        metrics.serve(metrics_address, {"/healthz": node_agent.live, "/readyz": node_agent.ready})
        logging.get_logger().info("serving metrics", address=metrics_address)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    run_until_stopped(node_agent, period, stop)
