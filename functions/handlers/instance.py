"""instance: a tenant's Instance becomes a Pod queued through Kueue (runtime Container).

Without admission webhooks, everything that needs other objects is checked here: the
InstanceType, the pinned Node, the gates, the claims. A refusal composes no Pod and says why —
a condition `Admitted=False` with a reason and a message naming the field, a Warning result,
`status.phase: Refused` — or, when a Pod already runs, a Fatal result that keeps it.

Lifecycle: `spec.stop` removes the Pod. Deleting or draining the InstanceType stops the Instance
and records the generation it stopped at; it stays stopped until its spec changes (the
walkthrough repoints `spec.type` and clears `stop`). Status mirrors the observed Pod.
The same handler composes an InstancePersistentVolume's claim.
"""

from __future__ import annotations

import contextlib
import datetime
import json

from functions.core import quantity
from functions.core.catalog import Settings
from functions.core.quantity import MIB, QuantityError
from functions.core.requests import InstanceTypeFacts, Refusal, plan
from functions.frame import Handler, InputError, Output, Request, Requirement
from functions.handlers import vm, volumes
from functions.handlers.common import API, CATALOG, catalog_settings, condition_status
from functions.handlers.pod import RUNTIME_CLASSES, PodInputs, render_pod, render_service
from functions.structs import View

ALLOCATION_ANNOTATION = "device.gpustack.ai/accelerator.allocated"
PRIVILEGED_GATE = "instancePrivilegedAllowed"
ADMITTED = "Admitted"
INSTANCE_KINDS = frozenset({"Instance", "XInstance"})
VOLUME_KINDS = frozenset({"InstancePersistentVolume", "XInstancePersistentVolume"})


class Refused(Exception):
    def __init__(self, *refusals: Refusal):
        super().__init__("; ".join(map(str, refusals)))
        self.refusals = refusals


class Waiting(Exception):
    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class InstanceHandler(Handler):
    name = "instance"
    kinds = INSTANCE_KINDS | VOLUME_KINDS
    ttl = datetime.timedelta(seconds=30)  # the InstanceType and Node are required, not watched

    def requirements(self, request: Request) -> dict[str, Requirement]:
        if request.kind in VOLUME_KINDS:
            return {}
        spec = request.xr.view("spec")
        found = {
            "catalog": CATALOG,
            "runtimeclasses": Requirement("node.k8s.io/v1", "RuntimeClass"),
        }
        if spec.str("type"):
            found["instancetype"] = Requirement(API, "InstanceType", match_name=spec.str("type"))
        if spec.str("nodeName"):
            found["node"] = Requirement("v1", "Node", match_name=spec.str("nodeName"))
        if spec.str("runtime") == "VirtualMachine":
            found |= vm_requirements(request)
        if volumes.claims(spec):
            found["claims"] = Requirement(
                "v1", "PersistentVolumeClaim", namespace=request.namespace
            )
            found["volumes"] = Requirement("v1", "PersistentVolume")
            found["storageclasses"] = Requirement("storage.k8s.io/v1", "StorageClass")
        return found

    def compose(self, request: Request, out: Output) -> None:
        if request.kind in VOLUME_KINDS:
            compose_claim(request, out)
            return
        InstanceComposer(request, out).compose()


