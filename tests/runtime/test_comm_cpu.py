"""The intra-node communicator end to end on a CPU: ranks as threads of one process, CUDA faked in host
memory (tests/support/fake_cuda.py: copies are memmoves, a stream's flag waits block its caller). It runs the
real mailbox, launch lists (compile_launch), READY/DONE protocol and shared host memory."""

from __future__ import annotations

from pathlib import Path

import fake_cuda
import numpy as np
import pytest
from fake_cuda import dev  # arrays as device buffers, kept alive until the test's fake streams drained

from hoccl_runtime.errors import HocclError, PlanError
from hoccl_runtime.launch import Memcpy


def ranks(monkeypatch, world, body, **options):
    """body(comm, rank) on every rank in threads; {rank: result or exception}."""
    fake_cuda.install(monkeypatch)
    from hoccl_runtime.comm import Communicator

    store = fake_cuda.Store()
    results = fake_cuda.run_ranks(world, lambda r: Communicator(r, world, r, store, timeout_s=20, **options), body)
    for r in range(world):
        assert not isinstance(results.get(r), Exception), f"rank {r}: {results.get(r)!r}"
    return results


def data(rank: int, call: int, n: int) -> np.ndarray:
    return np.random.default_rng([rank, call, 3]).integers(0, 256, n, dtype=np.uint8)


@pytest.mark.parametrize("world", [2, 3, 8])
@pytest.mark.parametrize("local_copies", ["sm", "peer"])
def test_every_collective_twice(monkeypatch, world, local_copies):
    def body(comm, r):
        bad = []
        for rep in range(2):  # the second round reuses plans, launch lists and mappings
            for n in (1, 4099):
                call = rep * 100 + n
                inp, out = data(r, call, n), np.full(n * world, 0xA5, np.uint8)
                comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
                if not np.array_equal(out, np.concatenate([data(p, call, n) for p in range(world)])):
                    bad.append(f"all_gather {n}")
                inp = data(r, call + 1, n * world)
                out = np.full(n * world, 0xA5, np.uint8)
                comm.all_to_all_single(dev(out, r), dev(inp, r), stream=7)
                want = np.concatenate([data(p, call + 1, n * world)[r * n:(r + 1) * n] for p in range(world)])
                if not np.array_equal(out, want):
                    bad.append(f"all_to_all {n}")
                t = data(r, call + 2, n) if r == world - 1 else np.full(n, 0xA5, np.uint8)
                comm.broadcast(dev(t, r), world - 1, stream=7)
                if not np.array_equal(t, data(world - 1, call + 2, n)):
                    bad.append(f"broadcast {n}")
                src = data(0, call + 3, n * world)
                out = np.full(n, 0xA5, np.uint8)
                comm.scatter(dev(out, r), dev(src, r) if r == 0 else None, root=0, stream=7)
                if not np.array_equal(out, src[r * n:(r + 1) * n]):
                    bad.append(f"scatter {n}")
                inp = data(r, call + 4, n)
                out = np.full(n * world, 0xA5, np.uint8)
                comm.gather(dev(inp, r), dev(out, r) if r == 0 else None, root=0, stream=7)
                if r == 0 and not np.array_equal(out, np.concatenate([data(p, call + 4, n) for p in range(world)])):
                    bad.append(f"gather {n}")
                nxt, prv = (r + 1) % world, (r - 1) % world
                inp, out = data(r, call + 5, n), np.full(n, 0xA5, np.uint8)
                comm.batch_isend_irecv([("send", dev(inp, r), nxt), ("recv", dev(out, r), prv)], stream=7)
                if not np.array_equal(out, data(prv, call + 5, n)):
                    bad.append(f"batch_isend_irecv {n}")
        return bad

    results = ranks(monkeypatch, world, body, local_copies=local_copies)
    assert all(results[r] == [] for r in range(world)), results


def test_execute_an_in_place_plan_with_or_without_its_input(monkeypatch):
    """comm.execute of a plan compiled in place: the input left out, or given as the output's own block; any
    other overlapping input is refused."""
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.errors import BufferError

    n = 3001
    plan = compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind="allgather", size_bytes=2 * n,
                                                                         in_place=True),
                        CompileOptions(chunk_bytes=1 << 30, baselines=False))

    def body(comm, r):
        bad = []
        for call, given in enumerate((False, True)):
            out = np.full(2 * n, 0xA5, np.uint8)
            out[r * n:(r + 1) * n] = data(r, call, n)
            comm.execute(plan, dev(out[r * n:(r + 1) * n], r) if given else None, dev(out, r), stream=7)
            comm.synchronize()
            if not np.array_equal(out, np.concatenate([data(p, call, n) for p in range(2)])):
                bad.append(call)
        out = np.zeros(2 * n, np.uint8)
        with pytest.raises(BufferError, match=f"at offset {(1 - r) * n}; in place, pass the output's bytes"):
            comm.execute(plan, dev(out[(1 - r) * n:(2 - r) * n], r), dev(out, r), stream=7)
        return bad

    assert ranks(monkeypatch, 2, body) == {0: [], 1: []}


