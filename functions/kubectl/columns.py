"""Columns as `kubectl get` prints them, for every table the project prints.

A module of its own, importing nothing: `kubectl gpustack` prints through it and must stay free
of compiled libraries (its krew archive is pure Python: functions/kubectl/krew.py). A kind's
columns are its XRD's `additionalPrinterColumns`, the one place their headers and the fields
they show are written: `printed` lays objects out by them, as kubectl does for the kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

KUBECTL_MIN_WIDTH = 6  # kubectl's tab writer: a column is at least this wide, padding included

# A JSONPath's parts: `.name`, or `['a.dotted/key']` (a label's key) with `\.` for a dot.
_PATH_PART = re.compile(r"\.([A-Za-z0-9_]+)|\['((?:[^'\\]|\\.)*)'\]")


def kubectl_table(headers: list[str], rows: Iterable[list[str]]) -> str:
    """Columns as `kubectl get` prints them: left-aligned, three spaces apart, each at least
    six wide."""
    rows = [headers, *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    widths = [max(width, KUBECTL_MIN_WIDTH - 3) for width in widths]
    lines = [
        "   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    return "\n".join(line.rstrip() for line in lines)


def printer_columns(xrd: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The columns `kubectl get` prints for the XRD's kind: those of its first version that are
    not left to `-o wide` (a priority above 0)."""
    columns = xrd["spec"]["versions"][0].get("additionalPrinterColumns") or []
    return [column for column in columns if not column.get("priority", 0)]


def printed(objects: Iterable[Mapping[str, Any]], columns: list[Mapping[str, Any]]) -> str:
    """The objects, in the order given, as `kubectl get` prints them: NAME, then each column."""
    headers = ["NAME", *(column["name"] for column in columns)]
    rows = (
        [obj["metadata"]["name"], *(cell(obj, column["jsonPath"]) for column in columns)]
        for obj in objects
    )
    return kubectl_table(headers, rows)


def cell(obj: Mapping[str, Any], json_path: str) -> str:
    """The field a column's JSONPath (`.status.display.unit`) names, as kubectl prints it."""
    value: Any = obj
    for plain, quoted in _PATH_PART.findall(json_path):
        part = plain or quoted.replace("\\.", ".")
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
