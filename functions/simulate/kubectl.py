"""What `kubectl get <kind>` prints: NAME plus the XRD's printer columns, three spaces apart."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from functions.core.catalog import kubectl_table

_PATH_PART = re.compile(r"\.([A-Za-z0-9_]+)|\['((?:[^'\\]|\\.)*)'\]")


def table(objects: Iterable[Mapping[str, Any]], xrd: Mapping[str, Any] | None) -> str:
    columns = xrd["spec"]["versions"][0].get("additionalPrinterColumns", []) if xrd else []
    rows = [
        [obj["metadata"]["name"], *(cell(obj, c["jsonPath"]) for c in columns)]
        for obj in sorted(objects, key=lambda o: o["metadata"]["name"])
    ]
    return kubectl_table(["NAME", *(c["name"] for c in columns)], rows)


def cell(obj: Mapping[str, Any], json_path: str) -> str:
    value: Any = obj
    for plain, quoted in _PATH_PART.findall(json_path):
        part = plain or quoted.replace("\\.", ".")
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
