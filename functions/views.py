"""Small typed, lazy, read-only views over objects: protobuf Structs or plain dicts alike.

Required resources arrive as Structs; a pool's request can carry thousands of Devices objects.
Converting every object to a dict costs many times the protobuf parse itself, so handlers read
through a `View`: each `get` walks only the path asked for, and numbers that are whole come
back as ints (a Struct holds every number as a double). The same interface over a plain dict
lets tests and the simulator call a handler's rules with dicts, never building a protobuf.
"""

from __future__ import annotations

import builtins  # annotations inside View: its methods `str` and `bool` shadow the builtins
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from google.protobuf import struct_pb2

_MISSING = object()


class View:
    """Read access by key path: `view.get("spec", "unitResources", "cpu")`."""

    __slots__ = ()

    def value(self, key: str) -> Any:
        """The value under one key, wrapped as a View or ListView; None when absent."""
        raise NotImplementedError

    def keys(self) -> list[str]:
        raise NotImplementedError

    def get(self, *path: str, default: Any = None) -> Any:
        node: Any = self
        for key in path:
            if not isinstance(node, View):
                return default
            node = node.value(key)
            if node is None:
                return default
        return node

    def has(self, *path: str) -> bool:
        return self.get(*path, default=_MISSING) is not _MISSING

    def str(self, *path: str, default: str = "") -> str:
        value = self.get(*path)
        return value if isinstance(value, str) else default

    def bool(self, *path: builtins.str, default: builtins.bool = False) -> builtins.bool:
        value = self.get(*path)
        return value if isinstance(value, bool) else default

    def view(self, *path: builtins.str) -> View:
        value = self.get(*path)
        return value if isinstance(value, View) else EMPTY

    def list(self, *path: builtins.str) -> ListView:
        value = self.get(*path)
        return value if isinstance(value, ListView) else ListView(())

    @property
    def name(self) -> builtins.str:
        return self.str("metadata", "name")

    @property
    def namespace(self) -> builtins.str:
        return self.str("metadata", "namespace")

    def labels(self) -> dict[builtins.str, builtins.str]:
        return {k: v for k, v in self.view("metadata", "labels").items() if isinstance(v, str)}

    def items(self) -> Iterator[tuple[builtins.str, Any]]:
        for key in self.keys():
            yield key, self.value(key)

    def to_dict(self) -> dict[builtins.str, Any]:
        """The whole object as plain Python (for small objects only; never on a hot path)."""
        return {key: _data(value) for key, value in self.items()}

    def __bool__(self) -> builtins.bool:
        return bool(self.keys())


class StructView(View):
    """A View over a protobuf Struct (what Crossplane sends)."""

    __slots__ = ("fields", "struct")

    def __init__(self, struct: struct_pb2.Struct):
        self.struct = struct
        self.fields = struct.fields

    def value(self, key: str) -> Any:
        found = self.fields.get(key)
        return _unwrap(found) if found is not None else None

    def get(self, *path: str, default: Any = None) -> Any:
        # The hot path: walk the Struct's own maps, wrapping only the value asked for.
        if not path:
            return self
        fields = self.fields
        for key in path[:-1]:
            found = fields.get(key)
            if found is None:
                return default
            # A Value that holds no object reads as an empty one: the next key is not found.
            fields = found.struct_value.fields
        found = fields.get(path[-1])
        node = _unwrap(found) if found is not None else None
        return default if node is None else node

    def keys(self) -> list[str]:
        return list(self.fields.keys())

    def items(self) -> Iterator[tuple[str, Any]]:
        for key, value in self.fields.items():
            yield key, _unwrap(value)

    def to_dict(self) -> dict[str, Any]:
        # Straight from the Struct, making no view on the way (a Devices spec has thousands).
        return _struct_data(self.struct)

    def __bool__(self) -> bool:
        return len(self.fields) > 0


class DictView(View):
    """A View over a plain dict (tests, the simulator, objects read from YAML)."""

    __slots__ = ("data",)

    def __init__(self, data: Mapping[str, Any]):
        self.data = data

    def value(self, key: str) -> Any:
        return _wrap(self.data.get(key))

    def keys(self) -> list[str]:
        return list(self.data.keys())


