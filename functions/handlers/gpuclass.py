"""gpuclass: a GPU offer's availability and health (seed 003), status only.

`status.free` counts free units of the class's device-plugin resource over eligible nodes
(KubeVirt can run VMIs there — `kubevirt.io/schedulable: "true"`, which virt-handler's heartbeat
keeps and every virt-launcher Pod selects — Ready, not cordoned, no NoSchedule/NoExecute taint
the class does not tolerate). A class reads each node's VM node state, the small object the
devices handler keeps from its Node (core/status/vmnode.py), not the Node itself: only the
states labelled as VM nodes are required, so the request carries a few hundred bytes per node
that serves VMs, not the whole fleet's Nodes;
`status.maxFreePerNode` is the largest of them, and `status.maxPerNode` the most units one eligible
node advertises (used or not): the per-VM limit of a class without `maxCount`, which VM Instances
read here rather than requiring every Node themselves. They are observations, not reservations.
Conditions: `ResourceNameConflict` (another, older class advertises the same resource: this
offer is not available), `ResourceNameNotPermitted` (KubeVirt's permittedHostDevices lacks it),
`LicenseSecretMissing` (a licensed class's source Secret or token key is absent). License token
bytes are only tested for presence; they never appear in any output.

The seed's field rules are checked here as well as in the XRD (`SPEC_RULES`): the name rule is a
root CEL rule that Crossplane copies into the CRD only from v2.2.0, and offline render has no
API server, so a class the schema refuses is a Fatal result naming the field here too.

vGPU entitlement (seed 003) is decided here for every handler that starts a VM: the platform's
is the Catalog's `vgpuEntitlement`; a Cozystack tenant namespace — one that carries
`tenant.cozystack.io/<its name>`, as the tenant chart stamps it together with one such label per
ancestor tenant — is entitled only when it and every parent tenant namespace carry
`gpu.cozystack.io/vgpu: "true"`, the root tenant (no parent) excepted: its entitlement is the
platform's. A namespace that is no tenant's is judged by the platform's alone.
"""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from functions import structs
from functions.core import apis, checks, labels, names, quantity, reasons
from functions.core.quantity import QuantityError
from functions.core.settings import DNS_LABEL, EXISTS_VALUE_RULE, Settings
from functions.core.status import StatusError, vmnode
from functions.core.status.vmnode import VmNode
from functions.handlers import inputs
from functions.handlers.base import Handler, Request, Requirement
from functions.handlers.desired import Desired
from functions.handlers.inputs import CATALOG, catalog_settings
from functions.views import View, view_of

FEATURE_TYPES = (1, 4)  # license.featureType: NVIDIA vGPU (1) or Virtual Compute Server (4)
DEFAULT_FEATURE_TYPE = 1

PLATFORM_NOT_ENTITLED = 'vGPU is not entitled: enable the Catalog\'s "vgpuEntitlement" setting'


STATES = "states"  # the requirement of the VM node states
# All a class reads of a VM node state it cannot gather (functions/wire.py).
STATE_READS = (("metadata", "name"), ("metadata", "namespace"), ("data", vmnode.STATE_KEY))
# All `read_launcher` reads of a virt-launcher Pod: its metadata, volumes and status conditions,
# most of it, are left unparsed (functions/wire.py).
LAUNCHER_READS = (("spec", "nodeName"), ("spec", "containers"), ("status", "phase"))


def requirements(request: Request) -> dict[str, Requirement]:
    found = {
        "catalog": CATALOG,
        "classes": Requirement(apis.GPU_CLASS, "GPUClass"),
        "kubevirt": Requirement(apis.KUBEVIRT, "KubeVirt"),
        "launchers": Requirement(
            apis.CORE, "Pod", match_labels=labels.VIRT_LAUNCHER, reads=LAUNCHER_READS
        ),
    }
    if request.required("catalog") is None:
        # Which nodes' states, and where the license is, are the Catalog's to say: asked for
        # once it is read, so that a large fleet's states are never fetched unselected.
        return found
    settings = catalog_settings(request, Desired())
    found[STATES] = Requirement(
        apis.CORE,
        "ConfigMap",
        match_labels={labels.RESOURCE_TYPE: vmnode.RESOURCE_TYPE, **settings.vm_nodes},
        namespace=settings.system_namespace,
        reads=STATE_READS,
    )
    secret = request.xr.str("spec", "license", "secretName")
    if secret:
        namespace = settings.license_namespace
        found["license"] = Requirement(apis.CORE, "Secret", match_name=secret, namespace=namespace)
    return found


