"""KubeVirt's CRDs, from KubeVirt's own API spec: VMIs are stored and validated, nothing runs them.

KubeVirt cannot run here (it needs virtualization), and its Go module `kubevirt.io/kubevirt` is
refused by the module proxy, so neither virt-operator nor the generator of its CRDs can be
built. virt-operator generates its CRDs' schemas from the same OpenAPI definitions KubeVirt
publishes (`api/openapi-spec/swagger.json`), of which `../shared/schemas/` keeps the part the
KubeVirt and VirtualMachineInstance kinds reach. This module turns that part into the CRDs'
structural schemas, as apiextensions requires them: every `$ref` inlined (a definition that
reaches itself is kept open, `x-kubernetes-preserve-unknown-fields`), a Quantity or an
IntOrString (a port's `type: [string, number]` too) is `x-kubernetes-int-or-string`, a field without a type keeps what it is given, and
`metadata` at the root is left to the API server. Defaults and descriptions are left out (the
descriptions would make each CRD megabytes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

GROUP, VERSION = "kubevirt.io", "v1"
DEFINITIONS_FILE = "kubevirt_v1.9.0_vmi_kubevirt_definitions.json"
# kind → (plural, short names): KubeVirt's own names for them.
KINDS = {
    "KubeVirt": ("kubevirts", ["kv", "kvs"]),
    "VirtualMachineInstance": ("virtualmachineinstances", ["vmi", "vmis"]),
}
INT_OR_STRING = {"x-kubernetes-int-or-string": True}
OPEN = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_INT_OR_STRING_REFS = (
    "k8s.io.apimachinery.pkg.api.resource.Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
)
_KEPT = ("type", "nullable", "format", "enum", "required", "pattern", "minimum", "maximum")


def crds(schemas: Path) -> list[dict[str, Any]]:
    definitions = json.loads((schemas / DEFINITIONS_FILE).read_text())["definitions"]
    return [crd(kind, definitions) for kind in KINDS]


def crd(kind: str, definitions: Mapping[str, Any]) -> dict[str, Any]:
    plural, short = KINDS[kind]
    root = structural(definitions[f"v1.{kind}"], definitions, ())
    root["properties"]["metadata"] = {"type": "object"}
    version: dict[str, Any] = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": root},
    }
    if "status" in root["properties"]:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short,
            },
            "versions": [version],
        },
    }


def structural(
    schema: Mapping[str, Any], definitions: Mapping[str, Any], seen: tuple[str, ...]
) -> dict[str, Any]:
    """One swagger schema as a structural one (the module's docstring)."""
    ref = schema.get("$ref")
    if ref is not None:
        name = ref.rsplit("/", 1)[-1]
        if name in _INT_OR_STRING_REFS:
            return dict(INT_OR_STRING)
        if name in seen:
            return dict(OPEN)
        return structural(definitions[name], definitions, (*seen, name))
    types = schema.get("type")
    if isinstance(types, list):  # `[string, null]`: nullable; `[string, number]`: a port
        kept = [t for t in types if t != "null"]
        if len(kept) != 1:
            return dict(INT_OR_STRING)
        schema = {**schema, "type": kept[0], "nullable": "null" in types}
    if schema.get("format") == "int-or-string":
        return dict(INT_OR_STRING)
    found: dict[str, Any] = {k: schema[k] for k in _KEPT if k in schema}
    if "properties" in schema:
        found["type"] = "object"
        found["properties"] = {
            key: structural(value, definitions, seen) for key, value in schema["properties"].items()
        }
    elif isinstance(schema.get("additionalProperties"), Mapping):
        found["type"] = "object"
        found["additionalProperties"] = structural(
            schema["additionalProperties"], definitions, seen
        )
    if found.get("type") == "array":
        found["items"] = structural(schema.get("items") or {}, definitions, seen)
    if "type" not in found:  # RawExtension, a free-form object: what it is given is kept
        return dict(OPEN)
    if (
        found["type"] == "object"
        and "properties" not in found
        and "additionalProperties" not in found
    ):
        found["x-kubernetes-preserve-unknown-fields"] = True
    return found
