"""`InstanceType.status`: written by the instancetype handler, read by the instance handler.

What people read (a view per sharing mode, the CPU view, `detail`, the printer-column
`display`) and what an Instance needs (`offers`: the hardware a request is sized against, the
sharing modes the pool offers, the partition profiles, the request bounds) are both here, under
version 2. Release 0.1.0 (version 1, no `version` field) published the Instance's figures in
`detail`, `largestNodeCards` and `largestNodeCores`; the reader still takes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from functions.core import mig, names, quantity
from functions.core.dialects import DIALECTS, Dialect
from functions.core.modes import MODES, Mode
from functions.core.pools import PoolKey, PoolViews
from functions.core.quantity import MIB, QuantityError
from functions.core.requests import InstanceTypeFacts
from functions.core.status import StatusError, read_int, read_list, read_object, read_str

VERSION = 2
DEFAULT_DIALECT = DIALECTS["gpustack"]


@dataclass(frozen=True)
class Offers:
    """What the pool offers an Instance: the hardware, the modes, the bounds."""

    manufacturer: str = ""
    card_memory_mib: int = 0
    modes: tuple[Mode, ...] = ()
    profiles: tuple[tuple[str, int, int], ...] = ()  # (name, MiB, credits) of each partition
    largest_node_cards: int = 0  # the whole-card request bound
    largest_node_cores: int = 0  # the CPU request bound of a CPU pool
    cpu_capacity: int = 0

    def as_status(self) -> dict[str, Any]:
        return {
            "manufacturer": self.manufacturer,
            "cardMemoryMiB": self.card_memory_mib,
            "modes": [mode.title for mode in self.modes],
            "profiles": [
                {"name": name, "memoryMiB": mib, "credits": credits}
                for name, mib, credits in self.profiles
            ],
            "largestNodeCards": self.largest_node_cards,
            "largestNodeCores": self.largest_node_cores,
            "cpuCapacity": self.cpu_capacity,
        }


# --- writer -----------------------------------------------------------------------------------


def publish(
    pool: PoolKey,
    views: PoolViews,
    dialect: Dialect,
    *,
    phase: str,
    message: str,
    entrance: str,
    unit: str,
) -> dict[str, Any]:
    """The status of an InstanceType of `pool`, its views summed: what it offers an Instance
    under the cluster's device plugin, each mode it does not offer reading 0/0. The
    instancetype handler publishes it; `gpustack-fn demo` prints its printer columns."""
    offered = offers(pool, views, dialect)
    if pool.acceleratable:
        views = replace(views, accelerators=views.accelerators.offering(offered.modes))
    return write(
        phase=phase,
        message=message,
        entrance=entrance,
        views=views,
        detail=detail(pool, views),
        offers=offered,
        unit=unit,
        acceleratable=pool.acceleratable,
    )


def write(
    *,
    phase: str,
    message: str,
    entrance: str,
    views: PoolViews,
    detail: Mapping[str, Any],
    offers: Offers,
    unit: str,
    acceleratable: bool,
) -> dict[str, Any]:
    """The whole `InstanceType.status` the instancetype handler publishes."""
    accelerators = views.accelerators
    status: dict[str, Any] = {
        "version": VERSION,
        "phase": phase,
        "entrance": entrance,
        **{spec.view: accelerators[mode].as_status() for mode, spec in MODES.items()},
        "nodes": len(views.members),
        "offers": offers.as_status(),
        "display": {
            "unit": unit,
            "accelerator": accelerators.display,
            "cpu": views.cpu.display,
        },
    }
    if detail:  # absent rather than `{}`: once it had fields, server-side apply stores `{}` as
        # null, which the schema refuses, and every later status write fails (kubernetes#104694)
        status["detail"] = dict(detail)
    if not acceleratable:
        status["cpu"] = views.cpu.as_status()
    if message:
        status["phaseMessage"] = message
    return status


def offers(pool: PoolKey, views: PoolViews, dialect: Dialect = DEFAULT_DIALECT) -> Offers:
    """What an Instance of this pool may ask for, from the nodes the pool covers and what the
    cluster's device plugin can express (and Kueue charge) of it."""
    covered = views.members
    bounds = Offers(
        largest_node_cards=views.largest_node_cards,
        largest_node_cores=views.largest_node_cores,
        cpu_capacity=views.cpu.capacity,
    )
    if pool.a_key is None or not covered:
        return bounds
    a_key = pool.a_key
    first = covered[0].facts[a_key]
    partitioned = next((n for n in covered if n.groups[a_key].partition_capacity), None)
    profiles = partitioned.facts[a_key].profiles if partitioned else ()
    profiles = tuple(p for p in profiles if dialect.charges(p.name, p.credits))
    offered = _offered(
        sliceable=any(n.groups[a_key].logical_cards for n in covered), partitionable=bool(profiles)
    )
    expressible = dialect.modes(first.manufacturer)
    return Offers(
        manufacturer=first.manufacturer,
        card_memory_mib=first.memory_mib,
        modes=tuple(mode for mode in offered if mode in expressible),
        profiles=tuple((p.name, p.memory_mib, p.credits) for p in profiles),
        largest_node_cards=bounds.largest_node_cards,
        largest_node_cores=bounds.largest_node_cores,
        cpu_capacity=bounds.cpu_capacity,
    )


