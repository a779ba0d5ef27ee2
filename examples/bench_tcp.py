"""TCP transport vs plain sockets between two processes on one host, same number of connections.

    python examples/bench_tcp.py [--sizes 2MiB,64MiB,1GiB] [--lanes 1,4,8] [--both]

Both sides run in separate processes; the receiver acknowledges each transfer once every byte is in
its buffer (the raw baseline over a control byte, the transport with a zero-byte write carrying an
immediate). Median of repeats; prints a table and the transport/raw ratio.

``--both``: both processes send ``size`` bytes to each other at once (an AllGather's or All-to-All's traffic
between two nodes), each starting at a shared barrier; a round's time is the slower side's, from the barrier to
the last of the peer's bytes in its buffer. GB/s is per direction.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hoccl_compiler import parse_size  # noqa: E402
from hoccl_runtime.net.transport import TcpTransport  # noqa: E402

REPEATS = 5


def _raw_receiver(q, lanes, size, rounds):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    q.put(srv.getsockname()[1])
    socks = [srv.accept()[0] for _ in range(lanes + 1)]
    ctrl, data = socks[0], socks[1:]
    buf = bytearray(size)
    view = memoryview(buf)
    part = -(-size // lanes)
    for _ in range(rounds):
        def take(i):
            lo, hi = min(i * part, size), min((i + 1) * part, size)
            got = lo
            while got < hi:
                got += data[i].recv_into(view[got:hi])
        threads = [threading.Thread(target=take, args=(i,)) for i in range(lanes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ctrl.sendall(b"k")
    for s in socks:
        s.close()


def _timed(receiver, lanes: int, size: int, setup, one_round) -> float:
    """Start ``receiver`` in another process, ``setup(address)`` the sender, then time REPEATS rounds
    of ``one_round(state, r)`` (after one warm-up round); returns the median seconds."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    child = ctx.Process(target=receiver, args=(q, lanes, size, REPEATS + 1))
    child.start()
    state, close = setup(q.get(timeout=30))
    times = []
    try:
        for r in range(REPEATS + 1):
            t0 = time.perf_counter()
            one_round(state, r)
            if r:
                times.append(time.perf_counter() - t0)
    finally:
        close()
        child.join(30)
    return statistics.median(times)


