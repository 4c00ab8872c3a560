"""Scenarios: a cluster to start from, then steps of literal kubectl commands, each followed by
the tables `kubectl get` prints once the cluster has settled.

```yaml
apply: [devices.yaml, nodes.yaml, catalog.yaml]   # the cluster to start from (relative paths)
steps:
- title: 3. Requesting a logical sliced GPU
  run:                                           # kubectl, as a user types it
  - kubectl apply -f instance-sliced-demo.yaml
  - kubectl -n default patch instance custom-demo --type=merge -p '{"spec":{"stop":false}}'
  - kubectl patch devices node-a10g --type=json -p '[{"op":"add","path":"/spec/managed","value":false}]'
  - kubectl delete instance sliced-demo -n default
  show: [InstanceType, Instance]                 # what to print after the step settles
```

`kubectl apply -f`, `patch` (`--type=merge` or `--type=json`; `-p`; `--subresource=status`) and
`delete` are understood, with `-n/--namespace` anywhere; kinds by kind, plural, singular or short
name. `sleep SECONDS` lets time pass for the stand-ins that keep it (node lifecycle). Every write
goes through the simulated API server: a write a real API server refuses fails the step with
its message. After an Instance table, the reason of every Instance not Ready is printed too.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from functions.simulate.apiserver import Refused
from functions.simulate.world import World, load_documents, world_from

# Kinds a scenario may name that no XRD of ours defines: kind → (plural, short names).
KNOWN_KINDS = {
    "Pod": ("pods", ("po",)),
    "Node": ("nodes", ("no",)),
    "Namespace": ("namespaces", ("ns",)),
    "NodeFeature": ("nodefeatures", ()),
    "ResourceFlavor": ("resourceflavors", ()),
    "ClusterQueue": ("clusterqueues", ("cq",)),
    "LocalQueue": ("localqueues", ("lq",)),
    "Workload": ("workloads", ("wl",)),
    "PersistentVolumeClaim": ("persistentvolumeclaims", ("pvc",)),
    "Secret": ("secrets", ()),
    "VirtualMachineInstance": ("virtualmachineinstances", ("vmi", "vmis")),
}
SETTLED_PHASES = ("Ready", "Stopped", "Succeeded")


class ScenarioError(Exception):
    """A step the cluster refused: the step, the command, and the API server's message."""


def play(
    scenario: Path, run: Callable[..., Any] | None = None, dump_to: Path | None = None
) -> Iterator[str]:
    """Play a scenario file step by step, yielding what each step prints."""
    plan = yaml.safe_load(scenario.read_text())
    base = scenario.parent
    world = world_from((base / name for name in plan.get("apply", [])), run)
    world.reconcile()
    kubectl = Kubectl(world, base)
    for number, step in enumerate(plan.get("steps", []), start=1):
        for command in step.get("run", []):
            try:
                kubectl.run(command)
            except (Refused, KeyError, ValueError) as error:
                raise ScenarioError(f"step {step['title']!r}: {command}: {error}") from error
        world.reconcile()
        if dump_to is not None:
            dump(world, dump_to / f"{number:02d}")
        yield "\n".join(shown(world, step))


def shown(world: World, step: dict[str, Any]) -> list[str]:
    lines = [f"== {step['title']}"]
    for kind in step.get("show", []):
        lines += [f"$ kubectl get {kind.lower()}", world.table(kind), ""]
        if kind == "Instance":
            lines += reasons(world)
    return lines


def reasons(world: World) -> list[str]:
    """Why each Instance that is not settled is where it is: its phase message."""
    lines = []
    for instance in world.list("Instance"):
        status = instance.get("status") or {}
        if status.get("phase") not in SETTLED_PHASES and status.get("phaseMessage"):
            name = instance["metadata"]["name"]
            lines += [
                f"$ kubectl get instance {name} -o jsonpath='{{.status.phaseMessage}}'",
                status["phaseMessage"],
                "",
            ]
    return lines


