"""The simulated API server: every write goes through here, as it would through kube-apiserver.

It decides whether a write is stored and what is stored, with the API server's rules:
- each create, update, patch and status write is validated (`validation.check`: schema, ObjectMeta,
  CEL rules with `oldSelf`); a refused write raises `Refused` with the API server's message and
  leaves the stored object untouched;
- unknown fields are pruned, as the API server prunes them; what it says of them (and of a
  field the request body gives twice: `duplicates`, which the caller's decoder found) is the
  request's `field_validation`, as kube-apiserver's parameter of that name: `Warn` (the API's
  default, what a controller's client sends) puts `unknown field "spec.x"` and
  `duplicate field "spec.y"` in `warnings`, as its Warning headers; `Strict` (kubectl's default,
  `--validate=strict`) refuses the write as BadRequest, in the decoder's words:
  `Instance in version "v1alpha1" cannot be handled as a Instance: strict decoding error:
  duplicate field "spec.y", unknown field "spec.x"`, before any other check; `Ignore` says
  nothing;
- `metadata.generation` starts at 1 and moves when anything but metadata and status changes;
- where a kind has a status subresource, a write of the main resource keeps the stored status and
  `update_status` writes only the status (never moving the generation). A create keeps the status
  it is given, so fixtures (Nodes with their capacity) load in one write;
- patches: JSON merge patch (RFC 7386) and JSON patch (RFC 6902), each then validated as an update;
- mutating admission a stand-in registers (`mutators`: a built-in plugin such as
  DefaultTolerationSeconds, or a webhook such as Kueue's) changes each new object of its kind
  before it is validated, in the order registered;
- validating admission webhooks a stand-in registers (`webhooks`) judge each create or update of
  their kind they are registered for, after the schema, as kube-apiserver calls them; status
  writes do not reach them;
- a Pod's spec changes on update only where kube-apiserver allows it (podupdate.py), and it is
  bound to a node through the binding subresource (`bind`);
- the system fields: a create sets `metadata.uid` (a UUID, derived from the object's identity
  and how many times it was created, so a run is repeatable) and `creationTimestamp` (the
  cluster's clock: the node lifecycle's, which a scenario's `sleep` moves), whatever the client
  sent; an update keeps them; `resourceVersion` moves with every write that changes the stored
  object (a write that changes nothing stores nothing). Optimistic concurrency (a stale
  `resourceVersion` refused) is not played: the stand-ins write one at a time.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpustack_sim.podupdate import pod_update_errors
from gpustack_sim.schemas import KindSchema, Schemas
from gpustack_sim.store import Key, Store, copy_of
from gpustack_sim.validation import FieldError, check, json_equal, same

EPOCH = "2026-01-01T00:00:00Z"  # the clock's reading until a cluster sets one
# What the server sets in metadata whatever the client sent (generation: from the change).
SYSTEM_FIELDS = ("uid", "creationTimestamp", "resourceVersion", "generation")
# The API server's status reasons for a refused write.
INVALID = "Invalid"
NOT_FOUND = "NotFound"
ALREADY_EXISTS = "AlreadyExists"
BAD_REQUEST = "BadRequest"
FORBIDDEN = "Forbidden"
# The namespaces kube-apiserver makes when it starts: an object in any other needs its Namespace.
INITIAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
# fieldValidation, the write's query parameter (kube-apiserver's values).
IGNORE, WARN, STRICT = "Ignore", "Warn", "Strict"


class Refused(Exception):
    """A write the API server refuses; the message is what kubectl would print.

    `reason` is the API server's status reason (Invalid, NotFound, AlreadyExists, BadRequest);
    `errors` are the field errors of an Invalid refusal; `fields` the paths of the fields a
    strict decoding refused, the first `duplicates` of them given twice, the rest unknown;
    `api_version` and `kind` the object's, where the refusal is about one."""

    def __init__(
        self,
        message: str,
        reason: str = INVALID,
        errors: Sequence[FieldError] = (),
        fields: Sequence[str] = (),
        duplicates: int = 0,
        obj: Mapping[str, Any] | None = None,
    ):
        super().__init__(message)
        self.reason = reason
        self.errors = tuple(errors)
        self.fields = tuple(fields)
        self.duplicates = duplicates
        self.api_version = str((obj or {}).get("apiVersion", ""))
        self.kind = str((obj or {}).get("kind", ""))

    @property
    def paths(self) -> tuple[str, ...]:
        """The fields the refusal names, the first the one to fix first."""
        return self.fields or tuple(error.path for error in self.errors if error.path)


