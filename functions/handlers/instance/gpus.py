"""GPU class entries resolved to GPU devices, for a VM Instance and a KubernetesNodes worker alike.

Seed 003's selection rules: an entry selects exactly one of `className` and `name`; a list holds
class entries or raw entries, never both; a class name is a DNS label; `count` (default 1) is a
whole number from 1 to 1024 and the entries expand to at most 1024 units per VMI. A class entry
is refused when its class is missing, deleting or conflicting, its resource is not permitted by
KubeVirt, or it is a vGPU class where vGPU is barred (not entitled; a worker pool) — and so is
a raw entry whose resource is a vGPU (a mediated device, or a vGPU class's resource); a VM takes
vGPUs from one class only, and each class within its per-VM limit: `maxCount`, else 1 for vGPU,
else the most GPUs of the resource one eligible node has — which the class's own reconcile
publishes as `status.maxPerNode`, so that a VM's reconcile never requires every Node. No
eligible node advertising the resource yet (or the class not yet observed) is a shortage — the
VM waits — never a limit of zero.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from functions.core import apis, names, reasons
from functions.core.requests import Refusal
from functions.core.settings import DNS_LABEL
from functions.handlers import gpuclass
from functions.handlers.base import Request, Requirement
from functions.handlers.instance.outcome import Waiting
from functions.views import View

MAX_UNITS = 1024
# The XRD's rules in its words (compositions/xrds/instance.yaml), which the handler applies where
# no API server does: offline render, and a rule at the schema's root before Crossplane 2.2
# (tests/test_messages.py holds the two equal).
ONE_KIND_RULE = "a gpus list contains either class entries or raw name entries, never both"
ONE_SELECTOR_RULE = "an entry selects exactly one of className and name"
COUNT_RULE = "count belongs to class entries only"


def class_requirements() -> dict[str, Requirement]:
    """What resolving class entries reads (the VM runtime and KubernetesNodes alike)."""
    return {
        "gpuclasses": Requirement(apis.GPU_CLASS, "GPUClass"),
        "kubevirt": Requirement(apis.KUBEVIRT, "KubeVirt"),
    }


# --- what class entries read -------------------------------------------------------------------


@dataclass(frozen=True)
class VgpuBar:
    """Why a vGPU cannot be taken here: the reason, and message templates for a class entry
    ({name}) and for a raw entry naming a vGPU resource ({name}, {what}: why it is a vGPU);
    no raw template: raw entries are not judged (a worker pool takes class entries only)."""

    reason: str
    message: str
    raw_message: str = ""


@dataclass(frozen=True)
class Offers:
    """The catalog as class entries read it: the classes by name, the resources KubeVirt
    permits (and of them, its mediated devices: vGPUs), and any vGPU bar."""

    classes: Mapping[str, gpuclass.Offer]
    permitted: frozenset[str]
    vgpu_bar: VgpuBar | None = None
    mediated: frozenset[str] = frozenset()


READING = Waiting(reasons.READING_GPU_CLASSES, "spec.gpus: reading the GPU classes")


def read_classes(request: Request) -> Offers | None:
    """The classes and what KubeVirt permits; None while either is unread."""
    classes = gpuclass.offers(request, "gpuclasses")
    permitted = gpuclass.permitted_resources(request, "kubevirt")
    mediated = request.required_read("kubevirt", mediated_by)
    if classes is None or permitted is None or mediated is None:
        return None
    by_name = {offer.name: offer for offer in classes}
    return Offers(by_name, permitted, mediated=frozenset().union(*mediated))


def mediated_by(kubevirt: View) -> frozenset[str]:
    """The mediated devices (vGPU profiles) one KubeVirt CR lets VMs take."""
    devices = kubevirt.list("spec", "configuration", "permittedHostDevices", "mediatedDevices")
    return frozenset(d.str("resourceName") for d in devices.views()) - {""}


def read_offers(request: Request, platform_entitled: bool) -> Offers | Waiting:
    """The catalog and the namespace's vGPU entitlement; waiting while any is unread."""
    offers = read_classes(request)
    if offers is None or gpuclass.entitlement_unread(request):
        return READING
    why = gpuclass.vgpu_not_entitled(platform_entitled, request)
    if why is None:
        return offers
    template = "GPU class {name} is a vGPU offer and " + why
    raw = "{name} is a vGPU ({what}) and " + why + "; a raw entry is no substitute for it"
    return replace(offers, vgpu_bar=VgpuBar(reasons.VGPU_NOT_ENTITLED, template, raw))


