"""The README's commands, run verbatim in a fresh shell after `make demo`: the first hour works as
written. Blocks that need what this machine lacks (a cluster, docker, the crossplane CLI) are
skipped with the reason; `SKIPPED` lists every one, so a new untested block is a failure here.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import textwrap

import pytest

from tests.support.schemas import ROOT

README = ROOT / "README.md"
FENCE = re.compile(r"^( *)```sh\n(.*?)^ *```", re.M | re.S)
NEEDS = {
    "kubectl": "needs a cluster",
    "crossplane": "needs the crossplane CLI",
    "docker": "needs a docker engine",
}
LINE_NEEDS = {
    "make test": "is this suite: it would run this test again",
    "make package": "needs docker and the crossplane CLI to build; tests/test_package.py runs it without them",
}
# Every block this test does not run, by its first line, with the reason.
SKIPPED = dict(
    [
        (".venv/bin/function --insecure &", NEEDS["crossplane"]),
        ("make package", LINE_NEEDS["make package"]),
        ("kubectl apply -f compositions/rbac/ -f compositions/xrds/", NEEDS["kubectl"]),
        ("kubectl apply -f compositions/agent/namespace.yaml", NEEDS["kubectl"]),
        ("kubectl apply -f examples/install/podmonitors.yml", NEEDS["kubectl"]),
        (
            "kubectl apply -f examples/install/deploymentruntimeconfig.yaml "
            "-f examples/install/function.yaml",
            NEEDS["kubectl"],
        ),
        (
            "make demo   # creates .venv, installs, and plays the walkthrough scenario through "
            "the real handlers",
            LINE_NEEDS["make test"],  # `make demo` itself runs first, in `after_make_demo`
        ),
    ]
)


def blocks() -> list[str]:
    """Every ```sh block of the README, dedented (list items indent theirs)."""
    return [textwrap.dedent(match[2]) for match in FENCE.finditer(README.read_text())]


def commands(block: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = block.replace("\\\n", " ")
    return [
        line.strip() for line in joined.splitlines() if line.strip() and not line.startswith("#")
    ]


def program(command: str) -> str:
    """The program a command runs: its first word after any VAR=value assignments."""
    words = shlex.split(command, comments=True)
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words.pop(0)
    return words[0] if words else ""


def skip_reason(block: str) -> str | None:
    for command in commands(block):
        for line, reason in LINE_NEEDS.items():
            if command.startswith(line):
                return reason
        if program(command) in NEEDS:
            return NEEDS[program(command)]
    return None


# A bound for a hang, not a measure of speed: `make demo` in a fresh checkout installs the venv,
# and a busy 2-core machine runs a README block many times slower than a quiet one.
FRESH_SHELL_BOUND = 900.0


def fresh_shell(
    script: str, cwd=ROOT, timeout: float = FRESH_SHELL_BOUND
) -> subprocess.CompletedProcess:
    """bash with no profile, no rc, no venv: what a new terminal in the checkout has."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    env["LANG"] = "C.UTF-8"
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def after_make_demo():
    result = fresh_shell("make demo")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


def first_line(block: str) -> str:
    return block.splitlines()[0].strip()


@pytest.mark.parametrize("block", blocks(), ids=first_line)
def test_every_readme_command_runs_verbatim_in_a_fresh_shell(block, after_make_demo):
    reason = skip_reason(block)
    assert SKIPPED.get(first_line(block)) == reason, "list the block in SKIPPED, or run it"
    if reason is not None:
        pytest.skip(reason)
    result = fresh_shell(block)
    assert result.returncode == 0, (
        f"{block}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
    )


def test_most_readme_commands_run_here():
    ran = [block for block in blocks() if skip_reason(block) is None]
    assert sum(len(commands(block)) for block in ran) >= 7


def test_function_is_never_a_shell_command_in_the_readme():
    """`function` is a bash keyword: `function --help` is a syntax error, so the README calls the
    server by its path or as `gpustack-fn serve`."""
    programs = [program(command) for block in blocks() for command in commands(block)]
    assert "function" not in programs
    assert ".venv/bin/function" in programs
    table = [line for line in README.read_text().splitlines() if line.startswith("| `function` ")]
    assert table == []


def test_the_default_inputs_do_not_depend_on_the_working_directory(tmp_path, after_make_demo):
    gpustack_fn = ROOT / ".venv" / "bin" / "gpustack-fn"
    here = fresh_shell(f"{gpustack_fn} demo", cwd=tmp_path)
    assert here.returncode == 0, here.stderr
    assert here.stdout == fresh_shell(f"{gpustack_fn} demo").stdout
    assert "gpustack--nvidia-a10g-linux-amd64" in here.stdout
    simulated = fresh_shell(f"{gpustack_fn} simulate", cwd=tmp_path)
    assert simulated.returncode == 0, simulated.stderr
    assert "== 3. Requesting a logical sliced GPU" in simulated.stdout
