"""What the frame reads of a request's bytes without parsing all of it.

A pool's request is thousands of required objects, and its handler reads one string from each
(docs/performance.md); so is a GPUClass's (its nodes' states), beside launcher Pods of which it
reads a few fields.
Parsing every object into Structs, and walking protobuf's wrappers down to what is read, cost
more than the handlers' own work. The readings here avoid that:

- `split`: the request parsed without its required resources, which are held back as they
  came (slices of the request's bytes: a 36 MiB copy costs more than parsing all the rest);
  the frame parses one only when a handler reads its objects. Protobuf has no way to take a
  message's top-level fields without copying them, so `_fields` walks them itself: a tag and a
  length each, a dozen at the top of a request.
- `strings_in`: every string two levels inside the objects of held-back Resources (each
  object's `metadata.name`, `metadata.uid`, a ConfigMap's `data.<key>`, ...) and how many
  objects there are, with no Python object made per object. Protobuf merges a singular message
  field that occurs more than once, so a schema that declares each level's message field
  singular merges every item's object into one, every object's top-level values into one, and
  every second-level entry into one, whose `string_value`, declared repeated, collects every
  string of that level in wire order. Values of other kinds (numbers, objects, lists) are
  declared as bytes there, so nothing deeper is parsed. It is protobuf's own parser (upb, in
  C) on a schema wire-compatible with Resources that declares less. Which object a string
  came from is lost; a caller must tell what it wants by the strings themselves
  (functions/handlers/inputs.py says how the node summaries are).
- `projected`: each object holding only the fields a handler says it reads (a Requirement's
  `reads`), two or three keys deep. A schema that declares each object's top-level values,
  and theirs, as maps to bytes parses a Node's two levels of keys and leaves every value
  encoded; only the values kept are parsed, into a Struct the handler reads as it would the
  whole object. A launcher Pod's metadata and status conditions, or a Node's images,
  `managedFields` and node labeller's labels (most of its 28 KiB), are never parsed.
- `objects_in` and `object_of`: each object's bytes as they came, and one object parsed from
  them (whole, or projected); `struct_projected` keeps the same of an object parsed already.
  The frame reads an object through a handler's reader only when it has not read the same
  before (`frame.ReadOnce`): a class's launcher Pods.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, struct_pb2
from google.protobuf.message import DecodeError

from functions.handlers.base import RequiredStrings

_FIELD = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "string": _FIELD.TYPE_STRING,
    "bytes": _FIELD.TYPE_BYTES,
    "int32": _FIELD.TYPE_INT32,
    "double": _FIELD.TYPE_DOUBLE,
    "bool": _FIELD.TYPE_BOOL,
}
_SCHEMA = descriptor_pb2.FileDescriptorProto(
    name="functions/wire.proto", package="functions.wire", syntax="proto3"
)


def _message(name: str, *fields: tuple[str, int, str]) -> None:
    """Declare a message, its fields as in a .proto file: name, number and "[repeated] type"
    (a scalar, a message declared here, or `map<string,type>`)."""
    message = _SCHEMA.message_type.add(name=name)
    for field_name, number, declared in fields:
        repeated, _, kind = declared.rpartition(" ")
        field = message.field.add(name=field_name, number=number)
        field.label = _FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL
        if kind.startswith("map<string,"):  # a repeated entry of key and value, as protoc makes
            entry = message.nested_type.add(name=f"{field_name.title()}Entry")
            entry.options.map_entry = True
            _declare(entry.field.add(name="key", number=1), "string")
            _declare(entry.field.add(name="value", number=2), kind[len("map<string,") : -1])
            field.label = _FIELD.LABEL_REPEATED
            field.type, field.type_name = (
                _FIELD.TYPE_MESSAGE,
                f".functions.wire.{name}.{entry.name}",
            )
        else:
            _declare(field, kind)


def _declare(field: descriptor_pb2.FieldDescriptorProto, kind: str) -> None:
    if kind in _SCALARS:
        field.type = _SCALARS[kind]
    else:
        field.type, field.type_name = _FIELD.TYPE_MESSAGE, f".functions.wire.{kind}"


def _value(name: str, strings: str, objects: str) -> None:
    """google.protobuf.Value's fields, its strings and objects read as given and its lists as
    bytes (so nothing in them is parsed); a number or bool is read as itself (last one wins)."""
    _message(
        name,
        ("null_value", 1, "int32"),
        ("number_value", 2, "double"),
        ("string_value", 3, strings),
        ("bool_value", 4, "bool"),
        ("struct_value", 5, objects),
        ("list_value", 6, "bytes"),
    )


# Resources' items, each a Resource whose object (field 1) is a Struct: merged level by level.
_message("Items", ("items", 1, "Item"))
_message("Item", ("object", 1, "TopLevel"))
_message("TopLevel", ("fields", 1, "TopEntry"))
_message("TopEntry", ("key", 1, "bytes"), ("value", 2, "TopValue"))
_value("TopValue", strings="bytes", objects="SecondLevel")
_message("SecondLevel", ("fields", 1, "SecondEntry"))
_message("SecondEntry", ("key", 1, "bytes"), ("value", 2, "SecondValue"))
_value("SecondValue", strings="repeated string", objects="bytes")
_message("Count", ("items", 1, "repeated bytes"))  # each item left as bytes, only counted
# Resources' items one by one, each object's top-level values by key, and theirs by key again,
# each left encoded (a google.protobuf.Value): `projected` parses only what it keeps.
_message("Objects", ("items", 1, "repeated Object"))
_message("Object", ("object", 1, "TopValues"))
_message("TopValues", ("fields", 1, "map<string,EncodedObject>"))
_message("EncodedObject", ("struct_value", 5, "EncodedValues"))  # a Value's object, if any
_message("EncodedValues", ("fields", 1, "map<string,bytes>"))

_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_SCHEMA)


def _class(name: str) -> Any:  # a message class: its fields are known only at run time
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"functions.wire.{name}"))


_ITEMS, _COUNT, _OBJECTS = _class("Items"), _class("Count"), _class("Objects")
_OBJECT = _class("Object")
_ENCODED_OBJECT = _class("EncodedObject")

Encoded = bytes | memoryview  # a message's bytes, or a slice of a larger message's
_EXTRA = fnv1.RunFunctionRequest.EXTRA_RESOURCES_FIELD_NUMBER  # Crossplane 1.x's, and 2.x's
_REQUIRED = fnv1.RunFunctionRequest.REQUIRED_RESOURCES_FIELD_NUMBER  # 2.2's and newer


def split(payload: Encoded) -> tuple[fnv1.RunFunctionRequest, dict[str, memoryview]]:
    """The request without its required resources, and those as encoded Resources (slices of
    `payload`) by requirement name, from either protocol field (`required_resources` wins, as
    the frame reads them; of one name given twice in a field, the last, as protobuf reads a
    map). Raises DecodeError where parsing the request whole would, but in a Resources held
    back, which is parsed only when read."""
    rest = bytearray()
    held: dict[int, dict[str, memoryview]] = {_EXTRA: {}, _REQUIRED: {}}
    for number, wire_type, field, value in _fields(memoryview(payload)):
        if number not in held:
            rest += field  # protobuf parses it, and refuses what it would refuse
            continue
        if wire_type != _LENGTH_DELIMITED:
            raise DecodeError(f"field {number} is not a map entry")
        name, resources = _map_entry(value)
        held[number][name] = resources
    request = fnv1.RunFunctionRequest.FromString(bytes(rest))
    return request, held[_EXTRA] | held[_REQUIRED]


def _map_entry(entry: memoryview) -> tuple[str, memoryview]:
    """A map<string, message> entry's key and value (each empty when absent)."""
    found = {number: value for number, _, _, value in _fields(entry)}
    try:
        return str(found.get(1, b""), "utf-8"), found.get(2, memoryview(b""))
    except UnicodeDecodeError as error:
        raise DecodeError(f"a requirement's name is not UTF-8: {error}") from error


