"""The simulated cluster's objects: a typed store keyed by kind, namespace and name."""

from __future__ import annotations

import copy
import json
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


class Store:
    """Objects as plain dicts. Reads hand out the stored dict (controllers edit it in place,
    as a controller's update would); `put` stores a copy."""

    def __init__(self) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self._objects.get(Key(kind, namespace, name))

    def list(self, kind: str) -> list[dict[str, Any]]:
        return [obj for key, obj in sorted(self._objects.items()) if key.kind == kind]

    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(dict(obj))
        self._objects[Key.of(stored)] = stored
        return stored

    def remove(self, key: Key) -> dict[str, Any] | None:
        return self._objects.pop(key, None)

    def keys(self) -> list[Key]:
        return sorted(self._objects)

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys())

    def values(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._objects.values()))

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def snapshot(self) -> str:
        """Everything, as one comparable string (has anything changed?)."""
        return json.dumps(sorted((list(k), v) for k, v in self._objects.items()), sort_keys=True)
