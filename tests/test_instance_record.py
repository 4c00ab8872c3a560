"""A Pod is the Instance's only while it is made from the current spec and the kubelet has not
rejected it (functions/handlers/instance/record.py), case by case on plain dicts: the handler
keeps such a Pod, and replaces any other — left out this round, composed anew the next."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from google.protobuf import struct_pb2

from functions.core import labels
from functions.handlers.base import Request
from functions.handlers.desired import Desired
from functions.handlers.instance import compose, record
from functions.views import DictView, view_of
from tests.support.schemas import ROOT

T4 = "gpustack--nvidia-tesla-t4-linux-amd64"
T4_ENTRANCE, A10G_ENTRANCE = "gpustack-fnv64-6b371caa2da0b799", "gpustack-fnv64-c4680bb149644f1c"
INSTANCE_TYPE = {
    "apiVersion": "worker.gpustack.ai/v1alpha1",
    "kind": "InstanceType",
    "metadata": {"name": T4},
    "spec": {
        "acceleratable": True,
        "acceleratorGroup": "nvidia-tesla-t4",
        "unitResources": {"cpu": "8", "ram": "32Gi"},
    },
    "status": {
        "version": 2,
        "phase": "Active",
        "entrance": T4_ENTRANCE,
        "offers": {"manufacturer": "nvidia", "cardMemoryMiB": 16384, "largestNodeCards": 4},
    },
}
SPEC: dict[str, Any] = {
    "type": T4,
    "image": "ubuntu:24.04",
    "command": ["sleep", "86400"],
    "resources": {"accelerator": "1"},
    "volume": {"ephemeral": {"capacity": "1Gi"}},
}
CURRENT = record.spec_digest(DictView(SPEC))


def observed_pod(
    queue: str = T4_ENTRANCE,
    digest: str | None = CURRENT,
    phase: str = "Running",
    reason: str = "",
    message: str = "",
) -> dict:
    """A Pod as the kubelet reports it on node-t4-b; `digest` None: a Pod made before Pods
    carried their spec's digest."""
    metadata: dict[str, Any] = {"labels": {labels.QUEUE_NAME: queue}}
    if digest is not None:
        metadata["annotations"] = {labels.SPEC_DIGEST: digest}
    status: dict[str, Any] = {"phase": phase}
    if reason:
        status |= {"reason": reason, "message": message}
    if phase == "Running":
        status["conditions"] = [{"type": t, "status": "True"} for t in ("PodScheduled", "Ready")]
    return {"metadata": metadata, "spec": {"nodeName": "node-t4-b"}, "status": status}


def reconciled(pod: dict, spec: dict | None = None) -> Desired:
    instance = {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": "demo", "namespace": "default", "generation": 4},
        "spec": spec or SPEC,
        "status": {"phase": "Ready"},
    }
    required = {"catalog": [], "instancetype": [INSTANCE_TYPE], "runtimeclasses": []}
    return compose(Request.of(instance, observed={"pod": pod}, required=required))


@dataclass(frozen=True)
class PodCase:
    name: str
    pod: dict
    admitted: str  # the Admitted condition's reason
    kept: bool  # the Pod is in the desired state
    spec: dict = field(default_factory=lambda: SPEC)


ALLOCATE_FAILED = (
    "Allocate failed due to nvidia.com/gpu: 1 whole cards requested, 0 free, which is unexpected"
)
PODS = [
    PodCase("a Pod made from the current spec is kept", observed_pod(), "PodComposed", True),
    PodCase(
        "a Pod made from another spec is replaced, whatever order the edits came in",
        observed_pod(queue=A10G_ENTRANCE, digest="0123456789abcdef"),
        "ReplacingOutdatedPod",
        False,
    ),
    PodCase(
        "a Pod of the same queue but another spec is replaced",
        observed_pod(digest="0123456789abcdef"),
        "ReplacingOutdatedPod",
        False,
    ),
    PodCase(
        "a Pod with no record, queued to its type's entrance, is kept",
        observed_pod(digest=None),
        "PodComposed",
        True,
    ),
    PodCase(
        "a Pod with no record, queued to another type's entrance, is replaced",
        observed_pod(queue=A10G_ENTRANCE, digest=None),
        "ReplacingOutdatedPod",
        False,
    ),
    PodCase(
        "a Pod the device plugin's Allocate failed is replaced",
        observed_pod(phase="Failed", reason="UnexpectedAdmissionError", message=ALLOCATE_FAILED),
        "ReplacingFailedPod",
        False,
    ),
    PodCase(
        "a Pod the kubelet found no room for is replaced",
        observed_pod(phase="Failed", reason="OutOfnvidia.com/gpu", message="Pod was rejected"),
        "ReplacingFailedPod",
        False,
    ),
    PodCase(
        "a Pod that failed after it ran is mirrored, not replaced",
        observed_pod(phase="Failed"),
        "PodComposed",
        True,
    ),
    PodCase(
        "an outdated Pod under a spec now refused is removed, not kept by a Fatal result",
        observed_pod(digest="0123456789abcdef"),
        "InvalidResources",
        False,
        spec={**SPEC, "resources": {"accelerator": "5"}},
    ),
]


