"""End to end over gRPC: our server beside a do-nothing SDK function, both in subprocesses.

Ours is the `function` console script as Crossplane starts it (`--insecure`; its defaults:
4 worker processes, 64 MiB receive limit); the baseline is bench/noop.py, an SDK function
returning `response.to(req)` served by the SDK's runtime with the same limits. The client sends
the request's bytes as they are and takes the answer's bytes, so neither side pays for the
client's protobuf work. A third server, ours with the handlers' rules skipped
(bench/remembering.py), splits an Instance's latency into the server's part and the rules'.
Memory is read from /proc: each server's resident set, with its worker processes, and the peak
(VmHWM) of its largest process.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc

from bench.noop import LIMIT

METHOD = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"
FUNCTION = Path(sys.executable).parent / "function"
CLIENT_LIMIT = 1024 * 1024 * 1024  # the client never limits: the servers' 64 MiB does


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    name: str
    process: subprocess.Popen
    channel: grpc.Channel

    def call(self, payload: bytes) -> bytes:
        method = self.channel.unary_unary(METHOD)  # bytes in, bytes out
        return method(payload, timeout=300)

    def processes(self) -> list[int]:
        """The server and every process under it (our worker processes)."""
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
        found, frontier = [self.process.pid], [self.process.pid]
        while frontier:
            frontier = [pid for pid, parent in parents.items() if parent in frontier]
            found += frontier
        return found

    def memory(self) -> tuple[float, float]:
        """(resident MiB of all its processes now, peak MiB of its largest process)."""
        found = [process_memory(pid) for pid in self.processes()]
        return sum(rss for rss, _ in found), max((peak for _, peak in found), default=0.0)


def process_memory(pid: int) -> tuple[float, float]:
    """A process's resident and peak resident MiB, from /proc; nothing once it has gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0, 0.0
    fields = dict(line.split(":", 1) for line in status.splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


@contextlib.contextmanager
def serving(name: str, argv: list[str]) -> Iterator[Server]:
    address = f"127.0.0.1:{free_port()}"
    process = subprocess.Popen(
        [*argv, address], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    options = [
        ("grpc.max_send_message_length", CLIENT_LIMIT),
        ("grpc.max_receive_message_length", CLIENT_LIMIT),
    ]
    channel = grpc.insecure_channel(address, options=options)
    try:
        grpc.channel_ready_future(channel).result(timeout=60)
        yield Server(name, process, channel)
    finally:
        channel.close()
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def ours() -> contextlib.AbstractContextManager[Server]:
    argv = (
        [str(FUNCTION)] if FUNCTION.exists() else [sys.executable, "-m", "functions.cli", "serve"]
    )
    return serving("function-gpustack", [*argv, "--insecure", "--address"])


def do_nothing() -> contextlib.AbstractContextManager[Server]:
    return serving("do-nothing SDK function", [sys.executable, "-m", "bench.noop"])


def remembering() -> contextlib.AbstractContextManager[Server]:
    """Ours with the handlers' rules skipped (bench/remembering.py), as ours is served."""
    argv = [sys.executable, "-m", "bench.remembering", "--insecure", "--address"]
    return serving("function-gpustack, rules skipped", argv)


WORKERS = 4  # our server's default worker processes


def warm(server: Server, payload: bytes) -> None:
    """Two rounds of one call per worker process, sent at once so that each of our four
    workers takes one: the timed calls find every worker warm (its memo filled), as a
    worker is in steady state."""
    method = server.channel.unary_unary(METHOD)
    for _ in range(2):
        for call in [method.future(payload, timeout=300) for _ in range(WORKERS)]:
            call.result()


def fits(payload: bytes) -> bool:
    return len(payload) <= LIMIT


def timed(server: Server, payload: bytes) -> float:
    start = time.perf_counter()
    server.call(payload)
    return time.perf_counter() - start
