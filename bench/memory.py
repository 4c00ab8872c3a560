"""The pod's memory, by fleet size: what docs/operations.md sizes the function's limits from.

`python -m bench.memory 1000,5000,10000,20000` starts the real server (`function`, as shipped:
four workers, the 64 MiB receive limit) and, per size, sends `make bench`'s steady InstanceType
request and a GPUClass's four at a time, three rounds each after one warm-up round, while
sampling the resident memory of the server and its workers every 5 ms. The class is the largest
one: it reads every node's state (no `vmNodeSelector`, virt-handler on every node). It prints
each request's size, the pod's peak for each, and what the pod holds once idle (workers hand
back what requests took after two seconds, and keep what they read of each node). Nothing here
is asserted.
"""

from __future__ import annotations

import sys
import threading
import time

from bench import cluster, e2e, requests

MIB = 2**20
CONCURRENT, ROUNDS = e2e.WORKERS, 3


def resident_mib(pids: list[int]) -> float:
    return sum(e2e.process_memory(pid)[0] for pid in pids)


def peak_mib(server: e2e.Server, payload: bytes) -> float:
    """The pod's largest resident set while it serves `payload` CONCURRENT at a time."""
    pids, peak, done = server.processes(), [0.0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], resident_mib(pids))
            time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    method = server.channel.unary_unary(e2e.METHOD)
    try:
        for _ in range(ROUNDS):
            for call in [method.future(payload, timeout=600) for _ in range(CONCURRENT)]:
                call.result()
    finally:
        done.set()
        sampler.join()
    return peak[0]


def main(sizes: list[int]) -> None:
    for size in sizes:
        built = requests.build_all(cluster.build(size))
        pool = built["instancetype"].payload
        gpu_class = built["gpuclass"].payload
        with e2e.ours() as server:
            e2e.warm(server, pool)
            pools, classes = peak_mib(server, pool), peak_mib(server, gpu_class)
            time.sleep(5)  # idle: every process has handed back what the requests took
            at_rest = resident_mib(server.processes())
        print(
            f"{size:,} nodes: requests {len(pool) / MIB:.1f} MiB (a pool) and "
            f"{len(gpu_class) / MIB:.1f} MiB (a class); the pod's peak, {CONCURRENT} at once: "
            f"{pools:,.0f} MiB (pools), {classes:,.0f} MiB (classes); at rest {at_rest:,.0f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main([int(n) for n in (sys.argv[1] if len(sys.argv) > 1 else "1000,5000").split(",")])
