"""What `pip install function-gpustack` installs is what the code imports: every third-party
module the package imports comes from a distribution pinned in pyproject.toml — the served
function, the agent and the CLIs from `dependencies`; the simulator (gpustack-sim,
simulator/pyproject.toml) from its own, or from the product's through its pin on the product.
A module that is only there because something else happened to pull it in breaks the day that
something stops (grpcio-reflection was such a module)."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

from tests.support.schemas import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SIMULATOR = ROOT / "simulator"
SIMULATOR_PYPROJECT = tomllib.loads((SIMULATOR / "pyproject.toml").read_text())
PIN = re.compile(r"^(?P<name>[A-Za-z0-9._-]+)==(?P<version>[^;\s]+)$")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(requirements: list[str]) -> dict[str, str]:
    found = {}
    for requirement in requirements:
        match = PIN.match(requirement)
        assert match, f"{requirement!r} in pyproject.toml is not pinned as name==version"
        found[normalized(match["name"])] = match["version"]
    return found


def imported_modules(path: Path) -> set[str]:
    """The top-level names of the absolute imports of one module."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names - set(sys.stdlib_module_names) - {"functions", "gpustack_sim", "__future__"}


def undeclared(paths: list[Path], declared: dict[str, str]) -> list[str]:
    distributions = importlib.metadata.packages_distributions()
    missing = []
    for path in paths:
        for module in sorted(imported_modules(path)):
            providers = {normalized(d) for d in distributions.get(module, [])}
            if not providers & set(declared):
                where = path.relative_to(ROOT)
                missing.append(f"{where} imports {module} (from {sorted(providers) or '?'})")
    return missing


def test_every_module_the_package_imports_comes_from_a_pinned_dependency():
    served = pins(PYPROJECT["project"]["dependencies"])
    paths = sorted((ROOT / "functions").rglob("*.py"))
    assert undeclared(paths, served) == []


def test_the_simulator_imports_only_its_dependencies_and_the_products():
    declared = pins(SIMULATOR_PYPROJECT["project"]["dependencies"])
    declared |= pins(PYPROJECT["project"]["dependencies"])  # through its pin on the product
    paths = sorted((SIMULATOR / "gpustack_sim").rglob("*.py"))
    assert paths
    assert undeclared(paths, declared) == []


def test_the_simulator_pins_the_product_of_its_checkout():
    """It drives the product beside it: its pin follows the product's version."""
    simulator = pins(SIMULATOR_PYPROJECT["project"]["dependencies"])
    assert simulator["function-gpustack"] == PYPROJECT["project"]["version"]


def test_grpc_add_ons_are_pinned_to_grpcios_version():
    """grpcio's add-on packages are released in lockstep with it, and each requires
    grpcio>=its own version: a newer add-on would upgrade grpcio past its pin."""
    served = pins(PYPROJECT["project"]["dependencies"])
    add_ons = {name: v for name, v in served.items() if name.startswith("grpcio-")}
    assert set(add_ons) >= {"grpcio-health-checking", "grpcio-reflection"}
    assert add_ons == dict.fromkeys(add_ons, served["grpcio"])
