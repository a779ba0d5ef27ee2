"""Does a stream held by a memory wait in one process slow another process's work on the same GPU (session 20)?

The network communicator's calls park the caller's stream on ``wait DONE == 1`` while the proxy drives the network.
With two ranks on one GPU (the 1-GPU machine's correctness setting), rank B's copies of a call must run while rank
A's stream sits in such a wait. Here process A parks a stream on a flag in pinned host memory (no kernel), and
process B times small copies on its own stream, first while A is idle, then while A's stream waits, then again
after A was released: a same-GPU copy (the driver runs it on SMs), a device-to-host copy (copy engine) and an
empty kernel launch + sync. Medians of 200, microseconds.

    python docs/results/2026-12-01-s20/timeslice.py
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

N = 64 << 10
REPS = 200


def waiter(parked, go_on, done) -> None:
    import cupy as cp

    from hoccl_runtime.flags import FlagPool, MemOps

    cp.cuda.Device(0).use()
    pool = FlagPool(2)
    flag = pool.allocate()
    s = cp.cuda.Stream(non_blocking=True)
    go_on.wait()                     # phase 1: B measures with A idle
    go_on.clear()
    MemOps().wait_eq(flag, 1).enqueue(int(s.ptr))
    parked.set()                     # phase 2: A's stream waits on the host flag
    go_on.wait()
    flag.write(1)                    # release
    s.synchronize()
    parked.clear()
    done.set()                       # phase 3: A idle again
    pool.close()


def measure(label: str) -> dict:
    import cupy as cp

    s = cp.cuda.Stream(non_blocking=True)
    a = cp.zeros(N, cp.uint8)
    b = cp.empty_like(a)
    host = cp.cuda.alloc_pinned_memory(N)
    k = cp.ElementwiseKernel("", "", "", "noop")
    out = {}
    for name, op in (("d2d copy", lambda: b.data.copy_from_device_async(a.data, N, s)),
                     ("d2h copy", lambda: cp.cuda.runtime.memcpyAsync(host.ptr, a.data.ptr, N, 2, s.ptr)),
                     ("kernel", lambda: k(size=1, stream=s))):
        for _ in range(10):
            op()
            s.synchronize()
        ts = []
        for _ in range(REPS):
            t = time.perf_counter()
            op()
            s.synchronize()
            ts.append(time.perf_counter() - t)
        out[name] = statistics.median(ts) * 1e6
        out[name + " p90"] = sorted(ts)[int(0.9 * REPS)] * 1e6
    print(label + ": " + ", ".join(f"{n} {v:.1f}" for n, v in out.items()), flush=True)
    return out


def main() -> int:
    import cupy as cp

    ctx = mp.get_context("spawn")
    parked, go_on, done = ctx.Event(), ctx.Event(), ctx.Event()
    p = ctx.Process(target=waiter, args=(parked, go_on, done))
    p.start()
    cp.cuda.Device(0).use()
    time.sleep(3)  # A's context is up
    for rnd in range(2):
        measure(f"round {rnd} B alone, A's context idle")
    go_on.set()
    parked.wait(30)
    time.sleep(0.2)
    for rnd in range(2):
        measure(f"round {rnd} A's stream parked on a memory wait")
    go_on.set()
    done.wait(30)
    for rnd in range(2):
        measure(f"round {rnd} A released, idle again")
    p.join(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