def _offered(sliceable: bool, partitionable: bool) -> tuple[Mode, ...]:
    """The modes a pool's cards offer, in the table's order: whole cards and shares on every
    card; slices where a card slices logically; partitions where one has chargeable profiles."""
    needs = {Mode.SLICED: sliceable, Mode.PARTITIONED: partitionable}
    return tuple(mode for mode in MODES if needs.get(mode, True))


def detail(pool: PoolKey, views: PoolViews) -> dict[str, Any]:
    """The observed hardware behind the pool, as the walkthrough shows it (empty: no node, and
    then `status.detail` is left out).

    Descriptors come from the first covered node; whether the pool slices logically or
    physically comes from every node's counts (a pool may mix MIG and whole cards).
    """
    covered = views.members
    if not covered:
        return {}
    if not pool.a_key:
        if pool.g_key is None:
            return {"manufacturer": names.GENERIC}
        return {
            "manufacturer": names.cpu_manufacturer(pool.g_key),
            "product": covered[0].cpu.model_name,
        }
    a_key = pool.a_key
    first = covered[0].facts[a_key]
    sliceable = next((n for n in covered if n.groups[a_key].logical_cards), None)
    logical = sliceable.facts[a_key].slice_slots if sliceable else 0
    partitioned = next((n for n in covered if n.groups[a_key].partition_capacity), None)
    profiles = partitioned.facts[a_key].profiles if partitioned else ()
    return {
        "manufacturer": first.manufacturer,
        "product": names.label_value(first.product),
        "family": first.family,
        "memory": quantity.format_mebibytes(first.memory_mib),
        "cores": str(first.cores),
        "computeCapability": first.compute_capability,
        "runtimeVersion": first.runtime_version,
        "slicedDetail": {
            "logical": {"count": logical, "coresPercentageOvercommit": logical > 0},
            "physical": {
                "count": max((p.count for p in profiles), default=0),
                "profiles": [
                    {"name": p.name, "count": p.count, "memoryMiB": p.memory_mib} for p in profiles
                ],
            },
        },
    }


# --- reader -----------------------------------------------------------------------------------


def read(instance_type: Any) -> InstanceTypeFacts:
    """An InstanceType (spec and published status) as an Instance sees it.

    Raises StatusError naming the field when the spec's units or the status cannot be read.
    """
    metadata = read_object(instance_type.get("metadata"), "metadata")
    spec = read_object(instance_type.get("spec"), "spec")
    status = read_object(instance_type.get("status"), "status")
    unit = read_object(spec.get("unitResources"), "spec.unitResources")
    acceleratable = spec.get("acceleratable") is True
    version = read_int(status.get("version"), "status.version", default=1)
    offered = _offers(status) if version >= 2 else _v1_offers(status)
    return InstanceTypeFacts(
        name=read_str(metadata.get("name"), "metadata.name"),
        acceleratable=acceleratable,
        unit_cpu=int(_quantity(unit.get("cpu"), "spec.unitResources.cpu", "1")),
        unit_ram=_quantity(unit.get("ram"), "spec.unitResources.ram", "0"),
        local_storage=_quantity(spec.get("localStorage"), "spec.localStorage", "100Gi"),
        accelerator_group=read_str(spec.get("acceleratorGroup"), "spec.acceleratorGroup"),
        manufacturer=offered.manufacturer if acceleratable else "",
        card_memory_mib=offered.card_memory_mib,
        modes=frozenset(offered.modes),
        # Read-only: one reading may serve every Instance of the type (handlers memoise it).
        profiles=MappingProxyType({name: mib for name, mib, _ in offered.profiles}),
        profile_credits=MappingProxyType({name: c for name, _, c in offered.profiles}),
        largest_node_cards=offered.largest_node_cards,
        largest_node_cores=offered.largest_node_cores,
        cpu_capacity=offered.cpu_capacity,
        entrance=read_str(status.get("entrance"), "status.entrance"),
        phase=read_str(status.get("phase"), "status.phase"),
    )


