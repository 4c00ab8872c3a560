"""Kueue v0.19.2's DRA integration (KueueDRAIntegration, beta and on): what a Pod's
ResourceClaims add to its Workload's requests, or why the Workload is inadmissible.

As pkg/controller/core/workload_controller.go and pkg/dra/claims.go do it, for a pending
Workload whose pod set names claims:
- an entry naming a ResourceClaim itself makes it inadmissible: "KueueDRAIntegration feature
  does not support use of resource claims" (Requeued: "DRA resource claims not supported");
- each entry naming a `resourceClaimTemplateName` is read in the Pod's namespace (missing: an
  internal error, retried); each request is counted per DeviceClass
  (`countDevicesPerClass`): `exactly` with `ExactCount` adds its `count`; `firstAvailable`, a
  request without `exactly`, `adminAccess` and allocation mode `All` are refused;
- a request with CEL selectors must find as many devices in the cluster's ResourceSlices as it
  asks for, matching its class's selectors and its own (allocated or not; a device counted
  once per claim): else "insufficient matching devices" (retried as slices are published);
- each DeviceClass becomes the logical resource its `resources.deviceClassMappings` entry
  names; a class no mapping names makes it inadmissible ("is not mapped in DRA
  configuration").
The first error ends the walk. Errors read as apimachinery's field errors print them (`<path>:
Internal error: <detail>`, `<path>: Not found: "<value>"`, `<path>: Invalid value: ...`), the
Workload's QuotaReserved False, reason Inadmissible (UnadmittedWorkloadsObservability is off),
and Requeued False, the same. The counts are added to the pod set's requests after the resource
transformations (`totalRequestsFromPodSets`): no transformation applies to them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from gpustack_sim.client import Client
from gpustack_sim.dynamicresources import matches, selector_expressions
from gpustack_sim.validation import cel_program

CLAIMS_UNSUPPORTED = "KueueDRAIntegration feature does not support use of resource claims"
CLAIMS_UNSUPPORTED_REQUEUED = "DRA resource claims not supported"
INADMISSIBLE = "Inadmissible"


class DraError(Exception):
    """Why Kueue cannot count a Workload's claims: the QuotaReserved and Requeued messages."""

    def __init__(self, message: str, requeued: str = ""):
        super().__init__(message)
        self.message, self.requeued = message, requeued or message


def dra_requests(
    api: Client, pod: Mapping[str, Any], mappings: Sequence[Mapping[str, Any]], pod_set: str
) -> dict[str, Fraction]:
    """The logical resources the Pod's claims add to its pod set (`pod_set`, index 0);
    DraError where Kueue refuses them."""
    entries = pod["spec"].get("resourceClaims") or []
    if any(entry.get("resourceClaimName") for entry in entries):
        raise DraError(CLAIMS_UNSUPPORTED, CLAIMS_UNSUPPORTED_REQUEUED)
    logical = {c: m["name"] for m in mappings for c in m.get("deviceClassNames") or []}
    counted: dict[str, Fraction] = {}
    for index, entry in enumerate(entries):
        template_name = entry.get("resourceClaimTemplateName")
        if not template_name:
            continue
        base = f"spec.podSets[0].template.spec.resourceClaims[{index}]"
        spec = _claim_spec(api, pod, template_name, base, pod_set)
        per_class = count_devices_per_class(spec, base, template_name)
        _validate_cel_against_devices(api, spec, base, template_name)
        for device_class, count in per_class.items():
            if device_class not in logical:
                detail = f"DeviceClass {device_class} is not mapped in DRA configuration for podset {pod_set}"
                raise DraError(not_found(f"{base}.resourceClaimTemplateName", detail))
            name = logical[device_class]
            counted[name] = counted.get(name, Fraction(0)) + count
    return counted


def _claim_spec(
    api: Client, pod: Mapping[str, Any], template_name: str, base: str, pod_set: str
) -> Mapping[str, Any]:
    template = api.peek("ResourceClaimTemplate", template_name, pod["metadata"]["namespace"])
    if template is None:
        missing = f'resourceclaimtemplates.resource.k8s.io "{template_name}" not found'
        detail = f"failed to get claim spec for ResourceClaimTemplate {template_name} in podset {pod_set}: {missing}"
        raise DraError(internal(base, detail))
    return (template.get("spec") or {}).get("spec") or {}