def test_local_copies_setting_is_checked_and_must_agree(monkeypatch):
    """HOCCL_LOCAL_COPIES takes sm or peer; ranks set up differently meet a PlanError, not wrong data."""
    fake_cuda.install(monkeypatch)
    from hoccl_runtime.comm import Communicator

    monkeypatch.setenv("HOCCL_LOCAL_COPIES", "kernel")
    with pytest.raises(HocclError, match="HOCCL_LOCAL_COPIES='kernel': give one of sm, peer"):
        Communicator(0, 2, 0, fake_cuda.Store())
    with pytest.raises(HocclError, match="local_copies='ce': give one of sm, peer"):
        Communicator(0, 2, 0, fake_cuda.Store(), local_copies="ce")
    from hoccl_runtime.executor import Executor

    with pytest.raises(HocclError, match="HOCCL_LOCAL_COPIES='kernel': give one of sm, peer"):
        Executor()
    with pytest.raises(HocclError, match="local_copies='ce': give one of sm, peer"):
        Executor(local_copies="ce")
    monkeypatch.delenv("HOCCL_LOCAL_COPIES")
    store = fake_cuda.Store()

    def body(comm, r):
        inp, out = data(r, 0, 10), np.zeros(20, np.uint8)
        with pytest.raises(PlanError, match="another collective"):
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        return True

    got = fake_cuda.run_ranks(2, lambda r: Communicator(r, 2, r, store, timeout_s=20,
                                                        local_copies=("sm", "peer")[r]), body)
    assert got == {0: True, 1: True}


def test_peer_mode_keeps_send_recv_off_the_eager_path(monkeypatch):
    """local_copies="peer" promises no same-GPU copy, and the eager receive is one: its default eager size
    is 0 (rendezvous), unless HOCCL_EAGER_BYTES asks for the eager path anyway."""
    fake_cuda.install(monkeypatch)
    from hoccl_runtime.comm import Communicator

    sizes = {}
    for mode, env in (("sm", None), ("peer", None), ("peer", "65536")):
        if env is None:
            monkeypatch.delenv("HOCCL_EAGER_BYTES", raising=False)
        else:
            monkeypatch.setenv("HOCCL_EAGER_BYTES", env)
        comm = Communicator(0, 1, 0, fake_cuda.Store(), local_copies=mode)
        sizes[(mode, env)] = comm.eager_bytes
        comm.close()
    assert sizes == {("sm", None): 4 << 20, ("peer", None): 0, ("peer", "65536"): 65536}


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("eager", [True, False])
def test_repeated_calls_run_as_graphs(monkeypatch, world, eager):
    """The same buffers again: from the second call on, the call's work is one captured graph, launched per
    call, and it keeps moving the data of each call (new contents in the same buffers), whichever GPU is
    the caller's current one (left as it was). Eager calls cycle through the staging slots: a call is the
    same again when its slots come round."""
    def body(comm, r):
        n, bad = 1000, []
        comm.eager_bytes = comm.eager_bytes if eager else 0
        comm.eager_collectives = eager
        inp, out = np.zeros(n, np.uint8), np.zeros(n * world, np.uint8)
        a2a_in, a2a_out = np.zeros(n * world, np.uint8), np.zeros(n * world, np.uint8)
        before = len(fake_cuda.launches)
        rt = fake_cuda.Runtime()  # the current device is the calling thread's
        for call in range(4):
            inp[:] = data(r, call, n)
            out[:] = 0xA5
            rt.setDevice((r + call) % world)  # the caller's current device: the rank's GPU or another
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            if rt.getDevice() != (r + call) % world:
                bad.append(f"all_gather call {call} left the caller on GPU {rt.getDevice()}")
            if not np.array_equal(out, np.concatenate([data(p, call, n) for p in range(world)])):
                bad.append(f"all_gather call {call}")
            a2a_in[:] = data(r, call + 50, n * world)
            a2a_out[:] = 0xA5
            comm.all_to_all_single(dev(a2a_out, r), dev(a2a_in, r), stream=7)
            want = np.concatenate([data(p, call + 50, n * world)[r * n:(r + 1) * n] for p in range(world)])
            if not np.array_equal(a2a_out, want):
                bad.append(f"all_to_all call {call}")
        return bad, len(comm._launcher.launches), sum(e.exe is not None for e in comm._launcher.launches._lists.values()), before

    results = ranks(monkeypatch, world, body)
    # rendezvous: one entry per collective, graphs from call 2 on (3 launches each); eager: AllGather and
    # All-to-All alternate, so each meets 2 slot combinations twice (4 entries, 1 launch each)
    want, launches = (4, 4) if eager else (2, 6)
    for r in range(world):
        bad, entries, graphs, _ = results[r]
        assert bad == [] and entries == want and graphs == want, (r, results[r])
    assert len(fake_cuda.launches) - min(res[3] for res in results.values()) >= launches * world


