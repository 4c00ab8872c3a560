"""Composing through provider-kubernetes (functions/envelope.py): a step whose input has
`providerKubernetes` composes each namespaced object inside an Object and shows its handler
each observed Object as the object it carries. Whole responses, as Crossplane 1.x reads them."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format

from functions import frame
from functions.handlers.base import Handler
from functions.handlers.desired import Desired

SUMMARY = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "node-a-summary", "namespace": "gpustack-system"},
    "data": {"cards": "8"},
}
FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
          "metadata": {"name": "h100"}}  # fmt: skip
OBSERVED_SUMMARY = {**SUMMARY, "metadata": {**SUMMARY["metadata"], "uid": "u-1"}}
# what the provider observed before it applied the handler's latest manifest (8 cards)
OLDER_SUMMARY = {**OBSERVED_SUMMARY, "data": {"cards": "4"}}


def compose(request) -> Desired:
    """A namespaced object and a cluster-scoped one (a flavor is ready once desired); the
    status says what was observed."""
    desired = Desired()
    desired.compose("summary", SUMMARY, request.observed("summary"))
    desired.compose("flavor", FLAVOR, request.observed("flavor"))
    seen = request.observed("summary")
    desired.status = {
        "observed": request.observed_names(),
        "uid": seen.str("metadata", "uid") if seen else "",
        "cards": seen.str("data", "cards") if seen else "",
    }
    return desired


HANDLER = Handler("thing", frozenset({"Thing"}), compose, ttl=datetime.timedelta(seconds=30),
                  api_version="example.org/v1")  # fmt: skip


def wrapped(manifest: dict[str, Any], config: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "kubernetes.crossplane.io/v1alpha2",
        "kind": "Object",
        "spec": {
            "forProvider": {"manifest": manifest},
            "providerConfigRef": {"name": config},
            "watch": True,
        },
    }


def observed_object(at_provider: dict[str, Any] | None) -> dict[str, Any]:
    found = {**wrapped(SUMMARY), "metadata": {"name": "n-x7k2p"}}
    if at_provider is not None:
        found["status"] = {"atProvider": at_provider}
    return found


@dataclass
class Case:
    reason: str
    envelope: Any  # the step input's providerKubernetes; None: left out
    observed: dict[str, dict[str, Any]] = field(default_factory=dict)
    want: dict[str, Any] = field(default_factory=dict)


def response(resources: dict[str, tuple[dict[str, Any], bool]], status: dict[str, Any]):
    return {
        "meta": {"tag": "t", "ttl": "30s"},
        "desired": {
            "composite": {"resource": {"status": status}},
            "resources": {
                name: {"resource": obj, "ready": "READY_TRUE" if ready else "READY_FALSE"}
                for name, (obj, ready) in resources.items()
            },
        },
        "context": {},
    }


CASES = [
    Case(
        "without the field, every object is composed as it is (Crossplane 2.x)",
        None,
        {"summary": OBSERVED_SUMMARY},
        response({"summary": (SUMMARY, True), "flavor": (FLAVOR, True)},
                 {"observed": ["summary"], "uid": "u-1", "cards": "8"}),
    ),
    Case(
        "a namespaced object goes inside an Object of the default ProviderConfig; a "
        "cluster-scoped one is composed as it is",
        {},
        {},
        response({"summary": (wrapped(SUMMARY), False), "flavor": (FLAVOR, True)},
                 {"observed": [], "uid": "", "cards": ""}),
    ),
    Case(
        "the handler sees the object the Object observed, and its readiness follows from it",
        {"providerConfigName": "gpustack"},
        {"summary": observed_object({"manifest": OBSERVED_SUMMARY})},
        response({"summary": (wrapped(SUMMARY, "gpustack"), True), "flavor": (FLAVOR, True)},
                 {"observed": ["summary"], "uid": "u-1", "cards": "8"}),
    ),
    Case(
        "what the provider observed before it applied the manifest shows the manifest over it: "
        "the handler keeps what it asked for, with what only the cluster knows (the uid)",
        {},
        {"summary": observed_object({"manifest": OLDER_SUMMARY})},
        response({"summary": (wrapped(SUMMARY), True), "flavor": (FLAVOR, True)},
                 {"observed": ["summary"], "uid": "u-1", "cards": "8"}),
    ),
    Case(
        "an Object the provider has not observed yet shows the manifest asked for, and what it "
        "carries is not ready (it may not exist)",
        {},
        {"summary": observed_object(None)},
        response({"summary": (wrapped(SUMMARY), False), "flavor": (FLAVOR, True)},
                 {"observed": ["summary"], "uid": "", "cards": "8"}),
    ),
]  # fmt: skip


def request(envelope: Any, observed: dict[str, dict[str, Any]]) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "t"
    req.observed.composite.resource.update(
        {"apiVersion": "example.org/v1", "kind": "Thing", "metadata": {"name": "n"}}
    )
    for name, obj in observed.items():
        req.observed.resources[name].resource.update(obj)
    step_input = {"apiVersion": "fn.gpustack.ai/v1beta1", "kind": "Input", "handler": "thing"}
    if envelope is not None:
        step_input["providerKubernetes"] = envelope
    req.input.update(step_input)
    req.context.SetInParent()
    return req


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.reason)
def test_namespaced_objects_travel_inside_provider_kubernetes_objects(case: Case):
    got = json_format.MessageToDict(frame.run(HANDLER, request(case.envelope, case.observed)))
    assert got == case.want, case.reason


@pytest.mark.parametrize(
    ("envelope", "field"),
    [
        ("yes", "input.providerKubernetes"),
        ({"providerConfigName": ""}, "input.providerKubernetes.providerConfigName"),
        ({"providerConfigName": 3}, "input.providerKubernetes.providerConfigName"),
    ],
)
def test_a_bad_envelope_is_fatal_naming_the_field_and_keeps_what_was_composed(envelope, field):
    req = request(envelope, {})
    req.desired.resources["earlier"].resource.update({"kind": "Earlier"})
    rsp = frame.run(HANDLER, req)
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    assert rsp.results[0].message.startswith(f"{field}: ")
    assert list(rsp.desired.resources) == ["earlier"]
