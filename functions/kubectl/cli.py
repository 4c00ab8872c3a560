"""`kubectl gpustack nodes|cards`: the command, and where the Devices objects come from.

Installed as the console script `kubectl-gpustack` (pip), or by krew from the archive `make
package` builds (functions/kubectl/krew.py); kubectl finds it on PATH and runs it for `kubectl
gpustack ...`.

The cluster is read through kubectl itself: `kubectl get --raw` of the Devices collection, with
the `--kubeconfig` and `--context` given and the environment as it is. **Decision:** kubectl,
not a client library, so the plugin finds its cluster exactly as kubectl does — `--kubeconfig`,
else every file of `$KUBECONFIG` merged, else `~/.kube/config`, and the in-cluster config only
where none of them is found — with every credential kubectl knows (client certificates, tokens,
exec plugins), and so the plugin needs nothing compiled: one archive serves every platform.
kubectl runs the plugin, so kubectl is there.

The global flags `--kubeconfig`, `--context` and `-o` go before the subcommand or after it, as
kubectl's do; given in both places, the later one wins (as kubectl's flags do). With `-f`, the
objects come from YAML or JSON files instead: single objects, multi-document streams, or `kind:
List` (what `kubectl get devices -o yaml` prints); a directory reads its `.yaml`, `.yml` and
`.json` files. Objects that are not Devices are ignored; Devices that cannot be read are skipped
and named on stderr.

Whatever fails — a bad kubeconfig, an unknown context, an unreachable server, a file that is not
YAML — ends in one line on stderr, `Error: ...` (kubectl's own words where kubectl failed; a
file's error names the file and the line), and exit status 1; never a traceback.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml

from functions.kubectl import tables
from functions.kubectl.fleet import Fleet, fleet_of

GROUP, VERSION, PLURAL = "worker.gpustack.ai", "v1alpha1", "devices"
DEVICES_PATH = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
SUFFIXES = (".yaml", ".yml", ".json")
OUTPUTS = ("table", "wide", "json")


@dataclass(frozen=True)
class Flags:
    """The global flags, wherever they were given."""

    kubeconfig: Path | None = None
    context: str | None = None
    output: str | None = None

    def then(self, later: Flags) -> Flags:
        """These flags, overridden by those given later on the command line."""
        return Flags(
            later.kubeconfig or self.kubeconfig,
            later.context or self.context,
            later.output or self.output,
        )


def global_flags(command):
    """kubectl's flags that this plugin takes, on the group and on each subcommand alike."""
    command = click.option(
        "-o",
        "--output",
        type=click.Choice(OUTPUTS),
        help="table (the default); wide: more columns; json: every figure, for scripts.",
    )(command)
    command = click.option("--context", help="The kubeconfig context to use.")(command)
    return click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False, path_type=Path),
        help="The kubeconfig file to use (else $KUBECONFIG, else ~/.kube/config).",
    )(command)


def files_option(command):
    return click.option(
        "-f",
        "--filename",
        "files",
        type=click.Path(exists=True, path_type=Path),
        multiple=True,
        help="Read Devices from this file or directory instead of the cluster (repeatable).",
    )(command)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@global_flags
@click.pass_context
def main(ctx: click.Context, kubeconfig: Path | None, context: str | None, output: str | None):
    """The fleet's GPUs from the Devices objects: a cluster-wide nvidia-smi."""
    ctx.obj = Flags(kubeconfig, context, output)


def flags_of(ctx: click.Context, kubeconfig, context, output) -> Flags:
    before = ctx.obj if isinstance(ctx.obj, Flags) else Flags()
    return before.then(Flags(kubeconfig, context, output))


@main.command()
@global_flags
@files_option
@click.pass_context
def nodes(ctx, files, kubeconfig, context, output) -> None:
    """Each node: managed, CPU, GPUs free/total per model, free shares, slices, partitions."""
    flags = flags_of(ctx, kubeconfig, context, output)
    fleet = load(files, flags)
    if flags.output == "json":
        click.echo(tables.nodes_json(fleet))
    else:
        click.echo(tables.nodes_table(fleet, wide=flags.output == "wide"))


