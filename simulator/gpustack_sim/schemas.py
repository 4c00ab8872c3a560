"""Which schema the simulated API server checks a write against.

Our XRDs as the CRDs Crossplane generates from them (the v2 set, or the legacy set as Crossplane
1.x would), the upstream CRDs in the schema directory (Kueue, NFD, Crossplane), KubeVirt's API
definitions, and core kinds through the kubernetes-validate package. A kind none of these knows
is accepted as is. Schemas are converted once per process (`functools.cache`).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from functions.documents import shipped
from gpustack_sim.upstream import kubernetes_validate_schemas

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS_MISSING = (
    "upstream schemas not found (set GPUSTACK_SCHEMAS, put them in ../shared/schemas or run "
    "`make schemas`): Kueue, NFD, Crossplane and KubeVirt objects are accepted unvalidated"
)


def schema_dir() -> Path | None:
    """`$GPUSTACK_SCHEMAS`, else `../shared/schemas` beside the checkout, else `make schemas`'s cache."""
    candidates = [
        os.environ.get("GPUSTACK_SCHEMAS"),
        ROOT.parent / "shared" / "schemas",
        ROOT / ".schemas-cache",
    ]
    for candidate in candidates:
        if candidate and (Path(candidate) / "SOURCES.md").exists():
            return Path(candidate)
    return None


def documents(path: Path) -> list[dict]:
    """A schema file's objects (read once per version of the file: functions/documents.py)."""
    return shipped(path)


# --- which schema applies -------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class KindSchema:
    """The schema of one apiVersion and kind, and the names the API server uses for it."""

    kind: str
    group: str
    plural: str
    root: Mapping[str, Any]
    # A CRD's structural schema: prune what it does not declare, apply defaults, run CEL rules.
    structural: bool
    status_subresource: bool
    definitions: Mapping[str, Any] = field(default_factory=dict)  # `$ref` targets
    name_rule: str = "subdomain"

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in schema:
            schema = self.definitions[schema["$ref"].rpartition("/")[2]]
        return schema


class Schemas:
    """Which schema applies to each apiVersion and kind in one simulated cluster.

    `legacy` picks the XRD set: the v2 API (Crossplane v2) or `compositions/legacy/` (v1 XRDs
    with claims, for Crossplane 1.x). Both serve `worker.gpustack.ai/v1alpha1 Instance`, so one
    cluster has one of them."""

    def __init__(self, directory: Path | None, *, legacy: bool = False):
        self.directory = directory
        self.legacy = legacy
        self.notices = () if directory else (SCHEMAS_MISSING,)

    @classmethod
    def found(cls, *, legacy: bool = False) -> Schemas:
        return cls(schema_dir(), legacy=legacy)

    def lookup(self, api_version: str, kind: str) -> KindSchema | None:
        key = (api_version, kind)
        return (
            _project_kinds(self.legacy).get(key)
            or _upstream_kinds(self.directory).get(key)
            or _kubevirt_kind(self.directory, api_version, kind)
            or _core_kind(api_version, kind)
        )

    def resource_of(self, kind: str, api_version: str = "") -> str:
        """The resource name a NotFound message uses (`instances.worker.gpustack.ai`)."""
        found = self.lookup(api_version, kind) if api_version else None
        known = [*_project_kinds(self.legacy).values(), *_upstream_kinds(self.directory).values()]
        found = found or next((s for s in known if s.kind == kind), None)
        if found:
            return found.resource
        group = api_version.rpartition("/")[0]
        return f"{_plural(kind)}.{group}" if group else _plural(kind)


