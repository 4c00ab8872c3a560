"""What kube-apiserver checks on a write, so the simulated cluster refuses what a real one would.

For one object (and, on an update, the stored one it replaces), against the schema `schemas`
finds for it, this module decides:

- What gets stored (`check`): unknown fields pruned (a warning, as the API server sends) or, under
  Strict field validation, refused; nulls of non-nullable fields dropped; a CRD's defaults applied.
  A map server-side apply emptied (`EMPTIED`) is the exception: stored as null, and checked.
- What refuses it: the structural schema (types, enums, formats, bounds, lengths, counts,
  patterns, required fields, list-type invariants), ObjectMeta's rules, and every
  `x-kubernetes-validations` CEL rule, transition rules (`oldSelf`) only where the old value exists.
  Errors are `FieldError`s that print as kube-apiserver prints them.

One walk over (schema, value) does pruning, defaulting and checking, rather than jsonschema plus
fix-ups, because the API server interleaves them and words its errors its own way; the same walk
serves CRD structural schemas and the `$ref`-linked definitions of KubeVirt and core kinds.
Schemas are converted and CEL programs compiled once per process (`functools.cache`): the
simulator validates thousands of writes per scenario.
"""

from __future__ import annotations

import base64
import binascii
import copy
import dataclasses
import functools
import hashlib
import ipaddress
import json
import marshal
import os
import pickle
import re
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from functions.documents import cache_dir
from gpustack_sim.schemas import KindSchema
from gpustack_sim.upstream import MISSING

try:
    import celpy
    from celpy import celtypes
except ImportError as missing:  # the simulator's dependencies, not the served function's
    raise ImportError(MISSING.format(missing.name)) from missing


# --- errors, as kube-apiserver words them ---------------------------------------------------

_OMITTED = object()
# The error types after which the CEL rules are not run (the real control plane refused a
# composite's too-long name so: "Too long", then "some validation rules were not checked").
BLOCKING = frozenset({"Unsupported value", "Required value", "Too long", "Too many"})


class _Emptied:
    """A map server-side apply emptied: the applier had set its every field before and applies
    it as `{}` now, so structured-merge-diff removes them and stores the map as null
    (kubernetes/kubernetes#104694, #135841). Unlike a null sent in a request, that null is not
    dropped: a non-nullable `type: object` refuses it ("must be of type object: "null"")."""

    def __repr__(self) -> str:
        return "EMPTIED"

    def __deepcopy__(self, memo: dict) -> _Emptied:  # one of it: copies of a write keep it
        return self


EMPTIED = _Emptied()


@dataclass(frozen=True)
class FieldError:
    """One field's error; `str()` is the API server's `path: Type: value: detail`."""

    path: str
    type: str
    detail: str = ""
    value: Any = _OMITTED
    # A wrong type stops the CEL rules (they assume the schema holds); so do the errors of the
    # types `BLOCKING` names (apiextensions' hasBlockingErr).
    blocks_rules: bool = field(default=False, compare=False)

    @property
    def blocking(self) -> bool:
        return self.blocks_rules or self.type in BLOCKING

    def __str__(self) -> str:
        body = self.type if self.value is _OMITTED else f"{self.type}: {_shown(self.value)}"
        return f"{self.path or '<nil>'}: {body}" + (f": {self.detail}" if self.detail else "")


def _shown(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))  # a null as kube-apiserver 1.37: null


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, "Invalid value", detail, value)


def _in_body(path: str) -> str:
    return f"{path} in body" if path else "body"


def _body(path: str, value: Any, words: str) -> FieldError:
    """kube-openapi's wording: `spec.x in body should …`."""
    return invalid(path, value, f"{_in_body(path)} {words}")


def _wrong_type(path: str, actual: str, schema: Mapping[str, Any]) -> FieldError:
    declared = schema.get("type") or ["integer", "string"]  # no type: x-kubernetes-int-or-string
    expected = (
        declared if isinstance(declared, str) else " or ".join(sorted(set(declared) - {"null"}))
    )
    detail = f'{_in_body(path)} must be of type {expected}: "{actual}"'
    return FieldError(path, "Invalid value", detail, actual, blocks_rules=True)


def _not_supported(path: str, value: Any, allowed: list) -> FieldError:
    detail = "supported values: " + ", ".join(_shown(v) for v in allowed)
    return FieldError(path, "Unsupported value", detail, value)


RULES_NOT_CHECKED = invalid(
    "",
    None,
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation",
)


# --- the walk: prune, default, check --------------------------------------------------------

_PYTHON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
                 (list, "array"), (dict, "object"))  # fmt: skip


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return "integer"  # Struct numbers arrive as floats; 2.0 is a JSON integer
    return next((name for python, name in _PYTHON_TYPES if isinstance(value, python)), "unknown")


