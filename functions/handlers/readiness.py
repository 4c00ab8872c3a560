"""When a composed resource is ready, by kind: one table for every handler.

Kueue's queues report an `Active` condition, not `Ready`; ResourceFlavors and NodeFeatures have
no status at all (ready once desired); a derived InstanceType is ready when its queue is Active.
A kind missing from the table is ready once it exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from functions.core import apis, reasons
from functions.views import View

Rule = Callable[[View | None], bool]


def condition(obj: View | None, type_: str) -> str:
    """`True`, `False` or `Unknown` for a condition of an observed object."""
    found = obj.list("status", "conditions").find("type", type_) if obj is not None else None
    return (found.str("status") or "Unknown") if found is not None else "Unknown"


def _always(observed: View | None) -> bool:
    return True


def _exists(observed: View | None) -> bool:
    return observed is not None


def _condition_true(type_: str) -> Rule:
    return lambda observed: condition(observed, type_) == "True"


def _phase(phase: str) -> Rule:
    return lambda observed: observed is not None and observed.str("status", "phase") == phase


READINESS: dict[tuple[str, str], Rule] = {
    (apis.group(apis.KUEUE), "ResourceFlavor"): _always,
    (apis.group(apis.KUEUE), "ClusterQueue"): _condition_true("Active"),
    (apis.group(apis.KUEUE), "LocalQueue"): _condition_true("Active"),
    (apis.group(apis.NFD), "NodeFeature"): _always,
    (apis.group(apis.WORKER), "InstanceType"): _phase(reasons.ACTIVE),
    (apis.group(apis.WORKER), "InstanceTypeFlavor"): _exists,
    ("", "Pod"): _condition_true("Ready"),
    ("", "PersistentVolumeClaim"): _phase("Bound"),
    (apis.group(apis.KUBEVIRT), "VirtualMachineInstance"): _condition_true("Ready"),
}


def of(obj: Mapping[str, Any], observed: View | None) -> bool:
    """Whether the composed `obj` is ready, judged from what was observed of it."""
    key = (apis.group(str(obj.get("apiVersion", ""))), str(obj.get("kind", "")))
    return READINESS.get(key, _exists)(observed)
