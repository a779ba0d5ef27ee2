"""Runtime logic that needs no GPU: lowering, flags and their protocol, buffer and stream interop."""

from __future__ import annotations

import re

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions
from hoccl_runtime.errors import BufferError, HocclError, StreamError, UnsupportedPlanError
from hoccl_runtime.flags import FlagPool, as_int32, handshake, reached
from hoccl_runtime.interop import DeviceBuffer, as_buffer, as_stream
from hoccl_runtime.program import lower


def test_lower_merges_consecutive_chunks_and_keeps_queues():
    plan = compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind="allgather", size_bytes=2 * 10_000),
                        CompileOptions(chunk_bytes=4096))
    prog = lower(plan)
    kinds = {q: plan.queues.kind[q] for q in prog.copies}
    assert sorted(kinds.values()) == ["dma", "dma", "dma_local", "dma_local"]
    for q, copies in prog.copies.items():
        assert len(copies) == 1 and copies[0].nbytes == 10_000  # 3 chunks merged into one copy
        c = copies[0]
        gpu = plan.queues.gpu[q]
        assert c.src_rank == gpu and c.dst_offset == 10_000 * c.src_rank
        assert (c.dst_rank == gpu) == (kinds[q] == "dma_local")
        assert prog.touches[q] == {c.src_rank, c.dst_rank}


def test_lower_keeps_interleaving_when_transfers_share_a_queue():
    plan = compile_plan(make_topology("paper-h800", nodes=1, gpus_per_node=3),
                        CollectiveSpec(kind="matrix", matrix=((0, 3000, 1000), (0, 0, 0), (0, 0, 0))),
                        CompileOptions(chunk_bytes=1000))
    prog = lower(plan)
    (copies,) = prog.copies.values()
    assert [(c.dst_rank, c.nbytes) for c in copies] == [(1, 2000), (2, 1000), (1, 1000)]
    total = {}
    for c in copies:
        total[c.dst_rank] = total.get(c.dst_rank, 0) + c.nbytes
    assert total == {1: 3000, 2: 1000}


def test_lower_refuses_inter_node_plans():
    plan = compile_plan(make_topology("h200x2", nodes=2), CollectiveSpec(kind="alltoall", size_bytes=4096))
    with pytest.raises(UnsupportedPlanError, match="inter-node"):
        lower(plan)


def test_flag_pool_and_handshake_ops():
    pool = FlagPool(3, device=False)
    a, b = pool.allocate(), pool.allocate()
    assert a.address == pool.base and b.address == pool.base + 4
    producer, consumer = handshake(a)
    assert producer.ops == [("wait_eq", a.address, 0), ("write", a.address, 1)]
    assert consumer.ops == [("wait_eq", a.address, 1), ("write", a.address, 0)]
    pool.allocate()
    with pytest.raises(HocclError, match="exhausted"):
        pool.allocate()
    pool.release(b)
    assert pool.allocate().index == b.index


def test_counters_wrap_and_compare_cyclically():
    pool = FlagPool(1, device=False)
    f = pool.allocate()
    assert reached(f, 0) and not reached(f, 1)
    f.write(as_int32(5))
    assert reached(f, 5) and reached(f, 4) and not reached(f, 6)
    f.write(as_int32(0xFFFFFFFF))  # stored as -1; the next count after it is 1 (0 is never used)
    assert f.read() == -1 and reached(f, 0xFFFFFFFE) and not reached(f, 1)
    f.write(as_int32(1))
    assert reached(f, 0xFFFFFFFF) and reached(f, 1)


def _sendrecv_executors(monkeypatch, chunks_bytes: int = 50_000):
    import fake_cuda

    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.interop import DeviceBuffer
    from hoccl_runtime.net.executor import GpuNodeExecutor

    fake_cuda.install(monkeypatch, async_streams=True)
    plan = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1),
                        CollectiveSpec(kind="sendrecv", pairs=((0, 1, chunks_bytes),)),
                        CompileOptions(chunk_bytes=4096, baselines=False))
    data = np.random.default_rng(4).integers(0, 256, chunks_bytes, dtype=np.uint8)
    out, empty = np.zeros(chunks_bytes, np.uint8), np.zeros(0, np.uint8)

    def dev(a, d):
        return DeviceBuffer(int(a.ctypes.data), a.nbytes, d)

    bufs = {0: {0: (dev(data, 0), dev(empty, 0))}, 1: {1: (dev(empty, 1), dev(out, 1))}}
    transports = [GpuNodeExecutor.make_transport(plan, n, lanes=2, secret=b'test-job') for n in range(2)]
    addresses = {n: t.listen() for n, t in enumerate(transports)}
    return plan, data, out, bufs, transports, addresses


def _both_nodes(node, transports) -> None:
    """``node(n)`` for the two nodes in threads of their own; then their transports closed, and no node failed."""
    from threaded import failures, in_threads

    errors = failures(in_threads(2, node))
    for t in transports:
        t.close()
    assert not errors, errors


