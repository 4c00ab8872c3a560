"""What we ship, as an installer meets it: the Function package's contents, one package reference
across the manifests, the image's Python (the product, no simulator), the agent's DaemonSets, the
runtime config and monitors, the CI workflow's layout, and `make package` building the krew plugin
and saying what it lacks (docs/packaging.md, docs/operations.md).

Schema validation of these files is tests/test_api.py's; this file checks what schemas cannot:
what belongs in the xpkg, and that the pieces fit each other. `make package` runs it first.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from functions import metrics, server
from functions.handlers import HANDLERS
from tests.support.patience import HANG
from tests.support.schemas import ROOT, documents

PACKAGE = ROOT / "package"
AGENT = ROOT / "compositions" / "agent"
INSTALL = ROOT / "examples" / "install"
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"
CROSSPLANE_METRICS_PORT = 8080  # the `metrics` port Crossplane declares on function pods
VERSION = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
PACKAGE_REF = f"ghcr.io/gpustack/function-gpustack:v{VERSION}"


def one(path: Path) -> dict:
    [doc] = documents(path)
    return doc


# --- the Function package -----------------------------------------------------------------------


def test_the_function_package_holds_its_meta_and_the_input_crd_only():
    """A Function xpkg may carry one meta.pkg Function plus CRDs (schema only); the XRDs and
    Compositions are applied beside it (docs/packaging.md says why)."""
    files = sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*") if p.is_file())
    assert files == ["crossplane.yaml", "input/fn.gpustack.ai_inputs.yaml"]
    kinds = [
        (doc["apiVersion"], doc["kind"])
        for path in PACKAGE.rglob("*.yaml")
        for doc in documents(path)
    ]
    assert sorted(kinds) == [
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        ("meta.pkg.crossplane.io/v1", "Function"),
    ]


def test_the_input_crd_is_the_input_the_server_reads_and_names_every_served_handler():
    crd = one(PACKAGE / "input" / "fn.gpustack.ai_inputs.yaml")
    [version] = crd["spec"]["versions"]
    assert f"{crd['spec']['group']}/{version['name']}" == server.INPUT_API_VERSION
    assert crd["spec"]["names"]["kind"] == server.INPUT_KIND
    handler = version["schema"]["openAPIV3Schema"]["properties"]["handler"]
    assert sorted(handler["enum"]) == sorted(HANDLERS)


def test_the_package_is_named_as_the_function_the_compositions_reference():
    meta = one(PACKAGE / "crossplane.yaml")
    assert meta["metadata"]["name"] == one(INSTALL / "function.yaml")["metadata"]["name"]
    assert meta["metadata"]["name"] == "function-gpustack"


def test_one_package_reference_everywhere_at_the_projects_version():
    makefile = (ROOT / "Makefile").read_text()
    image = re.search(r"^IMAGE\s*\?=\s*(\S+)", makefile, re.M)[1]
    references = {
        "Makefile IMAGE:VERSION": f"{image}:v{VERSION}",
        "examples/install/function.yaml": one(INSTALL / "function.yaml")["spec"]["package"],
        "examples/walkthrough/functions.yaml": one(
            ROOT / "examples" / "walkthrough" / "functions.yaml"
        )["spec"]["package"],
    }
    for path in sorted(AGENT.glob("daemonset-*.yaml")):
        [container] = one(path)["spec"]["template"]["spec"]["containers"]
        references[f"compositions/agent/{path.name}"] = container["image"]
    assert references == dict.fromkeys(references, PACKAGE_REF)


# --- the image's Python -------------------------------------------------------------------------

# Left out of the copy the wheel is built from.
NO_BUILD_READS = (".git", ".venv", ".*_cache", ".hypothesis", ".schemas-cache", "__pycache__")
BUILDS_WRITE = ("_output", "build", "dist", "*.egg-info")
PIP_WHEEL = "pip wheel --no-deps --no-build-isolation --no-index --disable-pip-version-check -q"


def test_the_image_installs_the_product_alone():
    """The Dockerfile installs pip, then `.`: the product; never the simulator (simulator/)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.findall(r"pip install (?:--[\w-]+ )*(\S+)", dockerfile) == ["pip", "."]
    assert "simulator" not in dockerfile


