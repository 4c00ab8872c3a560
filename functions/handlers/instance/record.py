"""When an observed Pod is not the Instance's Pod any more, and is replaced.

A Pod is immutable and a function keeps nothing between calls, so the Pod carries what it was
made from: the annotation `worker.gpustack.ai/spec-digest`, a digest of the Instance's spec
fields that make a Pod (`MADE_FROM`). Two Pods are replaced rather than kept:

- **A Pod made from another spec.** `spec.stop: true`, an edit, `spec.stop: false` are three
  writes the API server takes one by one (the XRD lets any field change once `stop` was true);
  when no reconcile ran between them the handler sees the new spec over the old Pod, exactly as
  it would see a direct edit the XRD could not refuse (Crossplane before 2.2, offline). Either
  way the Pod is not the spec's, and keeping it would report the new spec Ready over the old
  type's Pod in the old queue. A Pod with no record (made before the record existed) is taken as
  made from the current spec unless its queue is another type's entrance.
- **A Pod the kubelet rejected at admission.** It never ran (`UnexpectedAdmissionError` when the
  device plugin's Allocate fails, `OutOf<resource>`, a predicate the node no longer meets), and
  a failed Pod is never started again: without a new one the Instance would read `Failed`
  forever, even once its cards are free.

A replaced Pod is left out of the reconcile (Crossplane deletes it) and the next one composes the
new Pod; the Instance says why meanwhile (`Admitted=False`, `ReplacingOutdatedPod` or
`ReplacingFailedPod`). The same spec always gives the same digest: only the fields that make the
Pod count, in a form that drops what reads as unset (false, empty) and each field's XRD default,
so a default the XRD adds later does not restart every running Pod — a field added to
`MADE_FROM` must come with its default in `DEFAULTS` for the same reason.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from functions.core import labels, reasons
from functions.handlers.instance.outcome import Waiting
from functions.views import View, plain

# The spec fields a Pod is made from: all but stop (which removes the Pod), displayName and
# description (labels for people; they may change while the Instance runs).
MADE_FROM = (
    "type",
    "runtime",
    "image",
    "imagePullPolicy",
    "command",
    "privileged",
    "ports",
    "env",
    "resources",
    "volumeMount",
    "imagePullSecret",
    "sshPublicKey",
    "volume",
    "additionalVolumes",
    "nodeName",
    "gpus",
)
# The XRD's defaults, as written where unset (ports' protocol is per entry).
DEFAULTS: dict[str, Any] = {
    "runtime": "Container",
    "imagePullPolicy": "IfNotPresent",
    "volumeMount": "/workspace",
}
PORT_PROTOCOL_DEFAULT = "TCP"

# Why a kubelet rejects a Pod at admission (kubelet lifecycle/predicate.go, the device and
# topology managers' admit handlers); `OutOf<resource>` as a prefix.
REJECTED_AT_ADMISSION = frozenset(
    {
        "UnexpectedAdmissionError",
        "TopologyAffinityError",
        "UnexpectedPredicateFailureType",
        "InvalidNodeInfo",
        "NodeAffinity",
        "NodeName",
        "NodePorts",
        "TaintToleration",
        "PodOSSelectorNodeLabelDoesNotMatch",
        "PodOSNotSupported",
    }
)
OUT_OF = "OutOf"


def spec_digest(spec: View) -> str:
    """The digest of the fields that make the Pod: 16 hex digits of a SHA-256."""
    made_from = {}
    for key in MADE_FROM:
        value = plain(spec.get(key))
        if value != DEFAULTS.get(key):
            ports = key == "ports" and isinstance(value, list)
            made_from[key] = [_port(p) for p in value] if ports else value
    text = json.dumps(_unset_dropped(made_from), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _port(port: Any) -> Any:
    if isinstance(port, dict) and port.get("protocol") == PORT_PROTOCOL_DEFAULT:
        return {k: v for k, v in port.items() if k != "protocol"}
    return port


def _unset_dropped(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {k: _unset_dropped(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (None, False, "", [], {})}
    if isinstance(value, list):
        return [_unset_dropped(v) for v in value]
    return value


def replacing(pod: View | None, digest: str, generation: int) -> Waiting | None:
    """Why the observed Pod is replaced, as the wait until its successor is composed; None
    while it is the Instance's Pod (`digest`: the spec's, at `generation`)."""
    if pod is None:
        return None
    rejected = admission_rejection(pod)
    if rejected is not None:
        return rejected
    recorded = pod.str("metadata", "annotations", labels.SPEC_DIGEST)
    if not recorded or recorded == digest:
        return None
    message = (
        f"the Pod was made from another spec of the Instance (spec digest {recorded}; "
        f"generation {generation} reads {digest}): replacing it with a Pod of the current spec"
    )
    return Waiting(reasons.REPLACING_OUTDATED_POD, message)


def admission_rejection(pod: View) -> Waiting | None:
    """A Pod the kubelet failed at admission: it never ran, and never will."""
    reason = pod.str("status", "reason")
    if pod.str("status", "phase") != reasons.FAILED:
        return None
    if reason not in REJECTED_AT_ADMISSION and not reason.startswith(OUT_OF):
        return None
    node = pod.str("spec", "nodeName") or "its node"
    message = (
        f"the Pod never ran: the kubelet on {node} rejected it at admission ({reason}: "
        f"{pod.str('status', 'message')}); replacing it with a new Pod"
    )
    return Waiting(reasons.REPLACING_FAILED_POD, message)
