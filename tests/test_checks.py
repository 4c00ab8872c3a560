"""What the API server would refuse is refused where it enters, naming the field (issue 35).

- Names (item 7): five handlers name what they compose after the composite; a name the API
  server refuses (a NUL, capitals, 254 characters) failed the apply later, on the composed
  object. Now the composite's name, namespace and claim labels are checked as DNS-1123 names
  before any handler reads them, and every composed name for its kind before the response.
- apiVersion (item 8): only the kind was checked; a composite of another group was served.
- Numbers (item 5): an infinity or a NaN in a protobuf number (no JSON holds one) raised
  inside the handlers (`Invalid literal for Fraction`, `OverflowError`); now it is refused
  naming the field.
Each refusal keeps the desired state of earlier steps, as every Fatal does.
"""

from __future__ import annotations

import copy
import json
import math

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions import frame
from functions.core import checks, quantity
from functions.handlers import HANDLERS
from functions.handlers.base import Handler, InputError, Request
from functions.handlers.desired import Desired
from functions.server import run_function
from functions.views import ShapeError
from tests.support import fuzz

NAMED_AFTER_THE_COMPOSITE = (
    "devices",
    "instance",
    "instancepersistentvolume",
    "instancetype",
    "kubernetesnodes",
)
REFUSED_NAMES = {
    "a NUL": "node\x00a",
    "capitals": "Node-A",
    "254 characters": "a" * 254,
    "a leading dash": "-node",
    "an underscore": "node_a",
}


def recorded(handler: str, index: int = 0) -> dict:
    return copy.deepcopy(fuzz.documents_of(handler)[index])


def composite(doc: dict) -> dict:
    return doc["observed"]["composite"]["resource"]


def refused(doc: dict) -> str:
    """The one Fatal result's message; the request's desired state must come back as it was."""
    req = fuzz.request_of(doc)
    rsp = run_function(req)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1, list(rsp.results)
    assert rsp.desired == req.desired and rsp.meta.tag == req.meta.tag
    return fatal[0]


@pytest.mark.parametrize("handler", NAMED_AFTER_THE_COMPOSITE)
@pytest.mark.parametrize("name", REFUSED_NAMES.values(), ids=REFUSED_NAMES.keys())
def test_a_composite_name_the_api_server_refuses_is_refused_naming_metadata_name(handler, name):
    doc = recorded(handler)
    composite(doc)["metadata"]["name"] = name
    message = refused(doc)
    assert message.startswith(f"metadata.name: {name[:60]!r}"[:40]), message
    assert "is not a name the API server accepts" in message


def test_every_recorded_name_is_served():
    for handler in NAMED_AFTER_THE_COMPOSITE:
        for doc in fuzz.documents_of(handler):
            rsp = run_function(fuzz.request_of(doc))
            assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL], handler


def test_a_namespace_or_claim_label_the_api_server_refuses_is_refused_naming_it():
    doc = recorded("instance")
    composite(doc)["metadata"]["namespace"] = "Team A"
    assert refused(doc).startswith("metadata.namespace: 'Team A' is not a name")
    doc = recorded("instance")
    composite(doc)["metadata"].setdefault("labels", {})["crossplane.io/claim-name"] = "My_VM"
    assert refused(doc).startswith("metadata.labels['crossplane.io/claim-name']: 'My_VM'")


def test_empty_claim_labels_are_no_claim():
    """Crossplane 1.x gives an XR composed by another XR (the Catalog's InstanceTypes) its
    parent's claim labels, empty where the parent has none: composed as an XR of no claim."""
    doc = recorded("instancetype")
    labels = composite(doc)["metadata"].setdefault("labels", {})
    labels.update({"crossplane.io/claim-name": "", "crossplane.io/claim-namespace": ""})
    rsp = run_function(fuzz.request_of(doc))
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert rsp.desired.resources


def test_a_composed_name_the_api_server_refuses_for_its_kind_is_refused_naming_the_object():
    """A Service's name is a DNS-1035 label: `7-ssh` is a fine Pod name but no Service's."""

    def compose(request):
        desired = Desired()
        service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "7-ssh"}}
        desired.compose("service", service, None)
        return desired

    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(
        {"apiVersion": "example.org/v1", "kind": "Thing", "metadata": {"name": "thing"}}
    )
    handler = Handler("h", frozenset({"Thing"}), compose, api_version="example.org/v1")
    (result,) = frame.run(handler, req).results
    assert result.severity == fnv1.SEVERITY_FATAL
    assert result.message.startswith(
        "service: the Service 'service' composed for this Thing would have metadata.name "
        "'7-ssh', which the API server refuses: a DNS-1035 label must"
    )


