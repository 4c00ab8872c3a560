"""Unit-resource presets: the CPU / RAM a derived InstanceType charges per whole card.

The reference's tier table (§3.6): a product is matched by a whole-token prefix of its normalised
name (after marketing words such as `tesla` are dropped), then refined by a memory token.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.core.names import normalize_name


@dataclass(frozen=True)
class UnitResources:
    cpu: int
    ram_gi: int

    @property
    def ram(self) -> str:
        return f"{self.ram_gi}Gi"


TIERS = {
    "fallback": UnitResources(4, 16),
    "small": UnitResources(8, 32),
    "medium": UnitResources(8, 64),
    "large": UnitResources(12, 128),
    "xlarge": UnitResources(12, 192),
}
CPU_ONLY = UnitResources(1, 2)
LOCAL_STORAGE = "100Gi"

_MARKETING = ("tesla", "geforce", "quadro", "radeon", "instinct")


def _families(
    tier: str, *prefixes: str, by: dict[str, str] | None = None
) -> list[tuple[str, str, dict[str, str]]]:
    return [(prefix, tier, by or {}) for prefix in prefixes]


# manufacturer → [(family prefix, tier, {refining token: tier})]
PRESETS: dict[str, list[tuple[str, str, dict[str, str]]]] = {
    "nvidia": [
        *_families("xlarge", "b200", "b300", "gb200", "gb300", "h100", "h200", "h800", "gh200"),
        *_families("small", "gb10", "a30", "l4", "t4", "v100s"),
        *_families("medium", "a100", "a800", by={"80gb": "large", "40gb": "medium"}),
        *_families("small", "v100", by={"32gb": "medium"}),
        *_families("medium", "a10", "a10g", "l40", "rtx-4090", "rtx-5090"),
        *_families("large", "l40s"),
        *_families(
            "small",
            "rtx-pro-4500",
            "rtx-6000",
            "rtx-4000",
            "rtx-a6000",
            "rtx-a5000",
            "rtx-a4000",
            "rtx-3090",
        ),
    ],
    "ascend": [
        *_families("medium", "310p", "310p1", "310p2", "310p3", "310p4", "310p5", "310p7"),
        *_families("medium", "910b", "910b1", "910b2", "910b2c", "910b3", "910b4"),
        *_families("xlarge", "910-9362", "910-9372", "910-9381", "910-9382", "910-9391"),
        *_families("xlarge", "910-9392"),
    ],
    "amd": [
        *_families("xlarge", "mi300x", "mi308x", "mi325x", "mi350x", "mi355x"),
        *_families("medium", "mi250", "mi250x"),
        *_families("large", "mi210"),
    ],
    "cambricon": _families("medium", "mlu370", "mlu590"),
    "hygon": [
        *_families("small", "z100", "z100l"),
        *_families("large", "k100", "bw100"),
        *_families("xlarge", "bw1000"),
    ],
    "metax": [*_families("medium", "mxc500"), *_families("large", "mxc550", "mxc588", "mxc600")],
    "mthreads": _families("medium", "mtt-s4000", "mtt-s5000"),
    "iluvatar": _families("medium", "bi-v100", "bi-v150", "mr-v50", "mr-v100"),
    "thead": _families("medium", "ppu-zw810e", "ppu-zwm890"),
}


def _tokens(text: str) -> list[str]:
    for separator in "_.":
        text = text.replace(separator, "-")
    return [token for token in text.split("-") if token]


def tier_for(manufacturer: str, product: str) -> str:
    """The preset tier of a product: `NVIDIA A10G` → medium, `Tesla T4` → small."""
    tokens = _tokens(normalize_name(product, manufacturer))
    while tokens and tokens[0] in _MARKETING:
        tokens = tokens[1:]
    best: tuple[int, str, dict[str, str]] | None = None
    for prefix, tier, by in PRESETS.get(manufacturer, []):
        family = _tokens(prefix)
        if tokens[: len(family)] == family and (best is None or len(family) > best[0]):
            best = (len(family), tier, by)
    if best is None:
        return "fallback"
    _, tier, by = best
    for token, refined in by.items():
        if token in tokens:
            return refined
    return tier


def unit_resources_for(manufacturer: str, product: str) -> UnitResources:
    return TIERS[tier_for(manufacturer, product)]
