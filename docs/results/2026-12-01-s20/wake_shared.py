"""How long does a stream parked on a memory wait take to go on once its flag is written, when another process's
stream on the same GPU is parked too (session 20)? The network communicator parks the caller's stream on
``wait DONE == 1`` for every call; with two ranks on one GPU (the 1-GPU machine's correctness setting) both
processes' streams sit in such waits. Here process B parks a stream on ``wait GO == k`` followed by ``DONE = k``
(flags in pinned host memory), the host writes GO and times until it reads DONE. Three settings of process A:
idle; its stream parked on a wait of its own the whole time (released at the end); and parked then released each
round just before B's GO (as two ranks finishing a call one after the other). Medians and p90 of 200 rounds, us.

    python docs/results/2026-12-01-s20/wake_shared.py
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

REPS = 200


def other(cmd, ack) -> None:
    """Process A: on "park" it parks a stream on its flag; on "release" it writes the flag; "stop" ends."""
    import cupy as cp

    from hoccl_runtime.flags import FlagPool, MemOps

    cp.cuda.Device(0).use()
    pool = FlagPool(2)
    flag = pool.allocate()
    s = cp.cuda.Stream(non_blocking=True)
    k = 0
    while True:
        c = cmd.get()
        if c == "park":
            k += 1
            MemOps().wait_eq(flag, k).enqueue(int(s.ptr))
        elif c == "release":
            flag.write(k)
        elif c == "stop":
            flag.write(k)
            s.synchronize()
            pool.close()
            ack.put("bye")
            return
        ack.put(c)


def rounds(label, before=None) -> None:
    import cupy as cp

    from hoccl_runtime.flags import FlagPool, MemOps

    pool = FlagPool(2)
    go, done = pool.allocate(), pool.allocate()
    s = cp.cuda.Stream(non_blocking=True)
    ts = []
    for k in range(1, REPS + 1):
        MemOps().wait_eq(go, k).write(done, k).enqueue(int(s.ptr))
        time.sleep(200e-6)  # B's stream is parked
        if before:
            before()
        t = time.perf_counter()
        go.write(k)
        while done.read() != k:
            pass
        ts.append(time.perf_counter() - t)
    s.synchronize()
    pool.close()
    ts.sort()
    print(f"{label}: median {statistics.median(ts) * 1e6:.1f} us, p90 {ts[int(0.9 * REPS)] * 1e6:.1f}, "
          f"max {ts[-1] * 1e6:.1f}", flush=True)


def main() -> int:
    import cupy as cp

    ctx = mp.get_context("spawn")
    cmd, ack = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=other, args=(cmd, ack))
    p.start()
    cp.cuda.Device(0).use()
    time.sleep(3)

    def send(c):
        cmd.put(c)
        ack.get(timeout=30)

    for rnd in range(2):
        rounds(f"round {rnd}: A idle")
        send("park")
        rounds(f"round {rnd}: A's stream parked throughout")
        send("release")

        def park_release():
            send("release")
            send("park")

        send("park")
        rounds(f"round {rnd}: A released and parked again just before each GO", park_release)
        send("release")
    send("stop")
    p.join(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
