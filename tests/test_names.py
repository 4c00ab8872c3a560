"""Names and keys: the reference's Appendix A vectors and the walkthrough's names."""

import pytest

from functions.core import names, presets


@pytest.mark.parametrize(
    ("pool", "digest"),
    [
        ("gpustack--nvidia-a10g-linux-amd64", "c4680bb149644f1c"),
        ("gpustack--generic-linux-amd64", "3b93966fd73eb9ec"),
        ("gpustack--nvidia-tesla-t4-linux-amd64", "6b371caa2da0b799"),
        ("gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64", "029fd9550e0c70bd"),
        ("gpustack--nvidia-h100-80gb-hbm3-linux-amd64", "e4768a65ca0ce96b"),
        ("gpustack--amd-epyc-7r13-linux-amd64", "8dde992f64a17a2f"),
        ("gpustack--intel-xeon-platinum-8259cl-linux-amd64", "c6aee2b7b5c4dc6b"),
    ],
)
def test_entrance_is_fnv1a64_of_the_pool_name(pool, digest):
    assert names.entrance(pool) == f"gpustack-fnv64-{digest}"
    assert len(names.entrance(pool)) == 31


def test_entrance_keeps_leading_zeros_and_is_not_fnv1():
    assert names.entrance("gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64").endswith(
        "029fd9550e0c70bd"
    )
    # The topology profile vector: FNV-1a-64 of "kubernetes.io/hostname".
    assert f"{names.fnv1a64(b'kubernetes.io/hostname'):016x}" == "87bf574bea2a4f23"


def test_the_custom_type_entrance_is_computed_not_copied_from_the_recording():
    # The walkthrough shows 8cf5b3114035c84a for a10g-12c128g; it was renamed after recording.
    assert names.entrance("a10g-12c128g") == "gpustack-fnv64-d4c0e6cd72686015"


@pytest.mark.parametrize(
    ("manufacturer", "product", "group_id", "a_key", "tier", "unit"),
    [
        ("nvidia", "NVIDIA A10G", "a10g", "nvidia-a10g", "medium", (8, "64Gi")),
        ("nvidia", "Tesla T4", "tesla-t4", "nvidia-tesla-t4", "small", (8, "32Gi")),
        (
            "nvidia",
            "NVIDIA H100 80GB HBM3",
            "h100-80gb-hbm3",
            "nvidia-h100-80gb-hbm3",
            "xlarge",
            (12, "192Gi"),
        ),
        (
            "nvidia",
            "NVIDIA A100-SXM4-80GB",
            "a100-sxm4-80gb",
            "nvidia-a100-sxm4-80gb",
            "large",
            (12, "128Gi"),
        ),
        (
            "nvidia",
            "NVIDIA A100-SXM4-40GB",
            "a100-sxm4-40gb",
            "nvidia-a100-sxm4-40gb",
            "medium",
            (8, "64Gi"),
        ),
        ("nvidia", "NVIDIA L40S", "l40s", "nvidia-l40s", "large", (12, "128Gi")),
        (
            "nvidia",
            "NVIDIA GeForce RTX 4090",
            "geforce-rtx-4090",
            "nvidia-geforce-rtx-4090",
            "medium",
            (8, "64Gi"),
        ),
        (
            "nvidia",
            "NVIDIA Mystery 9000",
            "mystery-9000",
            "nvidia-mystery-9000",
            "fallback",
            (4, "16Gi"),
        ),
    ],
)
def test_accelerator_keys_and_unit_presets(manufacturer, product, group_id, a_key, tier, unit):
    assert names.group_id(product, manufacturer) == group_id
    assert names.accelerator_key(manufacturer, product) == a_key
    assert presets.tier_for(manufacturer, product) == tier
    preset = presets.unit_resources_for(manufacturer, product)
    assert (preset.cpu, preset.ram) == unit


def test_a10_never_matches_a100():
    assert presets.tier_for("nvidia", "NVIDIA A10") == "medium"
    assert presets.tier_for("nvidia", "NVIDIA A100 80GB PCIe") == "large"


