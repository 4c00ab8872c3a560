"""What a newcomer gets wrong is answered as kube-apiserver and kubectl answer it, in one line.

- A typo'd field is refused, not pruned: the objects a scenario applies go to the simulated API
  server with kubectl's Strict field validation, in kube-apiserver's own words (its decoder's:
  `... cannot be handled as a Instance: strict decoding error: unknown field "spec.x"`); under
  Warn, the API's default, the same fields are pruned with its Warning.
- A scenario key the format does not know (`stpes:`, `shwo:`) is refused, naming it and the
  keys it takes.
- Every bad input of `gpustack-fn simulate`, `render` and `demo` ends in one `Error:` line
  naming the file and line, and what to do; exit status 2; a traceback only with `--debug`.
- Where the simulator is not installed (the function's image), `simulate` says in one line how
  to install it, and the other commands answer bad input as before.
- The function server (`function`, `gpustack-fn serve`), the node agent (`gpustack-fn agent`)
  and `kubectl gpustack` answer theirs the same way, run as the console scripts they are: an
  address they cannot listen at, a TLS folder that is not there or lacks a file, no kubeconfig
  and no in-cluster config, a file that is not YAML — one `Error:` line on stderr naming the
  flag, or the file and line; exit status 2 (1 for the kubectl plugin, kubectl's own); and the
  process exits, with the workers it had started (a hang fails the test, after `HANG`).
"""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from functions import documents
from functions.cli import SIMULATOR_MISSING, main
from gpustack_sim.apiserver import BAD_REQUEST, STRICT, ApiServer, Refused
from gpustack_sim.store import Store
from tests.support.patience import exited
from tests.support.schemas import ROOT

WALKTHROUGH = ROOT / "examples" / "walkthrough"
PIPELINES = ROOT / "compositions" / "pipelines"
TYPO = "acceleratorSliceMemoryPercentage"  # the walkthrough's field is "acceleratorSliced…"


def sliced_demo(**resources: object) -> dict:
    obj = yaml.safe_load((WALKTHROUGH / "instance-sliced-demo.yaml").read_text())
    obj["spec"]["resources"].update(resources)
    return obj


def run(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def one_error_line(output: str) -> str:
    """The output is one `Error:` line and nothing else (no traceback)."""
    lines = output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), output
    assert "Traceback" not in output
    return lines[0]


# --- the API server's field validation -----------------------------------------------------------


def test_strict_field_validation_refuses_a_typod_field_in_kube_apiservers_words():
    api = ApiServer(Store())
    typo = sliced_demo(**{TYPO: 20})
    del typo["spec"]["resources"]["acceleratorSlicedMemoryPercentage"]
    with pytest.raises(Refused) as refused:
        api.create(typo, field_validation=STRICT)
    assert refused.value.reason == BAD_REQUEST
    assert str(refused.value) == (
        'Instance in version "v1alpha1" cannot be handled as a Instance: strict decoding error: '
        f'unknown field "spec.resources.{TYPO}"'
    )
    assert api.store.get("Instance", "sliced-demo", "default") is None


def test_duplicates_come_first_then_objectmeta_then_the_schemas_fields_sorted():
    """As apiextensions-apiserver lists them: the decoder's duplicates, ObjectMeta's unknown
    fields, then the pruned paths, sorted."""
    api = ApiServer(Store())
    obj = sliced_demo(zeta=1)
    obj["spec"]["alpha"] = 1
    obj["metadata"]["lables"] = {"a": "b"}
    with pytest.raises(Refused) as refused:
        api.create(obj, field_validation=STRICT, duplicates=["spec.image"])
    assert str(refused.value).endswith(
        'strict decoding error: duplicate field "spec.image", unknown field "metadata.lables", '
        'unknown field "spec.alpha", unknown field "spec.resources.zeta"'
    )
    assert refused.value.fields == (
        "spec.image",
        "metadata.lables",
        "spec.alpha",
        "spec.resources.zeta",
    )


def test_under_warn_the_same_fields_are_pruned_with_the_api_servers_warnings():
    api = ApiServer(Store())
    obj = sliced_demo(**{TYPO: 20})
    obj["metadata"]["lables"] = {"a": "b"}
    stored = api.create(obj, duplicates=["spec.image"])
    assert TYPO not in stored["spec"]["resources"] and "lables" not in stored["metadata"]
    assert api.warnings == [
        'duplicate field "spec.image"',
        'unknown field "metadata.lables"',
        f'unknown field "spec.resources.{TYPO}"',
    ]


