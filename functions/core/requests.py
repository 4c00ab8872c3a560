"""Instance resource requests: shape, validation, sizing, Pod resource keys, credits.

The reference's Instance defaulting (§5.1), its validation rules and messages (§8.2) and the
container resource keys (§5.3), decided once here for the instance handler, the simulator and
the tests. `plan()` is the one entry point: it either refuses with field-named reasons, or
returns the sized request with the Pod's requests/limits and the credits Kueue will charge.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction
from typing import Any

from functions.core import quantity
from functions.core.ledger import credits_for
from functions.core.quantity import GIB, MIB, QuantityError

RESOURCE_NAMES = {
    "amd": "amd.com/gpu",
    "ascend": "huawei.com/npu",
    "cambricon": "cambricon.com/mlu",
    "hygon": "hygon.com/dcu",
    "iluvatar": "iluvatar.com/gpu",
    "metax": "metax-tech.com/gpu",
    "mthreads": "mthreads.com/gpu",
    "nvidia": "nvidia.com/gpu",
    "thead": "alibabacloud.com/ppu",
}
PARTITION_KINDS = {"nvidia": "mig", "thead": "mig", "hygon": "mig"}
EPHEMERAL_DEFAULT = 15 * GIB
_RESOURCE_NAME_PART = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")

FIELD = "spec.resources"


class Shape(Enum):
    WHOLE = "whole"
    SHARED = "shared"
    SLICED = "sliced"
    PARTITIONED = "partitioned"
    NONE = "none"


@dataclass(frozen=True)
class Refusal:
    """Why an Instance cannot be composed: the field, the message, and a condition reason."""

    field: str
    message: str
    reason: str = "InvalidSpec"

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class InstanceTypeFacts:
    """What an Instance needs to know of its InstanceType (spec plus observed status)."""

    name: str
    acceleratable: bool
    unit_cpu: int
    unit_ram: int  # bytes
    local_storage: int  # bytes
    manufacturer: str = ""  # from status.detail; "" means the detail is not published yet
    card_memory_mib: int = 0
    logically_sliceable: bool = False
    profiles: Mapping[str, int] = field(default_factory=dict)  # offered partition → MiB
    largest_node_cards: int = 0
    largest_node_cores: int = 0
    cpu_capacity: int = 0

    @property
    def ready(self) -> bool:
        return bool(self.manufacturer)

    @property
    def base(self) -> str:
        return RESOURCE_NAMES.get(self.manufacturer, f"{self.manufacturer}.com/gpu")


@dataclass(frozen=True)
class ResourceRequest:
    """`spec.resources` as the tenant wrote it (None: not given)."""

    accelerator: Fraction | None = None
    shared: int = 0
    memory_percentage: int = 0
    cores_percentage: int = 0
    profile: str = ""
    cpu: Fraction | None = None
    ram: Fraction | None = None
    local_storage: Fraction | None = None

    @classmethod
    def from_spec(cls, resources: Mapping[str, Any] | None) -> ResourceRequest | Refusal:
        resources = resources or {}
        values: dict[str, Any] = {}
        for key, attr in (
            ("accelerator", "accelerator"),
            ("cpu", "cpu"),
            ("ram", "ram"),
            ("localStorage", "local_storage"),
        ):
            if resources.get(key) is not None:
                try:
                    values[attr] = quantity.parse(resources[key])
                except QuantityError as error:
                    return Refusal(f"{FIELD}.{key}", str(error))
        for key, attr in (
            ("acceleratorShared", "shared"),
            ("acceleratorSlicedMemoryPercentage", "memory_percentage"),
            ("acceleratorSlicedCoresPercentage", "cores_percentage"),
        ):
            value = resources.get(key, 0) or 0
            if isinstance(value, bool) or not isinstance(value, int):
                return Refusal(f"{FIELD}.{key}", f"must be an integer, got {value!r}")
            values[attr] = value
        profile = resources.get("acceleratorPartitionedProfile") or ""
        if not isinstance(profile, str):
            return Refusal(f"{FIELD}.acceleratorPartitionedProfile", "must be a string")
        return cls(profile=profile, **values)

    def shape(self, facts: InstanceTypeFacts) -> Shape:
        if not facts.acceleratable:
            return Shape.NONE
        if self.profile:
            return Shape.PARTITIONED
        if self.memory_percentage or self.cores_percentage:
            return Shape.SLICED
        if self.shared:
            return Shape.SHARED
        if self.accelerator is not None and self.accelerator == 0:
            return Shape.NONE
        return Shape.WHOLE


@dataclass(frozen=True)
class Plan:
    """A request sized for its InstanceType, ready to become a Pod."""

    shape: Shape
    cards: int  # cards (whole), cards with one share each (shared), 1 (slice/partition), 0
    cpu: Fraction
    ram: int
    local_storage: int
    memory_percentage: int = 0
    cores_percentage: int = 0
    profile: str = ""
    credits: int = 0
    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)


def plan(
    resources: Mapping[str, Any] | None, facts: InstanceTypeFacts, overcommit: bool = True
) -> Plan | list[Refusal]:
    """Validate, size and render an Instance's resources; refusals name the field."""
    request = ResourceRequest.from_spec(resources)
    if isinstance(request, Refusal):
        return [request]
    shape = request.shape(facts)
    if shape in (Shape.SLICED, Shape.PARTITIONED) and not facts.ready:
        return [
            Refusal(
                "spec.type",
                f"instance type {facts.name} is not ready yet; retry",
                "InstanceTypeNotReady",
            )
        ]
    refusals = _validate_shape(request, shape, facts)
    if refusals:
        return refusals
    sized = _size(request, shape, facts, overcommit)
    refusals = _validate_caps(sized, facts, request)
    if refusals:
        return refusals
    return _render(sized, facts, overcommit)


