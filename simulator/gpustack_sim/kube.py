"""Kubernetes' own rules that several stand-ins apply: selectors, taints, requests, conditions.

These are the documented behaviour of kube-scheduler and the API conventions, written here for
the stand-ins on purpose: the simulated cluster must judge the product's objects by the real
components' rules, never by the product's own (DESIGN §7), so nothing here imports a handler.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from gpustack_sim.upstream import parse_quantity

NO_SCHEDULE_EFFECTS = ("NoSchedule", "NoExecute")
_INTEGER = re.compile(r"^[+-]?[0-9]+$")
# The simulated cluster has no clock: every transition happens at the same instant, so the
# same scenario always writes the same objects.
TRANSITION_TIME = "2026-01-01T00:00:00Z"


def quantity(value: Any) -> Fraction:
    """A Kubernetes quantity ("4", "500m", "16Gi") exactly, as Kubernetes' Python client parses
    it; ValueError for one it cannot read."""
    try:
        return Fraction(parse_quantity(value))
    except (ArithmeticError, TypeError) as error:  # NaN, Infinity: no quantity
        raise ValueError(f"not a quantity: {value!r}") from error


# apimachinery's decimal suffixes, the largest first (resource.Quantity's canonical form).
DECIMAL_SUFFIXES = (
    (18, "E"),
    (15, "P"),
    (12, "T"),
    (9, "G"),
    (6, "M"),
    (3, "k"),
    (0, ""),
    (-3, "m"),
    (-6, "u"),
    (-9, "n"),
)


def format_quantity(amount: Fraction | int) -> str:
    """How apimachinery writes a decimal quantity: no precision lost, no fractional digit, the
    largest suffix that allows both (1.5 is `1500m`, 1,600,000 is `1600k`); what is finer than
    a nano is rounded up to one, as a Quantity rounds it."""
    if amount == 0:
        return "0"
    if amount < 0:
        return "-" + format_quantity(-amount)
    for exponent, suffix in DECIMAL_SUFFIXES:
        mantissa = Fraction(amount) / Fraction(10) ** exponent
        if mantissa.denominator == 1:
            return f"{mantissa.numerator}{suffix}"
    return f"{math.ceil(Fraction(amount) * 10**9)}n"


def condition(type_: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    """A condition as the API conventions write it (metav1.Condition's required fields)."""
    return {
        "type": type_,
        "status": status,
        "reason": reason or type_,
        "message": message,
        "lastTransitionTime": TRANSITION_TIME,
    }


def set_conditions(obj: dict[str, Any], *conditions: dict[str, str]) -> None:
    """Replace the object's conditions of these types, keeping the others, sorted by type."""
    status = obj.setdefault("status", {})
    types = {c["type"] for c in conditions}
    kept = [c for c in status.get("conditions", []) if c["type"] not in types]
    status["conditions"] = sorted([*kept, *conditions], key=lambda c: c["type"])


def condition_status(obj: Mapping[str, Any] | None, type_: str) -> str:
    for found in ((obj or {}).get("status") or {}).get("conditions") or []:
        if found.get("type") == type_:
            return str(found.get("status", "Unknown"))
    return "Unknown"


def labels_of(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def selects(
    pod_spec: Mapping[str, Any], labels: Mapping[str, str], keys: Iterable[str] | None = None
) -> bool:
    """Does the Pod's nodeSelector and required node affinity accept these labels? With
    `keys`, only terms on those keys count (how Kueue matches a Pod against a flavor)."""
    allowed = set(keys) if keys is not None else None
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if (allowed is None or key in allowed) and labels.get(key) != value:
            return False
    terms = (
        ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms")
    )
    if not terms:
        return True
    kept_terms = []
    for term in terms:
        expressions = [
            e for e in term.get("matchExpressions") or [] if allowed is None or e["key"] in allowed
        ]
        if not expressions and allowed is None:
            continue  # an empty term selects no node (kube-scheduler's NodeSelectorTerm)
        if not expressions:
            return True  # Kueue: a term emptied of other keys matches; terms are ORed
        kept_terms.append(expressions)
    return any(all(_matches(e, labels) for e in term) for term in kept_terms)


def label_selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: null selects nothing, `{}` everything, else every `matchLabels`
    pair and every `matchExpressions` requirement must hold."""
    if selector is None:
        return False
    wanted = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    return all(labels.get(k) == v for k, v in wanted.items()) and all(
        _matches(e, labels) for e in expressions
    )


def _matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    value, values = labels.get(expression["key"]), list(expression.get("values") or [])
    operator = expression["operator"]
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt"):  # whole numbers as Go's strconv.ParseInt reads them
        if not values or not (_INTEGER.match(value or "") and _INTEGER.match(values[0])):
            return False
        number, bound = int(value or ""), int(values[0])
        return number > bound if operator == "Gt" else number < bound
    return False


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' toleration rule: a matching effect (or none), then Exists or Equal."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not key or key == taint.get("key")
    if operator != "Equal":  # an operator Kubernetes does not know tolerates nothing
        return False
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated(
    tolerations: Iterable[Mapping[str, Any]],
    taints: Iterable[Mapping[str, Any]],
    effects: tuple[str, ...] = NO_SCHEDULE_EFFECTS,
) -> list[Mapping[str, Any]]:
    tolerations = list(tolerations)
    return [
        taint
        for taint in taints
        if taint.get("effect") in effects and not any(tolerates(t, taint) for t in tolerations)
    ]


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Fraction]:
    """What the Pod asks of a node: its containers' requests summed (limits where a request is
    missing, as the API server defaults them)."""
    total: dict[str, Fraction] = {}
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in wanted.items():
            total[name] = total.get(name, Fraction(0)) + quantity(value)
    return total


def extended_resource(name: str) -> bool:
    """Kubernetes' `IsExtendedResourceName`: a resource named with a domain other than
    kubernetes.io's, not a quota's `requests.` name (`nvidia.com/gpu`, not `cpu`)."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def running(pod: Mapping[str, Any]) -> bool:
    """A Pod that holds its node's resources: bound and not finished."""
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in ("Succeeded", "Failed")


def pod_key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def device_plugin(api: Any) -> str:
    """The device plugin this simulated cluster runs: the one its Catalog says it runs (the
    operator installs that plugin, and Kueue's matching configuration, beside the package)."""
    for catalog in getattr(api, "peek_list", api.list)("Catalog"):  # only read
        return (catalog.get("spec") or {}).get("devicePlugin") or "gpustack"
    return "gpustack"
