"""`python -m e2e render`: every example through the real `crossplane render` beside
`gpustack-fn render`, and `crossplane beta validate` on what the real one printed.

Both renderers call one function server (`function --insecure`) on loopback: `crossplane
render` through the functions file's Development runtime (its target rewritten to the
server's port), `gpustack-fn render` through `--function-address`. The two streams must be
the same objects; `validate` then checks them against our XRDs and Kueue's CRDs (the
Kubernetes kinds have no CRD to validate against: `crossplane beta validate` skips them and
the unit tests check them with kubernetes-validate).
"""

from __future__ import annotations

import contextlib
import difflib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import yaml

from e2e.binaries import binary, module_dir, versions
from e2e.cluster import free_port

REPOSITORY = Path(__file__).resolve().parent.parent
EXAMPLES = REPOSITORY / "examples"
PIPELINES = REPOSITORY / "compositions" / "pipelines"
WALKTHROUGH = EXAMPLES / "walkthrough"
GPUCLASS = EXAMPLES / "gpuclass"
# The render annotations of the functions files: crossplane render reads them.
TARGET = "render.crossplane.io/runtime-development-target"


@dataclass(frozen=True)
class Case:
    """One `render XR COMPOSITION FUNCTIONS -e REQUIRED...` of an example."""

    xr: Path
    pipeline: str
    functions: Path
    required: tuple[Path, ...] = ()

    @property
    def name(self) -> str:
        return str(self.xr.relative_to(EXAMPLES))


CASES = (
    Case(WALKTHROUGH / "catalog.yaml", "catalog", WALKTHROUGH / "functions.yaml",
         (WALKTHROUGH / "summaries.yaml",)),
    Case(WALKTHROUGH / "instancetype-a10g-12c128g.yaml", "instancetype",
         WALKTHROUGH / "functions.yaml", (WALKTHROUGH / "summaries.yaml",)),
    Case(WALKTHROUGH / "instance-sliced-demo.yaml", "instance", WALKTHROUGH / "functions.yaml"),
    Case(WALKTHROUGH / "instancepersistentvolume-datasets.yaml", "instancepersistentvolume",
         WALKTHROUGH / "functions.yaml", (WALKTHROUGH / "storage.yaml",)),
    Case(EXAMPLES / "device-plugins" / "catalog-nvidia.yaml", "catalog",
         WALKTHROUGH / "functions.yaml", (EXAMPLES / "device-plugins" / "devices.yaml",)),
    Case(EXAMPLES / "device-plugins" / "catalog-hami.yaml", "catalog",
         WALKTHROUGH / "functions.yaml", (EXAMPLES / "device-plugins" / "devices.yaml",)),
    Case(EXAMPLES / "device-plugins" / "catalog-dra.yaml", "catalog",
         WALKTHROUGH / "functions.yaml", (EXAMPLES / "device-plugins" / "devices.yaml",)),
    *(
        Case(GPUCLASS / name, "gpuclass", GPUCLASS / "functions.yaml",
             (GPUCLASS / "classes.yaml", GPUCLASS / "cluster.yaml",
              GPUCLASS / "vm-node-states.yaml"))
        for name in ("whole-gpu.yaml", "licensed-vgpu.yaml", "byol-vgpu.yaml")
    ),
    Case(EXAMPLES / "kubernetesnodes" / "pool.yaml", "kubernetesnodes",
         GPUCLASS / "functions.yaml",
         (EXAMPLES / "kubernetesnodes" / "instancetype.yaml", GPUCLASS / "cluster.yaml",
          GPUCLASS / "classes.yaml")),
)  # fmt: skip


def objects(stream: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(stream) if d]


def canonical(stream: str) -> str:
    """A stream as sorted YAML documents: both renderers' objects, compared as data."""
    return yaml.safe_dump_all(objects(stream), sort_keys=True)


def functions_at(case: Case, address: str, folder: Path) -> Path:
    """The case's functions file with every Development target pointed at `address`."""
    functions = objects(case.functions.read_text())
    for function in functions:
        annotations = function.setdefault("metadata", {}).setdefault("annotations", {})
        annotations[TARGET] = address
    path = folder / "functions.yaml"
    path.write_text(yaml.safe_dump_all(functions))
    return path