def compose(request: Request) -> Desired:
    desired = Desired()
    problem = spec_problem(request.xr)
    if problem is not None:  # what the schema refuses: a Fatal result naming the field
        desired.fatal(f"{problem[0]}: {problem[1]}", reasons.INVALID_GPU_CLASS)
        return desired
    spec, own = request.xr.view("spec"), read_offer(request.xr)
    resource = own.resource
    conflict = conflicting_class_of(own, offers(request, "classes") or [])
    vm_resources = permitted_resources(request) or frozenset()
    permitted = resource in vm_resources
    license_problem = license_missing(request, spec)
    report(desired, spec, resource, conflict, permitted, license_problem)
    settings = catalog_settings(request, desired)
    offered = None if conflict else resource  # a class in conflict offers no unit
    nodes = read_nodes(request, offered, spec, settings, vm_resources, desired)
    unselected_nodes(nodes, desired)
    counts = {
        "free": sum(n.free for n in nodes.units),
        "maxFreePerNode": max((n.free for n in nodes.units), default=0),
        "maxPerNode": max((n.allocatable for n in nodes.units), default=0),
        "nodes": len(nodes.states),
    }
    if states_missing(request, nodes):
        counts = kept_counts(request, desired, settings)
    desired.status = {"resourceName": resource, **counts}
    desired.composite_ready = conflict is None and permitted and license_problem is None
    return desired


COUNTS = ("free", "maxFreePerNode", "maxPerNode")


def states_missing(request: Request, nodes: NodesRead) -> bool:
    """No VM node state found by a class whose counts a release before them wrote (no
    `status.nodes`): right after an upgrade, before the devices handler has kept each node's
    state. Once this release has counted, none found is none there (a selector matching none)."""
    observed = request.xr.view("status")
    counted = any(observed.get(k) for k in COUNTS) and not observed.has("nodes")
    return counted and nodes.resolved and nodes.objects == 0


def kept_counts(request: Request, desired: Desired, settings: Settings) -> dict[str, int]:
    """The counts as observed (no `nodes`: kept until this release counts), and a Warning
    saying why: a class must not take every offer away from new VMs while the states are being
    written."""
    desired.warning(
        f"no VM node states found (ConfigMaps labelled {labels.RESOURCE_TYPE}="
        f"{vmnode.RESOURCE_TYPE} in namespace {settings.system_namespace}): the counts are kept "
        "as observed until the devices handler has kept them — after an upgrade, once each "
        "Devices is reconciled",
        reasons.VM_NODE_STATES_MISSING,
    )
    observed = request.xr.view("status")
    return {k: int(observed.get(k) or 0) for k in COUNTS}


def report(
    desired: Desired,
    spec: View,
    resource: str,
    conflict: str | None,
    permitted: bool,
    license_problem: str | None,
) -> None:
    """The seed's three conditions."""
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


@dataclass(frozen=True)
class Offer:
    """A GPUClass as other classes and a VM's GPU entries read it. Every class and every VM
    Instance requires all the classes, which rarely change: each is read once while it is
    unchanged (`Request.required_read`)."""

    name: str
    created: str  # metadata.creationTimestamp: of two classes, the older keeps the resource
    deleting: bool
    resource: str  # spec.source.devicePlugin.resourceName
    mode: str
    tolerations: tuple[Mapping[str, Any], ...]  # never changed: a VMI takes copies
    license_secret: str  # a licensed vGPU class's source Secret, else ""
    feature_type: int
    max_count: int | None  # spec.maxCount
    max_per_node: int | None  # status.maxPerNode, as the class's reconcile published it

    @property
    def vgpu(self) -> bool:
        return self.mode == "vgpu"


def read_offer(gpu_class: View) -> Offer:
    spec = gpu_class.view("spec")
    mode = spec.str("mode")
    licensed = mode == "vgpu" and spec.has("license")
    max_count, largest = spec.get("maxCount"), gpu_class.get("status", "maxPerNode")
    return Offer(
        name=gpu_class.name,
        created=gpu_class.str("metadata", "creationTimestamp"),
        deleting=gpu_class.has("metadata", "deletionTimestamp"),
        resource=spec.str("source", "devicePlugin", "resourceName"),
        mode=mode,
        tolerations=tuple(t.to_dict() for t in spec.list("tolerations").views()),
        license_secret=spec.str("license", "secretName") if licensed else "",
        feature_type=feature_type(gpu_class),
        max_count=int(max_count) if whole(max_count) else None,
        max_per_node=largest if type(largest) is int and largest > 0 else None,
    )


