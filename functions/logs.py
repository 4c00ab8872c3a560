"""Logging for the server, its workers and the agent: nothing of a request in any record.

The SDK's configuration (`crossplane.function.logging`) renders an exception with its traceback,
and structlog's traceback rendering shows every frame's local variables: the frame's `req`
is the whole request, a license Secret's token included, and every result, status and log
line is an output that must never carry a token (DESIGN §3.5). Redacting what a record holds
after the fact cannot be complete, so a record is built from safe parts only:

- an exception becomes its type and where it was raised (`file:line in function` of each of
  its frames), never its message, which may quote the data it failed on, nor its locals;
- any other value that is not a plain scalar (a request, an object, a view, a dict) is
  written as its type name: a caller cannot log an object by mistake;
- the standard library's loggers (gRPC's own) format exceptions the same way, and write
  warnings and errors only, at every level: the Kubernetes client logs response bodies (a
  node's Pods, their environment) at debug level.

The format is otherwise the SDK's: JSON lines (`msg`, `level`, `ts`, file and line), or
console lines at debug level.
"""

from __future__ import annotations

import logging as stdlib_logging
import sys
import sysconfig
import traceback
from collections.abc import MutableMapping
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog
from crossplane.function.logging import Level

__all__ = ["Level", "configure", "failure", "where"]

_SAFE = (str, int, float, bool, type(None))
_PACKAGE = Path(__file__).resolve().parent  # functions/: frames inside it are ours
_STDLIB = Path(sysconfig.get_paths()["stdlib"])


def where(error: BaseException) -> str:
    """`file:line in function` of the innermost frame of `error`'s traceback that is not a
    library's (else the innermost frame): what a bug report needs, and nothing of the data."""
    frames = _frames(error.__traceback__)
    ours = [frame for frame in frames if _ours(frame.filename)]
    found = (ours or frames)[-1:] if frames else []
    return _place(found[0]) if found else "an unknown place"


def failure(error: BaseException) -> dict[str, Any]:
    """What a log record may say of an exception: its type, where it was raised, and its
    frames, outermost first — no message and no local variable."""
    return {
        "error": type(error).__name__,
        "at": where(error),
        "trace": [_place(frame) for frame in _frames(error.__traceback__)],
    }


def _frames(tb: TracebackType | None) -> list[traceback.FrameSummary]:
    return list(traceback.extract_tb(tb, limit=64)) if tb is not None else []


def _ours(filename: str) -> bool:
    """Not a library's frame (the standard library's, or an installed package's)."""
    path = Path(filename)
    if path.is_relative_to(_PACKAGE):
        return True
    return not (
        "site-packages" in path.parts
        or path.is_relative_to(_STDLIB)
        or filename.startswith("<")  # <frozen ...>, <string>
    )


def _place(frame: traceback.FrameSummary) -> str:
    path = Path(frame.filename)
    try:
        shown = str(path.resolve().relative_to(_PACKAGE.parent))
    except (OSError, ValueError):
        shown = path.name
    return f"{shown}:{frame.lineno} in {frame.name}"


def _exception(exc_info: Any) -> BaseException | None:
    """The exception a record's `exc_info` means (True: the one being handled)."""
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple) and len(exc_info) == 3:
        return exc_info[1]
    if exc_info:
        return sys.exc_info()[1]
    return None


def redact(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> Any:
    """The first processor: an exception as `failure` says, any other value that is not a
    plain scalar as its type name."""
    for key in ("exc_info", "exception"):
        if key in event:
            error = _exception(event.pop(key))
            if error is not None:
                event.update(failure(error))
    event.pop("stack_info", None)
    for key, value in list(event.items()):
        if key == "trace" and isinstance(value, list):
            continue  # `failure`'s own list of places
        if not isinstance(value, _SAFE):
            event[key] = f"<{type(value).__name__}>"
    return event


class SafeFormatter(stdlib_logging.Formatter):
    """The standard library's records (gRPC's): an exception as its type and its places."""

    def format(self, record: stdlib_logging.LogRecord) -> str:
        # Another handler may have cached the whole traceback on the record (`exc_text`).
        saved = record.exc_text, record.stack_info
        record.exc_text = self.formatException(record.exc_info) if record.exc_info else None
        record.stack_info = None
        try:
            return super().format(record)
        finally:
            record.exc_text, record.stack_info = saved

    def formatException(self, ei: Any) -> str:
        error = _exception(ei)
        if error is None:
            return ""
        details = failure(error)
        return f"{details['error']} at {details['at']} (trace: {'; '.join(details['trace'])})"

    def formatStack(self, stack_info: str) -> str:
        return ""


def configure(level: Level = Level.INFO) -> None:
    """Configure structlog as the SDK does, with `redact` first; and the standard library's
    root logger to write warnings and errors through `SafeFormatter`."""
    _configure_stdlib(level)
    if level == Level.DISABLED:
        structlog.configure(processors=[_drop])
        return
    processors: list[Any] = [
        redact,
        structlog.stdlib.add_log_level,
        structlog.processors.CallsiteParameterAdder(
            {
                structlog.processors.CallsiteParameter.FILENAME,
                structlog.processors.CallsiteParameter.LINENO,
            }
        ),
    ]
    if level == Level.DEBUG:
        structlog.configure(
            processors=[
                *processors,
                structlog.processors.TimeStamper(fmt="iso"),
                structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(stdlib_logging.DEBUG),
        )
        return
    structlog.configure(
        processors=[
            *processors,
            structlog.processors.TimeStamper(key="ts"),
            structlog.processors.EventRenamer(to="msg"),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(stdlib_logging.INFO),
    )


def _drop(_logger: Any, _method: str, _event: Any) -> Any:
    raise structlog.DropEvent


_HANDLER_NAME = "function-gpustack"


def _configure_stdlib(level: Level) -> None:
    root = stdlib_logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(handler)
    if level == Level.DISABLED:
        return
    handler = stdlib_logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(SafeFormatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(stdlib_logging.WARNING)  # never debug: see the module docstring
