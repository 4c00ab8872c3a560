"""Validate objects as the API server would: upstream CRD schemas, XRD-generated CRDs, CEL rules.

Schemas are found through one setting: `$GPUSTACK_SCHEMAS`, else `../shared/schemas` beside the
checkout, else the `make schemas` cache. Where none is found the tests that need them skip and
say why.
"""

from __future__ import annotations

import copy
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES_VERSION = kubernetes_validate.latest_version()


def schema_dir() -> Path | None:
    candidates = [
        os.environ.get("GPUSTACK_SCHEMAS"),
        ROOT.parent / "shared" / "schemas",
        ROOT / ".schemas-cache",
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "SOURCES.md").exists():
            return Path(candidate)
    return None


def require_schemas() -> Path:
    found = schema_dir()
    if found is None:
        pytest.skip(
            "upstream schemas not found: set GPUSTACK_SCHEMAS, put them in ../shared/schemas, "
            "or run `make schemas`"
        )
    return found


def documents(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def yaml_files(*roots: str) -> Iterator[Path]:
    for root in roots:
        yield from sorted((ROOT / root).rglob("*.yaml"))


# --- upstream CRDs -------------------------------------------------------------------------


@functools.cache
def upstream_crds() -> dict[tuple[str, str], dict]:
    """(group, kind) → CRD, from every CRD file among the upstream schemas."""
    crds = {}
    for path in sorted(require_schemas().glob("*.yaml")):
        for doc in documents(path):
            if doc.get("kind") == "CustomResourceDefinition":
                crds[(doc["spec"]["group"], doc["spec"]["names"]["kind"])] = doc
    return crds


def crd_version_schema(crd: dict, version: str) -> dict:
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return served["schema"]["openAPIV3Schema"]
    raise LookupError(f"{crd['metadata']['name']} has no version {version}")


def validate_upstream(obj: dict) -> list[str]:
    """Errors of `obj` against the upstream CRD of its kind (schema and CEL)."""
    group, _, version = obj["apiVersion"].rpartition("/")
    crd = upstream_crds().get((group, obj["kind"]))
    if crd is None:
        raise LookupError(f"no upstream schema for {obj['apiVersion']} {obj['kind']}")
    return validate_openapi(crd_version_schema(crd, version), obj)


@functools.cache
def _kubevirt_definitions() -> dict:
    import json

    return json.loads(
        (require_schemas() / "kubevirt_v1.9.0_vmi_kubevirt_definitions.json").read_text()
    )["definitions"]


def validate_kubevirt(obj: dict) -> list[str]:
    """Errors of a kubevirt.io/v1 object against KubeVirt's own API definitions."""
    definition = {"VirtualMachineInstance": "v1.VirtualMachineInstance", "KubeVirt": "v1.KubeVirt"}[
        obj["kind"]
    ]
    schema = {"$ref": f"#/definitions/{definition}", "definitions": _kubevirt_definitions()}
    validator = jsonschema.Draft4Validator(schema)
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(obj)
    ]