def _fields(message: memoryview) -> Iterator[tuple[int, int, memoryview, memoryview]]:
    """Each field of an encoded message, in order: its number, its wire type, its encoding (tag
    included) and its value (a length-delimited one's content), as slices of `message`."""
    position, size = 0, len(message)
    while position < size:
        start = position
        tag, position = _varint(message, position)
        number, wire_type = tag >> 3, tag & 7
        value_start = position
        if wire_type == _LENGTH_DELIMITED:
            length, value_start = _varint(message, position)
            position = value_start + length
        elif wire_type in _FIXED:
            position += _FIXED[wire_type]
        elif wire_type == _VARINT:
            _, position = _varint(message, position)
        else:
            raise DecodeError(f"unexpected wire type {wire_type} at byte {start}")
        if number == 0 or position > size:
            raise DecodeError(f"truncated or invalid field at byte {start}")
        yield number, wire_type, message[start:position], message[value_start:position]


_VARINT, _LENGTH_DELIMITED = 0, 2
_FIXED = {1: 8, 5: 4}  # 64- and 32-bit: their size in bytes


def _varint(message: memoryview, position: int) -> tuple[int, int]:
    """The varint at `position`, and where the next value begins."""
    value = shift = 0
    while position < len(message) and shift < 64:
        byte = message[position]
        value |= (byte & 0x7F) << shift
        position, shift = position + 1, shift + 7
        if byte < 0x80:
            return value, position
    raise DecodeError("truncated or overlong varint")


