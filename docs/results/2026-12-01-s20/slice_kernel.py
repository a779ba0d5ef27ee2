"""Two processes on one GPU (session 20): does a context whose stream ran a kernel and then parked on a memory wait
hold the GPU's time slice, so that the other process's kernel waits? Process A, per round: idle, or park a stream on
a flag in pinned host memory, or launch a tiny kernel and then park the same stream. Process B times a tiny kernel
(launch + synchronize) and a small same-GPU copy (the driver runs it on SMs) right after. 100 rounds each, us.

    python docs/results/2026-12-01-s20/slice_kernel.py
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

REPS = 100


def other(cmd, ack) -> None:
    import cupy as cp

    from hoccl_runtime.flags import FlagPool, MemOps

    cp.cuda.Device(0).use()
    pool = FlagPool(2)
    flag = pool.allocate()
    s = cp.cuda.Stream(non_blocking=True)
    noop = cp.ElementwiseKernel("", "", "", "noop_a")
    x = cp.zeros(1 << 16, cp.uint8)
    k = 0
    while True:
        c = cmd.get()
        if c in ("park", "kernel+park", "copy+park"):
            if c == "kernel+park":
                noop(size=1, stream=s)
            elif c == "copy+park":
                y = x.copy()  # noqa: F841  (on the null stream of A's context)
            k += 1
            MemOps().wait_eq(flag, k).enqueue(int(s.ptr))
            time.sleep(1e-3)
        elif c == "release":
            flag.write(k)
            s.synchronize()
        elif c == "stop":
            flag.write(k)
            s.synchronize()
            pool.close()
            ack.put("bye")
            return
        ack.put(c)


def main() -> int:
    import cupy as cp

    ctx = mp.get_context("spawn")
    cmd, ack = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=other, args=(cmd, ack))
    p.start()
    cp.cuda.Device(0).use()
    s = cp.cuda.Stream(non_blocking=True)
    noop = cp.ElementwiseKernel("", "", "", "noop_b")
    a = cp.zeros(1 << 16, cp.uint8)
    b = cp.empty_like(a)
    for _ in range(10):
        noop(size=1, stream=s)
        b.data.copy_from_device_async(a.data, a.nbytes, s)
    s.synchronize()
    time.sleep(3)

    def send(c):
        cmd.put(c)
        ack.get(timeout=30)

    for rnd in range(2):
        for mode in ("idle", "park", "kernel+park", "copy+park"):
            res = {"kernel": [], "d2d copy": []}
            for _ in range(REPS):
                for what in res:
                    if mode != "idle":
                        send(mode)
                    t = time.perf_counter()
                    if what == "kernel":
                        noop(size=1, stream=s)
                    else:
                        b.data.copy_from_device_async(a.data, a.nbytes, s)
                    s.synchronize()
                    res[what].append(time.perf_counter() - t)
                    if mode != "idle":
                        send("release")
            print(f"round {rnd}, A {mode:>12}: " + ", ".join(
                f"{w} median {statistics.median(v) * 1e6:.0f} us p90 {sorted(v)[int(0.9 * REPS)] * 1e6:.0f}"
                for w, v in res.items()), flush=True)
    send("stop")
    p.join(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