def test_a_strict_merge_patch_with_an_unknown_field_is_refused_and_changes_nothing():
    api = ApiServer(Store())
    api.create(sliced_demo())
    with pytest.raises(Refused) as refused:
        api.merge_patch(
            "Instance", "sliced-demo", {"spec": {"stpo": True}}, "default", field_validation=STRICT
        )
    assert str(refused.value).endswith('strict decoding error: unknown field "spec.stpo"')
    assert "stpo" not in api.store.get("Instance", "sliced-demo", "default")["spec"]


# --- YAML: lines and duplicate keys -----------------------------------------------------------------


def test_a_file_names_its_duplicate_keys_as_the_api_server_does_and_finds_a_fields_line(tmp_path):
    (tmp_path / "two.yaml").write_text(
        textwrap.dedent(
            """\
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: a
              name: b
            data:
              x: "1"
            ---
            apiVersion: v1
            kind: Pod
            spec:
              containers:
              - name: main
                image: busybox
                image: ubuntu
            """
        )
    )
    first, second = documents.objects(tmp_path / "two.yaml")
    assert (first.obj["metadata"]["name"], first.duplicates) == ("b", ("metadata.name",))
    assert second.duplicates == ("spec.containers[0].image",)
    assert (first.line, second.line) == (1, 9)
    assert documents.line_of(second, "spec.containers[0].image") == 15
    assert documents.line_of(first, "data.y") == 6  # the nearest field that is there


def test_a_yaml_error_names_the_file_line_and_column(tmp_path):
    (tmp_path / "bad.yaml").write_text("a: [1,\nb: 2\n")
    with pytest.raises(documents.DocumentError) as error:
        documents.load_all(tmp_path / "bad.yaml")
    assert str(error.value).startswith(f"{tmp_path / 'bad.yaml'}:3: column 1: ")
    assert "<unicode string>" not in str(error.value)


# --- scenarios --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    files: dict[str, str]  # in a copy of the walkthrough's folder; scenario.yaml is played
    error: str  # what the one Error: line says, after "Error: "


