"""Kubernetes resource quantities: exact parsing and canonical formatting.

Values are held as `fractions.Fraction` so that nothing is ever rounded by accident; the
formatters reproduce what the API server prints (`1600000` → `1600k`, `8000000` → `8M`,
`68719476736` → `64Gi`, `0.8` → `800m`).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
DECIMAL_SUFFIXES = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_BY_EXPONENT = {exp: suffix for suffix, exp in DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER = {power: suffix for suffix, power in BINARY_SUFFIXES.items()}

_QUANTITY = re.compile(  # ASCII: Kubernetes reads digits 0-9 only, never "٣" or "３"
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exponent>[+-]?\d+))?$",
    re.ASCII,
)

GIB = 1024**3
MIB = 1024**2
# The largest device count a node advertises that a status can carry: the kubelet counts
# devices in an int64, and a Struct holds numbers as doubles, exact up to 2**53.
LARGEST_COUNT = 2**53


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse(value: str | int | float | Fraction) -> Fraction:
    """Parse a quantity (`"64Gi"`, `"800m"`, `"1.5"`, `2`) into an exact Fraction."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | Fraction):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):  # no JSON holds one: only a broken protobuf sender
            raise QuantityError(f"{value!r} is not a quantity: it is not a finite number")
        return Fraction(str(value))
    match = _QUANTITY.match(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise QuantityError(f"{value!r} is not a quantity (expected e.g. 8, 500m, 64Gi)")
    digits, suffix, exponent = match["number"], match["suffix"], match["exponent"]
    # Integers first: nearly every quantity is a whole number of its unit ("64Gi", "800m").
    number: int | Fraction = int(digits) if digits.isdigit() else Fraction(digits)
    if suffix in BINARY_SUFFIXES:
        number *= 1024 ** BINARY_SUFFIXES[suffix]
    elif suffix is not None or exponent is not None:
        power = DECIMAL_SUFFIXES[suffix] if suffix is not None else int(exponent)
        number = number * 10**power if power >= 0 else Fraction(number, 10**-power)
    return Fraction(-number if match["sign"] == "-" else number)


def format_decimal(value: int | Fraction) -> str:
    """Render in DecimalSI canonical form: the largest power of 1000 that keeps an integer."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    value = -value if value < 0 else value
    if isinstance(value, int) or value.denominator == 1:  # the common case, in integers:
        number, exponent = int(value), 0  # strip thousands up to exa
        while exponent < 18 and number % 1000 == 0:
            number, exponent = number // 1000, exponent + 3
        return f"{sign}{number}{_DECIMAL_BY_EXPONENT[exponent]}"
    # Not a whole number: only milli, micro or nano can make it one, in integers; past nano,
    # Kubernetes rounds up to the smallest representable unit.
    numerator, denominator = value.numerator, value.denominator
    for exponent in (-3, -6, -9):
        scaled = numerator * 10**-exponent
        if scaled % denominator == 0:
            return f"{sign}{scaled // denominator}{_DECIMAL_BY_EXPONENT[exponent]}"
    nanos = -(-numerator * 10**9 // denominator)
    return f"{sign}{nanos}n"


def format_binary(value: int | Fraction) -> str:
    """Render in BinarySI canonical form (`64Gi`); values that no power of 1024 divides stay plain."""
    if not isinstance(value, int):
        if value.denominator != 1:
            return format_decimal(value)
        value = value.numerator
    if value == 0:
        return "0"
    for power in (6, 5, 4, 3, 2, 1):
        unit = 1024**power
        if abs(value) >= unit and value % unit == 0:
            return f"{value // unit}{_BINARY_BY_POWER[power]}"
    return str(value)


def format_mebibytes(mib: int) -> str:
    """Per-card VRAM as the walkthrough labels show it: `24Gi`, `16Gi`, or `15360Mi` if not round."""
    return format_binary(mib * MIB)


def ceil(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)


def floor(value: Fraction) -> int:
    return value.numerator // value.denominator


def whole(value: Any) -> int:
    """A quantity rounded down to a whole number (`1500m` → 1); QuantityError if it is none."""
    # A count is nearly always a plain number ("8"): read it without a Fraction.
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return floor(parse(value))


def device_count(value: Any) -> int:
    """A node's advertised count of a device resource, as a whole number; QuantityError when it
    is not a quantity or is more than any node advertises (LARGEST_COUNT)."""
    total = whole(value)
    if total > LARGEST_COUNT:
        raise QuantityError(f"{value!r} is more devices than a node can advertise")
    return total


def count(value: Any) -> int:
    """A resource key's value as a whole count (`320k` → 320000); 0 when it is not a quantity:
    a key no one can read asks for nothing."""
    try:
        return whole(value)
    except (QuantityError, TypeError):
        return 0