@pytest.mark.usefixtures("whole_rings")
def test_the_gpu_executors_slots_are_gated_by_counters(monkeypatch):
    """13 chunks through 3 staging slots, twice, with the copies enqueued before the run (prepare) and the run
    opening their gates: the bytes arrive, and after both runs every slot's gate and its done counter equal the
    slot's uses (every copy that was opened also ran, and none is left waiting)."""
    from hoccl_runtime.net.executor import GpuNodeExecutor

    plan, data, out, bufs, transports, addresses = _sendrecv_executors(monkeypatch)
    counts = {}

    def node(n):
        ex = GpuNodeExecutor(plan, n, bufs[n], transports[n], slots=3, timeout_s=20, reuse=True)
        ex.connect(addresses)
        first, second = ex.prepare(), ex.prepare()  # preparing ahead of driving, as the communicators do
        ex.run(prepared=first)
        ex.run(prepared=second)
        counts[n] = {key: (a.read(), b.read()) for key, (a, b) in ex._gates.items()}
        ex.close()

    _both_nodes(node, transports)
    assert np.array_equal(out, data)
    used = {0: "send", 1: "recv"}
    for n in (0, 1):
        for (kind, _, j), (gate, done) in counts[n].items():
            uses = 2 * len(range(j, 13, 3)) if kind == used[n] else 0  # 13 chunks: slot j holds j, j + 3, ..
            assert (gate, done) == (uses, uses), (n, kind, j, gate, done)


def test_a_run_that_fails_opens_its_gates(monkeypatch):
    """A prepared run that is never driven (its peer is gone) is released: its copy streams finish instead of
    waiting on their gates forever, and closing the executor returns."""
    import fake_cuda

    from hoccl_runtime.net.executor import GpuNodeExecutor

    plan, data, out, bufs, transports, addresses = _sendrecv_executors(monkeypatch)
    ex = GpuNodeExecutor(plan, 1, bufs[1], transports[1], slots=3, timeout_s=2, reuse=True)
    prepared = ex.prepare()
    waiting = [w for w in fake_cuda._streams.workers.values() if w.pending]
    assert waiting, "the landing copies should wait for their gates"
    ex.release(prepared)
    for w in waiting:
        w.drain(timeout_s=5)
    assert all(not gates for gates in prepared.recv.values())
    ex.close()
    for t in transports:
        t.close()


