"""`kubectl gpustack` keeps kubectl's habits (functions/kubectl/cli.py, docs/kubectl.md).

- Which cluster: kubectl's precedence, because kubectl reads it — `--kubeconfig`, else
  `$KUBECONFIG`, else `~/.kube/config`, and in-cluster config only where none is found. The
  plugin hands kubectl the flags given and the environment untouched (a stand-in kubectl
  records what it was given); with a real kubectl on PATH, three API servers show which
  kubeconfig won.
- The global flags `--kubeconfig`, `--context` and `-o` go before or after the subcommand.
- A bad kubeconfig, an unknown context, a missing kubectl or a file that is not YAML: one line,
  `Error: ...`, exit status 1, no traceback.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from functions.kubectl.cli import DEVICES_PATH, main
from tests.support.patience import HANG
from tests.support.schemas import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "kubectl" / "devices-after-section-3.yaml"
KUBECTL = shutil.which("kubectl")  # a real one, where this machine has it
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="no kubectl on PATH")


def fixture_objects() -> list[dict]:
    return [doc for doc in yaml.safe_load_all(FIXTURE.read_text()) if doc]


def devices_list(objects: list[dict]) -> str:
    return json.dumps({"apiVersion": "worker.gpustack.ai/v1alpha1", "kind": "DevicesList",
                       "metadata": {}, "items": objects})  # fmt: skip


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), prog_name="kubectl gpustack", env=env)


def from_files(*args: str) -> str:
    result = invoke(*args, "-f", str(FIXTURE))
    assert result.exit_code == 0, result.output
    return result.stdout


# --- a stand-in kubectl ------------------------------------------------------------------------


STAND_IN = """#!{python}
import json, os, sys
with open(os.environ["STAND_IN_LOG"], "a") as log:
    seen = {{k: os.environ.get(k) for k in ("KUBECONFIG", "HOME", "KUBERNETES_SERVICE_HOST")}}
    log.write(json.dumps({{"argv": sys.argv[1:], "env": seen}}) + "\\n")
if os.environ.get("STAND_IN_STDERR"):
    sys.stderr.write(os.environ["STAND_IN_STDERR"])
    sys.exit(int(os.environ.get("STAND_IN_CODE", "1")))
sys.stdout.write(open(os.environ["STAND_IN_LIST"]).read())
"""


@dataclass
class StandIn:
    log: Path

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def stand_in(tmp_path, monkeypatch) -> StandIn:
    """A `kubectl` first on PATH that records its arguments and environment and prints the
    walkthrough's Devices as `kubectl get --raw` would."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(STAND_IN.format(python=sys.executable))
    script.chmod(0o755)
    listed = tmp_path / "devices.json"
    listed.write_text(devices_list(fixture_objects()))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("STAND_IN_LOG", str(tmp_path / "calls"))
    monkeypatch.setenv("STAND_IN_LIST", str(listed))
    monkeypatch.delenv("STAND_IN_STDERR", raising=False)
    return StandIn(tmp_path / "calls")


def raw(*flags: str) -> list[str]:
    return ["get", "--raw", DEVICES_PATH, *flags]


# --- flags before or after the subcommand ------------------------------------------------------


@dataclass
class Placement:
    name: str
    args: list[str]


PLACEMENTS = [
    Placement("after the subcommand", ["cards", "--kubeconfig", "lab.yaml", "--context", "lab",
                                       "-o", "wide"]),
    Placement("before the subcommand", ["--kubeconfig", "lab.yaml", "--context", "lab", "-o",
                                        "wide", "cards"]),
    Placement("some before, some after", ["--context", "lab", "cards", "-o", "wide",
                                          "--kubeconfig", "lab.yaml"]),
    Placement("joined to their values", ["--kubeconfig=lab.yaml", "--context=lab", "-owide",
                                         "cards"]),
]  # fmt: skip


@pytest.mark.parametrize("case", PLACEMENTS, ids=lambda c: c.name)
def test_global_flags_go_before_or_after_the_subcommand(stand_in, case):
    result = invoke(*case.args)
    assert result.exit_code == 0, result.output
    assert [c["argv"] for c in stand_in.calls()] == [
        raw("--kubeconfig", "lab.yaml", "--context", "lab")
    ]
    assert result.stdout == from_files("cards", "-o", "wide")