class InstanceComposer:
    """One Instance's reconcile: decide, then compose the Pod or say why not."""

    def __init__(self, request: Request, out: Output):
        self.request, self.out = request, out
        self.xr = request.xr
        self.spec = request.xr.view("spec")
        self.name, self.namespace = request.name, request.namespace
        self.settings: Settings = catalog_settings(request)
        self.pod = request.observed("pod")

    def compose(self) -> None:
        try:
            if self.stopped():
                return
            self.start()
        except Refused as refused:
            self.refuse(refused.refusals)
        except Waiting as waiting:
            self.wait(waiting.reason, waiting.message)

    # --- lifecycle ------------------------------------------------------------------------

    def stopped(self) -> bool:
        generation = int(self.xr.get("metadata", "generation") or 0)
        stopped_at = self.xr.get("status", "stoppedGeneration")
        if self.spec.bool("stop"):
            self.stop("stopped by spec.stop")
            return True
        if stopped_at is not None and int(stopped_at) == generation:
            message = self.xr.str("status", "phaseMessage") or "stopped"
            self.stop(message, stopped_generation=generation)
            return True
        return False

    def stop(self, message: str, stopped_generation: int | None = None) -> None:
        """No Pod: Crossplane deletes the observed one; Stopped once it is gone."""
        status = {
            "phase": "Stopping" if self.pod is not None else "Stopped",
            "phaseMessage": message,
        }
        if stopped_generation is not None:
            status["stoppedGeneration"] = stopped_generation
        self.out.status = status
        self.out.condition(ADMITTED, False, "Stopped", message)
        self.out.composite_ready = False

    def drain(self, why: str) -> None:
        generation = int(self.xr.get("metadata", "generation") or 0)
        self.stop(
            f"{why}: the Instance stopped at generation {generation}; change its spec (for example "
            "spec.type) to start it again",
            stopped_generation=generation,
        )

    def start(self) -> None:
        if self.namespace in self.settings.reserved_namespaces:
            raise Refused(
                Refusal(
                    "metadata.namespace",
                    f"cannot create instance in reserved namespace {self.namespace}: use a tenant namespace",
                    "ReservedNamespace",
                )
            )
        instance_type = self.instance_type()
        if instance_type is None:
            return
        self.check_gates_and_shape()
        hostname = self.pinned_hostname()
        facts = facts_of(instance_type)
        if self.spec.str("runtime") == "VirtualMachine":
            self.start_vm(facts, self.claim_placement(hostname))
            return
        result = plan(self.spec.view("resources").to_dict(), facts, self.settings.overcommit)
        if isinstance(result, list):
            not_ready = [r for r in result if r.reason == "InstanceTypeNotReady"]
            if not_ready:
                raise Waiting("InstanceTypeNotReady", str(not_ready[0]))
            raise Refused(
                *(
                    Refusal(
                        r.field,
                        r.message,
                        r.reason if r.reason != "InvalidSpec" else "InvalidResources",
                    )
                    for r in result
                )
            )
        entrance = instance_type.str("status", "entrance")
        if not entrance:
            raise Waiting(
                "InstanceTypeNotReady",
                f"spec.type: instance type {facts.name} has no entrance yet; retry",
            )
        hostname = self.claim_placement(hostname)
        inputs = PodInputs(
            name=self.name,
            namespace=self.namespace,
            entrance=entrance,
            plan=result,
            manufacturer=facts.manufacturer,
            accelerator_key=instance_type.str("spec", "acceleratorGroup"),
            hostname=hostname,
            runtime_class=self.runtime_class(facts.manufacturer),
            fit_affinity=self.settings.workload_fit_affinity,
        )
        self.compose_pod(render_pod(self.spec, inputs))

    def instance_type(self) -> View | None:
        name = self.spec.str("type")
        if not name:
            raise Refused(Refusal("spec.type", "type must be specified", "InstanceTypeNotFound"))
        found = self.request.required("instancetype")
        if found is None:
            raise Waiting("ReadingInstanceType", f"spec.type: reading instance type {name}")
        instance_type = found[0] if found else None
        if instance_type is not None and instance_type.str("status", "phase") == "Draining":
            self.drain(f"instance type {name} is draining")
            return None
        if instance_type is not None and not instance_type.has("metadata", "deletionTimestamp"):
            return instance_type
        if self.pod is not None or self.xr.str("status", "phase") not in (
            "",
            "Refused",
            "Starting",
        ):
            self.drain(f"instance type {name} was deleted")
            return None
        raise Refused(
            Refusal(
                "spec.type",
                f"instance type {name} not found: pick one from `kubectl get instancetypes`",
                "InstanceTypeNotFound",
            )
        )

    def check_gates_and_shape(self) -> None:
        refusals = []
        held_privileged = self.pod is not None and any(
            c.bool("securityContext", "privileged")
            for c in self.pod.list("spec", "containers").views()
        )
        if self.spec.bool("privileged") and not (
            self.settings.privileged_allowed or held_privileged
        ):
            refusals.append(
                Refusal(
                    "spec.privileged",
                    f'privileged mode is not allowed: enable the Catalog\'s "{PRIVILEGED_GATE}" setting to allow it',
                    "PrivilegedNotAllowed",
                )
            )
        refusals += volumes.host_path_refusals(self.spec, self.settings.host_path_allowed, self.pod)
        refusals += [
            Refusal(r.field, r.message, "InvalidVolume") for r in volume_refusals(self.spec)
        ]
        if refusals:
            raise Refused(*refusals)

    def pinned_hostname(self) -> str | None:
        """The pin is a `kubernetes.io/hostname` nodeSelector read from the Node, never nodeName."""
        node_name = self.spec.str("nodeName")
        if not node_name:
            return None
        found = self.request.required("node")
        if found is None:
            raise Waiting("ReadingNode", f"spec.nodeName: reading node {node_name}")
        if found:
            return found[0].labels().get(volumes.HOSTNAME) or node_name
        if self.pod is not None:  # the node only has to exist when the Pod is first composed
            return self.pod.str("spec", "nodeSelector", volumes.HOSTNAME) or node_name
        raise Refused(
            Refusal(
                "spec.nodeName",
                f"node {node_name} not found: pick one from `kubectl get nodes`",
                "NodeNotFound",
            )
        )

    def claim_placement(self, hostname: str | None) -> str | None:
        if not self.settings.persistent_volume_placement:
            return hostname
        where = volumes.placement(
            volumes.claims(self.spec),
            self.request.required("claims"),
            self.request.required("volumes"),
            self.request.required("storageclasses"),
        )
        if where.waiting:
            raise Waiting("WaitingForVolume", where.waiting)
        if where.node and hostname and where.node != hostname:
            raise Refused(
                Refusal(
                    "spec.nodeName",
                    f"the pin to {hostname} conflicts with a node-local persistent volume on {where.node}",
                    "PlacementConflict",
                )
            )
        return hostname or where.node

    def start_vm(self, facts: InstanceTypeFacts, hostname: str | None) -> None:
        """A VMI: CPU and memory from the InstanceType, GPUs from the gpus entries."""
        resources = self.spec.view("resources").to_dict()
        taken = sorted(k for k in resources if k.startswith("accelerator"))
        if taken or self.spec.has("additionalVolumes"):
            field = f"spec.resources.{taken[0]}" if taken else "spec.additionalVolumes"
            raise Refused(
                Refusal(
                    field,
                    "a VirtualMachine takes its GPUs through spec.gpus and mounts only its workspace "
                    f"disk: clear {field}",
                    "InvalidForVirtualMachine",
                )
            )
        if facts.acceleratable:
            resources["accelerator"] = "0"  # size one unit of the type, take no card
        sized = plan(resources, facts, overcommit=False)
        if isinstance(sized, list):
            raise Refused(*(Refusal(r.field, r.message, "InvalidResources") for r in sized))
        required = [self.request.required(n) for n in ("gpuclasses", "kubevirt", "nodes")]
        if any(found is None for found in required):
            raise Waiting("ReadingGPUClasses", "spec.gpus: reading the GPU classes")
        entries = list(self.spec.list("gpus").views())
        resolved = vm.resolve(entries, *required, self.settings.vgpu_entitlement)
        if isinstance(resolved, list):
            raise Refused(*resolved)
        if resolved.license_secret and not self.deliver_license(resolved.license_secret):
            return
        observed = self.request.observed("vmi")
        vmi = vm.render_vmi(self.spec, self.name, self.namespace, sized, resolved, hostname)
        self.out.compose("vmi", vmi, ready=vm.vmi_phase(observed)[0] == "Ready")
        self.out.condition(ADMITTED, True, "VirtualMachineInstanceComposed")
        self.out.status = vm.vmi_status(observed)

    def deliver_license(self, source_name: str) -> bool:
        """Copy the license Secret into the tenant's namespace; True once the copy exists."""
        found = self.request.required("license")
        namespace = self.settings.license_namespace
        if not found or not found[0].str("data", vm.LICENSE_KEY):
            raise Waiting(
                "WaitingForLicense",
                f"spec.gpus: waiting for license Secret {source_name} in {namespace} (key "
                f"{vm.LICENSE_KEY}); the VM starts once it exists and never boots unlicensed",
            )
        copied = self.request.observed("license") is not None
        self.out.compose(
            "license", vm.license_copy(self.name, self.namespace, found[0]), ready=copied
        )
        if not copied:
            self.wait(
                "WaitingForLicense", "spec.gpus: copying the license Secret into the namespace"
            )
        return copied

    def runtime_class(self, manufacturer: str) -> str | None:
        wanted = RUNTIME_CLASSES.get(manufacturer)
        classes = {c.name for c in self.request.required("runtimeclasses") or []}
        return wanted if wanted in classes else None

    # --- output ---------------------------------------------------------------------------

    def compose_pod(self, pod: dict) -> None:
        if self.pod is not None:
            keep_placement_and_size(pod, self.pod)
        ready = condition_status(self.pod, "Ready") == "True"
        self.out.compose("pod", pod, ready=ready)
        service = render_service(self.spec, self.name, self.namespace)
        observed_service = self.request.observed("service")
        if service is not None:
            self.out.compose("service", service, ready=observed_service is not None)
        self.out.condition(ADMITTED, True, "PodComposed")
        self.out.status = pod_status(self.pod, observed_service)

    def refuse(self, refusals: tuple[Refusal, ...]) -> None:
        message = "; ".join(map(str, refusals))
        if self.pod is not None:  # a Fatal result keeps the running Pod untouched
            raise InputError(refusals[0].field, message.removeprefix(f"{refusals[0].field}: "))
        self.out.condition(ADMITTED, False, refusals[0].reason, message)
        self.out.warning(message, refusals[0].reason)
        self.out.status = {"phase": "Refused", "phaseMessage": message}
        self.out.composite_ready = False

    def wait(self, reason: str, message: str) -> None:
        self.out.condition(ADMITTED, False, reason, message)
        self.out.status = {"phase": "Starting", "phaseMessage": message}
        self.out.composite_ready = False