def dump(world: World, directory: Path) -> None:
    """Every object of the settled cluster, one file per kind (for `kubectl gpustack -f`)."""
    directory.mkdir(parents=True, exist_ok=True)
    for kind in sorted({key.kind for key in world.store}):
        text = "".join("---\n" + yaml.safe_dump(obj, sort_keys=True) for obj in world.list(kind))
        (directory / f"{kind}.yaml").write_text(text)


class Kubectl:
    """The few kubectl commands a scenario types, against the simulated API server."""

    def __init__(self, world: World, base: Path):
        self.world = world
        self.base = base
        self.kinds = _kind_names(world)

    def run(self, command: str) -> None:
        words = shlex.split(command)
        if words[:1] == ["sleep"] and len(words) == 2:
            for controller in self.world.controllers:
                getattr(controller, "sleep", lambda seconds: None)(float(words[1]))
            return
        if words[:1] != ["kubectl"]:
            raise ValueError("a step runs kubectl commands only")
        args, options = _parse(words[1:])
        verb, *rest = args
        namespace = options.get("namespace", "")
        if verb == "apply":
            for path in options["filename"]:
                self.world.apply(*load_documents(self.base / path))
        elif verb == "delete":
            kind, name = self._target(rest)
            self.world.delete(kind, name, self._namespace(kind, namespace))
        elif verb == "patch":
            kind, name = self._target(rest)
            self._patch(kind, name, self._namespace(kind, namespace), options)
        else:
            raise ValueError(f"kubectl {verb} is not something a scenario can run")

    def _patch(self, kind: str, name: str, namespace: str, options: dict[str, Any]) -> None:
        patch, subresource = json.loads(options["patch"]), options.get("subresource", "")
        if options.get("type", "strategic") == "json":
            self.world.api.json_patch(kind, name, patch, namespace, subresource)
        else:  # merge; a strategic merge of these objects' fields is the same here
            self.world.api.merge_patch(kind, name, patch, namespace, subresource)

    def _target(self, rest: list[str]) -> tuple[str, str]:
        if len(rest) == 1 and "/" in rest[0]:
            rest = rest[0].split("/", 1)
        kind_word, name = rest
        return self.kinds[kind_word.lower()], name

    def _namespace(self, kind: str, given: str) -> str:
        namespaced = kind in self.world.crossplane.namespaced_kinds() or kind in _NAMESPACED
        return (given or "default") if namespaced else ""


_NAMESPACED = {
    "Pod",
    "NodeFeature",
    "LocalQueue",
    "Workload",
    "PersistentVolumeClaim",
    "Secret",
    "VirtualMachineInstance",
}


def _kind_names(world: World) -> dict[str, str]:
    names: dict[str, str] = {}
    for kind, (plural, short) in KNOWN_KINDS.items():
        for word in (kind.lower(), plural, *short):
            names[word] = kind
    for kind, xrd in world.crossplane.xrds.items():
        spec = xrd["spec"]["names"]
        for word in (
            kind.lower(),
            spec["plural"],
            spec.get("singular", ""),
            *spec.get("shortNames", []),
        ):
            if word:
                names[word] = kind
    return names


def _parse(words: list[str]) -> tuple[list[str], dict[str, Any]]:
    """kubectl's arguments and the options a scenario uses (`-n`, `-f`, `-p`, `--type`)."""
    aliases = {"-n": "namespace", "-f": "filename", "-p": "patch", "--type": "type"}
    aliases |= {"--namespace": "namespace", "--filename": "filename", "--patch": "patch"}
    aliases["--subresource"] = "subresource"
    args: list[str] = []
    options: dict[str, Any] = {"filename": []}
    words = list(words)
    while words:
        word = words.pop(0)
        flag, eq, value = word.partition("=")
        if flag in aliases:
            value = value if eq else words.pop(0)
            if aliases[flag] == "filename":
                options["filename"].append(value)
            else:
                options[aliases[flag]] = value
        else:
            args.append(word)
    return args, options
