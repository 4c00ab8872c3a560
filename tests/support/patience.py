"""How long a test waits for something that should happen before it calls it a hang.

Tests wait on conditions (a server answering, a process exiting, memory handed back), never
on a clock: `HANG` only matters when the thing never happens, and then it is reported, with
what was awaited and for how long. A busy 2-core CI machine runs a test many times slower
than a quiet one: there, a bound of seconds is a flake, and a bound of minutes still a hang.
Where a time is the behaviour under test (a call's timeout, a grace period), the test keeps
that figure and waits on its outcome within `HANG`.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Callable
from typing import TypeVar

HANG = 600.0  # seconds: pyproject.toml's per-test timeout (900 s) is above it

T = TypeVar("T")


def _said(what: str | Callable[[], str]) -> str:
    return what() if callable(what) else what


def wait_until(
    condition: Callable[[], T],
    what: str | Callable[[], str],
    bound: float = HANG,
    every: float = 0.05,
) -> T:
    """`condition()`'s first true value, asked every `every` seconds; after `bound` seconds,
    an AssertionError saying what was awaited (`what`, or what it returns then) and how long."""
    started = time.monotonic()
    while not (found := _asked(condition, what, started, bound)):
        time.sleep(every)
    return found


async def wait_until_async(
    condition: Callable[[], T],
    what: str | Callable[[], str],
    bound: float = HANG,
    every: float = 0.05,
) -> T:
    """`wait_until` on an event loop, which runs on while it waits."""
    started = time.monotonic()
    while not (found := _asked(condition, what, started, bound)):
        await asyncio.sleep(every)
    return found


def _asked(
    condition: Callable[[], T], what: str | Callable[[], str], started: float, bound: float
) -> T:
    """`condition()`, or the AssertionError of a wait begun at `started` that is past `bound`."""
    found = condition()
    waited = time.monotonic() - started
    if not found and waited >= bound:
        raise AssertionError(f"waited {waited:.0f} s for {_said(what)}")
    return found


def exited(process: subprocess.Popen, what: str, bound: float = HANG) -> str:
    """The output of `process` (its stdout a pipe) once it has exited; after `bound` seconds,
    it is killed and an AssertionError says what was awaited, with the output it had written."""
    try:
        output, _ = process.communicate(timeout=bound)
    except subprocess.TimeoutExpired as hung:
        process.kill()
        process.wait()  # its own end; a descendant may hold the pipe open for longer
        written = hung.output or b""
        text = written.decode(errors="replace") if isinstance(written, bytes) else written
        raise AssertionError(
            f"waited {bound:.0f} s for {what}; it was killed. Its output:\n{text[-4000:]}"
        ) from None
    return output