def test_the_gpu_executors_run_is_one_launch_list(monkeypatch):
    """prepare builds a run as typed launch ops (as the one-node paths do) and issues them once: on the sender, the
    wait for the caller's event, then per chunk its slot's gate and the staging copy, each chunk's staged count in
    one batch with the next chunk's gate (the last with the stream's end count); the copies cover the data once,
    each from the input into the send ring; and the run moves the bytes."""
    import contextvars

    import fake_cuda

    from hoccl_runtime import launch
    from hoccl_runtime.net import gpu
    from hoccl_runtime.net.executor import GpuNodeExecutor

    plan, data, out, bufs, transports, addresses = _sendrecv_executors(monkeypatch)
    issued: dict[int, list] = {}  # node -> the launch lists its executor issued
    this_node, real_replay = contextvars.ContextVar("node"), gpu.replay

    def spy(ops):
        issued.setdefault(this_node.get(), []).append(list(ops))
        real_replay(ops)

    monkeypatch.setattr(gpu, "replay", spy)
    event = fake_cuda.Runtime().eventCreateWithFlags(0)

    def node(n):
        this_node.set(n)
        ex = GpuNodeExecutor(plan, n, bufs[n], transports[n], slots=3, timeout_s=20, reuse=True)
        ex.connect(addresses)
        ex.run(prepared=ex.prepare(after=(event,)))
        ex.close()

    _both_nodes(node, transports)
    assert np.array_equal(out, data)
    (ops,) = issued[0]
    chunks = -(-data.nbytes // 4096)
    kinds = [type(op).__name__ for op in ops]
    assert kinds == ["Device", "Wait"] + ["Memops", "Memcpy"] * chunks + ["Memops", "Restore"], kinds
    assert ops[1].event == event
    batches = [[kind for kind, _, _ in op.batch.ops] for op in ops if type(op) is launch.Memops]
    assert batches == [["wait_geq"]] + [["write", "wait_geq"]] * (chunks - 1) + [["write", "write"]], batches
    copies = [op for op in ops if type(op) is launch.Memcpy]
    assert sum(op.nbytes for op in copies) == data.nbytes
    lo = int(data.ctypes.data)
    assert sorted(op.src - lo for op in copies) == list(range(0, data.nbytes, 4096))
    assert len({op.stream for op in ops if hasattr(op, "stream")}) == 1  # one staging stream per ring
    (recv_ops,) = issued[1]
    assert [type(op).__name__ for op in recv_ops].count("Memcpy") == chunks
    assert sum(op.nbytes for op in recv_ops if type(op) is launch.Memcpy) == data.nbytes


class FakeCai:
    def __init__(self, ptr, shape, typestr="<f4", strides=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": shape, "typestr": typestr,
                                         "strides": strides, "version": 3}

    class device:  # noqa: N801 - mimics cupy's .device.id
        id = 1


def test_device_buffer_is_a_value():
    """Compared and hashed by (pointer, bytes, GPU), as the launch and window caches need; slice() is a new one."""
    a, b = DeviceBuffer(0x1000, 64, 1), DeviceBuffer(0x1000, 64, 1)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != DeviceBuffer(0x1000, 64, 0) and a != DeviceBuffer(0x1000, 32, 1) and a != (0x1000, 64, 1)
    assert a.slice(16, 8) == DeviceBuffer(0x1010, 8, 1) and a == b
    assert repr(a) == "DeviceBuffer(ptr=0x1000, nbytes=64, device=1)"
    assert as_buffer(a) is a


def test_as_buffer_from_array_interface():
    buf = as_buffer(FakeCai(0x1000, (4, 8), "<u2"))
    assert buf == DeviceBuffer(0x1000, 64, 1)
    assert as_buffer(FakeCai(0x1000, (4, 8), "<f4", strides=(32, 4))).nbytes == 128
    with pytest.raises(BufferError, match="not C-contiguous"):
        as_buffer(FakeCai(0x1000, (4, 8), "<f4", strides=(4, 16)))


def test_as_buffer_refuses_host_memory():
    with pytest.raises(BufferError, match="host memory"):
        as_buffer(np.zeros(4))
    with pytest.raises(BufferError, match="not a GPU buffer"):
        as_buffer("nope")


def test_as_stream_forms():
    class Proto:
        def __cuda_stream__(self):
            return (0, 77)

    class TorchLike:
        cuda_stream = 88

    assert as_stream(None) == 0 and as_stream(5) == 5 and as_stream(Proto()) == 77 and as_stream(TorchLike()) == 88
    for bad in (-1, True, "s", 1.5):
        with pytest.raises(StreamError):
            as_stream(bad)


def test_as_rank_takes_integers_in_range_and_names_anything_else():
    from hoccl_runtime.errors import CollectiveError
    from hoccl_runtime.interop import as_rank

    assert as_rank(3, 4, "root") == 3 and type(as_rank(np.int64(2), 4, "root")) is int
    for bad, words in ((-1, "root=-1 is out of range: pass a rank in 0..3"), (4, "root=4 is out of range"),
                       (True, "root=True is not a rank"), (1.0, "root=1.0 is not a rank"), ("0", "root='0' is not"),
                       (None, "root=None is not a rank: pass an int in 0..3")):
        with pytest.raises(CollectiveError, match=words.replace("(", r"\(").replace(".", r"\.")):
            as_rank(bad, 4, "root")
    with pytest.raises(CollectiveError, match=r"dst=1 is this rank itself: pass another rank in 0\.\.3"):
        as_rank(1, 4, "dst", other_than=1)


def test_init_without_torchrun_environment_is_a_clear_error(monkeypatch):
    import hoccl_runtime as hr

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(HocclError, match="RANK is not set: run under torchrun"):
        hr.init()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(HocclError, match="WORLD_SIZE=4 is not a whole number of nodes of 3 GPUs"):
        hr.init()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(HocclError, match="dma_queues=2: only the intra-node communicator"):
        hr.init(dma_queues=2)


@pytest.mark.parametrize(("env", "kwargs", "words"), [
    ({"RANK": "abc"}, {}, r"RANK='abc' is not a whole number \(torchrun sets it; or pass rank=\)"),
    ({"LOCAL_WORLD_SIZE": "x"}, {}, r"LOCAL_WORLD_SIZE='x' is not a whole number"),
    ({"RANK": "3"}, {}, "rank 3 of world size 2 on GPU 0: the world size must be 1 or more, the rank in"),
    ({"WORLD_SIZE": "0"}, {}, "rank 0 of world size 0"),
    ({"LOCAL_RANK": "-1"}, {}, "on GPU -1"),
    ({}, {"gpus_per_node": 1.5}, r"gpus_per_node=1.5: give a whole number"),
    ({}, {"rank": True}, r"rank=True: give a whole number"),
    ({}, {"gpus_per_node": 0}, r"WORLD_SIZE=2 is not a whole number of nodes of 0 GPUs"),
])
def test_init_names_a_bad_rank_size_or_gpu_before_anything_starts(monkeypatch, env, kwargs, words):
    """Values torchrun (or the caller) gives that are not whole numbers or not in range: a HocclError naming the
    variable or argument and the value (before: a ValueError from int(), or a store set up for a rank that cannot
    be)."""
    import hoccl_runtime as hr

    for var, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", **env}.items():
        monkeypatch.setenv(var, value)
    with pytest.raises(HocclError, match=words):
        hr.init(**kwargs)


def test_launch_cache_builds_once_and_drops_least_recent():
    from hoccl_runtime.executor import LaunchCache

    built = []
    cache = LaunchCache(limit=2)

    def build(name):
        built.append(name)
        return [("copy", name)]

    assert cache.get(("a",), lambda: build("a")) == [("copy", "a")]
    assert cache.get(("a",), lambda: build("again")) == [("copy", "a")]
    cache.get(("b",), lambda: build("b"))
    cache.get(("a",), lambda: build("a2"))      # a is now the most recent
    cache.get(("c",), lambda: build("c"))       # evicts b
    cache.get(("b",), lambda: build("b2"))
    assert built == ["a", "b", "c", "b2"]


def test_check_buffer_messages():
    from hoccl_runtime.executor import check_buffer

    plan = compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind="allgather", size_bytes=2 * 64))
    check_buffer(0, "input", DeviceBuffer(0x1000, 64, 0), 64, plan, device=0)
    check_buffer(0, "input", None, 0, plan)
    with pytest.raises(BufferError, match="needs a 64-byte input"):
        check_buffer(0, "input", None, 64, plan)
    with pytest.raises(BufferError, match="has 32 bytes but plan .* needs 64"):
        check_buffer(0, "input", DeviceBuffer(0x1000, 32, 0), 64, plan)
    with pytest.raises(BufferError, match="on GPU 1, but this communicator drives GPU 0"):
        check_buffer(0, "output", DeviceBuffer(0x1000, 64, 1), 64, plan, device=0)


