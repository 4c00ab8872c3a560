"""The krew release of `kubectl gpustack`: one archive for every platform, and its manifest.

`make package` runs `python -m functions.kubectl.krew`, which writes:

- `<output>/kubectl-gpustack-<version>.tar.gz`, holding one executable, `kubectl-gpustack`: a
  Python zip application (PEP 441, `#!/usr/bin/env python3`) of the plugin (`functions/kubectl/`,
  `functions/core/`) and the two libraries it imports, click and PyYAML, as installed where it
  is built (pyproject.toml pins them), with their licenses under `licenses/`. Nothing in it is
  compiled (PyYAML runs without its C extension), so the one archive serves Linux and macOS on
  every architecture; what it needs there is python3 (3.11 or newer) and kubectl.
- the krew manifest (`plugins/gpustack.yaml`; krew's `Plugin`, as its `pkg/index` types name
  the fields and `internal/index/validation` checks them), naming the archive's release URI
  and its sha256.

The archive is reproducible: entries sorted, every timestamp and owner fixed, so its checksum
depends only on the sources and the libraries (and zlib) that went in.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.metadata
import io
import re
import tarfile
import zipfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
NAME = "gpustack"
BIN = f"kubectl-{NAME}"
HOMEPAGE = "https://github.com/gpustack/function-gpustack"
RELEASES = f"{HOMEPAGE}/releases/download"
API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"  # krew's pkg/constants
PLATFORMS = ("darwin", "linux")  # krew runs only .exe entrypoints on Windows
SEMVER = re.compile(r"^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")
EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
SHEBANG = b"#!/usr/bin/env python3\n"
# The plugin's own sources; krew.py builds the archive and is not in it.
SOURCES = ("functions/__init__.py", "functions/kubectl", "functions/core")
LEFT_OUT = ("functions/kubectl/krew.py",)
LIBRARIES = {"click": "click", "PyYAML": "yaml"}  # distribution → the package it installs

MAIN = """\
import sys

if sys.version_info < (3, 11):
    sys.exit("Error: kubectl gpustack needs Python 3.11 or newer as python3, found %d.%d"
             % sys.version_info[:2])

from functions.kubectl.cli import run

run()
"""

DESCRIPTION = """\
Shows a gpustack cluster's GPUs as the gpustack functions account for them: each card's mode
(exclusive, shared, sliced, MIG-partitioned), who holds it and what is left free, and each
node's free cards, shares, slices and MIG partitions per GPU model. Reads the Devices objects
of function-gpustack through kubectl, or from files.
"""

CAVEATS = """\
Needs python3 (3.11 or newer) on PATH. The plugin reads the cluster through kubectl, with
kubectl's kubeconfig, context and credentials.
"""


def entries() -> dict[str, bytes]:
    """Every file of the zip application, by its name in the zip."""
    found = {"__main__.py": MAIN.encode()}
    for source in SOURCES:
        path = ROOT / source
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            name = file.relative_to(ROOT).as_posix()
            if name not in LEFT_OUT:
                found[name] = file.read_bytes()
    for distribution, package in LIBRARIES.items():
        found |= library(distribution, package)
    return found


def library(distribution: str, package: str) -> dict[str, bytes]:
    """A library's Python sources (no compiled modules) and its license files."""
    dist = importlib.metadata.distribution(distribution)
    found = {}
    for file in dist.files or ():
        name = file.as_posix()
        if name.startswith(f"{package}/") and name.endswith(".py"):
            found[name] = file.read_binary()
        elif ".dist-info/" in name and Path(name).name.upper().startswith(("LICENSE", "COPYING")):
            found[f"licenses/{distribution}/{Path(name).name}"] = file.read_binary()
    if f"{package}/__init__.py" not in found:
        raise SystemExit(f"{distribution}: no {package}/__init__.py among its installed files")
    return found


def zip_application(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    out.write(SHEBANG)
    with zipfile.ZipFile(out, "w") as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name], compresslevel=9)
    return out.getvalue()


def tar_gz(name: str, data: bytes) -> bytes:
    """A gzipped tar of one executable, with nothing of the machine that built it."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def archive_name(version: str) -> str:
    return f"{BIN}-{version}.tar.gz"


def manifest(version: str, sha256: str, uri: str) -> dict:
    """The krew Plugin: one platform entry, Linux and macOS, any architecture."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Plugin",
        "metadata": {"name": NAME},
        "spec": {
            "version": version,
            "homepage": HOMEPAGE,
            "shortDescription": "Show the GPUs of a gpustack cluster, card by card",
            "description": DESCRIPTION,
            "caveats": CAVEATS,
            "platforms": [
                {
                    "selector": {
                        "matchExpressions": [
                            {"key": "os", "operator": "In", "values": list(PLATFORMS)}
                        ]
                    },
                    "uri": uri,
                    "sha256": sha256,
                    "bin": BIN,
                }
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks, as krew-index's manifests write them."""


_Dumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    ),
)


def build(version: str, output: Path, manifest_path: Path, releases: str = RELEASES) -> Path:
    """Write the archive into `output` and its manifest to `manifest_path`; the archive."""
    if not SEMVER.match(version):
        raise SystemExit(f"version {version!r}: krew needs a semantic version with a v, as v1.2.3")
    archive = output / archive_name(version)
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(tar_gz(BIN, zip_application(entries())))
    sha256 = hashlib.sha256(archive.read_bytes()).hexdigest()
    uri = f"{releases}/{version}/{archive.name}"
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(
        f"# Written by `make package` (functions/kubectl/krew.py) for {archive.name}: do not edit.\n"
        + yaml.dump(manifest(version, sha256, uri), Dumper=_Dumper, sort_keys=False, width=100)
    )
    return archive


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m functions.kubectl.krew", description=__doc__)
    parser.add_argument("--version", required=True, help="the release, as v1.2.3")
    parser.add_argument("--output", type=Path, required=True, help="where the archive goes")
    parser.add_argument("--manifest", type=Path, required=True, help="the krew manifest to write")
    parser.add_argument("--releases", default=RELEASES, help="the URL releases are served under")
    args = parser.parse_args(argv)
    archive = build(args.version, args.output, args.manifest, args.releases)
    print(f"krew:  {archive} and {args.manifest}")


if __name__ == "__main__":
    main()