def vm_requirements(request: Request) -> dict[str, Requirement]:
    """GPU classes, KubeVirt's permitted devices and the nodes; once the classes are read, the
    license Secret of a licensed vGPU class they name (the same selector on every later call)."""
    found = {
        "gpuclasses": Requirement("cozystack.io/v1alpha1", "GPUClass"),
        "kubevirt": Requirement("kubevirt.io/v1", "KubeVirt"),
        "nodes": Requirement("v1", "Node"),
    }
    named = {e.str("className") for e in request.xr.list("spec", "gpus").views()}
    for gpu_class in request.required("gpuclasses") or []:
        secret = gpu_class.str("spec", "license", "secretName")
        if gpu_class.name in named and gpu_class.str("spec", "mode") == "vgpu" and secret:
            namespace = catalog_settings(request).license_namespace
            found["license"] = Requirement("v1", "Secret", match_name=secret, namespace=namespace)
    return found


def volume_refusals(spec: View) -> list[Refusal]:
    ephemeral, persistent = spec.has("volume", "ephemeral"), spec.has("volume", "persistent")
    refusals = []
    if ephemeral and persistent:
        refusals.append(
            Refusal("spec.volume", "cannot specify both ephemeral and persistent of volume")
        )
    elif not (ephemeral or persistent):
        refusals.append(
            Refusal("spec.volume", "either ephemeral or persistent of volume should be specified")
        )
    elif ephemeral:
        try:
            positive = quantity.parse(spec.get("volume", "ephemeral", "capacity") or 0) > 0
        except QuantityError:
            positive = False
        if not positive:
            refusals.append(
                Refusal(
                    "spec.volume.ephemeral.capacity",
                    "capacity of ephemeral volume must be positive",
                )
            )
    elif not spec.str("volume", "persistent", "name"):
        refusals.append(
            Refusal(
                "spec.volume.persistent.name", "name of the persistent volume must be specified"
            )
        )
    return refusals + volumes.shape_refusals(spec)