class ListView:
    """A read-only list whose objects come back as Views."""

    __slots__ = ("_unwrap", "_values", "list_value")

    def __init__(self, values: struct_pb2.ListValue | Sequence[Any]):
        self.list_value: struct_pb2.ListValue | None = None
        if isinstance(values, struct_pb2.ListValue):
            self.list_value = values
            self._values: Sequence[Any] = values.values
            self._unwrap: Callable[[Any], Any] = _unwrap
        else:
            self._values = values
            self._unwrap = _wrap

    def __iter__(self) -> Iterator[Any]:
        unwrap = self._unwrap
        return (unwrap(value) for value in self._values)

    def __len__(self) -> int:
        return len(self._values)

    def views(self) -> Iterator[View]:
        return (item for item in self if isinstance(item, View))

    def find(self, key: str, text: str) -> View | None:
        """The first object whose `key` is the string `text` (a condition by its type, say),
        compared without wrapping the others."""
        if self._unwrap is not _unwrap:  # a plain list
            found = next(
                (v for v in self._values if isinstance(v, Mapping) and v.get(key) == text), None
            )
            return DictView(found) if found is not None else None
        for value in self._values:
            # A Value that holds no object reads as an empty one, one that holds no string as
            # "": only an empty `text` has to ask what the value holds.
            struct = value.struct_value
            held = struct.fields.get(key)
            if (
                held is not None
                and held.string_value == text
                and (text or held.WhichOneof("kind") == "string_value")
            ):
                return StructView(struct)
        return None

    def to_list(self) -> list[Any]:
        if self.list_value is not None:
            return [_unwrap(value, True) for value in self.list_value.values]
        return [_data(value) for value in self]


class ShapeError(ValueError):
    """A value of the wrong type at `field` (its path from the object's root)."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# What a field may hold, as the XRDs' structural schemas say it: a check and its words.
OBJECT = ("an object", lambda value: isinstance(value, View))
STRING = ("a string", lambda value: isinstance(value, str))
BOOLEAN = ("true or false", lambda value: isinstance(value, bool))
QUANTITY = (
    "a quantity such as 4, 500m or 16Gi",
    lambda value: isinstance(value, str) or _whole(value),
)
Shape = Mapping[str, tuple[str, Any]]


def check_shape(view: View, at: str, shape: Shape) -> None:
    """Raise ShapeError naming the first field of `view` (sorted) whose value is present but
    not what `shape` says it holds; nested shapes are written as dotted names."""
    for name in sorted(shape):
        value = view.get(*name.split("."))
        words, holds = shape[name]
        if value is not None and not holds(value):
            raise ShapeError(f"{at}.{name}", f"must be {words}, got {_kind(value)}")


def _kind(value: Any) -> str:
    if isinstance(value, View):
        return "an object"
    if isinstance(value, ListView):
        return "a list"
    if isinstance(value, bool):
        return str(value).lower()
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def view_of(obj: struct_pb2.Struct | Mapping[str, Any] | View | None) -> View:
    """The right View for a Struct, a dict, or a View already."""
    if isinstance(obj, View):
        return obj
    if isinstance(obj, struct_pb2.Struct):
        return StructView(obj)
    if obj is None:
        return EMPTY
    return DictView(obj)


def message_of(value: Any) -> struct_pb2.Struct | struct_pb2.ListValue | None:
    """The protobuf message a view reads (None for plain data): what a writer may copy whole,
    at protobuf speed, rather than convert and rebuild."""
    if isinstance(value, StructView):
        return value.struct
    if isinstance(value, ListView):
        return value.list_value
    return None


def _unwrap(value: struct_pb2.Value, as_data: bool = False) -> Any:
    """A Value as a view reads it: whole numbers as ints, objects and lists as views — or, with
    `as_data`, as dicts and lists all the way down (`to_dict`: no view made on the way)."""
    kind = value.WhichOneof("kind")  # most frequent kinds first: this is the hot path
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() else number
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return _struct_data(value.struct_value) if as_data else StructView(value.struct_value)
    if kind == "list_value":
        if as_data:
            return [_unwrap(item, True) for item in value.list_value.values]
        return ListView(value.list_value)
    if kind == "bool_value":
        return value.bool_value
    return None


def _struct_data(struct: struct_pb2.Struct) -> dict[str, Any]:
    return {key: _unwrap(value, True) for key, value in struct.fields.items()}


def _wrap(value: Any) -> Any:
    """A dict's value as a Struct view would give it: objects as Views, whole floats as ints."""
    if isinstance(value, Mapping):
        return DictView(value)
    if isinstance(value, list | tuple):
        return ListView(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _data(value: Any) -> Any:
    """A value a view read, as plain data: objects as dicts, lists as lists."""
    if isinstance(value, View):
        return value.to_dict()
    if isinstance(value, ListView):
        return value.to_list()
    return value


def plain(value: Any) -> Any:
    """`value` with every view in it replaced by the data it views (what a Struct takes)."""
    if isinstance(value, View | ListView):
        return _data(value)
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def passed_on(value: Any) -> Any:
    """A value a handler passes on as it observed it: a view of a Struct as it is (the frame
    copies it whole, at protobuf speed), anything else as plain data."""
    return value if message_of(value) is not None else plain(value)


EMPTY: View = DictView({})
