"""Timing that survives a shared machine: interleaved pairs, the median of per-pair ratios.

A ratio is taken inside each pair (baseline and measured run back to back, their order
alternating), so a slow spell of the machine lands on both sides of it; the median of the
ratios then drops the pairs that a spell split. Every sample starts after a full garbage
collection and pays for its own garbage, as a server would. Nothing here asserts a time.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.server import serve_bytes


@dataclass(frozen=True)
class Pairs:
    """Interleaved samples of a baseline and a measured path, in seconds."""

    baseline: tuple[float, ...]
    measured: tuple[float, ...]

    @property
    def ratio(self) -> float:
        """The median of the per-pair ratios measured / baseline."""
        return statistics.median(m / b for b, m in zip(self.baseline, self.measured, strict=True))

    @property
    def baseline_ms(self) -> float:
        return statistics.median(self.baseline) * 1000

    @property
    def measured_ms(self) -> float:
        return statistics.median(self.measured) * 1000


def sample(work: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def pairs(
    baseline: Callable[[], object],
    measured: Callable[[], object],
    count: int,
    before: Callable[[], object] = lambda: None,
) -> Pairs:
    """`count` interleaved pairs after one warm-up run of each (never on a cold heap);
    `before` runs, untimed, ahead of each measured run."""
    baseline()
    measured()
    base, meas = [], []
    for index in range(count):
        if index % 2:
            before()
            meas.append(sample(measured))
            base.append(sample(baseline))
        else:
            base.append(sample(baseline))
            before()
            meas.append(sample(measured))
    return Pairs(tuple(base), tuple(meas))


def floor_and_full(
    payload: bytes, count: int, before: Callable[[], object] = lambda: None
) -> Pairs:
    """Protobuf parse of the request (the floor any function pays) against the whole path a
    worker runs: parse, handle, serialise deterministically (functions.server.serve_bytes).
    `before` runs ahead of each full run, untimed (to empty a memo)."""
    return pairs(
        lambda: fnv1.RunFunctionRequest.FromString(payload),
        lambda: serve_bytes(payload),
        count,
        before,
    )


def floor_and_do_nothing(payload: bytes, count: int) -> Pairs:
    """The floor against the do-nothing SDK function's whole path in process (bench/noop.py's:
    parse, `response.to`, serialise)."""
    return floor_and(
        payload,
        count,
        lambda p: response.to(fnv1.RunFunctionRequest.FromString(p)).SerializeToString(),
    )


def floor_and(payload: bytes, count: int, path: Callable[[bytes], object]) -> Pairs:
    """The floor against another whole path from the request's bytes (bench/least.py's)."""
    return pairs(lambda: fnv1.RunFunctionRequest.FromString(payload), lambda: path(payload), count)


def floor_and_full_each(payloads: list[bytes]) -> Pairs:
    """As floor_and_full, with a different request for each pair (the first only warms up)."""
    serve_bytes(payloads[0])
    base, meas = [], []
    for index, payload in enumerate(payloads[1:]):
        floor = lambda p=payload: fnv1.RunFunctionRequest.FromString(p)  # noqa: E731
        full = lambda p=payload: serve_bytes(p)  # noqa: E731
        if index % 2:
            meas.append(sample(full))
            base.append(sample(floor))
        else:
            base.append(sample(floor))
            meas.append(sample(full))
    return Pairs(tuple(base), tuple(meas))


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]