def _plural(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    return lower + ("es" if lower.endswith(("s", "x", "ch", "sh")) else "s")


@functools.cache
def _project_kinds(legacy: bool) -> dict[tuple[str, str], KindSchema]:
    folder = ROOT / "compositions" / ("legacy/xrds" if legacy else "xrds")
    kinds = {}
    for path in sorted(folder.glob("*.yaml")):
        for xrd in documents(path):
            for version in xrd["spec"]["versions"]:
                for claim in (False, True) if "claimNames" in xrd["spec"] else (False,):
                    schema = _xrd_kind(xrd, version["name"], claim, legacy)
                    kinds[(f"{schema.group}/{version['name']}", schema.kind)] = schema
    return kinds


def _xrd_kind(xrd: dict, version: str, claim: bool, legacy: bool) -> KindSchema:
    names = xrd["spec"]["claimNames" if claim else "names"]
    root = xrd_crd_schema(xrd, version, claim, root_rules=not legacy)
    return KindSchema(
        names["kind"], xrd["spec"]["group"], names["plural"], root, True, status_subresource=True
    )


@functools.cache
def _upstream_kinds(directory: Path | None) -> dict[tuple[str, str], KindSchema]:
    kinds = {}
    for path in sorted(directory.glob("*.yaml")) if directory else ():
        for crd in documents(path):
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                schema = KindSchema(
                    spec["names"]["kind"],
                    spec["group"],
                    spec["names"]["plural"],
                    version["schema"]["openAPIV3Schema"],
                    structural=True,
                    status_subresource="status" in (version.get("subresources") or {}),
                )
                kinds[(f"{spec['group']}/{version['name']}", schema.kind)] = schema
    return kinds


@functools.cache
def _kubevirt_definitions(directory: Path) -> dict[str, Any]:
    path = directory / "kubevirt_v1.9.0_vmi_kubevirt_definitions.json"
    return json.loads(path.read_text())["definitions"]


@functools.cache
def _kubevirt_kind(directory: Path | None, api_version: str, kind: str) -> KindSchema | None:
    """KubeVirt's own API definitions (Swagger): its CRDs are generated from the same types."""
    definitions = _kubevirt_definitions(directory) if directory else {}
    if api_version != "kubevirt.io/v1" or f"v1.{kind}" not in definitions:
        return None
    root = definitions[f"v1.{kind}"]
    return KindSchema(
        kind, "kubevirt.io", _plural(kind), root, False, "status" in root["properties"], definitions
    )


# Most kinds' names are DNS subdomains; these differ (apimachinery's validation, per kind).
_CORE_NAME_RULES = {"Namespace": "label", "Service": "dns1035"} | dict.fromkeys(
    ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"), "path segment"
)


@functools.cache
def _core_definitions() -> dict[str, Any]:
    return _core_file("_definitions.json")["$defs"]


@functools.cache
def _core_file(name: str) -> Any:
    path = kubernetes_validate_schemas() / name
    return json.loads(path.read_text()) if path.is_file() else None


@functools.cache
def _core_kind(api_version: str, kind: str) -> KindSchema | None:
    """Core kinds from kubernetes-validate's schemas (its file naming: `pod-v1.json`)."""
    api = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    root = _core_file(f"{kind.lower()}-{api}.json")
    if root is None:
        return None
    group = api_version.rpartition("/")[0]
    has_status = "status" in root.get("properties", {})
    name_rule = _CORE_NAME_RULES.get(kind, "subdomain")
    return KindSchema(
        kind, group, _plural(kind), root, False, has_status, _core_definitions(), name_rule
    )


# --- the CRD Crossplane generates from an XRD ---------------------------------------------------

# Crossplane's bookkeeping under spec (crossplane-runtime xcrd): written by Crossplane, not tenants;
# the simulator keeps it opaque rather than re-deriving Crossplane's own schema for it.
_OPAQUE = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
COMPOSITE_NAME_MAX = 63  # internal/xcrd: maxCompositeNameLength and maxClaimNameLength
_LEGACY_XR_SPEC = ("compositionRef", "compositionSelector", "compositionRevisionRef",
                   "compositionRevisionSelector", "compositionUpdatePolicy", "resourceRefs",
                   "claimRef", "writeConnectionSecretToRef")  # fmt: skip
_CLAIM_SPEC = ("compositionRef", "compositionSelector", "compositionRevisionRef",
               "compositionRevisionSelector", "compositionUpdatePolicy", "compositeDeletePolicy",
               "resourceRef", "writeConnectionSecretToRef")  # fmt: skip
_CONDITION = {
    "type": "object",
    "required": ["lastTransitionTime", "reason", "status", "type"],
    "properties": {
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "message": {"type": "string"},
        "reason": {"type": "string"},
        "status": {"type": "string"},
        "type": {"type": "string"},
        "observedGeneration": {"type": "integer", "format": "int64"},
    },
}
_CONDITIONS = {
    "type": "array",
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
    "items": _CONDITION,
}


def xrd_crd_schema(
    xrd: dict, version: str = "v1alpha1", claim: bool = False, root_rules: bool = True
) -> dict:
    """The openAPIV3Schema of the CRD Crossplane generates from one version of an XRD.

    Crossplane keeps only spec's and status's fields, required lists and rules, adds its own
    fields and requires `spec`; of `metadata` it declares only the name, at most 63 characters
    (or the XRD's own smaller maxLength), since composed objects carry it as a label value
    (internal/xcrd, genCrdVersion; the same on 1.x). Root-level
    rules are copied from Crossplane v2.2.0 on (crossplane PR #7018); `root_rules=False` is
    Crossplane 1.x, which drops them."""
    source = next(v for v in xrd["spec"]["versions"] if v["name"] == version)["schema"]
    source = source["openAPIV3Schema"]
    sections = source.get("properties", {})
    root = {
        "type": "object",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": _name_limit(source)}},
            },
            "spec": _section(sections.get("spec", {}), _spec_fields(xrd, claim)),
            "status": _section(sections.get("status", {}), _status_fields(xrd, claim)),
        },
    }
    if root_rules and "x-kubernetes-validations" in source:
        root["x-kubernetes-validations"] = copy.deepcopy(source["x-kubernetes-validations"])
    return root


def _name_limit(source: Mapping[str, Any]) -> int:
    declared = source.get("properties", {}).get("metadata", {}).get("properties", {})
    own = declared.get("name", {}).get("maxLength")
    return min(own, COMPOSITE_NAME_MAX) if own is not None else COMPOSITE_NAME_MAX


def _section(source: Mapping[str, Any], added: dict) -> dict:
    kept = ("required", "x-kubernetes-validations", "x-kubernetes-preserve-unknown-fields", "oneOf")
    section = {"type": "object", **{k: copy.deepcopy(source[k]) for k in kept if k in source}}
    section["properties"] = {**copy.deepcopy(source.get("properties", {})), **added}
    return section


def _spec_fields(xrd: dict, claim: bool) -> dict:
    if claim:
        return dict.fromkeys(_CLAIM_SPEC, _OPAQUE)
    if xrd["apiVersion"].endswith("/v1"):
        return dict.fromkeys(_LEGACY_XR_SPEC, _OPAQUE)
    return {"crossplane": _OPAQUE}


def _status_fields(xrd: dict, claim: bool) -> dict:
    fields: dict[str, Any] = {"conditions": _CONDITIONS}
    if xrd["apiVersion"].endswith("/v1") or claim:  # LegacyCluster XRs and claims
        fields["connectionDetails"] = {
            "type": "object",
            "properties": {"lastPublishedTime": {"type": "string", "format": "date-time"}},
        }
        fields["claimConditionTypes"] = {
            "type": "array",
            "x-kubernetes-list-type": "set",
            "items": {"type": "string"},
        }
    return fields
