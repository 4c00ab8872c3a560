"""Turn NVML readings and the node's CPU facts into the `Devices` spec (DESIGN §3.2).

Facts only, no timestamps or counters, so the same hardware always gives the same bytes. What
went wrong on the way (NVML missing, failing calls) rides beside the facts in the report, for the
agent's log and metrics.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossplane.function import logging

from functions.agent.nvml import Nvml, NvmlError, NvmlUnavailable

CPU_VENDORS = {
    "AuthenticAMD": "AMD",
    "GenuineIntel": "Intel",
    "HygonGenuine": "Hygon",
    "CentaurHauls": "Centaur",
}
ARCHES = {
    "x86_64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}
WIDE_BUS_BITS = 1024  # HBM: no GDDR ECC carve-out to restore


def restored_memory_mib(total_bytes: int, bus_width: int, ecc: bool) -> int:
    """NVML's total less the GDDR ECC carve-out: ×16/15 on a narrow (GDDR) bus with ECC on."""
    mib = total_bytes >> 20
    if 0 < bus_width < WIDE_BUS_BITS and ecc:
        return mib * 16 // 15
    return mib


def runtime_version(cuda_driver_version: int) -> str:
    """`13000` → `13.0`; `12040` → `12.4`; nothing for 0."""
    if cuda_driver_version <= 0:
        return ""
    return f"{cuda_driver_version // 1000}.{cuda_driver_version % 1000 // 10}"


def read_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """Vendor, model name, family and model of the first processor in /proc/cpuinfo."""
    facts: dict[str, str] = {}
    try:
        text = cpuinfo.read_text()
    except OSError as error:
        logging.get_logger().warning("cannot read cpuinfo", path=str(cpuinfo), error=str(error))
        return facts
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "vendor_id":
            facts["vendor"] = CPU_VENDORS.get(value, value)
        elif key == "model name":
            facts["modelName"] = value
        elif key == "cpu family":
            facts["family"] = value
        elif key == "model":
            facts["model"] = value
    return facts


@dataclass
class AcceleratorReport:
    vendors: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # sentences for the log
    available: bool = True  # False: no NVML here (a CPU-only node, or no driver)
    errors: list[str] = field(default_factory=list)  # every NVML call that failed


def read_device(nvml: Nvml, index: int, errors: list[str] | None = None) -> dict[str, Any]:
    """One card; any failing call marks it unhealthy with the reason, the rest still reported.

    Each failing NVML call's error is also appended to `errors`, when given."""
    problems: list[str] = []
    errors = [] if errors is None else errors

    def attempt(call, default):
        try:
            return call()
        except NvmlError as error:
            problems.append(str(error))
            errors.append(str(error))
            return default

    try:
        device = nvml.device(index)
    except NvmlError as error:
        errors.append(str(error))
        return {
            "uuid": f"GPU-unreadable-{index}",
            "index": index,
            "product": "unknown",
            "memoryMiB": 0,
            "healthy": False,
            "unhealthyReason": str(error),
            "mig": {"enabled": False},
        }
    major, minor = attempt(device.compute_capability, (0, 0))
    total = attempt(device.memory_total_bytes, 0)
    memory_mib = restored_memory_mib(
        total, attempt(device.memory_bus_width, 0), attempt(device.ecc_enabled, False)
    )
    reading: dict[str, Any] = {
        "uuid": attempt(device.uuid, f"GPU-unreadable-{index}"),
        "index": index,
        "minor": attempt(device.minor, index),
        "product": attempt(device.name, "unknown"),
        "memoryMiB": memory_mib,
        "cores": attempt(device.cores, 0),
        "computeCapability": f"{major}.{minor}" if major else "",
        "pciBusId": attempt(device.pci_bus_id, ""),
        "numaNode": attempt(device.numa_node, 0),
    }
    uncorrected = attempt(device.uncorrected_volatile_ecc, 0)
    if uncorrected > 0:
        problems.append(f"{uncorrected} volatile uncorrected ECC errors")
    mig: dict[str, Any] = {"enabled": bool(attempt(device.mig_enabled, False))}
    if mig["enabled"]:
        mig["profiles"] = [p.as_spec() for p in attempt(device.gpu_instance_profiles, [])]
        mig["partitions"] = [
            {
                "profile": i.profile,
                "placement": {"start": i.start, "size": i.size},
                **({"uuid": i.uuid} if i.uuid else {}),
            }
            for i in sorted(attempt(device.gpu_instances, []), key=lambda i: (i.start, i.profile))
        ]
    reading["healthy"] = not problems
    if problems:
        reading["unhealthyReason"] = "; ".join(problems)
    reading["mig"] = mig
    return reading


def read_accelerators(nvml: Nvml, manufacturer: str = "nvidia") -> AcceleratorReport:
    """Every card NVML sees; a missing NVML reports no accelerators and says why."""
    report = AcceleratorReport()
    try:
        nvml.start()
    except NvmlUnavailable as error:
        report.problems.append(f"NVML is not available ({error}): reporting no accelerators")
        report.available = False
        return report
    try:
        count = nvml.device_count()
        devices = [read_device(nvml, index, report.errors) for index in range(count)]
        for device in devices:
            if not device["healthy"]:
                report.problems.append(
                    f"accelerator {device['index']} ({device['uuid']}) is unhealthy: {device['unhealthyReason']}"
                )
        if devices:
            report.vendors.append(
                {
                    "manufacturer": manufacturer,
                    "driverVersion": nvml.driver_version(),
                    "runtimeVersion": runtime_version(nvml.cuda_driver_version()),
                    "devices": devices,
                }
            )
    except NvmlError as error:
        report.errors.append(str(error))
        report.problems.append(f"NVML failed ({error}): reporting no accelerators")
    finally:
        nvml.stop()
    return report


def node_os() -> str:
    return platform.system().lower()


def node_arch() -> str:
    machine = platform.machine()
    return ARCHES.get(machine, machine)


def cpu_cores(node_capacity: int | None) -> int:
    """The node's CPU capacity rounded up (the kubelet's figure, else this machine's)."""
    return node_capacity if node_capacity else os.cpu_count() or 0
