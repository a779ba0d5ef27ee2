"""Session 32: what a gated copy costs on the GPU alone (one process, nothing else running). A stream waits for a
counter flag in pinned host memory (cuStreamWaitValue32 GEQ), copies N bytes pinned host -> device (or device ->
pinned host), then writes a done counter; the host opens the gate and polls the done flag. Also the same copy issued
by the host right then (memcpyAsync + the done write, no gate). Prints the median host-seen time from gate open (or
issue) to done, us."""
import statistics
import time

import cupy as cp

from hoccl_runtime._cuda import host_mapped_alloc
from hoccl_runtime.flags import FlagPool, MemOps, reached
from hoccl_runtime._timer import fine_sleeps
import ctypes
import numpy as np


def main():
    rounds = 200
    pool = FlagPool(4)
    gate, done = pool.allocate(), pool.allocate()
    s = cp.cuda.Stream(non_blocking=True)
    dev = cp.empty(8 << 20, cp.uint8)
    ptr = host_mapped_alloc(8 << 20)
    print(f"{'bytes':>9}{'dir':>5}{'gated us':>10}{'issued us':>11}")
    c = 0
    with fine_sleeps():
        for n in (0, 64 << 10, 1 << 20, 8 << 20):
            for d in ("h2d", "d2h"):
                dst, src = (dev.data.ptr, ptr) if d == "h2d" else (ptr, dev.data.ptr)
                res = {"gated": [], "issued": []}
                for mode in ("gated", "issued"):
                    for i in range(rounds + 10):
                        c += 1
                        if mode == "gated":
                            MemOps().wait_geq(gate, c).enqueue(s.ptr)
                            if n:
                                cp.cuda.runtime.memcpyAsync(dst, src, n, 0, s.ptr)
                            MemOps().write(done, c).enqueue(s.ptr)
                            time.sleep(200e-6)  # the stream is waiting at the gate
                            t0 = time.perf_counter()
                            gate.write(c)
                        else:
                            time.sleep(200e-6)
                            t0 = time.perf_counter()
                            if n:
                                cp.cuda.runtime.memcpyAsync(dst, src, n, 0, s.ptr)
                            MemOps().write(done, c).enqueue(s.ptr)
                        while not reached(done, c):
                            pass
                        if i >= 10:
                            res[mode].append((time.perf_counter() - t0) * 1e6)
                        gate.write(c)
                print(f"{n:>9}{d:>5}{statistics.median(res['gated']):>10.1f}{statistics.median(res['issued']):>11.1f}")


if __name__ == "__main__":
    main()