def test_send_recv_paced_and_a_mismatch(monkeypatch):
    import types

    from hoccl_runtime import pacing

    ticks: dict[int, list[float]] = {0: [], 1: []}
    monkeypatch.setattr(pacing, "Pacer", lambda device: types.SimpleNamespace(
        handle=555, sleep=lambda stream, us: None, sleep_us=lambda period: ticks[device].append(period) or 0))

    def body(comm, r):
        n = (3 << 20) + 7  # 4 pieces at the 1 MiB floor when paced at a tiny rate
        ok = comm._launcher.pace_feedback is False  # off by default (HOCCL_PACE_FEEDBACK)
        comm._launcher.pace_feedback = True  # each paced call is timed by a pair of events on its stream
        for call, how in ((1, {"rate_gbps": 1e-3}), (2, {"duration_s": 2.0})):
            buf = data(0, call, n) if r == 0 else np.full(n, 0xA5, np.uint8)
            if r == 0:
                comm.send(dev(buf, r), 1, stream=7, **how)
            else:
                comm.recv(dev(buf, r), 0, stream=7)
            ok = ok and np.array_equal(buf, data(0, call, n))
        # each paced kind of call keeps a Feedback whose target is the call's bytes at its rate (us)
        fbs = sorted((e.feedback for e in comm._launcher.launches._lists.values() if e.feedback is not None),
                     key=lambda fb: fb.target_us)
        ok = ok and (fbs == [] if r == 1 else [fb.target_us for fb in fbs] == pytest.approx([2e6, n]))  # 2 s; 1 MB/s
        ok = ok and all(len(fb._busy) == 1 for fb in fbs)  # timed (the fake's events take no time: nothing learnt)
        with pytest.raises(HocclError, match="give one of them"):
            comm.send(dev(buf, r), 1 - r, stream=7, rate_gbps=1.0, duration_s=1.0)
        with pytest.raises(HocclError, match="duration_s=0"):
            comm.send(dev(buf, r), 1 - r, stream=7, duration_s=0)
        with pytest.raises(HocclError, match="shorter duration"):  # refused before the partner hears of it
            comm.send(dev(buf, r), 1 - r, stream=7, duration_s=1e12)
        comm.eager_bytes = 0  # the rendezvous's check: both ranks raise at the call (eager: see the test below)
        a16, b16, b8 = np.zeros(16, np.uint8), np.zeros(16, np.uint8), np.zeros(8, np.uint8)  # alive: apart
        with pytest.raises(PlanError, match="another collective"):
            if r == 0:
                comm.all_gather_into_tensor(dev(a16, r), dev(b8, r), stream=7)
            else:
                comm.all_to_all_single(dev(a16, r), dev(b16, r), stream=7)
        with pytest.raises(HocclError, match="rate_gbps"):
            comm.send(dev(buf, r), 1 - r, stream=7, rate_gbps=-1)
        return ok

    assert ranks(monkeypatch, 2, body) == {0: True, 1: True}
    # the sender's ticks, one after each of its 4 pieces (3 of 1 MiB, then 7 bytes), each as long as its
    # piece takes at the rate: at 1 MB/s, and then spread over 2 s; the receiver paces nothing
    n_sent = (3 << 20) + 7
    assert ticks[1] == [] and len(ticks[0]) == 8
    assert ticks[0][:4] == pytest.approx([1 << 20] * 3 + [7])           # us: bytes at 1 byte per us
    assert sum(ticks[0][:4]) == pytest.approx(n_sent)
    assert ticks[0][4:] == pytest.approx([2e6 * (1 << 20) / n_sent] * 3 + [2e6 * 7 / n_sent])
    assert sum(ticks[0][4:]) == pytest.approx(2e6)                      # the call lasts its 2 s


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("local_copies", ["sm", "peer"])
def test_all_gather_in_place_makes_no_same_gpu_copy(monkeypatch, world, local_copies):
    """NCCL's and torch's in-place AllGather (input = output[rank * n:(rank + 1) * n]) lands byte-exact with
    no copy inside a rank's own output (a same-GPU copy is a kernel of the CUDA driver, on SMs); an input
    that overlaps the output anywhere else, or an All-to-All's, is refused before any partner is involved."""
    from hoccl_runtime.errors import BufferError

    copied = []
    real = fake_cuda.Runtime.memcpyAsync

    def spy(self, dst, src, n, kind, stream):
        copied.append((dst, src, n))
        return real(self, dst, src, n, kind, stream)

    monkeypatch.setattr(fake_cuda.Runtime, "memcpyAsync", spy)
    n, outs = 4099, {}

    def body(comm, r):
        bad = []
        for call in range(3):  # eager, cached, and from the graph of the launch cache
            out = outs[r, call] = np.full(n * world, 0xA5, np.uint8)
            out[r * n:(r + 1) * n] = data(r, call, n)
            comm.all_gather_into_tensor(dev(out, r), dev(out[r * n:(r + 1) * n], r), stream=7)
            comm.synchronize()
            if not np.array_equal(out, np.concatenate([data(p, call, n) for p in range(world)])):
                bad.append(call)
        out = np.zeros(n * world, np.uint8)
        other = (r + 1) % world
        with pytest.raises(BufferError, match=f"overlaps the output .* at offset {other * n}; in place, pass the "
                                              f"output's bytes \\[{r * n}, {(r + 1) * n}\\)"):
            comm.all_gather_into_tensor(dev(out, r), dev(out[other * n:(other + 1) * n], r), stream=7)
        with pytest.raises(BufferError, match="alltoall has no in-place form"):
            comm.all_to_all_single(dev(out, r), dev(out, r), stream=7)
        return bad

    assert ranks(monkeypatch, world, body, local_copies=local_copies) == {r: [] for r in range(world)}
    inside = [(r, call) for (r, call), out in outs.items() for dst, src, k in copied
              if out.ctypes.data <= dst < out.ctypes.data + out.nbytes and
              out.ctypes.data <= src < out.ctypes.data + out.nbytes]
    assert copied and inside == []


