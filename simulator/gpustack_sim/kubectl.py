"""What `kubectl get <kind>` prints: NAME plus the XRD's printer columns (those of a priority
above 0 only with `-o wide`), through kubectl's tab writer
(k8s.io/cli-runtime/pkg/printers/tabwriter.go: Go's text/tabwriter with minimum cell width 6
and padding 3, blanks as padding; the last cell of a line is not padded). Lines are printed
without trailing blanks, as the walkthrough's tables are."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from functions.kubectl.columns import cell

TABWRITER_MIN_WIDTH, TABWRITER_PADDING = 6, 3


def table(
    objects: Iterable[Mapping[str, Any]], xrd: Mapping[str, Any] | None, wide: bool = False
) -> str:
    columns = xrd["spec"]["versions"][0].get("additionalPrinterColumns", []) if xrd else []
    columns = [c for c in columns if wide or not c.get("priority", 0)]
    rows = [
        [obj["metadata"]["name"], *(cell(obj, c["jsonPath"]) for c in columns)]
        for obj in sorted(objects, key=lambda o: o["metadata"]["name"])
    ]
    return tabwritten([["NAME", *(c["name"] for c in columns)], *rows])


def tabwritten(rows: list[list[str]]) -> str:
    """Rows of cells as kubectl's tab writer lays them out: each column as wide as its widest
    cell plus the padding, at least the minimum width."""
    widths = [
        max(TABWRITER_MIN_WIDTH, max(len(row[i]) for row in rows) + TABWRITER_PADDING)
        for i in range(len(rows[0]) - 1)
    ]
    lines = (
        "".join(text.ljust(width) for text, width in zip(row, widths, strict=False)) + row[-1]
        for row in rows
    )
    return "\n".join(line.rstrip() for line in lines)  # as the walkthrough prints them