Path = tuple[str, ...]  # keys into an object: two (status.allocatable) or three (a label)


def projected(resources: Encoded, paths: Sequence[Path]) -> list[struct_pb2.Struct]:
    """Each object of encoded Resources, in order, holding only what is at `paths` — each two
    keys deep, whose value is taken whole, or three, whose value is taken from the object at
    the first two — with nothing else parsed. Reading any of `paths` gives what it gives in the
    whole object; what is not there reads as missing (a Value may be left without a kind)."""
    plan = _plan(tuple(paths))
    return [_project(item, plan) for item in _OBJECTS.FromString(resources).items]


def objects_in(resources: Encoded) -> list[bytes]:
    """Each object of encoded Resources as it came (an encoded Resource), none of it parsed."""
    return list(_COUNT.FromString(resources).items)


def object_of(encoded: bytes, paths: tuple[Path, ...] | None) -> struct_pb2.Struct:
    """The object of one encoded Resource: whole, or holding only what is at `paths` (as
    `projected` keeps it)."""
    if paths is None:
        return fnv1.Resource.FromString(encoded).resource
    return _project(_OBJECT.FromString(encoded), _plan(tuple(paths)))


def struct_projected(obj: struct_pb2.Struct, paths: Sequence[Path]) -> struct_pb2.Struct:
    """What `object_of` keeps at `paths` of an object that came parsed already (a small
    request is parsed whole), taken the same way from its bytes: the frame reads and remembers
    each object by what the requirement reads of it, however it came."""
    return object_of(fnv1.Resource(resource=obj).SerializeToString(), tuple(paths))


def _project(item: Any, plan: list[tuple[str, dict[str, set[str] | None]]]) -> struct_pb2.Struct:
    values, obj = item.object.fields, struct_pb2.Struct()
    for top, wanted in plan:
        encoded = values.get(top)
        if encoded is not None and any(key in encoded.struct_value.fields for key in wanted):
            _keep(encoded.struct_value.fields, wanted, obj.fields[top].struct_value)
    return obj


def _keep(encoded: Any, wanted: Mapping[str, set[str] | None], into: struct_pb2.Struct) -> None:
    """Into `into`, each `wanted` value of `encoded` (keys to encoded Values) that is there:
    whole, or (a set of keys) only those of the object it holds."""
    for key, inner in wanted.items():
        value = encoded.get(key)
        if value is None:
            continue
        if inner is None:
            into.fields[key].MergeFromString(value)
            continue
        within = _ENCODED_OBJECT.FromString(value).struct_value.fields
        if any(name in within for name in inner):
            _keep(within, dict.fromkeys(inner), into.fields[key].struct_value)


@functools.lru_cache(maxsize=64)  # a handful of requirements' paths, planned once each
def _plan(paths: tuple[Path, ...]) -> list[tuple[str, dict[str, set[str] | None]]]:
    """`paths` by their first key, then their second: None where the value is kept whole."""
    plan: dict[str, dict[str, set[str] | None]] = {}
    for path in paths:
        if len(path) not in (2, 3):
            raise ValueError(f"a projected path is two or three keys deep, not {path!r}")
        wanted = plan.setdefault(path[0], {})
        keys = wanted.get(path[1], set())
        if len(path) == 2 or keys is None:
            wanted[path[1]] = None  # the whole value, whatever else is asked of it
        else:
            wanted[path[1]] = keys | {path[2]}
    return sorted(plan.items())


def strings_in(resources: Encoded) -> RequiredStrings:
    """Every string two levels inside the objects of encoded Resources (see the module
    docstring). Raises DecodeError where they are not well-formed."""
    merged = _ITEMS.FromString(resources).items.object.fields.value.struct_value
    count = len(_COUNT.FromString(resources).items)
    return RequiredStrings(count, list(merged.fields.value.string_value))