@pytest.mark.parametrize("case", PODS, ids=[c.name for c in PODS])
def test_which_observed_pods_are_kept(case):
    desired = reconciled(case.pod, case.spec)
    admitted = next(c for c in desired.conditions if c.type == "Admitted")
    assert admitted.reason == case.admitted
    assert ("pod" in desired.resources) is case.kept
    assert not desired.failed  # never a Fatal result: the Pod is not the Instance's to keep


def test_a_kept_pod_records_the_spec_it_is_made_from():
    desired = reconciled(observed_pod(digest=None))
    annotations = desired.resources["pod"]["metadata"]["annotations"]
    assert annotations == {labels.SPEC_DIGEST: CURRENT}


def test_the_replacement_says_why():
    outdated = reconciled(observed_pod(digest="0123456789abcdef"))
    assert outdated.status == {
        "phase": "Starting",
        "phaseMessage": "the Pod was made from another spec of the Instance (spec digest "
        f"0123456789abcdef; generation 4 reads {CURRENT}): replacing it with a Pod of the "
        "current spec",
    }
    failed = reconciled(
        observed_pod(phase="Failed", reason="UnexpectedAdmissionError", message=ALLOCATE_FAILED)
    )
    assert failed.status["phaseMessage"] == (
        "the Pod never ran: the kubelet on node-t4-b rejected it at admission "
        f"(UnexpectedAdmissionError: {ALLOCATE_FAILED}); replacing it with a new Pod"
    )


# --- the digest: one spec, one digest, however it is spelled -----------------------------------


def struct_of(spec: dict) -> Any:
    """The spec as Crossplane hands it over: a Struct, every number a float."""
    struct = struct_pb2.Struct()
    struct.update(spec)
    return view_of(struct)


@dataclass(frozen=True)
class DigestCase:
    name: str
    change: dict
    same: bool


DIGESTS = [
    DigestCase("stopping and starting again", {"stop": False}, True),
    DigestCase(
        "a new display name and description", {"displayName": "x", "description": "y"}, True
    ),
    DigestCase(
        "the XRD's defaults written out",
        {
            "runtime": "Container",
            "imagePullPolicy": "IfNotPresent",
            "volumeMount": "/workspace",
            "privileged": False,
            "env": [],
        },
        True,
    ),
    DigestCase("another type", {"type": "gpustack--nvidia-a10g-linux-amd64"}, False),
    DigestCase("another image", {"image": "ubuntu:26.04"}, False),
    DigestCase("another request", {"resources": {"accelerator": "2"}}, False),
    DigestCase("a pin", {"nodeName": "node-t4-b"}, False),
    DigestCase("privileged", {"privileged": True}, False),
]


@pytest.mark.parametrize("case", DIGESTS, ids=[c.name for c in DIGESTS])
def test_what_changes_the_spec_digest(case):
    changed = record.spec_digest(DictView({**SPEC, **case.change}))
    assert (changed == CURRENT) is case.same


def test_a_port_and_a_number_read_the_same_from_a_struct_and_with_the_default_protocol():
    ported = copy.deepcopy(SPEC) | {"ports": [{"port": 8080}]}
    spelled = copy.deepcopy(SPEC) | {"ports": [{"port": 8080, "protocol": "TCP"}]}
    assert record.spec_digest(DictView(ported)) == record.spec_digest(struct_of(spelled))


def test_every_spec_field_but_stop_and_the_labels_for_people_makes_the_pod():
    """A field the Instance XRD gains is a field a Pod may be made from: leaving it out of the
    digest would keep a Pod made before it changed."""
    xrd = yaml.safe_load((ROOT / "compositions" / "xrds" / "instance.yaml").read_text())
    schema = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    fields = set(schema["properties"]["spec"]["properties"])
    assert set(record.MADE_FROM) == fields - {"stop", "displayName", "description"}
    defaults = {
        name: prop["default"]
        for name, prop in schema["properties"]["spec"]["properties"].items()
        if "default" in prop and name != "stop" and prop["default"] is not False
    }
    assert defaults == record.DEFAULTS
