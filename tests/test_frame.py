"""The frame's promises, on a handler that misbehaves on purpose, over both protocols."""

from __future__ import annotations

import datetime

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions import frame
from functions.handlers.base import Handler, InputError, Requirement
from functions.handlers.desired import Desired

CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}
MODERN = (fnv1.CAPABILITY_CAPABILITIES, fnv1.CAPABILITY_REQUIRED_RESOURCES)


def exploding(error: Exception | None = None, secret: bool = False) -> Handler:
    def requirements(request):
        found = {"things": Requirement("example.org/v1", "Thing", match_labels={"a": "b"})}
        if secret:
            found["secret"] = Requirement("v1", "Secret", match_name="token", namespace="vault")
        return found

    def compose(request):
        desired = Desired()
        desired.compose("mine", CONFIG_MAP, request.observed("mine"))
        if error:
            raise error
        found = request.required("things")
        desired.status = {"resolved": found is not None, "count": len(found or [])}
        return desired

    return Handler(
        "exploding", frozenset({"Thing"}), compose, requirements, datetime.timedelta(seconds=42)
    )


def request(capabilities=MODERN) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "t"
    req.meta.capabilities.extend(capabilities)
    req.observed.composite.resource.update(
        {"apiVersion": "example.org/v1", "kind": "Thing", "metadata": {"name": "n"}}
    )
    req.desired.resources["earlier"].resource.update({"kind": "Earlier"})
    req.context.update({"k": "v"})
    return req


def test_an_exception_becomes_a_fatal_result_and_keeps_what_was_composed_before():
    req = request()
    rsp = frame.run(exploding(ValueError("boom")), req)
    assert [(r.severity, r.message) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, "exploding handler failed: ValueError: boom")
    ]
    assert "Traceback" not in rsp.results[0].message
    assert rsp.desired == req.desired and rsp.context == req.context and rsp.meta.tag == "t"
    assert rsp.meta.ttl.seconds == 42


def test_bad_input_names_the_field():
    rsp = frame.run(exploding(InputError("spec.size", "must be positive, got -1")), request())
    assert rsp.results[0].message == "spec.size: must be positive, got -1"


def test_not_resolved_yet_differs_from_resolved_none():
    req = request()
    first = frame.run(exploding(), req)
    assert first.desired.composite.resource["status"]["resolved"] is False
    assert first.desired.resources["mine"].ready == fnv1.READY_FALSE  # not created yet
    selector = first.requirements.resources["things"]
    assert (selector.kind, dict(selector.match_labels.labels)) == ("Thing", {"a": "b"})
    req.required_resources["things"].SetInParent()  # resolved: nothing matched
    req.observed.resources["mine"].resource.update(CONFIG_MAP)
    second = frame.run(exploding(), req)
    assert second.desired.composite.resource["status"]["resolved"] is True
    assert second.requirements == first.requirements  # declared identically on every call
    assert second.desired.resources["mine"].ready == fnv1.READY_TRUE  # ConfigMap: once it exists
    assert second.desired.resources["earlier"].resource["kind"] == "Earlier"


def test_a_caller_without_capabilities_is_asked_and_answered_through_extra_resources():
    req = request(capabilities=())
    first = frame.run(exploding(), req)
    assert not first.requirements.resources
    assert first.requirements.extra_resources["things"].kind == "Thing"
    thing = {"apiVersion": "example.org/v1", "kind": "Thing", "metadata": {"name": "t1"}}
    req.extra_resources["things"].items.add().resource.update(thing)
    second = frame.run(exploding(), req)
    assert second.desired.composite.resource["status"]["count"] == 1


def test_a_namespaced_match_by_name_is_fatal_where_the_caller_may_ignore_namespaces():
    rsp = frame.run(exploding(secret=True), request(capabilities=()))
    assert [r.severity for r in rsp.results] == [fnv1.SEVERITY_FATAL]
    assert rsp.results[0].message.startswith(
        "requirements.secret: this Crossplane does not advertise capabilities"
    )
    assert "Secret token in namespace vault" in rsp.results[0].message
    modern = frame.run(exploding(secret=True), request())
    assert not modern.results and modern.requirements.resources["secret"].namespace == "vault"


def test_a_fatal_result_the_handler_returns_keeps_the_desired_state_as_it_was():
    def compose(request):
        desired = Desired()
        desired.compose("mine", CONFIG_MAP, None)
        desired.fatal("spec.x: cannot change while running", "Immutable")
        return desired

    req = request()
    rsp = frame.run(Handler("h", frozenset({"Thing"}), compose), req)
    assert [(r.severity, r.reason) for r in rsp.results] == [(fnv1.SEVERITY_FATAL, "Immutable")]
    assert rsp.desired == req.desired
