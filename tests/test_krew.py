"""The krew release of `kubectl gpustack` (functions/kubectl/krew.py, built by `make package`).

- The manifest passes krew's own checks (`internal/index/validation/validate.go`: apiVersion
  and kind, a safe name matching the file, a one-line short description, a `v`-prefixed
  semantic version, and per platform a uri, a lowercase sha256, a bin and a selector on `os` and
  `arch` only) and names the archive's checksum and the project's version.
- The archive is one executable zip application that runs with the standard library alone (no
  site-packages), prints what the installed plugin prints, and builds byte for byte the same
  twice.
"""

from __future__ import annotations

import functools
import hashlib
import io
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from functions.kubectl import krew
from functions.kubectl.cli import main
from tests.support.patience import HANG
from tests.support.schemas import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "kubectl" / "devices-after-section-3.yaml"
VERSION = "v" + re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
SAFE_NAME = re.compile(r"^[\w-]+$")  # krew's safePluginRegexp
SHA256 = re.compile(r"^[a-f0-9]{64}$")  # krew's sha256Pattern


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """The archive and the manifest, as `make package` writes them."""
    where = tmp_path_factory.mktemp("krew")
    manifest = where / "plugins" / "gpustack.yaml"
    archive = krew.build(VERSION, where / "out", manifest)
    return archive, manifest


def krew_errors(name: str, plugin: dict) -> list[str]:
    """What krew's ValidatePlugin refuses in a manifest, in its words."""
    errors = []
    if plugin.get("apiVersion") != "krew.googlecontainertools.github.com/v1alpha2":
        errors.append(f"plugin manifest has apiVersion={plugin.get('apiVersion')!r}")
    if plugin.get("kind") != "Plugin":
        errors.append(f"plugin manifest has kind={plugin.get('kind')!r}")
    if not SAFE_NAME.match(name):
        errors.append(f"the plugin name {name!r} is not allowed")
    if plugin.get("metadata", {}).get("name") != name:
        errors.append(f"plugin should be named {name!r}")
    spec = plugin.get("spec", {})
    short = spec.get("shortDescription", "")
    if not short or "\n" in short or "\r" in short:
        errors.append("should have a one-line short description")
    if not spec.get("platforms"):
        errors.append("should have a platform specified")
    if not krew.SEMVER.match(spec.get("version", "")):
        errors.append("failed to parse plugin version")
    for platform in spec.get("platforms", []):
        errors += [f"platform: {e}" for e in platform_errors(platform)]
    return errors


def platform_errors(platform: dict) -> list[str]:
    errors = [f"`{key}` has to be set" for key in ("uri", "sha256", "bin") if not platform.get(key)]
    if platform.get("sha256") and not SHA256.match(platform["sha256"]):
        errors.append("`sha256` value is not valid")
    if "files" in platform and not all(f.get("from") and f.get("to") for f in platform["files"]):
        errors.append("`files` is invalid")
    selector = platform.get("selector") or {}
    keys = [
        *selector.get("matchLabels", {}),
        *(e["key"] for e in selector.get("matchExpressions", [])),
    ]
    if not keys:
        errors.append("empty selector is not supported")
    errors += [f"key {key!r} not supported" for key in keys if key not in ("os", "arch")]
    return errors


def test_the_manifest_passes_krews_validation(built):
    _, manifest = built
    plugin = yaml.safe_load(manifest.read_text())
    assert krew_errors(manifest.stem, plugin) == []
    assert krew_errors("gpustack", {**plugin, "kind": "Plugins"}) == [
        "plugin manifest has kind='Plugins'"
    ]


def test_the_manifest_names_the_archive_its_checksum_and_the_projects_version(built):
    archive, manifest = built
    spec = yaml.safe_load(manifest.read_text())["spec"]
    assert spec["version"] == VERSION
    [platform] = spec["platforms"]
    assert platform == {
        "selector": {"matchExpressions": [{"key": "os", "operator": "In",
                                           "values": ["darwin", "linux"]}]},
        "uri": "https://github.com/gpustack/function-gpustack/releases/download/"
        f"{VERSION}/kubectl-gpustack-{VERSION}.tar.gz",
        "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
        "bin": "kubectl-gpustack",
    }  # fmt: skip
    assert manifest.read_text().startswith("# Written by `make package`")


def test_a_version_krew_cannot_parse_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="semantic version with a v"):
        krew.build("0.1.0", tmp_path, tmp_path / "gpustack.yaml")


@functools.cache
def extracted(archive: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(archive) as tar:
        return {member.name: member for member in tar.getmembers()}


def application(archive: Path, where: Path) -> Path:
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    return where / "kubectl-gpustack"


def test_the_archive_holds_one_executable_zip_application(built):
    archive, _ = built
    [member] = extracted(archive).values()
    assert (member.name, member.mode, member.mtime, member.uid, member.uname) == (
        "kubectl-gpustack", 0o755, 0, 0, "")  # fmt: skip
    with tarfile.open(archive) as tar:
        data = tar.extractfile(member).read()
    assert data.startswith(b"#!/usr/bin/env python3\n")
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "__main__.py" in names and "functions/kubectl/cli.py" in names
    assert "functions/kubectl/krew.py" not in names  # the builder stays out
    assert {n.split("/")[0] for n in names} == {"__main__.py", "functions", "click", "yaml",
                                                "licenses"}  # fmt: skip
    assert {n for n in names if n.startswith("licenses/")} >= {"licenses/PyYAML/LICENSE"}
    assert all(n.endswith((".py", "LICENSE", "LICENSE.txt")) for n in names)  # nothing compiled


def test_the_archive_builds_byte_for_byte_the_same_twice(built, tmp_path):
    archive, _ = built
    again = krew.build(VERSION, tmp_path / "out", tmp_path / "gpustack.yaml")
    assert again.read_bytes() == archive.read_bytes()


def test_the_application_runs_on_the_standard_library_alone(built, tmp_path):
    """`python -S`: no site-packages, so neither the project nor any library is installed."""
    archive, _ = built
    app = application(archive, tmp_path)
    done = subprocess.run(
        [sys.executable, "-S", str(app), "cards", "-o", "wide", "-f", str(FIXTURE)],
        capture_output=True,
        text=True,
        timeout=HANG,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    installed = CliRunner().invoke(main, ["cards", "-o", "wide", "-f", str(FIXTURE)])
    assert done.stdout == installed.stdout
    modules = subprocess.run(
        [sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "import functions.kubectl.cli; print(sorted({m.split('.')[0] for m in sys.modules} "
         "- set(sys.stdlib_module_names)))", str(app)],
        capture_output=True, text=True, timeout=HANG, cwd=tmp_path,
    )  # fmt: skip
    assert modules.stdout.strip() == "['__main__', 'click', 'functions', 'yaml']", modules.stderr