@pytest.mark.parametrize("sync", ["events", "flags"])
@pytest.mark.parametrize("local_copies", ["sm", "peer"])
def test_one_process_executor_on_faked_cuda(monkeypatch, sync, local_copies):
    """hoccl_runtime.execute for two "GPUs" of one process, every collective, both orderings; with
    local_copies="peer" no copy has its source and destination on the GPU whose stream issues it."""
    fake_cuda.install(monkeypatch)
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.executor import Executor

    topo = make_topology("h200x2", nodes=1)
    specs = [CollectiveSpec(kind="allgather", size_bytes=2 * 5003), CollectiveSpec(kind="alltoall", size_bytes=8002),
             CollectiveSpec(kind="broadcast", size_bytes=777, root=1, in_place=True),
             CollectiveSpec(kind="broadcast", size_bytes=777, root=0),
             CollectiveSpec(kind="scatter", size_bytes=2 * 301, root=0),
             CollectiveSpec(kind="gather", size_bytes=2 * 301, root=1),
             # own blocks larger than the sends: in peer mode the other GPU's queue copies them
             CollectiveSpec(kind="alltoallv", matrix=((100, 74), (38, 200))),
             CollectiveSpec(kind="sendrecv", pairs=((0, 1, 4097),))]
    user = {0: 7, 1: 8}
    with Executor(local_copies=local_copies) as ex:
        made: dict[int, int] = {}  # copy stream -> its GPU
        make_stream = ex._stream

        def stream(device: int, queue: int) -> int:
            s = make_stream(device, queue)
            made[s] = device
            return s

        monkeypatch.setattr(ex, "_stream", stream)
        for rep in range(2):
            for spec in specs:
                plan = compile_plan(topo, spec, CompileOptions(chunk_bytes=1 << 30, baselines=False))
                ins = [data(r, rep, plan.ranks.input_bytes[r]) for r in range(2)]
                outs = [np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8) for r in range(2)]
                if spec.in_place:  # the root's input lives in its output
                    outs[1][:] = ins[1]
                    bufs = {r: (None, dev(outs[r], r)) for r in range(2)}
                else:
                    bufs = {r: (dev(ins[r], r) if ins[r].size else None, dev(outs[r], r) if outs[r].size else None)
                            for r in range(2)}
                ex.execute(plan, bufs, user, sync=sync)
                want = replay(plan, ins).outputs
                for r in range(2):
                    assert np.array_equal(outs[r], want[r]), (spec.kind, r)
                if local_copies == "peer":
                    def gpu(ptr: int, arrays=ins + outs) -> int:
                        return next(i % 2 for i, a in enumerate(arrays)
                                    if a.size and a.ctypes.data <= ptr < a.ctypes.data + a.nbytes)
                    from hoccl_runtime._trust import plan_uid

                    key = next(k for k in reversed(ex._launches._lists) if k[0] == plan_uid(plan))  # this call
                    for op in ex._launches._lists[key].ops:
                        if isinstance(op, Memcpy):
                            on = made.get(op.stream, {7: 0, 8: 1}.get(op.stream))
                            assert not gpu(op.dst) == gpu(op.src) == on, f"{spec.kind}: a same-GPU copy {op}"


