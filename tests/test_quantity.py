"""Kubernetes quantities: parsing is exact, formatting is the API server's canonical form."""

from fractions import Fraction

import pytest

from functions.core import quantity


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1_600_000, "1600k"),
        (8_000_000, "8M"),
        (6_400_000, "6400k"),
        (12_800_000, "12800k"),
        (0, "0"),
        (72, "72"),
        (Fraction(4, 5), "800m"),
        (Fraction(1, 10), "100m"),
        (Fraction(3, 2), "1500m"),
        (-2000, "-2k"),
        (10**21, "1000E"),
        (Fraction(1, 3), "333333334n"),
    ],
)
def test_decimal_canonical_form(value, text):
    assert quantity.format_decimal(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (64 * 1024**3, "64Gi"),
        (15 * 1024**3, "15Gi"),
        (1920 * 1024**2, "1920Mi"),
        (8 * 1024**3, "8Gi"),
        (13_743_895_347, "13743895347"),
        (0, "0"),
    ],
)
def test_binary_canonical_form(value, text):
    assert quantity.format_binary(value) == text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("64Gi", 64 * 1024**3),
        ("800m", Fraction(4, 5)),
        ("1600k", 1_600_000),
        ("8M", 8_000_000),
        ("1.5", Fraction(3, 2)),
        ("1e3", 1000),
        (" 2 ", 2),
        (3, 3),
    ],
)
def test_parse(text, value):
    assert quantity.parse(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "1.2.3", "64gi", "abc", "1 Gi", "٣Gi", "１２"])
def test_parse_rejects_what_kubernetes_rejects(text):
    with pytest.raises(quantity.QuantityError, match="is not a quantity"):
        quantity.parse(text)


def test_vram_labels_render_at_the_largest_exact_binary_unit():
    assert quantity.format_mebibytes(24576) == "24Gi"
    assert quantity.format_mebibytes(16384) == "16Gi"
    assert quantity.format_mebibytes(15360) == "15Gi"
    assert quantity.format_mebibytes(15000) == "15000Mi"


@pytest.mark.parametrize("text", ["64Gi", "1600k", "800m", "13743895347", "8M"])
def test_round_trip(text):
    value = quantity.parse(text)
    binary = text.endswith(tuple(quantity.BINARY_SUFFIXES))
    assert (quantity.format_binary if binary else quantity.format_decimal)(value) == text


@pytest.mark.parametrize(
    ("value", "count"), [("8", 8), (8, 8), ("08", 8), ("1k", 1000), ("2.5", 2)]
)
def test_a_device_count_is_a_whole_number(value, count):
    assert quantity.device_count(value) == count


@pytest.mark.parametrize(
    ("value", "problem"),
    [("four", "is not a quantity"), ("1e400", "more devices than a node can advertise")],
)
def test_a_device_count_no_node_can_advertise_is_refused(value, problem):
    with pytest.raises(quantity.QuantityError, match=problem):
        quantity.device_count(value)


@pytest.mark.parametrize(
    ("value", "whole"),
    [("8", 8), ("0", 0), ("1500m", 1), ("500m", 0), ("2k", 2000), ("1Ki", 1024), (3, 3)],
)
def test_whole_rounds_a_quantity_down_and_reads_plain_counts_alike(value, whole):
    assert quantity.whole(value) == whole
    assert quantity.count(value) == whole


def test_a_launcher_asking_for_no_quantity_asks_for_nothing():
    with pytest.raises(quantity.QuantityError):
        quantity.whole("two")
    assert quantity.count("two") == 0