def count_devices_per_class(spec: Mapping[str, Any], base: str, template: str) -> dict[str, int]:
    """Devices asked for per DeviceClass (`countDevicesPerClass`); DraError for a request of
    a kind Kueue does not count."""
    counted: dict[str, int] = {}
    for i, request in enumerate((spec.get("devices") or {}).get("requests") or []):
        path = f"devices.requests[{i}]"
        exactly = request.get("exactly")
        if request.get("firstAvailable") is not None:
            _refuse(base, template, path, None, "FirstAvailable device selection is not supported")
        if exactly is None:
            _refuse(base, template, path, None, "Exactly must be set if FirstAvailable is nil")
        _compile_selectors(exactly, base, template, f"{path}.exactly.selectors")
        mode = exactly.get("allocationMode") or "ExactCount"  # the API server's default
        if exactly.get("adminAccess"):
            _refuse(
                base, template, f"{path}.exactly.adminAccess", None, "AdminAccess is not supported"
            )
        if mode == "All":
            _refuse(
                base,
                template,
                f"{path}.exactly.allocationMode",
                mode,
                "AllocationMode 'All' is not supported",
            )
        if mode != "ExactCount":
            _refuse(
                base,
                template,
                f"{path}.exactly.allocationMode",
                mode,
                f"unsupported allocation mode: {mode}",
            )
        device_class = exactly.get("deviceClassName") or ""
        if device_class:
            counted[device_class] = counted.get(device_class, 0) + int(exactly.get("count") or 1)
    return counted


def _compile_selectors(exactly: Mapping[str, Any], base: str, template: str, path: str) -> None:
    for k, expression in enumerate(selector_expressions(exactly.get("selectors"))):
        try:
            cel_program(expression)
        except ValueError as error:
            inner = invalid(
                f"{path}[{k}].cel.expression", expression, f"CEL compilation failed: {error}"
            )
            _refuse(base, template, path, None, inner)


def _refuse(base: str, template: str, path: str, value: Any, detail: str) -> None:
    """A request error of `countDevicesPerClass`, its path and detail given the claim's."""
    raise DraError(invalid(f"{base}.{path}", value, f"ResourceClaimTemplate {template}: {detail}"))


def _validate_cel_against_devices(
    api: Client, spec: Mapping[str, Any], base: str, template: str
) -> None:
    """`validateCELSelectorsAgainstDevices`: each request with CEL selectors must match as many
    of the cluster's devices as it counts (a device matched once across the claim's requests)."""
    requests = [
        (i, r["exactly"])
        for i, r in enumerate((spec.get("devices") or {}).get("requests") or [])
        if (r.get("exactly") or {}).get("selectors")
        and selector_expressions(r["exactly"]["selectors"])
    ]
    if not requests:
        return
    devices = [
        (s["spec"]["driver"], device)
        for s in api.peek_list("ResourceSlice")
        for device in s["spec"].get("devices") or []
    ]
    matched: set[int] = set()
    errors = []
    for i, exactly in requests:
        class_name = exactly.get("deviceClassName", "")
        found = api.peek("DeviceClass", class_name)
        path = f"{base}.devices.requests[{i}]"
        if found is None:
            missing = f'deviceclasses.resource.k8s.io "{class_name}" not found'
            errors.append(
                internal(
                    path,
                    f"ResourceClaimTemplate {template}: failed to get DeviceClass {class_name}: {missing}",
                )
            )
            continue
        selectors = selector_expressions((found.get("spec") or {}).get("selectors"))
        selectors += selector_expressions(exactly["selectors"])
        wanted = int(exactly.get("count") or 1)
        count = 0
        for index, (driver, device) in enumerate(devices):
            if count >= wanted:
                break
            if index not in matched and all(matches(e, driver, device) for e in selectors):
                matched.add(index)
                count += 1
        if count < wanted:
            detail = (
                f"insufficient matching devices for CEL selector in DeviceClass {class_name}: "
                f"{count} device(s) match in the cluster but {wanted} requested"
            )
            errors.append(
                internal(f"{path}.exactly.selectors", f"ResourceClaimTemplate {template}: {detail}")
            )
    if errors:
        raise DraError(aggregate(errors))


# --- apimachinery's field errors, as they print ---------------------------------------------


def internal(path: str, detail: str) -> str:
    return f"{path}: Internal error: {detail}"


def not_found(path: str, value: str) -> str:
    return f"{path}: Not found: {json.dumps(value)}"


def invalid(path: str, value: Any, detail: str) -> str:
    shown = "null" if value is None else json.dumps(value)
    return f"{path}: Invalid value: {shown}: {detail}"


def aggregate(errors: Sequence[str]) -> str:
    """`ToAggregate().Error()`: one error alone, several in brackets."""
    return errors[0] if len(errors) == 1 else f"[{', '.join(errors)}]"