def test_a_flag_given_before_and_after_the_subcommand_takes_the_later(stand_in):
    result = invoke("--context", "a", "-o", "json", "nodes", "--context", "b", "-o", "wide")
    assert result.exit_code == 0, result.output
    assert [c["argv"] for c in stand_in.calls()] == [raw("--context", "b")]
    assert result.stdout == from_files("nodes", "-o", "wide")


def test_the_help_lists_the_global_flags_before_the_subcommand():
    result = invoke("--help")
    assert result.exit_code == 0
    for flag in ("--kubeconfig", "--context", "-o, --output"):
        assert flag in result.stdout


# --- which cluster -----------------------------------------------------------------------------


def test_without_flags_kubectl_is_left_to_find_the_cluster_its_own_way(stand_in, monkeypatch):
    """No flag of the plugin's own, and $KUBECONFIG (a list), $HOME and the in-cluster
    variables as they were: kubectl's precedence is then kubectl's."""
    monkeypatch.setenv("KUBECONFIG", f"/etc/a.yaml{os.pathsep}/etc/b.yaml")
    monkeypatch.setenv("HOME", "/home/admin")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    result = invoke("nodes")
    assert result.exit_code == 0, result.output
    assert stand_in.calls() == [
        {
            "argv": raw(),
            "env": {
                "KUBECONFIG": f"/etc/a.yaml{os.pathsep}/etc/b.yaml",
                "HOME": "/home/admin",
                "KUBERNETES_SERVICE_HOST": "10.96.0.1",
            },
        }
    ]
    assert result.stdout == from_files("nodes")


def test_files_are_read_without_asking_kubectl(stand_in):
    assert from_files("cards", "--context", "lab")
    assert stand_in.calls() == []


@pytest.fixture
def servers() -> Iterator[dict[str, str]]:
    """Four API servers, each listing one node's Devices: which one answered is which node the
    table shows. By name: the server each kubeconfig or the in-cluster variables point at."""
    objects = fixture_objects()
    started, urls = [], {}
    for name, obj in zip(("flag", "env", "home", "in-cluster"), objects, strict=True):
        body = devices_list([obj]).encode()

        class ApiServer(http.server.BaseHTTPRequestHandler):
            def do_GET(self, body=body):
                found = self.path == DEVICES_PATH
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body if found else b'{"kind":"Status","code":404}')

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ApiServer)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        urls[name] = f"http://127.0.0.1:{server.server_address[1]}"
    yield urls
    for server in started:
        server.shutdown()
        server.server_close()


def kubeconfig(path: Path, server: str, context: str = "lab") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": context, "cluster": {"server": server}}],
        "users": [{"name": context, "user": {}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
    }))  # fmt: skip
    return path


NODE_OF = {"flag": "node-a10g", "env": "node-cpu", "home": "node-t4-a", "in-cluster": "node-t4-b"}


@dataclass
class Precedence:
    name: str
    flag: bool
    env: bool
    home: bool
    wins: str


PRECEDENCE = [
    Precedence("--kubeconfig before $KUBECONFIG and ~/.kube/config", True, True, True, "flag"),
    Precedence("$KUBECONFIG before ~/.kube/config", False, True, True, "env"),
    Precedence("~/.kube/config before the in-cluster config", False, False, True, "home"),
]


@needs_kubectl
@pytest.mark.parametrize("case", PRECEDENCE, ids=lambda c: c.name)
def test_the_cluster_is_the_one_kubectl_would_pick(tmp_path, servers, case):
    """With a real kubectl: kubeconfigs at all three places, each naming its own server, and
    the in-cluster variables naming a fourth (a Pod's, as where the old plugin read it first)."""
    home = tmp_path / "home"
    env = {"HOME": str(home), "KUBERNETES_SERVICE_HOST": "127.0.0.1",
           "KUBERNETES_SERVICE_PORT": servers["in-cluster"].rsplit(":", 1)[1], "KUBECONFIG": ""}  # fmt: skip
    args = ["nodes"]
    if case.home:
        kubeconfig(home / ".kube" / "config", servers["home"])
    if case.env:
        env["KUBECONFIG"] = str(kubeconfig(tmp_path / "env.yaml", servers["env"]))
    if case.flag:
        args += ["--kubeconfig", str(kubeconfig(tmp_path / "flag.yaml", servers["flag"]))]
    result = invoke(*args, env=env)
    assert result.exit_code == 0, result.output
    assert [line.split()[0] for line in result.stdout.splitlines()[1:]] == [NODE_OF[case.wins]]


