"""GPU-side cost of the send/recv handshake between two GPUs (one process, 2 GPUs; 2-GPU machine).

    python examples/handshake_latency.py

Both streams are held on a host flag while N calls are enqueued, then released, so what is timed
(CUDA events, median of 5) is the GPU side alone: per call, a copy of SIZE bytes GPU 0 -> GPU 1 with
the READY / DONE handshake of the communicator, in these variants:

* raw: the copies alone (no handshake; the floor)
* host: flags in pinned host memory, signals and waits by stream memory operations (the receiver's
  two batches as the communicator issues them)
* host-1batch: the same, the receiver's wait/write in one batch
* dev: each flag in the memory of the GPU that waits on it (a local wait); the other GPU signals with
  a 4-byte copy of a constant 1 from its memory (a copy engine; stream writes to a peer GPU's memory
  are refused since CUDA 13.1)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    import cupy as cp

    from hoccl_runtime._cuda import enable_peer_access
    from hoccl_runtime.flags import FlagPool, MemOps

    rt = cp.cuda.runtime
    enable_peer_access(0, 1)
    enable_peer_access(1, 0)
    n_calls, reps = 100, 5
    pool = FlagPool(8)
    go = pool.allocate()
    hr, hd = pool.allocate(), pool.allocate()

    class F:  # a flag by address
        def __init__(self, address):
            self.address = address

    with cp.cuda.Device(0):
        s0 = cp.cuda.Stream(non_blocking=True)
        flags0 = cp.zeros(64, cp.int32)
        one0 = cp.ones(1, cp.int32)
        src = cp.random.randint(0, 255, 8 << 20, dtype=cp.uint8)
        ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
    with cp.cuda.Device(1):
        s1 = cp.cuda.Stream(non_blocking=True)
        flags1 = cp.zeros(64, cp.int32)
        one1 = cp.ones(1, cp.int32)
        dst = cp.zeros(8 << 20, cp.uint8)
    dr, dd = F(flags0.data.ptr), F(flags1.data.ptr)  # READY waits on GPU 0, DONE waits on GPU 1

    def copy(d, s, n, stream):
        rt.memcpyAsync(d, s, n, 4, stream.ptr)

    gate = MemOps().wait_eq(go, 1)
    variants = {
        "host": (
            [MemOps().wait_eq(hr, 0).write(hr, 1), MemOps().wait_eq(hd, 1).write(hd, 0)],
            [MemOps().wait_eq(hr, 1).write(hr, 0)], [MemOps().wait_eq(hd, 0).write(hd, 1)]),
        "host-1batch": (
            [MemOps().wait_eq(hr, 0).write(hr, 1).wait_eq(hd, 1).write(hd, 0)],
            [MemOps().wait_eq(hr, 1).write(hr, 0)], [MemOps().wait_eq(hd, 0).write(hd, 1)]),
        "dev": (
            [("copy", dr.address, one1.data.ptr), MemOps().wait_eq(dd, 1).write(dd, 0)],
            [MemOps().wait_eq(dr, 1).write(dr, 0)], [("copy", dd.address, one0.data.ptr)]),
        "raw": ([], [], []),
    }

    def issue(ops, stream):
        for op in ops:
            if isinstance(op, tuple):
                copy(op[1], op[2], 4, stream)
            else:
                op.enqueue(stream.ptr)

    def run(name, size):
        recv_ops, pre, post = variants[name]
        times = []
        for _ in range(reps):
            go.write(0)
            with cp.cuda.Device(1):
                gate.enqueue(s1.ptr)
            with cp.cuda.Device(0):
                gate.enqueue(s0.ptr)
                ev0.record(s0)
            for _ in range(n_calls):
                with cp.cuda.Device(1):
                    issue(recv_ops, s1)
                with cp.cuda.Device(0):
                    issue(pre, s0)
                    if size:
                        copy(dst.data.ptr, src.data.ptr, size, s0)
                    issue(post, s0)
            with cp.cuda.Device(0):
                ev1.record(s0)
            go.write(1)
            s0.synchronize()
            s1.synchronize()
            times.append(cp.cuda.get_elapsed_time(ev0, ev1) * 1e3 / n_calls)
        return statistics.median(times)

    # correctness of the handshake itself: data landed, flags back at 0
    with cp.cuda.Device(1):
        dst.fill(0)
    run("dev", 2 << 20)
    assert (cp.asnumpy(dst[: 2 << 20]) == cp.asnumpy(src[: 2 << 20])).all(), "dev handshake: data did not land"
    assert int(flags0[0]) == 0 and int(flags1[0]) == 0, "dev handshake: flags not reset"
    rows = []
    for size in (0, 2 << 20, 8 << 20):
        for name in variants:
            if name == "raw" and not size:
                continue
            us = run(name, size)
            rows.append((name, size, us, size / us / 1e3 if size else float("nan")))
    print(f"{'variant':<12} {'size':>8} {'us/call':>8} {'GB/s':>7}")
    for name, size, us, gbps in rows:
        print(f"{name:<12} {size >> 20:>6} MiB {us:>8.2f} {gbps:>7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