TYPO_FILE = (
    (WALKTHROUGH / "instance-sliced-demo.yaml")
    .read_text()
    .replace("acceleratorSlicedMemoryPercentage", TYPO)
)
APPLY = "apply: [namespaces.yaml]\n"
CASES = [
    Case(
        "a top-level key the format does not know is refused with the keys it takes",
        {"scenario.yaml": APPLY + "stpes:\n- title: a\n"},
        'scenario.yaml:2: unknown key "stpes" in the scenario — did you mean "steps"? '
        "the scenario takes: apply, steps",
    ),
    Case(
        "a step's key the format does not know is refused with the keys a step takes",
        {"scenario.yaml": APPLY + "steps:\n- title: a\n  shwo: [Instance]\n"},
        'scenario.yaml:4: unknown key "shwo" in a step — did you mean "show"? '
        "a step takes: title, run, show",
    ),
    Case(
        "a typo'd field of an applied file is refused at its line, in the API server's words",
        {
            "typo.yaml": TYPO_FILE,
            "scenario.yaml": APPLY + "steps:\n- title: t\n  run: [kubectl apply -f typo.yaml]\n",
        },
        "typo.yaml:13: step 't': kubectl apply -f typo.yaml: Error from server (BadRequest): "
        'error when creating "typo.yaml": Instance in version "v1alpha1" cannot be handled as a '
        f'Instance: strict decoding error: unknown field "spec.resources.{TYPO}" — did you mean '
        '"acceleratorSlicedMemoryPercentage"?',
    ),
    Case(
        "a field given twice in an applied file is refused where it is given",
        {
            "twice.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  name: b\n",
            "scenario.yaml": "apply: [twice.yaml]\n",
        },
        "twice.yaml:5: apply: Error from server (BadRequest): error when creating "
        '"twice.yaml": Namespace in version "v1" cannot be handled as a Namespace: strict '
        'decoding error: duplicate field "metadata.name" — give metadata.name once in twice.yaml',
    ),
    Case(
        "a YAML error in the scenario is at its line",
        {"scenario.yaml": APPLY + "steps:\n- title: a\n  show: [Instance\n"},
        "scenario.yaml:5: column 1: did not find expected ',' or ']' (while parsing a flow "
        "sequence) — fix the YAML there",
    ),
    Case(
        "a YAML error in a file the scenario applies is at that file's line",
        {"broken.yaml": "kind: [\n", "scenario.yaml": "apply: [broken.yaml]\n"},
        "broken.yaml:2: apply: column 1: did not find expected node content (while parsing a "
        "flow node) — fix the YAML there",
    ),
    Case(
        "a file under apply: that is not there is at the scenario's line that names it",
        {"scenario.yaml": "apply:\n- namespaces.yaml\n- nodes.yml\n"},
        "scenario.yaml:3: apply: nodes.yml: no such file — paths are relative to the "
        "scenario's folder, the working directory",
    ),
    Case(
        "an initial object the API server refuses is at the field it names",
        {
            "bad-node.yaml": "apiVersion: v1\nkind: Node\nmetadata:\n  name: Bad_Name\n",
            "scenario.yaml": "apply: [bad-node.yaml]\n",
        },
        "bad-node.yaml:4: apply: Error from server (Invalid): error when creating "
        '"bad-node.yaml": Node "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": '
        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
        "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
        "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*"
        "[a-z0-9])?)*') — correct metadata.name in bad-node.yaml and play the scenario again",
    ),
    Case(
        "a kind to show that the cluster does not serve",
        {"scenario.yaml": APPLY + "steps:\n- title: a\n  show: [Instanse]\n"},
        'scenario.yaml:4: the server doesn\'t have a resource type "Instanse" — did you mean '
        '"instance"?',
    ),
    Case(
        "a command a scenario cannot run",
        {"scenario.yaml": APPLY + "steps:\n- title: a\n  run: [kubectl get pods]\n"},
        "scenario.yaml:4: step 'a': kubectl get pods: kubectl get is not something a scenario "
        "can run — a scenario runs kubectl apply, patch and delete",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_a_bad_scenario_is_one_error_line_and_exit_status_2(case, tmp_path, monkeypatch):
    (tmp_path / "namespaces.yaml").write_text((WALKTHROUGH / "namespaces.yaml").read_text())
    for name, text in case.files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    code, output = run("simulate", "scenario.yaml")
    assert (code, one_error_line(output)) == (2, f"Error: {case.error}")


def test_debug_shows_the_traceback(tmp_path, monkeypatch):
    (tmp_path / "scenario.yaml").write_text("stpes: []\n")
    monkeypatch.chdir(tmp_path)
    for args in (
        ["simulate", "--debug", "scenario.yaml"],
        ["--debug", "simulate", "scenario.yaml"],
    ):
        result = CliRunner().invoke(main, args)
        assert result.exit_code != 0 and result.exception is not None
        assert 'unknown key "stpes"' in str(result.exception)


# --- without the simulator -------------------------------------------------------------------------


@pytest.fixture
def no_simulator(monkeypatch):
    """`import gpustack_sim` fails as it does where the distribution is not installed."""
    monkeypatch.setitem(sys.modules, "gpustack_sim", None)


@pytest.mark.usefixtures("no_simulator")
def test_simulate_without_the_simulator_says_how_to_install_it():
    code, output = run("simulate", WALKTHROUGH / "scenario.yaml")
    assert (code, one_error_line(output)) == (1, f"Error: {SIMULATOR_MISSING}")


@pytest.mark.usefixtures("no_simulator")
def test_render_without_the_simulator_still_refuses_bad_input_in_one_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("kind: [\n")
    code, output = run("render", tmp_path / "bad.yaml", PIPELINES / "catalog.yaml")
    assert code == 2 and f"{tmp_path / 'bad.yaml'}:2: " in one_error_line(output), output


# --- render and demo -------------------------------------------------------------------------------


def test_render_refuses_bad_input_in_one_line_before_starting_a_server(tmp_path):
    (tmp_path / "bad.yaml").write_text("kind: [\n")
    (tmp_path / "empty.yaml").write_text("")
    cases = {
        (tmp_path / "bad.yaml", PIPELINES / "catalog.yaml"): f"{tmp_path / 'bad.yaml'}:2: ",
        (tmp_path / "empty.yaml", PIPELINES / "catalog.yaml"): "holds no object",
        (WALKTHROUGH / "catalog.yaml", WALKTHROUGH / "devices.yaml"): "not a Composition",
        (WALKTHROUGH / "catalog.yaml", PIPELINES / "devices.yaml"): "do not match the XR's",
    }
    for (xr, composition), said in cases.items():
        code, output = run("render", xr, composition)
        assert code == 2 and said in one_error_line(output), output


def test_render_at_an_address_nothing_answers_says_how_to_start_one():
    code, output = run(
        "render", WALKTHROUGH / "catalog.yaml", PIPELINES / "catalog.yaml", "-a", "127.0.0.1:9"
    )
    assert code == 2
    assert one_error_line(output) == (
        "Error: no function server answers at 127.0.0.1:9 — start one "
        "(`.venv/bin/function --insecure --address 127.0.0.1:9`) or give its address"
    )


def test_demo_refuses_a_file_of_something_else_at_the_field(tmp_path):
    devices = yaml.safe_load_all((WALKTHROUGH / "devices.yaml").read_text())
    broken = copy.deepcopy(next(iter(devices)))
    del broken["spec"]["os"]
    (tmp_path / "devices.yaml").write_text(yaml.safe_dump(broken))
    code, output = run("demo", "--devices", tmp_path / "devices.yaml")
    assert code == 2
    assert one_error_line(output).startswith(f"Error: {tmp_path / 'devices.yaml'}:")
    assert "spec.os: is required" in output


# --- the server, the agent and the kubectl plugin, as console scripts ------------------------------

SCRIPTS = Path(sys.executable).parent
NVML_FIXTURE = ROOT / "tests" / "fixtures" / "nvml" / "h100-mig.yaml"
# What the SDK's flags and the Kubernetes clients read from the environment: none of it here.
FROM_THE_ENVIRONMENT = (
    "ADDRESS", "INSECURE", "TLS_SERVER_CERTS_DIR", "DEBUG", "METRICS_ADDRESS", "WORKERS",
    "NODE_NAME", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG",
)  # fmt: skip


def script(tmp_path: Path, name: str, *args: str | Path) -> tuple[int, str, str]:
    """Run a console script as a user would, with no kubeconfig (KUBECONFIG names a file that
    is not there, HOME is empty) and not in a pod; its status, stdout and stderr once it has
    exited — within `HANG`, else the test fails."""
    env = {k: v for k, v in os.environ.items() if k not in FROM_THE_ENVIRONMENT}
    env.update(HOME=str(tmp_path), KUBECONFIG=str(tmp_path / "no-kubeconfig"))
    command = [str(SCRIPTS / name), *map(str, args)]
    with (tmp_path / "stderr").open("w+b") as stderr:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=stderr, env=env, cwd=tmp_path
        )
        stdout = exited(process, f"`{' '.join(command)}` to exit")
        stderr.seek(0)
        return process.returncode, stdout.decode(), stderr.read().decode()


def one_error_line_on_stderr(code: int, stdout: str, stderr: str, status: int = 2) -> str:
    assert (code, stdout) == (status, ""), (code, stdout, stderr)
    return one_error_line(stderr)


@pytest.fixture
def taken_port():
    """A loopback port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


ADDRESS_HINT = (
    "give a HOST:PORT this machine can listen at, free and its own (default 0.0.0.0:9443)"
)


@pytest.mark.parametrize("command", [["function"], ["gpustack-fn", "serve"]], ids=" ".join)
def test_the_server_at_an_address_it_cannot_listen_at_says_so_and_exits(tmp_path, command):
    said = one_error_line_on_stderr(*script(tmp_path, *command, "--insecure", "--address", "bogus"))
    # gRPC's reason, in the resolver's words: "address lookup failed for bogus: ..."
    assert said.startswith("Error: --address bogus: cannot listen there (address lookup failed")
    assert said.endswith(f") — {ADDRESS_HINT}")


def test_the_server_at_a_port_already_taken_says_so_and_exits(tmp_path, taken_port):
    address = f"127.0.0.1:{taken_port}"
    said = one_error_line_on_stderr(
        *script(tmp_path, "function", "--insecure", "--address", address)
    )
    assert said.startswith(f"Error: --address {address}: cannot listen there (")
    assert "Address already in use" in said and said.endswith(ADDRESS_HINT)


def test_the_server_with_a_tls_folder_that_is_not_there_or_lacks_a_file_says_which(tmp_path):
    flag = "--tls-server-certs-dir (or TLS_SERVER_CERTS_DIR)"
    hint = "give the folder of the function's PEM tls.crt, tls.key and ca.crt, or pass --insecure"
    absent = tmp_path / "absent"
    said = one_error_line_on_stderr(*script(tmp_path, "function", "--tls-server-certs-dir", absent))
    assert said == f"Error: {flag} {absent}: no such folder — {hint}"
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "tls.crt").write_text("")
    said = one_error_line_on_stderr(
        *script(tmp_path, "gpustack-fn", "serve", "--tls-server-certs-dir", certs)
    )
    assert said == f"Error: {flag} {certs}: {certs / 'tls.key'}: No such file or directory — {hint}"
    for name in ("tls.key", "ca.crt"):
        (certs / name).write_text("not PEM\n")
    said = one_error_line_on_stderr(*script(tmp_path, "function", "--tls-server-certs-dir", certs))
    assert said.startswith(f"Error: {flag}: the certificates cannot be used (")
    assert said.endswith(f") — {hint}")


def test_the_server_at_a_metrics_address_it_cannot_listen_at_says_so(tmp_path, taken_port):
    address = f"127.0.0.1:{taken_port}"
    said = one_error_line_on_stderr(
        *script(tmp_path, "gpustack-fn", "serve", "--insecure", "--metrics-address", address)
    )
    assert said.startswith(f"Error: --metrics-address {address}: cannot listen there (Address")


def test_the_servers_debug_flag_shows_the_traceback_and_it_still_exits(tmp_path):
    code, _, stderr = script(tmp_path, "function", "--insecure", "--address", "bogus", "-d")
    assert code == 1 and "Traceback" in stderr
    assert "functions.server.CannotServe: --address bogus: cannot listen there" in stderr


def test_the_agent_without_a_cluster_says_where_it_looked(tmp_path):
    agent = ("gpustack-fn", "agent", "--node-name", "n", "--once", "--nvml-fixture", NVML_FIXTURE)
    said = one_error_line_on_stderr(*script(tmp_path, *agent))
    assert said == (
        f"Error: KUBECONFIG={tmp_path / 'no-kubeconfig'}: no cluster to report to: no usable "
        "kubeconfig there (Invalid kube-config file. No configuration found.), and not in a pod "
        "(Service host/port is not set.) — run the agent in its DaemonSet's pods, or point "
        "KUBECONFIG at a kubeconfig for this node's cluster"
    )
    code, _, stderr = script(tmp_path, *agent, "--debug")
    assert code == 1 and "Traceback" in stderr and "NoCluster: KUBECONFIG=" in stderr


def test_the_agent_with_an_nvml_fixture_that_is_not_one_names_the_file_and_line(tmp_path):
    (tmp_path / "bad.yaml").write_text("devices: [\n")
    (tmp_path / "list.yaml").write_text("- driverVersion: 550.54\n")
    for fixture, error in (
        ("bad.yaml", "bad.yaml:2: column 1: did not find expected node content (while parsing a "
         "flow node) — fix the YAML there"),
        ("list.yaml", "list.yaml: holds a list, not an NVML recording — a recording is a mapping "
         "of driverVersion, cudaDriverVersion and devices (tests/fixtures/nvml/ holds some)"),
    ):  # fmt: skip
        said = one_error_line_on_stderr(
            *script(tmp_path, "gpustack-fn", "agent", "--node-name", "n", "--nvml-fixture", fixture)
        )
        assert said == f"Error: {error}"


def test_the_kubectl_plugin_names_the_file_and_line_of_a_yaml_error_with_kubectls_status(
    tmp_path,
):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Devices\nspec: [unclosed\n")
    said = one_error_line_on_stderr(*script(tmp_path, "kubectl-gpustack", "cards", "-f", bad), 1)
    assert said == (
        f"Error: {bad}: while parsing a flow sequence at line 2, column 7: expected ',' or ']', "
        "but got '<stream end>' at line 3, column 1 — fix the YAML there"
    )
    (tmp_path / "bad.json").write_text('{"kind": "Devices",\n "spec": }\n')
    said = one_error_line_on_stderr(
        *script(tmp_path, "kubectl-gpustack", "nodes", "-f", tmp_path / "bad.json"), 1
    )
    assert said == (
        f"Error: {tmp_path / 'bad.json'}: Expecting value at line 2, column 10 — fix the JSON there"
    )
