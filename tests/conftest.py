"""Shared fixtures: the walkthrough cluster as the node agent reports it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WALKTHROUGH_DEVICES = ROOT / "examples" / "walkthrough" / "devices.yaml"
_DOCUMENTS = [doc for doc in yaml.safe_load_all(WALKTHROUGH_DEVICES.read_text()) if doc]


@pytest.fixture
def walkthrough() -> dict[str, dict]:
    """The four walkthrough nodes' Devices objects by node name (a fresh copy per test)."""
    return {doc["metadata"]["name"]: copy.deepcopy(doc) for doc in _DOCUMENTS}
