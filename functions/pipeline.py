"""Crossplane's composition loop, as its FetchingFunctionRunner runs each pipeline step for the
XR controller and for `crossplane render` alike (internal/xfn/required_resources.go in v2.3,
internal/controller/apiextensions/composite/extra_resources.go in 1.x): the render command and
the simulated cluster's Crossplane drive the real function through this. It models Crossplane,
and reads nothing of the handlers.

Call the function. Stop at a Fatal result, or when its requirements equal those of the call
before (none at all, on the first call, equal none: one call). Otherwise resolve them afresh
from a pool of objects (matching apiVersion and kind, then name or labels; sorted by
`namespace/name`), dropping what the call before was given, pass its context on, and call
again: at most 6 calls. A pipeline's first step gets an empty context.

Two callers are played: `CROSSPLANE_2` (2.2 and newer: it advertises its capabilities and
answers `requirements.resources` in `required_resources`, honouring namespaces) and
`CROSSPLANE_1` (1.x: no capabilities; it answers only `requirements.extra_resources`, in
`extra_resources`, and ignores a selector's namespace).

Objects become protobuf Structs through `structs` (by default the SDK's `dict_to_struct`): a
caller that hands the same unchanged objects to many calls (the simulated Crossplane) passes
one that remembers.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from google.protobuf.struct_pb2 import Struct

MAX_ITERATIONS = 5

Runner = Callable[[fnv1.RunFunctionRequest], fnv1.RunFunctionResponse]
ToStruct = Callable[[Mapping[str, Any]], Struct]


def to_struct(obj: Mapping[str, Any]) -> Struct:
    return resource.dict_to_struct(dict(obj))


@dataclass(frozen=True)
class Caller:
    """What a Crossplane version sends and reads back."""

    name: str
    capabilities: tuple[int, ...]
    reads_extra_resources: bool  # answers requirements.extra_resources, into extra_resources
    honours_namespaces: bool


CROSSPLANE_2 = Caller(
    "Crossplane 2.2+",
    (
        fnv1.CAPABILITY_CAPABILITIES,
        fnv1.CAPABILITY_REQUIRED_RESOURCES,
        fnv1.CAPABILITY_CREDENTIALS,
        fnv1.CAPABILITY_CONDITIONS,
        fnv1.CAPABILITY_REQUIRED_SCHEMAS,
    ),
    reads_extra_resources=False,
    honours_namespaces=True,
)
CROSSPLANE_1 = Caller("Crossplane 1.x", (), reads_extra_resources=True, honours_namespaces=False)


class RequirementsUnstable(RuntimeError):
    pass


def matches(
    selector: fnv1.ResourceSelector, obj: Mapping[str, Any], honour_namespace: bool = True
) -> bool:
    if obj.get("apiVersion") != selector.api_version or obj.get("kind") != selector.kind:
        return False
    metadata = obj.get("metadata") or {}
    if (
        honour_namespace
        and selector.HasField("namespace")
        and metadata.get("namespace", "") != selector.namespace
    ):
        return False
    if selector.WhichOneof("match") == "match_name":
        if not honour_namespace and metadata.get("namespace"):
            return False  # 1.x gets a namespaced object by name without its namespace: none
        return metadata.get("name") == selector.match_name
    if selector.WhichOneof("match") == "match_labels":
        labels = metadata.get("labels") or {}
        return all(labels.get(k) == v for k, v in selector.match_labels.labels.items())
    return True


def fulfil(
    selector: fnv1.ResourceSelector,
    objects: Iterable[Mapping[str, Any]],
    honour_namespace: bool = True,
    structs: ToStruct = to_struct,
) -> fnv1.Resources:
    found = sorted(
        (obj for obj in objects if matches(selector, obj, honour_namespace)),
        key=lambda o: f"{(o.get('metadata') or {}).get('namespace', '')}/{o['metadata']['name']}",
    )
    if selector.WhichOneof("match") == "match_name":
        found = found[:1]
    return fnv1.Resources(items=[fnv1.Resource(resource=structs(o)) for o in found])


def request(
    composite: Mapping[str, Any],
    observed: Mapping[str, Mapping[str, Any]],
    step_input: Mapping[str, Any],
    desired: fnv1.State | None = None,
    context: Any = None,
    caller: Caller = CROSSPLANE_2,
    structs: ToStruct = to_struct,
) -> fnv1.RunFunctionRequest:
    req = fnv1.RunFunctionRequest()
    req.meta.capabilities.extend(caller.capabilities)
    req.observed.composite.resource.CopyFrom(structs(composite))
    for name, obj in sorted(observed.items()):
        req.observed.resources[name].resource.CopyFrom(structs(obj))
    if desired is not None:
        req.desired.CopyFrom(desired)
    req.input.update(dict(step_input))
    req.context.SetInParent()  # Crossplane starts every pipeline with an empty context
    if context is not None:
        req.context.CopyFrom(context)
    return req


def run_step(
    run: Runner,
    req: fnv1.RunFunctionRequest,
    objects: Iterable[Mapping[str, Any]],
    caller: Caller = CROSSPLANE_2,
    structs: ToStruct = to_struct,
) -> fnv1.RunFunctionResponse:
    """One pipeline step with its requirements loop; returns the final response."""
    objects = list(objects)
    bootstrap = {n: copy.deepcopy(r) for n, r in req.required_resources.items()}  # kept
    previous: fnv1.Requirements | None = None  # what the call before asked for (Go's nil)
    for _ in range(MAX_ITERATIONS + 1):
        rsp = run(req)
        if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
            return rsp
        asked = rsp.requirements if rsp.HasField("requirements") else None
        if asked == previous:  # proto.Equal: nil equals only nil
            return rsp
        previous = asked
        _answer(req, rsp.requirements, objects, caller, bootstrap, structs)
        req.context.CopyFrom(rsp.context)
    raise RequirementsUnstable(
        f"requirements didn't stabilize after the maximum number of iterations ({MAX_ITERATIONS})"
    )


def _answer(
    req: fnv1.RunFunctionRequest,
    requirements: fnv1.Requirements,
    objects: list[Mapping[str, Any]],
    caller: Caller,
    bootstrap: Mapping[str, fnv1.Resources],
    structs: ToStruct = to_struct,
) -> None:
    honour = caller.honours_namespaces
    req.ClearField("extra_resources")  # what the call before was given goes
    req.ClearField("required_resources")
    for name, resources in bootstrap.items():
        req.required_resources[name].CopyFrom(resources)
    for name, selector in requirements.extra_resources.items():
        req.extra_resources[name].CopyFrom(fulfil(selector, objects, honour, structs))
    if caller.reads_extra_resources:
        return  # 1.x knows nothing of requirements.resources
    for name, selector in requirements.resources.items():
        req.required_resources[name].CopyFrom(fulfil(selector, objects, honour, structs))


def run_pipeline(
    run: Runner,
    composition: Mapping[str, Any],
    composite: Mapping[str, Any],
    observed: Mapping[str, Mapping[str, Any]],
    objects: Iterable[Mapping[str, Any]],
    caller: Caller = CROSSPLANE_2,
    structs: ToStruct = to_struct,
) -> tuple[fnv1.RunFunctionResponse, list[tuple[str, fnv1.Result]]]:
    """Run every step of a pipeline Composition; a Fatal result stops it there.

    Returns the last response and every result with the name of the step that returned it.
    """
    objects = list(objects)
    desired, context, results = None, None, []
    rsp = fnv1.RunFunctionResponse()
    for step in composition["spec"]["pipeline"]:
        req = request(composite, observed, step.get("input", {}), desired, context, caller, structs)
        rsp = run_step(run, req, objects, caller, structs)
        results.extend((step["step"], result) for result in rsp.results)
        if any(r.severity == fnv1.SEVERITY_FATAL for r in rsp.results):
            break
        desired, context = rsp.desired, rsp.context
    return rsp, results


def first_names(names: list[str], shown: int = 3) -> str:
    """crossplane-runtime's `StableNAndSomeMore`: sorted, the first `shown`, then how many
    more; exactly `shown` names end ", and <last>"."""
    names = sorted(names)
    if len(names) > shown:
        return f"{', '.join(names[:shown])}, and {len(names) - shown} more"
    if len(names) == shown:
        return f"{', '.join(names[:-1])}, and {names[-1]}"
    return ", ".join(names)


def composite_conditions(
    rsp: fnv1.RunFunctionResponse, reconciler: bool = True
) -> list[dict[str, str]]:
    """The XR conditions Crossplane derives from a final response: Ready from the composed
    resources' readiness (the composite's own, when the function set it, supersedes it and
    carries no message), Synced (the reconciler's, which `crossplane render` does not set),
    then the function's conditions."""
    unready = sorted(n for n, r in rsp.desired.resources.items() if r.ready != fnv1.READY_TRUE)
    ready = not unready
    explicit = rsp.desired.composite.ready != fnv1.READY_UNSPECIFIED
    if explicit:
        ready = rsp.desired.composite.ready == fnv1.READY_TRUE
    conditions = [
        {"type": "Ready", "status": str(ready), "reason": "Available" if ready else "Creating"}
    ]
    if not explicit and unready:
        conditions[0]["message"] = f"Unready resources: {first_names(unready)}"
    if reconciler:
        conditions.append({"type": "Synced", "status": "True", "reason": "ReconcileSuccess"})
    for condition in rsp.conditions:
        status = fnv1.Status.Name(condition.status).removeprefix("STATUS_CONDITION_").title()
        found = {"type": condition.type, "status": status, "reason": condition.reason}
        if condition.message:
            found["message"] = condition.message
        conditions.append(found)
    return conditions
