"""Does a stream wait's wake-up cost grow with how long it waited? (session 18, for the cost model's call cost)

    python docs/results/2026-12-01-s18/wake.py [--json FILE]

On one GPU, two streams play the runtime's rendezvous: stream 1 copies n bytes and writes flag A; stream 2 waits
for A and writes flag B; stream 1 waits for B before its next copy. Per round trip, the time above the same copies
back to back is the handshake's cost, measured (CUDA events on stream 1, median of 5 repeats of 20 iterations) as a
function of n, i.e. of how long stream 2's wait was pending. Flags in pinned mapped host memory (as the runtime's
FlagPool) and in device memory; copies device to device (same GPU) and device to host. For each, the same ping-pong
with CUDA events (cudaStreamWaitEvent) instead of memory waits. Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

ITERS, REPEATS = 20, 5


def main(argv=None) -> int:
    import cupy as cp

    from hoccl_runtime._cuda import host_free, host_mapped_alloc
    from hoccl_runtime.flags import Flag, FlagPool, MemOps

    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    cp.cuda.Device(0).use()
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    host_pool = FlagPool(16)

    class DevicePool:  # flags in device memory: Flag only needs .base
        def __init__(self):
            self.arr = cp.zeros(16, cp.int32)
            self.base = self.arr.data.ptr

    dev_pool = DevicePool()
    big = 1 << 30
    src, dst = cp.empty(big, cp.uint8), cp.empty(big, cp.uint8)
    src[:] = 1
    hbuf = host_mapped_alloc(256 << 20)

    def copy(kind, n, s):
        if kind == "d2d":
            cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, n, 3, s.ptr)
        else:
            cp.cuda.runtime.memcpyAsync(hbuf, src.data.ptr, n, 2, s.ptr)

    def timed(body):
        out = []
        for _ in range(REPEATS):
            cp.cuda.Device(0).synchronize()
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(s1)
            body()
            e1.record(s1)
            e1.synchronize()
            cp.cuda.Device(0).synchronize()
            out.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3 / ITERS)
        return statistics.median(out)

    counter = {"v": 0}

    def pingpong_memops(kind, n, pool):
        a, b = Flag(pool, 0), Flag(pool, 1)

        def body():
            for _ in range(ITERS):
                counter["v"] += 1
                v = counter["v"]
                copy(kind, n, s1)
                MemOps().write(a, v).enqueue(s1.ptr)
                MemOps().wait_geq(a, v).write(b, v).enqueue(s2.ptr)
                MemOps().wait_geq(b, v).enqueue(s1.ptr)
        return body

    def pingpong_events(kind, n):
        def body():
            for _ in range(ITERS):
                copy(kind, n, s1)
                ea = cp.cuda.Event(disable_timing=True)
                ea.record(s1)
                s2.wait_event(ea)
                eb = cp.cuda.Event(disable_timing=True)
                eb.record(s2)
                s1.wait_event(eb)
        return body

    def alone(kind, n):
        def body():
            for _ in range(ITERS):
                copy(kind, n, s1)
        return body

    rows = []
    sizes = {"d2d": [1 << k for k in range(20, 31)], "d2h": [1 << k for k in range(20, 29)]}
    for kind, ns in sizes.items():
        for n in ns:
            base = timed(alone(kind, n))
            r = dict(copy=kind, bytes=n, copy_us=base)
            for name, body in (("host_flags", pingpong_memops(kind, n, host_pool)),
                               ("device_flags", pingpong_memops(kind, n, dev_pool)),
                               ("events", pingpong_events(kind, n))):
                r[name + "_us"] = timed(body) - base
            rows.append(r)
            print(r, flush=True)
    host_free(hbuf)
    print("\nhandshake cost per round trip above the copies alone (us), by how long the copy took")
    print(f"{'copy':>5} {'bytes':>10} {'copy us':>9} {'host flags':>11} {'device flags':>13} {'events':>8}")
    for r in rows:
        print(f"{r['copy']:>5} {r['bytes'] >> 20:>7} MiB {r['copy_us']:9.1f} {r['host_flags_us']:11.2f} "
              f"{r['device_flags_us']:13.2f} {r['events_us']:8.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
