"""The VirtualMachine runtime: GPUClass entries resolved to a KubeVirt VMI (DESIGN §3.4, seed 003).

Each class entry becomes `count` entries of `spec.domain.devices.gpus` whose `deviceName` is the
class's device-plugin resource (never the class name), the class's tolerations are copied, and a
licensed vGPU class adds a `GPULICENSE` disk from a copy of its license Secret in the tenant's
namespace — the VMI waits until that copy exists. Raw `{name}` entries pass through. A missing,
deleting or conflicting class, an unpermitted resource, vGPU without entitlement, mixed entry
kinds, more than one vGPU class, a count over the class's per-VM limit or over 1024 units is
refused; a shortage of capacity never is: the VMI waits for scheduling.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from functions.core import apis, labels, names, quantity, reasons
from functions.core.quantity import QuantityError
from functions.core.requests import InstanceTypeFacts, Plan, Refusal, Wait, plan
from functions.handlers.base import Request, Requirement
from functions.handlers.desired import Desired
from functions.handlers.gpuclass import conflicting_class_of, is_permitted
from functions.handlers.inputs import catalog_settings
from functions.handlers.instance import lifecycle
from functions.handlers.instance.outcome import Instance, Outcome, Running, Waiting, refused
from functions.views import View

MAX_UNITS = 1024
LICENSE_DISK = "gpulicense"


def requirements(request: Request) -> dict[str, Requirement]:
    """GPU classes, KubeVirt's permitted devices and the nodes; once the classes are read, the
    license Secret of a licensed vGPU class they name (the same selector on every later call)."""
    found = {
        "gpuclasses": Requirement(apis.GPU_CLASS, "GPUClass"),
        "kubevirt": Requirement(apis.KUBEVIRT, "KubeVirt"),
        "nodes": Requirement(apis.CORE, "Node"),
    }
    named = {e.str("className") for e in request.xr.list("spec", "gpus").views()}
    for gpu_class in request.required("gpuclasses") or []:
        secret = gpu_class.str("spec", "license", "secretName")
        if gpu_class.name in named and gpu_class.str("spec", "mode") == "vgpu" and secret:
            namespace = catalog_settings(request, Desired()).license_namespace
            found["license"] = Requirement(
                apis.CORE, "Secret", match_name=secret, namespace=namespace
            )
    return found


def start(instance: Instance, facts: InstanceTypeFacts, hostname: str | None) -> Outcome:
    """A VMI: CPU and memory from the InstanceType, GPUs from the gpus entries."""
    spec = instance.spec
    resources = spec.view("resources").to_dict()
    taken = sorted(k for k in resources if k.startswith("accelerator"))
    if taken or spec.has("additionalVolumes"):
        field = f"spec.resources.{taken[0]}" if taken else "spec.additionalVolumes"
        message = (
            "a VirtualMachine takes its GPUs through spec.gpus and mounts only its workspace "
            f"disk: clear {field}"
        )
        return refused(Refusal(field, message, reasons.INVALID_FOR_VIRTUAL_MACHINE))
    placed = lifecycle.placement(instance, hostname)
    if not (placed is None or isinstance(placed, str)):
        return placed
    if facts.acceleratable:
        resources["accelerator"] = "0"  # size one unit of the type, take no card
    sized = plan(resources, facts, overcommit=False)
    if isinstance(sized, Wait):
        return Waiting(sized.reason, sized.message)
    if isinstance(sized, list):
        return refused(*sized)
    request = instance.request
    required = [request.required(n) for n in ("gpuclasses", "kubevirt", "nodes")]
    if any(found is None for found in required):
        return Waiting(reasons.READING_GPU_CLASSES, "spec.gpus: reading the GPU classes")
    entries = list(spec.list("gpus").views())
    resolved = resolve(entries, *required, instance.settings.vgpu_entitlement)  # type: ignore[arg-type]
    if isinstance(resolved, list):
        return refused(*resolved)
    composed: dict[str, dict] = {}
    if resolved.license_secret:
        delivered = deliver_license(instance, resolved.license_secret)
        if isinstance(delivered, Waiting):
            return delivered
        composed["license"] = delivered
    observed = request.observed("vmi")
    composed["vmi"] = render_vmi(spec, instance.name, instance.namespace, sized, resolved, placed)
    return Running(reasons.VMI_COMPOSED, composed, vmi_status(observed))


def deliver_license(instance: Instance, source_name: str) -> dict | Waiting:
    """The license Secret copied into the tenant's namespace; the VMI waits until it exists."""
    found = instance.request.required("license")
    namespace = instance.settings.license_namespace
    if not found or not found[0].str("data", names.LICENSE_KEY):
        return Waiting(
            reasons.WAITING_FOR_LICENSE,
            f"spec.gpus: waiting for license Secret {source_name} in {namespace} (key "
            f"{names.LICENSE_KEY}); the VM starts once it exists and never boots unlicensed",
        )
    copy = license_copy(instance.name, instance.namespace, found[0])
    if instance.request.observed("license") is None:
        message = "spec.gpus: copying the license Secret into the namespace"
        return Waiting(reasons.WAITING_FOR_LICENSE, message, {"license": copy})
    return copy


