"""functions/core stays a pure library: no gRPC, protobuf, SDK, NVML or Kubernetes client."""

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "functions" / "core"
FORBIDDEN = {"grpc", "google", "crossplane", "pynvml", "kubernetes", "structlog", "click"}


def test_core_imports_nothing_impure():
    offenders = []
    for path in sorted(CORE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            modules = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module]
            offenders += [f"{path.name}: {m}" for m in modules if m.split(".")[0] in FORBIDDEN]
    assert offenders == []