def _allowed_types(schema: Mapping[str, Any]) -> set[str] | None:
    if schema.get("x-kubernetes-int-or-string"):
        return {"integer", "string"}
    declared = schema.get("type")
    if declared is None:
        return None
    allowed = {declared} if isinstance(declared, str) else set(declared)
    if "number" in allowed:
        allowed.add("integer")
    if schema.get("nullable"):
        allowed.add("null")
    return allowed


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Walk:
    """One pass over a value and its schema that returns the value as the API server stores it
    and collects its errors and warnings."""

    def __init__(self, kind: KindSchema, strict: bool, probe: bool = False):
        self.kind, self.strict, self.probe = kind, strict, probe
        self.errors: list[FieldError] = []
        self.unknown: list[str] = []  # the paths of the fields pruned

    def value(self, schema: Mapping[str, Any], value: Any, path: str) -> Any:
        if value is EMPTIED:  # checked as the null it is stored as
            value = None
        schema = self.kind.resolve(schema)
        allowed = _allowed_types(schema)
        if allowed is not None and _json_type(value) not in allowed:
            self.errors.append(_wrong_type(path, _json_type(value), schema))
            return value
        if isinstance(value, dict):
            value = self._object(schema, value, path)
        elif isinstance(value, list):
            value = self._array(schema, value, path)
        self.errors += _constraint_errors(schema, value, path)
        self._combinators(schema, value, path)
        return value

    def _object(self, schema: Mapping[str, Any], value: dict, path: str) -> dict:
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        kept: dict[str, Any] = {}
        for key, item in value.items():
            declared = properties.get(key, extra if isinstance(extra, dict) else None)
            if _passes_through(schema, key, path):
                kept[key] = None if item is EMPTIED else item
            elif declared is not None:
                if item is None and not _nullable(self.kind.resolve(declared)):
                    continue  # the API server drops nulls of non-nullable fields
                where = _child(path, key) if key in properties else f"{path}[{key}]"
                kept[key] = self.value(declared, item, where)
            elif self._keeps_unknown(schema, extra):
                kept[key] = None if item is EMPTIED else item
            else:
                self._unknown(_child(path, key))
        self._default(properties, kept, path)
        self.errors += [
            FieldError(_child(path, k), "Required value")
            for k in schema.get("required", ())
            if k not in kept
        ]
        if schema.get("x-kubernetes-embedded-resource"):
            self.errors += _embedded_errors(kept, path)
        return kept

    def _keeps_unknown(self, schema: Mapping[str, Any], extra: Any) -> bool:
        if schema.get("x-kubernetes-preserve-unknown-fields") or extra is True:
            return True
        # Outside CRDs, an object that declares no fields is free-form (RawExtension, JSON).
        return not self.kind.structural and "properties" not in schema and extra is None

    def _unknown(self, path: str) -> None:
        if self.probe:
            return
        if self.strict:
            self.errors.append(FieldError(path, "Forbidden", "field not declared in schema"))
        else:
            self.unknown.append(path)

    def _default(self, properties: Mapping[str, Any], kept: dict, path: str) -> None:
        if not self.kind.structural:
            return  # core and KubeVirt defaults live in Go code and webhooks, not in the schema
        for key, declared in properties.items():
            declared = self.kind.resolve(declared)
            if key not in kept and "default" in declared:
                kept[key] = self.value(
                    declared, copy.deepcopy(declared["default"]), _child(path, key)
                )

    def _array(self, schema: Mapping[str, Any], value: list, path: str) -> list:
        items = schema.get("items")
        if isinstance(items, dict):
            value = [self.value(items, item, f"{path}[{i}]") for i, item in enumerate(value)]
        self.errors += _duplicate_errors(schema, value, path)
        return value

    def _combinators(self, schema: Mapping[str, Any], value: Any, path: str) -> None:
        if schema.get("x-kubernetes-int-or-string"):
            return  # its anyOf only restates the type, checked already
        for branch in schema.get("allOf", ()):
            self.errors += self._probe(branch, value, path)
        fits = {
            k: [self._fits(b, value, path) for b in schema[k]]
            for k in ("anyOf", "oneOf")
            if k in schema
        }
        broken = {
            "must validate at least one schema (anyOf)": "anyOf" in fits and not any(fits["anyOf"]),
            "must validate one and only one schema (oneOf)": "oneOf" in fits
            and sum(fits["oneOf"]) != 1,
            "must not validate the schema (not)": "not" in schema
            and self._fits(schema["not"], value, path),
        }
        self.errors += [_body(path, value, words) for words, failed in broken.items() if failed]

    def _probe(self, schema: Mapping[str, Any], value: Any, path: str) -> list[FieldError]:
        probe = _Walk(self.kind, strict=False, probe=True)
        probe.value(schema, value, path)
        return probe.errors

    def _fits(self, schema: Mapping[str, Any], value: Any, path: str) -> bool:
        return not self._probe(schema, value, path)


