"""Session 48 (the CPU VM, no GPU): what the native engine's gates save, on the host alone.

Two TCP transports on the native engine over loopback, one process; a "GPU" process that spins on shared-memory
int32 flags stands in for the copy engines (it sets a flag, or notes when one was set, on the host's monotonic clock,
which every process shares). Per mode, ROUNDS writes of BYTES, medians of:

* send: the "GPU" sets a write's staging-done flag at t0; the write is in at the receiver (its completion polled
  by a loop that waits on the engine, as the proxy's does) at t1. ``loop``: a Python loop polls the flag every
  10 us (as the proxy's, HOCCL_NET_POLL_US) and posts the write when it shows; ``watcher``: the write was posted
  ahead with ``after=`` (HOCCL_NET_SEND_GATES).
* land: the write is posted at t0; the "GPU" sees the landing gate open at t1. ``loop``: the receiver's loop takes
  the completion (waiting on the engine) and writes the gate; ``engine``: the gate was armed (HOCCL_NET_LAND_GATES)
  and the receiving thread stores it.

The modes run in turn within each round. Usage: python gatelat.py [ROUNDS] [BYTES]
"""
import multiprocessing as mp
import statistics
import sys
import time

import numpy as np

from hoccl_runtime.net.transport import TcpTransport

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
BYTES = int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20
SLOTS = 4  # flags: 0 the command, 1 its answer (a time in ns), 2 the flag the modes use


def gpu(name):
    """The stand-in GPU: on command 1 set flag 2 to the round's count and answer the time; on command 2 spin until
    flag 2 reaches the count and answer the time it saw it."""
    from multiprocessing import shared_memory
    shm = shared_memory.SharedMemory(name=name)
    f = np.ndarray(SLOTS, np.int64, shm.buf)
    while True:
        cmd = f[0]
        if cmd == 0:
            time.sleep(20e-6)
            continue
        if cmd < 0:
            break
        want = f[3]
        if cmd == 1:
            time.sleep(200e-6)
            t = time.perf_counter_ns()
            f[2] = want
        else:
            while f[2] < want:
                pass
            t = time.perf_counter_ns()
        f[1] = t
        f[0] = 0
    del f
    shm.close()


def main():
    from multiprocessing import shared_memory
    shm = shared_memory.SharedMemory(create=True, size=8 * SLOTS)
    f = np.ndarray(SLOTS, np.int64, shm.buf)
    f[:] = 0
    proc = mp.get_context("spawn").Process(target=gpu, args=(shm.name,))
    proc.start()
    rx = TcpTransport(lanes=2, session="s", engine="native")
    tx = TcpTransport(lanes=2, session="s", engine="native")
    addr = rx.listen()
    import threading
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("c", rx.accept(timeout_s=10)))
    t.start()
    c_tx = tx.connect(addr, timeout_s=10)
    t.join()
    c_rx = box["c"]
    src, dst = np.ones(BYTES, np.uint8), np.zeros(BYTES, np.uint8)
    local, remote = tx.register(src), rx.register(dst)
    flag_addr = int(f.ctypes.data) + 16  # f[2], int64: its low int32 word is what the engine reads and stores

    def received():
        while True:
            c_rx.wait(1.0)
            got = [c for c in c_rx.poll() if c.kind == "received"]
            if got:
                return time.perf_counter_ns()

    def command(cmd, count):
        f[3] = count
        f[0] = cmd

    def answer():
        while f[0] != 0:
            pass
        return int(f[1])

    out = {}
    modes = ("send-loop", "send-watcher", "land-loop", "land-engine")
    for count, mode in enumerate([m for _ in range(ROUNDS) for m in modes], 1):  # the modes in turn each round
        c_tx.poll()
        if mode.startswith("send"):
            if mode == "send-watcher":
                c_tx.write(local, 0, BYTES, remote.id, 0, imm=count, after=(flag_addr, count))
            command(1, count)
            if mode == "send-loop":
                while f[2] < count:
                    time.sleep(10e-6)
                c_tx.write(local, 0, BYTES, remote.id, 0, imm=count)
            t1 = received()
            out.setdefault(mode, []).append((t1 - answer()) / 1e3)
        else:
            if mode == "land-engine":
                c_rx.arm([(count, remote.id, 0, BYTES, flag_addr, count)])
            command(2, count)
            t0 = time.perf_counter_ns()
            c_tx.write(local, 0, BYTES, remote.id, 0, imm=count)
            received()
            if mode == "land-loop":
                f[2] = count
            out.setdefault(mode, []).append((answer() - t0) / 1e3)
    f[0] = -1
    proc.join(5)
    for mode, lat in out.items():
        q = statistics.quantiles(lat, n=10)
        print(f"{mode:13s} {BYTES:>8d} B  p10 {q[0]:7.1f}  p50 {statistics.median(lat):7.1f}  p90 {q[-1]:7.1f} us")
    c_tx.close()
    c_rx.close()
    tx.close()
    rx.close()
    f = None  # noqa: F841 - the view goes before the shared memory closes
    shm.close()
    shm.unlink()


if __name__ == "__main__":
    main()
