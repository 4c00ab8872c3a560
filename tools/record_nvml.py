"""Record this machine's real NVML readings as a fixture for the fake backend.

    python tools/record_nvml.py > tests/fixtures/nvml/<name>.yaml

Writes exactly the readings `functions/agent/nvml.py` asks for (raw, before the agent's rules),
so the fake backend replays them. A reading NVML refuses is recorded under `fail:`.
"""

from __future__ import annotations

import sys

import yaml

from functions.agent.nvml import READINGS, NvmlError, NvmlUnavailable, PynvmlBackend


def record(backend: PynvmlBackend) -> dict:
    try:
        backend.start()
    except NvmlUnavailable as error:
        return {"available": False, "reason": str(error)}
    try:
        recording = {
            "driverVersion": backend.driver_version(),
            "cudaDriverVersion": backend.cuda_driver_version(),
            "devices": [],
        }
        for index in range(backend.device_count()):
            device, reading, failures = backend.device(index), {}, {}
            for method, key in READINGS:
                try:
                    value = getattr(device, method)()
                    reading[key] = list(value) if isinstance(value, tuple) else value
                except NvmlError as error:
                    failures[key] = str(error)
            try:
                reading["profiles"] = [
                    p.as_spec()
                    for p in (device.gpu_instance_profiles() if reading.get("migEnabled") else [])
                ]
                reading["instances"] = [
                    {"profile": i.profile, "start": i.start, "size": i.size, "uuid": i.uuid}
                    for i in (device.gpu_instances() if reading.get("migEnabled") else [])
                ]
            except NvmlError as error:
                failures["profiles"] = str(error)
            if failures:
                reading["fail"] = failures
            recording["devices"].append(reading)
        return recording
    finally:
        backend.stop()


if __name__ == "__main__":
    yaml.safe_dump(record(PynvmlBackend()), sys.stdout, sort_keys=False)