def _passes_through(schema: Mapping[str, Any], key: str, path: str) -> bool:
    """ObjectMeta has its own rules (`_metadata_errors`), at the root and in embedded resources."""
    if schema.get("x-kubernetes-embedded-resource"):
        return key in ("apiVersion", "kind", "metadata")
    return key == "metadata" and path == ""


def _nullable(schema: Mapping[str, Any]) -> bool:
    declared = schema.get("type")
    return bool(schema.get("nullable")) or (isinstance(declared, list) and "null" in declared)


def same(a: Any, b: Any) -> bool:
    """`json_equal`, answered at C speed where the two serialise alike (the common case of a
    write that changes nothing)."""
    try:
        if canonical(a) == canonical(b):
            return True
    except ValueError:
        pass
    return json_equal(a, b)


def canonical(value: Any) -> bytes:
    """The same bytes for equal JSON-like values (keys in the same order), at C speed: marshal
    at version 0, which, unlike later versions, writes no back-references and no interning
    marks (those follow how the objects were made, not what they hold). 1 and 1.0, or true
    and 1, differ here, so it decides "the same" but never "different". ValueError for what
    is not JSON-like."""
    return marshal.dumps(value, 0)


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 equals 1.0, but true is not 1."""
    if a is b:
        return True  # the same object (a stored object shares what a write left unchanged)
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(json_equal, a, b))
    return a == b


def _constraint_errors(schema: Mapping[str, Any], value: Any, path: str) -> list[FieldError]:
    errors = []
    if "enum" in schema and not any(json_equal(value, allowed) for allowed in schema["enum"]):
        errors.append(_not_supported(path, value, schema["enum"]))
    if isinstance(value, str):
        errors += _string_errors(schema, value, path)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        errors += _number_errors(schema, value, path)
    elif isinstance(value, (list, dict)):
        errors += _count_errors(schema, value, path)
    return errors


def _string_errors(schema: Mapping[str, Any], value: str, path: str) -> list[FieldError]:
    errors = []
    if len(value) > schema.get("maxLength", len(value)):
        errors.append(
            FieldError(path, "Too long", f"may not be more than {schema['maxLength']} bytes")
        )
    if len(value) < schema.get("minLength", 0):
        errors.append(_body(path, value, f"should be at least {schema['minLength']} chars long"))
    if "pattern" in schema and not _regex(schema["pattern"]).search(value):
        errors.append(_body(path, value, f"should match '{schema['pattern']}'"))
    check = _FORMATS.get(schema.get("format", ""))
    if check and not check(value):
        errors.append(_body(path, value, f'must be of type {schema["format"]}: "{value}"'))
    return errors


def _number_errors(schema: Mapping[str, Any], value: float, path: str) -> list[FieldError]:
    errors = []
    if "minimum" in schema:
        low, exclusive = schema["minimum"], schema.get("exclusiveMinimum") is True
        if value < low or (exclusive and value == low):
            words = "greater than" if exclusive else "greater than or equal to"
            errors.append(_body(path, value, f"should be {words} {low}"))
    if "maximum" in schema:
        high, exclusive = schema["maximum"], schema.get("exclusiveMaximum") is True
        if value > high or (exclusive and value == high):
            words = "less than" if exclusive else "less than or equal to"
            errors.append(_body(path, value, f"should be {words} {high}"))
    if schema.get("multipleOf") and value % schema["multipleOf"]:
        errors.append(_body(path, value, f"should be a multiple of {schema['multipleOf']}"))
    return errors


def _count_errors(schema: Mapping[str, Any], value: list | dict, path: str) -> list[FieldError]:
    noun, most, least = (
        ("items", "maxItems", "minItems")
        if isinstance(value, list)
        else ("properties", "maxProperties", "minProperties")
    )
    errors = []
    if len(value) > schema.get(most, len(value)):
        errors.append(
            FieldError(path, "Too many", f"must have at most {schema[most]} items", len(value))
        )
    if len(value) < schema.get(least, 0):
        errors.append(_body(path, len(value), f"should have at least {schema[least]} {noun}"))
    return errors


def _duplicate_errors(schema: Mapping[str, Any], items: list, path: str) -> list[FieldError]:
    """`x-kubernetes-list-type` set: no item twice; map: no two items with the same keys."""
    list_type = schema.get("x-kubernetes-list-type")
    keys = schema.get("x-kubernetes-list-map-keys", ())
    if list_type not in ("set", "map"):
        return []
    seen, errors = set(), []
    for index, item in enumerate(items):
        identity = (
            {k: item.get(k) for k in keys}
            if list_type == "map" and isinstance(item, dict)
            else item
        )
        canonical = json.dumps(identity, sort_keys=True)
        if canonical in seen:
            errors.append(FieldError(f"{path}[{index}]", "Duplicate value", value=identity))
        seen.add(canonical)
    return errors


@functools.cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _is_base64(value: str) -> bool:
    try:
        base64.b64decode(value, validate=True)
    except binascii.Error:
        return False
    return True


def _is_ip(value: str, version: int) -> bool:
    try:
        return ipaddress.ip_address(value).version == version
    except ValueError:
        return False


_DATE = r"\d{4}-\d{2}-\d{2}"
_FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": lambda v: bool(
        re.fullmatch(rf"{_DATE}[Tt ]\d{{2}}:\d{{2}}:\d{{2}}(\.\d+)?([Zz]|[+-]\d{{2}}:\d{{2}})", v)
    ),
    "date": lambda v: bool(re.fullmatch(_DATE, v)),
    "byte": _is_base64,
    "uuid": lambda v: bool(re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", v)),
    "ipv4": lambda v: _is_ip(v, 4),
    "ipv6": lambda v: _is_ip(v, 6),
}


# --- ObjectMeta -----------------------------------------------------------------------------

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(\.{_LABEL})*"
_NAME_RULES = {
    "subdomain": (253, _SUBDOMAIN, "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
    "label": (63, _LABEL, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
    "path segment": (None, r"(?!\.\.?$)[^/%]+", "may not be '.' or '..' and may not contain '/' or '%'"),
    "dns1035": (63, r"[a-z]([-a-z0-9]*[a-z0-9])?", "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"),
    "qualified name": (63, r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
    "label value": (63, r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
}  # fmt: skip
_ANNOTATIONS_LIMIT = 256 * 1024


def _name_errors(value: str, rule: str, path: str, shown: str | None = None) -> list[FieldError]:
    limit, pattern, words = _NAME_RULES[rule]
    errors = []
    if limit is not None and len(value) > limit:
        errors.append(invalid(path, shown or value, f"must be no more than {limit} characters"))
    if not re.fullmatch(pattern, value):
        errors.append(invalid(path, shown or value, words))
    return errors


def _key_errors(key: str, path: str) -> list[FieldError]:
    """A label or annotation key: an optional DNS-subdomain prefix and a qualified name."""
    prefix, _, name = key.rpartition("/")
    errors = _name_errors(name, "qualified name", path, shown=key)
    if "/" in key:
        errors += [
            invalid(path, key, f"prefix part {e.detail}")
            for e in _name_errors(prefix, "subdomain", path)
        ]
    return errors


def _metadata_errors(
    metadata: Any, name_rule: str, path: str, needs_name: bool
) -> list[FieldError]:
    if not isinstance(metadata, dict):
        return (
            [invalid(path, metadata, "must be an object")]
            if metadata is not None or needs_name
            else []
        )
    errors = []
    name = metadata.get("name")
    if needs_name and not name:
        errors.append(
            FieldError(_child(path, "name"), "Required value", "name or generateName is required")
        )
    if isinstance(name, str) and name:
        errors += _name_errors(name, name_rule, _child(path, "name"))
    if metadata.get("namespace"):
        errors += _name_errors(str(metadata["namespace"]), "label", _child(path, "namespace"))
    errors += _labels_errors(metadata.get("labels") or {}, _child(path, "labels"))
    errors += _annotations_errors(metadata.get("annotations") or {}, _child(path, "annotations"))
    return errors + _owner_errors(
        metadata.get("ownerReferences") or [], _child(path, "ownerReferences")
    )


def _owner_errors(references: list[Any], path: str) -> list[FieldError]:
    """`ValidateOwnerReferences`: at most one reference is the controller."""
    controllers = [
        f"{ref.get('kind')}/{ref.get('name')}"
        for ref in references
        if isinstance(ref, dict) and ref.get("controller") is True
    ]
    return [
        invalid(
            path,
            references,
            'Only one reference can have Controller set to true. Found "true" in references '
            f"for {controllers[0]} and {other}",
        )
        for other in controllers[1:]
    ]


def _labels_errors(labels: Mapping[str, Any], path: str) -> list[FieldError]:
    errors = []
    for key, value in labels.items():
        errors += _key_errors(key, path)
        if not isinstance(value, str):
            errors.append(invalid(f"{path}[{key}]", value, "must be a string"))
        else:
            errors += _name_errors(value, "label value", path)
    return errors


def _annotations_errors(annotations: Mapping[str, Any], path: str) -> list[FieldError]:
    errors = [e for key in annotations for e in _key_errors(key.lower(), path)]
    errors += [
        invalid(f"{path}[{k}]", v, "must be a string")
        for k, v in annotations.items()
        if not isinstance(v, str)
    ]
    size = sum(len(k) + len(str(v)) for k, v in annotations.items())
    if size > _ANNOTATIONS_LIMIT:
        errors.append(FieldError(path, "Too long", f"must have at most {_ANNOTATIONS_LIMIT} bytes"))
    return errors


def _embedded_errors(resource: Mapping[str, Any], path: str) -> list[FieldError]:
    errors = [
        FieldError(_child(path, key), "Required value", "must not be empty")
        for key in ("apiVersion", "kind")
        if not resource.get(key)
    ]
    return errors + _metadata_errors(
        resource.get("metadata"), "subdomain", _child(path, "metadata"), False
    )


# --- CEL: x-kubernetes-validations ----------------------------------------------------------


def _grammar_digest() -> str:
    """What the parse of a rule depends on: cel-python's grammar, lark's and Python's versions."""
    import lark

    grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
    made_by = f"{lark.__version__}-{sys.version_info[:2]}"
    return hashlib.sha256(f"{made_by}\0{grammar}".encode()).hexdigest()[:32]


