"""What the API server would refuse, checked where a value is read, before anything is made of it.

A name the API server refuses fails the apply of what it was composed into, later and far from
its cause (a tenant sees Crossplane's apply error on a Pod, not the field that made it); a
number no JSON can hold cannot have come from the API server at all. So both are checked where
they enter, and refused naming the field:

- names, as apimachinery's `validation` package checks them (the same limits and words):
  a DNS-1123 subdomain for most objects (at most 253 characters: lowercase letters, digits,
  '-' and '.', beginning and ending with a letter or digit), a DNS-1123 label for a namespace
  (at most 63, no '.'), a DNS-1035 label for a Service (a label beginning with a letter);
- numbers: finite (JSON has no infinity and no NaN, so neither does any stored object), and
  within the range a field's reader gives.

Each check answers the problem in words, or None where the value is fine.
"""

from __future__ import annotations

import math
import re

SUBDOMAIN_MAX = 253
LABEL_MAX = 63

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*", re.ASCII)
_LABEL_RE = re.compile(_LABEL, re.ASCII)
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?", re.ASCII)

SUBDOMAIN_WORDS = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
)
LABEL_WORDS = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc')"
)
DNS1035_WORDS = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name', or "
    "'abc-123')"
)

# Kinds whose names the API server holds to a label rather than a subdomain.
_LABEL_NAMED = {"Namespace": "label", "Service": "dns1035"}


def _problem(value: str, pattern: re.Pattern[str], limit: int, words: str) -> str | None:
    if len(value) > limit:
        return f"must be no more than {limit} characters"
    if not pattern.fullmatch(value):
        return words
    return None


def subdomain_problem(value: str) -> str | None:
    """Why `value` is not a DNS-1123 subdomain (most objects' names), or None."""
    return _problem(value, _SUBDOMAIN, SUBDOMAIN_MAX, SUBDOMAIN_WORDS)


def label_problem(value: str) -> str | None:
    """Why `value` is not a DNS-1123 label (a namespace's name), or None."""
    return _problem(value, _LABEL_RE, LABEL_MAX, LABEL_WORDS)


def dns1035_problem(value: str) -> str | None:
    """Why `value` is not a DNS-1035 label (a Service's name), or None."""
    return _problem(value, _DNS1035, LABEL_MAX, DNS1035_WORDS)


def name_problem(kind: str, value: str) -> str | None:
    """Why the API server would refuse `value` as the name of an object of `kind`, or None."""
    rule = _LABEL_NAMED.get(kind)
    if rule == "label":
        return label_problem(value)
    if rule == "dns1035":
        return dns1035_problem(value)
    return subdomain_problem(value)


def whole(value: object) -> bool:
    """A whole number as a Struct carries it (every number a double): an int, or a float
    without a fraction — not an infinity or a NaN, which no count can be — and never a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def number_problem(value: float) -> str | None:
    """Why `value` is no number a Kubernetes object can hold (infinite, or not a number)."""
    if math.isfinite(value):
        return None
    return (
        f"is {value!r}, which no Kubernetes object can hold (JSON has no infinity or NaN); "
        "set a finite number"
    )
