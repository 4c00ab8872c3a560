"""The stand-ins of a `devicePlugin: dra` cluster beside kube-scheduler (dynamicresources.py):
NVIDIA's DRA driver for GPUs, and kube-controller-manager's resourceclaim controller.

NVIDIA's DRA driver for GPUs, k8s-dra-driver-gpu v0.4.0, its kubelet plugin
(cmd/gpu-kubelet-plugin), with the Helm chart's default feature gates (static MIG, no
DynamicMIG), runs on each node with NVIDIA cards and publishes one ResourceSlice for it:

- through k8s.io/dynamic-resource-allocation's ResourceSlice controller (v0.36, vendored):
  driver `gpu.nvidia.com`, `spec.nodeName` the node, one pool named after the node
  (generation 1, one slice; an update of the one slice keeps the generation), owned by the
  Node (controller reference, so the garbage collector deletes it with the Node). It creates the
  slice under `generateName: <index, 5 hex digits>-gpu.nvidia.com-<node>-`; the API server's 5
  random characters are derived here from the Node's uid, so a run is repeatable. When the
  cluster stops running the driver, the kubelet wipes the driver's slices.
- devices (nvlib.go `GetPerGpuAllocatableDevices`, deviceinfo.go, mig.go): each card not in MIG
  mode is `gpu-<minor>`; a card in MIG mode is not published, its existing MIG devices are,
  each `gpu-<parent minor>-mig-<profile, dots dropped>-<GI profile ID>-<placement start>`.
  Attributes (unqualified: the driver's domain) `type` (`gpu`, `mig`), `uuid`, `productName`,
  `brand`, `architecture`, `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion`
  (versions as semver writes them: `9.0.0`, `580.159.3`), a MIG device's `parentUUID` and
  `profile` too, and `resource.kubernetes.io/pciBusID`; capacity `memory` in bytes (NVML's
  total; a MIG profile's size), a MIG device's `multiprocessors`, `copyEngines`, `decoders`,
  `encoders`, `jpegEngines`, `ofaEngines` and one `memorySlice<i>: 1` per memory slice its
  placement holds. Quantities are BinarySI, as `resource.NewQuantity(n, BinarySI)` prints them.
  The driver appends devices from a Go map, in no order; here by minor, then placement, the
  order kube-scheduler takes them in.
- health: with the `NVMLDeviceHealthCheck` gate (alpha, off in the chart) the driver taints a
  lost card's devices `gpu.nvidia.com/gpu-lost`, NoSchedule (device_health.go); without it, it
  checks nothing. An unhealthy card is played as the health check reports it: its devices stay
  in the slice, tainted, and kube-scheduler allocates no tainted device the request does not
  tolerate (DRA device taints, KEP-5055).

What the simulated NVML does not say is left out or taken from small tables of NVIDIA's own
figures: the brand (`Nvidia`, what NVML's brand reads for data-centre cards), the architecture
by compute capability (go-nvlib's names), GI profile IDs by the profile's shape (NVIDIA's MIG user
guide: `nvidia-smi mig -lgip`), and per-profile engines and SMs for the H100 80GB only; another
card's MIG devices carry memory and memory slices alone, a profile of a shape not in the table is
not published, and `resource.kubernetes.io/pcieRoot` (read from sysfs) is never.

Beside it the driver's device-plugin part (`DraPlugin`): under `dra` nothing is advertised for
NVIDIA's cards (they are claimed, not counted); other manufacturers' cards are whole cards
under their own plugins' names, as their vendors' device plugins serve them.

kube-controller-manager's resourceclaim controller (pkg/controller/resourceclaim/controller.go):
- for each Pod entry naming a `resourceClaimTemplateName` it creates the ResourceClaim, named by
  `generateName: <pod>-<entry>-` (both cut in proportion past 57 characters), annotated
  `resource.kubernetes.io/pod-claim-name: <entry>`, the template's labels and annotations, the
  Pod its controller (`blockOwnerDeletion`), the template's spec; and records it in the Pod's
  `status.resourceClaimStatuses`. A template not there yet is tried again next round.
- a reservation (`status.reservedFor`) of a Pod that is gone, replaced (another uid) or done
  (Succeeded or Failed, or deleted before it was scheduled) is removed; the last one removed
  deallocates the claim (its allocation cleared, kube-scheduler's finalizer taken off); an
  unreserved claim of a done or replaced Pod is deleted, one of a Pod gone is left to the
  garbage collector.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from gpustack_sim import kube
from gpustack_sim.client import Client
from gpustack_sim.deviceplugin import Allocate, Card, Grant, base_of

API = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
DIALECT = "dra"
NVIDIA = "nvidia"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
FINALIZER = "resource.kubernetes.io/delete-protection"  # kube-scheduler's, on what it allocates
PCI_BUS_ID = "resource.kubernetes.io/pciBusID"
GPU_LOST = {"key": f"{DRIVER}/gpu-lost", "effect": "NoSchedule"}
MIB = 1024 * 1024
BRAND = "Nvidia"
# The API server's generateName suffix (apimachinery's util/rand alphabet, 5 characters, the
# name cut to 58 before it).
RANDOM_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
RANDOM_LENGTH, GENERATED_BASE_MAX = 5, 58
CLAIM_BASE_MAX = 57  # the resourceclaim controller's `maxBaseLen`
TERMINAL = ("Succeeded", "Failed")

# go-nvlib's architecture names, by the compute capability's major (and minor) version.
ARCHITECTURES = {
    "3": "Kepler",
    "5": "Maxwell",
    "6": "Pascal",
    "7": "Volta",
    "7.5": "Turing",
    "8": "Ampere",
    "8.9": "Ada Lovelace",
    "9": "Hopper",
    "10": "Blackwell",
    "12": "Blackwell",
}
# GI profile IDs (NVIDIA's MIG user guide), by the card's memory slices and the profile's
# compute slices, memory slices and media extensions (`+me`): the same shape has the same ID on
# the A100, H100, H200 and B200 (eight memory slices) and on the A30 (four).
GI_PROFILE_IDS = {
    (8, 1, 1, False): 19,
    (8, 1, 1, True): 20,
    (8, 1, 2, False): 15,
    (8, 2, 2, False): 14,
    (8, 3, 4, False): 9,
    (8, 4, 4, False): 5,
    (8, 7, 8, False): 0,
    (4, 1, 1, False): 14,
    (4, 1, 1, True): 21,
    (4, 2, 2, False): 5,
    (4, 2, 2, True): 6,
    (4, 4, 4, False): 0,
}
ENGINES = ("multiprocessors", "decoders", "encoders", "copyEngines", "jpegEngines", "ofaEngines")
# `nvidia-smi mig -lgip` on an H100 80GB HBM3: SM, DEC, ENC, CE, JPEG, OFA per profile.
PROFILE_ENGINES = {
    "NVIDIA H100 80GB HBM3": {
        "1g.10gb": (16, 1, 0, 1, 1, 0),
        "1g.10gb+me": (16, 1, 0, 1, 1, 1),
        "1g.20gb": (26, 1, 0, 1, 1, 0),
        "2g.20gb": (32, 2, 0, 2, 2, 0),
        "3g.40gb": (60, 3, 0, 3, 3, 0),
        "4g.40gb": (64, 4, 0, 4, 4, 0),
        "7g.80gb": (132, 7, 0, 8, 7, 1),
    }
}
_NOT_RFC1123 = re.compile(r"[^a-z0-9.-]")
_SEMVER = re.compile(
    r"^v?(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-([0-9A-Za-z.-]+))?(?:\+([0-9A-Za-z.-]+))?$"
)


# --- the kubelet plugin's ResourceSlice -------------------------------------------------------


class NvidiaDraDriver:
    """The driver's kubelet plugin on every node with NVIDIA cards, while the cluster runs it."""

    def __init__(self, api: Client):
        self.api = api

    def run(self) -> None:
        running = kube.device_plugin(self.api) == DIALECT
        wanted: dict[str, dict[str, Any]] = {}
        for node in self.api.peek_list("Node") if running else ():
            found = self.resource_slice(node)
            if found is not None:
                wanted[found["metadata"]["name"]] = found
        for stale in self.own_slices():
            if stale["metadata"]["name"] not in wanted:
                self.api.delete("ResourceSlice", stale["metadata"]["name"])
        for resource_slice in wanted.values():
            self.api.apply(resource_slice)

    def own_slices(self) -> list[dict[str, Any]]:
        return [s for s in self.api.peek_list("ResourceSlice") if s["spec"].get("driver") == DRIVER]

    def resource_slice(self, node: Mapping[str, Any]) -> dict[str, Any] | None:
        """The node's slice, or None where no plugin runs (no NVIDIA card: the chart's
        DaemonSet selects nodes by NFD's NVIDIA PCI label)."""
        name = node["metadata"]["name"]
        vendors = nvidia_vendors(self.api.peek("Devices", name))
        if not vendors:
            return None
        owner = {"apiVersion": "v1", "kind": "Node", "name": name}
        owner |= {"uid": node["metadata"]["uid"], "controller": True}
        base = f"{0:05x}-{DRIVER}-{name}-"
        return {
            "apiVersion": API,
            "kind": "ResourceSlice",
            "metadata": {
                "name": generated_name(base, node["metadata"]["uid"]),
                "ownerReferences": [owner],
            },
            "spec": {
                "driver": DRIVER,
                "nodeName": name,
                "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                "devices": published_devices(vendors),
            },
        }