def _environment() -> celpy.Environment:
    """cel-python's Environment, its LALR parser built from the grammar's analysis kept by lark
    (`cache`) in the user's cache directory, keyed by the grammar and the versions: building it
    afresh is 0.2 s of every simulation. Any trouble with the cache, and it is built afresh."""
    try:
        import lark
        from celpy.celparser import CELParser

        grammar = (Path(celpy.__file__).parent / "cel.lark").read_text()
        digest = _grammar_digest()
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        CELParser.CEL_PARSER = lark.Lark(  # as CELParser builds it, with the cache
            grammar,
            parser="lalr",
            start="expr",
            debug=True,
            g_regex_flags=re.M,
            lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
            propagate_positions=True,
            maybe_placeholders=False,
            priority="invert",
            tree_class=celpy.InterpretedRunner.tree_node_class,
            cache=str(folder / f"cel-{digest}.lark"),
        )
    except Exception:
        from celpy.celparser import CELParser

        CELParser.CEL_PARSER = None
    return celpy.Environment()


_ENV = _environment()
_GRAMMAR = _grammar_digest()


class _Optional:
    """What a rule with `optionalOldSelf` sees as oldSelf: a CEL optional, empty on create."""

    def __init__(self, value: Any):
        self.present = value


def _optional_value(optional: _Optional) -> Any:
    if optional.present is None:
        raise ValueError("optional.none() dereference")
    return optional.present


