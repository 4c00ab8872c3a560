"""gpuclass: a GPU offer's availability and health (seed 003), status only.

`status.free` counts free units of the class's device-plugin resource over eligible nodes
(Ready, not cordoned, no NoSchedule/NoExecute taint the class does not tolerate);
`status.maxFreePerNode` is the largest of them. They are observations, not reservations.
Conditions: `ResourceNameConflict` (another, older class advertises the same resource: this
offer is not available), `ResourceNameNotPermitted` (KubeVirt's permittedHostDevices lacks it),
`LicenseSecretMissing` (a licensed class's source Secret or token key is absent). License token
bytes are only tested for presence; they never appear in any output.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from functions.core import apis, labels, names, quantity, reasons
from functions.core.quantity import QuantityError
from functions.handlers.base import Handler, Request, Requirement
from functions.handlers.desired import Desired
from functions.handlers.inputs import CATALOG, catalog_settings
from functions.handlers.readiness import condition
from functions.views import View

BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def requirements(request: Request) -> dict[str, Requirement]:
    found = {
        "catalog": CATALOG,
        "classes": Requirement(apis.GPU_CLASS, "GPUClass"),
        "kubevirt": Requirement(apis.KUBEVIRT, "KubeVirt"),
        "nodes": Requirement(apis.CORE, "Node"),
        "launchers": Requirement(apis.CORE, "Pod", match_labels=labels.VIRT_LAUNCHER),
    }
    secret = request.xr.str("spec", "license", "secretName")
    if secret:
        # The namespace is the Catalog's licenseNamespace: once the Catalog is read, this
        # selector stays the same on every later call.
        namespace = catalog_settings(request, Desired()).license_namespace
        found["license"] = Requirement(apis.CORE, "Secret", match_name=secret, namespace=namespace)
    return found


def compose(request: Request) -> Desired:
    desired = Desired()
    spec = request.xr.view("spec")
    resource = spec.str("source", "devicePlugin", "resourceName")
    conflict = conflicting_class_of(request.xr, request.required("classes") or [])
    permitted = is_permitted(request.required("kubevirt"), resource)
    license_problem = license_missing(request, spec)

    desired.condition(
        reasons.RESOURCE_NAME_CONFLICT,
        conflict is not None,
        reasons.CONFLICT if conflict else reasons.UNIQUE,
        f"class {conflict} already uses {resource}; this offer is not available — give each "
        "offer its own advertised resource"
        if conflict
        else "",
    )
    desired.condition(
        reasons.RESOURCE_NAME_NOT_PERMITTED,
        not permitted,
        reasons.PERMITTED if permitted else reasons.NOT_PERMITTED,
        ""
        if permitted
        else f"{resource} is missing from the KubeVirt CR's permittedHostDevices; configure the "
        "VM-facing GPU path and the table before retrying",
    )
    license_reason = reasons.PRESENT if spec.has("license") else reasons.NOT_LICENSED
    desired.condition(
        reasons.LICENSE_SECRET_MISSING,
        license_problem is not None,
        reasons.MISSING if license_problem else license_reason,
        license_problem or "",
    )
    free = [] if conflict else free_per_node(request, spec, resource)
    desired.status = {
        "resourceName": resource,
        "free": sum(free),
        "maxFreePerNode": max(free, default=0),
    }
    desired.composite_ready = conflict is None and permitted and license_problem is None
    return desired


def conflicting_class_of(gpu_class: View, classes: list[View]) -> str | None:
    """The older class (by creation, then name) that advertises the same resource, if any."""
    resource = gpu_class.str("spec", "source", "devicePlugin", "resourceName")
    mine = (gpu_class.str("metadata", "creationTimestamp"), gpu_class.name)
    for other in classes:
        if other.name == gpu_class.name:
            continue
        if other.str("spec", "source", "devicePlugin", "resourceName") != resource:
            continue
        if (other.str("metadata", "creationTimestamp"), other.name) < mine:
            return other.name
    return None


def is_permitted(kubevirts: list[View] | None, resource: str) -> bool:
    for kubevirt in kubevirts or []:
        devices = kubevirt.view("spec", "configuration", "permittedHostDevices")
        for kind in ("pciHostDevices", "mediatedDevices", "usb"):
            if any(d.str("resourceName") == resource for d in devices.list(kind).views()):
                return True
    return False


def license_missing(request: Request, spec: View) -> str | None:
    secret_name = spec.str("license", "secretName")
    if not secret_name:
        return None
    found = request.required("license")
    if found is None:
        return None  # not read yet; the next call has it
    if not found:
        return f"license Secret {secret_name} not found in the license namespace; create it through the hoster's secret management"
    token = names.LICENSE_KEY
    if not found[0].str("data", token) and not found[0].str("stringData", token):
        return f"license Secret {secret_name} has no {token} key"
    return None


def free_per_node(request: Request, spec: View, resource: str) -> list[int]:
    tolerations = list(spec.list("tolerations").views())
    used: dict[str, int] = {}
    for pod in request.required("launchers") or []:
        node = pod.str("spec", "nodeName")
        if node and pod.str("status", "phase") not in ("Succeeded", "Failed"):
            used[node] = used.get(node, 0) + units_requested(pod, resource)
    free = []
    for node in request.required("nodes") or []:
        if not eligible(node, tolerations):
            continue
        allocatable = node.get("status", "allocatable", resource)
        if allocatable is None:
            continue
        try:
            total = quantity.floor(quantity.parse(allocatable))
        except QuantityError:
            continue
        free.append(max(0, total - used.get(node.name, 0)))
    return free


def units_requested(pod: View, resource: str) -> int:
    total = 0
    for container in pod.list("spec", "containers").views():
        value = container.get("resources", "limits", resource) or container.get(
            "resources", "requests", resource
        )
        if value is not None:
            try:
                total += quantity.floor(quantity.parse(value))
            except QuantityError:
                continue
    return total


def eligible(node: View, tolerations: list[Mapping[str, Any]]) -> bool:
    """Ready, not cordoned, and every NoSchedule/NoExecute taint tolerated by the class."""
    if condition(node, "Ready") != "True" or node.bool("spec", "unschedulable"):
        return False
    return all(
        any(tolerates(t, taint) for t in tolerations)
        for taint in node.list("spec", "taints").views()
        if taint.str("effect") in BLOCKING_EFFECTS
    )


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' toleration rule (Equal by default); reads dicts and Struct views alike."""
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if toleration.get("operator") == "Exists":
        return not key or key == taint.get("key")
    return key == (taint.get("key") or "") and (toleration.get("value") or "") == (
        taint.get("value") or ""
    )


HANDLER = Handler(
    "gpuclass",
    frozenset({"GPUClass"}),
    compose,
    requirements,
    ttl=datetime.timedelta(seconds=30),  # nodes and launcher Pods are required, not watched
)
