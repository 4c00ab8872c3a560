"""How the stand-in controllers talk to the simulated API server, as client-go would.

Reads hand out copies, so a controller's edits reach the cluster only through a write the API
server checks (`peek` is the one read without a copy, for what is only read): `apply` (create or update the object; its status stays), `update_status` (the
status subresource), `merge_patch`, `delete`, `bind` (a Pod's binding).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpustack_sim.apiserver import ApiServer
from gpustack_sim.store import copy_of


class Client:
    def __init__(self, api: ApiServer):
        self.api = api

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        found = self.api.store.get(kind, name, namespace)
        return copy_of(found) if found is not None else None

    def peek(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The stored object itself, not a copy: for a reader that only reads it."""
        return self.api.store.get(kind, name, namespace)

    def peek_all(self) -> list[dict[str, Any]]:
        """Every stored object itself, sorted by key: read-only (Crossplane fetching the
        required resources reads thousands of objects a scenario, and edits none)."""
        store = self.api.store
        return [obj for key in store if (obj := store.get(key.kind, key.name, key.namespace))]

    def peek_list(self, kind: str) -> list[dict[str, Any]]:
        """The kind's stored objects themselves, sorted: for a reader that only reads them."""
        return self.api.store.list(kind)

    def list(self, kind: str) -> list[dict[str, Any]]:
        return [copy_of(obj) for obj in self.api.store.list(kind)]

    def owned(self) -> list[dict[str, Any]]:
        """Every object with owner references, of every kind (the garbage collector's view):
        the stored objects themselves, read-only (a change is written as a new object)."""
        return [obj for obj in self.peek_all() if obj["metadata"].get("ownerReferences")]

    def apply(self, obj: Mapping[str, Any], strict: bool = False) -> dict[str, Any]:
        """Create or update; returns what was stored (with the API server's defaults).
        `strict`: an unknown field is refused, not pruned (`ApiServer.create`)."""
        return copy_of(self.api.apply(obj, strict))

    def update_status(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return copy_of(self.api.update_status(obj))

    def merge_patch(
        self, kind: str, name: str, patch: Mapping[str, Any], namespace: str = ""
    ) -> dict[str, Any]:
        return copy_of(self.api.merge_patch(kind, name, patch, namespace))

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        self.api.delete(kind, name, namespace)

    def bind(self, name: str, namespace: str, node: str) -> dict[str, Any]:
        """A Pod bound to `node` (the binding subresource)."""
        return copy_of(self.api.bind(name, namespace, node))