def offers(request: Request, name: str) -> list[Offer] | None:
    """The classes required as `name`, by name; None while unread."""
    found = request.required_read(name, read_offer)
    return None if found is None else sorted(found, key=lambda offer: offer.name)


def conflicting_class_of(offer: Offer, classes: Iterable[Offer]) -> str | None:
    """The older class (by creation, then name) that advertises the same resource, if any;
    of several, the first by name."""
    mine = (offer.created, offer.name)
    return min(
        (
            other.name
            for other in classes
            if other.name != offer.name
            and other.resource == offer.resource
            and (other.created, other.name) < mine
        ),
        default=None,
    )


def permitted_resources(request: Request, name: str = "kubevirt") -> frozenset[str] | None:
    """The resources the KubeVirt CRs required as `name` let VMs take; None while unread."""
    found = request.required_read(name, permitted_by)
    return None if found is None else frozenset().union(*found)


def permitted_by(kubevirt: View) -> frozenset[str]:
    """The resources one KubeVirt CR's permittedHostDevices lets VMs take."""
    devices = kubevirt.view("spec", "configuration", "permittedHostDevices")
    found = {
        device.str("resourceName")
        for kind in ("pciHostDevices", "mediatedDevices", "usb")
        for device in devices.list(kind).views()
    }
    return frozenset(found - {""})


# Each reconcile of a class carries the state of every node it reads, about 1 KiB as Crossplane
# hands it over: this many nodes that can serve no VM are worth a selector.
IDLE_NODES_WORTH_SELECTING = 1000
GPU_OPERATOR_HINT = ", ".join(f'{k}: "{v}"' for k, v in labels.GPU_OPERATOR_VM_NODE.items())


def unselected_nodes(nodes: NodesRead, desired: Desired) -> None:
    """A Warning when the class, with no vmNodeSelector, reads many nodes that advertise no
    resource KubeVirt permits: nodes that can serve no VM, carried by every reconcile."""
    if nodes.idle >= IDLE_NODES_WORTH_SELECTING:
        desired.warning(
            f"this class reads {len(nodes.states):,} nodes, {nodes.idle:,} of which advertise no "
            "resource KubeVirt permits: set the Catalog's vmNodeSelector to a label only the VM "
            f"nodes carry (with the NVIDIA GPU Operator, {GPU_OPERATOR_HINT}); "
            "every reconcile of a class carries the state of each node it reads",
            reasons.VM_NODES_UNSELECTED,
        )


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


@dataclass(frozen=True)
class NodeUnits:
    """Units of a class's resource on one eligible node: all it advertises, and those free."""

    allocatable: int
    free: int


@dataclass
class NodesRead:
    """What a class read of its nodes' states: each state read; units on each eligible node
    that advertises its resource; how many nodes advertise no resource KubeVirt permits
    (counted only while the Catalog sets no vmNodeSelector: a selector is the remedy)."""

    states: list[VmNode] = field(default_factory=list)
    units: list[NodeUnits] = field(default_factory=list)
    idle: int = 0
    objects: int = 0  # the state objects required, read or not
    resolved: bool = False  # whether Crossplane has fetched them yet


def read_nodes(
    request: Request,
    resource: str | None,
    spec: View,
    settings: Settings,
    vm_resources: frozenset[str],
    desired: Desired,
) -> NodesRead:
    """Units of `resource` (None: a class that offers none) on each eligible node that
    advertises it; a state, or a node's allocatable, that cannot be read is left out and named
    in a Warning. Sums do not depend on the order; only the Warnings are sorted."""
    tolerations = list(spec.list("tolerations").views())
    used = units_in_use(request, resource) if resource else {}
    count_idle = not settings.vm_node_selector
    nodes, unreadable = read_states(request)
    for state in nodes.states:
        if count_idle and not any(map(state.allocatable.__contains__, vm_resources)):
            nodes.idle += 1  # it serves no VM
        advertised = state.allocatable.get(resource) if resource else None
        if advertised is None or not eligible(state, settings.vm_nodes, tolerations):
            continue
        try:
            total = quantity.device_count(advertised)
        except QuantityError as error:
            where = f"status.allocatable[{resource!r}]"
            unreadable.append((f"Node {state.node}", where, str(error)))
            continue
        nodes.units.append(NodeUnits(total, max(0, total - used.get(state.node, 0))))
    for what, where, problem in sorted(unreadable):
        desired.warning(
            f"{what}: {where}: {problem}; the node is left out of this class's free units",
            reasons.UNREADABLE_OBJECT,
        )
    return nodes