@dataclass(frozen=True)
class Webhook:
    """A validating admission webhook on writes of one kind (not of its status subresource):
    `admit(new, old)` says why it denies the write, or None; `old` is None on a create, which
    reaches the webhook only if it registered for creates."""

    name: str
    kind: str
    admit: Callable[[Mapping[str, Any], Mapping[str, Any] | None], str | None]
    creates: bool = False  # registered for CREATE as well as UPDATE
    # The status reason of a denial: controller-runtime's `Denied` answers 403 Forbidden, a
    # webhook that returns field causes (KubeVirt's) 422 Invalid.
    reason: str = INVALID


@dataclass(frozen=True)
class Mutator:
    """Mutating admission of new objects of one kind: `mutate(obj)` changes it in place."""

    name: str
    kind: str
    mutate: Callable[[dict[str, Any]], None]


class ApiServer:
    """Writes to `store`, validated against `schemas` (by default the v2 XRDs and the upstream
    schemas from `$GPUSTACK_SCHEMAS` or its fallbacks). `notices` says once what cannot be
    validated; `warnings` collects the unknown fields pruned from writes."""

    def __init__(self, store: Store, schemas: Schemas | None = None):
        self.store = store
        self.schemas = schemas or Schemas.found()
        self.notices: list[str] = list(self.schemas.notices)
        self.warnings: list[str] = []
        self.webhooks: list[Webhook] = []
        self.mutators: list[Mutator] = []
        self.clock: Callable[[], str] = lambda: EPOCH  # the time a create is stamped with
        self.revision = 0  # the last resourceVersion given
        self.creations: dict[Key, int] = {}  # how many times each identity was created

    def create(
        self,
        obj: Mapping[str, Any],
        strict: bool = False,
        *,
        field_validation: str = WARN,
        duplicates: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Store a new object at generation 1 (with the status it is given). `strict`: an
        unknown field is an Invalid field error, "field not declared in schema" (what
        server-side apply does: its typed patch has no place for a field the schema lacks);
        `field_validation` and `duplicates`: the module's docstring."""
        obj = _copy_of(obj)
        if self._stored(obj) is not None:
            raise self._refusal(obj, ALREADY_EXISTS, "already exists")
        if not self._namespace_exists(obj["metadata"].get("namespace")):
            namespace = obj["metadata"]["namespace"]  # NamespaceLifecycle admission
            raise Refused(f'namespaces "{namespace}" not found', NOT_FOUND, obj=obj)
        for mutator in self.mutators:
            if mutator.kind == obj["kind"]:
                mutator.mutate(obj)
        key = Key.of(obj)
        self.creations[key] = self.creations.get(key, 0) + 1
        metadata = obj["metadata"]
        metadata["uid"] = str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"{'/'.join(key)}#{self.creations[key]}")
        )
        metadata["creationTimestamp"] = self.clock()
        metadata["generation"] = 1
        return self._write(obj, None, False, strict, field_validation, duplicates)

    def _namespace_exists(self, namespace: str | None) -> bool:
        """Whether an object may be created there: cluster-scoped, one of the namespaces
        kube-apiserver makes when it starts, or a stored Namespace."""
        return (
            not namespace
            or namespace in INITIAL_NAMESPACES
            or self.store.get("Namespace", namespace) is not None
        )

    def bind(self, name: str, namespace: str, node: str) -> dict[str, Any]:
        """The Pod binding subresource (what kube-scheduler posts): sets `spec.nodeName` of a
        Pod not yet assigned."""
        pod = self.store.get("Pod", name, namespace)
        if pod is None:
            raise Refused(f'pods "{name}" not found', NOT_FOUND)
        assigned = (pod.get("spec") or {}).get("nodeName")
        if assigned:
            raise Refused(f'pod {name} is already assigned to node "{assigned}"', "Conflict")
        bound = copy_of(pod)
        bound["spec"]["nodeName"] = node
        return self._stored_as(bound, pod)

    def update(
        self,
        obj: Mapping[str, Any],
        strict: bool = False,
        *,
        field_validation: str = WARN,
        duplicates: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Replace the object's spec and metadata; its status stays the stored one."""
        obj = _copy_of(obj)
        old = self._stored(obj)
        if old is None:
            raise self._refusal(obj, NOT_FOUND, "not found")
        if self._has_status_subresource(obj):
            obj.pop("status", None)
            if "status" in old:
                obj["status"] = old["status"]  # stored objects are never edited in place
        return self._write(obj, old, False, strict, field_validation, duplicates)

    def apply(
        self,
        obj: Mapping[str, Any],
        strict: bool = False,
        *,
        field_validation: str = WARN,
        duplicates: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Create the object, or update it when it exists (its status stays the stored one)."""
        write = self.update if self._stored(obj) is not None else self.create
        return write(obj, strict, field_validation=field_validation, duplicates=duplicates)

    def update_status(
        self,
        obj: Mapping[str, Any],
        *,
        field_validation: str = WARN,
        duplicates: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The status subresource: only `obj`'s status is taken; spec, metadata and generation stay."""
        old = self._stored(obj)
        if old is None:
            raise self._refusal(obj, NOT_FOUND, "not found")
        new = {k: v for k, v in old.items() if k != "status"}
        new["metadata"] = copy_of(old["metadata"])  # the system fields are set on it
        if "status" in obj:
            new["status"] = copy_of(obj["status"])
        return self._write(new, old, True, False, field_validation, duplicates)

    def merge_patch(
        self,
        kind: str,
        name: str,
        patch: Mapping[str, Any],
        namespace: str = "",
        subresource: str = "",
        *,
        field_validation: str = WARN,
        duplicates: Sequence[str] = (),
    ) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386): objects merge, null deletes, anything else replaces.
        `subresource="status"` patches the status subresource; `duplicates` are the fields
        the patch's own JSON gives twice."""
        base = self._patch_base(kind, name, namespace)
        patched = copy_of(base)
        merge(patched, patch)
        return self._patched(base, patched, subresource, field_validation, duplicates)

    def json_patch(
        self,
        kind: str,
        name: str,
        operations: Sequence[Mapping[str, Any]],
        namespace: str = "",
        subresource: str = "",
        *,
        field_validation: str = WARN,
    ) -> dict[str, Any]:
        """A JSON patch (RFC 6902): add, remove, replace, move, copy and test, in order; any
        operation that cannot apply, a failed `test` included, refuses the whole patch."""
        base = self._patch_base(kind, name, namespace)
        patched: Any = copy_of(base)
        for index, operation in enumerate(operations):
            try:
                patched = _apply_operation(patched, operation)
            except _PatchError as error:
                where = f"{operation.get('op')} {operation.get('path')}"
                message = (
                    f'{self._names(base)} "{name}": JSON patch operation {index} ({where}) {error}'
                )
                raise Refused(message, BAD_REQUEST) from None
        return self._patched(base, patched, subresource, field_validation)

    def delete(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.store.remove(Key(kind, namespace, name))

    # --- internals ------------------------------------------------------------------------

    def _stored(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        key = _key_of(obj)
        return self.store.get(key.kind, key.name, key.namespace)

    def _schema(self, obj: Mapping[str, Any]) -> KindSchema | None:
        return self.schemas.lookup(str(obj.get("apiVersion", "")), str(obj["kind"]))

    def _has_status_subresource(self, obj: Mapping[str, Any]) -> bool:
        schema = self._schema(obj)
        return schema is None or schema.status_subresource  # unknown kinds: as most kinds are

    def _write(
        self,
        obj: dict,
        old: dict | None,
        status_only: bool = False,
        strict: bool = False,
        field_validation: str = WARN,
        duplicates: Sequence[str] = (),
    ) -> dict[str, Any]:
        if old is not None and not duplicates and self._unchanged(obj, old):
            # The stored object as it is: it passed every check when it was stored, it holds
            # no unknown field and every default (a simulation's writes are mostly these).
            if not status_only:
                self._admit(old, old)
            return old
        schema = self._schema(obj)
        checked = (
            check(schema, obj, old, status_only=status_only, strict=strict) if schema else None
        )
        self._decoded(obj, field_validation, duplicates, checked.unknown if checked else ())
        if schema is not None and checked is not None:
            errors = list(checked.errors)
            if old is not None and not status_only and obj["kind"] == "Pod":
                errors += pod_update_errors(checked.obj, old)
            if errors:
                raise _invalid(schema, obj, errors)
            obj = checked.obj
        if not status_only:
            self._admit(obj, old)
        if old is not None:
            obj["metadata"]["generation"] = _generation(old, obj)
        return self._stored_as(obj, old)

    @staticmethod
    def _unchanged(obj: dict[str, Any], old: Mapping[str, Any]) -> bool:
        """Is `obj` the stored `old` itself, but for the system fields the server sets?"""
        metadata, stored = obj.get("metadata"), old["metadata"]
        if not isinstance(metadata, dict):
            return False
        system = {f: stored[f] for f in SYSTEM_FIELDS if f in stored}
        given = {f: metadata[f] for f in SYSTEM_FIELDS if f in metadata}
        if given == system:
            return same(obj, old)
        return same({**obj, "metadata": {**metadata, **system}}, old) and not (
            given.keys() - system.keys()
        )

    def _decoded(
        self,
        obj: Mapping[str, Any],
        field_validation: str,
        duplicates: Sequence[str],
        unknown: Sequence[str],
    ) -> None:
        """What the decoder says of the fields given twice and the fields pruned, by the
        write's field validation (the module's docstring); nothing under Ignore."""
        said = [f'duplicate field "{p}"' for p in duplicates]
        said += [f'unknown field "{p}"' for p in unknown]
        if not said or field_validation == IGNORE:
            return
        if field_validation != STRICT:
            self.warnings += said
            return
        kind, version = str(obj["kind"]), str(obj.get("apiVersion", "")).rpartition("/")[2]
        message = (
            f'{kind} in version "{version}" cannot be handled as a {kind}: '
            f"strict decoding error: {', '.join(said)}"
        )
        fields = [*duplicates, *unknown]
        raise Refused(message, BAD_REQUEST, fields=fields, duplicates=len(duplicates), obj=obj)

    def _stored_as(self, obj: dict[str, Any], old: Mapping[str, Any] | None) -> dict[str, Any]:
        """Store `obj` in place of `old`: the system fields kept, a new resourceVersion when
        anything changed (and nothing stored when nothing did)."""
        metadata = obj["metadata"]
        if old is not None:
            for field in ("uid", "creationTimestamp", "resourceVersion"):
                if field in old["metadata"]:
                    metadata[field] = old["metadata"][field]
                else:
                    metadata.pop(field, None)
            if same(obj, old):
                return old  # as it was: nothing is stored
        self.revision += 1
        metadata["resourceVersion"] = str(self.revision)
        return self.store.put(obj)

    def _admit(self, obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> None:
        """kube-apiserver's wording for a webhook's denial; its status reason is the webhook's."""
        for hook in self.webhooks:
            called = hook.kind == obj["kind"] and (old is not None or hook.creates)
            denied = hook.admit(obj, old) if called else None
            if denied:
                message = f'admission webhook "{hook.name}" denied the request: {denied}'
                raise Refused(message, hook.reason)

    def _patch_base(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        existing = self.store.get(kind, name, namespace)
        if existing is None:
            resource = self.schemas.resource_of(kind)
            raise Refused(f'{resource} "{name}" not found', NOT_FOUND)
        return existing

    def _patched(
        self,
        base: dict[str, Any],
        patched: Any,
        subresource: str,
        field_validation: str = WARN,
        duplicates: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Write the patched object, as the same object: a patch cannot rename or re-kind it."""
        if not isinstance(patched, dict) or _key_of(patched) != Key.of(base):
            message = f'{self._names(base)} "{Key.of(base).name}": a patch cannot change the kind, namespace or name'
            raise Refused(message, BAD_REQUEST)
        options = {"field_validation": field_validation, "duplicates": duplicates}
        if subresource == "status":
            return self.update_status(patched, **options)
        if subresource:
            raise Refused(
                f"the simulated API server has no {subresource!r} subresource", BAD_REQUEST
            )
        return self.update(patched, **options)

    def _names(self, obj: Mapping[str, Any]) -> str:
        schema = self._schema(obj)
        return schema.qualified_kind if schema else str(obj.get("kind"))

    def _refusal(self, obj: Mapping[str, Any], reason: str, words: str) -> Refused:
        resource = self.schemas.resource_of(str(obj["kind"]), str(obj.get("apiVersion", "")))
        return Refused(f'{resource} "{_key_of(obj).name}" {words}', reason)


def _copy_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    _key_of(obj)
    return copy_of(dict(obj))


def _key_of(obj: Mapping[str, Any]) -> Key:
    """The object's identity; the API server refuses an object without kind or name."""
    metadata = obj.get("metadata")
    if (
        not obj.get("kind")
        or not obj.get("apiVersion")
        or not isinstance(metadata, Mapping)
        or not metadata.get("name")
    ):
        raise Refused("an object needs apiVersion, kind and metadata.name", BAD_REQUEST)
    return Key.of(obj)


def _generation(old: Mapping[str, Any], new: Mapping[str, Any]) -> int:
    """Moves by one when anything but metadata and status changed, as it does for CRDs."""
    previous = old.get("metadata", {}).get("generation", 1)

    def desired(obj: Mapping[str, Any]) -> dict:
        return {k: v for k, v in obj.items() if k not in ("metadata", "status")}

    return previous + (not same(desired(old), desired(new)))


def _invalid(schema: KindSchema, obj: Mapping[str, Any], errors: Sequence[FieldError]) -> Refused:
    """kube-apiserver's wording: one error as is, several in brackets."""
    shown = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    name = obj["metadata"]["name"]
    return Refused(
        f'{schema.qualified_kind} "{name}" is invalid: {shown}', INVALID, errors, obj=obj
    )


# --- RFC 7386 ---------------------------------------------------------------------------------


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """Merge `patch` into `target` in place (RFC 7386)."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merged(target.get(key), value)


def _merged(target: Any, patch: Any) -> Any:
    if not isinstance(patch, Mapping):
        return copy_of(patch)
    result = copy_of(target) if isinstance(target, dict) else {}
    merge(result, patch)
    return result


# --- RFC 6902 ---------------------------------------------------------------------------------


class _PatchError(Exception):
    """An operation that cannot apply; the message ends the sentence 'operation N (op path) …'."""


def _apply_operation(document: Any, operation: Mapping[str, Any]) -> Any:
    op, path = operation.get("op"), _pointer(operation.get("path"))
    if op == "test":
        found = _get(document, path)
        if not json_equal(found, operation.get("value")):
            wanted = json.dumps(operation.get("value"))
            raise _PatchError(f"failed: the value is {json.dumps(found)}, not {wanted}")
        return document
    if op in ("add", "replace"):
        if op == "replace":
            _get(document, path)
        return _put(document, path, copy_of(operation.get("value")), replace=op == "replace")
    if op == "remove":
        return _remove(document, path)
    if op in ("move", "copy"):
        source = _pointer(operation.get("from"))
        if op == "move" and path[: len(source)] == source and path != source:
            raise _PatchError("cannot move a value into itself")
        value = copy_of(_get(document, source))
        document = _remove(document, source) if op == "move" else document
        return _put(document, path, value, replace=False)
    raise _PatchError("is not an operation: op must be add, remove, replace, move, copy or test")


def _pointer(text: Any) -> list[str]:
    if text == "":
        return []
    if not isinstance(text, str) or not text.startswith("/"):
        raise _PatchError(f"has no JSON pointer: {text!r} must be empty or start with /")
    return [token.replace("~1", "/").replace("~0", "~") for token in text[1:].split("/")]


def _get(document: Any, path: list[str]) -> Any:
    for depth, token in enumerate(path):
        if isinstance(document, dict) and token in document:
            document = document[token]
        elif isinstance(document, list) and token.isdigit() and int(token) < len(document):
            document = document[int(token)]
        else:
            raise _PatchError(f"failed: /{'/'.join(path[: depth + 1])} does not exist")
    return document


def _put(document: Any, path: list[str], value: Any, replace: bool) -> Any:
    if not path:
        return value
    parent, token = _get(document, path[:-1]), path[-1]
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        index = (
            len(parent)
            if token == "-" and not replace
            else _index(parent, token, len(parent) + (not replace))
        )
        if replace:
            parent[index] = value
        else:
            parent.insert(index, value)
    else:
        raise _PatchError(f"failed: /{'/'.join(path[:-1])} is not an object or a list")
    return document


def _remove(document: Any, path: list[str]) -> Any:
    if not path:
        raise _PatchError("failed: the whole document cannot be removed")
    _get(document, path)  # it must exist
    parent, token = _get(document, path[:-1]), path[-1]
    if isinstance(parent, dict):
        del parent[token]
    else:
        del parent[_index(parent, token, len(parent))]
    return document


def _index(items: list, token: str, bound: int) -> int:
    if not token.isdigit() or int(token) >= bound or (token != "0" and token.startswith("0")):
        raise _PatchError(f"failed: {token!r} is not an index of a list of {len(items)}")
    return int(token)