# --- class entries → GPU devices ---------------------------------------------------------------


@dataclass
class Resolved:
    """What the gpus entries come to: devices, tolerations, a license to deliver, shortages."""

    devices: list[str] = field(default_factory=list)  # one deviceName per GPU unit
    tolerations: list[dict] = field(default_factory=list)
    license_secret: str = ""  # the source Secret's name, for a licensed vGPU class
    feature_type: int = gpuclass.DEFAULT_FEATURE_TYPE
    shortages: list[str] = field(default_factory=list)  # resources no eligible node advertises


def resolve(entries: list[View], offers: Offers, at: str = "spec.gpus") -> Resolved | list[Refusal]:
    """The gpus entries as devices, or every reason they cannot be started now."""
    refusals = entry_refusals(entries, at)
    if refusals:
        return refusals
    by_name = offers.classes
    resolved, counts = Resolved(), dict[str, int]()
    for index, entry in enumerate(entries):
        if not entry.has("className"):
            refusal = raw_refusal(f"{at}[{index}].name", entry.str("name"), offers)
            refusals += [refusal] if refusal is not None else []
            resolved.devices.append(entry.str("name"))
            continue
        name, count = entry.str("className"), entry_count(entry)
        gpu_class = by_name.get(name)
        refusal = class_refusal(f"{at}[{index}].className", name, gpu_class, offers)
        if refusal is not None or gpu_class is None:
            refusals += [refusal] if refusal is not None else []
            continue
        counts[name] = counts.get(name, 0) + count
        take(resolved, gpu_class, count)
    refusals += vgpu_class_refusals(entries, by_name, at)
    refusals += limit_refusals(counts, by_name, resolved, at)
    return refusals or resolved


def take(resolved: Resolved, gpu_class: gpuclass.Offer, count: int) -> None:
    resolved.devices += [gpu_class.resource] * count
    for toleration in gpu_class.tolerations:
        if toleration not in resolved.tolerations:
            resolved.tolerations.append(dict(toleration))
    if gpu_class.license_secret:
        resolved.license_secret = gpu_class.license_secret
        resolved.feature_type = gpu_class.feature_type


def entry_count(entry: View) -> int:
    count = entry.get("count")
    return 1 if count is None else int(count)


def entry_refusals(entries: list[View], at: str) -> list[Refusal]:
    """The XRD's rules on the entries, for offline render and Crossplane before 2.2."""
    has_class = [e.has("className") for e in entries]
    if any(has_class) and not all(has_class):
        return [Refusal(at, ONE_KIND_RULE, reasons.INVALID_GPUS)]
    refusals = []
    for index, entry in enumerate(entries):
        refusal = entry_refusal(entry, f"{at}[{index}]")
        if refusal is not None:
            refusals.append(refusal)
    return refusals


def entry_refusal(entry: View, at: str) -> Refusal | None:
    if entry.has("className") == entry.has("name"):
        return Refusal(at, ONE_SELECTOR_RULE, reasons.INVALID_GPUS)
    if not entry.has("className"):
        if entry.has("count"):
            return Refusal(at, COUNT_RULE, reasons.INVALID_GPUS)
        return None
    name = entry.str("className")
    if len(name) > names.LABEL_MAX or not re.fullmatch(DNS_LABEL, name):
        message = (
            f"{name!r} is not a GPU class name: class names are DNS labels of at most 63 "
            "characters; select one from `kubectl get gpuclasses`"
        )
        return Refusal(f"{at}.className", message, reasons.INVALID_GPUS)
    count = entry.get("count")
    if count is not None and not (gpuclass.whole(count) and 1 <= count <= MAX_UNITS):
        message = (
            f"must be a whole number from 1 to {MAX_UNITS}, got {count!r}; omit it for one unit"
        )
        return Refusal(f"{at}.count", message, reasons.INVALID_GPUS)
    return None