def test_memop_parameter_block_layout():
    """The ctypes path packs CUstreamBatchMemOpParams as cuda.h lays them out (48 bytes each)."""
    import struct

    from hoccl_runtime._cuda import MEMOP_BYTES, pack_memops

    block = pack_memops([("wait_eq", 0x7F00_0000_1000, 1), ("write", 0x7F00_0000_1004, 0)])
    assert len(block) == 2 * MEMOP_BYTES == 96
    op, address, value, flags, alias = struct.unpack_from("<I4xQQI4xQ", block, 0)
    assert (op, address, value, flags, alias) == (1, 0x7F00_0000_1000, 1, 1, 0)  # WAIT_VALUE_32, EQ
    op, address, value, flags, _ = struct.unpack_from("<I4xQQI4xQ", block, MEMOP_BYTES)
    assert (op, address, value, flags) == (2, 0x7F00_0000_1004, 0, 0)  # WRITE_VALUE_32, default
    geq = pack_memops([("wait_geq", 0x10, 0xFFFFFFFF)])  # a counter wait: GEQ (0), the value as 32 bits
    assert struct.unpack_from("<I4xQQI", geq, 0) == (1, 0x10, 0xFFFFFFFF, 0)
    with pytest.raises(HocclError, match="unknown"):
        pack_memops([("wait_gt", 0, 0)])


def test_bench_needs_torchrun_and_sane_sizes(monkeypatch):
    from hoccl_bench.bench import _baselines, _sizes, main

    assert _baselines("hoccl,raw,nccl,nccl-ctas=1,2,4,8,nccl-ce") == [
        "hoccl", "raw", "nccl", "nccl-ctas=1", "nccl-ctas=2", "nccl-ctas=4", "nccl-ctas=8", "nccl-ce"]
    with pytest.raises(SystemExit, match="unknown baseline 'gloo'"):
        _baselines("hoccl,gloo")
    assert _sizes("2MiB:16MiB") == [2 << 20, 4 << 20, 8 << 20, 16 << 20]
    assert _sizes("4MiB") == [4 << 20]
    with pytest.raises(SystemExit, match="LOW:HIGH"):
        _sizes("16MiB:2MiB")
    from hoccl_bench.bench import _loads

    assert _loads("gemm") == ["gemm"] and _loads(" membound, gemm") == ["membound", "gemm"]
    with pytest.raises(SystemExit, match="'gemm,matmul'"):
        _loads("gemm,matmul")
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit, match="torchrun"):
        main(["sweep"])
    # bad arguments are refused before the torchrun check, by name (session 66: --sizes x was a traceback, a bad rate
    # or round count surfaced only under torchrun)
    for argv, text in ((["sweep", "--sizes", "x"], "--sizes 'x': cannot read size 'x'"),
                       (["sweep", "--collectives", "allgather,nope"], "--collectives 'allgather,nope'"),
                       (["contention", "--rates", "100,0"], "--rates '100,0': give numbers above 0"),
                       (["contention", "--period-us", "x"], "--period-us 'x'"),
                       (["contention", "--rounds", "0"], "--rounds 0: give a whole number of at least 1"),
                       (["contention", "--warmup-s", "-1"], "--warmup-s -1.0"),
                       (["launch", "--reps", "0"], "--reps 0")):
        with pytest.raises(SystemExit, match=re.escape(text)):
            main(argv)


def test_pacing_pieces():
    from hoccl_runtime.pacing import MIN_PIECE, pieces

    got = pieces(100 << 20, 200.0, period_us=250)  # 50 MB a period
    assert sum(n for _, n in got) == 100 << 20 and got[0] == (0, 50_000_000) and len(got) == 3
    assert [o for o, _ in got] == [0, 50_000_000, 100_000_000]
    assert pieces(3 << 20, 1.0) == [(0, MIN_PIECE), (MIN_PIECE, MIN_PIECE), (2 * MIN_PIECE, MIN_PIECE)]
    from hoccl_runtime.pacing import PERIOD_US, tick_us

    assert tick_us(200.0) == PERIOD_US                      # 50 MB a tick
    assert tick_us(1.0) == pytest.approx(MIN_PIECE / 1e3)   # 1 MiB at 1 GB/s: the tick stretches to ~1 ms
    assert pieces(3 << 20, 1.0) == pieces(3 << 20, 1.0, tick_us(1.0))
    with pytest.raises(HocclError, match="shorter duration or a higher rate"):
        tick_us(1e-9)  # 1 MiB per ~12 days
    with pytest.raises(HocclError, match="positive"):
        pieces(10, 0.0)


class _TimedCalls:
    """A runtime whose events belong to simulated calls: a call lasts ``fixed_us`` plus its sleeps, and
    only calls marked done have finished."""

    def __init__(self, fixed_us: float):
        self.fixed_us, self.events, self.done, self.lengths = fixed_us, 0, set(), {}

    def eventCreateWithFlags(self, flags):  # noqa: N802
        self.events += 1
        return self.events

    def eventRecord(self, ev, stream):  # noqa: N802 - recorded again: pending until its call is done
        self.done.discard(ev)

    def eventQuery(self, ev):  # noqa: N802
        return 0 if ev in self.done else 600

    def eventElapsedTime(self, start, end):  # noqa: N802
        return self.lengths[end] / 1e3

    def eventDestroy(self, ev):  # noqa: N802
        pass