@dataclass
class Resolved:
    """What the gpus entries come to: devices, tolerations, and a license to deliver."""

    devices: list[str] = field(default_factory=list)  # one deviceName per GPU unit
    tolerations: list[dict] = field(default_factory=list)
    license_secret: str = ""  # the source Secret's name, for a licensed vGPU class


def class_name_refusals(entries: list[View]) -> list[Refusal]:
    has_class = [e.has("className") for e in entries]
    if any(has_class) and not all(has_class):
        return [
            Refusal(
                "spec.gpus",
                "a gpus list contains either class entries or raw name entries, never both",
                reasons.INVALID_GPUS,
            )
        ]
    return []


def resolve(
    entries: list[View],
    classes: list[View],
    kubevirts: list[View],
    nodes: list[View],
    entitled: bool,
) -> Resolved | list[Refusal]:
    refusals = class_name_refusals(entries)
    if refusals:
        return refusals
    by_name = {c.name: c for c in classes}
    resolved, counts, vgpu_classes = Resolved(), {}, []
    for index, entry in enumerate(entries):
        at = f"spec.gpus[{index}]"
        if not entry.has("className"):
            resolved.devices.append(entry.str("name"))
            continue
        name, count = entry.str("className"), int(entry.get("count") or 1)
        gpu_class = by_name.get(name)
        refusal = class_refusal(at, name, gpu_class, classes, kubevirts, entitled)
        if refusal:
            refusals.append(refusal)
            continue
        counts[name] = counts.get(name, 0) + count
        resource = gpu_class.str("spec", "source", "devicePlugin", "resourceName")
        resolved.devices += [resource] * count
        for toleration in gpu_class.list("spec", "tolerations").views():
            if toleration.to_dict() not in resolved.tolerations:
                resolved.tolerations.append(toleration.to_dict())
        if gpu_class.str("spec", "mode") == "vgpu":
            if name not in vgpu_classes:
                vgpu_classes.append(name)
            resolved.license_secret = gpu_class.str("spec", "license", "secretName")
    if len(vgpu_classes) > 1:
        refusals.append(
            Refusal(
                "spec.gpus",
                f"a VM may take vGPUs from only one class, got {' and '.join(vgpu_classes)}",
                reasons.INVALID_GPUS,
            )
        )
    for name, count in counts.items():
        limit = per_vm_limit(by_name[name], nodes)
        if count > limit:
            refusals.append(
                Refusal(
                    "spec.gpus",
                    f"GPU class {name} allows at most {limit} units per VM, requested {count}",
                    reasons.INVALID_GPUS,
                )
            )
    if len(resolved.devices) > MAX_UNITS:
        refusals.append(
            Refusal(
                "spec.gpus",
                f"the gpus entries expand to {len(resolved.devices)} GPU units; at most {MAX_UNITS} per VMI",
                reasons.INVALID_GPUS,
            )
        )
    return refusals or resolved


def class_refusal(
    at: str,
    name: str,
    gpu_class: View | None,
    classes: list[View],
    kubevirts: list[View],
    entitled: bool,
) -> Refusal | None:
    field_ = f"{at}.className"
    if gpu_class is None:
        return Refusal(
            field_,
            f"GPU class {name} not found: select one from `kubectl get gpuclasses`",
            reasons.GPU_CLASS_NOT_FOUND,
        )
    if gpu_class.has("metadata", "deletionTimestamp"):
        return Refusal(
            field_,
            f"GPU class {name} is being deleted: select another class",
            reasons.GPU_CLASS_DELETING,
        )
    resource = gpu_class.str("spec", "source", "devicePlugin", "resourceName")
    other = conflicting_class_of(gpu_class, classes)
    if other:
        return Refusal(
            field_,
            f"GPU class {name} is not available: class {other} already uses its resource {resource}",
            reasons.GPU_CLASS_CONFLICT,
        )
    if not is_permitted(kubevirts, resource):
        return Refusal(
            field_,
            f"GPU class {name}: its resource {resource} is missing from KubeVirt's permitted-device table",
            reasons.RESOURCE_NOT_PERMITTED,
        )
    if gpu_class.str("spec", "mode") == "vgpu" and not entitled:
        return Refusal(
            field_,
            f"GPU class {name} is a vGPU offer and vGPU is not entitled: enable the Catalog's "
            '"vgpuEntitlement" setting',
            reasons.VGPU_NOT_ENTITLED,
        )
    return None


