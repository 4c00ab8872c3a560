"""Every name the product derives: keys, flavors, pools, entrances, label values.

The rules are the reference's (§2.2–§2.4, §3.1–§3.4); a name computed here is the same wherever
it appears — Node labels, ResourceFlavors, ClusterQueues, LocalQueues, Pods.
"""

from __future__ import annotations

import functools
import re

GENERIC = "generic"
LABEL_MAX = 63
CATALOG = "default"  # the one Catalog every handler reads its settings from
MAIN_CONTAINER = "main"  # an Instance's workload; additional volumes mount here only
SSHD_CONTAINER = "sshd"
LICENSE_KEY = "client_configuration_token.tok"  # the NVIDIA license token in a license Secret
RESERVED_NAMESPACES = ("kube-system",)  # besides the Catalog's systemNamespace

_CRUFT = re.compile(r"\((?:R|r|TM|tm)\)")
_LEADING_WORDS = re.compile(r"^(?:Genuine\s+|\d+(?:st|nd|rd|th)\s+Gen\s+)+")
_TRAILING_WORDS = re.compile(r"(?:\s+(?:CPU|Processor)|\s+\d+-Cores?)+$")
_SEPARATORS = "-_."


# A fleet has a handful of product and CPU names, read again for every card of every node.
@functools.lru_cache(maxsize=1024)
def normalize_name(name: str, prefix: str = "", max_len: int = 0, strip_cruft: bool = False) -> str:
    """Turn a product or CPU name into a key fragment (`NVIDIA A10G` → `a10g` with prefix nvidia)."""
    if strip_cruft:
        name = name.split(" @ ", 1)[0]
        name = _CRUFT.sub("", name)
        name = _LEADING_WORDS.sub("", name.strip())
        name = _TRAILING_WORDS.sub("", name.strip()).strip()
    prefix = prefix.lower()
    out: list[str] = []
    for rune in name:
        if max_len > 0 and len(out) >= max_len:
            break
        if "A" <= rune <= "Z":
            out.append(rune.lower())
        elif "a" <= rune <= "z" or "0" <= rune <= "9":
            out.append(rune)
        elif rune in _SEPARATORS or rune == " ":
            if out and out[-1] not in _SEPARATORS:
                out.append("-" if rune == " " else rune)
            continue
        else:
            continue
        # A whole leading run equal to the manufacturer is dropped: "nvidia a10g" → "a10g".
        if prefix and len(out) == len(prefix) and "".join(out) == prefix:
            out.clear()
    if out and out[-1] in _SEPARATORS:
        out.pop()
    return "".join(out)


def general_key(vendor: str, model_name: str = "", family: str = "", model: str = "") -> str:
    """The CPU key (gKey): `amd-epyc-7r32`, `intel-xeon-platinum-8259cl`, `amd-25-1`, or `generic`."""
    manufacturer = vendor.strip().lower()
    if manufacturer in ("", "vendorunknown"):
        manufacturer = GENERIC
    if model_name:
        ident = normalize_name(model_name, manufacturer, LABEL_MAX - len(manufacturer) - 1, True)
    elif family and model:
        ident = f"{family}-{model}"
    else:
        ident = ""
    return f"{manufacturer}-{ident}" if ident else manufacturer


def cpu_manufacturer(g_key: str) -> str:
    """First token of a gKey (`amd-epyc-7r32` → `amd`)."""
    return g_key.split("-", 1)[0]


def group_id(product: str, manufacturer: str) -> str:
    """Accelerator group id: `NVIDIA A10G` → `a10g`; `Tesla T4` → `tesla-t4`."""
    return normalize_name(product, manufacturer, LABEL_MAX - len(manufacturer) - 1)


def accelerator_key(manufacturer: str, product: str) -> str:
    """The aKey: `nvidia-a10g`, `nvidia-tesla-t4`, `nvidia-h100-80gb-hbm3`."""
    return f"{manufacturer}-{group_id(product, manufacturer)}"


def flavor_name(g_key: str, os: str, arch: str, count: int, a_key: str | None = None) -> str:
    """ResourceFlavor name: `gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d` or `…-16c`."""
    if a_key:
        return f"gpustack--{g_key}--{a_key}-{os}-{arch}-{count}d"
    return f"gpustack--{g_key}-{os}-{arch}-{count}c"


