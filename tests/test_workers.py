"""The worker pool: a dead worker fails its own call only; a deep request is refused, not fatal.

Issue 35, items 2 and 4. With a ProcessPoolExecutor, one worker killed by SIGKILL (as the OOM
killer does) failed three of four large calls in flight and the next call waited about 5 s for
a new pool; a request nested about 14,600 levels killed its worker (upb recursing in C past
the main thread's stack), answering UNAVAILABLE, and through the shared pool its bystanders
too. Each worker now has a pipe of its own and is replaced alone; every request is decoded on
a thread whose stack holds upb's own limit (functions/workers.py). Outcomes are asserted,
never times: conditions are polled with generous bounds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
from pathlib import Path

import grpc
import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from functions.server import INLINE_MAX_BYTES
from functions.workers import WorkerLost, Workers
from tests.support import load
from tests.support.grpc_server import wait_ready
from tests.support.patience import HANG, exited, wait_until, wait_until_async

BIG = [("grpc.max_send_message_length", 2**30), ("grpc.max_receive_message_length", 2**30)]


@pytest.fixture(scope="module")
def pool_payload() -> bytes:
    payload = load.pool_request(200).SerializeToString()
    assert len(payload) > INLINE_MAX_BYTES
    return payload


async def _calls(workers: Workers, payload: bytes, count: int, kill: bool) -> list:
    """`count` calls at once, every worker stopped until all are taken; then, if `kill`, one
    of them is killed as the OOM killer would, and the others resume."""
    pids = workers.pids()
    load.stop(pids)
    try:
        calls = [asyncio.ensure_future(workers.run(payload)) for _ in range(count)]
        await wait_until_async(
            lambda: not workers.idle and len(workers.waiting) >= count - len(pids),
            "every worker to have a call",
            every=0.01,
        )
        if kill:
            os.kill(pids[0], signal.SIGKILL)
    finally:
        for pid in pids[1:] if kill else pids:
            os.kill(pid, signal.SIGCONT)
    return await asyncio.gather(*calls, return_exceptions=True)


def test_a_worker_killed_mid_call_fails_that_call_only_and_is_replaced_alone(pool_payload):
    workers = Workers(4)
    try:
        asyncio.run(_one_lost_then_all_answered(workers, pool_payload))
    finally:
        workers.stop(kill=True)
    assert workers.lost == 1 and workers.replaced == 1


async def _one_lost_then_all_answered(workers: Workers, payload: bytes) -> None:
    first = await _calls(workers, payload, 4, kill=True)
    lost = [outcome for outcome in first if isinstance(outcome, WorkerLost)]
    answered = [outcome for outcome in first if isinstance(outcome, tuple)]
    assert (len(lost), len(answered)) == (1, 3), first
    assert all(
        fnv1.RunFunctionResponse.FromString(answer).meta.tag == "pool" for answer, _, _ in answered
    )
    await wait_until_async(  # its replacement starts while the others serve
        lambda: workers.replaced >= 1, "the lost worker's replacement"
    )
    assert len(workers.all) == 4
    for count in (4, 8):  # four calls again, then eight (four wait for a worker)
        again = await _calls(workers, payload, count, kill=False)
        assert all(isinstance(outcome, tuple) for outcome in again), again


def test_over_grpc_the_lost_call_is_unavailable_and_the_next_is_answered(pool_payload):
    req = fnv1.RunFunctionRequest.FromString(pool_payload)
    with load.server_process("--insecure", "--workers", "2") as (process, address):
        with grpc.insecure_channel(address, BIG) as channel:
            wait_ready(channel)
            stub = grpcv1.FunctionRunnerServiceStub(channel)
            assert stub.RunFunction(req, timeout=HANG).meta.tag == "pool"  # both workers up
            workers = _workers(process.pid)
            assert len(workers) == 2
            load.stop(workers)
            calls = [stub.RunFunction.future(req, timeout=HANG) for _ in range(2)]
            wait_until(  # each worker has been sent a call: it is the stopped worker's now
                lambda: all(_unread_bytes(pid) for pid in workers),
                "both calls to reach a stopped worker",
            )
            os.kill(workers[0], signal.SIGKILL)
            os.kill(workers[1], signal.SIGCONT)
            codes = sorted(_code(call) for call in calls)
            assert codes == ["OK", "UNAVAILABLE"], codes
            assert stub.RunFunction(req, timeout=HANG).meta.tag == "pool"
            wait_until(lambda: len(_workers(process.pid)) == 2, "the lost worker's replacement")
        process.terminate()
        output = exited(process, "the server to exit on SIGTERM")
    assert load.logged(output, "worker lost")


def _code(call: grpc.Future) -> str:
    try:
        call.result(timeout=HANG)
    except grpc.RpcError as error:
        return error.code().name
    return "OK"


def _workers(server: int) -> list[int]:
    """The server's workers: forked by its forkserver, so not the server's own children."""
    below = load.descendants(server)
    return sorted(pid for pid in below if _parent(pid) in below)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, NLMSG_ERROR, NLMSG_DONE = 4, 20, 2, 3
UDIAG_SHOW_RQLEN, UNIX_DIAG_RQLEN = 0x10, 4


def _unread_bytes(pid: int) -> int:
    """The bytes waiting unread on a process's Unix sockets (its pipe to the server), as the
    kernel's socket diagnostics tell `ss -x`: a stopped worker sent a call holds them."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if link.startswith("socket:["):
            inodes.add(int(link[len("socket:[") : -1]))
    # A dump of every Unix socket (struct unix_diag_req), each with its receive queue's length.
    every_state, any_cookie = 0xFFFFFFFF, 0xFFFFFFFF
    ask = struct.pack(
        "=BBHIIIII", socket.AF_UNIX, 0, 0, every_state, 0, UDIAG_SHOW_RQLEN, any_cookie, any_cookie
    )
    dump = 0x300 | 0x1  # NLM_F_DUMP | NLM_F_REQUEST
    unread = 0
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG) as diag:
        diag.sendall(struct.pack("=IHHII", 16 + len(ask), SOCK_DIAG_BY_FAMILY, dump, 1, 0) + ask)
        while True:
            data, at = diag.recv(1 << 20), 0
            while at < len(data):  # netlink messages: a header, a unix_diag_msg, attributes
                length, kind = struct.unpack_from("=IH", data, at)
                if kind == NLMSG_DONE:
                    return unread
                if kind == NLMSG_ERROR:
                    raise OSError(f"sock_diag refused the dump: {data[at : at + length]!r}")
                (inode,) = struct.unpack_from("=I", data, at + 16 + 4)
                attribute = at + 16 + 16
                while attribute < at + length:
                    size, name = struct.unpack_from("=HH", data, attribute)
                    if size < 4:  # malformed: no further attribute
                        break
                    if name == UNIX_DIAG_RQLEN and inode in inodes:
                        unread += struct.unpack_from("=I", data, attribute + 4)[0]
                    attribute += (size + 3) & ~3
                at += (length + 3) & ~3


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        low, number = number & 0x7F, number >> 7
        if not number:
            return bytes(out + bytes([low]))
        out.append(low | 0x80)