def raw(lanes: int, size: int) -> float:
    payload = memoryview(np.ones(size, dtype=np.uint8))
    part = -(-size // lanes)

    def setup(port):
        ctrl = socket.create_connection(("127.0.0.1", port))
        data = [socket.create_connection(("127.0.0.1", port)) for _ in range(lanes)]
        for s in data:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return (ctrl, data), lambda: [s.close() for s in (ctrl, *data)]

    def one_round(state, r):
        ctrl, data = state
        threads = [threading.Thread(target=data[i].sendall,
                                    args=(payload[min(i * part, size):min((i + 1) * part, size)],))
                   for i in range(lanes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert ctrl.recv(1) == b"k"

    return _timed(_raw_receiver, lanes, size, setup, one_round)


def _hoccl_receiver(q, lanes, size, rounds):
    rx = TcpTransport(lanes=lanes, session="bench")
    rx.register(np.zeros(size, dtype=np.uint8))  # regions first: the peer may write as soon as it connects
    ack = rx.register(np.zeros(1, dtype=np.uint8))
    q.put(rx.listen())
    conn = rx.accept(timeout_s=30)
    for _ in range(rounds):
        while not [c for c in conn.poll(timeout_s=60) if c.kind == "received"]:
            pass
        conn.write(ack, 0, 0, 0, 0, imm=1)
    time.sleep(0.5)
    rx.close()


def hoccl(lanes: int, size: int) -> float:
    def setup(address):
        tx = TcpTransport(lanes=lanes, session="bench")
        conn = tx.connect(address, timeout_s=30)
        region = tx.register(np.ones(size, dtype=np.uint8))
        tx.register(np.zeros(1, dtype=np.uint8))
        return (conn, region), tx.close

    def one_round(state, r):
        conn, region = state
        conn.write(region, 0, size, 0, 0, imm=r)
        while not [c for c in conn.poll(timeout_s=60) if c.kind == "received"]:
            pass

    return _timed(_hoccl_receiver, lanes, size, setup, one_round)


def chunked(lanes: int, size: int, chunk: int, inflight: int) -> float:
    """The transport under the node executor's protocol, without its copies: ``size`` bytes as writes of
    ``chunk`` bytes into a ring of ``inflight`` slots, each slot reused once the receiver credited it."""
    n = -(-size // chunk)

    def setup(address):
        tx = TcpTransport(lanes=lanes, session="bench")
        conn = tx.connect(address, timeout_s=30)
        region = tx.register(np.ones(chunk * inflight, dtype=np.uint8))
        tx.register(np.zeros(1, dtype=np.uint8))
        return (conn, region), tx.close

    def one_round(state, r):
        conn, region = state
        credited, k = 0, 0
        while credited < n:
            while k < n and k < credited + inflight:
                slot = (k % inflight) * chunk
                conn.write(region, slot, min(chunk, size - k * chunk), 0, slot, imm=k)
                k += 1
            credited += sum(c.kind == "received" for c in conn.poll(timeout_s=60))

    return _timed(_ChunkedReceiver(chunk, inflight), lanes, size, setup, one_round)


class _ChunkedReceiver:
    """The receiving process of :func:`chunked`: credits each chunk as it lands (a class, not a closure,
    so that the spawn context can pickle it)."""

    def __init__(self, chunk: int, inflight: int):
        self.chunk, self.inflight = chunk, inflight

    def __call__(self, q, lanes, size, rounds):
        rx = TcpTransport(lanes=lanes, session="bench")
        rx.register(np.zeros(self.chunk * self.inflight, dtype=np.uint8))
        credit = rx.register(np.zeros(1, dtype=np.uint8))
        q.put(rx.listen())
        conn = rx.accept(timeout_s=30)
        n = -(-size // self.chunk)
        for _ in range(rounds):
            got = 0
            while got < n:
                for c in conn.poll(timeout_s=60):
                    if c.kind == "received":
                        conn.write(credit, 0, 0, 0, 0, imm=c.imm)  # the slot is free again
                        got += 1
        time.sleep(0.5)
        rx.close()


def _both_side(args):
    """One of the two processes of :func:`both`: ``(kind, side, lanes, size, port_q, barrier, times_q)``."""
    kind, side, lanes, size, port_q, barrier, times_q = args
    out, inbox = np.ones(size, dtype=np.uint8), np.zeros(size, dtype=np.uint8)
    times = []
    if kind == "raw":
        if side == 0:
            srv = socket.socket()
            srv.bind(("127.0.0.1", 0))
            srv.listen(64)
            port_q.put(srv.getsockname()[1])
            socks = [srv.accept()[0] for _ in range(lanes)]
        else:
            port = port_q.get(timeout=30)
            socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(lanes)]
        for s in socks:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        part = -(-size // lanes)
        view, payload = memoryview(inbox), memoryview(out)

        def take(i):
            lo, hi = min(i * part, size), min((i + 1) * part, size)
            got = lo
            while got < hi:
                got += socks[i].recv_into(view[got:hi])

        def give(i):
            socks[i].sendall(payload[min(i * part, size):min((i + 1) * part, size)])

        for _ in range(REPEATS + 1):
            barrier.wait(30)
            t0 = time.perf_counter()
            threads = [threading.Thread(target=f, args=(i,)) for i in range(lanes) for f in (take, give)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            times.append(time.perf_counter() - t0)
        for s in socks:
            s.close()
    else:
        tr = TcpTransport(lanes=lanes, session="bench-both")
        tr.register(inbox)
        region = tr.register(out)
        if side == 0:
            port_q.put(tr.listen())
            conn = tr.accept(timeout_s=30)
        else:
            conn = tr.connect(port_q.get(timeout=30), timeout_s=30)
        for r in range(REPEATS + 1):
            barrier.wait(30)
            t0 = time.perf_counter()
            conn.write(region, 0, size, 0, 0, imm=r)
            got = sent = False
            while not (got and sent):
                for c in conn.poll(timeout_s=60):
                    got |= c.kind == "received"
                    sent |= c.kind != "received"
            times.append(time.perf_counter() - t0)
        barrier.wait(30)
        tr.close()
    times_q.put(times[1:])


def both(kind: str, lanes: int, size: int) -> float:
    """Median over rounds of the slower side's seconds when both processes send ``size`` bytes at once."""
    ctx = mp.get_context("spawn")
    port_q, times_q, barrier = ctx.Queue(), ctx.Queue(), ctx.Barrier(2)
    procs = [ctx.Process(target=_both_side, args=((kind, side, lanes, size, port_q, barrier, times_q),))
             for side in (0, 1)]
    for p in procs:
        p.start()
    a, b = times_q.get(timeout=120), times_q.get(timeout=120)
    for p in procs:
        p.join(30)
    return statistics.median(max(x, y) for x, y in zip(a, b))


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="2MiB,64MiB,1GiB")
    p.add_argument("--lanes", default="1,4,8")
    p.add_argument("--both", action="store_true", help="both processes send to each other at once")
    args = p.parse_args(argv)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    lanes_list = [int(x) for x in args.lanes.split(",")]
    print(f"host {os.uname().nodename}, {os.cpu_count()} cores, date {time.strftime('%Y-%m-%d')}")
    print("both directions at once, GB/s per direction" if args.both else "one direction")
    print(f"{'lanes':>5} {'size':>9} {'raw GB/s':>9} {'hoccl GB/s':>11} {'ratio':>6}")
    for lanes in lanes_list:
        for size in sizes:
            if args.both:
                t_raw, t_h = both("raw", lanes, size), both("hoccl", lanes, size)
            else:
                t_raw, t_h = raw(lanes, size), hoccl(lanes, size)
            print(f"{lanes:>5} {size >> 20:>5} MiB {size / t_raw / 1e9:9.2f} {size / t_h / 1e9:11.2f} "
                  f"{t_raw / t_h:6.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