def _lower_ascii(text: Any) -> celtypes.StringType:
    return celtypes.StringType("".join(c.lower() if c.isascii() else c for c in str(text)))


def _upper_ascii(text: Any) -> celtypes.StringType:
    return celtypes.StringType("".join(c.upper() if c.isascii() else c for c in str(text)))


# The Kubernetes CEL libraries our XRDs and the upstream CRDs use (strings, lists, regex), and the
# optional type's methods for `optionalOldSelf`.
_KUBERNETES_LIBRARY: dict[str, Callable[..., Any]] = {
    "lowerAscii": _lower_ascii,
    "upperAscii": _upper_ascii,
    "trim": lambda s: celtypes.StringType(str(s).strip()),
    "replace": lambda s, old, new: celtypes.StringType(str(s).replace(str(old), str(new))),
    "split": lambda s, sep: celtypes.ListType(
        [celtypes.StringType(p) for p in str(s).split(str(sep))]
    ),
    "join": lambda items, sep="": celtypes.StringType(str(sep).join(str(i) for i in items)),
    "isSorted": lambda items: celtypes.BoolType(list(items) == sorted(items)),
    "find": lambda s, p: celtypes.StringType(m[0] if (m := re.search(str(p), str(s))) else ""),
    "findAll": lambda s, p: celtypes.ListType(
        [celtypes.StringType(m[0]) for m in re.finditer(str(p), str(s))]
    ),
    "hasValue": lambda o: celtypes.BoolType(o.present is not None),
    "value": _optional_value,
    "orValue": lambda o, default: default if o.present is None else o.present,
}


@dataclass(frozen=True)
class _Program:
    program: Any
    transition: bool