@main.command()
@global_flags
@files_option
@click.option("--node", "node_names", multiple=True, help="Only this node's cards (repeatable).")
@click.pass_context
def cards(ctx, files, kubeconfig, context, output, node_names) -> None:
    """Each card: product, mode, holders, free memory and cores, MIG layout."""
    flags = flags_of(ctx, kubeconfig, context, output)
    fleet = load(files, flags)
    if node_names:
        wanted = set(node_names)
        fleet = Fleet(
            tuple(n for n in fleet.nodes if n.name in wanted),
            tuple(c for c in fleet.cards if c.node in wanted),
            fleet.problems,
        )
    if flags.output == "json":
        click.echo(tables.cards_json(fleet))
    else:
        click.echo(tables.cards_table(fleet, wide=flags.output == "wide"))


def load(files: tuple[Path, ...], flags: Flags) -> Fleet:
    objects = from_files(files) if files else from_cluster(flags.kubeconfig, flags.context)
    fleet = fleet_of(obj for obj in objects if obj.get("kind") == "Devices")
    for problem in fleet.problems:
        click.echo(f"warning: {problem}", err=True)
    for node in fleet.nodes:
        if node.left_out:
            click.echo(
                f"warning: node {node.name} is left out of every pool: {node.left_out}", err=True
            )
    return fleet


def from_files(paths: Iterable[Path]) -> list[dict[str, Any]]:
    found = []
    for path in paths:
        for file in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if file.is_file() and (file.suffix in SUFFIXES or not path.is_dir()):
                found.extend(objects_in(file))
    return found


def objects_in(file: Path) -> Iterator[dict[str, Any]]:
    try:
        text = file.read_text()
        documents = [json.loads(text)] if file.suffix == ".json" else list(yaml.safe_load_all(text))
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as error:
        raise click.ClickException(one_line(f"{file}: {unreadable(error)}")) from None
    for document in documents:
        if not isinstance(document, dict):
            continue
        if document.get("kind", "").endswith("List") and "items" in document:
            yield from (item for item in document["items"] if isinstance(item, dict))
        else:
            yield document


def unreadable(error: Exception) -> str:
    """Why a file cannot be read, with the line and column of a YAML or JSON error (PyYAML
    would say `in "<unicode string>"`, and show the line), and what to do then."""
    if isinstance(error, json.JSONDecodeError):
        return f"{error.msg} at line {error.lineno}, column {error.colno} — fix the JSON there"
    if isinstance(error, yaml.MarkedYAMLError):
        said = [
            f"{words}{_at(mark)}"
            for words, mark in (
                (error.context, error.context_mark),
                (error.problem, error.problem_mark),
            )
            if words
        ]
        return f"{': '.join(said) or 'not YAML'} — fix the YAML there"
    return str(error)


def _at(mark: yaml.Mark | None) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def kubectl_command(kubeconfig: Path | None, context: str | None) -> list[str]:
    """What the plugin runs: kubectl's own flags only where they were given, so kubectl applies
    its own precedence to the rest ($KUBECONFIG, ~/.kube/config, in-cluster)."""
    command = ["kubectl", "get", "--raw", DEVICES_PATH]
    if kubeconfig is not None:
        command += ["--kubeconfig", str(kubeconfig)]
    if context:
        command += ["--context", context]
    return command


def from_cluster(kubeconfig: Path | None, context: str | None) -> list[dict[str, Any]]:
    """Every Devices object, as kubectl lists them with these flags."""
    command = kubectl_command(kubeconfig, context)
    found = shutil.which(command[0])
    if found is None:
        raise click.ClickException(
            "kubectl not found on PATH: the plugin reads the cluster through it "
            "(or read Devices from files with -f)"
        )
    done = subprocess.run([found, *command[1:]], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise click.ClickException(kubectl_error(done.stderr, done.returncode))
    try:
        listed = json.loads(done.stdout)
    except ValueError:
        raise click.ClickException(
            f"kubectl get --raw {DEVICES_PATH} printed no JSON list"
        ) from None
    items = listed.get("items") if isinstance(listed, dict) else None
    return [item for item in items or [] if isinstance(item, dict)]


def kubectl_error(stderr: str, code: int) -> str:
    """kubectl's error as one line: its last line (kubectl says what failed last), without
    its own `error: ` prefix; the Devices XRD named where the server has no such resource."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return f"kubectl exited with status {code} and said nothing"
    said = lines[-1].removeprefix("error: ")
    if said.startswith("Error from server (NotFound)"):
        said += f"; is the Devices XRD applied ({PLURAL}.{GROUP}, compositions/xrds/devices.yaml)?"
    return said


def one_line(message: str) -> str:
    return " ".join(message.split())


def run() -> None:
    """The console script `kubectl-gpustack`; kubectl runs it as `kubectl gpustack`."""
    main(prog_name="kubectl gpustack")
