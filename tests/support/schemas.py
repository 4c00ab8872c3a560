"""Validate objects as the API server would, for tests: the simulator's own validation
(`simulator/gpustack_sim/validation.py`) under Strict field validation, so an unknown field in a
composed object is an error here rather than a pruned field with a warning.

Each function returns the API server's error lines (`spec.x: Invalid value: …`), empty when valid.
Schemas are found through one setting: `$GPUSTACK_SCHEMAS`, else `../shared/schemas` beside the
checkout, else the `make schemas` cache. Where none is found the tests that need them skip and
say why.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpustack_sim import schemas as simulated
from gpustack_sim import validation
from gpustack_sim.schemas import ROOT, documents, schema_dir, xrd_crd_schema

__all__ = [
    "ROOT",
    "documents",
    "errors_of",
    "require_schemas",
    "schema_dir",
    "validate_core",
    "validate_kubevirt",
    "validate_upstream",
    "validate_xr",
    "xrd_crd_schema",
    "yaml_files",
]


def require_schemas() -> Path:
    found = schema_dir()
    if found is None:
        pytest.skip(
            "upstream schemas not found: set GPUSTACK_SCHEMAS, put them in ../shared/schemas, "
            "or run `make schemas`"
        )
    return found


def yaml_files(*roots: str) -> Iterator[Path]:
    for root in roots:
        yield from sorted((ROOT / root).rglob("*.yaml"))


@functools.cache
def _cluster(legacy: bool) -> simulated.Schemas:
    return simulated.Schemas(schema_dir(), legacy=legacy)


def errors_of(obj: dict, old: dict | None = None, *, legacy: bool = False) -> list[str]:
    """The API server's errors for writing `obj` (over `old`); LookupError for an unknown kind."""
    kind = _cluster(legacy).lookup(obj["apiVersion"], obj["kind"])
    if kind is None:
        raise LookupError(f"no schema for {obj['apiVersion']} {obj['kind']}")
    if old is not None:  # as stored: pruned and defaulted
        old = validation.check(kind, old).obj
    return [str(error) for error in validation.check(kind, obj, old, strict=True).errors]


def validate_upstream(obj: dict) -> list[str]:
    """Errors of `obj` against the upstream CRD of its kind (schema and CEL)."""
    require_schemas()
    return errors_of(obj)


def validate_kubevirt(obj: dict) -> list[str]:
    """Errors of a kubevirt.io/v1 object against KubeVirt's own API definitions."""
    require_schemas()
    return errors_of(obj)


def validate_core(obj: dict) -> list[str]:
    """Errors of a core Kubernetes object against kubernetes-validate's schemas."""
    return errors_of(obj)


def validate_xr(obj: dict, old: dict | None = None, legacy: bool = False) -> list[str]:
    """Errors of an XR (or claim) against the CRD its XRD generates, CEL rules included;
    `legacy` reads the legacy set (v1 XRDs with claims, as Crossplane 1.x generates them)."""
    return errors_of(obj, old, legacy=legacy)
