"""Where `e2e/build.sh` put each upstream binary, at the versions `e2e/versions.env` pins."""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
VERSIONS_FILE = HERE / "versions.env"

# binary → the versions.env entry of the component that builds it
COMPONENT = {
    "kube-apiserver": "KUBERNETES",
    "kube-controller-manager": "KUBERNETES",
    "kube-scheduler": "KUBERNETES",
    "kubectl": "KUBERNETES",
    "kine": "KINE",
    "kwok": "KWOK",
    "kueue": "KUEUE",
    "nfd-master": "NFD",
    "crossplane": "CROSSPLANE",
    "crank": "CROSSPLANE",
    "provider": "PROVIDER_KUBERNETES",
    "registry": "REGISTRY",
    "helm": "HELM",
}


def versions() -> dict[str, str]:
    pins = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.partition("=")
            pins[name] = version
    return pins


def cache() -> Path:
    if "E2E_CACHE" in os.environ:
        return Path(os.environ["E2E_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "function-gpustack-e2e"


def binary(name: str, component: str = "") -> Path:
    """The path of a built binary; `component` picks another pin (CROSSPLANE_LEGACY)."""
    component = component or COMPONENT[name]
    folder = {"CROSSPLANE_LEGACY": "crossplane", "PROVIDER_KUBERNETES": "provider-kubernetes"}.get(
        component, component.lower()
    )
    path = cache() / f"{folder}-{versions()[component]}" / "bin" / name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run e2e/build.sh (make e2e runs it)")
    return path


def module_dir(module: str, version: str) -> Path:
    """A module's source as the Go module cache holds it (its CRDs, KWOK's stages)."""
    gomodcache = (
        os.environ.get("GOMODCACHE")
        or Path(os.environ.get("GOPATH") or Path.home() / "go") / "pkg" / "mod"
    )
    escaped = "".join(f"!{c.lower()}" if c.isupper() else c for c in module)
    return Path(gomodcache) / f"{escaped}@{version}"
