"""What the node agent reports of a node whose GPUs serve VMs.

Its cards are bound to vfio-pci, so NVML sees none: the Devices holds the CPU alone. The devices
handler still reconciles it, and keeps the node's VM node state from its Node — which is what a
GPUClass reads — so a test that adds a VM node adds its Devices too, as the agent would.
"""

from __future__ import annotations


def agent_devices(node: str) -> dict:
    return {
        "apiVersion": "worker.gpustack.ai/v1alpha1",
        "kind": "Devices",
        "metadata": {"name": node, "labels": {"kubernetes.io/os": "linux"}},
        "spec": {
            "os": "linux",
            "arch": "amd64",
            "cpu": {
                "vendor": "AMD",
                "modelName": "AMD EPYC 9654 96-Core Processor",
                "family": "25",
                "model": "17",
                "cores": 192,
            },
            "accelerators": [],
            "allocations": [],
        },
    }
