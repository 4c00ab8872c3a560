"""What the agent reads through NVML, behind one small interface with two backends.

`PynvmlBackend` is the real one (nvidia-ml-py) and the default. `FakeNvml` replays a fixture
file of recorded readings, including failures, and is selected only explicitly (tests, demos).
Every per-device call may raise `NvmlError`; the agent turns that into an unhealthy device, never
a missing one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class NvmlError(Exception):
    """An NVML call failed (the message names the NVML error)."""


class NvmlUnavailable(NvmlError):
    """No NVML library or driver on this node."""


@dataclass(frozen=True)
class ProfileReading:
    name: str  # e.g. 3g.40gb
    memory_mib: int
    compute_slices: int
    memory_slices: int
    placements: tuple[tuple[int, int], ...]  # (start, size) in memory slices

    def as_spec(self) -> dict[str, Any]:
        """As `Devices.spec` (and a recording) write an offered profile."""
        return {
            "name": self.name,
            "memoryMiB": self.memory_mib,
            "computeSlices": self.compute_slices,
            "memorySlices": self.memory_slices,
            "placements": [{"start": start, "size": size} for start, size in self.placements],
        }


@dataclass(frozen=True)
class InstanceReading:
    """An existing GPU instance and the MIG device the device plugin hands out for it."""

    profile: str
    start: int
    size: int
    uuid: str = ""


class Device(Protocol):
    def uuid(self) -> str: ...
    def minor(self) -> int: ...
    def name(self) -> str: ...
    def memory_total_bytes(self) -> int: ...
    def memory_bus_width(self) -> int: ...
    def ecc_enabled(self) -> bool: ...
    def cores(self) -> int: ...
    def compute_capability(self) -> tuple[int, int]: ...
    def pci_bus_id(self) -> str: ...
    def numa_node(self) -> int: ...
    def uncorrected_volatile_ecc(self) -> int: ...
    def mig_enabled(self) -> bool: ...
    def gpu_instance_profiles(self) -> list[ProfileReading]: ...
    def gpu_instances(self) -> list[InstanceReading]: ...


class Nvml(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def wait_for_event(self, timeout: float) -> bool | None: ...
    def driver_version(self) -> str: ...
    def cuda_driver_version(self) -> int: ...
    def device_count(self) -> int: ...
    def device(self, index: int) -> Device: ...


# --- the fake, replaying fixture files -----------------------------------------------------


# Each scalar reading: (the method the agent calls, its key in a recording).
READINGS = (
    ("uuid", "uuid"),
    ("minor", "minor"),
    ("name", "name"),
    ("memory_total_bytes", "memoryTotalBytes"),
    ("memory_bus_width", "memoryBusWidth"),
    ("ecc_enabled", "eccEnabled"),
    ("cores", "cores"),
    ("compute_capability", "computeCapability"),
    ("pci_bus_id", "pciBusId"),
    ("numa_node", "numaNode"),
    ("uncorrected_volatile_ecc", "uncorrectedVolatileEcc"),
    ("mig_enabled", "migEnabled"),
)
_RECORDED_AS = dict(READINGS)


class FakeDevice:
    """One recorded GPU: each scalar reading replays its recorded value, or its recorded error."""

    def __init__(self, reading: Mapping[str, Any]):
        self.reading = reading

    def _get(self, key: str) -> Any:
        failure = (self.reading.get("fail") or {}).get(key)
        if failure:
            raise NvmlError(failure)
        value = self.reading[key]
        return tuple(value) if isinstance(value, list) else value

    def __getattr__(self, method: str):
        if method not in _RECORDED_AS:
            raise AttributeError(method)
        return lambda: self._get(_RECORDED_AS[method])

    def gpu_instance_profiles(self) -> list[ProfileReading]:
        return [
            ProfileReading(
                p["name"],
                p["memoryMiB"],
                p["computeSlices"],
                p["memorySlices"],
                tuple((pl["start"], pl["size"]) for pl in p["placements"]),
            )
            for p in self._get("profiles")
        ]

    def gpu_instances(self) -> list[InstanceReading]:
        return [
            InstanceReading(i["profile"], i["start"], i["size"], i.get("uuid", ""))
            for i in self._get("instances")
        ]


class FakeNvml:
    """NVML as recorded in a fixture file (see tests/fixtures/nvml/ and tools/record_nvml.py)."""

    def __init__(self, recording: Mapping[str, Any]):
        self.recording = recording

    @classmethod
    def from_file(cls, path: Path) -> FakeNvml:
        """The recording in a YAML file, or a DocumentError naming the file and the line."""
        from functions import documents

        recording = documents.load(path)
        if not isinstance(recording, dict):
            held = "nothing" if recording is None else f"a {type(recording).__name__}"
            raise documents.DocumentError(
                path,
                None,
                f"holds {held}, not an NVML recording",
                "a recording is a mapping of driverVersion, cudaDriverVersion and devices "
                "(tests/fixtures/nvml/ holds some)",
            )
        return cls(recording)

    def start(self) -> None:
        if not self.recording.get("available", True):
            raise NvmlUnavailable(self.recording.get("reason", "NVML Shared Library Not Found"))

    def stop(self) -> None:
        pass

    def wait_for_event(self, timeout: float) -> bool | None:
        """A recording has no events (None): the agent waits out its period."""
        return None

    def driver_version(self) -> str:
        return self.recording["driverVersion"]

    def cuda_driver_version(self) -> int:
        return self.recording["cudaDriverVersion"]

    def device_count(self) -> int:
        return len(self.recording.get("devices") or [])

    def device(self, index: int) -> FakeDevice:
        return FakeDevice(self.recording["devices"][index])


# --- the real one ------------------------------------------------------------------------------


class PynvmlDevice:
    def __init__(self, nvml, handle):
        self.nvml, self.handle = nvml, handle

    def _call(self, name: str, *args):
        try:
            return getattr(self.nvml, name)(self.handle, *args)
        except self.nvml.NVMLError as error:
            raise NvmlError(f"{name}: {error}") from error

    @staticmethod
    def _text(value) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    def uuid(self) -> str:
        return self._text(self._call("nvmlDeviceGetUUID"))

    def minor(self) -> int:
        return int(self._call("nvmlDeviceGetMinorNumber"))

    def name(self) -> str:
        return self._text(self._call("nvmlDeviceGetName"))

    def memory_total_bytes(self) -> int:
        return int(self._call("nvmlDeviceGetMemoryInfo").total)

    def memory_bus_width(self) -> int:
        return int(self._call("nvmlDeviceGetMemoryBusWidth"))

    def ecc_enabled(self) -> bool:
        try:
            current, _pending = self._call("nvmlDeviceGetEccMode")
        except NvmlError:
            return False  # not supported: no ECC to restore
        return bool(current)

    def cores(self) -> int:
        return int(self._call("nvmlDeviceGetNumGpuCores"))

    def compute_capability(self) -> tuple[int, int]:
        major, minor = self._call("nvmlDeviceGetCudaComputeCapability")
        return int(major), int(minor)

    def pci_bus_id(self) -> str:
        return self._text(self._call("nvmlDeviceGetPciInfo").busId)

    def numa_node(self) -> int:
        try:
            return int(self._call("nvmlDeviceGetNumaNodeId"))
        except NvmlError:
            return 0

    def uncorrected_volatile_ecc(self) -> int:
        nvml = self.nvml
        try:
            return int(
                self._call(
                    "nvmlDeviceGetTotalEccErrors",
                    nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    nvml.NVML_VOLATILE_ECC,
                )
            )
        except NvmlError:
            return 0  # ECC off or unsupported: nothing counted

    def mig_enabled(self) -> bool:
        try:
            current, _pending = self._call("nvmlDeviceGetMigMode")
        except NvmlError:
            return False  # not MIG-capable
        return current == self.nvml.NVML_DEVICE_MIG_ENABLE

    def _profile_infos(self):
        """(name, info) of every GPU-instance profile the card answers for, key-safe ones only."""
        nvml = self.nvml
        for profile_id in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(self.handle, profile_id)
            except nvml.NVMLError:
                continue
            name = self._text(info.name).removeprefix("MIG ")
            if "+" not in name and info.instanceCount:  # no media-extension or graphics variants
                yield name, info

    def gpu_instance_profiles(self) -> list[ProfileReading]:
        card_mib = self.memory_total_bytes() >> 20
        found = []
        for name, info in self._profile_infos():
            placements = self._placements(info.id, info.instanceCount)
            if not placements:
                continue
            memory_slices = round(info.memorySizeMB / (card_mib / 8)) if card_mib else 0
            found.append(
                ProfileReading(
                    name, int(info.memorySizeMB), int(info.sliceCount), memory_slices, placements
                )
            )
        return found

    def _placements(self, profile_id: int, count: int) -> tuple[tuple[int, int], ...]:
        import ctypes

        nvml = self.nvml
        array = (nvml.c_nvmlGpuInstancePlacement_t * max(count, 8))()
        size = ctypes.c_uint(len(array))
        try:
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(
                self.handle, profile_id, array, ctypes.byref(size)
            )
        except nvml.NVMLError:
            return ()
        return tuple((array[i].start, array[i].size) for i in range(size.value))

    def gpu_instances(self) -> list[InstanceReading]:
        import ctypes

        nvml, found = self.nvml, []
        mig_uuids = self._mig_device_uuids()
        for name, info in self._profile_infos():
            array = (nvml.c_nvmlGpuInstance_t * max(info.instanceCount, 1))()
            count = ctypes.c_uint()
            try:
                nvml.nvmlDeviceGetGpuInstances(self.handle, info.id, array, ctypes.byref(count))
            except nvml.NVMLError:
                continue
            for i in range(count.value):
                gi = nvml.nvmlGpuInstanceGetInfo(array[i])
                found.append(
                    InstanceReading(
                        name, gi.placement.start, gi.placement.size, mig_uuids.get(gi.id, "")
                    )
                )
        return found

    def _mig_device_uuids(self) -> dict[int, str]:
        nvml, uuids = self.nvml, {}
        try:
            count = nvml.nvmlDeviceGetMaxMigDeviceCount(self.handle)
        except nvml.NVMLError:
            return uuids
        for index in range(count):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(self.handle, index)
                uuids[nvml.nvmlDeviceGetGpuInstanceId(mig)] = self._text(
                    nvml.nvmlDeviceGetUUID(mig)
                )
            except nvml.NVMLError:
                continue
        return uuids


class PynvmlBackend:
    # What makes the agent poll before its period: a card failing, ECC errors, MIG reconfigured.
    EVENTS = (
        "nvmlEventTypeXidCriticalError",
        "nvmlEventTypeDoubleBitEccError",
        "nvmlEventMigConfigChange",
    )

    def __init__(self, nvml=None):
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        self.events = None

    def wait_for_event(self, timeout: float) -> bool | None:
        """True on an NVML event, False after `timeout` without one, None where unsupported."""
        nvml = self.nvml
        try:
            if self.events is None:
                nvml.nvmlInit()
                self.events = nvml.nvmlEventSetCreate()
                mask = 0
                for name in self.EVENTS:
                    mask |= getattr(nvml, name, 0)
                for index in range(nvml.nvmlDeviceGetCount()):
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    with contextlib.suppress(nvml.NVMLError):  # not every card supports every event
                        nvml.nvmlDeviceRegisterEvents(handle, mask, self.events)
        except nvml.NVMLError:
            return None
        try:
            nvml.nvmlEventSetWait_v2(self.events, int(timeout * 1000))
            return True
        except nvml.NVMLError_Timeout:
            return False
        except nvml.NVMLError:
            return None

    def start(self) -> None:
        try:
            self.nvml.nvmlInit()
        except self.nvml.NVMLError as error:
            raise NvmlUnavailable(str(error)) from error

    def stop(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()

    def driver_version(self) -> str:
        version = self.nvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version

    def cuda_driver_version(self) -> int:
        return int(self.nvml.nvmlSystemGetCudaDriverVersion())

    def device_count(self) -> int:
        return int(self.nvml.nvmlDeviceGetCount())

    def device(self, index: int) -> PynvmlDevice:
        try:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        except self.nvml.NVMLError as error:
            raise NvmlError(f"nvmlDeviceGetHandleByIndex({index}): {error}") from error
        return PynvmlDevice(self.nvml, handle)
