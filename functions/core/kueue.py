"""The Kueue Configuration that makes Kueue charge exactly the core's credits.

A pool's ClusterQueue covers one resource, `credits.gpustack.ai/<manufacturer>`, which no Pod
asks for: Kueue derives it from the Pod's accelerator keys through resource transformations
(Configuration `resources.transformations`, KEP-2937). Each transformation replaces its input
with `outputs` × the requested quantity (× the quantity of `multiplyBy`, Kueue ≥ 0.16), so each
dialect's table (`dialects.py`) is the credit rule of `modes.Claim.credits` written as Kueue
reads it. Under gpustack's plugin:

| Input (per manufacturer)          | Credits per unit  | Why                                    |
|-----------------------------------|-------------------|----------------------------------------|
| `<base>`                          | D = 1,600,000     | a whole card                           |
| `<base>.shared`                   | D/10 = 160,000    | one share on each of N cards           |
| `<base>.sliced.units`             | 1                 | a slice's units are already credits    |
| `<base>.partitioned.units`        | 1                 | so are a partition's                   |
| every other accelerator key       | none              | counted by the units (or nothing at all) |

"None" is a `Replace` with no outputs: Kueue then ignores the key, so a Workload's usage shows
credits alone. `quotaCheckStrategy: IgnoreUndeclared` lets a pool's queue check only what it
covers (credits, or `cpu` for a CPU pool) and ignore memory and storage. `make kueue` writes
one file per dialect, compositions/kueue/<devicePlugin>.yaml; docs/kueue.md says how to merge
it into an existing Kueue configuration.

Under `dra` no container key names the devices (a ResourceClaim does), and Kueue counts a claim's
devices per DeviceClass without transforming them; so the Pod carries its credits itself and
Kueue charges that key as it is (`dialects.Dra`).
"""

from __future__ import annotations

from typing import Any

from functions.core import dialects

API_VERSION = "config.kueue.x-k8s.io/v1beta2"


def configuration(device_plugin: str = dialects.DEFAULT) -> dict[str, Any]:
    """The Configuration's parts this package needs: the pod integration and the resources
    (and, for a DRA dialect, the DeviceClasses its claims name: Kueue refuses a claim of a
    class it has no mapping for)."""
    found: dict[str, Any] = {
        "quotaCheckStrategy": "IgnoreUndeclared",
        "transformations": transformations(device_plugin),
    }
    mappings = dialects.of(device_plugin).device_class_mappings()
    if mappings:
        found["deviceClassMappings"] = mappings
    return {
        "apiVersion": API_VERSION,
        "kind": "Configuration",
        "integrations": {"frameworks": ["pod"]},
        "resources": found,
    }


def transformations(device_plugin: str = dialects.DEFAULT) -> list[dict[str, Any]]:
    """One transformation per accelerator key the dialect can put on a Pod, sorted by input."""
    found = dialects.of(device_plugin).transformations()
    return sorted(found, key=lambda t: t["input"])
