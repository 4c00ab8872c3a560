"""What a handler returns: the desired state as plain data.

Composed objects are dicts keyed by composition-resource-name, each with its readiness (from the
one table in `readiness`); the composite's status, conditions and results are plain values. The
frame alone turns a Desired into a RunFunctionResponse.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from functions.handlers import readiness
from functions.views import View


class Severity(Enum):
    NORMAL = "Normal"
    WARNING = "Warning"
    FATAL = "Fatal"


@dataclass(frozen=True)
class Result:
    """An event for the composite: Normal, Warning, or Fatal (which stops the pipeline)."""

    severity: Severity
    message: str
    reason: str = ""


@dataclass(frozen=True)
class Condition:
    """A condition on the composite (`status` True or False)."""

    type: str
    status: bool
    reason: str
    message: str = ""


@dataclass
class Desired:
    """Composed resources, their readiness, and what the composite reports."""

    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    ready: dict[str, bool] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    conditions: list[Condition] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    composite_ready: bool | None = None  # None: derived from the composed resources
    # Sooner than the handler's TTL: an input this reconcile waits for is missing, and
    # Crossplane does not watch required resources, so only a requeue sees it arrive.
    ttl: datetime.timedelta | None = None

    def compose(self, name: str, obj: dict[str, Any], observed: View | None) -> None:
        """Desire `obj` as `name`; its readiness follows from what was observed of it."""
        self.resources[name] = obj
        self.ready[name] = readiness.of(obj, observed)

    def condition(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        self.conditions.append(Condition(type_, status, reason, message))

    def normal(self, message: str, reason: str = "") -> None:
        self.results.append(Result(Severity.NORMAL, message, reason))

    def warning(self, message: str, reason: str = "") -> None:
        self.results.append(Result(Severity.WARNING, message, reason))

    def fatal(self, message: str, reason: str = "") -> None:
        self.results.append(Result(Severity.FATAL, message, reason))

    @property
    def failed(self) -> bool:
        return any(r.severity is Severity.FATAL for r in self.results)
