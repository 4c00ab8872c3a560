"""The simulated API server: every write goes through here, as it would through kube-apiserver.

It keeps what the API server keeps: `metadata.generation` moves when the spec changes, a write
of the main resource keeps the status (the status subresource is written separately), merge
patches drop fields set to null.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from functions.simulate.store import Key, Store


class Refused(Exception):
    """A write the API server refuses; the message is what kubectl would print."""


class ApiServer:
    def __init__(self, store: Store):
        self.store = store

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create or update the object (its status stays the stored one)."""
        obj = copy.deepcopy(dict(obj))
        existing = self.store.get(*_where(obj))
        metadata = obj.setdefault("metadata", {})
        if existing is None:
            metadata.setdefault("generation", 1)
        else:
            if "status" in existing:
                obj.setdefault("status", existing["status"])
            changed = existing.get("spec") != obj.get("spec")
            metadata["generation"] = existing["metadata"].get("generation", 1) + changed
        return self.store.put(obj)

    def merge_patch(self, kind: str, name: str, patch: Mapping[str, Any], namespace: str = "") -> dict[str, Any]:
        """A JSON merge patch (RFC 7386): objects merge, null deletes, anything else replaces."""
        existing = self.store.get(kind, name, namespace)
        if existing is None:
            raise Refused(f'{kind.lower()}s "{name}" not found')
        patched = copy.deepcopy(existing)
        merge(patched, patch)
        return self.apply(patched)

    def delete(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return self.store.remove(Key(kind, namespace, name))


def _where(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    key = Key.of(obj)
    return key.kind, key.name, key.namespace


def merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