def class_refusal(
    at: str, name: str, gpu_class: gpuclass.Offer | None, offers: Offers
) -> Refusal | None:
    """Why this class cannot be started now (seed 003's refusals, in its terms)."""
    if gpu_class is None:
        message = f"GPU class {name} not found: select one from `kubectl get gpuclasses`"
        return Refusal(at, message, reasons.GPU_CLASS_NOT_FOUND)
    if gpu_class.deleting:
        message = f"GPU class {name} is being deleted: select another class"
        return Refusal(at, message, reasons.GPU_CLASS_DELETING)
    resource = gpu_class.resource
    other = gpuclass.conflicting_class_of(gpu_class, offers.classes.values())
    if other:
        message = (
            f"GPU class {name} is not available: class {other} already uses its resource {resource}"
        )
        return Refusal(at, message, reasons.GPU_CLASS_CONFLICT)
    if resource not in offers.permitted:
        message = f"GPU class {name}: its resource {resource} is missing from KubeVirt's permitted-device table"
        return Refusal(at, message, reasons.RESOURCE_NOT_PERMITTED)
    if gpu_class.vgpu and offers.vgpu_bar is not None:
        bar = offers.vgpu_bar
        return Refusal(at, bar.message.format(name=name), bar.reason)
    return None


def raw_refusal(at: str, resource: str, offers: Offers) -> Refusal | None:
    """A raw entry takes no class and no license, and is no way around the vGPU bar (seed 003:
    raw entries "are not a substitute for vGPU entitlement"): a resource that is a vGPU — a
    mediated device KubeVirt permits, or a vGPU class's resource — is barred as the class is."""
    bar = offers.vgpu_bar
    if bar is None or not bar.raw_message:
        return None
    what = vgpu_of(resource, offers)
    if not what:
        return None
    return Refusal(at, bar.raw_message.format(name=resource, what=what), bar.reason)


def vgpu_of(resource: str, offers: Offers) -> str:
    """Why `resource` is a vGPU, in words; "" when it is not one."""
    if resource in offers.mediated:
        return "a mediated device in KubeVirt's permitted-device table"
    classes = sorted(c.name for c in offers.classes.values() if c.vgpu and c.resource == resource)
    return f"the resource of vGPU class {classes[0]}" if classes else ""


def vgpu_class_refusals(
    entries: list[View], by_name: Mapping[str, gpuclass.Offer], at: str
) -> list[Refusal]:
    vgpu: list[str] = []
    for entry in entries:
        gpu_class = by_name.get(entry.str("className"))
        if gpu_class is None or not gpu_class.vgpu:
            continue
        if gpu_class.name not in vgpu:
            vgpu.append(gpu_class.name)
    if len(vgpu) <= 1:
        return []
    message = f"a VM may take vGPUs from only one class, got {' and '.join(vgpu)}"
    return [Refusal(at, message, reasons.INVALID_GPUS)]


def limit_refusals(
    counts: Mapping[str, int],
    by_name: Mapping[str, gpuclass.Offer],
    resolved: Resolved,
    at: str,
) -> list[Refusal]:
    """Each class within its per-VM limit, all within 1024 units; no limit yet is a shortage."""
    refusals = []
    for name, count in counts.items():
        limit = per_vm_limit(by_name[name])
        if limit is None:
            resolved.shortages.append(by_name[name].resource)
        elif count > limit:
            message = f"GPU class {name} allows at most {limit} units per VM, requested {count}"
            refusals.append(Refusal(at, message, reasons.INVALID_GPUS))
    if len(resolved.devices) > MAX_UNITS:
        message = f"the gpus entries expand to {len(resolved.devices)} GPU units; at most {MAX_UNITS} per VMI"
        refusals.append(Refusal(at, message, reasons.INVALID_GPUS))
    return refusals


def per_vm_limit(gpu_class: gpuclass.Offer) -> int | None:
    """maxCount; unset: 1 for vGPU, else the most GPUs of the resource one eligible node has
    (Ready, schedulable, its taints tolerated), as the class's status observed it — None while
    none advertises it: a shortage."""
    if gpu_class.max_count is not None:
        return gpu_class.max_count
    if gpu_class.vgpu:
        return 1
    return gpu_class.max_per_node
