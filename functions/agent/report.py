"""Turn NVML readings and the node's CPU facts into the `Devices` spec (DESIGN §3.2).

Facts only, no timestamps or counters, so the same hardware always gives the same bytes. What
went wrong on the way (NVML missing, failing calls) rides beside the facts in the report, for the
agent's log and metrics.

A failed reading never changes what a card is: each call that fails — with an NVML error or any
other exception — marks that card unhealthy and leaves its field as it was last reported (the
`previous` reading), so a flaky UUID read keeps the card's UUID. Only a card never read before
falls back to placeholders. One card's failures touch no other card.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
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


_FAILED = object()
UNREADABLE_PREFIX = "GPU-unreadable-"  # the identity of a card no read has named yet


def unidentified(card: Any) -> bool:
    """A card reported under a placeholder: no read of its UUID has succeeded yet."""
    return isinstance(card, Mapping) and str(card.get("uuid", "")).startswith(UNREADABLE_PREFIX)


def read_device(
    nvml: Nvml,
    index: int,
    errors: list[str] | None = None,
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One card; a failing call marks it unhealthy with the reason and keeps that field as
    `previous` (the card as last reported) had it. Each failure is appended to `errors`."""
    problems: list[str] = []
    errors = [] if errors is None else errors
    previous = previous or {}

    def attempt(call):
        try:
            return call()
        except Exception as error:  # one reading's failure is this card's, never the poll's
            text = (
                str(error) if isinstance(error, NvmlError) else f"{type(error).__name__}: {error}"
            )
            problems.append(text)
            errors.append(text)
            return _FAILED

    def kept(key: str, value: Any, default: Any) -> Any:
        return value if value is not _FAILED else previous.get(key, default)

    device = attempt(lambda: nvml.device(index))
    if device is _FAILED:
        return _unreadable(index, previous, problems)
    capability = attempt(device.compute_capability)
    reading: dict[str, Any] = {
        "uuid": kept("uuid", attempt(device.uuid), f"{UNREADABLE_PREFIX}{index}"),
        "index": index,
        "minor": kept("minor", attempt(device.minor), index),
        "product": kept("product", attempt(device.name), "unknown"),
        "memoryMiB": kept("memoryMiB", _memory(device, attempt), 0),
        "cores": kept("cores", attempt(device.cores), 0),
        "computeCapability": kept(
            "computeCapability",
            _capability(capability) if capability is not _FAILED else _FAILED,
            "",
        ),
        "pciBusId": kept("pciBusId", attempt(device.pci_bus_id), ""),
        "numaNode": kept("numaNode", attempt(device.numa_node), 0),
    }
    uncorrected = attempt(device.uncorrected_volatile_ecc)
    if uncorrected is not _FAILED and uncorrected > 0:
        problems.append(f"{uncorrected} volatile uncorrected ECC errors")
    reading["healthy"] = not problems
    if problems:
        reading["unhealthyReason"] = "; ".join(problems)
    reading["mig"] = _mig(device, attempt, previous.get("mig"))
    return reading


def _capability(value: Any) -> str:
    major, minor = value
    return f"{major}.{minor}" if major else ""


def _memory(device: Any, attempt) -> Any:
    """Memory after the GDDR ECC restore; failed if any of its three readings failed."""
    total, width, ecc = (
        attempt(device.memory_total_bytes),
        attempt(device.memory_bus_width),
        attempt(device.ecc_enabled),
    )
    if total is _FAILED:
        return _FAILED
    width = 0 if width is _FAILED else width
    return restored_memory_mib(total, width, False if ecc is _FAILED else ecc)


def _mig(device: Any, attempt, previous: Any) -> dict[str, Any]:
    """MIG mode, offered profiles and existing partitions; as before when any read fails."""
    enabled = attempt(device.mig_enabled)
    if enabled is _FAILED:
        return previous if isinstance(previous, dict) else {"enabled": False}
    mig: dict[str, Any] = {"enabled": bool(enabled)}
    if not mig["enabled"]:
        return mig
    profiles, instances = attempt(device.gpu_instance_profiles), attempt(device.gpu_instances)
    if profiles is _FAILED or instances is _FAILED:
        return previous if isinstance(previous, dict) else {"enabled": True}
    mig["profiles"] = [p.as_spec() for p in profiles]
    mig["partitions"] = [
        {
            "profile": i.profile,
            "placement": {"start": i.start, "size": i.size},
            **({"uuid": i.uuid} if i.uuid else {}),
        }
        for i in sorted(instances, key=lambda i: (i.start, i.profile))
    ]
    return mig


def _unreadable(index: int, previous: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """A card NVML cannot open: as last reported, unhealthy; placeholders if never read."""
    card = (
        dict(previous)
        if previous
        else {
            "uuid": f"{UNREADABLE_PREFIX}{index}",
            "index": index,
            "product": "unknown",
            "memoryMiB": 0,
            "mig": {"enabled": False},
        }
    )
    card["healthy"] = False
    card["unhealthyReason"] = "; ".join(problems)
    return card


def read_accelerators(
    nvml: Nvml, manufacturer: str = "nvidia", previous: list[dict[str, Any]] | None = None
) -> AcceleratorReport:
    """Every card NVML sees. Without NVML, no accelerators — unless cards were reported before:
    then NVML failing is their failure, and they stay reported, unhealthy. `previous` is what
    was last reported (the Devices spec's `accelerators`)."""
    report = AcceleratorReport()
    before = next((v for v in previous or [] if v.get("manufacturer") == manufacturer), None)
    try:
        nvml.start()
    except NvmlUnavailable as error:
        report.available = False
        return _nvml_failed(report, before, f"NVML is not available ({error})")
    try:
        _read_cards(nvml, manufacturer, report, before)
    except Exception as error:  # the count or the versions: every card's reading failed
        text = str(error) if isinstance(error, NvmlError) else f"{type(error).__name__}: {error}"
        report.errors.append(text)
        report.vendors.clear()
        return _nvml_failed(report, before, f"NVML failed ({text})")
    finally:
        nvml.stop()
    return report


def _read_cards(
    nvml: Nvml, manufacturer: str, report: AcceleratorReport, before: dict[str, Any] | None
) -> None:
    cards = {card["index"]: card for card in (before or {}).get("devices") or []}
    count = nvml.device_count()
    devices = [read_device(nvml, i, report.errors, cards.get(i)) for i in range(count)]
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


def _nvml_failed(
    report: AcceleratorReport, before: dict[str, Any] | None, why: str
) -> AcceleratorReport:
    if not before:
        report.problems.append(f"{why}: reporting no accelerators")
        return report
    report.problems.append(f"{why}: keeping the cards reported before, unhealthy")
    devices = [_unreadable(card["index"], card, [why]) for card in before.get("devices") or []]
    report.vendors.append({**before, "devices": devices})
    return report


def node_os() -> str:
    return platform.system().lower()


def node_arch() -> str:
    machine = platform.machine()
    return ARCHES.get(machine, machine)


def cpu_cores(node_capacity: int | None) -> int:
    """The node's CPU capacity rounded up (the kubelet's figure, else this machine's)."""
    return node_capacity if node_capacity else os.cpu_count() or 0
