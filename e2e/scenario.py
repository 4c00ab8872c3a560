"""A scenario of `gpustack-fn simulate`, played on the real control plane.

The same file: `apply:` is the cluster to start from, each step's `run:` is typed into the real
kubectl, and `show:` prints what the real `kubectl get` prints. What differs is where objects
come from and how a step settles:
- Devices are not applied: their hardware becomes each node's NVML and device plugin
  (e2e/node.py), and the node agent writes them. Nodes are registered as a kubelet registers
  them, with the capacity the device plugin advertises; KWOK keeps them Ready.
- A real cluster never says it has settled. With the tables a step must print (`expected`), a
  step waits until `kubectl get` prints them, and fails with the difference when it does not
  within `STEP_TIMEOUT`; without, until they have not changed for `QUIET_SECONDS` (longer than
  the handlers' 30-second TTLs, after which Crossplane reconciles again).
- Crossplane appends its own columns (SYNCED, READY, COMPOSITION, AGE) to every composite's
  table, and kubectl an AGE to kinds without columns: the tables compare the columns before
  them, which are the ones our XRDs define.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.kube import Kubectl, KubectlFailed

STEP_TIMEOUT = 300.0
QUIET_SECONDS = 45.0
# Columns kubectl prints that no XRD of ours defines: Crossplane's on every composite, and
# kubectl's own AGE. A table is compared up to the first of them.
FOREIGN_COLUMNS = ("SYNCED", "AGE")
SETTLED_PHASES = ("Ready", "Stopped", "Succeeded")


def load_plan(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def ours(table: str) -> str:
    """A kubectl table cut before the first column our XRDs do not define."""
    lines = table.rstrip("\n").split("\n")
    if not lines or not lines[0]:
        return ""
    header = lines[0]
    cut = min((i for i in (_column(header, c) for c in FOREIGN_COLUMNS) if i >= 0), default=-1)
    if cut < 0:
        return "\n".join(line.rstrip() for line in lines)
    return "\n".join(line[:cut].rstrip() for line in lines)


def _column(header: str, name: str) -> int:
    words = header.split()
    if name not in words:
        return -1
    index = 0
    for word in words:
        index = header.index(word, index)
        if word == name:
            return index
        index += len(word)
    return -1


def expected_steps(text: str) -> dict[str, str]:
    """`expected.txt` by step title (each block starts `== <title>`)."""
    steps: dict[str, str] = {}
    title = None
    for block in text.split("\n== "):
        block = block.removeprefix("== ")
        title = block.partition("\n")[0]
        steps[title] = "== " + block.rstrip("\n")
    return steps


@dataclass
class Step:
    title: str
    run: list[str]
    show: list[str]


class Player:
    def __init__(self, kubectl: Kubectl, base: Path):
        self.kubectl = kubectl
        self.base = base

    def run(self, command: str) -> None:
        words = shlex.split(command)
        if words[:1] == ["sleep"] and len(words) == 2:
            time.sleep(float(words[1]))
            return
        if words[:1] != ["kubectl"]:
            raise ValueError(f"a step runs kubectl commands only: {command}")
        self.kubectl(*words[1:], cwd=self.base)

    def shown(self, step: Step) -> str:
        lines = [f"== {step.title}"]
        for kind in step.show:
            lines += [f"$ kubectl get {kind.lower()}", ours(self.kubectl("get", kind.lower())), ""]
            if kind == "Instance":
                lines += self.reasons()
        return "\n".join(lines).rstrip("\n")

    def reasons(self) -> list[str]:
        lines: list[str] = []
        for instance in self.kubectl.get("instance", namespace="default"):
            status = instance.get("status") or {}
            if status.get("phase") not in SETTLED_PHASES and status.get("phaseMessage"):
                name = instance["metadata"]["name"]
                jsonpath = "{.status.phaseMessage}"
                lines += [
                    f"$ kubectl get instance {name} -o jsonpath='{jsonpath}'",
                    self.kubectl(
                        "get", "instance", name, "-n", "default", "-o", f"jsonpath={jsonpath}"
                    ),
                    "",
                ]
        return lines

    def settle(self, step: Step, expected: str | None, timeout: float = STEP_TIMEOUT) -> str:
        """What the step prints once the cluster has settled (see the module's docstring)."""
        deadline = time.monotonic() + timeout
        last, since = "", time.monotonic()
        while True:
            try:
                printed = self.shown(step)
            except KubectlFailed:  # the API server busy ("Timeout"): asked again, in time
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
                continue
            if printed != last:
                last, since = printed, time.monotonic()
            if expected is not None and printed == expected:
                return printed
            if expected is None and time.monotonic() - since >= QUIET_SECONDS:
                return printed
            if time.monotonic() > deadline:
                return printed
            time.sleep(1.0)


def steps_of(plan: dict[str, Any]) -> list[Step]:
    return [
        Step(s["title"], list(s.get("run") or []), list(s.get("show") or []))
        for s in plan.get("steps") or []
    ]


def play(
    scenario: Path,
    kubectl: Kubectl,
    expected: str | None,
    setup: Callable[[list[dict[str, Any]]], None],
    timeout: float = STEP_TIMEOUT,
) -> Iterator[str]:
    """Play the scenario, yielding what each step prints. `setup` gets the `apply:` objects
    (it registers nodes and applies the rest)."""
    plan = load_plan(scenario)
    base = scenario.parent
    objects = [obj for name in plan.get("apply") or [] for obj in load(base / name)]
    setup(objects)
    by_title = expected_steps(expected) if expected is not None else {}
    player = Player(kubectl, base)
    for step in steps_of(plan):
        for command in step.run:
            player.run(command)
        yield player.settle(step, by_title.get(step.title), timeout)


def apply_files(kubectl: Kubectl, objects: list[dict[str, Any]], folder: Path) -> None:
    """`kubectl apply -f` of the objects, as a user applies them; a status given with an object
    (a claim already Bound) is written through the status subresource after."""
    path = folder / "apply.yaml"
    path.write_text(
        yaml.safe_dump_all([{k: v for k, v in o.items() if k != "status"} for o in objects])
    )
    kubectl("apply", "-f", str(path))
    for obj in objects:
        if "status" in obj:
            namespace = obj["metadata"].get("namespace")
            args = [
                "patch",
                obj["kind"].lower(),
                obj["metadata"]["name"],
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": obj["status"]}),
            ]
            kubectl(*(args + (["-n", namespace] if namespace else [])))