Problems = list[tuple[str, str, str]]  # (which object, field, what is wrong)

# States read before, by their text: a class is reconciled every 30 s, and most of its nodes'
# states have not changed since. Keyed by what the bytes mean (the text the devices handler
# wrote), so equal texts are equal states; bounded, the least recently read forgotten first.
STATE_MEMO_SIZE = 1 << 16
_read_text = functools.lru_cache(maxsize=STATE_MEMO_SIZE)(vmnode.read)


def forget_states() -> None:
    """Empty the memo (a worker's first sight of its nodes' states)."""
    _read_text.cache_clear()


def read_state(text: Any) -> VmNode:
    """A state from its text, read once while it is among the last STATE_MEMO_SIZE read."""
    return _read_text(text) if isinstance(text, str) else vmnode.read(text)


def read_states(request: Request) -> tuple[NodesRead, Problems]:
    """Every required VM node state, one per node, and what could not be read.

    From the strings gathered out of the request's bytes where that is exact — one state text
    per object (told by a key only it has), each readable, each of another node — else object
    by object, which names what is wrong and leaves out what a caller that ignored the
    namespace (Crossplane 1.x) handed over from elsewhere."""
    gathered = inputs.gathered_strings(request, STATES)
    if gathered is not None:
        texts = vmnode.states_among(gathered.strings)
        states = _all_read(texts) if len(texts) == gathered.objects else None
        if states is not None and len({s.node for s in states}) == len(states):
            return NodesRead(states=states, objects=gathered.objects, resolved=True), []
    given = request.required_objects(STATES)
    namespace = inputs.namespace_to_keep(request, STATES)
    found = NodesRead(objects=len(given or ()), resolved=given is not None)
    problems: Problems = []
    seen: set[str] = set()
    for obj in given or ():
        if namespace and structs.namespace_of(obj) != namespace:
            continue
        state_map = view_of(obj)
        try:
            state = read_state(state_map.get("data", vmnode.STATE_KEY))
        except StatusError as error:
            problems.append((f"ConfigMap {state_map.name}", error.field, error.problem))
            continue
        if state.node in seen:
            problems.append(
                (f"ConfigMap {state_map.name}", "data.state", f"repeats node {state.node}")
            )
            continue
        seen.add(state.node)
        found.states.append(state)
    return found, problems


def _all_read(texts: list[str]) -> list[VmNode] | None:
    try:
        return [read_state(text) for text in texts]
    except StatusError:
        return None  # read object by object, which names it


@dataclass(frozen=True, slots=True)
class Launcher:
    """What a class reads of a virt-launcher Pod: its node ("" until scheduled), whether it
    still runs (not Succeeded or Failed), and the units of each extended resource (a device
    plugin's: a name with a '/') its containers ask for (limits, else requests; a value that
    is not a quantity asks for none)."""

    node: str
    running: bool
    units: Mapping[str, int]


def read_launcher(pod: View) -> Launcher:
    units: dict[str, int] = {}
    for container in pod.list("spec", "containers").views():
        limits = container.view("resources", "limits")
        asked = container.view("resources", "requests")
        for resource in {*limits.keys(), *asked.keys()}:
            value = limits.get(resource) or asked.get(resource)
            if "/" in resource and value is not None:
                units[resource] = units.get(resource, 0) + quantity.count(value)
    running = pod.str("status", "phase") not in ("Succeeded", "Failed")
    return Launcher(pod.str("spec", "nodeName"), running, units)


def units_in_use(request: Request, resource: str) -> dict[str, int]:
    """Units of `resource` the virt-launcher Pods still running hold, by node. Each Pod is read
    once while what is read of it is unchanged (Request.required_read)."""
    used: dict[str, int] = {}
    for pod in request.required_read("launchers", read_launcher) or ():
        if pod.node and pod.running and resource in pod.units:
            used[pod.node] = used.get(pod.node, 0) + pod.units[resource]
    return used


