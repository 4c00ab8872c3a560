"""What has not settled, a line each: the Instances not Ready, Stopped or Succeeded, the Pods
not Running and the Workloads Kueue has not admitted, each with the reason its controller gave.
A step that differs prints it, so a failed run says who was waiting for what (CI keeps only the
tail of a run's output)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from e2e.api import Api
from e2e.scenario import SETTLED_PHASES


def waiting(api: Api) -> list[str]:
    try:
        return _waiting(api)
    except Exception as error:  # a report on a failure: it never hides the failure itself
        return [f"(what waits could not be read: {type(error).__name__}: {error})"]


def _waiting(api: Api) -> list[str]:
    return sorted(
        [_instance(o) for o in api.list("Instance") if _phase(o) not in SETTLED_PHASES]
        + [
            _pod(o)
            for o in api.list("Pod")
            if _phase(o) not in ("Running", "Succeeded")
            and (o.get("metadata") or {}).get("namespace") != "kube-system"
        ]
        + [_workload(o) for o in api.list("Workload") if not _condition(o, "Admitted")]
    )


def _name(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def _phase(obj: Mapping[str, Any]) -> str:
    return (obj.get("status") or {}).get("phase") or ""


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def _reasons(obj: Mapping[str, Any]) -> str:
    """Each condition not True, as `Type=Reason: message`."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return "; ".join(
        f"{c.get('type')}={c.get('reason', '')}: {c.get('message', '')}".rstrip(": ")
        for c in conditions
        if c.get("status") != "True"
    )


def _line(*parts: str) -> str:
    return " ".join(part for part in parts if part)


def _instance(obj: Mapping[str, Any]) -> str:
    status = obj.get("status") or {}
    return _line(
        f"instance {_name(obj)}:", _phase(obj) or "no phase", status.get("phaseMessage", "")
    )


def _pod(obj: Mapping[str, Any]) -> str:
    gates = [g.get("name") for g in (obj.get("spec") or {}).get("schedulingGates") or []]
    gated = f"gated by {', '.join(gates)}" if gates else ""
    return _line(f"pod {_name(obj)}:", _phase(obj) or "no phase", gated, _reasons(obj))


def _workload(obj: Mapping[str, Any]) -> str:
    return _line(f"workload {_name(obj)}: not admitted", _reasons(obj))
