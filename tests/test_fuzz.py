"""Every handler, fed mutated real requests: a result for every request, never an exception.

The requests are what Crossplane sent each handler while the examples played
(tests/support/corpus.py); each test run changes one to three of their objects — wrong types,
missing fields, absurd numbers, deep nests (tests/support/fuzz.py). Through the real frame, with
protobuf requests round-tripped through the wire format, every response must:
- carry no Fatal result about an internal exception ("<handler> handler failed: TypeError…"):
  a Fatal names a field, and an unreadable required or observed object is skipped and named;
- echo the tag and the context, and keep the resource and the status key an earlier step set;
- keep the request's desired state exactly when it carries a Fatal result.
Through `Request.of` with plain dicts, `compose` either returns plain data or raises `InputError`.
A defect found outside the handlers' boundary and reported to its owner is listed in
`fuzz.KNOWN`: a test that meets one ends as xfail with its text, and fails on anything else.

`GPUSTACK_FUZZ_EXAMPLES` sets the count per test (40 here, the same examples on every run;
`make soak` explores thousands of new ones, and counts every failure in tests/soak.py).
"""

from __future__ import annotations

import json

import pytest
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings

from functions import frame
from functions.handlers import HANDLERS
from functions.handlers.base import InputError, Request
from functions.server import run_function
from functions.views import ShapeError
from tests.support import fuzz

SETTINGS = settings(
    max_examples=fuzz.EXAMPLES,
    deadline=None,
    # `make test` tries the same examples every time; `make soak` explores new ones.
    derandomize=not fuzz.EXPLORE,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
INTERNAL = " handler failed: "


@pytest.fixture(autouse=True, scope="module")
def quiet():
    logging.configure(logging.Level.DISABLED)  # the frame logs each internal failure
    with fuzz.memory_guard():
        yield


def escaped(rsp: fnv1.RunFunctionResponse) -> list[str]:
    return [
        r.message
        for r in rsp.results
        if r.severity == fnv1.SEVERITY_FATAL and INTERNAL in r.message
    ]


def broken_promises(req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse) -> list[str]:
    """Each promise of the frame the response breaks, in words."""
    broken = [f"escaped exception: {message}" for message in escaped(rsp)]
    if rsp.meta.tag != req.meta.tag:
        broken.append(f"tag {rsp.meta.tag!r} is not {req.meta.tag!r}")
    if rsp.context != req.context:
        broken.append("the context was not echoed")
    earlier = rsp.desired.resources.get("from-an-earlier-step")
    if earlier is None or earlier != req.desired.resources["from-an-earlier-step"]:
        broken.append("the earlier step's resource was dropped or changed")
    status = rsp.desired.composite.resource.fields.get("status")
    if status is None or json_format.MessageToDict(status).get("fromAnEarlierStep") != "kept":
        broken.append("the earlier step's status key was dropped")
    if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results) and rsp.desired != req.desired:
        broken.append("a Fatal result came with a changed desired state")
    return broken


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_every_recorded_request_is_served_as_it_was(handler):
    for doc in fuzz.documents_of(handler):
        req = fuzz.request_of(doc)
        rsp = run_function(req)
        assert broken_promises(req, rsp) == []
        assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_a_mutated_request_gets_a_response_that_keeps_the_frames_promises(handler):
    met = set()

    @SETTINGS
    @given(case=fuzz.cases(handler))
    def check(case):
        req = fuzz.request_of(case.document())
        rsp = run_function(req)
        broken = broken_promises(req, rsp)
        known = fuzz.known_defect(handler, frame.request_of(req)) if escaped(rsp) else None
        if known and len(broken) == len(escaped(rsp)):
            met.add(known)
            return
        assert broken == []
        rsp.SerializeToString(deterministic=True)

    check()
    if met:
        pytest.xfail("; ".join(sorted(met)))


@pytest.mark.parametrize("handler", sorted(HANDLERS))
def test_a_mutated_request_from_plain_dicts_composes_plain_data_or_names_a_field(handler):
    served = HANDLERS[handler]
    met = set()

    @SETTINGS
    @given(case=fuzz.cases(handler))
    def check(case):
        composite, observed, required = fuzz.plain_request(case.document())
        request = Request.of(composite, observed, required)
        try:
            desired = served.compose(request.with_requirements(served.requirements(request)))
        except (InputError, ShapeError) as error:
            assert error.field and INTERNAL not in str(error)
            return
        except Exception:
            known = fuzz.known_defect(handler, request)
            if known is None:
                raise
            met.add(known)
            return
        json.dumps([desired.resources, desired.status])  # plain data, nothing else

    check()
    if met:
        pytest.xfail("; ".join(sorted(met)))
