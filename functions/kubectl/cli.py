"""`kubectl gpustack nodes|cards`: the command, and where the Devices objects come from.

Installed as the console script `kubectl-gpustack`, which kubectl finds on PATH and runs for
`kubectl gpustack ...` (a krew-style plugin). The objects come from the cluster through the
official client (in-cluster config, else kubeconfig, as the agent's `KubernetesApi`), or, with
`-f`, from YAML or JSON files: single objects, multi-document streams, or `kind: List` (what
`kubectl get devices -o yaml` prints); a directory reads its `.yaml`, `.yml` and `.json` files.
Objects that are not Devices are ignored; Devices that cannot be read are skipped and named on
stderr.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import click
import yaml

from functions.kubectl import tables
from functions.kubectl.fleet import Fleet, fleet_of

GROUP, VERSION, PLURAL = "worker.gpustack.ai", "v1alpha1", "devices"
SUFFIXES = (".yaml", ".yml", ".json")


def source_options(command):
    command = click.option(
        "-o",
        "--output",
        type=click.Choice(["table", "wide", "json"]),
        default="table",
        help="wide: more columns; json: every figure, for scripts.",
    )(command)
    command = click.option(
        "-f",
        "--filename",
        "files",
        type=click.Path(exists=True, path_type=Path),
        multiple=True,
        help="Read Devices from this file or directory instead of the cluster (repeatable).",
    )(command)
    command = click.option("--context", help="The kubeconfig context to use.")(command)
    command = click.option(
        "--kubeconfig", type=click.Path(path_type=Path), help="The kubeconfig file to use."
    )(command)
    return command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """The fleet's GPUs from the Devices objects: a cluster-wide nvidia-smi."""


@main.command()
@source_options
def nodes(files, output, context, kubeconfig) -> None:
    """Each node: managed, CPU, GPUs free/total per model, free shares, slices, partitions."""
    fleet = load(files, context, kubeconfig)
    if output == "json":
        click.echo(tables.nodes_json(fleet))
    else:
        click.echo(tables.nodes_table(fleet, wide=output == "wide"))


@main.command()
@source_options
@click.option("--node", "node_names", multiple=True, help="Only this node's cards (repeatable).")
def cards(files, output, context, kubeconfig, node_names) -> None:
    """Each card: product, mode, holders, free memory and cores, MIG layout."""
    fleet = load(files, context, kubeconfig)
    if node_names:
        wanted = set(node_names)
        fleet = Fleet(
            tuple(n for n in fleet.nodes if n.name in wanted),
            tuple(c for c in fleet.cards if c.node in wanted),
            fleet.problems,
        )
    if output == "json":
        click.echo(tables.cards_json(fleet))
    else:
        click.echo(tables.cards_table(fleet, wide=output == "wide"))


def load(files: tuple[Path, ...], context: str | None, kubeconfig: Path | None) -> Fleet:
    objects = from_files(files) if files else from_cluster(context, kubeconfig)
    fleet = fleet_of(obj for obj in objects if obj.get("kind") == "Devices")
    for problem in fleet.problems:
        click.echo(f"warning: {problem}", err=True)
    for node in fleet.nodes:
        if node.left_out:
            click.echo(
                f"warning: node {node.name} is left out of every pool: {node.left_out}", err=True
            )
    return fleet


def from_files(paths: Iterable[Path]) -> Iterator[dict[str, Any]]:
    for path in paths:
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file() and (file.suffix in SUFFIXES or not path.is_dir()):
                yield from objects_in(file)


def objects_in(file: Path) -> Iterator[dict[str, Any]]:
    text = file.read_text()
    documents = [json.loads(text)] if file.suffix == ".json" else yaml.safe_load_all(text)
    for document in documents:
        if not isinstance(document, dict):
            continue
        if document.get("kind", "").endswith("List") and "items" in document:
            yield from (item for item in document["items"] if isinstance(item, dict))
        else:
            yield document


def from_cluster(context: str | None, kubeconfig: Path | None) -> list[dict[str, Any]]:
    """Every Devices object, through the official client (in-cluster, else kubeconfig)."""
    import kubernetes

    try:
        if context or kubeconfig:
            raise kubernetes.config.ConfigException("a context or kubeconfig was named")
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config(
            config_file=str(kubeconfig) if kubeconfig else None, context=context
        )
    api = kubernetes.client.CustomObjectsApi()
    try:
        listed = api.list_cluster_custom_object(GROUP, VERSION, PLURAL)
    except kubernetes.client.ApiException as error:
        raise click.ClickException(
            f"cannot list {PLURAL}.{GROUP}: {error.status} {error.reason}"
        ) from error
    return [item for item in listed.get("items", []) if isinstance(item, dict)]


def run() -> None:
    """The console script `kubectl-gpustack`; kubectl runs it as `kubectl gpustack`."""
    main(prog_name="kubectl gpustack")
