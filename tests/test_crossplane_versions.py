"""Every Crossplane object we ship, as each Crossplane release the package claims would take it.

The package claims Crossplane `>=v1.20.0-0` (package/crossplane.yaml): 2.x composes either set;
1.x composes the legacy set through provider-kubernetes (`compositions/legacy/crossplane-1`: its
XRs cannot reference a namespaced object, functions/envelope.py, docs/e2e.md). Each
release serves its own CRDs for XRDs, Compositions and Functions, and kube-apiserver refuses,
under strict field validation (kubectl's default), a field the release's CRD does not declare —
so a manifest valid against v2.3.4 may still be refused by 1.17. What each release is given:

- the legacy set (`compositions/legacy/`, v1 XRDs with claims): 1.17 and 1.20, whose users see
  it install before they upgrade, and 2.x, which serves v1 XRDs (defaulting their scope to
  LegacyCluster);
- the v2 set (`compositions/xrds`, `compositions/pipelines`): 2.x only — 1.x serves no
  `apiextensions.crossplane.io/v2`;
- the Function objects (examples/install/function.yaml and every example's functions.yaml): all.

The releases' CRDs are read from the schema directory (`$GPUSTACK_SCHEMAS`, else
`../shared/schemas`, else `make schemas`'s cache): 1.x under `crossplane-1.x/`, 2.x at the top.
Where they are not found, these tests skip and say which file is missing.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpustack_sim import validation
from gpustack_sim.schemas import KindSchema
from tests.support.schemas import ROOT, documents, require_schemas

LEGACY = [
    "compositions/legacy/xrds",
    "compositions/legacy/pipelines",
    "compositions/legacy/crossplane-1",
]
V2 = ["compositions/xrds", "compositions/pipelines"]
FUNCTIONS = ["examples/install/function.yaml", *sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "examples").glob("*/functions.yaml")
)]  # fmt: skip
CRDS = ("apiextensions.crossplane.io_compositeresourcedefinitions",
        "apiextensions.crossplane.io_compositions", "pkg.crossplane.io_functions")  # fmt: skip


@dataclass(frozen=True)
class Release:
    version: str
    files: tuple[str, ...]  # in the schema directory
    serves: tuple[str, ...]  # what it is given: folders and files of this checkout


RELEASES = [
    Release("v1.17.0", tuple(f"crossplane-1.x/v1.17.0_{c}.yaml" for c in CRDS), (*LEGACY, *FUNCTIONS)),
    Release("v1.20.0", tuple(f"crossplane-1.x/v1.20.0_{c}.yaml" for c in CRDS), (*LEGACY, *FUNCTIONS)),
    Release("v2.3.4", tuple(f"crossplane_{c}.yaml" for c in CRDS), (*LEGACY, *V2, *FUNCTIONS)),
]  # fmt: skip


def crd_files(release: Release) -> list[Path]:
    root = require_schemas()
    paths = [root / name for name in release.files]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        pytest.skip(
            f"Crossplane {release.version}'s CRDs not found ({', '.join(missing)}): the schema "
            "directory predates them; run `make schemas` or point GPUSTACK_SCHEMAS at a newer one"
        )
    return paths


@functools.cache
def kinds_of(paths: tuple[Path, ...]) -> dict[tuple[str, str], KindSchema]:
    """Each served apiVersion and kind of these CRDs, as the API server checks it."""
    kinds = {}
    for path in paths:
        for crd in documents(path):
            spec = crd["spec"]
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                kinds[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = KindSchema(
                    spec["names"]["kind"],
                    spec["group"],
                    spec["names"]["plural"],
                    version["schema"]["openAPIV3Schema"],
                    structural=True,
                    status_subresource="status" in (version.get("subresources") or {}),
                )
    return kinds


def shipped(paths: tuple[str, ...]) -> list[tuple[str, dict]]:
    found = []
    for name in paths:
        path = ROOT / name
        for file in sorted(path.glob("*.yaml")) if path.is_dir() else [path]:
            found += [(str(file.relative_to(ROOT)), doc) for doc in documents(file)]
    return found


def errors_against(release: Release, doc: dict) -> list[str]:
    kinds = kinds_of(tuple(crd_files(release)))
    kind = kinds.get((doc["apiVersion"], doc["kind"]))
    if kind is None:
        return [f"Crossplane {release.version} serves no {doc['apiVersion']} {doc['kind']}"]
    return [str(error) for error in validation.check(kind, doc, strict=True).errors]


@pytest.mark.parametrize("release", RELEASES, ids=lambda r: r.version)
def test_every_object_a_release_is_given_is_valid_against_its_crds(release):
    errors = {
        f"{file}: {doc['kind']} {doc['metadata']['name']}": found
        for file, doc in shipped(release.serves)
        if (found := errors_against(release, doc))
    }
    assert errors == {}


@pytest.mark.parametrize("release", RELEASES[:2], ids=lambda r: r.version)
def test_a_crossplane_1_release_serves_none_of_the_v2_set(release):
    """Why the v2 set is not offered to 1.x: its XRDs' API does not exist there."""
    xrds = [doc for _, doc in shipped(("compositions/xrds",))]
    assert {doc["apiVersion"] for doc in xrds} == {"apiextensions.crossplane.io/v2"}
    assert errors_against(release, xrds[0]) == [
        f"Crossplane {release.version} serves no apiextensions.crossplane.io/v2 "
        "CompositeResourceDefinition"
    ]


def test_the_package_claims_the_crossplane_releases_it_composes_on():
    """The real control plane composes the legacy set on 1.20 through provider-kubernetes and
    both sets on 2.x (docs/e2e.md); 1.17 stays here for what its users see install before
    they upgrade."""
    [meta] = documents(ROOT / "package" / "crossplane.yaml")
    assert meta["spec"]["crossplane"]["version"] == ">=v1.20.0-0"
    # 1.x's oldest and newest the legacy set was written for, and 2.x.
    assert [r.version.rpartition(".")[0] for r in RELEASES] == ["v1.17", "v1.20", "v2.3"]


def test_the_legacy_xrds_leave_the_scope_to_the_release():
    """1.x's XRD has no `scope` (every v1 XR is cluster-scoped, with claims); 2.x defaults a
    v1 XRD's scope to LegacyCluster. Writing it would make 1.x refuse every legacy XRD."""
    for file, doc in shipped(("compositions/legacy/xrds",)):
        assert "scope" not in doc["spec"], file