def _quantity(value: Any, path: str, default: str) -> int:
    try:
        return quantity.floor(quantity.parse(value if value is not None else default))
    except QuantityError as error:
        raise StatusError(path, str(error)) from None


def _offers(status: Any) -> Offers:
    offers = read_object(status.get("offers"), "status.offers")
    modes = []
    for index, title in enumerate(read_list(offers.get("modes"), "status.offers.modes")):
        try:
            modes.append(Mode.named(read_str(title, f"status.offers.modes[{index}]")))
        except ValueError:
            continue  # a mode a newer release offers: not ours to take
    profiles = tuple(
        _profile(read_object(p, f"status.offers.profiles[{i}]"), f"status.offers.profiles[{i}]")
        for i, p in enumerate(read_list(offers.get("profiles"), "status.offers.profiles"))
    )
    return Offers(
        manufacturer=read_str(offers.get("manufacturer"), "status.offers.manufacturer"),
        card_memory_mib=read_int(offers.get("cardMemoryMiB"), "status.offers.cardMemoryMiB"),
        modes=tuple(modes),
        profiles=profiles,
        largest_node_cards=read_int(
            offers.get("largestNodeCards"), "status.offers.largestNodeCards"
        ),
        largest_node_cores=read_int(
            offers.get("largestNodeCores"), "status.offers.largestNodeCores"
        ),
        cpu_capacity=read_int(offers.get("cpuCapacity"), "status.offers.cpuCapacity"),
    )


def _profile(profile: Any, at: str) -> tuple[str, int, int]:
    """(name, MiB, credits) of one published partition profile (credits 0 where unpublished)."""
    return (
        read_str(profile.get("name"), f"{at}.name"),
        read_int(profile.get("memoryMiB"), f"{at}.memoryMiB"),
        read_int(profile.get("credits"), f"{at}.credits"),
    )


def _v1_offers(status: Any) -> Offers:
    """Release 0.1.0 kept the Instance's figures in the people-facing detail."""
    detail = read_object(status.get("detail"), "status.detail")
    sliced = read_object(detail.get("slicedDetail"), "status.detail.slicedDetail")
    logical = read_object(sliced.get("logical"), "status.detail.slicedDetail.logical")
    physical = read_object(sliced.get("physical"), "status.detail.slicedDetail.physical")
    memory = detail.get("memory")
    card_mib = _quantity(memory, "status.detail.memory", "0") // MIB if memory else 0
    product = read_str(detail.get("product"), "status.detail.product")
    at = "status.detail.slicedDetail.physical.profiles"
    profiles = tuple(
        (name, mib, mig.unpriced_units(product, name, mib, card_mib))
        for name, mib, _ in (
            _profile(read_object(p, f"{at}[{i}]"), f"{at}[{i}]")
            for i, p in enumerate(read_list(physical.get("profiles"), at))
        )
    )
    logical_count = read_int(logical.get("count"), "status.detail.slicedDetail.logical.count")
    cpu = read_object(status.get("cpu"), "status.cpu")
    return Offers(
        manufacturer=read_str(detail.get("manufacturer"), "status.detail.manufacturer"),
        card_memory_mib=card_mib,
        modes=_offered(sliceable=logical_count > 0, partitionable=bool(profiles)),
        profiles=profiles,
        largest_node_cards=read_int(status.get("largestNodeCards"), "status.largestNodeCards"),
        largest_node_cores=read_int(status.get("largestNodeCores"), "status.largestNodeCores"),
        cpu_capacity=read_int(cpu.get("capacity"), "status.cpu.capacity"),
    )
