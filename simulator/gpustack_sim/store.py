"""The simulated cluster's objects: a typed store keyed by kind, namespace and name.

The API server never changes a stored object in place: every write stores a new object in
place of the old one, built from a private copy of what the client sent (parts a write leaves
as they were may be shared between the two). So a read may hand out the stored object itself
wherever the reader only reads — Crossplane fetching required resources, kubectl printing a
table — and only a reader that edits what it reads (a controller's get, edit, update) pays for
a copy (`copy_of`). A test may still edit the storage directly through `World.get`; what is
remembered by an object's identity (its protobuf Struct) is not remembered for one handed out
that way. `version` moves with every put and removal, so "has anything changed this round?"
is one comparison rather than a dump of the whole cluster.
"""

from __future__ import annotations

import copy
import json
import marshal
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple


class Key(NamedTuple):
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Key:
        metadata = obj.get("metadata") or {}
        return cls(str(obj["kind"]), metadata.get("namespace", ""), metadata["name"])


def copy_of(obj: Any) -> Any:
    """A deep copy of a JSON-like value (dicts, lists, strings, numbers, booleans, None), at C
    speed through marshal; anything else in it (a date YAML parsed) falls back to deepcopy."""
    if not isinstance(obj, (dict, list)):
        return obj  # strings, numbers, booleans and None are not edited in place
    try:
        return marshal.loads(marshal.dumps(obj))
    except ValueError:
        return copy.deepcopy(obj)


class Store:
    """Objects as plain dicts, by key. Reads hand out the stored dict: treat it as read-only
    (the API server replaces it on the next write; it never edits one in place)."""

    def __init__(self) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        self._by_kind: dict[str, dict[Key, dict[str, Any]]] = {}
        self.version = 0  # moves with every put and every removal
        self._sorted: tuple[int, list[Key]] = (-1, [])  # the keys, sorted, at a version

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self._objects.get(Key(kind, namespace, name))

    def list(self, kind: str) -> list[dict[str, Any]]:
        found = self._by_kind.get(kind, {})
        return [found[key] for key in sorted(found)]

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` itself: the caller hands over an object no one else holds."""
        key = Key.of(obj)
        self._objects[key] = self._by_kind.setdefault(key.kind, {})[key] = obj
        self.version += 1
        return obj

    def remove(self, key: Key) -> dict[str, Any] | None:
        removed = self._objects.pop(key, None)
        if removed is not None:
            del self._by_kind[key.kind][key]
            self.version += 1
        return removed

    def keys(self) -> list[Key]:
        version, keys = self._sorted
        if version != self.version:
            keys = sorted(self._objects)
            self._sorted = (self.version, keys)
        return list(keys)

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys())

    def values(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._objects.values()))

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def snapshot(self) -> str:
        """Everything, as one comparable string (two clusters in the same state?)."""
        return json.dumps(sorted((list(k), v) for k, v in self._objects.items()), sort_keys=True)