def eligible(
    state: VmNode, vm_nodes: Mapping[str, str], tolerations: list[Mapping[str, Any]]
) -> bool:
    """Labelled `vm_nodes` (KubeVirt-schedulable, and the Catalog's vmNodeSelector: the state
    carries its Node's values), Ready, not cordoned, and every NoSchedule/NoExecute taint
    tolerated by the class. (The labels are checked here as well as selected: a caller that
    did not keep to the selector must not have other nodes counted.)"""
    if any(state.labels.get(key) != value for key, value in vm_nodes.items()):
        return False
    if not state.ready or state.unschedulable:
        return False
    return all(any(tolerates(t, taint) for t in tolerations) for taint in state.taints)


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


# --- the seed's field rules, as the XRD states them --------------------------------------------

Problem = tuple[str, str]  # (field path, what is wrong and what to do)

# The XRD's rules in its words (compositions/xrds/gpuclass.yaml), which the handler applies where
# no API server does: offline render, and a rule at the schema's root before Crossplane 2.2
# (tests/test_messages.py holds the two equal).
NAME_RULE = (
    "a GPUClass name is a DNS label of at most 63 characters: lowercase letters, digits and '-', "
    "starting and ending with a letter or digit"
)
VGPU_PROFILE_RULE = "a vgpu class requires profile"
PASSTHROUGH_RULE = "a passthrough class permits neither profile nor license"
TOLERATION_SECONDS_RULE = "tolerationSeconds applies only with effect NoExecute"


def _name_rule(gpu_class: View) -> Problem | None:
    name = gpu_class.name
    if len(name) <= names.LABEL_MAX and re.fullmatch(DNS_LABEL, name):
        return None
    return ("metadata.name", f"{NAME_RULE} (got {name!r}); create the class under such a name")


def _mode_rule(gpu_class: View) -> Problem | None:
    spec = gpu_class.view("spec")
    mode = spec.str("mode")
    if mode not in ("passthrough", "vgpu"):
        return ("spec.mode", f"must be passthrough or vgpu, got {mode!r}")
    if mode == "vgpu" and not spec.str("profile"):
        return ("spec.profile", VGPU_PROFILE_RULE)
    if mode == "passthrough" and (spec.has("profile") or spec.has("license")):
        return ("spec", PASSTHROUGH_RULE)
    return None


def _source_rule(gpu_class: View) -> Problem | None:
    if gpu_class.str("spec", "source", "devicePlugin", "resourceName"):
        return None
    return (
        "spec.source.devicePlugin.resourceName",
        "is required: name the extended resource the device plugin advertises (devicePlugin is "
        "the only supported source)",
    )


def _count_rule(gpu_class: View) -> Problem | None:
    max_count = gpu_class.get("spec", "maxCount")
    if max_count is None or (whole(max_count) and 1 <= max_count <= 1024):
        return None
    return ("spec.maxCount", f"must be a whole number from 1 to 1024, got {max_count!r}")


def _memory_rule(gpu_class: View) -> Problem | None:
    memory = gpu_class.get("spec", "memory")
    if memory is None:
        return None
    try:
        if isinstance(memory, str) and quantity.parse(memory) > 0:
            return None
    except QuantityError:
        pass
    return ("spec.memory", f"must be a positive quantity such as 16Gi, got {memory!r}")


def _license_rule(gpu_class: View) -> Problem | None:
    if not gpu_class.has("spec", "license"):
        return None
    if not gpu_class.str("spec", "license", "secretName"):
        return ("spec.license.secretName", "is required: name the license Secret")
    feature_type = gpu_class.get("spec", "license", "featureType")
    if feature_type is None or (whole(feature_type) and int(feature_type) in FEATURE_TYPES):
        return None
    return ("spec.license.featureType", f"must be 1 or 4, got {feature_type!r}")


def _tolerations_rule(gpu_class: View) -> Problem | None:
    for index, toleration in enumerate(gpu_class.list("spec", "tolerations").views()):
        at = f"spec.tolerations[{index}]"
        operator = toleration.str("operator") or "Equal"
        if operator not in ("Exists", "Equal"):
            return (f"{at}.operator", f"must be Exists or Equal, got {operator!r}")
        if operator == "Exists" and toleration.str("value"):
            return (at, EXISTS_VALUE_RULE)
        if toleration.has("tolerationSeconds") and toleration.str("effect") != "NoExecute":
            return (at, TOLERATION_SECONDS_RULE)
    return None


