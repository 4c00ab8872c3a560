"""Shared fixtures: the walkthrough cluster as the node agent reports it."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
WALKTHROUGH_DEVICES = ROOT / "examples" / "walkthrough" / "devices.yaml"
_DOCUMENTS = [doc for doc in yaml.safe_load_all(WALKTHROUGH_DEVICES.read_text()) if doc]


@pytest.fixture
def walkthrough() -> dict[str, dict]:
    """The four walkthrough nodes' Devices objects by node name (a fresh copy per test)."""
    return {doc["metadata"]["name"]: copy.deepcopy(doc) for doc in _DOCUMENTS}


# CI runs the property tests on a fixed seed, so a submission's result does not depend on luck;
# locally they explore new examples on every run.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