def test_pacing_feedback_brings_calls_to_their_rate(monkeypatch):
    """Calls that take a fixed 300 us more than their sleeps (handshakes, host-function dispatch) are
    brought to their target length by scaling the sleeps, learning only from finished calls."""
    from types import SimpleNamespace

    from hoccl_runtime.pacing import Feedback

    slept = []
    rt = _TimedCalls(fixed_us=300.0)
    fb = Feedback(SimpleNamespace(sleep=lambda stream, us: slept.append(us)))
    monkeypatch.setattr("hoccl_runtime._cuda.cupy_runtime", lambda: rt)  # the CUDA door's calls reach the fake
    fb.target_us = 1340.0  # 128 MiB at 100 GB/s
    lengths = []
    for batch in range(8):  # 8 windows of 40 calls enqueued ahead of the GPU, as the contention benchmark does
        marks = []
        for _ in range(40):
            mark = fb.begin(7)
            slept.clear()
            fb.sleep(9, 1340.0)  # one piece's nominal sleep
            length = rt.fixed_us + sum(slept)
            lengths.append(length)
            if mark is not None:
                fb.end(mark, 7)
                rt.lengths[mark[1]] = length
                marks.append(mark)
        assert fb.measured == 40 * batch  # a batch learns from the ones before, none of its own
        rt.done.update(m[1] for m in marks)
    assert lengths[0] == pytest.approx(1640.0)  # the first batch: 22% too long
    assert lengths[-1] == pytest.approx(1340.0, rel=0.02)  # later ones at the rate
    assert 0.7 < fb.scale < 0.8


def test_pacing_feedback_bounds(monkeypatch):
    """A call held up by a late partner moves the scale by at most MAX_STEP, and never below MIN_SCALE;
    unfinished calls are not counted, and at most RING are measured at once."""
    from types import SimpleNamespace

    from hoccl_runtime.pacing import Feedback

    rt = _TimedCalls(fixed_us=0.0)
    fb = Feedback(SimpleNamespace(sleep=lambda stream, us: None))
    monkeypatch.setattr("hoccl_runtime._cuda.cupy_runtime", lambda: rt)  # the CUDA door's calls reach the fake
    fb.target_us = 1000.0
    mark = fb.begin(7)
    fb.end(mark, 7)
    rt.lengths[mark[1]] = 50_000.0  # a partner 49 ms late
    fb.harvest()
    assert fb.measured == 0 and fb.scale == 1.0  # not finished yet: nothing learnt
    rt.done.add(mark[1])
    fb.harvest()
    assert fb.measured == 1 and fb.scale == pytest.approx(1.0 - Feedback.MAX_STEP)
    for _ in range(10):
        mark = fb.begin(7)
        fb.end(mark, 7)
        rt.lengths[mark[1]] = 50_000.0
        rt.done.add(mark[1])
    fb.harvest()
    assert fb.scale == Feedback.MIN_SCALE
    marks = [fb.begin(7) for _ in range(Feedback.RING)]
    for m in marks:
        fb.end(m, 7)
    assert fb.begin(7) is None  # RING calls in flight: the next one runs unmeasured
    fb.close()


def test_a_compiled_launch_makes_its_lists_cuda_calls_in_order(monkeypatch):
    """compile_launch (every call's hot path) issues each op's CUDA call in the list's order, with CUDA recorded
    instead of run: from another GPU it switches to the list's GPU and back; already on it, no switch."""
    from hoccl_runtime import _cuda
    from hoccl_runtime.flags import MemOps
    from hoccl_runtime.launch import Device, Memcpy, Memops, Record, Restore, Wait, compile_launch, squeeze_devices

    calls = []

    class Runtime:
        current = 0

        def __getattr__(self, name):
            def record(*args):
                calls.append((name, args))
                if name == "setDevice":
                    Runtime.current = args[0]
                return Runtime.current if name == "getDevice" else None
            return record

    class Fast:
        def batch_memop(self, stream, count, address):
            calls.append(("batch_memop", (stream, count)))

    rt, fast = Runtime(), Fast()
    monkeypatch.setattr(_cuda, "cupy_runtime", lambda: rt)
    monkeypatch.setattr(_cuda, "fast_driver", lambda: fast)
    flag = type("F", (), {"address": 0x1000})()
    ops = squeeze_devices([Device(1), Device(1), Record(11, 0), Memops(MemOps().wait_eq(flag, 1).write(flag, 0), 0),
                           Wait(7, 11), Memcpy(0x20, 0x10, 64, 7), Memcpy(0x40, 0x30, 8, 0),
                           Memops(MemOps().write(flag, 1), 0), Record(12, 0)])
    assert ops.count(Device(1)) == 1 and ops[-1] == Restore()  # the repeated switch dropped; the end restores
    work = [("eventRecord", (11, 0)), ("batch_memop", (0, 2)), ("streamWaitEvent", (7, 11, 0)),
            ("memcpyAsync", (0x20, 0x10, 64, _cuda.MEMCPY_DEFAULT, 7)), ("memcpyAsync", (0x40, 0x30, 8,
                                                                                      _cuda.MEMCPY_DEFAULT, 0)),
            ("batch_memop", (0, 1)), ("eventRecord", (12, 0))]
    run = compile_launch(ops)
    for caller, want in ((0, [("setDevice", (1,)), *work, ("setDevice", (0,))]), (1, work)):
        Runtime.current, calls[:] = caller, []
        run()
        assert [c for c in calls if c[0] != "getDevice"] == want and Runtime.current == caller


