"""What a large request took goes back to the system once the process is idle.

A pool's request parses to about three times its size (95 MiB for 20,000 nodes' 30 MiB), and
glibc keeps what is freed for reuse: among the freed blocks lie the summaries a worker keeps,
and glibc raises its mmap threshold to the largest buffer freed so far, so a request's bytes
come from the heap too. The heap cannot shrink, and each process stayed at its largest
request's peak while idle: four workers and the server at once.

So each process trims its heap (glibc's `malloc_trim`, which returns every free page) once it
has been idle a while (`IdleTrim`), never on a request's path: a trim right after a 5,000-node
request took 15 ms, and the next request paid about as much again to fault the pages back in.
Mapping large buffers on their own (`mallopt`) was tried as well and dropped: every request
then faulted its buffers in afresh, 55 -> 94 ms for a 5,000-node InstanceType over gRPC, for
5 % less memory at rest. A busy process keeps its memory; an idle one gives it back.

Where the C library has no `malloc_trim` (musl, macOS) nothing is done.

What start-up made is left out of every later garbage collection (`leave_startup_objects`).
The modules, classes and descriptors a process loads (about 50,000 objects: grpc, protobuf,
structlog, the handlers) were most of what a full collection walked: in a worker holding
5,000 nodes' summaries one took 27-33 ms on the bench machine, and takes 2 ms once they are
frozen. A worker whose pools' nodes change runs one every fifteen or so requests.
"""

from __future__ import annotations

import ctypes
import gc
import threading

MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None)
IDLE_SECONDS = 2.0  # pools reconcile every 30 s: a process this long idle is between them


def release_freed_memory() -> None:
    """Return the C heap's free pages to the system."""
    if MALLOC_TRIM is not None:
        MALLOC_TRIM(0)


class IdleTrim:
    """Trims the heap once no large request has run for `idle` seconds, from its own thread.

    `started` and `done` bracket each large request. The trim runs once per idle spell; one that
    coincides with a request starting only costs that request a little time (ctypes lets go of
    the interpreter for it), never a result."""

    def __init__(self, idle: float = IDLE_SECONDS):
        self.idle = idle
        self.running = 0
        self.finished = threading.Event()
        self.thread: threading.Thread | None = None

    def started(self) -> None:
        self.running += 1

    def done(self) -> None:
        self.running -= 1
        if self.thread is None:
            self.thread = threading.Thread(target=self._trim_when_idle, daemon=True)
            self.thread.start()
        self.finished.set()

    def _trim_when_idle(self) -> None:
        while True:
            self.finished.wait()
            self.finished.clear()
            # Wait until a whole idle spell passes with no request finishing or running.
            while self.finished.wait(self.idle) or self.running:
                self.finished.clear()
            release_freed_memory()


def leave_startup_objects(collect: bool = True) -> None:
    """Move every object alive now out of the garbage collector's generations, so no later
    collection walks it again (`gc.freeze`). `collect` first, so no garbage is kept for good;
    a worker just forked skips it, since a collection would write to every page it shares with
    the process it was forked from (what little garbage its start-up left stays for good)."""
    if collect:
        gc.collect()
    gc.freeze()
