"""docs/gpuclass.md's render commands run verbatim, and the seed's offers are one set of files.

The seed's three class examples and the worker pool render with `gpustack-fn render` as the doc
shows; `examples/gpuclass/classes.yaml` (for `kubectl apply`) is exactly the three one-offer
files `render` takes (it renders the first document of a file).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from tests.support.patience import HANG
from tests.support.schemas import ROOT

DOC = ROOT / "docs" / "gpuclass.md"
FENCE = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)
OFFERS = ("whole-gpu", "licensed-vgpu", "byol-vgpu")


def blocks() -> list[str]:
    return [textwrap.dedent(match[1]) for match in FENCE.finditer(DOC.read_text())]


def test_the_doc_renders_the_three_offers_and_the_worker_pool():
    (block,) = blocks()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        # the checkout's own package, also where the tests run from a copy of it
        "PYTHONPATH": str(ROOT),
    }
    venv = Path(sys.executable).parent.parent
    script = block.replace(".venv/bin/", f"{venv}/bin/")
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stream = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    classes = [d for d in stream if d["kind"] == "GPUClass"]
    assert [c["metadata"]["name"] for c in classes] == [f"example-{o}" for o in OFFERS]
    missing = {
        c["metadata"]["name"]: next(
            x["status"] for x in c["status"]["conditions"] if x["type"] == "LicenseSecretMissing"
        )
        for c in classes
    }
    assert missing == {
        "example-whole-gpu": "False",
        "example-licensed-vgpu": "True",
        "example-byol-vgpu": "False",
    }
    free = {c["metadata"]["name"]: (c["status"]["free"], c["status"]["nodes"]) for c in classes}
    assert free == {
        "example-whole-gpu": (3, 3),
        "example-licensed-vgpu": (8, 3),
        "example-byol-vgpu": (0, 3),
    }
    vmis = [d["metadata"]["name"] for d in stream if d["kind"] == "VirtualMachineInstance"]
    assert vmis == ["gpu-workers-0", "gpu-workers-1", "gpu-workers-2"]


def test_classes_yaml_is_the_three_offer_files():
    def documents(path: Path) -> list[dict]:
        return [d for d in yaml.safe_load_all(path.read_text()) if d]

    examples = ROOT / "examples" / "gpuclass"
    offers = [doc for offer in OFFERS for doc in documents(examples / f"{offer}.yaml")]
    assert documents(examples / "classes.yaml") == offers
