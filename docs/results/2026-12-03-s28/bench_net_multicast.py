"""Session 28: AllGather on the GPU network executor, 2 nodes of 2 ranks over TCP (loopback, 2 lanes), every rank on
the one GPU, multicast (each block across the network once per node) against unicast (once per destination GPU),
alternating, fresh random data each size, outputs poisoned and checked after every run; wall time of ex.run on
both nodes (threads), median of 5 after one warm-up."""

from __future__ import annotations

import statistics
import sys
import threading
import time

import cupy as cp
import numpy as np

sys.path.insert(0, "tests/support")
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402
from hoccl_runtime.net.executor import GpuNodeExecutor  # noqa: E402


def run(plan, bufs, reps):
    transports = [GpuNodeExecutor.make_transport(plan, n, lanes=2, secret=b"bench") for n in range(2)]
    addresses = {n: t.listen() for n, t in enumerate(transports)}
    times: list[float] = []
    barrier = threading.Barrier(2)
    errors = []

    def node(n):
        try:
            cp.cuda.Device(0).use()
            mine = {r: b for r, b in bufs.items() if r // 2 == n}
            ex = GpuNodeExecutor(plan, n, mine, transports[n], timeout_s=120)
            ex.connect(addresses)
            for _ in range(reps):
                for _, o in mine.values():
                    o.fill(0xA5)
                cp.cuda.Device(0).synchronize()
                barrier.wait()
                t0 = time.perf_counter()
                ex.run()
                cp.cuda.Device(0).synchronize()
                barrier.wait()
                if n == 0:
                    times.append(time.perf_counter() - t0)
            ex.close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
            barrier.abort()

    th = [threading.Thread(target=node, args=(n,)) for n in range(2)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    for t in transports:
        t.close()
    if errors:
        raise errors[0]
    return times


def main():
    topo = make_topology("h200x2", nodes=2, gpus_per_node=2)
    rows = []
    for size in (16 << 20, 64 << 20, 256 << 20):
        data = {mc: [] for mc in (True, False)}
        plans = {mc: compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=size),
                                  CompileOptions(chunk_bytes=4 << 20, baselines=False, multicast=mc)) for mc in data}
        block = size // 4
        with cp.cuda.Device(0):
            ins = [cp.random.randint(0, 256, block, dtype=cp.uint8) for _ in range(4)]
            outs = [cp.empty(size, cp.uint8) for _ in range(4)]
        want = cp.concatenate(ins)
        bufs = {r: (ins[r], outs[r]) for r in range(4)}
        for rnd in range(3):
            for mc in (True, False) if rnd % 2 == 0 else (False, True):
                t = run(plans[mc], bufs, 2)
                assert all(bool((o == want).all()) for o in outs), (size, mc)
                data[mc] += t[1:]  # the first run of each connection set warms up
        m, u = statistics.median(data[True]), statistics.median(data[False])
        rows.append((size, m, u))
    print("allgather, 2 nodes x 2 ranks on one GPU over TCP (2 lanes), 4 MiB chunks, median of 3, ms")
    print(f"{'size':>9} {'multicast':>10} {'unicast':>10} {'uni/multi':>9}")
    for size, m, u in rows:
        print(f"{size >> 20:>5} MiB {m * 1e3:>10.1f} {u * 1e3:>10.1f} {u / m:>9.2f}")


if __name__ == "__main__":
    main()
