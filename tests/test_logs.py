"""No license token in any log, at any level: a record is built from safe parts only.

A licensed GPU class's request carries the license Secret, token and all. When a handler
fails inside, the SDK's logging rendered the traceback with every frame's local variables —
the frame's `req` among them — so the token reached the server's default log (issue 35).
Here a handler fails on purpose with that request in hand, and with an exception whose own
message quotes the token; nothing written, at info or debug level, holds it in any form.
"""

from __future__ import annotations

import base64
import json

import pytest
from crossplane.function import logging
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions import logs
from functions.core import names
from functions.handlers import gpuclass
from functions.server import run_function
from tests.support import fuzz

TOKEN = "tok-4f1c9e8a-LICENSE-0123456789abcdef"
FORMS = (TOKEN, base64.b64encode(TOKEN.encode()).decode())  # as the tenant wrote it, as stored


def licensed_request() -> fnv1.RunFunctionRequest:
    """The recorded request of the licensed vGPU class, its license Secret found."""
    doc = next(
        d
        for d in fuzz.documents_of("gpuclass")
        if d["observed"]["composite"]["resource"]["metadata"]["name"] == "example-licensed-vgpu"
    )
    req = fuzz.request_of(doc)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "example-vgpu-license", "namespace": "cozy-system"},
        "data": {names.LICENSE_KEY: FORMS[1]},
        "stringData": {names.LICENSE_KEY: TOKEN},
    }
    found = req.required_resources["license"]
    found.Clear()
    found.items.add().resource.update(secret)
    return req


def quoting_the_token(request, spec):
    """A bug that reads the token and raises an exception whose message quotes it."""
    secret = request.required("license")[0]
    raise KeyError(f"unexpected token {secret.str('data', names.LICENSE_KEY)} ({secret.to_dict()})")


@pytest.fixture
def failing_handler(monkeypatch):
    monkeypatch.setattr(gpuclass, "license_missing", quoting_the_token)


@pytest.fixture(autouse=True)
def logging_off_after():
    yield
    logs.configure(logs.Level.DISABLED)


@pytest.mark.parametrize("level", [logs.Level.INFO, logs.Level.DEBUG], ids=["info", "debug"])
def test_a_failing_handler_logs_where_it_failed_and_never_the_token(failing_handler, capsys, level):
    logs.configure(level)
    req = licensed_request()
    assert TOKEN in str(req)  # what the SDK's traceback showed as the frame's local `req`
    rsp = run_function(req)
    written = "".join(capsys.readouterr())
    (fatal,) = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert fatal.startswith("gpuclass handler failed: KeyError at tests/test_logs.py:")
    assert "handler failed" in written and "KeyError" in written
    for form in FORMS:
        assert form not in written
        assert form not in fatal


def test_the_failure_record_names_the_type_the_place_and_the_frames(failing_handler, capsys):
    logs.configure(logs.Level.INFO)
    run_function(licensed_request())
    (record,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert record["msg"] == "handler failed" and record["level"] == "error"
    assert record["handler"] == "gpuclass" and record["error"] == "KeyError"
    assert record["at"].startswith("tests/test_logs.py:") and "quoting_the_token" in record["at"]
    assert record["trace"][0].startswith("functions/frame.py:")
    assert any(place.startswith("functions/handlers/gpuclass.py:") for place in record["trace"])


@pytest.mark.parametrize("level", [logs.Level.INFO, logs.Level.DEBUG], ids=["info", "debug"])
def test_an_object_handed_to_a_logger_is_written_as_its_type_only(capsys, level):
    logs.configure(level)
    req = licensed_request()
    logging.get_logger().info("a careless record", request=req, data={"token": TOKEN})
    try:
        raise ValueError(TOKEN)
    except ValueError:
        logging.get_logger().exception("a careless exception")
    written = "".join(capsys.readouterr())
    assert "<RunFunctionRequest>" in written and "<dict>" in written
    assert "ValueError" in written
    for form in FORMS:
        assert form not in written


def test_the_standard_librarys_records_never_carry_an_exceptions_message(capsys):
    import logging as stdlib_logging

    logs.configure(logs.Level.INFO)
    try:
        raise RuntimeError(TOKEN)
    except RuntimeError:
        stdlib_logging.getLogger("grpc._cython.cygrpc").exception("Unexpected error in handler")
    written = capsys.readouterr().err
    assert "RuntimeError at " in written and TOKEN not in written
