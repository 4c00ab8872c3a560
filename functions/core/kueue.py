"""The Kueue Configuration that makes Kueue charge exactly the core's credits.

A pool's ClusterQueue covers one resource, `credits.gpustack.ai/<manufacturer>`, which no Pod
asks for: Kueue derives it from the Pod's accelerator keys through resource transformations
(Configuration `resources.transformations`, KEP-2937). Each transformation replaces its input
with `outputs` × the requested quantity, so the table below is the credit rule of
`modes.Claim.credits` written as Kueue reads it:

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
this as compositions/kueue/configuration.yaml; docs/kueue.md says how to merge it into an
existing Kueue configuration.
"""

from __future__ import annotations

from typing import Any

from functions.core import mig, quantity, resources
from functions.core.modes import SHARE, D

API_VERSION = "config.kueue.x-k8s.io/v1beta2"
REPLACE = "Replace"


def configuration() -> dict[str, Any]:
    """The Configuration's parts this package needs: the pod integration and the resources."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Configuration",
        "integrations": {"frameworks": ["pod"]},
        "resources": {
            "quotaCheckStrategy": "IgnoreUndeclared",
            "transformations": transformations(),
        },
    }


def transformations() -> list[dict[str, Any]]:
    """One transformation per accelerator key the core can put on a Pod, sorted by input."""
    found: list[dict[str, Any]] = []
    for manufacturer in sorted(resources.BASES):
        found += _charged(manufacturer) + [_ignored(key) for key in _uncharged(manufacturer)]
    return sorted(found, key=lambda t: t["input"])


def _charged(manufacturer: str) -> list[dict[str, Any]]:
    base = resources.base_of(manufacturer)
    credits = resources.credits_resource(manufacturer)
    per_unit = {
        base: D,
        base + resources.SHARED: SHARE,
        base + resources.SLICED_UNITS: 1,
        base + resources.PARTITIONED_UNITS: 1,
    }
    return [
        {"input": key, "strategy": REPLACE, "outputs": {credits: quantity.format_decimal(units)}}
        for key, units in per_unit.items()
    ]


def _uncharged(manufacturer: str) -> list[str]:
    base = resources.base_of(manufacturer)
    keys = [
        base + suffix
        for suffix in (
            resources.SLICED,
            resources.SLICED_MEMORY_PERCENTAGE,
            resources.SLICED_MEMORY_MIB,
            resources.SLICED_CORES_PERCENTAGE,
            resources.PARTITIONED,
        )
    ]
    keys.append(resources.visibility_key(manufacturer))
    if manufacturer == mig.MANUFACTURER:
        keys += [resources.partition_key(manufacturer, name) for name in known_profiles()]
    return keys


def _ignored(key: str) -> dict[str, Any]:
    return {"input": key, "strategy": REPLACE}


def known_profiles() -> list[str]:
    """Every partition profile of the core's MIG geometry table."""
    return sorted({p.name for profiles in mig.GEOMETRY.values() for p in profiles})
