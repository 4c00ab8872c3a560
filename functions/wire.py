"""What the frame reads of a request's bytes without parsing all of it.

A pool's request is thousands of required objects, and its handler reads one string from each
(docs/performance.md). Parsing the objects into Structs and walking four levels of protobuf
wrappers down to each string cost more than the handler's own work. Two readings here avoid
that, both by protobuf's own parser (upb, in C), on schemas that are wire-compatible with
RunFunctionRequest and Resources but declare less:

- `split`: the request parsed with its required resources held back as bytes (a message and
  bytes are the same on the wire); the frame parses one only when a handler reads its objects.
- `strings_in`: every string two levels inside the objects of held-back Resources (each
  object's `metadata.name`, `metadata.uid`, a ConfigMap's `data.<key>`, ...) and how many
  objects there are, with no Python object made per object. Protobuf merges a singular message
  field that occurs more than once, so a schema that declares each level's message field
  singular merges every item's object into one, every object's top-level values into one, and
  every second-level entry into one, whose `string_value`, declared repeated, collects every
  string of that level in wire order. Values of other kinds (numbers, objects, lists) are
  declared as bytes there, so nothing deeper is parsed.

Which object a string came from is lost; a caller must tell what it wants by the strings
themselves (functions/handlers/inputs.py says how the node summaries are).
"""

from __future__ import annotations

from typing import Any

from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

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
    (a scalar, or a message declared here)."""
    message = _SCHEMA.message_type.add(name=name)
    for field_name, number, declared in fields:
        repeated, _, kind = declared.rpartition(" ")
        field = message.field.add(name=field_name, number=number)
        field.label = _FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL
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


# RunFunctionRequest's extra_resources (6) and required_resources (8), each a map entry of a
# name and Resources, here of a name and bytes; every other field is kept as it came (unknown).
_message("Held", ("key", 1, "string"), ("value", 2, "bytes"))
_message("LeanRequest", ("extra", 6, "repeated Held"), ("required", 8, "repeated Held"))
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

_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_SCHEMA)


def _class(name: str) -> Any:  # a message class: its fields are known only at run time
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"functions.wire.{name}"))


_LEAN, _ITEMS, _COUNT = _class("LeanRequest"), _class("Items"), _class("Count")


def split(payload: bytes) -> tuple[fnv1.RunFunctionRequest, dict[str, bytes]]:
    """The request without its required resources, and those as encoded Resources by
    requirement name (from either protocol field; `required_resources` wins, as the frame
    reads them). Raises DecodeError, as parsing it whole would, where its framing is broken."""
    lean = _LEAN.FromString(payload)
    held = {entry.key: entry.value for entry in lean.extra}
    held |= {entry.key: entry.value for entry in lean.required}
    lean.ClearField("extra")
    lean.ClearField("required")
    return fnv1.RunFunctionRequest.FromString(lean.SerializeToString()), held


def strings_in(resources: bytes) -> RequiredStrings:
    """Every string two levels inside the objects of encoded Resources (see the module
    docstring). Raises DecodeError where they are not well-formed."""
    merged = _ITEMS.FromString(resources).items.object.fields.value.struct_value
    count = len(_COUNT.FromString(resources).items)
    return RequiredStrings(count, list(merged.fields.value.string_value))
