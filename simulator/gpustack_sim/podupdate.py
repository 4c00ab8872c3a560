"""What kube-apiserver lets an update change of a Pod's spec (`ValidatePodUpdate`,
pkg/apis/core/validation/validation.go), so a composed Pod changed while it exists is refused
here as a real cluster refuses it.

A Pod's spec is immutable but for the fields the API server munges before it compares the old
spec with the new: each container's and init container's `image`, `activeDeadlineSeconds`,
tolerations (only additions: each existing one stays), and `terminationGracePeriodSeconds` from
negative to 1. Scheduling gates may only be removed. While the old Pod is gated, its
`nodeSelector` may gain keys (none changed or removed) and its node affinity be set where it had
none (Kueue's admission relies on both; narrowing an existing node affinity is not played).
Containers cannot be added or removed. `spec.nodeName` is set through the binding subresource
(`ApiServer.bind`), never by an update. The Forbidden message is the API server's first line;
its Go diff of the two specs is not reproduced.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpustack_sim.validation import FieldError, invalid

UPDATABLE = (
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
)
FORBIDDEN = "Forbidden"


def pod_update_errors(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    """The API server's errors for replacing `old`'s spec with `new`'s."""
    new_spec, old_spec = new.get("spec") or {}, old.get("spec") or {}
    errors: list[FieldError] = []
    for key in ("containers", "initContainers"):
        if len(new_spec.get(key) or []) != len(old_spec.get(key) or []):
            errors.append(
                FieldError(f"spec.{key}", FORBIDDEN, "pod updates may not add or remove containers")
            )
    if errors:
        return errors
    munged = copy.deepcopy(dict(new_spec))
    for key in ("containers", "initContainers"):
        for container, before in zip(munged.get(key) or [], old_spec.get(key) or [], strict=True):
            _copy_field(container, before, "image")
    _copy_field(munged, old_spec, "activeDeadlineSeconds")
    errors += _tolerations(munged.get("tolerations") or [], old_spec.get("tolerations") or [])
    _copy_field(munged, old_spec, "tolerations")
    if (old_spec.get("terminationGracePeriodSeconds") or 0) < 0 and munged.get(
        "terminationGracePeriodSeconds"
    ) == 1:
        _copy_field(munged, old_spec, "terminationGracePeriodSeconds")
    errors += _gates(munged.get("schedulingGates") or [], old_spec.get("schedulingGates") or [])
    _copy_field(munged, old_spec, "schedulingGates")
    if old_spec.get("schedulingGates"):
        errors += _gated(munged, old_spec)
    if munged != old_spec:
        detail = "pod updates may not change fields other than " + ",".join(UPDATABLE)
        errors.append(FieldError("spec", FORBIDDEN, detail))
    return errors


def _copy_field(target: dict[str, Any], source: Mapping[str, Any], key: str) -> None:
    if key in source:
        target[key] = copy.deepcopy(source[key])
    else:
        target.pop(key, None)


def _tolerations(new: list[Any], old: list[Any]) -> list[FieldError]:
    """Each existing toleration stays (`validateOnlyAddedTolerations`)."""
    return [
        FieldError(
            f"spec.tolerations[{index}]",
            FORBIDDEN,
            "existing toleration can not be modified except its tolerationSeconds",
        )
        for index, toleration in enumerate(old)
        if toleration not in new
    ]


def _gates(new: list[Any], old: list[Any]) -> list[FieldError]:
    """Scheduling gates may only be removed."""
    names = [gate.get("name") for gate in old]
    return [
        FieldError(
            "spec.schedulingGates",
            FORBIDDEN,
            f"only deletion is allowed, but found new scheduling gate '{gate.get('name')}'",
        )
        for gate in new
        if gate.get("name") not in names
    ]


def _gated(munged: dict[str, Any], old: Mapping[str, Any]) -> list[FieldError]:
    """While gated, nodeSelector additions and a node affinity set where there was none."""
    errors = []
    selector, before = munged.get("nodeSelector") or {}, old.get("nodeSelector") or {}
    for key, value in before.items():
        if selector.get(key) != value:
            errors.append(
                invalid(
                    f"spec.nodeSelector[{key}]",
                    selector.get(key),
                    "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
                )
            )
    _copy_field(munged, old, "nodeSelector")
    old_affinity = (old.get("affinity") or {}).get("nodeAffinity")
    if old_affinity is None and "affinity" in munged:
        munged["affinity"] = {k: v for k, v in munged["affinity"].items() if k != "nodeAffinity"}
        if not munged["affinity"] and "affinity" not in old:
            del munged["affinity"]
    return errors