@functools.cache
def _compiled(expression: str) -> _Program:
    """A compiled rule; a rule cel-python cannot parse raises here, naming the rule."""
    try:
        program = _ENV.program(_parsed(expression), functions=_KUBERNETES_LIBRARY)
    except celpy.CELParseError as error:
        raise ValueError(f"cannot compile the CEL rule {expression!r}: {error}") from error
    return _Program(program, bool(re.search(r"\boldSelf\b", expression)))


def _parsed(expression: str) -> Any:
    """The rule's syntax tree, kept in the user's cache directory by the rule's text and the
    grammar's digest: parsing one takes ~8 ms, reading it back a twentieth of that, and every
    simulation evaluates the same fifty-odd rules. A cache that cannot be read or written is
    no error: the rule is parsed."""
    key = hashlib.sha256(f"{_GRAMMAR}\0{expression}".encode()).hexdigest()
    kept = cache_dir() / "cel" / f"{key}.pickle"
    try:
        return pickle.loads(kept.read_bytes())
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError):
        pass
    tree = _ENV.compile(expression)
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_name(f"{kept.name}.{os.getpid()}")
        partial.write_bytes(pickle.dumps(tree))
        os.replace(partial, kept)
    except (OSError, pickle.PicklingError, RecursionError):
        pass
    return tree


@functools.cache
def cel_program(expression: str, library: tuple[tuple[str, Callable[..., Any]], ...] = ()) -> Any:
    """A compiled CEL expression, for a stand-in that evaluates CEL as its component does
    (kube-scheduler's device selectors): the Kubernetes libraries above and `library`'s
    functions besides, by name. Compiled once per expression and library, with the rules'
    parse cache; ValueError names an expression cel-python cannot parse."""
    try:
        parsed = _parsed(expression)
    except celpy.CELParseError as error:
        raise ValueError(f"cannot compile the CEL expression {expression!r}: {error}") from error
    return _ENV.program(parsed, functions={**_KUBERNETES_LIBRARY, **dict(library)})


def _evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    """The result, or the evaluation error as a value (the API server reports it as an error)."""
    try:
        return _compiled(expression).program.evaluate(activation)
    except (celpy.CELEvalError, TypeError, ValueError, KeyError) as error:
        return error


def _rule_errors(
    schema: Mapping[str, Any], value: Any, old: Any, path: str, only: str | None = None
) -> list[FieldError]:
    """Every rule at and below this level; `old` is None where no old value correlates."""
    errors = _rules_here(schema, value, old, path)
    for sub_schema, sub_value, sub_old, sub_path in _correlated(schema, value, old, path):
        if only is None or sub_path == only:
            errors += _rule_errors(sub_schema, sub_value, sub_old, sub_path)
    return errors


def _correlated(schema: Mapping[str, Any], value: Any, old: Any, path: str) -> Iterator[tuple]:
    """Children with their old values: by key in objects, by map keys in `map` lists only."""
    if isinstance(value, dict):
        properties, extra = schema.get("properties") or {}, schema.get("additionalProperties")
        old = old if isinstance(old, dict) else {}
        for key, item in value.items():
            declared = properties.get(key, extra if isinstance(extra, dict) else None)
            if declared is not None and not _passes_through(schema, key, path):
                yield declared, item, old.get(key), _child(path, key)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        keys = (
            schema.get("x-kubernetes-list-map-keys")
            if schema.get("x-kubernetes-list-type") == "map"
            else None
        )
        by_key = (
            {_map_key(item, keys): item for item in old} if keys and isinstance(old, list) else {}
        )
        for index, item in enumerate(value):
            yield schema["items"], item, by_key.get(_map_key(item, keys)), f"{path}[{index}]"


def _map_key(item: Any, keys: list[str] | None) -> str:
    return json.dumps([item.get(k) for k in keys or ()] if isinstance(item, dict) else item)


# What the rules at one schema node said of one (value, old value): CEL is pure, and a
# scenario writes the same values again and again (every reconcile rewrites each status).
_JUDGED: OrderedDict[tuple, tuple[Any, list[FieldError]]] = OrderedDict()
_JUDGED_MAX = 8192


def _rules_here(schema: Mapping[str, Any], value: Any, old: Any, path: str) -> list[FieldError]:
    rules = schema.get("x-kubernetes-validations")
    if not rules:
        return []
    try:
        key = (id(rules), path, canonical(value), canonical(old))
    except ValueError:  # not JSON-like (a date YAML parsed): judged every time
        return _judged_here(rules, schema, value, old, path)
    if key in _JUDGED:
        _JUDGED.move_to_end(key)
        return list(_JUDGED[key][1])
    found = _judged_here(rules, schema, value, old, path)
    _JUDGED[key] = (rules, found)  # holding `rules` keeps its id from being reused
    if len(_JUDGED) > _JUDGED_MAX:
        _JUDGED.popitem(last=False)
    return list(found)


