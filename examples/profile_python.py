"""The Python part of a communicator call, on any CPU: CUDA stubbed out, the partner's mailbox entry
written in advance (so no call waits), per-call microseconds of send, recv and all_gather.

    python examples/profile_python.py [--calls 20000] [--profile]

What it measures is the host time a call spends outside CUDA (the CUDA calls themselves cost
0.3-6 us each on the H200 host: docs/benchmarks.md). The prefill of the partner's entry is timed
alone and subtracted.
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hoccl_runtime import _cuda, comm  # noqa: E402
from hoccl_runtime.interop import DeviceBuffer  # noqa: E402
from hoccl_runtime.mailbox import HANDLE, NONE, SLOT, WINDOW  # noqa: E402
from hoccl_runtime.plans import CallKey  # noqa: E402


class StubRuntime:
    """cupy.cuda.runtime's calls used on the hot path, doing nothing."""

    def memcpyAsync(self, *a):  # noqa: N802 - CuPy's names
        pass

    def eventRecord(self, *a):  # noqa: N802
        pass

    def streamWaitEvent(self, *a):  # noqa: N802
        pass

    def getDevice(self):  # noqa: N802
        return 0

    def setDevice(self, d):  # noqa: N802
        pass

    def ipcGetMemHandle(self, ptr):  # noqa: N802
        return bytes(64)

    def ipcOpenMemHandle(self, handle):  # noqa: N802
        return 1 << 44

    def eventCreateWithFlags(self, flags):  # noqa: N802
        return 7

    def streamIsCapturing(self, stream):  # noqa: N802
        return 0

    def streamBeginCapture(self, stream, mode):  # noqa: N802
        pass

    def streamEndCapture(self, stream):  # noqa: N802
        return 11

    def graphInstantiate(self, graph):  # noqa: N802
        return 12

    def graphDestroy(self, graph):  # noqa: N802
        pass

    def graphLaunch(self, exe, stream):  # noqa: N802
        pass


class CupyLikeStream:
    """A stream as CuPy's are seen by as_stream: a known module, its handle read by attribute (a
    types.SimpleNamespace took as_stream's slow path on every call, about 0.45 us more)."""

    ptr = 12345


CupyLikeStream.__module__ = "cupy.cuda.stream"


class StubDriver:
    def batch_memop(self, stream, count, params):
        pass


class StubBindings:
    def cuMemGetAddressRange(self, ptr):  # noqa: N802
        return 0, ptr, 1 << 30


class Shared:
    """The shared segment's views, in process memory."""

    def __init__(self, world: int):
        self.flag_count = 2 * world * world * comm.MAX_QUEUES
        self.flags = np.zeros(self.flag_count, np.int32)
        self.mail = np.zeros(world * world * comm._PAIR_BYTES, np.uint8)
        self.words, self.mail_bytes = memoryview(self.mail).cast("q"), memoryview(self.mail)
        self.pids = np.zeros(world, np.int64)

    def flag_address(self, index: int) -> int:
        return 0x1000 + 4 * index


def make(rank: int, world: int, shared: Shared) -> comm.Communicator:
    """A communicator on the shared segment above (CUDA stubbed out by main), the machine described by a topology
    file (HOCCL_TOPOLOGY) instead of measured; the partners' eager staging "mapped" already."""
    import json
    import os
    import tempfile

    from hoccl_compiler.topology import make_topology

    topo = Path(tempfile.gettempdir()) / f"profile_python_topology_{os.getpid()}.json"
    topo.write_text(json.dumps(make_topology("h200x2", nodes=1, gpus_per_node=world, dma_queues=1).model_dump()))
    os.environ["HOCCL_TOPOLOGY"] = str(topo)
    os.environ["HOCCL_EAGER_BYTES"] = "0"  # rendezvous unless a case turns eager on
    try:
        c = comm.Communicator(rank, world, 0, store=None, timeout_s=10.0, shared=shared)
    finally:
        topo.unlink()
    c._watchdog.stop()  # the fault part's thread: no partner process here to watch
    c._launcher.capture = types.SimpleNamespace(ptr=999)  # calls repeated with the same buffers: graph launches
    c._launcher.side_stream = lambda slot: 1000 + slot
    c._eager.stage_in = {p: (3 << 40) + (p << 30) for p in range(world)}
    c._eager.stage_out = {p: (4 << 40) + (p << 30) for p in range(world)}
    return c


