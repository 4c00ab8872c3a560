"""The frame's promises, on a handler that misbehaves on purpose."""

from __future__ import annotations

import datetime

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions import frame


class Exploding(frame.Handler):
    name = "exploding"
    kinds = frozenset({"Thing"})
    ttl = datetime.timedelta(seconds=42)

    def __init__(self, error: Exception | None = None):
        self.error = error

    def requirements(self, request):
        return {"things": frame.Requirement("example.org/v1", "Thing", match_labels={"a": "b"})}

    def compose(self, request, out):
        out.compose(
            "mine", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, ready=True
        )
        if self.error:
            raise self.error
        found = request.required("things")
        out.status = {"resolved": found is not None, "count": len(found or [])}


def request() -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "t"
    req.observed.composite.resource.update(
        {"apiVersion": "example.org/v1", "kind": "Thing", "metadata": {"name": "n"}}
    )
    req.desired.resources["earlier"].resource.update({"kind": "Earlier"})
    req.context.update({"k": "v"})
    return req


def test_an_exception_becomes_a_fatal_result_and_keeps_what_was_composed_before():
    req = request()
    rsp = frame.run(Exploding(ValueError("boom")), req)
    assert [(r.severity, r.message) for r in rsp.results] == [
        (fnv1.SEVERITY_FATAL, "exploding handler failed: ValueError: boom")
    ]
    assert "Traceback" not in rsp.results[0].message
    assert rsp.desired == req.desired and rsp.context == req.context and rsp.meta.tag == "t"
    assert rsp.meta.ttl.seconds == 42


def test_bad_input_names_the_field():
    rsp = frame.run(Exploding(frame.InputError("spec.size", "must be positive, got -1")), request())
    assert rsp.results[0].message == "spec.size: must be positive, got -1"


def test_not_resolved_yet_differs_from_resolved_none():
    req = request()
    first = frame.run(Exploding(), req)
    assert first.desired.composite.resource["status"]["resolved"] is False
    selector = first.requirements.resources["things"]
    assert (selector.kind, dict(selector.match_labels.labels)) == ("Thing", {"a": "b"})
    req.required_resources["things"].SetInParent()  # resolved: nothing matched
    second = frame.run(Exploding(), req)
    assert second.desired.composite.resource["status"]["resolved"] is True
    assert second.requirements == first.requirements  # declared identically on every call
    assert second.desired.resources["mine"].ready == fnv1.READY_TRUE
    assert second.desired.resources["earlier"].resource["kind"] == "Earlier"
