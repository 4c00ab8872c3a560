"""Instance resource requests: the claim, validation, sizing, Pod resource keys and credits.

The reference's Instance defaulting (§5.1), its validation rules and messages (§8.2) and the
container resource keys (§5.3), decided once here for the instance handler and the tests.
`plan()` is the one entry point: it refuses with field-named reasons, asks to wait while the
InstanceType has not published what a slice or a partition needs, or returns the sized request
with the Pod's requests/limits and the credits Kueue will charge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from functions.core import dialects, quantity, reasons, resources
from functions.core.dialects import DEFAULT, DIALECTS, Dialect
from functions.core.modes import MODES, Claim, Mode
from functions.core.quantity import GIB, MIB, QuantityError

EPHEMERAL_DEFAULT = 15 * GIB
FIELD = "spec.resources"
# The fields an accelerator is asked for with, as the table of modes names them.
(ACCELERATOR,) = (f.name for f in MODES[Mode.EXCLUSIVE].fields)
(SHARED,) = (f.name for f in MODES[Mode.SHARED].fields)
SLICE_MEMORY, SLICE_CORES = (f.name for f in MODES[Mode.SLICED].fields)
(PROFILE,) = (f.name for f in MODES[Mode.PARTITIONED].fields)


@dataclass(frozen=True)
class Refusal:
    """Why an Instance cannot be composed: the field, the message, and a condition reason."""

    field: str
    message: str
    reason: str = reasons.INVALID_RESOURCES

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class Wait:
    """Not yet: something the request depends on has not been published; it will be."""

    reason: str
    message: str


@dataclass(frozen=True)
class InstanceTypeFacts:
    """What an Instance needs to know of its InstanceType (spec plus published status)."""

    name: str
    acceleratable: bool
    unit_cpu: int
    unit_ram: int  # bytes
    local_storage: int  # bytes
    accelerator_group: str = ""  # the aKey of an accelerated type
    manufacturer: str = ""  # "" while the InstanceType has not published its hardware
    card_memory_mib: int = 0
    modes: frozenset[Mode] = frozenset()  # the sharing modes the pool offers
    profiles: Mapping[str, int] = field(default_factory=dict)  # offered partition → MiB
    profile_credits: Mapping[str, int] = field(default_factory=dict)  # offered partition → price
    largest_node_cards: int = 0
    largest_node_cores: int = 0
    cpu_capacity: int = 0
    entrance: str = ""
    phase: str = ""

    @property
    def ready(self) -> bool:
        return bool(self.manufacturer)

    @property
    def logically_sliceable(self) -> bool:
        return Mode.SLICED in self.modes


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
        for key, attr in _QUANTITIES.items():
            if resources.get(key) is not None:
                try:
                    values[attr] = quantity.parse(resources[key])
                except QuantityError as error:
                    return Refusal(f"{FIELD}.{key}", str(error))
        for key, attr in _INTEGERS.items():
            value = resources.get(key, 0) or 0
            if isinstance(value, bool) or not isinstance(value, int):
                return Refusal(f"{FIELD}.{key}", f"must be an integer, got {value!r}")
            values[attr] = value
        profile = resources.get(PROFILE) or ""
        if not isinstance(profile, str):
            return Refusal(f"{FIELD}.{PROFILE}", "must be a string")
        return cls(profile=profile, **values)

    def mode(self, facts: InstanceTypeFacts) -> Mode:
        """The sharing mode the tenant asks for (reference §5.3's precedence)."""
        if not facts.acceleratable:
            return Mode.NONE
        if self.profile:
            return Mode.PARTITIONED
        if self.memory_percentage or self.cores_percentage:
            return Mode.SLICED
        if self.shared:
            return Mode.SHARED
        if self.accelerator is not None and self.accelerator == 0:
            return Mode.NONE
        return Mode.EXCLUSIVE

    def claim(self, mode: Mode) -> Claim:
        """The claim before sizing; a slice copies one percentage to the other (§5.1)."""
        if mode is Mode.EXCLUSIVE:
            return Claim(mode, int(self.accelerator) if self.accelerator is not None else 1)
        if mode is Mode.SHARED:
            return Claim(mode, self.shared)
        if mode is Mode.SLICED:
            memory = self.memory_percentage or self.cores_percentage
            cores = self.cores_percentage or self.memory_percentage
            return Claim(mode, 1, memory_percentage=memory, cores_percentage=cores)
        if mode is Mode.PARTITIONED:
            return Claim(mode, 1, profile=self.profile)
        return Claim()


_QUANTITIES = {
    ACCELERATOR: "accelerator",
    "cpu": "cpu",
    "ram": "ram",
    "localStorage": "local_storage",
}
_INTEGERS = {
    SHARED: "shared",
    SLICE_MEMORY: "memory_percentage",
    SLICE_CORES: "cores_percentage",
}


@dataclass(frozen=True)
class Plan:
    """A request sized for its InstanceType, ready to become a Pod."""

    claim: Claim
    cpu: Fraction
    ram: int
    local_storage: int
    requests: dict[str, str] = field(default_factory=dict)
    limits: dict[str, str] = field(default_factory=dict)

    @property
    def credits(self) -> int:
        return self.claim.credits


def plan(
    resources: Mapping[str, Any] | None,
    facts: InstanceTypeFacts,
    overcommit: bool = True,
    dialect: Dialect = DIALECTS[DEFAULT],
) -> Plan | list[Refusal] | Wait:
    """Validate, size and render an Instance's resources for the cluster's device plugin
    (`dialect`); refusals name the field."""
    request = ResourceRequest.from_spec(resources)
    if isinstance(request, Refusal):
        return [request]
    mode = request.mode(facts)
    # A slice or a partition is never sized as a whole card: without the published hardware
    # it waits (§5.1). Whole cards and shares are validated first, then wait to be keyed.
    if mode is not Mode.NONE and MODES[mode].one_card and not facts.ready:
        return _not_ready(facts)
    if facts.ready and mode is not Mode.NONE and mode not in dialect.modes(facts.manufacturer):
        return [_inexpressible(mode, facts, dialect)]
    refusals = _validate_general(request, facts) + _VALIDATE[mode](request, facts, dialect)
    if refusals:
        return refusals
    if mode is not Mode.NONE and not facts.ready:
        return _not_ready(facts)
    claim = request.claim(mode).sized(
        facts.card_memory_mib, facts.profile_credits.get(request.profile, 0)
    )
    refused = dialect.refusal(claim)
    if refused is not None:
        at, message = refused
        return [Refusal(f"{FIELD}.{at}", message, reasons.FORBIDDEN)]
    sized = _size(request, claim, facts, overcommit)
    refusals = _validate_caps(sized, facts)
    if refusals:
        return refusals
    return _render(sized, facts, overcommit, dialect)


def _inexpressible(mode: Mode, facts: InstanceTypeFacts, dialect: Dialect) -> Refusal:
    able = _either(dialects.expressing(mode, facts.manufacturer))
    spec = MODES[mode]
    message = (
        f"devicePlugin: {dialect.name} ({dialect.title}) cannot give {spec.what} of "
        f"instance type {facts.name}; the cluster's device plugin must be {able} "
        "(the Catalog's spec.devicePlugin) for this request"
    )
    return Refusal(f"{FIELD}.{spec.field}", message, reasons.FORBIDDEN)  # the mode's field


def _either(names: list[str]) -> str:
    """`gpustack`, `gpustack or hami`, `gpustack, nvidia or dra` (`none` for no name)."""
    if len(names) < 3:
        return " or ".join(names) or "none"
    return f"{', '.join(names[:-1])} or {names[-1]}"


def _not_ready(facts: InstanceTypeFacts) -> Wait:
    message = f"spec.type: instance type {facts.name} is not ready yet; retry"
    return Wait(reasons.INSTANCE_TYPE_NOT_READY, message)


# --- validation (reference §8.2) --------------------------------------------------------------


def _validate_general(request: ResourceRequest, facts: InstanceTypeFacts) -> list[Refusal]:
    refusals = [
        Refusal(f"{FIELD}.{key}", f"{what} request cannot be negative")
        for key, value, what in (
            ("cpu", request.cpu, "CPU"),
            ("ram", request.ram, "RAM"),
            ("localStorage", request.local_storage, "local storage"),
        )
        if value is not None and value < 0
    ]
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


def _validate_none(
    request: ResourceRequest, facts: InstanceTypeFacts, dialect: Dialect
) -> list[Refusal]:
    taken = (request.accelerator is not None and request.accelerator > 0) or request.shared
    if facts.acceleratable or not taken:
        return []
    return [
        Refusal(
            f"{FIELD}.{ACCELERATOR}",
            "accelerator request must not be specified for non-acceleratable instance type",
        )
    ]


def _validate_partition(
    request: ResourceRequest, facts: InstanceTypeFacts, dialect: Dialect
) -> list[Refusal]:
    at = f"{FIELD}.{PROFILE}"
    if request.memory_percentage or request.cores_percentage:
        return [
            Refusal(
                f"{FIELD}.{SLICE_MEMORY}",
                "a hardware partition and a logical slice percentage are mutually exclusive; "
                f"clear {SLICE_MEMORY} and {SLICE_CORES}",
                reasons.FORBIDDEN,
            )
        ]
    if facts.manufacturer not in resources.PARTITION_KINDS:
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
    if not resources.valid_partition_key(facts.manufacturer, request.profile):
        return [Refusal(at, "partition profile name does not yield a valid resource name")]
    if not dialect.charges(request.profile, facts.profile_credits.get(request.profile, 0)):
        message = (
            f"devicePlugin: {dialect.name} ({dialect.title}) names {request.profile} alike on "
            "card models that price it differently, so Kueue cannot charge it exactly; ask "
            "for another profile (docs/device-plugins.md)"
        )
        return [Refusal(at, message, reasons.FORBIDDEN)]
    return _exactly_one_card(request, "partitioned")


def _validate_slice(
    request: ResourceRequest, facts: InstanceTypeFacts, dialect: Dialect
) -> list[Refusal]:
    if not facts.logically_sliceable:
        return [
            Refusal(
                f"{FIELD}.{SLICE_MEMORY}",
                f"instance type {facts.name} does not offer logical slicing",
                reasons.FORBIDDEN,
            )
        ]
    refusals = [
        Refusal(f"{FIELD}.{key}", "must be between 0 and 100")
        for key, value in (
            (SLICE_MEMORY, request.memory_percentage),
            (SLICE_CORES, request.cores_percentage),
        )
        if not 0 <= value <= 100
    ]
    return refusals + _exactly_one_card(request, "sliced")


def _exactly_one_card(request: ResourceRequest, what: str) -> list[Refusal]:
    if request.accelerator is None or request.accelerator == 1:
        return []
    message = f"accelerator request must be exactly 1 for a {what} request"
    return [Refusal(f"{FIELD}.{ACCELERATOR}", message)]


def _validate_shared(
    request: ResourceRequest, facts: InstanceTypeFacts, dialect: Dialect
) -> list[Refusal]:
    at = f"{FIELD}.{SHARED}"
    if request.accelerator is not None:
        return [
            Refusal(
                f"{FIELD}.{ACCELERATOR}",
                f"{ACCELERATOR} and {SHARED} are mutually exclusive; clear {ACCELERATOR}",
                reasons.FORBIDDEN,
            )
        ]
    if request.shared < 0:
        return [Refusal(at, "shared accelerator request cannot be negative")]
    bound = dialect.shares_bound(facts.largest_node_cards)
    if request.shared > bound and dialect.distinct_shares:
        return [
            Refusal(
                at,
                f"a shared request takes one share on {request.shared} distinct cards of one node; "
                f"the largest node of instance type {facts.name} has {facts.largest_node_cards}",
            )
        ]
    if request.shared > bound:
        return [
            Refusal(
                at,
                f"a shared request of {request.shared} time-slicing replicas exceeds the {bound} "
                f"of the largest node of instance type {facts.name}",
            )
        ]
    return []


def _validate_whole(
    request: ResourceRequest, facts: InstanceTypeFacts, dialect: Dialect
) -> list[Refusal]:
    at = f"{FIELD}.{ACCELERATOR}"
    accelerator = request.accelerator if request.accelerator is not None else Fraction(1)
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


_VALIDATE: dict[Mode, Callable[[ResourceRequest, InstanceTypeFacts, Dialect], list[Refusal]]] = {
    Mode.NONE: _validate_none,
    Mode.EXCLUSIVE: _validate_whole,
    Mode.SHARED: _validate_shared,
    Mode.SLICED: _validate_slice,
    Mode.PARTITIONED: _validate_partition,
}

# --- sizing (reference §5.1) ------------------------------------------------------------------


@dataclass(frozen=True)
class _Sized:
    claim: Claim
    cpu: Fraction
    ram: int
    local_storage: int
    unit_count: int  # how many units of the type the request is bounded by


def _fill(requested: Fraction | None, computed: Fraction | int, overcommit: bool) -> Fraction:
    """Overcommit overwrites the tenant's figure; without it only an unset (zero) one is filled."""
    if overcommit or not requested:
        return Fraction(computed)
    return requested


def _percent_of_a_unit(claim: Claim, facts: InstanceTypeFacts) -> int:
    """How much of one unit of the type the claim sizes host resources at, in percent."""
    if claim.mode is Mode.PARTITIONED:
        profile_mib = facts.profiles[claim.profile]
        return min(100, max(1, profile_mib * 100 // facts.card_memory_mib))
    if claim.mode is Mode.SLICED:
        return claim.memory_percentage or claim.cores_percentage
    if claim.mode is Mode.SHARED:
        return 100 * claim.cards // 10
    return 100 * max(claim.cards, 1)  # whole cards; a card-less request is one unit


def _size(
    request: ResourceRequest, claim: Claim, facts: InstanceTypeFacts, overcommit: bool
) -> _Sized:
    unit_cpu, unit_ram = facts.unit_cpu, facts.unit_ram
    if facts.acceleratable:
        percent = _percent_of_a_unit(claim, facts)
        unit_count = max(claim.cards, 1) if claim.mode is Mode.EXCLUSIVE else 1
        cpu = _fill(request.cpu, max(1, unit_cpu * percent // 100), overcommit)
        ram = _fill(request.ram, unit_ram * percent // 100, overcommit)
    else:
        unit_count = quantity.ceil(request.cpu) if request.cpu else 1
        cpu = request.cpu if request.cpu else Fraction(1)
        ram = _fill(request.ram, unit_ram * unit_count, overcommit)
    storage = request.local_storage or Fraction(min(EPHEMERAL_DEFAULT, facts.local_storage))
    return _Sized(
        claim=claim,
        cpu=cpu,
        ram=quantity.ceil(ram),  # a byte count rounds up, as Kubernetes reads quantities
        local_storage=quantity.ceil(storage),
        unit_count=unit_count,
    )


def _validate_caps(sized: _Sized, facts: InstanceTypeFacts) -> list[Refusal]:
    refusals = []
    count = sized.unit_count
    if facts.acceleratable and sized.cpu > facts.unit_cpu * count:
        bound = facts.unit_cpu * count
        message = f"exceeds the maximum CPU {bound} of instance type {facts.name}"
        refusals.append(Refusal(f"{FIELD}.cpu", message))
    if sized.ram > facts.unit_ram * count:
        bound_ram = quantity.format_binary(facts.unit_ram * count)
        message = f"exceeds the maximum RAM {bound_ram} of instance type {facts.name}"
        refusals.append(Refusal(f"{FIELD}.ram", message))
    if sized.local_storage > facts.local_storage:
        bound_storage = quantity.format_binary(facts.local_storage)
        message = f"exceeds the local storage {bound_storage} of instance type {facts.name}"
        refusals.append(Refusal(f"{FIELD}.localStorage", message))
    return refusals


# --- the container's resources (reference §5.3) ----------------------------------------------


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


def _render(sized: _Sized, facts: InstanceTypeFacts, overcommit: bool, dialect: Dialect) -> Plan:
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
    keys = dialect.encode(facts.manufacturer, sized.claim) if facts.acceleratable else {}
    return Plan(
        claim=sized.claim,
        cpu=sized.cpu,
        ram=sized.ram,
        local_storage=sized.local_storage,
        requests={**requests, **keys},
        limits={**limits, **keys},
    )