@pytest.mark.parametrize("handler", sorted(fuzz.corpus.handlers()))
def test_a_composite_of_another_api_version_is_refused_naming_apiversion(handler):
    doc = recorded(handler)
    served = composite(doc)["apiVersion"]
    composite(doc)["apiVersion"] = "example.org/v1"
    message = refused(doc)
    assert message.startswith(f"apiVersion: handler {handler!r} serves {served} "), message
    assert "got 'example.org/v1'" in message
    del composite(doc)["apiVersion"]
    assert "got missing" in refused(doc)


NON_FINITE = [
    ("instance", ("spec", "resources", "cpu"), math.inf),
    ("instance", ("spec", "resources", "accelerator"), math.nan),
    ("instance", ("spec", "volume", "ephemeral", "capacity"), math.inf),
    ("instance", ("spec", "resources", "acceleratorSlicedMemoryPercentage"), -math.inf),
    ("kubernetesnodes", ("spec", "replicas"), math.inf),
    ("kubernetesnodes", ("spec", "gpus", 0, "count"), math.nan),
]


@pytest.mark.parametrize(
    ("handler", "path", "value"),
    NON_FINITE,
    ids=[f"{h} {'.'.join(map(str, p))} {v}" for h, p, v in NON_FINITE],
)
def test_a_number_no_json_holds_is_refused_naming_the_field(handler, path, value):
    doc = recorded(handler)
    at = composite(doc)
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    field = ".".join(str(k) for k in path).replace(".0.", "[0].")
    message = refused(doc)
    assert message.startswith(f"{field}: is {value!r}, which no Kubernetes object can hold")


@pytest.mark.parametrize(
    ("handler", "path", "value"),
    NON_FINITE,
    ids=[f"{h} {'.'.join(map(str, p))} {v}" for h, p, v in NON_FINITE],
)
def test_a_handler_given_a_number_no_json_holds_as_plain_data_refuses_or_composes(
    handler, path, value
):
    """Offline (`Request.of`, no frame) the handlers' own reads hold: a count or quantity that
    is an infinity or a NaN is no whole number, and no quantity — refused, or left out, but
    never an exception."""
    doc = recorded(handler)
    at = composite(doc)
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    served = HANDLERS[handler]
    request = Request.of(*fuzz.plain_request(doc))
    try:
        desired = served.compose(request.with_requirements(served.requirements(request)))
    except (InputError, ShapeError) as error:
        assert error.field
        return
    json.dumps([desired.resources, desired.status])


def test_a_quantity_read_from_a_non_finite_number_is_a_quantity_error():
    for value in (math.inf, -math.inf, math.nan):
        with pytest.raises(quantity.QuantityError):
            quantity.parse(value)


@pytest.mark.parametrize(
    ("check", "value", "problem"),
    [
        (checks.subdomain_problem, "gpustack--nvidia-a10g-linux-amd64", None),
        (checks.subdomain_problem, "a.b-c", None),
        (checks.subdomain_problem, "a" * 253, None),
        (checks.subdomain_problem, "a" * 254, "must be no more than 253 characters"),
        (checks.subdomain_problem, "a..b", checks.SUBDOMAIN_WORDS),
        (checks.label_problem, "team-a", None),
        (checks.label_problem, "team.a", checks.LABEL_WORDS),
        (checks.label_problem, "a" * 64, "must be no more than 63 characters"),
        (checks.dns1035_problem, "ssh-7", None),
        (checks.dns1035_problem, "7-ssh", checks.DNS1035_WORDS),
        (checks.subdomain_problem, "ａ", checks.SUBDOMAIN_WORDS),  # ASCII only, as Go's regexp
    ],
)
def test_names_are_checked_as_apimachinery_checks_them(check, value, problem):
    assert check(value) == problem


def test_a_whole_number_is_finite():
    assert checks.whole(3) and checks.whole(3.0)
    assert not any(map(checks.whole, (math.inf, -math.inf, math.nan, 2.5, True, "3")))
