"""Every refusal a handler repeats from an XRD's CEL rules is worded as the XRD words it.

The handlers apply the XRDs' rules where no API server does (offline render, and a rule at the
schema's root before Crossplane 2.2), so a tenant reads one sentence for one mistake wherever
it is caught. Each sentence is defined once in Python, where the
handler uses it, and read here from the XRD.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import pytest
import yaml

from functions.core import settings
from functions.handlers import gpuclass
from functions.handlers.instance import admission, container, gpus, volumes
from functions.views import view_of
from tests.support.schemas import ROOT

XRDS = ROOT / "compositions" / "xrds"


@dataclass(frozen=True)
class Case:
    name: str
    xrd: str  # a file of compositions/xrds
    at: str  # the schema whose rules hold the message, dotted; `[]` for a list's items
    message: str  # the XRD rule's message, as the handler defines it


CASES = [
    Case("a label key", "catalog.yaml", "spec.vmNodeSelector", settings.LABEL_KEY_RULE),
    Case(
        "a toleration's label key",
        "catalog.yaml",
        "spec.acceleratedFlavorTolerations.[]",
        settings.LABEL_KEY_RULE,
    ),
    Case(
        "the node lifecycle's taints",
        "catalog.yaml",
        "spec.acceleratedFlavorTolerations.[]",
        settings.LIFECYCLE_TAINT_RULE,
    ),
    Case(
        "an Exists toleration of a flavor",
        "catalog.yaml",
        "spec.acceleratedFlavorTolerations.[]",
        settings.EXISTS_VALUE_RULE,
    ),
    Case(
        "an Exists toleration of a GPU class",
        "gpuclass.yaml",
        "spec.tolerations.[]",
        settings.EXISTS_VALUE_RULE,
    ),
    Case(
        "tolerationSeconds",
        "gpuclass.yaml",
        "spec.tolerations.[]",
        gpuclass.TOLERATION_SECONDS_RULE,
    ),
    Case("a GPU class's name", "gpuclass.yaml", "", f"metadata.name: {gpuclass.NAME_RULE}"),
    Case("a vgpu class's profile", "gpuclass.yaml", "spec", gpuclass.VGPU_PROFILE_RULE),
    Case("a passthrough class", "gpuclass.yaml", "spec", gpuclass.PASSTHROUGH_RULE),
    Case("both workspace volumes", "instance.yaml", "spec.volume", admission.BOTH_VOLUMES_RULE),
    Case("no workspace volume", "instance.yaml", "spec", admission.ONE_VOLUME_RULE),
    Case(
        "an additional volume's source",
        "instance.yaml",
        "spec.additionalVolumes.[]",
        volumes.ONE_SOURCE_RULE,
    ),
    Case("gpus of a Container", "instance.yaml", "spec", container.GPUS_RULE),
    Case("gpus of both kinds", "instance.yaml", "spec.gpus", gpus.ONE_KIND_RULE),
    Case("a gpus entry's selector", "instance.yaml", "spec.gpus.[]", gpus.ONE_SELECTOR_RULE),
    Case("a raw gpus entry's count", "instance.yaml", "spec.gpus.[]", gpus.COUNT_RULE),
]


@cache
def schema(xrd: str) -> dict:
    document = yaml.safe_load((XRDS / xrd).read_text())
    return document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def rule_messages(xrd: str, at: str) -> list[str]:
    """The messages of the rules on the schema at `at`."""
    node = schema(xrd)
    for key in at.split(".") if at else ():
        node = node["items"] if key == "[]" else node["properties"][key]
    return [rule["message"] for rule in node.get("x-kubernetes-validations", ())]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_handler_refuses_in_the_xrds_words(case):
    assert case.message in rule_messages(case.xrd, case.at)


@dataclass(frozen=True)
class Refused:
    name: str
    refusals: Callable[[], list]  # what a handler's rule answers
    message: str


REFUSED = [
    Refused(
        "no workspace volume",
        lambda: admission.workspace_refusals(view_of({})),
        admission.ONE_VOLUME_RULE,
    ),
    Refused(
        "both workspace volumes",
        lambda: admission.workspace_refusals(
            view_of({"volume": {"ephemeral": {"capacity": "1Gi"}, "persistent": {"name": "v"}}})
        ),
        admission.BOTH_VOLUMES_RULE,
    ),
    Refused(
        "gpus of both kinds",
        lambda: gpus.entry_refusals([view_of({"className": "a"}), view_of({"name": "b"})], "at"),
        gpus.ONE_KIND_RULE,
    ),
    Refused(
        "a raw gpus entry's count",
        lambda: [gpus.entry_refusal(view_of({"name": "b", "count": 2}), "at")],
        gpus.COUNT_RULE,
    ),
    Refused(
        "gpus of a Container",
        lambda: [container.runtime_refusal(view_of({"gpus": [{"className": "a"}]}))],
        container.GPUS_RULE,
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=[c.name for c in REFUSED])
def test_the_handler_refuses_with_the_message_it_defines(case):
    assert [refusal.message for refusal in case.refusals()] == [case.message]