def deep_request(levels: int) -> bytes:
    """A small InstanceTypeFlavor request whose observed `deep` object holds lists nested
    `levels` deep (two protobuf levels each), written as bytes: protobuf's own writer recurses."""
    value = b""
    for _ in range(levels):
        items = b"\x0a" + _varint(len(value)) + value  # ListValue.values
        value = b"\x32" + _varint(len(items)) + items  # Value.list_value
    entry = b"\x0a\x04spec\x12" + _varint(len(value)) + value  # Struct.fields["spec"]
    struct = b"\x0a" + _varint(len(entry)) + entry
    resource = b"\x0a" + _varint(len(struct)) + struct  # Resource.resource
    observed_entry = b"\x0a\x04deep\x12" + _varint(len(resource)) + resource
    state = b"\x12" + _varint(len(observed_entry)) + observed_entry  # State.resources
    observed = b"\x12" + _varint(len(state)) + state  # RunFunctionRequest.observed
    return load.small_request("deep").SerializeToString() + observed


@pytest.mark.parametrize(
    ("levels", "code"),
    [(30_000, "OK"), (40_000, "INVALID_ARGUMENT")],
    ids=["60,000 protobuf levels: parsed", "80,000: past upb's limit"],
)
def test_a_deep_request_is_parsed_or_refused_never_kills_its_worker(levels, code, pool_payload):
    payload = deep_request(levels)
    assert len(payload) > INLINE_MAX_BYTES  # a worker's
    req = fnv1.RunFunctionRequest.FromString(pool_payload)
    with load.server_process("--insecure", "--workers", "2") as (process, address):
        with grpc.insecure_channel(address, BIG) as channel:
            wait_ready(channel)
            raw = channel.unary_unary(
                "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction",
                request_serializer=None,
                response_deserializer=fnv1.RunFunctionResponse.FromString,
            )
            bystander = grpcv1.FunctionRunnerServiceStub(channel).RunFunction.future(
                req, timeout=HANG
            )
            try:
                rsp = raw(payload, timeout=HANG)
                found = "OK"
                assert rsp.meta.tag == "deep"
            except grpc.RpcError as error:
                found = error.code().name
                assert "Exceeded upb_DecodeOptions_MaxDepth" in error.details()
            assert found == code
            assert bystander.result(timeout=HANG).meta.tag == "pool"
            assert len(_workers(process.pid)) == 2  # none died
        process.terminate()
        output = exited(process, "the server to exit on SIGTERM")
    assert not load.logged(output, "worker lost")
