"""An in-memory cluster that runs the real handlers the way Crossplane would.

`World` holds objects, runs each composite's pipeline with the classic render loop, applies the
desired state (composed resources named by composition-resource-name, the XR's status and
conditions, garbage collection of what is no longer desired), and stands in for the controllers
around the functions: Kueue marks queues Active and reports reservations. It prints the tables
`kubectl get` would print. Nothing here decides a figure: the handlers and the core do.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions import pipeline
from functions.simulate import old_standins as standins
from functions.core import labels
from functions.core.catalog import kubectl_table
from functions.server import run_function
from functions.views import StructView

ROOT = Path(__file__).resolve().parents[2]
COMPOSITION_RESOURCE_NAME = labels.COMPOSITION_RESOURCE_NAME
COMPOSITE_LABEL = labels.COMPOSITE
MAX_ROUNDS = 12

Key = tuple[str, str, str]  # (kind, namespace, name)


def key_of(obj: Mapping[str, Any]) -> Key:
    metadata = obj.get("metadata") or {}
    return (obj["kind"], metadata.get("namespace", ""), metadata["name"])


def load_documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


class World:
    """Objects by (kind, namespace, name), the API's XRDs and Compositions, and a runner."""

    def __init__(self, run: pipeline.Runner = run_function, api: Path = ROOT / "compositions"):
        self.run = run
        self.objects: dict[Key, dict] = {}
        self.owned: dict[Key, dict[str, Key]] = {}  # composite → composition-resource-name → object
        self.applied: dict[Key, dict] = {}  # what the composite last applied to each object
        self.results: dict[Key, list[fnv1.Result]] = {}  # each composite's last results
        self.compositions = {
            doc["spec"]["compositeTypeRef"]["kind"]: doc
            for path in sorted((api / "pipelines").glob("*.yaml"))
            for doc in load_documents(path)
        }
        self.xrds = {
            doc["spec"]["names"]["kind"]: doc
            for path in sorted((api / "xrds").glob("*.yaml"))
            for doc in load_documents(path)
        }

    # --- what a user does ---------------------------------------------------------------------

    def apply(self, *objects: Mapping[str, Any]) -> None:
        for obj in objects:
            obj = copy.deepcopy(dict(obj))
            key = key_of(obj)
            existing = self.objects.get(key)
            if existing is not None and "status" in existing:
                obj.setdefault("status", existing["status"])
            if existing is None:
                obj["metadata"].setdefault("generation", 1)
            else:  # the API server bumps the generation when the spec changes
                changed = existing.get("spec") != obj.get("spec")
                obj["metadata"]["generation"] = existing["metadata"].get("generation", 1) + changed
            self.objects[key] = obj

    def patch(self, kind: str, name: str, spec: Mapping[str, Any], namespace: str = "") -> None:
        """A merge patch of `spec` (None deletes a field)."""
        obj = copy.deepcopy(self.objects[(kind, namespace, name)])
        _merge(obj.setdefault("spec", {}), spec)
        self.apply(obj)

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        key = (kind, namespace, name)
        self.objects.pop(key, None)
        self.applied.pop(key, None)
        for child in self.owned.pop(key, {}).values():  # ownerReferences cascade
            self.delete(child[0], child[2], child[1])

    def get(self, kind: str, name: str, namespace: str = "") -> dict | None:
        return self.objects.get((kind, namespace, name))

    def list(self, kind: str) -> list[dict]:
        return [obj for (k, _, _), obj in sorted(self.objects.items()) if k == kind]

    # --- what the controllers do --------------------------------------------------------------

    def reconcile(self) -> int:
        """Reconcile until nothing changes; returns the number of rounds it took."""
        for rounds in range(1, MAX_ROUNDS + 1):
            before = self._snapshot()
            for key in sorted(self.objects):
                if key in self.objects and key[0] in self.compositions:
                    self.reconcile_composite(key)
            self.run_kueue()
            standins.run_cluster(self)
            if self._snapshot() == before:
                return rounds
        raise RuntimeError(f"the world did not settle in {MAX_ROUNDS} rounds")

    def reconcile_composite(self, key: Key) -> None:
        composite = self.objects[key]
        owned = self.owned.setdefault(key, {})
        observed = {name: self.objects[k] for name, k in owned.items() if k in self.objects}
        rsp, results = pipeline.run_pipeline(
            self.run, self.compositions[key[0]], composite, observed, self.objects.values()
        )
        self.results[key] = [result for _, result in results]
        fatal = [r for r in self.results[key] if r.severity == fnv1.SEVERITY_FATAL]
        if fatal:  # nothing is applied or garbage collected
            self._set_conditions(
                composite, [_condition("Synced", "False", "ReconcileError", fatal[0].message)]
            )
            return
        desired_names = set(rsp.desired.resources.keys())
        for name in sorted(desired_names):
            self._apply_composed(
                key, name, StructView(rsp.desired.resources[name].resource).to_dict()
            )
        for name in sorted(set(owned) - desired_names):
            child = owned.pop(name)
            self.delete(child[0], child[2], child[1])
        status = StructView(rsp.desired.composite.resource).to_dict().get("status", {})
        composite["status"] = status
        self._set_conditions(composite, pipeline.composite_conditions(rsp))

    def _apply_composed(self, owner: Key, name: str, desired: dict) -> None:
        metadata = desired.setdefault("metadata", {})
        if owner[1]:  # a namespaced composite composes into its own namespace
            metadata["namespace"] = owner[1]
        metadata.setdefault("labels", {})[COMPOSITE_LABEL] = owner[2]
        metadata.setdefault("annotations", {})[COMPOSITION_RESOURCE_NAME] = name
        key = key_of(desired)
        self.owned[owner][name] = key
        existing = self.objects.get(key)
        previous, self.applied[key] = self.applied.get(key, {}), copy.deepcopy(desired)
        if existing is not None:  # server-side apply: other managers' fields stay
            desired = _server_side_apply(existing, previous, desired)
        self.apply(desired)

    def _set_conditions(self, obj: dict, conditions: list[dict]) -> None:
        status = obj.setdefault("status", {})
        kept = [
            c
            for c in status.get("conditions", [])
            if c["type"] not in {c["type"] for c in conditions}
        ]
        status["conditions"] = sorted(kept + conditions, key=lambda c: c["type"])

    def run_kueue(self) -> None:
        """Kueue's part: a queue is Active when every flavor it names exists."""
        flavors = {obj["metadata"]["name"] for obj in self.list("ResourceFlavor")}
        for queue in self.list("ClusterQueue"):
            named = [
                f["name"]
                for group in queue["spec"].get("resourceGroups", [])
                for f in group.get("flavors", [])
            ]
            missing = [name for name in named if name not in flavors]
            status = queue.setdefault("status", {})
            status.setdefault("reservingWorkloads", 0)
            status.setdefault("admittedWorkloads", 0)
            if missing:
                active = _condition(
                    "Active",
                    "False",
                    "FlavorNotFound",
                    f"Can't admit new workloads: references missing ResourceFlavor(s): {missing}",
                )
            elif queue["spec"].get("stopPolicy", "None") != "None":
                active = _condition(
                    "Active",
                    "False",
                    "Stopped",
                    "Can't admit new workloads: the ClusterQueue is stopped",
                )
            else:
                active = _condition("Active", "True", "Ready", "Can admit new workloads")
            self._set_conditions(queue, [active])
        queues = {obj["metadata"]["name"] for obj in self.list("ClusterQueue")}
        for local in self.list("LocalQueue"):
            there = local["spec"]["clusterQueue"] in queues
            self._set_conditions(
                local,
                [
                    _condition(
                        "Active",
                        "True" if there else "False",
                        "Ready" if there else "ClusterQueueDoesNotExist",
                    )
                ],
            )

    def _snapshot(self) -> str:
        return json.dumps(sorted((list(k), v) for k, v in self.objects.items()), sort_keys=True)

    # --- what kubectl prints ------------------------------------------------------------------

    def table(self, kind: str) -> str:
        """`kubectl get <kind>`: NAME plus the XRD's printer columns (NAME alone otherwise)."""
        xrd = self.xrds.get(kind)
        columns = xrd["spec"]["versions"][0].get("additionalPrinterColumns", []) if xrd else []
        rows = [
            [obj["metadata"]["name"], *(_cell(obj, c) for c in columns)]
            for obj in sorted(self.list(kind), key=lambda o: o["metadata"]["name"])
        ]
        return kubectl_table(["NAME", *(c["name"] for c in columns)], rows)


