"""Crossplane's part: run each composite's pipeline and apply what it desires, as Crossplane does.

- The pipeline runs through the classic loop (`functions.pipeline`) against the real function,
  as the caller this world plays (Crossplane 2.2+, or 1.x with `extra_resources`).
- A Fatal result stops the reconcile: nothing is applied or garbage collected; the composite is
  `Synced=False` with the message, and each condition a function set before reads Unknown
  (reason `FatalError`). A condition a function no longer sends stays as it was.
- What is no longer desired is deleted first; then each composed resource is server-side
  applied (fields this manager set before and not now go; other managers' fields stay; a field
  the kind's schema lacks fails the apply, as SSA's typed patch does, where a plain write would
  prune it), labelled with the composite and its composition-resource-name, in a namespaced
  composite's own namespace, with the composite as its controller owner reference (so the
  garbage collector deletes it with the composite). Owner references merge by uid, so an
  object another composite controls (one of a deleted composite's, not yet collected) is
  refused as invalid: two controllers. One the API server refuses as invalid is left unsynced
  (a Warning event, and `Synced=False`, "Unsynced resources: …") while the rest are applied;
  any other refusal fails the reconcile.
- The composite's status is server-side applied too. Either apply stores a map this manager
  filled before and applies as `{}` now as null, which the API server checks like any value
  (kubernetes#104694): a non-nullable object refuses it. A refused status leaves the status as
  it was, with Crossplane's Warning (the composed resources stay applied).
- Reconciles follow what changed, as Crossplane's watches make them, between polls: every
  composite is reconciled on the first run and again each time the cluster's clock has moved
  by the poll interval (Crossplane's --poll-interval, 1 minute: a scenario's `sleep`), or on
  `poll()`; between polls, a composite whose last reconcile wrote nothing is not reconciled again while everything it
  read is the same — itself, its composed resources, what each selector its function asked
  for matched (by the stored objects' identity: a write stores a new object), the permissions
  and the function. The function answers by its request, so that reconcile would write
  nothing again; a round that changed nothing is still a round that changed nothing.
- RBAC: Crossplane reaches only what its service account may — its own XRD kinds, plus what the
  package's ClusterRole (aggregated into Crossplane's) grants. Fetching a required resource
  needs get (by name) or list; composing needs get, list, watch, patch and delete. A gap fails
  the reconcile with the API server's Forbidden message, naming the resource and the verb.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.struct_pb2 import Struct

from functions import pipeline
from functions.documents import shipped
from functions.views import StructView
from gpustack_sim import kube
from gpustack_sim.apiserver import INVALID, Refused
from gpustack_sim.client import Client
from gpustack_sim.store import Key, copy_of
from gpustack_sim.validation import EMPTIED

COMPOSITE = "crossplane.io/composite"
RESOURCE_NAME = "crossplane.io/composition-resource-name"
SERVICE_ACCOUNT = "system:serviceaccount:crossplane-system:crossplane"
COMPOSE_VERBS = ("get", "list", "watch", "patch", "delete")
SYSTEM_CONDITIONS = frozenset({"Ready", "Synced", "Healthy"})  # Crossplane's own, not a function's
FATAL_UNKNOWN = "A fatal error occurred before the status of this condition could be determined."
POLL_INTERVAL_SECONDS = 60.0  # Crossplane's --poll-interval default
CORE_PLURALS = {"PersistentVolumeClaim": "persistentvolumeclaims", "StorageClass": "storageclasses"}


class Forbidden(Exception):
    pass


@dataclass(frozen=True)
class Rbac:
    """Crossplane's permissions: the package's ClusterRole rules, and its own XRD groups."""

    rules: tuple[Mapping[str, Any], ...]
    own_groups: frozenset[str]

    @classmethod
    def of(
        cls, cluster_roles: Iterable[Mapping[str, Any]], xrds: Iterable[Mapping[str, Any]]
    ) -> Rbac:
        rules = tuple(rule for role in cluster_roles for rule in role.get("rules") or [])
        return cls(rules, frozenset(x["spec"]["group"] for x in xrds))

    def check(self, api_version: str, kind: str, verb: str, namespace: str = "") -> None:
        group = api_version.rpartition("/")[0]
        if group in self.own_groups:
            return
        resource = plural(kind)
        for rule in self.rules:
            if (
                group in rule.get("apiGroups", [])
                and resource in rule.get("resources", [])
                and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
            ):
                return
        scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        raise Forbidden(
            f'{resource}{"." + group if group else ""} is forbidden: User "{SERVICE_ACCOUNT}" cannot '
            f'{verb} resource "{resource}" in API group "{group}" {scope}'
        )


def plural(kind: str) -> str:
    lower = kind.lower()
    return CORE_PLURALS.get(kind, lower + ("es" if lower.endswith("s") else "s"))


class Structs:
    """Each stored object as a protobuf Struct, made once: the API server never edits a stored
    object in place (store.py), so the object itself keys its Struct (held with it, so its id
    is not reused). An object handed out to be edited in place (`World.get`, for a test that
    edits the cluster's storage directly) is `tainted`: made afresh every time. `forget` drops
    what is no longer stored."""

    def __init__(self) -> None:
        self._made: dict[int, tuple[Mapping[str, Any], Struct]] = {}
        self._tainted: dict[int, Mapping[str, Any]] = {}

    def __call__(self, obj: Mapping[str, Any]) -> Struct:
        found = self._made.get(id(obj))
        if found is not None and found[0] is obj:
            return found[1]
        struct = pipeline.to_struct(obj)
        if id(obj) not in self._tainted:
            self._made[id(obj)] = (obj, struct)
        return struct

    def is_tainted(self, obj: Mapping[str, Any]) -> bool:
        return self._tainted.get(id(obj)) is obj

    def taint(self, obj: Mapping[str, Any]) -> None:
        self._tainted[id(obj)] = obj
        self._made.pop(id(obj), None)

    def forget(self, stored: Callable[[Key], Mapping[str, Any] | None]) -> None:
        def kept(obj: Mapping[str, Any]) -> bool:
            return stored(Key.of(obj)) is obj

        self._made = {i: made for i, made in self._made.items() if kept(made[0])}
        self._tainted = {i: obj for i, obj in self._tainted.items() if kept(obj)}


@dataclass(frozen=True, eq=False)
class _Reading:
    """What one reconcile read, by identity: the stored objects themselves (held, so that an
    id is not reused), each selector its function asked with the objects it matched, and the
    permissions and function it ran with."""

    composite: Mapping[str, Any]
    observed: tuple[tuple[str, Mapping[str, Any] | None], ...]
    selectors: tuple[fnv1.ResourceSelector, ...]
    matched: tuple[tuple[Mapping[str, Any], ...], ...]
    ran_with: tuple[Any, ...]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Reading):
            return NotImplemented
        return (
            self.composite is other.composite
            and _same_objects([o for _, o in self.observed], [o for _, o in other.observed])
            and [n for n, _ in self.observed] == [n for n, _ in other.observed]
            and self.selectors == other.selectors
            and len(self.matched) == len(other.matched)
            and all(map(_same_objects, self.matched, other.matched))
            and _same_objects(self.ran_with, other.ran_with)
        )

    __hash__ = None  # type: ignore[assignment]

    def tainted(self, structs: Structs) -> bool:
        """Read an object a test may edit in place: never taken as unchanged."""
        read = [
            self.composite,
            *(o for _, o in self.observed),
            *(o for m in self.matched for o in m),
        ]
        return any(structs.is_tainted(obj) for obj in read if obj is not None)


def _same_objects(a: Iterable[Any], b: Iterable[Any]) -> bool:
    a, b = list(a), list(b)
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


class Crossplane:
    def __init__(
        self,
        api: Client,
        run: pipeline.Runner,
        api_dir: Path,
        caller: pipeline.Caller = pipeline.CROSSPLANE_2,
    ):
        self.api = api
        self.runner = run
        self.caller = caller
        self.compositions = {
            doc["spec"]["compositeTypeRef"]["kind"]: doc
            for doc in _documents(api_dir / "pipelines")
        }
        self.xrds = {doc["spec"]["names"]["kind"]: doc for doc in _documents(api_dir / "xrds")}
        self.rbac = Rbac.of(_documents(api_dir / "rbac"), self.xrds.values())
        # composite → composition-resource-name → object: its resource references, which live
        # in the composite (spec.crossplane.resourceRefs), so one made again starts with none
        self.owned: dict[Key, dict[str, Key]] = {}
        self.uids: dict[Key, str] = {}  # the composite each entry of `owned` is of
        self.applied: dict[Key, dict[str, Any]] = {}  # what a composite last applied to each object
        self.applied_status: dict[Key, dict[str, Any]] = {}  # each composite's, as last applied
        self.results: dict[Key, list[fnv1.Result]] = {}
        self.events: dict[Key, list[str]] = {}  # Crossplane's own Warning events, by composite
        self.structs = Structs()
        self._read: dict[Key, _Reading] = {}  # what each composite's last no-op reconcile read
        self._asked: list[fnv1.ResourceSelector] = []  # what this reconcile's function asked
        self.clock: Callable[[], float] = lambda: 0.0  # the cluster's, in seconds
        self._polled_at = 0.0

    def poll(self) -> None:
        """The poll interval passed: every composite is reconciled again, changed or not (a
        test that changes what the function answers says so with this)."""
        self._read.clear()
        self._polled_at = self.clock()

    def namespaced_kinds(self) -> set[str]:
        return {kind for kind, xrd in self.xrds.items() if xrd["spec"].get("scope") == "Namespaced"}

    def run(self) -> None:
        for key in [key for key in self.owned if key not in self.api.api.store]:
            del self.owned[key], self.uids[key]  # the garbage collector takes what it composed
        self.structs.forget(lambda key: self.api.peek(key.kind, key.name, key.namespace))
        self._read = {key: read for key, read in self._read.items() if key in self.api.api.store}
        if self.clock() - self._polled_at >= POLL_INTERVAL_SECONDS:
            self.poll()
        for key in self.api.api.store:
            if key.kind in self.compositions and key in self.api.api.store:
                self.reconcile(key)

    def reconcile(self, key: Key) -> None:
        """Reconcile the composite, unless its last reconcile wrote nothing and everything it
        read is as it was then (the module's docstring)."""
        before = self._reading(key)
        if before is None:
            return
        if self._read.get(key) == before and not before.tainted(self.structs):
            return  # a test may have edited what it read in place since: then it runs
        version, self._asked = self.api.api.store.version, []
        self._reconcile(key)
        nothing_written = self.api.api.store.version == version
        reading = self._reading(key, self._asked) if nothing_written else None
        if reading is not None and not reading.tainted(self.structs):
            self._read[key] = reading
        else:
            self._read.pop(key, None)

    def _reading(
        self, key: Key, asked: Iterable[fnv1.ResourceSelector] | None = None
    ) -> _Reading | None:
        """What a reconcile of `key` reads now; the selectors of the last one, where not given."""
        composite = self.api.peek(key.kind, key.name, key.namespace)
        if composite is None:
            return None
        observed = tuple(
            (name, self.api.peek(k.kind, k.name, k.namespace))
            for name, k in sorted(self.owned.get(key, {}).items())
        )
        last = self._read.get(key)
        selectors = tuple(asked) if asked is not None else last.selectors if last else ()
        honour, store = self.caller.honours_namespaces, self.api.api.store
        matched = tuple(  # the kind's objects only: a selector names its kind
            tuple(o for o in store.list(s.kind) if pipeline.matches(s, o, honour))
            for s in selectors
        )
        return _Reading(composite, observed, selectors, matched, (self.rbac, self.runner))

    def _reconcile(self, key: Key) -> None:
        composite = self.api.get(key.kind, key.name, key.namespace)
        if composite is None:
            return
        if self.uids.get(key) != composite["metadata"].get("uid"):  # another composite: no refs
            self.owned[key], self.uids[key] = {}, composite["metadata"].get("uid")
            self.applied_status.pop(key, None)
        owned = self.owned.setdefault(key, {})
        observed = {  # only read: turned into the request's Structs
            n: o for n, k in owned.items() if (o := self.api.peek(k.kind, k.name, k.namespace))
        }
        rsp = None  # the pipeline's response, once it has run
        try:
            root = self.label_root(composite)
            stored = self.api.peek(key.kind, key.name, key.namespace) or composite  # labelled
            rsp, results = pipeline.run_pipeline(
                self._checked(self.runner),
                self.compositions[key.kind],
                stored,
                observed,
                self.readable(),
                self.caller,
                self.structs,
            )
            self.results[key] = [result for _, result in results]
            fatal = [r for r in self.results[key] if r.severity == fnv1.SEVERITY_FATAL]
            if fatal:  # nothing is applied or garbage collected
                return self.unsynced(composite, fatal[0].message)
            unsynced = self.apply_desired(key, root, owned, rsp)
        except (Forbidden, Refused) as error:
            sent = pipeline.composite_conditions(rsp)[2:] if rsp is not None else []
            return self.unsynced(composite, f"cannot compose resources: {error}", sent)
        composite = self.api.get(key.kind, key.name, key.namespace) or composite
        # The conditions a function no longer sends stay as they were: Crossplane sets those it
        # is sent on the XR's own (reconciler.go); the rest of the status is the desired one.
        kept = (composite.get("status") or {}).get("conditions") or []
        desired = StructView(rsp.desired.composite.resource).to_dict().get("status", {})
        composite["status"] = {**desired, "conditions": kept}
        _mark_emptied(composite["status"], self.applied_status.get(key, {}), desired)
        conditions = pipeline.composite_conditions(rsp)
        kube.set_conditions(composite, *(kube.condition(**_fields(c)) for c in conditions))
        if unsynced:  # reconciler.go: "Unsynced resources: " and the first three names
            message = f"Unsynced resources: {pipeline.first_names(unsynced)}"
            failed = kube.condition("Synced", "False", "ReconcileError", message)
            kube.set_conditions(composite, failed)
        try:
            self.api.update_status(composite)  # server-side applied, as Crossplane 2.x does
        except Refused as error:
            if error.reason != INVALID:
                raise
            # composition_functions.go: the composed resources stay applied, the status is not
            # written (the reconciler's own update of it fails too), and a Warning says why.
            self.events.setdefault(key, []).append(
                "Warning ComposeResources: cannot compose resources: cannot apply composite "
                f"resource status: {error}"
            )
            return
        self.applied_status[key] = desired

    def readable(self) -> list[dict[str, Any]]:
        return self.api.peek_all()  # only read: turned into the request's Structs

    def _checked(self, run: pipeline.Runner) -> pipeline.Runner:
        """The runner, with Crossplane's permission check on what each call asks it to fetch."""

        def call(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
            rsp = run(req)
            asked = {**rsp.requirements.extra_resources, **rsp.requirements.resources}
            self._asked += asked.values()
            for selector in asked.values():
                verb = "get" if selector.WhichOneof("match") == "match_name" else "list"
                self.rbac.check(selector.api_version, selector.kind, verb, selector.namespace)
            return rsp

        return call

    def label_root(self, composite: dict[str, Any]) -> str:
        """Crossplane's naming configurator: a composite without the composite label (a root,
        not one another composite made) takes its own name as the label's value; whatever it
        composes is labelled with that value, so nested composites carry their root's."""
        root = (composite["metadata"].get("labels") or {}).get(COMPOSITE)
        if root:
            return root
        composite["metadata"].setdefault("labels", {})[COMPOSITE] = composite["metadata"]["name"]
        self.api.apply(composite)
        return composite["metadata"]["name"]

    def apply_desired(
        self, key: Key, root: str, owned: dict[str, Key], rsp: fnv1.RunFunctionResponse
    ) -> list[str]:
        """Garbage-collect what is no longer desired, then apply the rest; the names of those
        the API server refused as invalid (FunctionComposer.Compose: such a resource is
        unsynced and a Warning event says why, the others are applied all the same; any
        other refusal stops the reconcile)."""
        desired = set(rsp.desired.resources.keys())
        for name in sorted(set(owned) - desired):
            child = owned.pop(name)
            self.rbac.check(self._api_version(child), child.kind, "delete", child.namespace)
            self.delete(child)
        unsynced = []
        for name in sorted(desired):
            obj = StructView(rsp.desired.resources[name].resource).to_dict()
            try:
                self.apply_composed(key, root, name, obj)
            except Refused as error:
                if error.reason != INVALID:
                    raise
                self.events.setdefault(key, []).append(
                    f'Warning ComposeResources: cannot apply composed resource "{name}": {error}'
                )
                unsynced.append(name)
        return unsynced

    def apply_composed(self, owner: Key, root: str, name: str, desired: dict[str, Any]) -> None:
        metadata = desired.setdefault("metadata", {})
        if owner.namespace:  # a namespaced composite composes into its own namespace
            metadata["namespace"] = owner.namespace
        metadata.setdefault("labels", {})[COMPOSITE] = root
        metadata.setdefault("annotations", {})[RESOURCE_NAME] = name
        metadata["ownerReferences"] = [self.controller_reference(owner)]
        for verb in COMPOSE_VERBS:
            self.rbac.check(
                desired["apiVersion"], desired["kind"], verb, metadata.get("namespace", "")
            )
        key = Key.of(desired)
        self.owned[owner][name] = key
        existing = self.api.peek(key.kind, key.name, key.namespace)  # copied by the apply
        previous, applied = self.applied.get(key, {}), copy_of(desired)
        if existing is not None:  # server-side apply: other managers' fields stay
            desired = _server_side_apply(existing, previous, desired)
        self.api.apply(desired, strict=True)  # SSA refuses a field the schema lacks
        self.applied[key] = applied

    def controller_reference(self, owner: Key) -> dict[str, Any]:
        """`meta.AsController`: the composite, by uid, as the composed resource's controller."""
        composite = self.api.peek(owner.kind, owner.name, owner.namespace) or {}
        return {
            "apiVersion": composite.get("apiVersion", ""),
            "kind": owner.kind,
            "name": owner.name,
            "uid": composite.get("metadata", {}).get("uid", ""),
            "controller": True,
            "blockOwnerDeletion": True,
        }

    def delete(self, key: Key) -> None:
        """Delete an object; the garbage collector deletes what it owns."""
        self.api.delete(key.kind, key.name, key.namespace)
        self.applied.pop(key, None)

    def unsynced(
        self, composite: dict[str, Any], message: str, sent: Iterable[Mapping[str, str]] = ()
    ) -> None:
        """A reconcile that failed: Synced=False; the function's conditions that were `sent`
        are set, and every other condition of its own reads Unknown (reconciler.go: "A fatal
        error occurred before the status of this condition could be determined.")."""
        sent = [kube.condition(**_fields(c)) for c in sent]
        seen = {c["type"] for c in sent} | SYSTEM_CONDITIONS
        unknown = [
            kube.condition(c["type"], "Unknown", "FatalError", FATAL_UNKNOWN)
            for c in (composite.get("status") or {}).get("conditions") or []
            if c["type"] not in seen
        ]
        failed = kube.condition("Synced", "False", "ReconcileError", message)
        kube.set_conditions(composite, failed, *sent, *unknown)
        self.api.update_status(composite)

    def _api_version(self, key: Key) -> str:
        found = self.api.get(key.kind, key.name, key.namespace)
        return found["apiVersion"] if found else ""


def _fields(condition: Mapping[str, str]) -> dict[str, str]:
    return {
        "type_": condition["type"],
        "status": condition["status"],
        "reason": condition.get("reason", ""),
        "message": condition.get("message", ""),
    }


def _server_side_apply(
    existing: Mapping[str, Any], previous: Mapping[str, Any], desired: Mapping[str, Any]
) -> dict[str, Any]:
    """Fields this manager applied before but not now go; the rest of `existing` stays."""
    result = copy_of(dict(existing))
    _drop(result, previous, desired)
    applied = {k: v for k, v in desired.items() if k != "status"}
    _merge(result, applied)
    _mark_emptied(result, previous, applied)
    references = {
        ref["uid"]: ref for ref in existing.get("metadata", {}).get("ownerReferences", [])
    }
    references |= {ref["uid"]: ref for ref in desired["metadata"].get("ownerReferences", [])}
    if references:  # a list merged by uid, as its schema says (`listMapKey: uid`)
        result["metadata"]["ownerReferences"] = list(references.values())
    return result


def _drop(target: dict[str, Any], previous: Mapping[str, Any], desired: Mapping[str, Any]) -> None:
    for key, value in previous.items():
        if key not in desired:
            target.pop(key, None)
        elif (
            isinstance(value, Mapping)
            and isinstance(desired[key], Mapping)
            and isinstance(target.get(key), dict)
        ):
            _drop(target[key], value, desired[key])


def _mark_emptied(
    target: dict[str, Any], previous: Mapping[str, Any], desired: Mapping[str, Any]
) -> None:
    """Where this manager applied a map with fields before and applies `{}` now, and no other
    manager's field is left in it, server-side apply stores null (validation.EMPTIED), which
    the API server then checks against the schema."""
    for key, value in desired.items():
        before, now = previous.get(key), target.get(key)
        if not isinstance(value, Mapping) or not isinstance(before, Mapping):
            continue
        if not value and before and now == {}:
            target[key] = EMPTIED
        elif isinstance(now, dict):
            _mark_emptied(now, before, value)


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy_of(value)


def _documents(directory: Path) -> list[dict[str, Any]]:
    return [obj for path in sorted(directory.glob("*.yaml")) for obj in shipped(path)]