SPEC_RULES: tuple[Callable[[View], Problem | None], ...] = (
    _name_rule,
    _mode_rule,
    _source_rule,
    _count_rule,
    _memory_rule,
    _license_rule,
    _tolerations_rule,
)


def spec_problem(gpu_class: View) -> Problem | None:
    """The first of the seed's field rules the class breaks, or None."""
    return next((p for rule in SPEC_RULES if (p := rule(gpu_class)) is not None), None)


def whole(value: Any) -> bool:
    """An integer as a Struct carries it (a float with no fraction), never a bool."""
    return checks.whole(value)  # an infinity or a NaN is none (`value == int(value)` raised)


def feature_type(gpu_class: View) -> int:
    """The licensed class's `license.featureType` (default 1)."""
    value = gpu_class.get("spec", "license", "featureType")
    return int(value) if whole(value) else DEFAULT_FEATURE_TYPE


# --- vGPU entitlement (seed 003: the platform's, each tenant's, and every parent tenant's) -------


@dataclass(frozen=True)
class Tenancy:
    """A namespace as vGPU entitlement reads it; each is read once while it is unchanged
    (`Request.required_read`): every VM Instance in it requires it."""

    name: str
    tenants: tuple[str, ...]  # the tenant namespaces its labels name: itself and its ancestors
    vgpu: bool  # labelled gpu.cozystack.io/vgpu: "true"


def read_tenancy(namespace: View) -> Tenancy:
    """A namespace's tenancy: no tenants unless its labels name itself a tenant."""
    named = namespace.labels()
    found = sorted(k.removeprefix(labels.TENANT) for k in named if k.startswith(labels.TENANT))
    return Tenancy(
        namespace.name,
        tuple(found) if namespace.name in found else (),
        named.get(labels.VGPU_ENTITLED) == labels.TRUE,
    )


def tenancy(request: Request, name: str) -> Tenancy | None:
    """The namespace required as `name`; None while unread or where it does not exist."""
    found = request.required_read(name, read_tenancy)
    return found[0] if found else None


def entitlement_requirements(request: Request) -> dict[str, Requirement]:
    """The Instance's namespace; once read, every ancestor tenant namespace it names."""
    found = {"namespace": Requirement(apis.CORE, "Namespace", match_name=request.namespace)}
    own = tenancy(request, "namespace")
    for tenant in own.tenants if own is not None else ():
        if tenant != request.namespace:
            found[tenant_key(tenant)] = Requirement(apis.CORE, "Namespace", match_name=tenant)
    return found


def entitlement_unread(request: Request) -> bool:
    """Whether a namespace vGPU entitlement reads is not read yet."""
    return any(request.required_objects(n) is None for n in entitlement_requirements(request))


def tenant_key(tenant: str) -> str:
    return f"tenant:{tenant}"


def vgpu_not_entitled(platform: bool, request: Request) -> str | None:
    """Why vGPU is not entitled in the request's namespace; None: entitled.

    The chain is judged from the root down, so the message names the highest tenant that
    breaks it. Call it once the namespace requirements are resolved."""
    if not platform:
        return PLATFORM_NOT_ENTITLED
    own = tenancy(request, "namespace")
    chain = [
        (tenant, own if tenant == request.namespace else tenancy(request, tenant_key(tenant)))
        for tenant in (own.tenants if own is not None else ())
    ]
    chain.sort(key=lambda link: (len(link[1].tenants) if link[1] is not None else 0, link[0]))
    for tenant, found in chain:
        why = _tenant_not_entitled(tenant, found, request.namespace)
        if why:
            return why
    return None


def _tenant_not_entitled(tenant: str, namespace: Tenancy | None, own: str) -> str | None:
    whose = (
        f"tenant namespace {own}"
        if tenant == own
        else f"the parent tenant namespace {tenant} of {own}"
    )
    if namespace is None:
        return f"{whose} is not entitled to vGPU: the namespace was not found"
    if namespace.tenants == (tenant,):
        return None  # the root tenant: entitled by the platform
    if namespace.vgpu:
        return None
    return (
        f"{whose} is not entitled to vGPU: a tenant needs its own entitlement and an entitled "
        f'parent; label namespace {tenant} with {labels.VGPU_ENTITLED}: "true"'
    )


HANDLER = Handler(
    "gpuclass",
    frozenset({"GPUClass"}),
    compose,
    requirements,
    ttl=datetime.timedelta(seconds=30),  # nodes and launcher Pods are required, not watched
    api_version=apis.GPU_CLASS,
)