def pool_name(os: str, arch: str, a_key: str | None = None, g_key: str | None = None) -> str:
    """InstanceType / ClusterQueue name of a pool, fitted to a composite's name (`fitted`).

    `g_key` is None when pools are collapsed (awareness off): `gpustack--generic-linux-amd64`,
    `gpustack--nvidia-a10g-linux-amd64`; with awareness: `gpustack--amd-epyc-7r13-linux-amd64`,
    `gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64`.
    """
    if a_key and g_key:
        return fitted(f"gpustack--{g_key}--{a_key}-{os}-{arch}")
    return fitted(f"gpustack--{a_key or g_key or GENERIC}-{os}-{arch}")


def catalog_flavor_name(a_key: str | None = None, g_key: str | None = None) -> str:
    """InstanceTypeFlavor name: `gpustack--nvidia-a10g`, `gpustack--generic`, `gpustack--amd-epyc-7r32`."""
    if a_key and g_key:
        return fitted(f"gpustack--{g_key}--{a_key}")
    return fitted(f"gpustack--{a_key or g_key or GENERIC}")


# Crossplane's limit on a composite's name, which its composed objects carry as a label value
# (internal/xcrd: the CRD it generates sets `metadata.name` maxLength 63).
COMPOSITE_NAME_MAX = LABEL_MAX
DIGEST_DIGITS = 16


def fitted(name: str, limit: int = COMPOSITE_NAME_MAX) -> str:
    """`name`, or where it is longer than `limit`, its start and its FNV-1a-64 hash: two long
    names never share one, and the start still says which pool it is (an aware T4 pool on a
    Xeon Platinum: `gpustack--intel-xeon-platinum-8259cl--nvidia-t-<16 hex digits>`)."""
    if len(name) <= limit:
        return name
    digest = f"{fnv1a64(name.encode()):0{DIGEST_DIGITS}x}"
    return f"{name[: limit - DIGEST_DIGITS - 1].rstrip(_SEPARATORS)}-{digest}"


FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3


def fnv1a64(data: bytes) -> int:
    digest = FNV_OFFSET
    for byte in data:
        digest = ((digest ^ byte) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return digest


def entrance(pool: str) -> str:
    """The LocalQueue name fronting a pool: `gpustack-fnv64-` + 16 hex digits of FNV-1a-64."""
    return f"gpustack-fnv64-{fnv1a64(pool.encode()):016x}"


_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(value: str) -> str:
    """Sanitise a label value as Kubernetes allows (`NVIDIA A10G` → `NVIDIA-A10G`)."""
    value = _LABEL_VALUE_BAD.sub("-", value.strip().replace(" ", "-"))
    value = value[:LABEL_MAX].strip("-_.")
    return value


def family_from_compute_capability(compute_capability: str) -> str:
    """NVIDIA architecture family from the CUDA compute capability (`8.6` → `Ampere`)."""
    try:
        major_text, _, minor_text = compute_capability.partition(".")
        major, minor = int(major_text), int(minor_text or 0)
    except ValueError:
        return ""
    if major == 7:
        return "Volta" if minor < 5 else "Turing"
    if major == 8:
        return "Ampere" if minor < 9 else "Ada-Lovelace"
    return {1: "Tesla", 2: "Fermi", 3: "Kepler", 5: "Maxwell", 6: "Pascal", 9: "Hopper"}.get(
        major, "Blackwell" if major in (10, 12) else ""
    )


DNS_SUBDOMAIN_MAX = 253  # an object name (ConfigMap, NodeFeature): RFC 1123 subdomain


def node_object_name(node: str, suffix: str) -> str:
    """`<node>-<suffix>`, at most 253 characters: a node name too long for that is cut and
    followed by its FNV-1a-64 hash, so two long node names never share an object."""
    name = f"{node}-{suffix}"
    if len(name) <= DNS_SUBDOMAIN_MAX:
        return name
    digest = f"{fnv1a64(node.encode()):016x}"
    keep = DNS_SUBDOMAIN_MAX - len(suffix) - len(digest) - 2
    return f"{node[:keep].rstrip('-.')}-{digest}-{suffix}"