def test_eager_send_recv_many_and_a_size_mismatch(monkeypatch):
    """Small messages go through the receiver's staging slots (more messages than slots, the same buffers,
    new contents each time); a receive of another size than was sent raises PlanError on the receiver."""
    def body(comm, r):
        bad, n = [], 5000
        buf = np.zeros(n, np.uint8)
        for k in range(10):
            if r == 0:
                buf[:] = data(0, k, n)
                comm.send(dev(buf, r), 1, stream=7)
            else:
                buf[:] = 0xA5
                comm.recv(dev(buf, r), 0, stream=7)
                if not np.array_equal(buf, data(0, k, n)):
                    bad.append(k)
        # a receive that began before the sender wrote its size entry is checked at the next call or here
        comm.synchronize()
        assert comm._eager.stage_in and comm._eager.stage_out and not comm._eager.unverified
        if r == 0:
            comm.send(dev(np.zeros(100, np.uint8), r), 1, stream=7)
            return bad
        with pytest.raises(PlanError, match="another size"):  # at the call if the entry is there, else later
            comm.recv(dev(np.zeros(200, np.uint8), r), 0, stream=7)
            comm.synchronize()
        return bad

    assert ranks(monkeypatch, 2, body) == {0: [], 1: []}


@pytest.mark.parametrize("world", [2, 4])
def test_several_dma_queues_per_gpu(monkeypatch, world):
    """dma_queues=2: each rank's peers spread over two copy streams (the extra one a side stream joined by
    events); every collective still lands byte-exact, twice (the second time from the launch cache or
    a graph)."""
    fake_cuda.install(monkeypatch)
    from hoccl_runtime.comm import Communicator

    store = fake_cuda.Store()

    def body(comm, r):
        bad = []
        for rep in range(2):
            n = 4099 + rep
            inp, out = data(r, rep, n), np.full(n * world, 0xA5, np.uint8)
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            if not np.array_equal(out, np.concatenate([data(p, rep, n) for p in range(world)])):
                bad.append(f"all_gather {n}")
            inp, out = data(r, rep + 10, n * world), np.full(n * world, 0xA5, np.uint8)
            comm.all_to_all_single(dev(out, r), dev(inp, r), stream=7)
            want = np.concatenate([data(p, rep + 10, n * world)[r * n:(r + 1) * n] for p in range(world)])
            if not np.array_equal(out[:n * world], want):
                bad.append(f"all_to_all {n}")
        with pytest.raises(HocclError, match="dma_queues=2: pacing caps one copy queue"):
            comm.all_gather_into_tensor(dev(out[:n * world], r), dev(inp[:n], r), stream=7, rate_gbps=10.0)
        return bad, sorted(comm._launcher.streams)

    results = fake_cuda.run_ranks(world, lambda r: Communicator(r, world, r, store, timeout_s=20, dma_queues=2),
                                  body)
    for r in range(world):
        assert not isinstance(results[r], Exception), results[r]
        bad, side = results[r]
        assert bad == [], (r, bad)
        # with 3 peers, the second DMA queue ran on its own side stream (slot 1; slot 4 is local copies)
        assert (1 in side) == (world > 2), (r, side)


def test_dma_queues_out_of_range(monkeypatch):
    fake_cuda.install(monkeypatch)
    from hoccl_runtime.comm import Communicator

    with pytest.raises(HocclError, match="dma_queues=9"):
        Communicator(0, 2, 0, fake_cuda.Store(), dma_queues=9)
    monkeypatch.setenv("HOCCL_DMA_QUEUES", "two")
    with pytest.raises(HocclError, match="HOCCL_DMA_QUEUES"):
        Communicator(0, 2, 0, fake_cuda.Store())


@pytest.mark.parametrize("tail_direct", [True, False])
def test_a_graph_ends_at_its_copies_and_the_last_handshake_follows_it(monkeypatch, tail_direct):
    """From the second call on, a call is a CUDA graph; its trailing memop batch (DONE signal and wait) is
    launched after the graph rather than captured in it (HOCCL_GRAPH_TAIL_DIRECT=0 captures it too)."""
    monkeypatch.setenv("HOCCL_GRAPH_TAIL_DIRECT", "1" if tail_direct else "0")
    fake_cuda.install(monkeypatch)
    from hoccl_runtime.comm import Communicator

    store = fake_cuda.Store()
    before = len(fake_cuda.memops)

    def body(comm, r):
        n, bad = 4099, 0
        inp, out = np.empty(n, np.uint8), np.empty(2 * n, np.uint8)  # the same buffers every call
        for call in range(4):  # call 1: a launch list; call 2: captured, then launched; calls 3-4: launched
            inp[:], out[:] = data(r, call, n), 0xA5
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            bad += not np.array_equal(out, np.concatenate([data(p, call, n) for p in range(2)]))
        return bad

    results = fake_cuda.run_ranks(2, lambda r: Communicator(r, 2, r, store, timeout_s=20), body)
    assert results == {0: 0, 1: 0}
    got = fake_cuda.memops[before:]
    # per rank: call 1 issues its entry and exit batches directly; the capture records the entry (and the exit
    # unless it stays outside); each graph launch from call 2 on is followed by the exit batch when it does
    want = {"direct": 2 * (2 + 3), "captured": 2 * 1} if tail_direct else {"direct": 2 * 2, "captured": 2 * 2}
    assert {k: got.count(k) for k in want} == want


