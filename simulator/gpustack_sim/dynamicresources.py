"""kube-scheduler's DynamicResources plugin (pkg/scheduler/framework/plugins/dynamicresources,
Kubernetes 1.37) and its structured-parameters allocator, for the Pods that name ResourceClaims.

- PreEnqueue: a Pod is not tried until every claim it names exists (one made from a template
  is known by the Pod's `status.resourceClaimStatuses`; it must be controlled by the Pod) and
  none is being deleted. It waits without a condition.
- PreFilter: a request's DeviceClass that does not exist fails every node at once, "request
  <name>: device class <class> does not exist" (UnschedulableAndUnresolvable).
- Filter, after the other filters: an allocated claim whose node selector does not take the
  node makes it "resourceclaim not available on the node"; the claims not allocated yet must
  all be allocated from the node's devices, else "cannot allocate all claims"; both
  UnschedulableAndUnresolvable (`statusUnschedulable`), so preemption is "not helpful".
- Allocation: the devices of the newest generation of each pool whose slice names the node,
  taken in the slice's order, none another claim holds (any claim's
  `status.allocation.devices.results`) nor one taken for this Pod already; each must match its
  class's selectors and the request's, all CEL, and every NoSchedule or NoExecute taint of the
  device must be tolerated by the request. `ExactCount` takes `count` (1 unset), `All` every
  match (at least one); a `firstAvailable` request its first subrequest that can be served,
  named `<request>/<subrequest>`. Taken greedily, in order: the real allocator backtracks,
  which no request here needs (one request per claim).
- CEL binds `device` as the allocator does: `driver`, `attributes` and `capacity` by domain,
  a name without one qualified by the driver's. Values are CEL strings, ints, bools, semver
  versions (`semver()`, `compareTo`, `isGreaterThan`, `isLessThan`, `major`, `minor`, `patch`)
  and quantities (`quantity()`, the same comparisons, `asInteger`). An expression that fails to
  evaluate matches no device (kube-scheduler aborts the attempt with the error: not played).
- PostFilter: where it deallocates nothing it adds nothing to the message (kube-scheduler
  v1.37.2 on `make e2e`: "… 2 node(s) didn't match Pod's node affinity/selector. preemption: …",
  where earlier releases wrote "still not schedulable" or "no new claims to deallocate"), the
  PreFilter's failure included; where a claim the node selector kept out is reserved for no
  other Pod, it deallocates it ("deallocation of ResourceClaim completed", not seen on a real
  cluster here).
- PreBind, before the binding: each claim it allocated gets kube-scheduler's finalizer, then its
  `status.allocation` (the results; a node selector on the node's name) and, every claim, the
  Pod in `status.reservedFor`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import celpy
from celpy import celtypes

from gpustack_sim import kube
from gpustack_sim.client import Client
from gpustack_sim.dra import FINALIZER, owner_uid, pod_claim_names
from gpustack_sim.validation import cel_program

CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
DEALLOCATED = "deallocation of ResourceClaim completed"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")

Device = tuple[str, str, str]  # (driver, pool, device name): what an allocation result names


@dataclass
class Allocation:
    """What Filter found on one node: why it cannot take the Pod's claims ("" when it can),
    each unallocated claim's results by claim name, and the allocated claims whose node
    selector keeps them off the node (what PostFilter may deallocate)."""

    node: str
    why: str = ""
    results: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)


class DynamicResources:
    def __init__(self, api: Client):
        self.api = api

    # --- PreEnqueue and PreFilter -------------------------------------------------------------

    def claims(self, pod: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The Pod's claims, in its order; None while one is missing or being deleted."""
        found = []
        namespace, names = pod["metadata"]["namespace"], pod_claim_names(pod)
        for entry in pod["spec"].get("resourceClaims") or []:
            name = names.get(entry["name"])
            claim = self.api.get("ResourceClaim", name, namespace) if name else None
            if claim is None or "deletionTimestamp" in claim["metadata"]:
                return None
            if (
                entry.get("resourceClaimTemplateName")
                and owner_uid(claim) != pod["metadata"]["uid"]
            ):
                return None  # `resourceclaim.IsForPod`: not made for this Pod
            found.append(claim)
        return found

    def pre_filter(self, claims: Iterable[Mapping[str, Any]]) -> str:
        """Why no node can take the Pod, before any is tried: a request's DeviceClass is
        missing; "" when none is."""
        for claim in claims:
            if allocation_of(claim):
                continue
            for request in requests_of(claim):
                for name, exactly in alternatives(request):
                    class_name = exactly.get("deviceClassName", "")
                    if self.api.peek("DeviceClass", class_name) is None:
                        return f"request {name}: device class {class_name} does not exist"
        return ""

    # --- Filter -------------------------------------------------------------------------------

    def filter(self, claims: Sequence[Mapping[str, Any]], node: Mapping[str, Any]) -> Allocation:
        """What the node can give the Pod's claims, or why not."""
        found = Allocation(node["metadata"]["name"])
        found.unavailable = [
            c["metadata"]["name"]
            for c in claims
            if allocation_of(c) and not selector_takes(allocation_of(c), node)
        ]
        pending = [c for c in claims if not allocation_of(c)]
        taken = self.allocated_devices() if pending else set()
        devices = self.node_devices(found.node) if pending else []
        for claim in pending:
            results = self.allocate(claim, devices, taken)
            if results is None:
                found.why = CANNOT_ALLOCATE
                return found
            found.results[claim["metadata"]["name"]] = results
            taken |= {(r["driver"], r["pool"], r["device"]) for r in results}
        found.why = NOT_AVAILABLE if found.unavailable else ""
        return found

    def allocate(
        self,
        claim: Mapping[str, Any],
        devices: Sequence[tuple[Device, Mapping[str, Any]]],
        taken: set[Device],
    ) -> list[dict[str, str]] | None:
        """The claim's results from these devices, request by request; None if one fails."""
        results: list[dict[str, str]] = []
        chosen = set(taken)
        for request in requests_of(claim):
            served = self.serve(request, devices, chosen)
            if served is None:
                return None
            results += served
            chosen |= {(r["driver"], r["pool"], r["device"]) for r in served}
        return results

    def serve(
        self,
        request: Mapping[str, Any],
        devices: Sequence[tuple[Device, Mapping[str, Any]]],
        taken: set[Device],
    ) -> list[dict[str, str]] | None:
        """One request's devices: its first alternative that can be served."""
        for name, exactly in alternatives(request):
            selectors = self.class_selectors(exactly.get("deviceClassName", ""))
            selectors += selector_expressions(exactly.get("selectors"))
            matching = [
                key
                for key, device in devices
                if key not in taken
                and tolerated(device, exactly.get("tolerations") or [])
                and all(matches(expression, key[0], device) for expression in selectors)
            ]
            wanted = wanted_count(exactly, matching)
            if wanted is not None and len(matching) >= wanted:
                return [
                    {"request": name, "driver": driver, "pool": pool, "device": device}
                    for driver, pool, device in matching[:wanted]
                ]
        return None

    def class_selectors(self, class_name: str) -> list[str]:
        found = self.api.peek("DeviceClass", class_name) or {}
        return selector_expressions((found.get("spec") or {}).get("selectors"))

    def node_devices(self, node: str) -> list[tuple[Device, Mapping[str, Any]]]:
        """The devices of the pools published for `node`, each pool's newest generation, in
        the slices' order."""
        slices = [
            s for s in self.api.peek_list("ResourceSlice") if s["spec"].get("nodeName") == node
        ]
        newest: dict[tuple[str, str], int] = {}
        for found in slices:
            pool = (found["spec"]["driver"], found["spec"]["pool"]["name"])
            newest[pool] = max(newest.get(pool, 0), int(found["spec"]["pool"].get("generation", 0)))
        return [
            ((spec["driver"], spec["pool"]["name"], device["name"]), device)
            for spec in (s["spec"] for s in slices)
            if int(spec["pool"].get("generation", 0))
            == newest[(spec["driver"], spec["pool"]["name"])]
            for device in spec.get("devices") or []
        ]

    def allocated_devices(self) -> set[Device]:
        """Every device a claim's allocation holds, in any namespace."""
        return {
            (r["driver"], r["pool"], r["device"])
            for claim in self.api.peek_list("ResourceClaim")
            for r in (allocation_of(claim).get("devices") or {}).get("results") or []
            if not r.get("adminAccess")
        }

    # --- PostFilter ---------------------------------------------------------------------------

    def post_filter(
        self, pod: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], unavailable: set[str]
    ) -> str:
        """What the plugin's PostFilter says when no node took the Pod: it deallocates one
        claim some node's Filter found kept off by its node selector, where no other Pod
        holds it."""
        for claim in claims:
            if claim["metadata"]["name"] not in unavailable:
                continue
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if not reserved or [r.get("uid") for r in reserved] == [pod["metadata"]["uid"]]:
                cleared = ("allocation", "reservedFor", "devices")
                status = {k: v for k, v in claim["status"].items() if k not in cleared}
                self.api.update_status({**claim, "status": status})
                return DEALLOCATED
        return ""  # nothing deallocated: nothing said

    # --- PreBind ------------------------------------------------------------------------------

    def pre_bind(
        self, pod: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], allocation: Allocation
    ) -> None:
        """Each claim allocated and reserved for the Pod, before the Pod is bound."""
        for claim in claims:
            results = allocation.results.get(claim["metadata"]["name"])
            if results is not None:
                claim = self.with_finalizer(claim)
                claim = {
                    **claim,
                    "status": {
                        **(claim.get("status") or {}),
                        "allocation": {
                            "devices": {"results": results},
                            "nodeSelector": node_selector(allocation.node),
                        },
                    },
                }
            self.reserve(pod, claim)

    def with_finalizer(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        finalizers = list(claim["metadata"].get("finalizers") or [])
        if FINALIZER in finalizers:
            return dict(claim)
        return self.api.apply(
            {**claim, "metadata": {**claim["metadata"], "finalizers": [*finalizers, FINALIZER]}}
        )

    def reserve(self, pod: Mapping[str, Any], claim: Mapping[str, Any]) -> None:
        status = dict(claim.get("status") or {})
        reserved = list(status.get("reservedFor") or [])
        uid = pod["metadata"]["uid"]
        if not any(r.get("uid") == uid for r in reserved):
            reserved.append({"resource": "pods", "name": pod["metadata"]["name"], "uid": uid})
        self.api.update_status({**claim, "status": {**status, "reservedFor": reserved}})


# --- claims, requests, selectors ----------------------------------------------------------------


def allocation_of(claim: Mapping[str, Any]) -> dict[str, Any]:
    return dict((claim.get("status") or {}).get("allocation") or {})


def requests_of(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(((claim.get("spec") or {}).get("devices") or {}).get("requests") or [])


def alternatives(request: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """A request's ways to be served, each with the name its result carries."""
    if request.get("exactly") is not None:
        return [(request["name"], request["exactly"])]
    return [(f"{request['name']}/{s['name']}", s) for s in request.get("firstAvailable") or []]


def wanted_count(exactly: Mapping[str, Any], matching: Sequence[Any]) -> int | None:
    """How many devices the request takes of those matching; None where it cannot be served."""
    if exactly.get("allocationMode", "ExactCount") == "All":
        return len(matching) or None
    return int(exactly.get("count") or 1)


def selector_expressions(selectors: Iterable[Mapping[str, Any]] | None) -> list[str]:
    return [
        s["cel"]["expression"] for s in selectors or [] if (s.get("cel") or {}).get("expression")
    ]


def tolerated(device: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    """Every taint that keeps new claims off the device is tolerated (DRA device taints)."""
    return not kube.untolerated(tolerations, device.get("taints") or [], BLOCKING_EFFECTS)


def node_selector(node: str) -> dict[str, Any]:
    """The allocation's node selector for a node-local slice: the node, by name."""
    term = {"key": "metadata.name", "operator": "In", "values": [node]}
    return {"nodeSelectorTerms": [{"matchFields": [term]}]}


def selector_takes(allocation: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """Does the allocation's node selector take the node (`matchFields` on its name,
    `matchExpressions` on its labels; terms ORed)? No selector takes every node."""
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms")
    if not terms:
        return True
    fields = {"metadata.name": node["metadata"]["name"]}
    labels = kube.labels_of(node)
    return any(
        all(
            kube.label_selector_matches({"matchExpressions": [e]}, fields)
            for e in term.get("matchFields") or []
        )
        and all(
            kube.label_selector_matches({"matchExpressions": [e]}, labels)
            for e in term.get("matchExpressions") or []
        )
        for term in terms
    )


# --- CEL, as the allocator binds a device -------------------------------------------------------


@functools.total_ordering
class Semver:
    """A semver version in CEL (`semver('1.2.3')`): ordered by major, minor, patch."""

    def __init__(self, text: str):
        core = str(text).split("-", 1)[0].split("+", 1)[0]
        parts = [*core.split("."), "0", "0"][:3]
        self.parts = tuple(int(p) for p in parts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.parts == other.parts

    def __lt__(self, other: Semver) -> bool:
        return self.parts < other.parts

    def __hash__(self) -> int:
        return hash(self.parts)


@functools.total_ordering
class Quantity:
    """A Kubernetes quantity in CEL (`quantity('40Gi')`), compared by amount."""

    def __init__(self, text: Any):
        self.amount = kube.quantity(text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.amount == other.amount

    def __lt__(self, other: Quantity) -> bool:
        return self.amount < other.amount

    def __hash__(self) -> int:
        return hash(self.amount)


def _compare(a: Any, b: Any) -> celtypes.IntType:
    return celtypes.IntType((a > b) - (a < b))


def _as_integer(q: Quantity) -> celtypes.IntType:
    if isinstance(q.amount, Fraction) and q.amount.denominator != 1:
        raise ValueError("cannot convert value to integer")
    return celtypes.IntType(int(q.amount))


LIBRARY: tuple[tuple[str, Any], ...] = (
    ("semver", lambda text: Semver(str(text))),
    ("quantity", lambda text: Quantity(str(text))),
    ("compareTo", _compare),
    ("isGreaterThan", lambda a, b: celtypes.BoolType(a > b)),
    ("isLessThan", lambda a, b: celtypes.BoolType(a < b)),
    ("major", lambda v: celtypes.IntType(v.parts[0])),
    ("minor", lambda v: celtypes.IntType(v.parts[1])),
    ("patch", lambda v: celtypes.IntType(v.parts[2])),
    ("asInteger", _as_integer),
)


def matches(expression: str, driver: str, device: Mapping[str, Any]) -> bool:
    """Does the selector take the device? An expression that fails matches nothing."""
    try:
        result = cel_program(expression, LIBRARY).evaluate({"device": cel_device(driver, device)})
    except (celpy.CELEvalError, ValueError, TypeError, KeyError):
        return False
    return result is True or (isinstance(result, celtypes.BoolType) and bool(result))


def cel_device(driver: str, device: Mapping[str, Any]) -> celtypes.MapType:
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, _, short = name.rpartition("/")
        attributes.setdefault(domain or driver, {})[short] = attribute_value(value)
    capacity: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, _, short = name.rpartition("/")
        capacity.setdefault(domain or driver, {})[short] = Quantity(value.get("value", "0"))
    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(driver),
            celtypes.StringType("attributes"): _cel_map(attributes),
            celtypes.StringType("capacity"): _cel_map(capacity),
        }
    )


def _cel_map(by_domain: Mapping[str, Mapping[str, Any]]) -> celtypes.MapType:
    return celtypes.MapType(
        {
            celtypes.StringType(domain): celtypes.MapType(
                {celtypes.StringType(k): v for k, v in values.items()}
            )
            for domain, values in by_domain.items()
        }
    )


def attribute_value(value: Mapping[str, Any]) -> Any:
    """One typed attribute value (`string`, `int`, `bool`, `version`, or a list of them)."""
    for kind, convert in (
        ("string", celtypes.StringType),
        ("int", celtypes.IntType),
        ("bool", celtypes.BoolType),
        ("version", Semver),
    ):
        if kind in value:
            return convert(value[kind])
        if f"{kind}s" in value:
            items: list[Any] = [convert(v) for v in value[f"{kind}s"]]
            return celtypes.ListType(items)
    return celtypes.StringType("")
