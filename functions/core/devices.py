"""The `Devices` spec: what the node agent reports about one node (DESIGN §3.2).

Plain frozen dataclasses read from the spec's dict form. Every reading error names the field
path (`spec.accelerators[0].devices[1].memoryMiB`) so a Fatal result can point at it.
"""

from __future__ import annotations

import builtins  # annotations inside _Reader: its methods `str` and `bool` shadow the builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from functions.core import names
from functions.core.modes import Mode


class SpecError(ValueError):
    """A Devices spec field that is missing or of the wrong shape."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class _Reader:
    """Typed reads from a mapping, each failure naming the field's full path."""

    def __init__(self, data: Any, path: str):
        if not isinstance(data, Mapping):
            raise SpecError(path, f"must be an object, got {type(data).__name__}")
        self.data = data
        self.path = path

    def _get(self, key: str, kinds: tuple[type, ...], required: bool, default: Any) -> Any:
        value = self.data.get(key)
        if value is None:
            if required:
                raise SpecError(f"{self.path}.{key}", "is required")
            return default
        if isinstance(value, bool) and bool not in kinds:
            raise SpecError(f"{self.path}.{key}", f"must be {kinds[0].__name__}, got bool")
        if not isinstance(value, kinds):
            raise SpecError(
                f"{self.path}.{key}", f"must be {kinds[0].__name__}, got {type(value).__name__}"
            )
        return value

    def str(self, key: str, required: bool = False, default: str = "") -> str:
        return self._get(key, (str,), required, default)

    def int(self, key: builtins.str, required: bool = False, default: int = 0) -> int:
        value = self._get(key, (int, float), required, default)
        if isinstance(value, float) and not value.is_integer():
            raise SpecError(f"{self.path}.{key}", f"must be a whole number, got {value}")
        if value < 0:
            raise SpecError(f"{self.path}.{key}", f"must not be negative, got {value}")
        return int(value)

    @overload
    def bool(self, key: builtins.str, default: builtins.bool = ...) -> builtins.bool: ...
    @overload
    def bool(self, key: builtins.str, default: None) -> builtins.bool | None: ...
    def bool(
        self, key: builtins.str, default: builtins.bool | None = False
    ) -> builtins.bool | None:
        return self._get(key, (bool,), False, default)

    def objects(self, key: builtins.str) -> list[_Reader]:
        items = self._get(key, (list, tuple), False, ())
        return [_Reader(item, f"{self.path}.{key}[{i}]") for i, item in enumerate(items)]

    def object(self, key: builtins.str) -> _Reader:
        return _Reader(self._get(key, (dict, Mapping), False, {}), f"{self.path}.{key}")


@dataclass(frozen=True)
class Placement:
    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end


@dataclass(frozen=True)
class MigProfile:
    name: str
    memory_mib: int
    compute_slices: int
    memory_slices: int
    placements: tuple[Placement, ...]

    @property
    def max_count(self) -> int:
        return len(self.placements)


@dataclass(frozen=True)
class Partition:
    """An existing GPU instance on a MIG card."""

    profile: str
    placement: Placement


@dataclass(frozen=True)
class Accelerator:
    uuid: str
    index: int
    product: str
    memory_mib: int
    cores: int = 0
    compute_capability: str = ""
    minor: int = 0
    pci_bus_id: str = ""
    numa_node: int = 0
    healthy: bool = True
    mig_enabled: bool = False
    profiles: tuple[MigProfile, ...] = ()
    partitions: tuple[Partition, ...] = ()

    @property
    def partitioned(self) -> bool:
        """A card in MIG mode serves only hardware partitions (populations are disjoint)."""
        return self.mig_enabled and bool(self.profiles)


@dataclass(frozen=True)
class Allocation:
    """What the node really handed out to one container on one card."""

    pod: str
    container: str
    device: str
    mode: Mode
    pod_uid: str = ""
    memory_percentage: int = 0
    memory_mib: int = 0
    cores_percentage: int = 0
    profile: str = ""
    placement: Placement | None = None


@dataclass(frozen=True)
class AcceleratorVendor:
    manufacturer: str
    driver_version: str = ""
    runtime_version: str = ""
    devices: tuple[Accelerator, ...] = ()


@dataclass(frozen=True)
class Cpu:
    vendor: str = ""
    model_name: str = ""
    family: str = ""
    model: str = ""
    cores: int = 0


@dataclass(frozen=True)
class AcceleratorGroup:
    """The cards of one model on one node: everything keyed by the aKey."""

    manufacturer: str
    product: str
    driver_version: str
    runtime_version: str
    devices: tuple[Accelerator, ...]

    @property
    def key(self) -> str:
        return names.accelerator_key(self.manufacturer, self.product)

    @property
    def id(self) -> str:
        return names.group_id(self.product, self.manufacturer)

    @property
    def first(self) -> Accelerator:
        return self.devices[0]

    @property
    def memory_mib(self) -> int:
        return self.first.memory_mib

    @property
    def cores(self) -> int:
        return self.first.cores

    @property
    def compute_capability(self) -> str:
        return self.first.compute_capability

    @property
    def family(self) -> str:
        return names.family_from_compute_capability(self.compute_capability)