def test_a_member_attached_to_the_shared_segment_leaves_its_name_to_the_owner(tmp_path):
    """A member that attaches and exits must not unlink the owner's segment nor warn of a leak at exit
    (Python < 3.13 hands attached segments to each process's resource tracker)."""
    import subprocess
    import sys
    from multiprocessing import shared_memory

    owner = shared_memory.SharedMemory(create=True, size=4096)
    try:
        script = tmp_path / "attach.py"
        script.write_text(
            "import sys\nimport pytest\nsys.path[:0] = [sys.argv[2], sys.argv[2] + '/../..']\nimport fake_cuda\n"
            "fake_cuda.install(pytest.MonkeyPatch())\nfrom hoccl_runtime._shm import SharedSegment\n"
            "class Store:\n    def get(self, key):\n        return sys.argv[1].encode()\n"
            "    def check(self, keys):\n        return True\n"
            "    def add(self, key, n):\n        return 0\n"
            "seg = SharedSegment(Store(), False, 4096, key='shm-name')\nseg.shm.buf[0] = 7\nseg.close()\n")
        support = Path(__file__).resolve().parents[1] / "support"
        done = subprocess.run([sys.executable, str(script), owner.name, str(support)], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        assert "leaked" not in done.stderr and "resource_tracker" not in done.stderr, done.stderr
        assert owner.buf[0] == 7
        again = shared_memory.SharedMemory(name=owner.name)  # the name is still there
        again.close()
    finally:
        owner.close()
        owner.unlink()


def test_calls_on_another_stream_wait_for_the_last_call(monkeypatch):
    """A communicator's calls share each pair's flags, so a call on another stream than the last call waits
    for that call's end event (as NCCL orders a communicator's calls); the same stream again, or a call
    inside a stream capture, adds no wait."""
    fake_cuda.install(monkeypatch)
    waits: list = []  # (stream, event) of every stream wait; event numbers are unique
    real = fake_cuda.Runtime.streamWaitEvent

    def logged(self, stream, ev, flags):
        waits.append((stream, ev))
        return real(self, stream, ev, flags)

    monkeypatch.setattr(fake_cuda.Runtime, "streamWaitEvent", logged)

    def body(comm, r):
        inp, out = np.ones(64, np.uint8), np.zeros(128, np.uint8)
        marks = []
        for stream in (7, 7, 8, 8, 7):
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=stream)
            marks.append(len(waits))
        rt = fake_cuda.Runtime()
        rt.streamBeginCapture(9, 1)
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=9)
        rt.streamEndCapture(9)
        marks.append(len(waits))
        return marks, comm._launcher.events[("end", 7)], comm._launcher.events[("end", 8)]

    results = ranks(monkeypatch, 2, body)
    for r in range(2):
        marks, end7, end8 = results[r]
        seen = [[w for w in waits[:m] if w[1] in (end7, end8)] for m in marks]  # waits on this rank's end events
        assert seen[0] == seen[1] == [] and seen[2] == seen[3] == [(8, end7)], seen
        assert seen[4] == seen[5] == [(8, end7), (7, end8)], seen


@pytest.mark.parametrize("connections", ["1", "8", None])
def test_one_hardware_queue_warns_once_of_a_same_gpu_copy(monkeypatch, connections):
    """Under CUDA_DEVICE_MAX_CONNECTIONS=1 the first call that copies its own block within the GPU (a driver
    kernel, queued behind compute) warns once, naming the in-place form and local_copies='peer'; an in-place
    AllGather does not, nor does any call under another setting."""
    import warnings

    if connections is None:
        monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    else:
        monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", connections)
    n = 256

    def in_place(comm, r):
        out = np.zeros(2 * n, np.uint8)
        for call in range(3):
            out[r * n:(r + 1) * n] = data(r, call, n)
            comm.all_gather_into_tensor(dev(out, r), dev(out[r * n:(r + 1) * n], r), stream=7)
            comm.synchronize()

    def out_of_place(comm, r):
        out, zeros = np.zeros(2 * n, np.uint8), np.zeros(2 * n, np.uint8)
        for call in range(3):  # three times: one warning
            inp = data(r, call, n)  # (alive through the call: a DeviceBuffer is only a pointer)
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
        comm.all_to_all_single(dev(out, r), dev(zeros, r), stream=7)
        comm.synchronize()

    # (ranks are threads and the record of warnings is the process's: it is taken around them all)
    for body in (in_place, out_of_place):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            ranks(monkeypatch, 2, body)
        messages = sorted(str(w.message) for w in got if issubclass(w.category, RuntimeWarning))
        if connections == "1" and body is out_of_place:
            assert len(messages) == 2, messages  # once per rank
            for r, text in enumerate(messages):
                assert text.startswith(f"rank {r}: this allgather") and "CUDA_DEVICE_MAX_CONNECTIONS=1" in text
                assert f"input = output[{r * n}:{(r + 1) * n}]" in text and "local_copies='peer'" in text
        else:
            assert messages == [], (body.__name__, messages)