@pytest.mark.parametrize(
    ("vendor", "model_name", "family", "model", "g_key"),
    [
        ("AMD", "AMD EPYC 7R13 Processor", "", "", "amd-epyc-7r13"),
        ("AMD", "AMD EPYC 7R32", "", "", "amd-epyc-7r32"),
        (
            "Intel",
            "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
            "",
            "",
            "intel-xeon-platinum-8259cl",
        ),
        ("AMD", "AMD EPYC 7763 64-Core Processor", "", "", "amd-epyc-7763"),
        ("AMD", "", "25", "1", "amd-25-1"),
        ("AMD", "", "", "", "amd"),
        ("", "", "", "", "generic"),
        ("VendorUnknown", "Some CPU", "", "", "generic-some"),
    ],
)
def test_general_key(vendor, model_name, family, model, g_key):
    assert names.general_key(vendor, model_name, family, model) == g_key


def test_flavor_and_pool_names():
    assert (
        names.flavor_name("amd-epyc-7r13", "linux", "amd64", 16)
        == "gpustack--amd-epyc-7r13-linux-amd64-16c"
    )
    assert (
        names.flavor_name("amd-epyc-7r32", "linux", "amd64", 1, "nvidia-a10g")
        == "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d"
    )
    assert names.pool_name("linux", "amd64") == "gpustack--generic-linux-amd64"
    assert names.pool_name("linux", "amd64", "nvidia-a10g") == "gpustack--nvidia-a10g-linux-amd64"
    assert (
        names.pool_name("linux", "amd64", None, "amd-epyc-7r13")
        == "gpustack--amd-epyc-7r13-linux-amd64"
    )
    assert (
        names.pool_name("linux", "amd64", "nvidia-a10g", "amd-epyc-7r32")
        == "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64"
    )
    assert names.catalog_flavor_name() == "gpustack--generic"
    assert names.catalog_flavor_name("nvidia-a10g") == "gpustack--nvidia-a10g"
    assert (
        names.catalog_flavor_name("nvidia-a10g", "amd-epyc-7r32")
        == "gpustack--amd-epyc-7r32--nvidia-a10g"
    )


@pytest.mark.parametrize(
    ("name", "fitted"),
    [
        # 63 characters fit as they are
        ("gpustack--" + "x" * 53, "gpustack--" + "x" * 53),
        # walkthrough §5's aware T4 pool (65): its first 46 characters and its whole name's hash
        (
            "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64",
            "gpustack--intel-xeon-platinum-8259cl--nvidia-t-5b59e508edc027b7",
        ),
        # a cut that ends on a separator drops it, as a DNS label must not hold "--" before "-"
        ("gpustack--" + "a" * 35 + "--nvidia-h100-linux-amd64", None),
    ],
)
def test_a_name_longer_than_a_composite_may_be_keeps_its_start_and_its_hash(name, fitted):
    """Crossplane allows a composite 63 characters: what it composes carries the name as a
    label value (the real control plane refused the 65-character aware T4 pool)."""
    found = names.fitted(name)
    assert len(found) <= 63
    assert found == (fitted or found)
    if len(name) > 63:
        assert found.endswith(f"-{names.fnv1a64(name.encode()):016x}")
        assert name.startswith(found[:-17].rstrip("-"))
        assert "--" not in found[-18:]


def test_long_pool_and_catalog_names_are_fitted():
    g_key, a_key = "intel-xeon-platinum-8259cl", "nvidia-tesla-t4"
    assert names.pool_name("linux", "amd64", a_key, g_key) == (
        "gpustack--intel-xeon-platinum-8259cl--nvidia-t-5b59e508edc027b7"
    )
    long_cpu = "intel-xeon-platinum-8480c-and-many-more-words-to-say"
    assert len(names.catalog_flavor_name(a_key, long_cpu)) == 63


@pytest.mark.parametrize(
    ("compute_capability", "family"),
    [
        ("8.6", "Ampere"),
        ("7.5", "Turing"),
        ("7.0", "Volta"),
        ("8.9", "Ada-Lovelace"),
        ("9.0", "Hopper"),
        ("12.0", "Blackwell"),
        ("", ""),
    ],
)
def test_family_from_compute_capability(compute_capability, family):
    assert names.family_from_compute_capability(compute_capability) == family


def test_label_values_are_sanitised():
    assert names.label_value("NVIDIA A10G") == "NVIDIA-A10G"
    assert names.label_value("Tesla T4") == "Tesla-T4"
