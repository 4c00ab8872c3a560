"""Columns as `kubectl get` prints them, for every table the project prints.

A module of its own, importing nothing: `kubectl gpustack` prints through it and must stay free
of compiled libraries (its krew archive is pure Python: functions/kubectl/krew.py), which the
catalog's settings model is not.
"""

from __future__ import annotations

from collections.abc import Iterable

KUBECTL_MIN_WIDTH = 6  # kubectl's tab writer: a column is at least this wide, padding included


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