def test_one_hardware_queue_warning_for_an_all_to_all_names_peer_mode_only(monkeypatch):
    """An All-to-All has no in-place form: its warning points to local_copies='peer' alone."""
    import warnings

    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    n = 128

    def body(comm, r):
        out, inp = np.zeros(2 * n, np.uint8), np.full(2 * n, r, np.uint8)  # alive through the call
        comm.all_to_all_single(dev(out, r), dev(inp, r), stream=7)
        comm.synchronize()
        return out

    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        results = ranks(monkeypatch, 2, body)
    for r in range(2):  # the call itself is unchanged: block p of rank r's output came from rank p
        assert all((results[r][p * n:(p + 1) * n] == p).all() for p in range(2))
    messages = sorted(str(w.message) for w in got if issubclass(w.category, RuntimeWarning))
    assert len(messages) == 2 and all("alltoall" in m and "local_copies='peer'" in m for m in messages), messages
    assert not any("in place" in m for m in messages), messages


def test_memory_that_cannot_be_shared_is_refused_by_name_and_the_next_call_works(monkeypatch):
    """cudaIpcGetMemHandle refuses memory from cudaMallocAsync pools (or expandable segments): the call raises
    a BufferError naming the rank, the buffer and the fix, before it takes a sequence number, so the same
    communicators' next call, on shareable memory, runs and is right."""
    from hoccl_runtime.errors import BufferError

    pooled: set[int] = set()
    real = fake_cuda.Runtime.ipcGetMemHandle

    def ipc_get(self, ptr):
        if ptr in pooled:
            raise RuntimeError("cudaErrorInvalidValue: invalid argument")
        return real(self, ptr)

    monkeypatch.setattr(fake_cuda.Runtime, "ipcGetMemHandle", ipc_get)
    world, n = 2, 4099
    bad_out = [np.full(n * world, 0xA5, np.uint8) for _ in range(world)]
    pooled.update(int(a.ctypes.data) for a in bad_out)

    def body(comm, r):
        inp = data(r, 1, n)
        try:
            comm.all_gather_into_tensor(dev(bad_out[r], r), dev(inp, r), stream=7)
            return "not refused", False
        except BufferError as exc:
            refused = str(exc)
        out = np.full(n * world, 0xA5, np.uint8)
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        return refused, np.array_equal(out, np.concatenate([data(p, 1, n) for p in range(world)]))

    results = ranks(monkeypatch, world, body)
    for r in range(world):
        message, right = results[r]
        assert f"rank {r}'s output" in message and "cannot be shared with other processes" in message, message
        assert "cudaMallocAsync" in message and "allocate with cudaMalloc" in message, message
        assert right, f"rank {r}: the call after the refused one delivered wrong bytes"


@pytest.mark.parametrize("failing", [0, 1])
def test_a_rank_that_fails_at_start_is_heard_of_at_once(monkeypatch, failing):
    """One rank asks for a GPU that does not exist: it raises at once, and the others raise within a second
    naming it (through the store), instead of waiting for it until their timeout; no /dev/shm segment stays."""
    import os
    import time
    from pathlib import Path

    fake_cuda.install(monkeypatch)
    from hoccl_runtime.comm import Communicator

    store = fake_cuda.Store()
    before = set(os.listdir("/dev/shm")) if Path("/dev/shm").is_dir() else set()
    took = {}

    def make(r):
        t0 = time.monotonic()
        try:
            return Communicator(r, 3, 99 if r == failing else r, store, timeout_s=30)
        finally:
            took[r] = time.monotonic() - t0

    results = fake_cuda.run_ranks(3, make, lambda comm, r: "up", timeout_s=60)
    assert isinstance(results[failing], HocclError) and "asked for GPU 99" in str(results[failing])
    for r in range(3):
        if r != failing:
            assert isinstance(results[r], HocclError), results[r]
            assert f"rank {failing} failed while setting up" in str(results[r]) and "GPU 99" in str(results[r])
            assert took[r] < 2.0, took
    after = set(os.listdir("/dev/shm")) if Path("/dev/shm").is_dir() else set()
    # the segments this process made (another process's, such as a second pytest's beside this one, may come and go)
    from hoccl_runtime import _shm
    assert not {n for n in after - before if n in _shm._CREATED}, after - before
    assert not [t for t in __import__("threading").enumerate() if t.name.startswith("hoccl-watchdog")]


def test_cupys_own_cuda_errors_leave_as_cuda_error():
    from hoccl_runtime import _cuda
    from hoccl_runtime.errors import CudaError

    class CUDARuntimeError(RuntimeError):  # what CuPy raises (cupy_backends.cuda.api.runtime)
        pass

    got = _cuda.cuda_error(CUDARuntimeError("cudaErrorInvalidValue: invalid argument"), "rank 0: allgather")
    assert isinstance(got, CudaError) and "rank 0: allgather: a CUDA call failed: cudaErrorInvalidValue" in str(got)
    other = ValueError("x")
    assert _cuda.cuda_error(other, "y") is other