def _judged_here(
    rules: list[Mapping[str, Any]], schema: Mapping[str, Any], value: Any, old: Any, path: str
) -> list[FieldError]:
    if old is not None and json_equal(value, old):
        # Ratcheting (Kubernetes 1.30+): rules without oldSelf pass an unchanged value.
        rules = [rule for rule in rules if _compiled(rule["rule"]).transition]
    if not rules:
        return []
    this, previous = celpy.json_to_cel(value), None if old is None else celpy.json_to_cel(old)
    found = (_judge(rule, schema, this, previous, path) for rule in rules)
    return [error for error in found if error is not None]


def _judge(
    rule: Mapping[str, Any], schema: Mapping[str, Any], this: Any, previous: Any, path: str
) -> FieldError | None:
    activation = _activation(rule, this, previous)
    if activation is None:
        return None
    where = _child(path, rule["fieldPath"].lstrip(".")) if rule.get("fieldPath") else path
    result = _evaluate(rule["rule"], activation)
    if isinstance(result, Exception):
        text = str(rule.get("message") or rule["rule"]).strip()
        return invalid(where, schema.get("type", ""), f"{text}: {_reason(result)}")
    return None if bool(result) else _failure(rule, schema, activation, where)


def _activation(rule: Mapping[str, Any], this: Any, previous: Any) -> dict[str, Any] | None:
    """What the rule sees; None where it does not run: a transition rule runs only where the old
    value exists, unless it takes `optionalOldSelf`."""
    if not _compiled(rule["rule"]).transition:
        return {"self": this}
    if rule.get("optionalOldSelf"):
        return {"self": this, "oldSelf": _Optional(previous)}
    return None if previous is None else {"self": this, "oldSelf": previous}


def _reason(error: Exception) -> str:
    return str(error.args[0]) if error.args else str(error)


_REASONS = {"FieldValueForbidden": "Forbidden", "FieldValueRequired": "Required value",
            "FieldValueDuplicate": "Duplicate value"}  # fmt: skip


def _failure(
    rule: Mapping[str, Any], schema: Mapping[str, Any], activation: Mapping[str, Any], where: str
) -> FieldError:
    message = str(rule.get("message") or f"failed rule: {rule['rule']}").strip()
    if rule.get("messageExpression"):
        custom = _evaluate(rule["messageExpression"], activation)
        message = (
            str(custom).strip() if isinstance(custom, str) and str(custom).strip() else message
        )
    kind = _REASONS.get(rule.get("reason", ""), "Invalid value")
    if kind in ("Forbidden", "Required value"):
        return FieldError(where, kind, message)
    return FieldError(where, kind, message, schema.get("type", ""))


# --- one write --------------------------------------------------------------------------------


# ObjectMeta's fields (k8s.io/apimachinery meta/v1): any other key under a root `metadata` is an
# unknown field, pruned (or refused, under Strict field validation) as the decoder does.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "finalizers", "managedFields",
})  # fmt: skip


@dataclass(frozen=True)
class Checked:
    """An object as the API server would store it, and what it said about it.

    `unknown` are the paths of the fields it pruned, as the decoder lists them: ObjectMeta's
    first, then the schema's, sorted (apiextensions-apiserver's structural pruning sorts them);
    `warnings` are the Warning headers they make."""

    obj: dict[str, Any]
    errors: tuple[FieldError, ...]
    unknown: tuple[str, ...] = ()

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(f'unknown field "{path}"' for path in self.unknown)


def check(
    kind: KindSchema,
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None = None,
    *,
    status_only: bool = False,
    strict: bool = False,
) -> Checked:
    """Prune, default and validate `obj` (replacing `old`, on an update).

    `status_only` is a status-subresource write: the schema checks status only, and the CEL rules
    run at the root and under status (spec is the stored one). `strict` is Strict field
    validation: unknown fields are errors instead of pruned with a warning.

    The same write checked before is answered from memory (a scenario's reconciles write the
    same objects again and again; the check is a pure function of its inputs)."""
    try:
        key = (id(kind), status_only, strict, canonical(obj), canonical(old))
    except ValueError:  # not JSON-like (a date YAML parsed): checked every time
        return _check(kind, obj, old, status_only, strict)
    if key in _CHECKED:
        _CHECKED.move_to_end(key)
        _, stored, errors, unknown = _CHECKED[key]
        return Checked(marshal.loads(stored), errors, unknown)
    checked = _check(kind, obj, old, status_only, strict)
    try:
        stored = marshal.dumps(checked.obj)
    except ValueError:  # a default that is not JSON-like: nothing to remember
        return checked
    _CHECKED[key] = (kind, stored, checked.errors, checked.unknown)  # `kind` keeps its id
    if len(_CHECKED) > _CHECKED_MAX:
        _CHECKED.popitem(last=False)
    return checked


