"""The GPU network executor's driving half (GatedNodeExecutor) on host memory: a thread stands for each node's
copy streams (waits for each gate, copies, writes the done counter, then the stream's end counter), so the
protocol between the driving loop and the copies is checked without a GPU."""

from __future__ import annotations

import threading
from collections import deque

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions


def _fake_gpu(ex, prepared, node, inp, out, stop):
    """The copy streams of one node, in one thread: each prepared copy (in slot-use order) once its gate opened."""
    from hoccl_runtime.flags import reached

    chunk, slots = ex.chunk, ex.slots
    work = []  # (gate, done, count, nbytes, copy)
    for (ubar, slot), uses in prepared.send.items():
        for i, (go, staged, c, nb) in enumerate(uses):
            work.append((go, staged, c, nb, ("send", slot, i)))
    for (vbar, slot), uses in prepared.recv.items():
        for i, (arrived, landed, c, nb) in enumerate(uses):
            work.append((arrived, landed, c, nb, ("recv", slot, i)))
    pending = list(work)
    while pending and not stop.is_set():
        for item in list(pending):
            gate, done, c, nb, (kind, slot, i) = item
            if not reached(gate, c):
                continue
            off = (i * slots + slot) * chunk  # this test's flows: chunk k uses slot k % slots, use k // slots
            if kind == "send":
                ex.send_ring[node][slot * chunk:slot * chunk + nb] = inp[off:off + nb]
            else:
                out[off:off + nb] = ex.recv_ring[node][slot * chunk:slot * chunk + nb]
            done.write(c)
            pending.remove(item)
    for flag, c in prepared.ends:
        flag.write(c)


def _prepared(ex, plan, node, pool):
    """What GpuNodeExecutor.prepare records for a one-GPU node: per slot use, its gate and done counter."""
    from hoccl_runtime.flags import Flag
    from hoccl_runtime.net.gpu import PreparedRun

    prepared = PreparedRun(plan)
    words = iter(range(1, pool.capacity))
    nbytes = plan.ranks.input_bytes[node] if node == 0 else plan.ranks.output_bytes[node]
    side = prepared.send if node == 0 else prepared.recv
    chunks = -(-nbytes // ex.chunk)
    for k in range(chunks):
        slot = k % ex.slots
        uses = side.setdefault((node, slot), deque())
        if not uses:
            gate, done = Flag(pool, next(words)), Flag(pool, next(words))
        else:
            gate, done = uses[-1][0], uses[-1][1]
        uses.append((gate, done, k // ex.slots + 1, min(ex.chunk, nbytes - k * ex.chunk)))
    prepared.ends.append((Flag(pool, next(words)), 1))
    return prepared


@pytest.mark.usefixtures("whole_rings")
def test_release_lets_the_stream_go_once_the_copies_are_through_while_writes_still_leave():
    """``release`` is called while the run's last network write has not left (its "sent" completion held back
    until then), and the run still ends with every byte in place on the receiver."""
    from hoccl_runtime.flags import FlagPool
    from hoccl_runtime.net.gpu import GatedNodeExecutor
    from hoccl_runtime.net.host import HostNodeExecutor

    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    nbytes = 3 * 1024 + 100  # 4 chunks: the ring holds them all (a slot's reuse would wait for its write to leave)
    plan = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, nbytes),)),
                        CompileOptions(chunk_bytes=1024, baselines=False))
    data = np.random.default_rng(7).integers(0, 256, nbytes, dtype=np.uint8)
    got = np.full(nbytes, 0xA5, np.uint8)
    transports = [HostNodeExecutor.make_transport(plan, n, lanes=2, secret=b"job") for n in range(2)]
    placeholder = {n: {n: (np.zeros(1, np.uint8), np.zeros(1, np.uint8))} for n in range(2)}
    execs = [GatedNodeExecutor(plan, n, placeholder[n], transports[n], slots=4, timeout_s=10, reuse=True,
                               _check_sizes=False) for n in range(2)]
    addresses = {n: t.listen() for n, t in enumerate(transports)}
    released = threading.Event()
    left_at_release = []  # the sender's writes not seen to leave when its stream was let go

    def release():
        left_at_release.append(execs[0]._run.sends_left)
        released.set()
    errors, stop = [], threading.Event()

    def node(n):
        try:
            ex = execs[n]
            ex.connect(addresses)
            if n == 0:  # the sender's "sent" completions wait until the stream was let go
                conn = ex.conns[1]
                poll = conn.poll

                def held_poll(timeout_s=0.0, max_items=64):
                    items = poll(timeout_s, max_items)
                    if not released.is_set():
                        late = [c for c in items if c.kind == "sent" and c.nbytes]
                        keep = [c for c in items if not (c.kind == "sent" and c.nbytes)]
                        stash.extend(late)
                        return keep
                    out = stash + items
                    stash.clear()
                    return out

                stash = []
                conn.poll = held_poll
            pool = FlagPool(64, memory=np.zeros(64, np.int32))
            prepared = _prepared(ex, plan, n, pool)
            gpu = threading.Thread(target=_fake_gpu, args=(ex, prepared, n, data, got, stop))
            gpu.start()
            ex.run(prepared=prepared, release=release if n == 0 else None)
            gpu.join(10)
            ex.leave()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            errors.append((n, exc))
            stop.set()

    threads = [threading.Thread(target=node, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for t in transports:
        t.close()
    assert not errors, errors
    assert released.is_set()
    assert left_at_release == [4]  # every write's "sent" was held back: the copies alone let the stream go
    assert np.array_equal(got, data)


def test_a_failed_runs_gates_open_only_after_its_connections_stopped_opening_and_sending_on_their_own():
    """``release`` (a run that will not be driven to its end) first disarms the landing gates its connections armed
    and drops the writes they hold until a staging copy shows done (HOCCL_NET_LAND_GATES / SEND_GATES), and only then
    opens every gate: a gate the engine opened later with an older count would shut it again, and a write let go by
    a count the opened copies reach would send what they moved."""
    from hoccl_runtime.flags import Flag, FlagPool
    from hoccl_runtime.net.gpu import GatedNodeExecutor, PreparedRun

    pool = FlagPool(8, memory=np.zeros(8, np.int32))
    gate, done = Flag(pool, 1), Flag(pool, 2)
    prepared = PreparedRun(None)
    prepared.recv[(0, 0)] = deque([(gate, done, 1, 64), (gate, done, 2, 64)])
    seen = []

    class Conn:
        def arm(self, gates):
            seen.append(("arm", list(gates), gate.read()))
            return True

        def cancel_after(self):
            seen.append(("cancel", gate.read()))

    ex = GatedNodeExecutor.__new__(GatedNodeExecutor)
    ex.conns, ex._armed = {1: Conn(), 2: Conn()}, {1}
    ex.release(prepared)
    assert seen == [("arm", [], 0), ("cancel", 0), ("cancel", 0)]  # node 1's gates disarmed, both nodes' writes
    assert gate.read() == 2 and not ex._armed                         # dropped, then the gate opened to its last