@dataclass(frozen=True)
class DevicesSpec:
    node: str
    os: str
    arch: str
    cpu: Cpu
    accelerators: tuple[AcceleratorVendor, ...] = ()
    allocations: tuple[Allocation, ...] = ()
    managed: bool | None = None
    groups: tuple[AcceleratorGroup, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", _group(self.accelerators))

    @property
    def g_key(self) -> str:
        return names.general_key(
            self.cpu.vendor, self.cpu.model_name, self.cpu.family, self.cpu.model
        )

    def is_managed(self, node_management_manual: bool = False) -> bool:
        """Unset means managed unless the Catalog asks for manual node management."""
        return (not node_management_manual) if self.managed is None else self.managed

    def group(self, a_key: str) -> AcceleratorGroup | None:
        return next((group for group in self.groups if group.key == a_key), None)

    def cards_in_mig_mode(self, manufacturer: str) -> int:
        return sum(
            card.mig_enabled
            for vendor in self.accelerators
            if vendor.manufacturer == manufacturer
            for card in vendor.devices
        )


def _group(vendors: Sequence[AcceleratorVendor]) -> tuple[AcceleratorGroup, ...]:
    grouped: dict[str, AcceleratorGroup] = {}
    for vendor in vendors:
        for device in vendor.devices:
            key = names.accelerator_key(vendor.manufacturer, device.product)
            group = grouped.get(key)
            devices = (*group.devices, device) if group else (device,)
            grouped[key] = AcceleratorGroup(
                vendor.manufacturer,
                device.product if group is None else group.product,
                vendor.driver_version,
                vendor.runtime_version,
                devices,
            )
    return tuple(grouped[key] for key in sorted(grouped))


def _placement(reader: _Reader) -> Placement:
    return Placement(reader.int("start", required=True), reader.int("size", required=True))


def _profile(reader: _Reader) -> MigProfile:
    return MigProfile(
        name=reader.str("name", required=True),
        memory_mib=reader.int("memoryMiB", required=True),
        compute_slices=reader.int("computeSlices"),
        memory_slices=reader.int("memorySlices"),
        placements=tuple(_placement(p) for p in reader.objects("placements")),
    )


def _accelerator(reader: _Reader) -> Accelerator:
    mig = reader.object("mig")
    return Accelerator(
        uuid=reader.str("uuid", required=True),
        index=reader.int("index"),
        minor=reader.int("minor"),
        product=reader.str("product", required=True),
        memory_mib=reader.int("memoryMiB", required=True),
        cores=reader.int("cores"),
        compute_capability=reader.str("computeCapability"),
        pci_bus_id=reader.str("pciBusId"),
        numa_node=reader.int("numaNode"),
        healthy=reader.bool("healthy", default=True),
        mig_enabled=mig.bool("enabled", default=False),
        profiles=tuple(_profile(p) for p in mig.objects("profiles")),
        partitions=tuple(
            Partition(p.str("profile", required=True), _placement(p.object("placement")))
            for p in mig.objects("partitions")
        ),
    )


def _allocation(reader: _Reader) -> Allocation:
    try:
        mode = Mode.named(reader.str("mode", required=True))
    except ValueError as error:
        raise SpecError(f"{reader.path}.mode", str(error)) from error
    placement = reader.data.get("placement")
    return Allocation(
        pod=reader.str("pod", required=True),
        pod_uid=reader.str("podUID"),
        container=reader.str("container"),
        device=reader.str("device", required=True),
        mode=mode,
        memory_percentage=reader.int("memoryPercentage"),
        memory_mib=reader.int("memoryMiB"),
        cores_percentage=reader.int("coresPercentage"),
        profile=reader.str("profile"),
        placement=_placement(reader.object("placement")) if placement is not None else None,
    )


def parse_devices(obj: Mapping[str, Any]) -> DevicesSpec:
    """Read a whole `Devices` object (metadata.name is the node) into a DevicesSpec."""
    meta = _Reader(obj.get("metadata") or {}, "metadata")
    return parse_spec(meta.str("name", required=True), obj.get("spec"))


def parse_spec(node: str, spec: Any) -> DevicesSpec:
    reader = _Reader(spec if spec is not None else {}, "spec")
    cpu = reader.object("cpu")
    return DevicesSpec(
        node=node,
        os=reader.str("os", required=True),
        arch=reader.str("arch", required=True),
        cpu=Cpu(
            vendor=cpu.str("vendor"),
            model_name=cpu.str("modelName"),
            family=str(cpu.data.get("family", "")),
            model=str(cpu.data.get("model", "")),
            cores=cpu.int("cores"),
        ),
        accelerators=tuple(
            AcceleratorVendor(
                manufacturer=vendor.str("manufacturer", required=True),
                driver_version=vendor.str("driverVersion"),
                runtime_version=vendor.str("runtimeVersion"),
                devices=tuple(_accelerator(d) for d in vendor.objects("devices")),
            )
            for vendor in reader.objects("accelerators")
        ),
        allocations=tuple(_allocation(a) for a in reader.objects("allocations")),
        managed=reader.bool("managed", default=None),
    )