def test_the_products_wheel_carries_no_simulator(tmp_path):
    """The wheel the image's `pip install .` builds, from a copy of this checkout (so no build
    output lands in it), with the build-system's backend and nothing from an index: the package
    `functions` and its metadata, no file of the simulator."""
    source, wheels = tmp_path / "source", tmp_path / "wheels"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NO_BUILD_READS, *BUILDS_WRITE))
    build = [sys.executable, "-m", *PIP_WHEEL.split(), str(source), "-w", str(wheels)]
    run = subprocess.run(build, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    [wheel] = wheels.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {
        "functions",
        f"function_gpustack-{VERSION}.dist-info",
    }
    assert [n for n in names if "gpustack_sim" in n or n.startswith("functions/simulate")] == []
    assert "functions/server.py" in names and "functions/cli.py" in names


def test_the_wheel_is_built_with_the_build_systems_backend():
    """Built without isolation (offline), so with the setuptools the test extra installs: the
    one the build-system names."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    backend = f"setuptools=={importlib.metadata.version('setuptools')}"
    assert pyproject["build-system"]["requires"] == [backend]
    assert backend in pyproject["project"]["optional-dependencies"]["test"]


# --- the agent's DaemonSets ---------------------------------------------------------------------


# Which nodes each DaemonSet selects, and its runtime class: tests/test_install.py.


def daemonsets() -> list[dict]:
    return [one(path) for path in sorted(AGENT.glob("daemonset-*.yaml"))]


def test_the_agent_namespace_is_shipped_and_everything_lives_in_it():
    namespace = one(AGENT / "namespace.yaml")
    assert namespace["kind"] == "Namespace"
    namespaced = [*daemonsets(), one(AGENT / "serviceaccount.yaml")]
    assert {obj["metadata"]["namespace"] for obj in namespaced} == {namespace["metadata"]["name"]}


@pytest.mark.parametrize("daemonset", daemonsets(), ids=lambda d: d["metadata"]["name"])
def test_the_agent_container_has_resources_probes_and_the_metrics_port(daemonset, monkeypatch):
    from functions.cli import main

    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    assert set(container["resources"]) == {"requests", "limits"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # The args are the real CLI's: parse them as `gpustack-fn agent` would.
    assert container["command"] == ["gpustack-fn", "agent"]
    monkeypatch.setenv("NODE_NAME", "node-a")
    parsed = main.commands["agent"].make_context("agent", list(container["args"])).params
    assert metrics.parse_address(parsed["metrics_address"])[1] == ports["metrics"]
    probes = {
        kind: (container[kind]["httpGet"]["path"], container[kind]["httpGet"]["port"])
        for kind in ("livenessProbe", "readinessProbe")
    }
    assert probes == {
        "livenessProbe": ("/healthz", "metrics"),
        "readinessProbe": ("/readyz", "metrics"),
    }


# --- the function's runtime config and the monitors ---------------------------------------------


def runtime_container() -> dict:
    drc = one(INSTALL / "deploymentruntimeconfig.yaml")
    [container] = drc["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
    return container


def test_the_runtime_config_turns_metrics_on_at_crossplanes_metrics_port():
    container = runtime_container()
    assert container["name"] == "package-runtime"  # the only name Crossplane merges into
    env = {e["name"]: e["value"] for e in container["env"]}
    assert metrics.parse_address(env["METRICS_ADDRESS"])[1] == CROSSPLANE_METRICS_PORT
    assert container["livenessProbe"]["httpGet"] == {
        "path": "/healthz",
        "port": CROSSPLANE_METRICS_PORT,
    }
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/readyz",  # not ready while draining (tests/test_shutdown.py)
        "port": CROSSPLANE_METRICS_PORT,
    }
    function = one(INSTALL / "function.yaml")
    drc = one(INSTALL / "deploymentruntimeconfig.yaml")
    assert function["spec"]["runtimeConfigRef"]["name"] == drc["metadata"]["name"]


def test_the_pod_monitors_select_the_function_and_agent_pods_by_their_metrics_port():
    monitors = {doc["metadata"]["name"]: doc for doc in documents(INSTALL / "podmonitors.yml")}
    function = monitors["function-gpustack"]["spec"]
    assert function["selector"]["matchLabels"] == {
        "pkg.crossplane.io/function": one(INSTALL / "function.yaml")["metadata"]["name"]
    }
    agent = monitors["gpustack-agent"]
    for daemonset in daemonsets():
        template = daemonset["spec"]["template"]
        assert agent["metadata"]["namespace"] == daemonset["metadata"]["namespace"]
        assert (
            agent["spec"]["selector"]["matchLabels"].items()
            <= template["metadata"]["labels"].items()
        )
        [container] = template["spec"]["containers"]
        assert {e["port"] for e in agent["spec"]["podMetricsEndpoints"]} <= {
            p["name"] for p in container["ports"]
        }
    assert {e["port"] for e in function["podMetricsEndpoints"]} == {"metrics"}


# --- CI -----------------------------------------------------------------------------------------


def test_the_workflow_has_the_function_templates_layout():
    workflow = yaml.safe_load(WORKFLOW.read_text())
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert triggers["push"]["tags"] == ["v*"] and "pull_request" in triggers
    jobs = workflow["jobs"]
    assert list(jobs) == ["lint", "unit-test", "build", "push"]
    assert [s["run"] for s in jobs["lint"]["steps"] if "run" in s] == ["make lint"]
    assert "make test" in [s.get("run") for s in jobs["unit-test"]["steps"]]
    assert jobs["build"]["strategy"]["matrix"]["arch"] == ["amd64", "arm64"]
    build = " ".join(s.get("run", "") for s in jobs["build"]["steps"])
    assert "xpkg build" in build and "--package-root=package/" in build
    assert "--embed-runtime-image-tarball=" in build
    assert jobs["push"]["needs"] == ["lint", "unit-test", "build"]
    assert jobs["push"]["if"] == "github.ref_type == 'tag' || inputs.version != ''"


# --- make package -------------------------------------------------------------------------------


@dataclass
class Tools:
    name: str
    docker: str | None  # the fake docker's script body; None: not on PATH
    crossplane: bool
    code: int
    says: list[str]


NO_ENGINE = 'case "$1" in --version) echo "Docker version 28.2.2";; *) exit 1;; esac'
WORKS = 'echo "$0 $*" >> "$LOG"'
TOOLS = [
    Tools(
        "nothing on PATH",
        None,
        False,
        2,
        [
            "docker: not on PATH",
            "the crossplane CLI: not on PATH (docs/packaging.md says how to install it)",
        ],
    ),
    Tools(
        "docker answers but no engine runs, and no crossplane CLI (this machine)",
        NO_ENGINE,
        False,
        2,
        [
            "a docker engine: 'docker info' cannot reach one (is the daemon running?)",
            "docker buildx: 'docker buildx version' failed",
            "the crossplane CLI: not on PATH (docs/packaging.md says how to install it)",
        ],
    ),
    Tools("everything present", WORKS, True, 0, []),
]


@pytest.mark.parametrize("case", TOOLS, ids=lambda c: c.name)
def test_make_package_validates_then_says_what_is_missing(case, tmp_path):
    bin_dir, output, log = tmp_path / "bin", tmp_path / "out", tmp_path / "calls"
    bin_dir.mkdir()
    if case.docker is not None:
        script(bin_dir / "docker", case.docker)
    if case.crossplane:
        script(
            bin_dir / "crossplane",
            WORKS + '\nfor a; do case "$a" in --package-file=*) touch "${a#*=}";; esac; done',
        )
    manifest = tmp_path / "plugins" / "gpustack.yaml"
    result = subprocess.run(
        # -o: never reinstall the venv from here; VALIDATE: this test is the validation.
        [
            *["make", "-s", "-o", ".venv/.installed", "package", "VALIDATE=true"],
            *[f"OUTPUT={output}", f"KREW_MANIFEST={manifest}"],
        ],
        cwd=ROOT,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "LOG": str(log), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=HANG,
    )
    assert result.returncode == case.code, result.stderr
    # The krew plugin needs none of the tools: its manifest names the archive's checksum.
    archive = output / f"kubectl-gpustack-v{VERSION}.tar.gz"
    [platform] = yaml.safe_load(manifest.read_text())["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    if case.says:
        missing = result.stderr.split("missing:\n", 1)[1].splitlines()
        assert [line.strip() for line in missing if line.startswith("  ")] == case.says
    else:
        calls = [line.replace(str(bin_dir) + "/", "") for line in log.read_text().splitlines()]
        image = f"ghcr.io/gpustack/function-gpustack-runtime:v{VERSION}"
        assert [c for c in calls if " build " in c] == [
            line
            for arch in ("amd64", "arm64")
            for line in (
                f"docker buildx build --platform linux/{arch} --load -t {image}-{arch} .",
                "crossplane xpkg build --package-root=package --examples-root=examples/install "
                f"--embed-runtime-image={image}-{arch} "
                f"--package-file={output}/function-gpustack-v{VERSION}-{arch}.xpkg",
            )
        ]
        assert f"xpkg push --package-files={output}/function-gpustack-v{VERSION}-amd64.xpkg," in (
            result.stdout
        )


def script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    os.chmod(path, 0o755)