def _server_side_apply(
    existing: dict, previous: Mapping[str, Any], desired: Mapping[str, Any]
) -> dict:
    """Fields this manager applied before but not now go; the rest of `existing` stays."""
    result = copy.deepcopy(existing)
    _drop(result, previous, desired)
    _merge(result, {k: v for k, v in desired.items() if k != "status"})
    return result


def _drop(target: dict, previous: Mapping[str, Any], desired: Mapping[str, Any]) -> None:
    for key, value in previous.items():
        if key not in desired:
            target.pop(key, None)
        elif (
            isinstance(value, Mapping)
            and isinstance(desired[key], Mapping)
            and isinstance(target.get(key), dict)
        ):
            _drop(target[key], value, desired[key])


def _merge(target: dict, patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _condition(type_: str, status: str, reason: str, message: str = "") -> dict:
    condition = {"type": type_, "status": status, "reason": reason}
    if message:
        condition["message"] = message
    return condition


_PATH_PART = re.compile(r"\.([A-Za-z0-9_]+)|\['((?:[^'\\]|\\.)*)'\]")


def _cell(obj: Mapping[str, Any], column: Mapping[str, Any]) -> str:
    value: Any = obj
    for plain, quoted in _PATH_PART.findall(column["jsonPath"]):
        part = plain or quoted.replace("\\.", ".")
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def world_from(paths: Iterable[Path], run: Callable | None = None) -> World:
    world = World(run or run_function)
    for path in paths:
        world.apply(*load_documents(path))
    return world


def play(scenario: Path, run: Callable | None = None) -> Iterable[str]:
    """Play a scenario file step by step, yielding what each step prints."""
    plan = yaml.safe_load(scenario.read_text())
    base = scenario.parent
    world = world_from((base / name for name in plan.get("apply", [])), run)
    world.reconcile()
    for step in plan.get("steps", []):
        for name in step.get("apply", []):
            world.apply(*load_documents(base / name))
        if "patch" in step:
            patch = step["patch"]
            world.patch(patch["kind"], patch["name"], patch["spec"], patch.get("namespace", ""))
        if "delete" in step:
            target = step["delete"]
            world.delete(target["kind"], target["name"], target.get("namespace", ""))
        world.reconcile()
        lines = [f"== {step['title']}"]
        for kind in step.get("show", []):
            lines += [f"$ kubectl get {kind.lower()}", world.table(kind), ""]
        yield "\n".join(lines)
