"""The frame every handler runs in, so that a handler only computes.

The frame keeps the protocol's promises (DESIGN §5) in one place:
- the request's tag, context and desired state from earlier steps are echoed untouched;
- requirements are declared identically on every call of a reconcile: from the composite (and,
  where a selector needs a setting, from the Catalog once read), never from what they return;
- "not resolved yet" (`Request.required()` is None) differs from "resolved, none" (`[]`);
- every composed resource is given an explicit readiness;
- a deliberate TTL is set per handler;
- any exception becomes a Fatal result naming the handler and the error (the traceback goes to
  the log, never into the result), and nothing already composed is dropped;
- `InputError` — bad input — becomes a Fatal result naming the field.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from crossplane.function import logging, resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.structs import View

CLAIM_NAMESPACE = "crossplane.io/claim-namespace"
CLAIM_NAME = "crossplane.io/claim-name"

_STATUS = {True: fnv1.STATUS_CONDITION_TRUE, False: fnv1.STATUS_CONDITION_FALSE}
_READY = {True: fnv1.READY_TRUE, False: fnv1.READY_FALSE}


class InputError(Exception):
    """Bad input: a Fatal result whose message names the field and says what to do."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Requirement:
    """A `requirements.resources` selector (no match field: every object of the kind)."""

    api_version: str
    kind: str
    match_name: str | None = None
    match_labels: Mapping[str, str] | None = None
    namespace: str | None = None


class Request:
    """Read access to a RunFunctionRequest: the composite, observed and required resources."""

    def __init__(self, req: fnv1.RunFunctionRequest):
        self.req = req
        self.xr = View(req.observed.composite.resource)
        self.input = View(req.input)

    @property
    def kind(self) -> str:
        return self.xr.str("kind")

    @property
    def api_group(self) -> str:
        return self.xr.str("apiVersion").rpartition("/")[0]

    @property
    def namespace(self) -> str:
        """The XR's namespace, or a legacy claim's (from Crossplane's claim label)."""
        return self.xr.namespace or self.xr.labels().get(CLAIM_NAMESPACE, "")

    @property
    def name(self) -> str:
        """The tenant-facing name: a legacy XR answers with its claim's name."""
        return self.xr.labels().get(CLAIM_NAME) or self.xr.name

    def observed(self, name: str) -> View | None:
        composed = self.req.observed.resources.get(name)
        return View(composed.resource) if composed is not None else None

    def observed_names(self) -> list[str]:
        return sorted(self.req.observed.resources.keys())

    def required(self, name: str) -> list[View] | None:
        """Resolved objects sorted by name; None while Crossplane has not resolved it yet."""
        if name not in self.req.required_resources:
            return None
        items = [View(item.resource) for item in self.req.required_resources[name].items]
        return sorted(items, key=lambda view: (view.namespace, view.name))

    def required_one(self, name: str) -> View | None:
        items = self.required(name)
        return items[0] if items else None


@dataclass
class Output:
    """What a handler produces: composed resources, XR status, conditions, results."""

    composed: dict[str, tuple[dict, bool]] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    conditions: list[fnv1.Condition] = field(default_factory=list)
    results: list[fnv1.Result] = field(default_factory=list)
    composite_ready: bool | None = None

    def compose(self, name: str, obj: Mapping[str, Any], ready: bool) -> None:
        self.composed[name] = (dict(obj), ready)

    def condition(self, type_: str, status: bool, reason: str, message: str = "") -> None:
        condition = fnv1.Condition(type=type_, status=_STATUS[status], reason=reason)
        if message:
            condition.message = message
        self.conditions.append(condition)

    def warning(self, message: str, reason: str = "") -> None:
        self._result(fnv1.SEVERITY_WARNING, message, reason)

    def normal(self, message: str, reason: str = "") -> None:
        self._result(fnv1.SEVERITY_NORMAL, message, reason)

    def fatal(self, message: str, reason: str = "") -> None:
        self._result(fnv1.SEVERITY_FATAL, message, reason)

    def _result(self, severity: int, message: str, reason: str) -> None:
        result = fnv1.Result(severity=severity, message=message)
        if reason:
            result.reason = reason
        self.results.append(result)


class Handler:
    """A handler computes; the frame does the protocol. Subclasses set the class attributes."""

    name: ClassVar[str]
    kinds: ClassVar[frozenset[str]]  # composite kinds this handler serves
    ttl: ClassVar[datetime.timedelta] = datetime.timedelta(seconds=60)

    def requirements(self, request: Request) -> dict[str, Requirement]:
        """Declared from the composite, so every call of a reconcile asks the same."""
        return {}

    def compose(self, request: Request, out: Output) -> None:
        raise NotImplementedError


def run(handler: Handler, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """Run `handler` on `req` inside the frame; never raises."""
    request = Request(req)
    try:
        if request.kind not in handler.kinds:
            served = ", ".join(sorted(handler.kinds))
            raise InputError(
                "input.handler",
                f"handler {handler.name!r} serves {served}; the composite is a "
                f"{request.kind or 'resource without a kind'} — pick the handler for that kind",
            )
        requirements = handler.requirements(request)
        out = Output()
        handler.compose(request, out)
        return _respond(handler, req, requirements, out)
    except InputError as error:
        return refuse(req, str(error), handler.ttl)
    except Exception as error:  # the frame's promise: a result, never a raised exception
        logging.get_logger().exception("handler failed", handler=handler.name, tag=req.meta.tag)
        return refuse(
            req, f"{handler.name} handler failed: {type(error).__name__}: {error}", handler.ttl
        )


def refuse(
    req: fnv1.RunFunctionRequest, message: str, ttl: datetime.timedelta = response.DEFAULT_TTL
) -> fnv1.RunFunctionResponse:
    """A Fatal result that keeps the request's desired state and context as they were."""
    rsp = response.to(req, ttl)
    response.fatal(rsp, message)
    return rsp


def _respond(
    handler: Handler,
    req: fnv1.RunFunctionRequest,
    requirements: Mapping[str, Requirement],
    out: Output,
) -> fnv1.RunFunctionResponse:
    rsp = response.to(req, handler.ttl)
    for name in sorted(requirements):
        _require(rsp, name, requirements[name])
    for name in sorted(out.composed):
        obj, ready = out.composed[name]
        composed = rsp.desired.resources[name]
        composed.resource.Clear()
        composed.resource.update(obj)
        composed.ready = _READY[ready]
    if out.status:
        _merge_status(rsp.desired.composite, out.status)
    if out.composite_ready is not None:
        rsp.desired.composite.ready = _READY[out.composite_ready]
    rsp.conditions.extend(out.conditions)
    rsp.results.extend(out.results)
    return rsp


def _require(rsp: fnv1.RunFunctionResponse, name: str, requirement: Requirement) -> None:
    selector = rsp.requirements.resources[name]
    selector.api_version = requirement.api_version
    selector.kind = requirement.kind
    if requirement.match_name is not None:
        selector.match_name = requirement.match_name
    elif requirement.match_labels is not None:
        selector.match_labels.labels.update(dict(requirement.match_labels))
    if requirement.namespace:
        selector.namespace = requirement.namespace


def _merge_status(composite: fnv1.Resource, status: Mapping[str, Any]) -> None:
    """Set our status keys, keeping any an earlier step set."""
    merged = resource.struct_to_dict(composite.resource).get("status", {})
    merged.update(status)
    composite.resource.update({"status": merged})
