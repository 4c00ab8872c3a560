"""How the stand-in controllers talk to the simulated API server, as client-go would.

Reads hand out copies, so a controller's edits reach the cluster only through a write the API
server checks: `apply` (create or update the object; its status stays), `update_status` (the
status subresource), `merge_patch`, `delete`, `bind` (a Pod's binding).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from functions.simulate.apiserver import ApiServer


class Client:
    def __init__(self, api: ApiServer):
        self.api = api

    def get(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        found = self.api.store.get(kind, name, namespace)
        return copy.deepcopy(found) if found is not None else None

    def list(self, kind: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(obj) for obj in self.api.store.list(kind)]

    def owned(self) -> list[dict[str, Any]]:
        """Every object with owner references, of every kind (the garbage collector's view)."""
        found = (self.api.store.get(k.kind, k.name, k.namespace) for k in self.api.store)
        return [
            copy.deepcopy(obj) for obj in found if obj and obj["metadata"].get("ownerReferences")
        ]

    def apply(self, obj: Mapping[str, Any], strict: bool = False) -> dict[str, Any]:
        """Create or update; returns what was stored (with the API server's defaults).
        `strict`: an unknown field is refused, not pruned (`ApiServer.create`)."""
        return copy.deepcopy(self.api.apply(obj, strict))

    def update_status(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return copy.deepcopy(self.api.update_status(obj))

    def merge_patch(
        self, kind: str, name: str, patch: Mapping[str, Any], namespace: str = ""
    ) -> dict[str, Any]:
        return copy.deepcopy(self.api.merge_patch(kind, name, patch, namespace))

    def delete(self, kind: str, name: str, namespace: str = "") -> None:
        self.api.delete(kind, name, namespace)

    def bind(self, name: str, namespace: str, node: str) -> dict[str, Any]:
        """A Pod bound to `node` (the binding subresource)."""
        return copy.deepcopy(self.api.bind(name, namespace, node))