def validate_core(obj: dict) -> list[str]:
    """Errors of a core Kubernetes object against kubernetes-validate's schemas (strict)."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'.'.join(map(str, error.path))}: {error.message}"]
    return []


# --- OpenAPI v3 (structural) → JSON Schema ----------------------------------------------------


def to_jsonschema(schema: Any) -> Any:
    """Structural OpenAPI as JSON Schema; unknown fields are errors (kubectl's strict mode)."""
    if isinstance(schema, list):
        return [to_jsonschema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: to_jsonschema(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    out.pop("format", None)
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = schema.get("x-kubernetes-preserve-unknown-fields")
    if out.get("type") == "object" and "properties" in out and not preserve:
        out.setdefault("additionalProperties", False)
    if "properties" in out and "metadata" in out["properties"]:
        out["properties"]["metadata"] = {"type": "object"}
    return out


def apply_defaults(schema: dict, value: Any) -> Any:
    """Fill defaults the way the API server does before validation."""
    if isinstance(value, dict):
        value = dict(value)
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(sub, value[key])
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        value = [apply_defaults(schema["items"], item) for item in value]
    return value


def validate_openapi(schema: dict, obj: dict, old: dict | None = None) -> list[str]:
    obj = apply_defaults(schema, obj)
    validator = jsonschema.Draft7Validator(to_jsonschema(schema))
    errors = [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if old is not None:
        old = apply_defaults(schema, old)
    return errors + cel_errors(schema, obj, old)


# --- CEL ---------------------------------------------------------------------------------------

_ENV = celpy.Environment()
# The Kubernetes CEL string extensions the upstream schemas use.
_KUBERNETES_FUNCTIONS = {
    "lowerAscii": lambda s: celpy.celtypes.StringType(str(s).lower()),
    "upperAscii": lambda s: celpy.celtypes.StringType(str(s).upper()),
}


@functools.cache
def _program(rule: str):
    return _ENV.program(_ENV.compile(rule), functions=_KUBERNETES_FUNCTIONS)


def cel_errors(schema: dict, value: Any, old: Any = None, path: str = "") -> list[str]:
    """Evaluate every x-kubernetes-validations rule, transition rules only when there is an old."""
    errors: list[str] = []
    for rule in schema.get("x-kubernetes-validations", []):
        transition = "oldSelf" in rule["rule"]
        if transition and old is None:
            continue
        activation = {"self": celpy.json_to_cel(value)}
        if transition:
            activation["oldSelf"] = celpy.json_to_cel(old)
        result = _program(rule["rule"]).evaluate(activation)
        if isinstance(result, Exception) or not bool(result):
            where = (path + rule.get("fieldPath", "")).lstrip(".") or "<root>"
            errors.append(f"{where}: {rule['message']}")
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                sub_old = old.get(key) if isinstance(old, dict) else None
                errors += cel_errors(sub, value[key], sub_old, f"{path}.{key}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        keys = schema.get("x-kubernetes-list-map-keys")
        old_by_key = {}
        if keys and isinstance(old, list):
            old_by_key = {tuple(item.get(k) for k in keys): item for item in old}
        for index, item in enumerate(value):
            item_old = old_by_key.get(tuple(item.get(k) for k in keys)) if keys else None
            errors += cel_errors(schema["items"], item, item_old, f"{path}[{index}]")
    return errors


# --- XRDs ------------------------------------------------------------------------------------

_CROSSPLANE_SPEC = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_LEGACY_SPEC_FIELDS = (
    "claimRef",
    "compositionRef",
    "compositionSelector",
    "compositionRevisionRef",
    "compositionRevisionSelector",
    "compositionUpdatePolicy",
    "compositeDeletePolicy",
    "resourceRefs",
    "writeConnectionSecretToRef",
    "publishConnectionDetailsTo",
)


def xrd_crd_schema(xrd: dict, version: str = "v1alpha1", claim: bool = False) -> dict:
    """The openAPIV3Schema of the CRD Crossplane generates from an XRD (the parts we rely on)."""
    schema = copy.deepcopy(
        next(v for v in xrd["spec"]["versions"] if v["name"] == version)["schema"]
    )
    root = schema["openAPIV3Schema"]
    props = root.setdefault("properties", {})
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    props["metadata"] = {"type": "object"}
    spec = props.setdefault("spec", {"type": "object", "properties": {}})
    spec.setdefault("properties", {})
    if xrd["apiVersion"].endswith("/v2"):
        spec["properties"]["crossplane"] = _CROSSPLANE_SPEC
    elif not claim:
        for field in _LEGACY_SPEC_FIELDS:
            spec["properties"][field] = _CROSSPLANE_SPEC
    status = props.setdefault("status", {"type": "object", "properties": {}})
    status.setdefault("properties", {})
    status["properties"].update(
        {
            "conditions": {"type": "array", "items": _CROSSPLANE_SPEC},
            "crossplane": _CROSSPLANE_SPEC,
            "claimConditionTypes": {"type": "array", "items": {"type": "string"}},
            "connectionDetails": _CROSSPLANE_SPEC,
        }
    )
    return root


@functools.cache
def project_xrds() -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) → (xrd, claim?) for every XRD of the v2 API and the legacy set."""
    found = {}
    for path in yaml_files("compositions"):
        for doc in documents(path):
            if doc.get("kind") != "CompositeResourceDefinition":
                continue
            group = doc["spec"]["group"]
            for version in doc["spec"]["versions"]:
                found[
                    (f"{group}/{version['name']}", doc["spec"]["names"]["kind"], doc["apiVersion"])
                ] = (doc, False)
                if "claimNames" in doc["spec"]:
                    found[
                        (
                            f"{group}/{version['name']}",
                            doc["spec"]["claimNames"]["kind"],
                            doc["apiVersion"],
                        )
                    ] = (doc, True)
    return found


def validate_xr(obj: dict, old: dict | None = None, legacy: bool = False) -> list[str]:
    """Errors of an XR (or claim) against the CRD its XRD generates, CEL rules included."""
    xrd_api = "apiextensions.crossplane.io/v1" if legacy else "apiextensions.crossplane.io/v2"
    xrd, claim = project_xrds()[(obj["apiVersion"], obj["kind"], xrd_api)]
    schema = xrd_crd_schema(xrd, obj["apiVersion"].rpartition("/")[2], claim)
    return validate_openapi(schema, obj, old)
