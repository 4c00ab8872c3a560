"""What the API server keeps on every object beside what its writers set: `managedFields`.

Crossplane hands a function its required objects as its informer cache holds them, and that
cache keeps `metadata.managedFields`: Crossplane's cache has no transform that strips them
(cmd/crossplane/core/core.go), and `ExistingRequiredResourcesFetcher` turns each cached object
into a Struct whole (internal/xfn/required_resources.go). So every object a request carries
lists, per writer, the fields it set.

Each entry is written here in the API server's FieldsV1 form from the fields its writer set:
`f:<key>` for each key of an object, `k:{...}` for each item of a list keyed by a merge key,
`v:...` for each item of a set, `{}` for a leaf or an atomic list; an Update (not an Apply) also
marks each object it set with `.`.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpustack_sim.apiserver import merge

# Lists whose items are merged by key (their Kubernetes listMapKeys), and lists that are sets;
# every other list is atomic: one leaf.
KEYED = {
    "addresses": ("type",),
    "conditions": ("type",),
    "containers": ("name",),
    "ownerReferences": ("uid",),
}
SETS = frozenset({"finalizers", "podCIDRs"})


def entry(
    manager: str,
    operation: str,
    api_version: str,
    fields: Mapping[str, Any],
    time: str,
    subresource: str = "",
) -> dict[str, Any]:
    """One writer's managedFields entry: `fields` are the fields it set, as they are set."""
    found: dict[str, Any] = {
        "apiVersion": api_version,
        "fieldsType": "FieldsV1",
        "fieldsV1": _object(fields, operation == "Update", top=True),
        "manager": manager,
        "operation": operation,
        "time": time,
    }
    if subresource:
        found["subresource"] = subresource
    return found


def stored(
    identity: Mapping[str, Any],
    updates: Sequence[tuple[str, str, Mapping[str, Any]]],
    time: str,
) -> dict[str, Any]:
    """An object as the API server stores it: `identity` (apiVersion, kind, metadata's name,
    uid...), then each writer's Update in turn — (manager, subresource, the fields it set) —
    with its managedFields entry."""
    found = copy.deepcopy(dict(identity))
    for _, _, fields in updates:
        merge(found, fields)  # what an Update sets, as a merge patch would
    found["metadata"]["managedFields"] = [
        entry(manager, "Update", found["apiVersion"], fields, time, subresource)
        for manager, subresource, fields in updates
    ]
    return found


def _object(value: Mapping[str, Any], update: bool, top: bool = False) -> dict[str, Any]:
    found: dict[str, Any] = {".": {}} if update and not top else {}
    for key, item in value.items():
        found[f"f:{key}"] = _field(key, item, update)
    return found


def _field(key: str, item: Any, update: bool) -> dict[str, Any]:
    if isinstance(item, dict) and item:
        return _object(item, update)
    if isinstance(item, list) and key in KEYED:
        found: dict[str, Any] = {".": {}} if update else {}
        for element in item:
            merge_key = {name: element[name] for name in KEYED[key]}
            found[f"k:{json.dumps(merge_key, separators=(',', ':'))}"] = _object(element, update)
        return found
    if isinstance(item, list) and key in SETS:
        found = {".": {}} if update else {}
        found.update({f"v:{json.dumps(element)}": {} for element in item})
        return found
    return {}
