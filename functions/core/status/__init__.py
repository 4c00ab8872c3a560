"""Status contracts: each published status has one writer and one reader, here.

A status another handler reads is a contract between releases: it carries a `version`, names
every figure it holds, and its reader accepts what the previous release wrote (the stored
fixtures under tests/fixtures/status prove it). A status the reader cannot make sense of raises
`StatusError` naming the field, so the caller can skip that one object and say so.

Readers take plain dicts or the handlers' lazy Struct views alike: anything with `.get(key)`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


class StatusError(ValueError):
    """A published status that cannot be read; `field` is its path from the object's root."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def read_object(value: Any, path: str) -> Any:
    """A nested object (dict or view); an absent one reads as empty."""
    if value is None:
        return {}
    if isinstance(value, str | int | float | bool) or not hasattr(value, "get"):
        raise StatusError(path, f"must be an object, got {type(value).__name__}")
    return value


def read_list(value: Any, path: str) -> Iterable[Any]:
    if value is None:
        return ()
    if isinstance(value, str | bytes) or hasattr(value, "get") or not hasattr(value, "__iter__"):
        raise StatusError(path, f"must be a list, got {type(value).__name__}")
    return value


def read_int(value: Any, path: str, default: int = 0) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise StatusError(path, f"must be a whole number, got {type(value).__name__}")
    try:
        number = float(value)
    except ValueError:
        raise StatusError(path, f"must be a whole number, got {value!r}") from None
    if not number.is_integer():
        raise StatusError(path, f"must be a whole number, got {value!r}")
    return int(number)


def read_str(value: Any, path: str, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise StatusError(path, f"must be a string, got {type(value).__name__}")
    return value


def read_document(text: Any, at: str) -> dict[str, Any]:
    """The JSON object a published string holds (a ConfigMap's data value)."""
    if not isinstance(text, str):
        raise StatusError(at, "is missing" if text is None else "must be a string")
    try:
        document = json.loads(text)
    except ValueError as error:
        raise StatusError(at, f"is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise StatusError(at, "must hold a JSON object")
    return document