def required_folder(case: Case, folder: Path) -> Path | None:
    """`crossplane render -e` takes one file or folder: the case's files, copied into one."""
    if not case.required:
        return None
    required = folder / "required"
    required.mkdir()
    for index, path in enumerate(case.required):
        shutil.copy(path, required / f"{index:02d}-{path.name}")
    return required


def run(args: list[str]) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip()
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}:\n{said}")
    return done.stdout


def render_both(case: Case, address: str, folder: Path) -> tuple[str, str]:
    functions = functions_at(case, address, folder)
    composition = str(PIPELINES / f"{case.pipeline}.yaml")
    required = required_folder(case, folder)
    real = [str(binary("crank")), "render", str(case.xr), composition, str(functions), "-r", "-x"]
    ours = [
        str(Path(sys.executable).parent / "gpustack-fn"), "render", str(case.xr), composition,
        str(functions), "-r", "-x", "--function-address", address,
    ]  # fmt: skip
    if required is not None:
        real += ["-e", str(required)]
        for path in case.required:
            ours += ["-e", str(path)]
    return run(real), run(ours)


def extensions(folder: Path) -> Path:
    """What `crossplane beta validate` validates against: our XRDs and Kueue's CRDs."""
    found = folder / "extensions"
    found.mkdir()
    for xrd in sorted((REPOSITORY / "compositions" / "xrds").glob("*.yaml")):
        shutil.copy(xrd, found / f"xrd-{xrd.name}")
    kueue = module_dir("sigs.k8s.io/kueue", versions()["KUEUE"])
    for crd in sorted((kueue / "config" / "components" / "crd" / "bases").glob("*.yaml")):
        shutil.copy(crd, found / crd.name)
    return found


def validate_cache(folder: Path) -> Path:
    """`crossplane beta validate` reads Crossplane's own CRDs from the Crossplane package of its
    version, which it would download; its cache, filled from the same CRDs in the module's
    source, holds them without a registry."""
    cache = folder / "validate-cache"
    version = versions()["CROSSPLANE"]
    image = cache / "xpkg.crossplane.io" / "crossplane" / f"crossplane@{version}"
    image.mkdir(parents=True)
    crds = module_dir("github.com/crossplane/crossplane/v2", version) / "cluster" / "crds"
    (image / "package.yaml").write_text(
        "".join(path.read_text() + "\n---\n" for path in sorted(crds.glob("*.yaml")))
    )
    return cache


def validate(rendered: str, against: Path, folder: Path, cache: Path) -> str:
    path = folder / "rendered.yaml"
    # Results are render's own kind, not a resource a cluster would hold
    path.write_text(yaml.safe_dump_all([o for o in objects(rendered) if o.get("kind") != "Result"]))
    return run(
        [str(binary("crank")), "beta", "validate", str(against), str(path),
         f"--cache-dir={cache}"]
    )  # fmt: skip


@contextlib.contextmanager
def function_server(folder: Path) -> Iterator[str]:
    """`function --insecure` on a free loopback port, once it answers."""
    address = f"127.0.0.1:{free_port()}"
    with (folder / "function.log").open("wb") as log:
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "function"), "--insecure", "--address", address],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            with grpc.insecure_channel(address) as channel:
                grpc.channel_ready_future(channel).result(timeout=120)
            yield address
        finally:
            server.terminate()
            server.wait(timeout=60)


def main() -> int:
    failed = 0
    with tempfile.TemporaryDirectory(prefix="gpustack-e2e-render-") as scratch:
        root = Path(scratch)
        against, cache = extensions(root), validate_cache(root)
        with function_server(root) as address:
            for index, case in enumerate(CASES):
                folder = root / f"case-{index}"
                folder.mkdir()
                real, ours = render_both(case, address, folder)
                if canonical(real) != canonical(ours):
                    failed += 1
                    diff = difflib.unified_diff(
                        canonical(real).splitlines(), canonical(ours).splitlines(),
                        "crossplane render", "gpustack-fn render", lineterm="",
                    )  # fmt: skip
                    print(f"# {case.name}: the renders differ\n" + "\n".join(diff))
                    continue
                said = validate(real, against, folder, cache)
                summary = [line for line in said.splitlines() if not line.startswith("[✓]")]
                print(f"# {case.name}: both renders the same {len(objects(real))} objects; "
                      f"crossplane beta validate: {'; '.join(summary)}")  # fmt: skip
    return 1 if failed else 0