@pytest.mark.parametrize("world,local_copies", [(3, "sm"), (8, "sm"), (4, "peer")])
def test_a_large_broadcast_is_a_scatter_and_an_in_place_all_gather(monkeypatch, world, local_copies):
    """From HOCCL_BROADCAST_SPLIT_BYTES on (a multiple of the world, 3 ranks or more) a broadcast is a scatter of the
    root's blocks and an in-place AllGather: every rank gets the root's bytes, the root's copies move 2 (G - 1) / G
    of them instead of G - 1 times them, no rank copies its own block; a size that is not a multiple of the world,
    or under the threshold, is one broadcast plan as before."""
    monkeypatch.setenv("HOCCL_BROADCAST_SPLIT_BYTES", "96")
    fake_cuda.install(monkeypatch)
    moved: dict[int, int] = {}  # bytes of the copies each rank (thread) issued
    copy = fake_cuda.Runtime.memcpyAsync

    def counted(self, dst, src, n, kind, stream):
        process = getattr(fake_cuda._current, "process", -1)
        moved[process] = moved.get(process, 0) + n
        return copy(self, dst, src, n, kind, stream)

    monkeypatch.setattr(fake_cuda.Runtime, "memcpyAsync", counted)
    root, n_split, n_odd = 1, 96 * world, 96 * world + 1

    def body(comm, r):
        out = {}
        for n in (n_split, n_odd, 24):  # split; not a multiple of the world; under the threshold
            t = data(root, n, n) if r == root else np.full(n, 0xA5, np.uint8)
            before = dict(moved)
            comm.broadcast(dev(t, r), root, stream=7)
            comm.synchronize()
            out[n] = (np.array_equal(t, data(root, n, n)), moved.get(r, 0) - before.get(r, 0))
        return out, sorted(key[0] for key in comm._plans)

    results = ranks(monkeypatch, world, body, local_copies=local_copies)
    for r in range(world):
        got, kinds = results[r]
        assert all(ok for ok, _ in got.values()), (r, got)
        assert kinds == ["allgather", "broadcast", "broadcast", "scatter"], kinds
    part = n_split // world
    assert results[root][0][n_split][1] == 2 * (world - 1) * part  # the root's copies: its blocks out, twice
    assert results[root][0][n_odd][1] == (world - 1) * n_odd         # one plan: the whole to every other rank


def test_a_scatter_root_may_give_its_own_block_of_the_input_as_its_output(monkeypatch):
    """The in-place form of scatter (what the broadcast above uses): the root's output exactly its own block of the
    input moves nothing there; an output elsewhere inside the input is still refused, naming both buffers."""
    world, n, root = 3, 40, 1

    def body(comm, r):
        src = data(root, 9, n * world) if r == root else None
        buf = src.copy() if r == root else None
        out = buf[root * n:(root + 1) * n] if r == root else np.full(n, 0xA5, np.uint8)
        comm.scatter(dev(out, r), dev(buf, r) if r == root else None, root=root, stream=7)
        comm.synchronize()
        wrong = None
        if r == root:
            try:
                comm.scatter(dev(buf[:n], r), dev(buf, r), root=root, stream=7)
            except HocclError as exc:  # refused before any rank moved: the others are not waiting for it
                wrong = str(exc)
        return np.array_equal(out, data(root, 9, n * world)[r * n:(r + 1) * n]), wrong

    got = ranks(monkeypatch, world, body)
    assert got[root][0] and "overlaps the output" in got[root][1] and "scatter has no in-place form" in got[root][1]
    assert all(got[r] == (True, None) for r in range(world) if r != root)


def test_a_root_or_peer_that_is_no_rank_is_refused_by_name_and_the_next_call_runs(monkeypatch):
    """A negative root (it came back as pydantic's ValidationError), a float or bool root, this rank as a send's
    peer: a CollectiveError naming the value, raised before anything is issued; a NumPy integer is a rank."""
    from hoccl_runtime.errors import CollectiveError

    def body(comm, r):
        buf = np.zeros(64, np.uint8)
        for root, words in ((-1, "root=-1 is out of range"), (2.0, "root=2.0 is not a rank"), (False, "root=False")):
            with pytest.raises(CollectiveError, match=words):
                comm.broadcast(dev(buf, r), root, stream=7)
            with pytest.raises(CollectiveError, match=words):
                comm.scatter(dev(buf, r), dev(np.zeros(64 * 3, np.uint8), r), root, stream=7)
        with pytest.raises(CollectiveError, match=f"dst={r} is this rank itself"):
            comm.send(dev(buf, r), r, stream=7)
        buf[:] = 7 if r == 2 else 0
        comm.broadcast(dev(buf, r), np.int32(2), stream=7)
        comm.synchronize()
        return buf.tolist() == [7] * 64

    assert ranks(monkeypatch, 3, body) == {0: True, 1: True, 2: True}
