"""A small typed, lazy view over protobuf Structs.

Required resources arrive as Structs; a pool's request can carry thousands of Devices objects.
Converting every object to a dict costs many times the protobuf parse itself, so handlers read
through `View`: each `get` walks only the path asked for, and numbers that are whole come back
as ints (a Struct holds every number as a double).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from google.protobuf import struct_pb2

_MISSING = object()


def _unwrap(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")  # most frequent kinds first: this is the hot path
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() else number
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return View(value.struct_value)
    if kind == "list_value":
        return ListView(value.list_value)
    if kind == "bool_value":
        return value.bool_value
    return None


class View:
    """Read-only access to a Struct by key path: `view.get("spec", "unitResources", "cpu")`."""

    __slots__ = ("fields", "struct")

    def __init__(self, struct: struct_pb2.Struct | None = None):
        self.struct = struct if struct is not None else struct_pb2.Struct()
        self.fields = self.struct.fields

    def get(self, *path: str, default: Any = None) -> Any:
        if len(path) == 1:  # the common case, without the walk
            value = self.fields.get(path[0])
            node = _unwrap(value) if value is not None else None
            return default if node is None else node
        node: Any = self
        for key in path:
            if not isinstance(node, View):
                return default
            fields = node.fields
            if key not in fields:
                return default
            node = _unwrap(fields[key])
        return default if node is None else node

    def has(self, *path: str) -> bool:
        return self.get(*path, default=_MISSING) is not _MISSING

    def str(self, *path: str, default: str = "") -> str:
        value = self.get(*path)
        return value if isinstance(value, str) else default

    def bool(self, *path: str, default: bool = False) -> bool:
        value = self.get(*path)
        return value if isinstance(value, bool) else default

    def view(self, *path: str) -> View:
        value = self.get(*path)
        return value if isinstance(value, View) else View()

    def list(self, *path: str) -> ListView:
        value = self.get(*path)
        return value if isinstance(value, ListView) else ListView()

    def keys(self) -> list[str]:
        return list(self.struct.fields.keys())

    @property
    def name(self) -> str:
        return self.str("metadata", "name")

    @property
    def namespace(self) -> str:
        return self.str("metadata", "namespace")

    def labels(self) -> dict[str, str]:
        return {k: v for k, v in self.view("metadata", "labels").items() if isinstance(v, str)}

    def items(self) -> Iterator[tuple[str, Any]]:
        for key, value in self.struct.fields.items():
            yield key, _unwrap(value)

    def to_dict(self) -> dict[str, Any]:
        """The whole object as plain Python (for small objects only; never on a hot path)."""
        return {key: _plain(value) for key, value in self.items()}

    def __bool__(self) -> bool:
        return len(self.struct.fields) > 0


class ListView:
    __slots__ = ("values",)

    def __init__(self, values: struct_pb2.ListValue | None = None):
        self.values = values if values is not None else struct_pb2.ListValue()

    def __iter__(self) -> Iterator[Any]:
        return (_unwrap(value) for value in self.values.values)

    def __len__(self) -> int:
        return len(self.values.values)

    def views(self) -> Iterator[View]:
        return (item for item in self if isinstance(item, View))

    def to_list(self) -> list[Any]:
        return [_plain(value) for value in self]


def _plain(value: Any) -> Any:
    if isinstance(value, View):
        return value.to_dict()
    if isinstance(value, ListView):
        return value.to_list()
    return value