_CHECKED: OrderedDict[tuple, tuple[KindSchema, bytes, tuple, tuple]] = OrderedDict()
_CHECKED_MAX = 4096


def _check(
    kind: KindSchema,
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    status_only: bool,
    strict: bool,
) -> Checked:
    walk = _Walk(kind, strict)
    unknown_meta: list[str] = []
    if status_only:
        status_schema = kind.root.get("properties", {}).get("status", {})
        stored = dict(obj)
        if "status" in obj:
            stored["status"] = walk.value(status_schema, obj["status"], "status")
        walk.errors = [_in_status_body(error) for error in walk.errors]
    else:
        stored = walk.value(kind.root, obj, "")
        unknown_meta = _prune_metadata(stored)
        if strict:  # server-side apply: its typed patch has no place for them either
            walk.errors += [
                FieldError(p, "Forbidden", "field not declared in schema") for p in unknown_meta
            ]
            unknown_meta = []
        walk.errors += _root_metadata_errors(kind, stored.get("metadata"))
    errors = walk.errors
    if kind.structural:
        errors = errors + _cel_errors(kind, stored, old, errors, status_only)
    unknown = unknown_meta + sorted(walk.unknown)
    return Checked(stored, tuple(errors), tuple(unknown))


def _in_status_body(error: FieldError) -> FieldError:
    """The status subresource's schema is checked with the status as the body: an error names
    the field from the object (`status.detail`), its wording from the status (`detail in
    body must be …`), as kube-apiserver prints it."""
    path = error.path
    inner = path.removeprefix("status.") if path != "status" else ""
    detail = error.detail.replace(f"{path} in body", _in_body(inner), 1)
    return dataclasses.replace(error, detail=detail)


def _prune_metadata(stored: dict[str, Any]) -> list[str]:
    """ObjectMeta's unknown fields, dropped from a root `metadata` (a copy: the original is
    the caller's); their paths."""
    metadata = stored.get("metadata")
    if not isinstance(metadata, dict):
        return []
    unknown = [key for key in metadata if key not in OBJECT_META_FIELDS]
    if unknown:
        stored["metadata"] = {k: v for k, v in metadata.items() if k in OBJECT_META_FIELDS}
    return [f"metadata.{key}" for key in unknown]


def _root_metadata_errors(kind: KindSchema, metadata: Any) -> list[FieldError]:
    errors = _metadata_errors(metadata, kind.name_rule, "metadata", needs_name=True)
    declared = kind.resolve(kind.root.get("properties", {}).get("metadata", {}))
    name_schema = (declared.get("properties") or {}).get("name")
    if kind.structural and name_schema and isinstance(metadata, dict) and "name" in metadata:
        errors += _constraint_errors(name_schema, metadata["name"], "metadata.name")
    return errors


def _cel_errors(
    kind: KindSchema, stored: dict, old: Mapping[str, Any] | None, errors: list, status_only: bool
) -> list[FieldError]:
    if any(error.blocking for error in errors):  # said only where there are rules to skip
        return [RULES_NOT_CHECKED] if _has_rules(json.dumps(kind.root, sort_keys=True)) else []
    return _rule_errors(kind.root, stored, old, "", only="status" if status_only else None)


@functools.cache
def _has_rules(schema: str) -> bool:
    """Whether a schema (as JSON) declares any CEL rule: the API server has a CEL validator for
    the kind only then, and says what it did not check only then."""
    return '"x-kubernetes-validations"' in schema


# --- what a schema declares ------------------------------------------------------------------

_PATH_PART = re.compile(r"([^.\[\]]+)|\[([^\]]*)\]")


def fields_at(kind: KindSchema, path: str) -> list[str]:
    """The fields the schema declares for the object at `path` (`spec.volumes[0]`; "" is the
    root), sorted; none where the path leads nowhere the schema describes."""
    schema: Mapping[str, Any] = kind.resolve(kind.root)
    for plain, bracketed in _PATH_PART.findall(path):
        if bracketed and bracketed.isdigit():
            schema = kind.resolve(schema.get("items") or {})
        else:
            properties = schema.get("properties") or {}
            extra = schema.get("additionalProperties")
            found = properties.get(plain or bracketed, extra if isinstance(extra, dict) else None)
            if found is None:
                return []
            schema = kind.resolve(found)
    return sorted(schema.get("properties") or {})