def _validate_shape(
    request: ResourceRequest, shape: Shape, facts: InstanceTypeFacts
) -> list[Refusal]:
    refusals = _validate_general(request, facts)
    accelerator = request.accelerator
    if not facts.acceleratable:
        if (accelerator is not None and accelerator > 0) or request.shared:
            refusals.append(
                Refusal(
                    f"{FIELD}.accelerator",
                    "accelerator request must not be specified for non-acceleratable instance type",
                )
            )
        return refusals
    if shape is Shape.PARTITIONED:
        refusals += _validate_partition(request, facts)
    elif shape is Shape.SLICED:
        refusals += _validate_slice(request, facts)
    elif shape is Shape.SHARED:
        refusals += _validate_shared(request, facts)
    elif shape is Shape.WHOLE:
        refusals += _validate_whole(accelerator if accelerator is not None else Fraction(1), facts)
    return refusals


def _validate_general(request: ResourceRequest, facts: InstanceTypeFacts) -> list[Refusal]:
    refusals = []
    for key, value, what in (
        ("cpu", request.cpu, "CPU"),
        ("ram", request.ram, "RAM"),
        ("localStorage", request.local_storage, "local storage"),
    ):
        if value is not None and value < 0:
            refusals.append(Refusal(f"{FIELD}.{key}", f"{what} request cannot be negative"))
    if facts.acceleratable or request.cpu is None or request.cpu <= 0:
        return refusals
    if request.cpu > facts.largest_node_cores:
        if facts.cpu_capacity == 0:
            message = f"instance type {facts.name} has no CPU capacity: no managed node currently backs it"
        else:
            bound = facts.largest_node_cores
            message = f"exceeds the maximum CPU request {bound} of instance type {facts.name}"
        refusals.append(Refusal(f"{FIELD}.cpu", message))
    return refusals


def _validate_partition(request: ResourceRequest, facts: InstanceTypeFacts) -> list[Refusal]:
    at = f"{FIELD}.acceleratorPartitionedProfile"
    if request.memory_percentage or request.cores_percentage:
        return [
            Refusal(
                f"{FIELD}.acceleratorSlicedMemoryPercentage",
                "a hardware partition and a logical slice percentage are mutually exclusive; "
                "clear acceleratorSlicedMemoryPercentage and acceleratorSlicedCoresPercentage",
                "Forbidden",
            )
        ]
    if facts.manufacturer not in PARTITION_KINDS:
        return [
            Refusal(at, f"manufacturer {facts.manufacturer} does not support hardware partitioning")
        ]
    if not facts.profiles:
        return [Refusal(at, f"instance type {facts.name} does not offer hardware partitioning")]
    if request.profile not in facts.profiles:
        offered = " ".join(sorted(facts.profiles))
        return [
            Refusal(
                at,
                f"instance type {facts.name} does not offer this partition profile; offered: [{offered}]",
            )
        ]
    key = partition_key(facts, request.profile).rsplit("/", 1)[1]
    if len(key) > 63 or not _RESOURCE_NAME_PART.match(key):
        return [Refusal(at, "partition profile name does not yield a valid resource name")]
    if request.accelerator is not None and request.accelerator != 1:
        return [
            Refusal(
                f"{FIELD}.accelerator",
                "accelerator request must be exactly 1 for a partitioned request",
            )
        ]
    return []


