"""`python -m e2e play SCENARIO [--expected FILE] [--legacy] [--crossplane-1x]`: a scenario on
the real control plane (docs/e2e.md); `python -m e2e render`: every example through the real
`crossplane render` (e2e/render.py). Prints what each step prints; with `--expected`, a step
that does not print its block of that file fails the run with the difference, and the exit
code is 1.

The binaries come from `e2e/build.sh` (make e2e runs it first). Everything else lives in a
temporary folder, removed at the end unless `--keep` is given (its logs then stay for reading).
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from e2e import charges, scenario
from e2e.environment import COMPOSITIONS, Environment, private_mounts, settle_devices
from e2e.kube import eventually
from e2e.waiting import waiting

PACKAGE_GROUPS = {
    document["spec"]["group"]
    for folder in ("xrds", "legacy/xrds")
    for path in sorted((COMPOSITIONS / folder).glob("*.yaml"))
    for document in scenario.load(path)
}


def device_plugin_of(objects: list[dict[str, Any]]) -> str:
    """The device plugin the scenario's Catalog says the cluster runs (as `simulate` reads it)."""
    for obj in objects:
        if obj["kind"] == "Catalog":
            return (obj.get("spec") or {}).get("devicePlugin") or "gpustack"
    return "gpustack"


def setup(env: Environment, folder: Path):
    """The scenario's cluster, in an operator's order: what the nodes' software reads first (a
    ClusterPolicy and its device-plugin ConfigMap decide what a plugin advertises when its
    node registers), then the nodes and their agents, then this package's composites."""

    def apply(objects: list[dict[str, Any]]) -> None:
        nodes = [o for o in objects if o["kind"] == "Node"]
        devices = [o for o in objects if o["kind"] == "Devices"]
        rest = [o for o in objects if o["kind"] not in ("Node", "Devices")]
        cluster = [o for o in rest if not composite(o)]
        if cluster:
            scenario.apply_files(env.kubectl, cluster, folder)
        env.register_nodes(nodes, devices)
        settle_devices(env, [d["metadata"]["name"] for d in devices])
        composites = [o for o in rest if composite(o)]
        if composites:
            scenario.apply_files(env.kubectl, composites, folder)

    return apply


def composite(obj: dict[str, Any]) -> bool:
    """Whether the object is of a kind this package's XRDs define (either set)."""
    return obj.get("apiVersion", "").partition("/")[0] in PACKAGE_GROUPS


def expected_of(scenario: Path) -> Path | None:
    """The tables a scenario prints, beside it: scenario.yaml's expected.txt, scenario-X.yaml's
    expected-X.txt (as the simulate tests find them)."""
    suffix = scenario.stem.removeprefix("scenario")
    found = scenario.with_name(f"expected{suffix}.txt")
    return found if found.exists() else None


def play(args: argparse.Namespace) -> int:
    path = Path(args.scenario).resolve()
    expected_file = Path(args.expected) if args.expected else expected_of(path)
    expected = expected_file.read_text() if expected_file is not None else None
    objects = [
        o
        for name in scenario.load_plan(path).get("apply") or []
        for o in scenario.load(path.parent / name)
    ]
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="gpustack-e2e-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    pin = "CROSSPLANE_LEGACY" if args.crossplane_1x else "CROSSPLANE"
    env = Environment(root, device_plugin_of(objects), pin, legacy_set=args.legacy)
    differing: dict[str, list[str]] = {}  # each step that differs: why, in a few lines
    try:
        env.start()
        print(
            f"# the control plane, Kueue, NFD, Crossplane and the package: up in "
            f"{time.monotonic() - started:.0f} s ({root})",
            file=sys.stderr,
            flush=True,
        )
        wanted = scenario.expected_steps(expected) if expected is not None else {}
        step_started = time.monotonic()
        for printed in scenario.play(path, env.kubectl, expected, setup(env, root)):
            print(printed + "\n", flush=True)
            title = printed.split("\n", 1)[0].removeprefix("== ")
            print(f"# {title}: {time.monotonic() - step_started:.0f} s", file=sys.stderr)
            if not charged_as_held(env):
                differing[f"{title} (Kueue's charges)"] = waiting(env.api)
            want = wanted.get(title)
            if want is not None and printed != want:
                diff = list(
                    difflib.unified_diff(
                        want.splitlines(),
                        printed.splitlines(),
                        "expected",
                        "real control plane",
                        lineterm="",
                    )
                )
                print("\n".join(diff) + "\n", file=sys.stderr, flush=True)
                changed = [line for line in diff[2:] if line[:1] in "+-"]
                differing[title] = (
                    changed
                    + waiting(env.api)
                    + [f"the simulated nodes' last error: {e}" for e in env.node_errors[-1:]]
                )
            step_started = time.monotonic()
    finally:
        env.stop()
        if args.keep or differing:
            print(f"# kept {root} (logs in {root / 'logs'})", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    # Said again last: CI keeps only the tail of what a run prints.
    for title, why in differing.items():
        print(f"# differs: {title}", file=sys.stderr)
        for line in why:
            print(f"#   {line}", file=sys.stderr)
    print(
        f"# {path.name}: {len(differing) or 'no'} step(s) differ; "
        f"{time.monotonic() - started:.0f} s in all",
        file=sys.stderr,
    )
    return 1 if differing else 0


def charged_as_held(env: Environment) -> bool:
    """Whether, once the agents have reported, Kueue charged every Pod what its allocations
    cost by the core's rule (e2e/charges.py), after each step; what was compared goes to
    stderr."""
    try:
        eventually(
            "Kueue's charges as the ledger prices them",
            lambda: not charges.disagreements(env.api),
            60,
        )
        agreed = True
    except TimeoutError:
        agreed = False
    for line in charges.compared(env.api):
        print(f"# {line}", file=sys.stderr)
    return agreed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("play", help="play a scenario on the real control plane")
    run.add_argument("scenario")
    run.add_argument(
        "--expected",
        help="the tables each step must print (default: the scenario's expected*.txt beside it)",
    )
    run.add_argument("--legacy", action="store_true", help="the legacy set (v1 XRDs, claims)")
    run.add_argument(
        "--crossplane-1x",
        action="store_true",
        help="Crossplane 1.x, composing through provider-kubernetes (docs/e2e.md)",
    )
    run.add_argument("--root", help="the folder to run in (default: a new temporary one)")
    run.add_argument("--keep", action="store_true", help="keep the folder and its logs")
    commands.add_parser(
        "render", help="every example through crossplane render beside gpustack-fn render"
    )
    args = parser.parse_args(argv)
    if args.command == "render":
        from e2e import render

        return render.main()
    return play(args)


if __name__ == "__main__":
    private_mounts([sys.executable, "-m", "e2e", *sys.argv[1:]])
    sys.exit(main())