def keep_placement_and_size(pod: dict, observed: View) -> None:
    """A running Pod keeps what it was composed with: Pods are immutable, and a setting turned
    off later (overcommit, fit affinity) must not strand it."""
    observed_main = next(
        (c for c in observed.list("spec", "containers").views() if c.str("name") == "main"), None
    )
    if observed_main is not None and observed_main.has("resources"):
        pod["spec"]["containers"][0]["resources"] = observed_main.view("resources").to_dict()
    for field in ("nodeSelector", "affinity", "runtimeClassName"):
        if observed.has("spec", field):
            pod["spec"][field] = observed.view("spec").to_dict()[field]
        else:
            pod["spec"].pop(field, None)


def facts_of(instance_type: View) -> InstanceTypeFacts:
    spec, status = instance_type.view("spec"), instance_type.view("status")
    detail = status.view("detail")
    name = instance_type.name
    try:
        unit_cpu = int(spec.str("unitResources", "cpu") or 1)
        unit_ram = quantity.floor(quantity.parse(spec.str("unitResources", "ram") or "0"))
        local_storage = quantity.floor(quantity.parse(spec.str("localStorage") or "100Gi"))
        memory = detail.str("memory")
        card_mib = quantity.floor(quantity.parse(memory)) // MIB if memory else 0
    except (QuantityError, ValueError) as error:
        raise InputError(f"InstanceType {name}: spec.unitResources", str(error)) from error
    return InstanceTypeFacts(
        name=name,
        acceleratable=spec.bool("acceleratable"),
        unit_cpu=unit_cpu,
        unit_ram=unit_ram,
        local_storage=local_storage,
        manufacturer=detail.str("manufacturer") if spec.bool("acceleratable") else "",
        card_memory_mib=card_mib,
        logically_sliceable=int(detail.get("slicedDetail", "logical", "count") or 0) > 0,
        profiles={
            p.str("name"): int(p.get("memoryMiB") or 0)
            for p in detail.list("slicedDetail", "physical", "profiles").views()
        },
        largest_node_cards=int(status.get("largestNodeCards") or 0),
        largest_node_cores=int(status.get("largestNodeCores") or 0),
        cpu_capacity=int(status.get("cpu", "capacity") or 0),
    )