def _validate_slice(request: ResourceRequest, facts: InstanceTypeFacts) -> list[Refusal]:
    if not facts.logically_sliceable:
        return [
            Refusal(
                f"{FIELD}.acceleratorSlicedMemoryPercentage",
                f"instance type {facts.name} does not offer logical slicing",
                "Forbidden",
            )
        ]
    refusals = [
        Refusal(f"{FIELD}.{key}", "must be between 0 and 100")
        for key, value in (
            ("acceleratorSlicedMemoryPercentage", request.memory_percentage),
            ("acceleratorSlicedCoresPercentage", request.cores_percentage),
        )
        if not 0 <= value <= 100
    ]
    if request.accelerator is not None and request.accelerator != 1:
        refusals.append(
            Refusal(
                f"{FIELD}.accelerator", "accelerator request must be exactly 1 for a sliced request"
            )
        )
    return refusals


def _validate_shared(request: ResourceRequest, facts: InstanceTypeFacts) -> list[Refusal]:
    at = f"{FIELD}.acceleratorShared"
    if request.accelerator is not None:
        return [
            Refusal(
                f"{FIELD}.accelerator",
                "accelerator and acceleratorShared are mutually exclusive; clear accelerator",
                "Forbidden",
            )
        ]
    if request.shared < 0:
        return [Refusal(at, "shared accelerator request cannot be negative")]
    if request.shared > facts.largest_node_cards:
        return [
            Refusal(
                at,
                f"a shared request takes one share on {request.shared} distinct cards of one node; "
                f"the largest node of instance type {facts.name} has {facts.largest_node_cards}",
            )
        ]
    return []


def _validate_whole(accelerator: Fraction, facts: InstanceTypeFacts) -> list[Refusal]:
    at = f"{FIELD}.accelerator"
    if accelerator < 0:
        return [Refusal(at, "accelerator request cannot be negative")]
    if accelerator.denominator != 1:
        return [Refusal(at, "accelerator request must be a whole number of cards")]
    # A request no node can ever hold is refused; one that merely has to wait is admitted.
    if accelerator > facts.largest_node_cards:
        return [
            Refusal(
                at,
                f"exceeds the maximum accelerator request {facts.largest_node_cards} "
                f"of instance type {facts.name}",
            )
        ]
    return []


@dataclass(frozen=True)
class _Sized:
    shape: Shape
    cards: int
    cpu: Fraction
    ram: int
    local_storage: int
    unit_count: int
    memory_percentage: int = 0
    cores_percentage: int = 0
    profile: str = ""


def _fill(requested: Fraction | None, computed: Fraction | int, overcommit: bool) -> Fraction:
    """Overcommit overwrites the tenant's figure; without it only an unset (zero) one is filled."""
    if overcommit or not requested:
        return Fraction(computed)
    return requested