@needs_kubectl
def test_kubeconfig_lists_its_files_merged_as_kubectl_does(tmp_path, servers):
    """$KUBECONFIG names two files: the first's current-context, the second's cluster."""
    first = tmp_path / "first.yaml"
    first.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config",
                                     "current-context": "lab"}))  # fmt: skip
    second = kubeconfig(tmp_path / "second.yaml", servers["env"])
    env = {"HOME": str(tmp_path), "KUBECONFIG": f"{first}{os.pathsep}{second}"}
    result = invoke("--context", "lab", "nodes", env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1].split()[0] == NODE_OF["env"]


# --- one line when it fails --------------------------------------------------------------------


def test_kubectls_error_is_one_line_in_its_own_words(stand_in, monkeypatch):
    monkeypatch.setenv(
        "STAND_IN_STDERR",
        "E1202 06:43:00.000000 4242 memcache.go:265] couldn't get current server API group list\n"
        'error: error loading config file "/etc/lab.yaml": yaml: line 1: did not find expected '
        "node content\n",
    )
    result = invoke("nodes")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        'Error: error loading config file "/etc/lab.yaml": yaml: line 1: did not find expected '
        "node content\n"
    )


def test_a_cluster_without_the_devices_xrd_is_told_to_apply_it(stand_in, monkeypatch):
    monkeypatch.setenv(
        "STAND_IN_STDERR",
        "Error from server (NotFound): the server could not find the requested resource\n",
    )
    result = invoke("cards")
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: Error from server (NotFound): the server could not find the requested resource; "
        "is the Devices XRD applied (devices.worker.gpustack.ai, compositions/xrds/devices.yaml)?\n"
    )


def test_without_kubectl_it_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    result = invoke("nodes")
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: kubectl not found on PATH: the plugin reads the cluster through it (or read "
        "Devices from files with -f)\n"
    )


def test_a_file_that_is_not_yaml_is_one_line(tmp_path):
    bad = tmp_path / "devices.yaml"
    bad.write_text("kind: Devices\nspec: [unclosed\n")
    result = invoke("nodes", "-f", str(bad))
    assert result.exit_code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"Error: {bad}: while parsing a flow sequence")


@dataclass
class BadConfig:
    name: str
    args: list[str]  # {dir}: a temporary directory
    says: str


BAD_CONFIGS = [
    BadConfig("a kubeconfig that is not YAML", ["--kubeconfig", "{dir}/bad.yaml"],
              'Error: error loading config file "{dir}/bad.yaml": yaml: '),
    BadConfig("a kubeconfig that is not there", ["--kubeconfig", "{dir}/absent.yaml"],
              "Error: stat {dir}/absent.yaml: no such file or directory"),
    BadConfig("a context the kubeconfig lacks", ["--kubeconfig", "{dir}/lab.yaml", "--context",
                                                 "nope"], 'Error: context "nope" does not exist'),
]  # fmt: skip


@needs_kubectl
@pytest.mark.parametrize("case", BAD_CONFIGS, ids=lambda c: c.name)
def test_a_bad_kubeconfig_is_one_line_and_no_traceback(tmp_path, case):
    """The console script itself, with a real kubectl: what an admin sees."""
    (tmp_path / "bad.yaml").write_text("clusters: [\n")
    kubeconfig(tmp_path / "lab.yaml", "http://127.0.0.1:1")
    script = Path(sys.executable).parent / "kubectl-gpustack"
    args = [arg.replace("{dir}", str(tmp_path)) for arg in case.args]
    done = subprocess.run(
        [str(script), "nodes", *args],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)},
        timeout=HANG,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(case.says.replace("{dir}", str(tmp_path))), line
