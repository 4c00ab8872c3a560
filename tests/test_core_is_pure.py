"""The layers hold: the import-linter contracts in pyproject.toml are all kept.

The contracts (``[tool.importlinter]``) are the one statement of the layering: the core imports no
gRPC, protobuf, SDK, NVML, Kubernetes client nor any outer layer; the served function never carries
the offline tools; handlers never import the frame or the server; the agent stands apart; only
the CLI imports the simulator, and the simulator imports the product's entry points only.
``make lint`` runs ``lint-imports`` too; this test keeps a bare ``pytest`` run honest.
"""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_import_contracts_are_kept():
    run = subprocess.run(
        [LINT_IMPORTS, "--no-cache", "--no-logo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
