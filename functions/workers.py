"""The server's worker processes: each on a pipe of its own, so a dead worker fails its call only.

Requests over `INLINE_MAX_BYTES` are parsed and handled by worker processes, never on the
event loop (docs/reliability.md, "Concurrency"). They ran in a ProcessPoolExecutor, whose
workers share one call queue and one result pipe: when one of them died (killed for memory,
as the kernel's OOM killer does, with SIGKILL) the executor counted itself broken and failed
every call in flight — three of four, with four large calls — and its replacement took about
5 s to start, which the next call waited out.

Here each worker is a process of its own, forked from a forkserver that has imported the
handlers once, with a socket pair to the server. A call takes an idle worker (or waits, first
come first served), sends it the request's bytes — as bytes: nothing is pickled, and no other
call's bytes share the pipe — and reads back the response's bytes, the summary metrics read
and the handler's name, on one of the server's threads (which sit in system calls with the
GIL released). A worker that dies ends its own exchange with end-of-file: that call fails
with `WorkerLost` (UNAVAILABLE, which Crossplane retries), a replacement starts at once on
another thread, and the other workers go on serving; nothing waits for it but the calls that
would have waited for a free worker anyway.

Every request is decoded and handled on a thread with a `STACK_BYTES` stack: upb parses nested
messages recursively in C, and the main thread's 8 MiB stack overflowed — killing the process
— at about 40,000 protobuf levels (13,000 JSON object levels), inside upb's own limit of
65,535. With 64 MiB, upb's limit is reached first and is answered as an unreadable request
(INVALID_ARGUMENT); an object that decodes but is too deep to handle gets a Fatal result
(functions/frame.py). Small requests are handled on such a thread too, one at a time, in the
server process (`inline`): their parse, handling and serialisation take about a millisecond,
less than the hop to a worker, and the event loop stays free to accept calls meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import multiprocessing
import pickle
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from crossplane.function import logging

from functions import logs

STACK_BYTES = 64 << 20  # upb's 65,535 levels need about 16 MiB; four times that, reserved only
READY = b"ready"
_REQUEST, _ASK = b"R", b"A"
_ANSWERED, _UNREADABLE, _FAILED = b"A", b"U", b"F"
START_RETRY_SECONDS = 1.0


class WorkerLost(Exception):
    """The worker running the call stopped (killed for memory, say) before it answered."""


class RequestUnreadable(Exception):
    """The request's bytes are not a RunFunctionRequest (upb's words)."""


class WorkerFailed(Exception):
    """The worker answered that the call raised outside the frame (`failure` says where)."""


@dataclass(eq=False)
class Worker:
    process: BaseProcess
    conn: Connection


def big_stack_executor(threads: int, name: str) -> ThreadPoolExecutor:
    """A thread pool whose `threads` threads exist already, each with a `STACK_BYTES` stack
    (a thread's stack size is fixed when it is made)."""
    previous = threading.stack_size(STACK_BYTES)
    try:
        executor = ThreadPoolExecutor(threads, thread_name_prefix=name)
        barrier = threading.Barrier(threads)  # every thread made now, while the size holds
        for future in [executor.submit(barrier.wait) for _ in range(threads)]:
            future.result()
    finally:
        threading.stack_size(previous)
    return executor


class Workers:
    """`count` worker processes and the calls waiting for them; `inline` runs small calls."""

    def __init__(self, count: int, debug: bool = False):
        self.count, self.debug = count, debug
        self.context = multiprocessing.get_context("forkserver")
        self.context.set_forkserver_preload(["functions.server"])
        self.idle: collections.deque[Worker] = collections.deque()
        self.waiting: collections.deque[asyncio.Future[Worker]] = collections.deque()
        self.exchanges = ThreadPoolExecutor(count, thread_name_prefix="exchange")
        self.inline = big_stack_executor(1, "inline")
        self.replacing: set[asyncio.Future[None]] = set()
        self.lost = self.replaced = 0
        self.stopped = False
        self.all: set[Worker] = set()
        for worker in [self.start_one() for _ in range(count)]:
            self.all.add(worker)
            self.idle.append(worker)

    def start_one(self) -> Worker:
        """A new worker, once it has started (blocking: at start-up, or on a thread)."""
        parent, child = self.context.Pipe(duplex=True)
        process = self.context.Process(
            target=_serve, args=(child, self.debug), name="gpustack-worker", daemon=True
        )
        process.start()
        child.close()  # the worker's end is the worker's alone: its death is our end-of-file
        if parent.recv_bytes() != READY:
            raise RuntimeError("a worker started without saying it was ready")
        return Worker(process, parent)

    # --- a call ---------------------------------------------------------------------------

    async def run(self, payload: bytes) -> tuple[bytes, bytes, str]:
        """The response's bytes, the summary metrics read (encoded) and the handler, from a
        worker. Raises WorkerLost, RequestUnreadable or WorkerFailed."""
        worker = await self._take()
        loop = asyncio.get_running_loop()
        try:
            reply = await loop.run_in_executor(self.exchanges, _exchange, worker.conn, payload)
        except (EOFError, OSError):
            self._lose(worker)
            raise WorkerLost from None
        except asyncio.CancelledError:  # past the grace period: its answer would go to no one
            self._lose(worker, kill=True)
            raise
        self._give_back(worker)
        return _answer(reply)

    async def _take(self) -> Worker:
        if self.idle:
            return self.idle.popleft()
        future: asyncio.Future[Worker] = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        try:
            return await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # handed a worker as it was cancelled
                self._give_back(future.result())
            raise

    def _give_back(self, worker: Worker) -> None:
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():
                future.set_result(worker)
                return
        self.idle.append(worker)

    def _lose(self, worker: Worker, kill: bool = False) -> None:
        """Forget a worker that died (or is killed now) and start its replacement."""
        self.all.discard(worker)
        self.lost += 1
        if kill and worker.process.is_alive():
            worker.process.kill()
        worker.conn.close()
        logging.get_logger().warning(
            "worker lost", pid=worker.process.pid, exit_code=worker.process.exitcode
        )
        if not self.stopped:
            task = asyncio.ensure_future(self._replace(worker))
            self.replacing.add(task)
            task.add_done_callback(self.replacing.discard)

    async def _replace(self, lost: Worker) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lost.process.join)  # reaped, off the loop
        while not self.stopped:
            try:
                worker = await loop.run_in_executor(None, self.start_one)
            except Exception as error:  # keep serving on the others; try again shortly
                logging.get_logger().error("worker start failed", **logs.failure(error))
                await asyncio.sleep(START_RETRY_SECONDS)
                continue
            if self.stopped:
                _close(worker)
                return
            self.all.add(worker)
            self.replaced += 1
            self._give_back(worker)
            return

    # --- outside a call: tests, start-up ----------------------------------------------------

    def ask(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in an idle worker (a module-level function; not during calls)."""
        worker = self.idle.popleft()
        try:
            worker.conn.send_bytes(_ASK)
            worker.conn.send_bytes(pickle.dumps((function, args)))
            return pickle.loads(worker.conn.recv_bytes())
        finally:
            self.idle.appendleft(worker)

    def pids(self) -> list[int]:
        return sorted(w.process.pid for w in self.all if w.process.pid is not None)

    def stop(self, kill: bool) -> None:
        """Stop every worker: at once (`kill`: past the grace period), else once idle."""
        self.stopped = True
        for worker in list(self.all):
            if kill:
                worker.process.kill()
            _close(worker)
        self.all.clear()
        self.exchanges.shutdown(wait=False, cancel_futures=True)
        self.inline.shutdown(wait=False, cancel_futures=True)


def _close(worker: Worker, timeout: float = 5.0) -> None:
    worker.conn.close()  # an idle worker reads end-of-file and returns
    worker.process.join(timeout)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join(timeout)


def _exchange(conn: Connection, payload: bytes) -> list[bytes]:
    """On a server thread: the request out, the reply's messages back."""
    conn.send_bytes(_REQUEST)
    conn.send_bytes(payload)
    status = conn.recv_bytes()
    if status[:1] == _ANSWERED:
        return [status, conn.recv_bytes(), conn.recv_bytes()]
    return [status]


def _answer(reply: list[bytes]) -> tuple[bytes, bytes, str]:
    status = reply[0]
    if status[:1] == _ANSWERED:
        return reply[2], reply[1], status[1:].decode()
    if status[:1] == _UNREADABLE:
        raise RequestUnreadable(status[1:].decode())
    raise WorkerFailed(status[1:].decode())


# --- in the worker process -------------------------------------------------------------------


def _serve(conn: Connection, debug: bool) -> None:
    """A worker's life: set up as the server says, then serve calls on a big-stack thread."""
    from functions import server  # imported by the forkserver already

    server.worker_started(debug)
    previous = threading.stack_size(STACK_BYTES)
    try:
        thread = threading.Thread(target=_loop, args=(conn, server), name="worker")
        thread.start()
    finally:
        threading.stack_size(previous)
    thread.join()


def _loop(conn: Connection, server: Any) -> None:
    from google.protobuf.message import DecodeError

    conn.send_bytes(READY)
    while True:
        try:
            kind = conn.recv_bytes()
            if kind == _ASK:
                function, args = pickle.loads(conn.recv_bytes())
                conn.send_bytes(pickle.dumps(function(*args)))
                continue
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the server closed our pipe (stopping), or is gone
        try:
            answer, told, handler = server.serve_in_worker(payload)
        except DecodeError as error:
            conn.send_bytes(_UNREADABLE + str(error).encode())
            continue
        except Exception as error:  # outside the frame (serialising, say): this call's alone
            details = logs.failure(error)
            logging.get_logger().error("call failed in a worker", **details)
            conn.send_bytes(_FAILED + f"{details['error']} at {details['at']}".encode())
            continue
        finally:
            del payload
        conn.send_bytes(_ANSWERED + handler.encode())
        conn.send_bytes(told)
        conn.send_bytes(answer)
