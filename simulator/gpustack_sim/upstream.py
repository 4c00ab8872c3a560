"""Two things the simulator takes from upstream packages without importing them whole.

- Quantities are parsed by the Kubernetes Python client's own `parse_quantity`
  (kubernetes/utils/quantity.py), loaded from its file: importing it through the package
  (`kubernetes.utils`) would run the whole client's `__init__` — its configuration loaders,
  requests and OAuth — about 0.15 s of every `gpustack-fn simulate` for one function that
  imports only `decimal`.
- Core kinds are validated against the JSON schemas kubernetes-validate ships, its newest
  Kubernetes version's (`latest_version()`), found on disk rather than through its package,
  which would import jsonschema for a validator the simulator does not use.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from types import ModuleType

MISSING = "{} is needed to simulate: from a checkout, pip install -e ./simulator"


def _package_dir(name: str) -> Path:
    """Where an installed package lives, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(MISSING.format(name), name=name)
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def _quantity_module() -> ModuleType:
    path = _package_dir("kubernetes") / "utils" / "quantity.py"
    spec = importlib.util.spec_from_file_location("_gpustack_kubernetes_quantity", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the Kubernetes client's {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def parse_quantity(quantity: object) -> Decimal:
    """kubernetes.utils.parse_quantity, the Kubernetes Python client's."""
    parse: Callable[[object], Decimal] = _quantity_module().parse_quantity
    return parse(quantity)


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", name))


@functools.cache
def kubernetes_validate_schemas() -> Path:
    """kubernetes-validate's standalone schemas of its newest Kubernetes version (its
    `latest_version()`): the directory `v<version>-local` holds `<kind>-<group>-<version>.json`
    and `_definitions.json`."""
    root = _package_dir("kubernetes_validate") / "kubernetes-json-schema"
    versions = {p.name[1:].split("-")[0] for p in root.iterdir() if p.name.startswith("v")}
    if not versions:
        raise ImportError(f"kubernetes-validate ships no schemas under {root}")
    return root / f"v{max(versions, key=_version_key)}-local"
