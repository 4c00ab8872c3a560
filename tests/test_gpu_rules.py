"""The seed's field rules (003) hold in the schema and in the handlers alike.

A cluster's API server refuses a write by the XRD; offline render and Crossplane before 2.2 (which
drops root rules such as the class-name rule) have only the handler. Each case is refused by both,
naming the same field, and its valid twin is taken by both.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from functions.handlers import gpuclass
from functions.handlers.base import Request
from functions.handlers.instance import gpus
from functions.views import DictView
from gpustack_sim.apiserver import ApiServer, Refused
from gpustack_sim.store import Store
from tests.support.schemas import ROOT, documents
from tests.test_render import render

CLASSES = {
    d["metadata"]["name"]: d for d in documents(ROOT / "examples" / "gpuclass" / "classes.yaml")
}
LONG_NAME = "example-" + "x" * 64  # 72 characters


def gpu_class(base: str = "example-whole-gpu", name: str = "", **spec: Any) -> dict[str, Any]:
    """A seed example class; `spec` overrides (None removes)."""
    found = copy.deepcopy(CLASSES[base])
    if name:
        found["metadata"]["name"] = name
    for key, value in spec.items():
        if value is None:
            found["spec"].pop(key, None)
        else:
            found["spec"][key] = value
    return found


@dataclass(frozen=True)
class Case:
    name: str
    refused: dict[str, Any]
    field: str  # the field both name
    valid: dict[str, Any]


CLASS_CASES = [
    Case(
        "a class name with dots is no DNS label",
        gpu_class(name="g.with.dots"),
        "metadata.name",
        gpu_class(name="g-with-dashes"),
    ),
    Case(
        "a 72-character class name can never be selected",
        gpu_class(name=LONG_NAME),
        "metadata.name",
        gpu_class(name=LONG_NAME[:63]),
    ),
    Case(
        "featureType is 1 or 4",
        gpu_class(
            "example-licensed-vgpu",
            license={"secretName": "example-vgpu-license", "featureType": 2},
        ),
        "spec.license.featureType",
        gpu_class(
            "example-licensed-vgpu",
            license={"secretName": "example-vgpu-license", "featureType": 4},
        ),
    ),
    Case(
        "an explicit maxCount is at least one",
        gpu_class(maxCount=0),
        "spec.maxCount",
        gpu_class(maxCount=1),
    ),
    Case(
        "a vgpu class requires profile",
        gpu_class("example-byol-vgpu", profile=None),
        "spec.profile",
        gpu_class("example-byol-vgpu"),
    ),
    Case(
        "a passthrough class permits no profile",
        gpu_class(profile="example-profile"),
        "spec",
        gpu_class(),
    ),
    Case(
        "memory is a positive quantity",
        gpu_class(memory="0"),
        "spec.memory",
        gpu_class(memory="16Gi"),
    ),
    Case(
        "an Exists toleration has no value",
        gpu_class(tolerations=[{"key": "gpu", "operator": "Exists", "value": "x"}]),
        "spec.tolerations[0]",
        gpu_class(tolerations=[{"key": "gpu", "operator": "Exists"}]),
    ),
    Case(
        "tolerationSeconds applies only with NoExecute",
        gpu_class(tolerations=[{"key": "gpu", "effect": "NoSchedule", "tolerationSeconds": 5}]),
        "spec.tolerations[0]",
        gpu_class(tolerations=[{"key": "gpu", "effect": "NoExecute", "tolerationSeconds": 5}]),
    ),
]


def handler_problem(obj: dict[str, Any]) -> str:
    desired = gpuclass.compose(Request.of(obj, required={}))
    fatal = [r.message for r in desired.results if r.severity.value == "Fatal"]
    return fatal[0] if fatal else ""


@pytest.mark.parametrize("case", CLASS_CASES, ids=lambda c: c.name)
def test_a_gpu_class_the_schema_refuses_the_handler_refuses(case: Case):
    with pytest.raises(Refused) as refused:
        ApiServer(Store()).create(copy.deepcopy(case.refused))
    assert case.field in str(refused.value)
    assert handler_problem(case.refused).startswith(f"{case.field}: ")
    ApiServer(Store()).create(copy.deepcopy(case.valid))
    assert handler_problem(case.valid) == ""


def test_offline_render_refuses_a_class_the_schema_refuses(tmp_path):
    (tmp_path / "class.yaml").write_text(yaml.safe_dump(gpu_class(name="g.with.dots")))
    result, _ = render(
        tmp_path / "class.yaml", ROOT / "compositions" / "pipelines" / "gpuclass.yaml"
    )
    assert result.exit_code == 2  # bad input: the pipeline refused it
    assert "returned a fatal result: metadata.name: a GPUClass name is a DNS label" in result.output


# --- a VM's gpus entries ------------------------------------------------------------------------


def instance(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "vm-1", "namespace": "default"},
        "spec": {
            "type": "gpustack--generic-linux-amd64",
            "runtime": "VirtualMachine",
            "image": "quay.io/containerdisks/ubuntu:24.04",
            "volume": {"ephemeral": {"capacity": "20Gi"}},
            "gpus": gpus,
        },
    }


ENTRY_CASES = [
    Case(
        "a count of 0",
        instance([{"className": "a", "count": 0}]),
        "spec.gpus[0].count",
        instance([{"className": "a", "count": 1}]),
    ),
    Case(
        "a count of -3",
        instance([{"className": "a", "count": -3}]),
        "spec.gpus[0].count",
        instance([{"className": "a"}]),
    ),
    Case(
        "more than 1024 units in one entry",
        instance([{"className": "a", "count": 1025}]),
        "spec.gpus[0].count",
        instance([{"className": "a", "count": 1024}]),
    ),
    Case(
        "a dotted class name",
        instance([{"className": "g.with.dots"}]),
        "spec.gpus[0].className",
        instance([{"className": "g-with-dots"}]),
    ),
    Case(
        "a 72-character class name",
        instance([{"className": LONG_NAME}]),
        "spec.gpus[0].className",
        instance([{"className": LONG_NAME[:63]}]),
    ),
    Case(
        "both className and name",
        instance([{"className": "a", "name": "example.com/gpu"}]),
        "spec.gpus[0]",
        instance([{"name": "example.com/gpu"}]),
    ),
    Case(
        "a count on a raw entry",
        instance([{"name": "example.com/gpu", "count": 1}]),
        "spec.gpus[0]",
        instance([{"name": "example.com/gpu"}]),
    ),
    Case(
        "class and raw entries mixed",
        instance([{"className": "a"}, {"name": "example.com/gpu"}]),
        "spec.gpus",
        instance([{"className": "a"}, {"className": "b"}]),
    ),
]


def entry_refusals(obj: dict[str, Any]) -> list[str]:
    entries = [DictView(e) for e in obj["spec"]["gpus"]]
    return [str(r) for r in gpus.entry_refusals(entries, "spec.gpus")]


@pytest.mark.parametrize("case", ENTRY_CASES, ids=lambda c: c.name)
def test_a_gpus_entry_the_schema_refuses_the_handler_refuses(case: Case):
    with pytest.raises(Refused) as refused:
        ApiServer(Store()).create(copy.deepcopy(case.refused))
    assert f"{case.field}:" in str(refused.value)
    found = entry_refusals(case.refused)
    assert found and found[0].startswith(f"{case.field}: ")
    ApiServer(Store()).create(copy.deepcopy(case.valid))
    assert entry_refusals(case.valid) == []


KUBEVIRT = {
    "spec": {
        "configuration": {
            "permittedHostDevices": {"pciHostDevices": [{"resourceName": "example.com/whole-gpu"}]}
        }
    }
}


def test_units_add_up_to_at_most_1024_per_vmi():
    offer = gpuclass.read_offer(DictView(gpu_class(maxCount=1024)))
    offers = gpus.Offers({offer.name: offer}, gpuclass.permitted_by(DictView(KUBEVIRT)))
    entries = [
        DictView({"className": "example-whole-gpu", "count": 1000}),
        DictView({"className": "example-whole-gpu", "count": 25}),
    ]
    assert [str(r) for r in gpus.resolve(entries, offers)] == [
        "spec.gpus: GPU class example-whole-gpu allows at most 1024 units per VM, requested 1025",
        "spec.gpus: the gpus entries expand to 1025 GPU units; at most 1024 per VMI",
    ]


def observed(found: dict[str, Any], **status: Any) -> dict[str, Any]:
    """A class as its own reconcile left it: the status the gpuclass handler wrote."""
    return {**found, "status": status}


LIMIT_CASES = [
    ("maxCount wins over what nodes advertise", gpu_class(maxCount=2), {"maxPerNode": 8}, 2),
    ("a vGPU class takes one unit", gpu_class("example-byol-vgpu"), {"maxPerNode": 8}, 1),
    ("else the most one eligible node advertises", gpu_class(), {"maxPerNode": 8}, 8),
    ("no eligible node advertises it yet: a shortage", gpu_class(), {"maxPerNode": 0}, None),
    ("the class not observed yet: a shortage", gpu_class(), {}, None),
    ("a status that is no whole number: a shortage", gpu_class(), {"maxPerNode": "8"}, None),
]


@pytest.mark.parametrize(
    ("found", "status", "limit"),
    [case[1:] for case in LIMIT_CASES],
    ids=[case[0] for case in LIMIT_CASES],
)
def test_the_per_vm_limit_is_read_from_the_class_not_from_every_node(found, status, limit):
    assert gpus.per_vm_limit(gpuclass.read_offer(DictView(observed(found, **status)))) == limit