def pod_phase(pod: View | None) -> tuple[str, str]:
    """The Instance phase from the Pod's phase and conditions (reference §1.4)."""
    if pod is None:
        return "Starting", "composing the Pod"
    if pod.str("status", "phase") in ("Succeeded", "Failed"):
        return pod.str("status", "phase"), pod.str("status", "message")
    conditions = {c.str("type"): c for c in pod.list("status", "conditions").views()}
    scheduled = conditions.get("PodScheduled")
    if scheduled is None or scheduled.str("status") == "Unknown":
        return "Scheduling", ""
    if scheduled.str("status") == "False":
        return "Pending", scheduled.str("message") or scheduled.str("reason")
    initialized = conditions.get("Initialized")
    if initialized is not None and initialized.str("status") == "False":
        return "Initializing", initialized.str("message")
    ready = conditions.get("Ready")
    if ready is not None and ready.str("status") == "True":
        return "Ready", ""
    if (
        ready is None
        or ready.str("reason") == "ContainersNotReady"
        or ready.str("status") == "Unknown"
    ):
        return "Starting", ready.str("message") if ready is not None else ""
    return "NotReady", ready.str("message")


def pod_status(pod: View | None, service: View | None) -> dict:
    phase, message = pod_phase(pod)
    status: dict = {"phase": phase}
    if message:
        status["phaseMessage"] = message
    if pod is None:
        return status
    if pod.str("spec", "nodeName"):
        status["nodeName"] = pod.str("spec", "nodeName")
    host_ips = [ip.str("ip") for ip in pod.list("status", "hostIPs").views()]
    pod_ips = [ip.str("ip") for ip in pod.list("status", "podIPs").views()]
    if host_ips:
        status["hostIPs"] = host_ips
    if pod_ips:
        status["podIPs"] = pod_ips
    if service is not None:
        status["ports"] = [
            {k: v for k, v in p.to_dict().items() if k in ("port", "protocol", "name", "nodePort")}
            for p in service.list("spec", "ports").views()
        ]
    allocated = pod.str("metadata", "annotations", ALLOCATION_ANNOTATION)
    if allocated:
        with contextlib.suppress(json.JSONDecodeError):
            status["allocations"] = json.loads(allocated)
    return status


def compose_claim(request: Request, out: Output) -> None:
    """InstancePersistentVolume → a PersistentVolumeClaim of the same name, ready once Bound."""
    spec = request.xr.view("spec")
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": request.name, "namespace": request.namespace},
        "spec": {
            "accessModes": [spec.str("accessMode") or "ReadWriteOnce"],
            "resources": {"requests": {"storage": str(spec.get("capacity") or "20Gi")}},
        },
    }
    if spec.str("type"):
        claim["spec"]["storageClassName"] = spec.str("type")
    observed = request.observed("claim")
    phase = observed.str("status", "phase") if observed is not None else ""
    out.compose("claim", claim, ready=phase == "Bound")
    status = {"phase": phase or "Pending"}
    if observed is not None and observed.str("spec", "volumeName"):
        status["volume"] = observed.str("spec", "volumeName")
    out.status = status
