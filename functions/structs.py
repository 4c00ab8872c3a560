"""Hot-path reads: one value from each of thousands of required objects, at protobuf speed.

A pool reads one string from each node's summary. Through `Request.required` every object is
first wrapped in a View and sorted by namespace and name (four key-path walks per object),
which at 20,000 nodes costs more than parsing the request. These read the few values a hot
path needs straight from the Struct — or from the dict a test passes, alike — and anything
but the expected shape reads as None, for the caller to name through the general View path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2

from functions.views import View, plain, view_of


def string_at(obj: Any, outer: str, inner: str) -> str | None:
    """`obj[outer][inner]` when it is a string (`data.summary`, `metadata.namespace`)."""
    if isinstance(obj, struct_pb2.Struct):
        found = obj.fields.get(outer)
        # Reading a member a Value does not hold gives its default: an empty Struct, "".
        leaf = found.struct_value.fields.get(inner) if found is not None else None
        if leaf is None:
            return None
        text = leaf.string_value
        return text if text or leaf.WhichOneof("kind") == "string_value" else None
    if isinstance(obj, View):
        value = obj.get(outer, inner)
    elif isinstance(obj, Mapping):
        within = obj.get(outer)
        value = within.get(inner) if isinstance(within, Mapping) else None
    else:
        return None
    return value if isinstance(value, str) else None


def namespace_of(obj: Any) -> str:
    return string_at(obj, "metadata", "namespace") or ""


def name_of(obj: Any) -> str:
    return string_at(obj, "metadata", "name") or ""


def view(obj: Any) -> View:
    """The general, lazy reader of one object: for the few a hot path has to say more about."""
    return view_of(obj)


def canonical(obj: View, key: str) -> bytes:
    """`obj[key]` as canonical bytes, for a digest: deterministic protobuf from a Struct (C
    speed), sorted JSON from a dict. The two differ; each is stable for its own kind of input."""
    fields = getattr(obj, "fields", None)
    if fields is not None:  # a StructView: its Struct's map of Values
        found = fields.get(key)
        return found.SerializeToString(deterministic=True) if found is not None else b""
    return json.dumps(plain(obj.get(key)), sort_keys=True, separators=(",", ":")).encode()