def prefill(me: comm.Communicator, partner: int, digest: int, has_handle: bool | str) -> None:
    """Write the partner's entry for my next call with it (``has_handle="window"``: a call on window 0 at
    offset 0), and its acknowledgement of my previous ones."""
    mb = me._mailbox
    words = mb.words
    seq = mb.seq[partner] + 1
    slot = mb.slot_in(partner, seq)
    words[slot + SLOT.digest], words[slot + SLOT.out_offset] = digest, 0
    words[slot + SLOT.out_kind] = WINDOW if has_handle == "window" else (HANDLE if has_handle else NONE)
    words[slot + SLOT.window] = 0
    words[slot + SLOT.seq] = seq
    words[mb.region_out[partner]] = seq  # the partner read all my entries


def prefill_ring(me: comm.Communicator, sender: int, digest: int) -> None:
    """The sender's size entry of my next eager receive from it, as the sender writes it."""
    mb = me._mailbox
    seq = mb.seq[sender] + 1
    ring = mb.pair(sender, me.rank) // 8 + comm._RING + 2 * (seq % comm.EAGER_SLOTS)
    mb.words[ring + 1] = digest
    mb.words[ring] = seq


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--profile", action="store_true", help="print a cProfile of the send loop")
    args = p.parse_args(argv)
    rt, drv = StubRuntime(), StubDriver()
    _cuda.cupy_runtime = lambda: rt
    _cuda.fast_driver = lambda: drv
    _cuda.driver = lambda: StubBindings()
    shared = Shared(2)
    c0, c1 = make(0, 2, shared), make(1, 2, shared)
    a, b = DeviceBuffer(1 << 40, 2 << 20, 0), DeviceBuffer(2 << 40, 4 << 20, 0)
    stream = CupyLikeStream()
    n = args.calls
    cases = {
        "send 2 MiB": (c0, 1, True, lambda: c0.send(a, 1, stream=stream), CallKey.sendrecv(0, 1, 2 << 20)),
        "recv 2 MiB": (c1, 0, False, lambda: c1.recv(a, 0, stream=stream), CallKey.sendrecv(0, 1, 2 << 20)),
        "all_gather 2 MiB": (c0, 1, True, lambda: c0.all_gather_into_tensor(b, a, stream=stream),
                             CallKey.allgather(4 << 20)),
        "all_gather 2 MiB peer": (c0, 1, True, lambda: c0.all_gather_into_tensor(b, a, stream=stream),
                                  CallKey.allgather(4 << 20)),
        "all_gather 2 MiB window": (c0, 1, "window", lambda: c0.all_gather_into_tensor(b, a, stream=stream),
                                    CallKey.allgather(4 << 20)),
        "send 2 MiB eager": (c0, 1, None, lambda: c0.send(a, 1, stream=stream), None),
        "recv 2 MiB eager": (c1, 0, None, lambda: c1.recv(a, 0, stream=stream), None),
    }
    print(f"{'call':24} {'us per call (Python only)':>26}")
    for name, (c, partner, handle, call, key) in cases.items():
        c._plans.clear()  # states remember whether they are eager, and their own blocks' routes
        c._by_id.clear()
        c.local_copies = "peer" if name.endswith("peer") else "sm"
        # a registered window around the output (register_window's result, without the store exchange)
        table = c._windows
        table.windows = [comm.Window(table, 0, b.ptr, b.nbytes, {partner: 5 << 40}, ())] if handle == "window" else []
        table.calls.clear()
        if key is None:  # eager: no mailbox entry to wait for; a receiver finds the sender's size entry
            c.eager_bytes = 4 << 20
            digest = c._state(CallKey.sendrecv(0, 1, 2 << 20)).digest

            def fill(c=c, partner=partner, digest=digest):
                if c.rank == 1:
                    prefill_ring(c, partner, digest)
        else:
            c.eager_bytes = 0
            digest = c._state(key).digest

            def fill(c=c, partner=partner, digest=digest, handle=handle):
                prefill(c, partner, digest, handle)
        fill()
        call()  # first call: plan compiled, launch list built
        t0 = time.perf_counter()
        for _ in range(n):
            fill()
        t_prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(n):
            fill()
            call()
        total = time.perf_counter() - t0
        print(f"{name:24} {(total - t_prefill) / n * 1e6:26.2f}")
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        c0.eager_bytes = 0
        c0._plans.clear()
        c0._by_id.clear()
        digest = c0._state(CallKey.sendrecv(0, 1, 2 << 20)).digest
        prof.enable()
        for _ in range(2000):
            prefill(c0, 1, digest, True)
            c0.send(a, 1, stream=stream)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
