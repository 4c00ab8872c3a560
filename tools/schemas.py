"""`make schemas`: fetch the pinned upstream schemas into .schemas-cache (needs internet).

Reads the download table of tools/SOURCES.md (path, URL and sha256 per file) and verifies every
file; a path may name a subfolder (`crossplane-1.x/`, `gpu-operator/`), laid out as in
../shared/schemas. Tests look in $GPUSTACK_SCHEMAS, then ../shared/schemas, then .schemas-cache.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".schemas-cache"
SOURCES = ROOT / "tools" / "SOURCES.md"
ROW = re.compile(
    r"^\| `(?P<file>[^`]+)` \| (?P<url>https://\S+)(?P<note>[^|]*)\| `(?P<sha>[0-9a-f]{64})` \|$"
)


def extract_nodefeature(text: str) -> bytes:
    """The one YAML document of nfd-api-crds.yaml that defines NodeFeature."""
    documents = text.split("\n---\n")
    chosen = next(d for d in documents if "name: nodefeatures.nfd.k8s-sigs.io" in d)
    return ("---\n" + chosen.strip("-\n") + "\n").encode()


def extract_kubevirt(text: str) -> bytes:
    """swagger/info plus the definitions reachable from the VMI, KubeVirt and VM roots."""
    swagger = json.loads(text)
    definitions = swagger["definitions"]
    wanted, queue = set(), ["v1.VirtualMachineInstance", "v1.KubeVirt", "v1.VirtualMachine"]
    while queue:
        name = queue.pop()
        if name in wanted:
            continue
        wanted.add(name)
        queue += re.findall(r'"#/definitions/([^"]+)"', json.dumps(definitions[name]))
    out = {
        "definitions": {k: definitions[k] for k in sorted(wanted)},
        "info": swagger["info"],
        "swagger": swagger["swagger"],
    }
    return json.dumps(out, indent=2, sort_keys=True).encode()


EXTRACT = {
    "nfd_nodefeatures.nfd.k8s-sigs.io.yaml": extract_nodefeature,
    "kubevirt_v1.9.0_vmi_kubevirt_definitions.json": extract_kubevirt,
}


def rows() -> list[re.Match[str]]:
    """The download table's rows, in order."""
    return [m for line in SOURCES.read_text().splitlines() if (m := ROW.match(line))]


def main() -> int:
    CACHE.mkdir(exist_ok=True)
    for row in rows():
        try:
            data = urllib.request.urlopen(row["url"], timeout=60).read()
        except OSError as error:  # URLError and timeouts are OSErrors
            print(f"{row['file']}: cannot fetch {row['url']}: {error}", file=sys.stderr)
            return 1
        if row["file"] in EXTRACT:
            data = EXTRACT[row["file"]](data.decode())
        digest = hashlib.sha256(data).hexdigest()
        if digest != row["sha"] and row["file"] not in EXTRACT:
            print(
                f"{row['file']}: sha256 {digest} does not match the pinned {row['sha']}",
                file=sys.stderr,
            )
            return 1
        if digest != row["sha"]:  # an extraction need not be byte-identical to ours
            print(
                f"{row['file']}: extracted; sha256 differs from the reference copy", file=sys.stderr
            )
        (CACHE / row["file"]).parent.mkdir(parents=True, exist_ok=True)
        (CACHE / row["file"]).write_bytes(data)
        print(f"fetched {row['file']}")
    (CACHE / "SOURCES.md").write_text(SOURCES.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