def test_network_call_proxy_runs_calls_in_stream_order_and_releases_the_stream_on_errors():
    """The proxy of the one-GPU-per-node communicator: a call runs only once the stream set START, DONE is
    written after it, errors are kept for the caller and still release the stream; close never hangs."""
    import threading
    import time

    from hoccl_runtime.comm.net import CallProxy

    start, done, ran = [0], [], []
    lock = threading.Lock()

    def run(call):
        ran.append(call)
        if call == "bad":
            raise HocclError("peer 1 died")

    def finish(call):
        with lock:
            done.append(ran[-1] if ran else None)

    skipped = []
    proxy = CallProxy(run, lambda call: start[0] == 1, lambda call: start.__setitem__(0, 0), finish, poll_s=1e-4,
                      skip=skipped.append)
    proxy.submit("a")
    proxy.submit("b")
    time.sleep(0.05)
    assert ran == [] and not proxy.wait_idle(0.01)  # the stream has not reached the calls: nothing runs
    for expected in (["a"], ["a", "b"]):
        start[0] = 1  # the stream reaches the next call
        deadline = time.monotonic() + 5
        while done != expected and time.monotonic() < deadline:
            time.sleep(1e-3)
        assert done == expected and start[0] == 0
    assert proxy.wait_idle(1)
    proxy.submit("bad")
    proxy.submit("c")
    for _ in range(2):
        start[0] = 1
        deadline = time.monotonic() + 5
        while start[0] and time.monotonic() < deadline:
            time.sleep(1e-3)
    assert proxy.wait_idle(5) and isinstance(proxy.error, HocclError)
    assert ran == ["a", "b", "bad"] and len(done) == 4  # "c" did not run but its stream was released
    assert skipped == ["c"]  # ... and what it held was handed to skip (a prepared run's gates are opened there)
    proxy.submit("d")  # its stream never gets there: closing releases it (skip, then its DONE) instead of leaving it
    proxy.close(timeout_s=2)
    assert skipped == ["c", "d"] and len(done) == 5
    proxy.submit("never started")
    t0 = time.monotonic()
    proxy.close(timeout_s=5)
    assert time.monotonic() - t0 < 2


def test_an_early_call_proxy_runs_a_call_before_its_stream_is_there_but_gives_done_only_after():
    """CallProxy(early=True), as the network communicators use it: a call's run begins as soon as it is taken
    (its set-up overlaps the stream's compute) and sees its stream arrive through ``reached()``; START is reset
    before DONE in every case (a run that returned early, one that failed), and a close while a run waits for its
    stream abandons it (skip, then DONE) instead of hanging."""
    import threading
    import time

    from hoccl_runtime.net.callproxy import CallProxy

    start, events = [0], []
    lock = threading.Lock()

    def log(what):
        with lock:
            events.append(what)

    def run(call, reached):
        log(("run", call))
        if call == "quick":
            return  # e.g. nothing of the call on this node: the proxy still waits for its stream before DONE
        while not reached():
            time.sleep(1e-4)
        log(("reached", call))
        if call == "bad":
            raise HocclError("peer 1 died")

    def reset(call):
        start[0] = 0
        log(("reset", call))

    proxy = CallProxy(run, lambda call: start[0] == 1, reset, lambda call: log(("done", call)), poll_s=1e-4,
                      skip=lambda call: log(("skip", call)), early=True)

    def through(call):
        deadline = time.monotonic() + 5
        while ("done", call) not in events and time.monotonic() < deadline:
            time.sleep(1e-3)

    for call in ("a", "quick", "bad"):
        proxy.submit(call)
        deadline = time.monotonic() + 5
        while ("run", call) not in events and time.monotonic() < deadline:
            time.sleep(1e-3)
        time.sleep(0.02)
        assert ("run", call) in events and ("done", call) not in events, events  # running, its stream not there
        start[0] = 1  # the stream reaches the call
        through(call)
        mine = [e for e in events if e[1] == call]
        assert mine[0] == ("run", call) and mine[-1] == ("done", call), mine
        assert mine.index(("reset", call)) < mine.index(("done", call)) and start[0] == 0, mine
    assert isinstance(proxy.error, HocclError)
    proxy.submit("after")  # an earlier call failed: not run, skipped once its stream is there, then DONE
    start[0] = 1
    through("after")
    assert [e for e in events if e[1] == "after"] == [("reset", "after"), ("skip", "after"), ("done", "after")]
    proxy.error = None
    proxy.submit("never")  # its stream never gets there: closing abandons it (skip, DONE) without a hang
    deadline = time.monotonic() + 5
    while ("run", "never") not in events and time.monotonic() < deadline:
        time.sleep(1e-3)
    t0 = time.monotonic()
    proxy.close(timeout_s=5)
    assert time.monotonic() - t0 < 2
    assert [e for e in events if e[1] == "never"] == [("run", "never"), ("skip", "never"), ("done", "never")]