def _size(
    request: ResourceRequest, shape: Shape, facts: InstanceTypeFacts, overcommit: bool
) -> _Sized:
    unit_cpu, unit_ram = facts.unit_cpu, facts.unit_ram
    percent, cards, unit_count = 100, 1, 1
    memory_pct = cores_pct = 0
    if shape is Shape.PARTITIONED:
        profile_mib = facts.profiles[request.profile]
        percent = min(100, max(1, profile_mib * 100 // facts.card_memory_mib))
    elif shape is Shape.SLICED:
        memory_pct = request.memory_percentage or request.cores_percentage
        cores_pct = request.cores_percentage or request.memory_percentage
        percent = memory_pct
    elif shape is Shape.SHARED:
        cards = request.shared
        percent = 100 * cards // 10
    elif shape is Shape.WHOLE:
        cards = int(request.accelerator) if request.accelerator is not None else 1
        unit_count = max(cards, 1)
        percent = 100 * unit_count
    elif shape is Shape.NONE:
        cards = 0
    if not facts.acceleratable:
        cpu_count = quantity.ceil(request.cpu) if request.cpu else 1
        unit_count = cpu_count
        cpu = request.cpu if request.cpu else Fraction(1)
        ram = _fill(request.ram, unit_ram * cpu_count, overcommit)
    else:
        cpu = _fill(request.cpu, max(1, unit_cpu * percent // 100), overcommit)
        ram = _fill(request.ram, unit_ram * percent // 100, overcommit)
    storage = request.local_storage or Fraction(min(EPHEMERAL_DEFAULT, facts.local_storage))
    return _Sized(
        shape=shape,
        cards=cards,
        cpu=cpu,
        ram=quantity.ceil(ram),  # a byte count rounds up, as Kubernetes reads quantities
        local_storage=quantity.ceil(storage),
        unit_count=unit_count,
        memory_percentage=memory_pct,
        cores_percentage=cores_pct,
        profile=request.profile,
    )


def _validate_caps(
    sized: _Sized, facts: InstanceTypeFacts, request: ResourceRequest
) -> list[Refusal]:
    refusals = []
    count = sized.unit_count
    if facts.acceleratable and sized.cpu > facts.unit_cpu * count:
        bound = facts.unit_cpu * count
        refusals.append(
            Refusal(
                f"{FIELD}.cpu", f"exceeds the maximum CPU {bound} of instance type {facts.name}"
            )
        )
    if sized.ram > facts.unit_ram * count:
        bound = quantity.format_binary(facts.unit_ram * count)
        refusals.append(
            Refusal(
                f"{FIELD}.ram", f"exceeds the maximum RAM {bound} of instance type {facts.name}"
            )
        )
    if sized.local_storage > facts.local_storage:
        bound = quantity.format_binary(facts.local_storage)
        refusals.append(
            Refusal(
                f"{FIELD}.localStorage",
                f"exceeds the local storage {bound} of instance type {facts.name}",
            )
        )
    return refusals


def partition_key(facts: InstanceTypeFacts, profile: str) -> str:
    kind = PARTITION_KINDS.get(facts.manufacturer, "mig")
    return f"{facts.base}.partitioned.{kind}-{profile}"


def accelerator_keys(sized: _Sized | Plan, facts: InstanceTypeFacts) -> dict[str, str]:
    """The accelerator resource keys on `main` for each request shape (requests = limits)."""
    base = facts.base
    if sized.shape is Shape.PARTITIONED:
        return {f"{base}.partitioned": "1", partition_key(facts, sized.profile): "1"}
    if sized.shape is Shape.SLICED:
        return {
            f"{base}.sliced": "1",
            f"{base}.sliced.memory-percentage": str(sized.memory_percentage),
            f"{base}.sliced.cores-percentage": str(sized.cores_percentage),
        }
    if sized.shape is Shape.SHARED:
        return {f"{base}.shared": str(sized.cards)}
    if sized.shape is Shape.WHOLE:
        return {base: str(sized.cards)}
    return {}


MODES = {
    Shape.WHOLE: "Exclusive",
    Shape.SHARED: "Shared",
    Shape.SLICED: "Sliced",
    Shape.PARTITIONED: "Partitioned",
}


def credits(sized: _Sized | Plan, facts: InstanceTypeFacts) -> int:
    """What Kueue charges the pool's `credits.gpustack.ai/<manufacturer>` for this request."""
    mode = MODES.get(sized.shape, "")
    return credits_for(
        mode,
        cards=sized.cards,
        memory_percentage=sized.memory_percentage,
        profile_mib=facts.profiles.get(sized.profile, 0),
        card_mib=facts.card_memory_mib,
    )


def overcommitted_requests(
    cpu: Fraction, ram: int, local_storage: int, acceleratable: bool
) -> dict[str, str]:
    """Requests under overcommit: 100m (accelerated) or 800m per core, 128Mi per GiB."""
    per_core = Fraction(1, 10) if acceleratable else Fraction(8, 10)
    cpu_request = min(per_core * quantity.ceil(cpu), cpu)
    return {
        "cpu": quantity.format_decimal(cpu_request),
        "memory": quantity.format_binary(128 * MIB * (ram // GIB)),
        "ephemeral-storage": quantity.format_binary(128 * MIB * (local_storage // GIB)),
    }


def _render(sized: _Sized, facts: InstanceTypeFacts, overcommit: bool) -> Plan:
    limits = {
        "cpu": quantity.format_decimal(sized.cpu),
        "memory": quantity.format_binary(sized.ram),
        "ephemeral-storage": quantity.format_binary(sized.local_storage),
    }
    if overcommit:
        requests = overcommitted_requests(
            sized.cpu, sized.ram, sized.local_storage, facts.acceleratable
        )
    else:
        requests = dict(limits)
    keys = accelerator_keys(sized, facts)
    return Plan(
        shape=sized.shape,
        cards=sized.cards,
        cpu=sized.cpu,
        ram=sized.ram,
        local_storage=sized.local_storage,
        memory_percentage=sized.memory_percentage,
        cores_percentage=sized.cores_percentage,
        profile=sized.profile,
        credits=credits(sized, facts),
        requests={**requests, **keys},
        limits={**limits, **keys},
    )