def per_vm_limit(gpu_class: View, nodes: list[View]) -> int:
    """maxCount; unset: 1 for vGPU, one node's GPUs of the resource for passthrough."""
    if gpu_class.get("spec", "maxCount") is not None:
        return int(gpu_class.get("spec", "maxCount"))
    if gpu_class.str("spec", "mode") == "vgpu":
        return 1
    resource = gpu_class.str("spec", "source", "devicePlugin", "resourceName")
    largest = 0
    for node in nodes:
        try:
            largest = max(
                largest,
                quantity.floor(quantity.parse(node.get("status", "allocatable", resource) or 0)),
            )
        except QuantityError:
            continue
    return largest


def license_copy_name(instance: str) -> str:
    return f"{instance}-gpu-license"


def license_copy(instance: str, namespace: str, source: View) -> dict:
    """The source Secret's token, copied into the tenant's namespace for the GPULICENSE disk."""
    return {
        "apiVersion": apis.CORE,
        "kind": "Secret",
        "metadata": {"name": license_copy_name(instance), "namespace": namespace},
        "type": "Opaque",
        "data": {names.LICENSE_KEY: source.str("data", names.LICENSE_KEY)},
    }


def render_vmi(
    spec: View, name: str, namespace: str, plan: Plan, resolved: Resolved, hostname: str | None
) -> dict:
    disks = [
        {"name": "rootdisk", "disk": {"bus": "virtio"}},
        {"name": "workspace", "disk": {"bus": "virtio"}},
    ]
    volumes = [
        {"name": "rootdisk", "containerDisk": {"image": spec.str("image")}},
        {"name": "workspace", **workspace_disk(spec)},
    ]
    if resolved.license_secret:
        disks.append({"name": LICENSE_DISK, "serial": "GPULICENSE", "disk": {"bus": "virtio"}})
        volumes.append({"name": LICENSE_DISK, "secret": {"secretName": license_copy_name(name)}})
    vmi_spec: dict = {
        "domain": {
            "cpu": {"cores": quantity.ceil(plan.cpu)},
            "memory": {"guest": quantity.format_binary(plan.ram)},
            "devices": {
                "disks": disks,
                "gpus": [
                    {"name": f"gpu-{i}", "deviceName": device}
                    for i, device in enumerate(resolved.devices)
                ],
            },
        },
        "volumes": volumes,
    }
    if resolved.tolerations:
        vmi_spec["tolerations"] = resolved.tolerations
    if hostname:
        vmi_spec["nodeSelector"] = {labels.HOSTNAME: hostname}
    return {
        "apiVersion": apis.KUBEVIRT,
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {labels.INSTANCE: name},
        },
        "spec": vmi_spec,
    }


def workspace_disk(spec: View) -> dict:
    if spec.has("volume", "persistent"):
        return {"persistentVolumeClaim": {"claimName": spec.str("volume", "persistent", "name")}}
    return {"emptyDisk": {"capacity": str(spec.get("volume", "ephemeral", "capacity") or "1Gi")}}


def vmi_phase(vmi: View | None) -> tuple[str, str]:
    """The Instance phase from the VMI: Ready once it runs with its Ready condition."""
    if vmi is None:
        return "Starting", "composing the VirtualMachineInstance"
    phase = vmi.str("status", "phase") or "Pending"
    if phase == "Running":
        ready = next(
            (c for c in vmi.list("status", "conditions").views() if c.str("type") == "Ready"), None
        )
        if ready is not None and ready.str("status") == "True":
            return "Ready", ""
        return "Starting", ready.str("message") if ready is not None else ""
    if phase in ("Pending", "Scheduling"):
        return "Scheduling", "waiting for a node with the requested GPUs"
    return phase, ""


def vmi_status(vmi: View | None) -> dict:
    phase, message = vmi_phase(vmi)
    status: dict = {"phase": phase}
    if message:
        status["phaseMessage"] = message
    if vmi is not None and vmi.str("status", "nodeName"):
        status["nodeName"] = vmi.str("status", "nodeName")
    if vmi is not None:
        ips = [
            i.str("ipAddress")
            for i in vmi.list("status", "interfaces").views()
            if i.str("ipAddress")
        ]
        if ips:
            status["podIPs"] = ips
    return status