def test_network_communicator_listening_address(monkeypatch):
    from hoccl_runtime.comm.net import _local_address

    monkeypatch.setenv("HOCCL_SOCKET_ADDR", " 127.0.0.1 ")  # the transport listens there: one of this host's
    assert _local_address() == "127.0.0.1"  # (one it cannot listen at is refused: test_transport_tcp.py)
    monkeypatch.delenv("HOCCL_SOCKET_ADDR")
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    assert _local_address() == "127.0.0.1"
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    assert _local_address() == "127.0.0.1"


def test_pacing_feedback_makes_its_events_on_the_pacers_gpu(monkeypatch):
    """The caller's current device may be another GPU than the communicator's: events are created on the
    pacer's device and the current device is given back."""
    from types import SimpleNamespace

    from hoccl_runtime.pacing import Feedback

    class Devices(_TimedCalls):
        def __init__(self):
            super().__init__(0.0)
            self.current, self.made_on = 0, []

        def getDevice(self):  # noqa: N802
            return self.current

        def setDevice(self, d):  # noqa: N802
            self.current = d

        def eventCreateWithFlags(self, flags):  # noqa: N802
            self.made_on.append(self.current)
            return super().eventCreateWithFlags(flags)

    rt = Devices()
    fb = Feedback(SimpleNamespace(sleep=lambda stream, us: None, device=3))
    monkeypatch.setattr("hoccl_runtime._cuda.cupy_runtime", lambda: rt)  # the CUDA door's calls reach the fake
    mark = fb.begin(7)
    assert mark is not None and rt.made_on == [3, 3] and rt.current == 0


def test_sm_probe_refuses_bad_arguments_before_any_gpu_work(monkeypatch):
    """hoccl_bench.smfree: a clear error for a GPU this process does not see or a spinner of no length (with
    CUDA faked: 8 GPUs); without CuPy, the error names the extra to install."""
    from hoccl_bench.smfree import SmProbe
    from hoccl_runtime.errors import CudaError

    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(CudaError, match="hoccl\\[gpu\\]"):
            SmProbe(0)
    import fake_cuda

    fake_cuda.install(monkeypatch)
    with pytest.raises(HocclError, match="device=9.*sees 8 GPU"):
        SmProbe(9)
    with pytest.raises(HocclError, match="hold_ms=0"):
        SmProbe(0, hold_ms=0)


def test_as_stream_remembers_how_to_read_a_library_stream_type():
    """A CuPy / torch / cuda.core stream type's handle is read the way that worked for its first stream (each
    stream of the type still gives its own handle); other types are looked at afresh every time."""
    from hoccl_runtime import interop

    class CupyLike:
        def __init__(self, ptr):
            self.ptr = ptr

    CupyLike.__module__ = "cupy.cuda.stream"

    class Other:
        def __init__(self, **attrs):
            self.__dict__.update(attrs)

    assert [as_stream(CupyLike(11)), as_stream(CupyLike(12))] == [11, 12]
    assert CupyLike in interop._STREAM_GETTERS and Other not in interop._STREAM_GETTERS
    assert [as_stream(Other(ptr=5)), as_stream(Other(cuda_stream=6))] == [5, 6]
    assert Other not in interop._STREAM_GETTERS
    del interop._STREAM_GETTERS[CupyLike]


@pytest.mark.parametrize("gate", ["clock", "ticks", "host"])
def test_paced_raw_baseline_and_its_controls(monkeypatch, gate):
    """hoccl-bench's raw paced copies (clock), the clock without copies (ticks) and the copies paced by
    the host (host): the bytes land, or do not, as named; the host gate takes the bytes' time at the rate;
    the clock gates sleep once per piece; an unknown gate is refused."""
    import time

    import fake_cuda
    import numpy as np

    from hoccl_bench.bench import raw_call
    from hoccl_runtime.pacing import pieces

    fake_cuda.install(monkeypatch)
    sleeps = []

    class Pacer:
        handle = 99

        def sleep_us(self, us):
            return us

        def sleep(self, stream, us):
            sleeps.append((stream, us))

    src = np.random.default_rng(5).integers(0, 256, 6 << 20, dtype=np.uint8)
    dst = np.zeros_like(src)
    plan = [(int(dst.ctypes.data), int(src.ctypes.data), src.nbytes)]
    rate = 12.0  # GB/s: pieces of 3 MB every 250 us, ~0.52 ms in all
    call = raw_call(plan, [], 7, 8, Pacer(), rate, 250.0, gate=gate)
    t0 = time.perf_counter()
    call()
    took = time.perf_counter() - t0
    assert np.array_equal(dst, src) == (gate != "ticks")
    if gate == "host":
        assert took >= 0.9 * src.nbytes / (rate * 1e9) and not sleeps
    else:
        assert len(sleeps) == len(pieces(src.nbytes, rate, 250.0)) == 3, sleeps
        assert all(s == Pacer.handle for s, _ in sleeps), sleeps
    with pytest.raises(ValueError, match="clock, ticks or host"):
        raw_call(plan, [], 7, 8, Pacer(), rate, 250.0, gate="kernel")