def nvidia_vendors(devices: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The NVIDIA entries of a node's Devices reading that list cards."""
    accelerators = ((devices or {}).get("spec") or {}).get("accelerators") or []
    return [v for v in accelerators if v.get("manufacturer") == NVIDIA and v.get("devices")]


def published_devices(vendors: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every card's devices: the card, or in MIG mode its MIG devices; by minor."""
    cards = [(vendor, card) for vendor in vendors for card in vendor["devices"]]
    found: list[dict[str, Any]] = []
    for vendor, card in sorted(cards, key=lambda found: minor(found[1])):
        devices = mig_devices(vendor, card) if mig_enabled(card) else [gpu_device(vendor, card)]
        if not card.get("healthy", True):
            devices = [{**device, "taints": [dict(GPU_LOST)]} for device in devices]
        found += devices
    return found


def minor(card: Mapping[str, Any]) -> int:
    """The card's device minor (/dev/nvidia<minor>), which names its devices."""
    return int(card.get("minor", card.get("index", 0)))


def mig_enabled(card: Mapping[str, Any]) -> bool:
    return bool((card.get("mig") or {}).get("enabled"))


def gpu_device(vendor: Mapping[str, Any], card: Mapping[str, Any]) -> dict[str, Any]:
    """A whole card (`GpuInfo.GetDevice`): its memory is NVML's total, where NVML reads one."""
    device: dict[str, Any] = {
        "name": f"gpu-{minor(card)}",
        "attributes": {"type": {"string": "gpu"}, **card_attributes(vendor, card)},
    }
    if card.get("memoryMiB"):
        device["capacity"] = {"memory": {"value": binary_quantity(card["memoryMiB"] * MIB)}}
    return device


def card_attributes(vendor: Mapping[str, Any], card: Mapping[str, Any]) -> dict[str, Any]:
    """What a card and its MIG devices share (`GpuInfo.Attributes`, `CommonAttributesMig`)."""
    attributes: dict[str, Any] = {"uuid": {"string": card["uuid"]}, "brand": {"string": BRAND}}
    if card.get("product"):
        attributes["productName"] = {"string": card["product"]}
    capability = str(card.get("computeCapability") or "")
    if capability:
        attributes["cudaComputeCapability"] = {"version": semver(capability)}
        attributes["architecture"] = {"string": architecture(capability)}
    versions = {"driverVersion": "driverVersion", "cudaDriverVersion": "runtimeVersion"}
    for attribute, field in versions.items():
        if vendor.get(field):
            attributes[attribute] = {"version": semver(str(vendor[field]))}
    if card.get("pciBusId"):
        attributes[PCI_BUS_ID] = {"string": pci_bus_id(card["pciBusId"])}
    return attributes


def mig_devices(vendor: Mapping[str, Any], card: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The MIG devices that exist on a card in MIG mode (`MigDeviceInfo.GetDevice`)."""
    mig = card.get("mig") or {}
    profiles = {p["name"]: p for p in mig.get("profiles") or []}
    slices = memory_slices(mig)
    found = []
    for partition in sorted(mig.get("partitions") or [], key=lambda p: p["placement"]["start"]):
        profile = profiles.get(partition["profile"], {"name": partition["profile"]})
        gi_profile = gi_profile_id(slices, profile)
        if gi_profile is not None:
            found.append(mig_device(vendor, card, partition, profile, gi_profile))
    return found


def mig_device(
    vendor: Mapping[str, Any],
    card: Mapping[str, Any],
    partition: Mapping[str, Any],
    profile: Mapping[str, Any],
    gi_profile: int,
) -> dict[str, Any]:
    placement = partition["placement"]
    name = profile["name"]
    shared = {k: v for k, v in card_attributes(vendor, card).items() if k != "uuid"}
    attributes = {
        "type": {"string": "mig"},
        "uuid": {"string": partition["uuid"]},
        "parentUUID": {"string": card["uuid"]},
        "profile": {"string": name},
        **shared,
    }
    capacity = {"memory": {"value": binary_quantity(int(profile.get("memoryMiB", 0)) * MIB)}}
    engines = PROFILE_ENGINES.get(card.get("product", ""), {}).get(name)
    if engines:
        capacity |= {key: {"value": str(n)} for key, n in zip(ENGINES, engines, strict=True)}
    for index in range(placement["start"], placement["start"] + placement["size"]):
        capacity[f"memorySlice{index}"] = {"value": "1"}
    start = placement["start"]
    return {
        "name": f"gpu-{minor(card)}-mig-{rfc1123(name.replace('.', ''))}-{gi_profile}-{start}",
        "attributes": attributes,
        "capacity": capacity,
    }


def memory_slices(mig: Mapping[str, Any]) -> int:
    """How many memory slices the card has: where its widest placement ends."""
    ends = [
        p["start"] + p["size"]
        for profile in mig.get("profiles") or []
        for p in profile.get("placements") or []
    ]
    return max(ends, default=8)


def gi_profile_id(card_slices: int, profile: Mapping[str, Any]) -> int | None:
    """The profile's GI profile ID (NVML's), from its shape; None for a shape not tabled."""
    compute = profile.get("computeSlices") or _leading_number(profile["name"])
    memory = profile.get("memorySlices") or compute
    return GI_PROFILE_IDS.get((card_slices, compute, memory, profile["name"].endswith("+me")))


def _leading_number(profile: str) -> int:
    found = re.match(r"\d+", profile)
    return int(found.group()) if found else 0


def architecture(capability: str) -> str:
    major = capability.split(".")[0]
    return ARCHITECTURES.get(capability, ARCHITECTURES.get(major, "Unknown"))


def semver(text: str) -> str:
    """A version as Masterminds/semver parses it loosely and writes it (`9.0` is `9.0.0`, a
    leading zero dropped); the text itself where it is no version."""
    found = _SEMVER.match(text.strip())
    if not found:
        return text
    major, minor_, patch, pre, meta = found.groups()
    version = f"{int(major)}.{int(minor_ or 0)}.{int(patch or 0)}"
    return version + (f"-{pre}" if pre else "") + (f"+{meta}" if meta else "")


def pci_bus_id(bus_id: str) -> str:
    """go-nvlib's `GetPCIBusID`: lower case, NVML's 8-digit domain cut to 4."""
    found = bus_id.lower()
    return found.removeprefix("0000") if found != "0000" else found


def rfc1123(name: str) -> str:
    """The driver's `toRFC1123Compliant`."""
    return _NOT_RFC1123.sub("-", name.lower()).strip("-").removesuffix(".")[:253]


def binary_quantity(amount: int) -> str:
    """How a BinarySI `resource.Quantity` of a whole number prints: the largest binary suffix
    that keeps it whole (`81559Mi`, `40Gi`), none below 1024."""
    for exponent, suffix in (
        (60, "Ei"),
        (50, "Pi"),
        (40, "Ti"),
        (30, "Gi"),
        (20, "Mi"),
        (10, "Ki"),
    ):
        if amount and amount % 2**exponent == 0:
            return f"{amount // 2**exponent}{suffix}"
    return str(amount)


def generated_name(base: str, seed: str) -> str:
    """The name the API server gives an object created with `generateName: base`: the base cut
    to 58 characters, then 5 characters of its alphabet, here from `seed`, not at random."""
    digest = hashlib.sha256(f"{base}\0{seed}".encode()).digest()
    suffix = "".join(RANDOM_ALPHABET[b % len(RANDOM_ALPHABET)] for b in digest[:RANDOM_LENGTH])
    return base[:GENERATED_BASE_MAX] + suffix


# --- the device-plugin part -------------------------------------------------------------------


class DraPlugin:
    """What the kubelet's device plugins serve in a `dra` cluster: NVIDIA's cards are claimed
    through DRA, so no NVIDIA device plugin advertises them; another manufacturer's healthy
    cards (not in MIG mode) are whole cards under its plugin's name, each device its UUID."""

    def advertise(self, node: Mapping[str, Any], cards: list[Card]) -> dict[str, int]:
        return dict(Counter(base_of(c.manufacturer) for c in _whole_cards(cards)))

    def allocate(self, call: Allocate) -> list[Grant] | str:
        taken = {device for grant in call.held for device in grant.device_ids}
        grants: list[Grant] = []
        for manufacturer in sorted({c.manufacturer for c in _whole_cards(call.cards)}):
            base = base_of(manufacturer)
            count = call.wanted.get(base, 0)
            free = [c for c in _whole_cards(call.cards) if c.manufacturer == manufacturer]
            free = [c for c in free if c.uuid not in taken]
            if len(free) < count:
                return f"{base}: {count} whole cards requested, {len(free)} free"
            grants += [Grant(base, (c.uuid,), c.uuid, "exclusive") for c in free[:count]]
        return grants


def _whole_cards(cards: Iterable[Card]) -> list[Card]:
    return [c for c in cards if c.healthy and not c.mig and c.manufacturer != NVIDIA]


# --- kube-controller-manager's resourceclaim controller ---------------------------------------


class ResourceClaimController:
    def __init__(self, api: Client):
        self.api = api

    def run(self) -> None:
        for pod in self.api.list("Pod"):
            if not _deleting(pod) and not pod_done(pod):
                self.make_claims(pod)
        pods = {kube.pod_key(p): p for p in self.api.peek_list("Pod")}
        for claim in self.api.list("ResourceClaim"):
            self.release(claim, pods)

    # --- claims made from templates ---------------------------------------------------------

    def make_claims(self, pod: dict[str, Any]) -> None:
        """Each template entry's claim, where it is not made yet; then the Pod's status."""
        recorded = {s["name"]: s for s in _claim_statuses(pod)}
        made = dict(recorded)
        for entry in pod["spec"].get("resourceClaims") or []:
            if not entry.get("resourceClaimTemplateName"):
                continue
            name = (recorded.get(entry["name"]) or {}).get("resourceClaimName")
            if name and self.owned_claim(pod, name, entry["name"]):
                continue
            claim = self.claim_from_template(pod, entry)
            if claim is None:
                continue
            name = claim["metadata"]["name"]
            if not self.owned_claim(pod, name, entry["name"]):  # `findPodResourceClaim`
                self.api.apply(claim)
            made[entry["name"]] = {"name": entry["name"], "resourceClaimName": name}
        if made != recorded:
            order = [e["name"] for e in pod["spec"].get("resourceClaims") or []]
            pod.setdefault("status", {})["resourceClaimStatuses"] = sorted(
                made.values(), key=lambda s: order.index(s["name"]) if s["name"] in order else 0
            )
            self.api.update_status(pod)

    def owned_claim(self, pod: Mapping[str, Any], name: str, entry: str) -> bool:
        """Is there a claim of this name made for the Pod's entry (controlled by the Pod,
        annotated with the entry's name)?"""
        claim = self.api.peek("ResourceClaim", name, pod["metadata"]["namespace"])
        return (
            claim is not None
            and owner_uid(claim) == pod["metadata"]["uid"]
            and (claim["metadata"].get("annotations") or {}).get(POD_CLAIM_NAME) == entry
        )

    def claim_from_template(
        self, pod: Mapping[str, Any], entry: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        """The claim the controller creates for one entry; None while its template is missing
        (the controller reports the error and tries again)."""
        namespace = pod["metadata"]["namespace"]
        template = self.api.get(
            "ResourceClaimTemplate", entry["resourceClaimTemplateName"], namespace
        )
        if template is None:
            return None
        meta = (template.get("spec") or {}).get("metadata") or {}
        metadata: dict[str, Any] = {
            "name": generated_name(
                claim_base(pod["metadata"]["name"], entry["name"]), pod["metadata"]["uid"]
            ),
            "namespace": namespace,
            "annotations": {**(meta.get("annotations") or {}), POD_CLAIM_NAME: entry["name"]},
            "ownerReferences": [pod_owner(pod)],
        }
        if meta.get("labels"):
            metadata["labels"] = dict(meta["labels"])
        spec = (template.get("spec") or {}).get("spec") or {}
        return {"apiVersion": API, "kind": "ResourceClaim", "metadata": metadata, "spec": spec}

    # --- reservations released, claims deallocated and deleted --------------------------------

    def release(self, claim: dict[str, Any], pods: Mapping[str, Mapping[str, Any]]) -> None:
        namespace = claim["metadata"]["namespace"]
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        valid = [r for r in reserved if _still_using(r, pods.get(f"{namespace}/{r['name']}"))]
        if len(valid) < len(reserved):
            claim = self.deallocated(claim, valid)
        if not valid:
            owner = pods.get(f"{namespace}/{_owner_name(claim)}") if _owner_name(claim) else None
            if owner is not None and (
                owner["metadata"]["uid"] != owner_uid(claim) or pod_done(owner)
            ):
                self.api.delete("ResourceClaim", claim["metadata"]["name"], namespace)

    def deallocated(self, claim: dict[str, Any], valid: list[Any]) -> dict[str, Any]:
        """The reservations kept; with none left, the allocation cleared and kube-scheduler's
        finalizer taken off (it allocated the claim)."""
        status = {**claim["status"], "reservedFor": valid}
        finalizers = claim["metadata"].get("finalizers") or []
        if not valid and FINALIZER in finalizers:
            status = {k: v for k, v in status.items() if k not in ("allocation", "devices")}
        if not status.get("reservedFor"):
            status.pop("reservedFor", None)
        claim = self.api.update_status({**claim, "status": status})
        if FINALIZER in finalizers and "allocation" not in claim.get("status", {}):
            kept = [f for f in finalizers if f != FINALIZER]
            metadata = {k: v for k, v in claim["metadata"].items() if k != "finalizers"}
            claim = self.api.apply(
                {**claim, "metadata": metadata | ({"finalizers": kept} if kept else {})}
            )
        return claim


def claim_base(pod: str, entry: str) -> str:
    """The controller's `generateName` for a claim: `<pod>-<entry>-`, past 57 characters the
    two cut in proportion to their lengths (and then no dash at the end)."""
    base = f"{pod}-{entry}-"
    if len(base) <= CLAIM_BASE_MAX:
        return base
    return (
        pod[: len(pod) * CLAIM_BASE_MAX // len(base)]
        + "-"
        + entry[: len(entry) * CLAIM_BASE_MAX // len(base)]
    )


def pod_owner(pod: Mapping[str, Any]) -> dict[str, Any]:
    metadata = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owner_uid(claim: Mapping[str, Any]) -> str:
    """The uid of the Pod that controls the claim ("" for none)."""
    return str((_pod_controller(claim) or {}).get("uid", ""))


def _owner_name(claim: Mapping[str, Any]) -> str:
    return str((_pod_controller(claim) or {}).get("name", ""))


def _pod_controller(claim: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for reference in claim["metadata"].get("ownerReferences") or []:
        if reference.get("kind") == "Pod" and reference.get("controller"):
            return reference
    return None


def pod_done(pod: Mapping[str, Any]) -> bool:
    """The controller's `isPodDone`: it will not run (again)."""
    phase = (pod.get("status") or {}).get("phase")
    return phase in TERMINAL or (_deleting(pod) and not pod["spec"].get("nodeName"))


def _still_using(reference: Mapping[str, Any], pod: Mapping[str, Any] | None) -> bool:
    if reference.get("resource") != "pods" or reference.get("apiGroup"):
        return True  # a consumer other than a Pod is not the controller's to judge
    return pod is not None and pod["metadata"]["uid"] == reference.get("uid") and not pod_done(pod)


def _claim_statuses(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((pod.get("status") or {}).get("resourceClaimStatuses") or [])


def _deleting(obj: Mapping[str, Any]) -> bool:
    return "deletionTimestamp" in (obj.get("metadata") or {})


def pod_claim_names(pod: Mapping[str, Any]) -> dict[str, str | None]:
    """Each of the Pod's claim entries, by its name, to the ResourceClaim behind it: the one it
    names, or the one made from its template (None while not made yet: `resourceclaim.Name`)."""
    made = {s["name"]: s.get("resourceClaimName") for s in _claim_statuses(pod)}
    return {
        entry["name"]: entry.get("resourceClaimName") or made.get(entry["name"])
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []
    }