def test_ipc_mappings_close_the_least_recently_used_only_when_allowed(monkeypatch):
    """The one IPC mapping cache (the Communicator's partners, the node leader's local ranks): hits reuse, the
    least recently used beyond the limit closes after before_close(), a mapping may_close() refuses stays (the
    cache grows until one may go), take() hands one over unclosed, close_all() closes the rest."""
    from hoccl_runtime import _cuda
    from hoccl_runtime.ipc import IpcMappings

    opened, closed, devices = [], [], []

    class Runtime:
        def getDevice(self):  # noqa: N802
            return 0

        def setDevice(self, d):  # noqa: N802
            devices.append(d)

        def ipcOpenMemHandle(self, handle):  # noqa: N802
            opened.append(handle)
            return 0x1000 * len(opened)

        def ipcCloseMemHandle(self, base):  # noqa: N802
            closed.append(base)

    monkeypatch.setattr(_cuda, "cupy_runtime", lambda: Runtime())
    drained, completed = [], [0]
    maps = IpcMappings(2, before_close=lambda: drained.append(1), may_close=lambda last: last <= completed[0])
    a = maps.open(b"a", 1, tag=1)
    assert maps.open(b"a", 1, tag=1) == a and opened == [b"a"]  # a hit maps nothing
    maps.open(b"b", 1, tag=2)
    maps.open(b"c", 1, tag=3)  # full, but calls 1 and 2 have not completed: nothing may close
    assert closed == [] and len(maps) == 3 and drained == [1]
    completed[0] = 2
    maps.open(b"a", 1, tag=4)  # a hit: now the most recently used, in use until call 4
    maps.open(b"d", 0, tag=5)  # b (call 2, done) goes; a and c stay (not done, or since refilled below limit)
    assert closed == [0x2000] and b"b" not in maps and b"a" in maps
    assert maps.take(b"c") == 0x3000 and b"c" not in maps and 0x3000 not in closed
    maps.close_all()
    assert sorted(closed) == [0x1000, 0x2000, 0x4000] and len(maps) == 0
    assert 0 in devices and 1 in devices  # each mapped and closed in its own GPU's context


def test_one_mailbox_slot_for_both_communicators():
    """The intra-node Communicator and the node leader publish calls in the same slot structure
    (hoccl_runtime.mailbox): named fields that tile the slot without overlap, handles 8 words each."""
    from hoccl_runtime import comm
    from hoccl_runtime.comm import nodenet
    from hoccl_runtime.mailbox import HANDLE_BYTES, SLOT, Fields

    assert comm._SLOT_WORDS == nodenet._SLOT_WORDS == SLOT.words
    starts = sorted((getattr(SLOT, name), name) for name in SLOT.names)
    sizes = {name: 8 if name.endswith("handle") else 1 for name in SLOT.names}
    at = 0
    for start, name in starts:
        assert start == at, (name, start, at)
        at += sizes[name]
    assert at == SLOT.words
    start = 8 * (100 + SLOT.out_handle)
    assert SLOT.span(100, "out_handle") == slice(start, start + HANDLE_BYTES)
    assert Fields(("a", 2), ("b", 1)).b == 2 and Fields(("a", 2), ("b", 1)).words == 3
    assert 8 * (comm._RING + 2 * comm.EAGER_SLOTS) <= comm._PAIR_BYTES  # the slots and the eager ring fit a pair


def test_call_proxy_bounds_the_calls_in_flight():
    """wait_pending(n): the caller waits (sleeping, so a Python proxy thread can run) until at most n submitted calls
    are unfinished; False on timeout; it returns at once once the proxy failed (the caller then raises its error)."""
    import time

    from hoccl_runtime.comm.net import CallProxy

    start = [0]
    proxy = CallProxy(lambda call: None, lambda call: start[0] == 1, lambda call: start.__setitem__(0, 0),
                      lambda call: None, poll_s=1e-4)
    for c in "abc":
        proxy.submit(c)
    assert not proxy.wait_pending(2, 0.05)  # 3 unfinished: the streams have not reached them
    assert proxy.wait_pending(3, 0.05)
    start[0] = 1  # the stream reaches "a"
    assert proxy.wait_pending(2, 5)
    t0 = time.monotonic()
    proxy.error = HocclError("peer died")
    assert proxy.wait_pending(0, 5) and time.monotonic() - t0 < 1
    proxy.close(timeout_s=2)


def test_a_cupy_that_cannot_reach_a_gpu_is_one_line_saying_what_is_needed(monkeypatch):
    """A CuPy built for another CUDA than the driver runs (or no driver, no GPU) answers its first call with a
    CUDARuntimeError; the runtime says so in one line naming what it needs, instead of CuPy's error deep inside."""
    import sys
    import types

    from hoccl_runtime import _cuda
    from hoccl_runtime.errors import CudaError

    class Runtime:
        def getDeviceCount(self):  # noqa: N802 - CuPy's name
            raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime "
                               "version")

    fake = types.ModuleType("cupy")
    fake.__version__ = "13.9.0"
    fake.cuda = types.SimpleNamespace(runtime=Runtime())
    monkeypatch.setitem(sys.modules, "cupy", fake)
    _cuda.cupy_runtime.cache_clear()
    try:
        with pytest.raises(CudaError) as err:
            _cuda.cupy_runtime()
        text = str(err.value)
        assert "\n" not in text and "CuPy 13.9.0 cannot reach a GPU" in text and "another CUDA" in text
        assert "hoccl[gpu,torch]" in text and "InsufficientDriver" in text
    finally:
        _cuda.cupy_runtime.cache_clear()
