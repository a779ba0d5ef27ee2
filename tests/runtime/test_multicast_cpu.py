"""Multicast plans (a forwarded copy reads what another copy wrote) on hoccl_runtime.execute, CUDA faked in host
memory with every stream on a thread of its own (tests/support/fake_cuda.py), and the runtime paths that do not
run them yet refusing them by name."""

from __future__ import annotations

import time

import fake_cuda
import numpy as np
import pytest
from fake_cuda import dev

from hoccl_runtime.errors import UnsupportedPlanError


def _slow_copies(monkeypatch, seconds: float) -> None:
    """Every faked copy waits ``seconds`` on its stream first: a copy that does not wait for the one whose bytes it
    reads then copies poison."""
    rt = fake_cuda.Runtime
    plain = rt.memcpyAsync

    def slow(self, dst, src, n, kind, stream):
        fake_cuda._issue(lambda: time.sleep(seconds), stream)
        plain(self, dst, src, n, kind, stream)

    monkeypatch.setattr(rt, "memcpyAsync", slow)


def _plan(kind: str, gpus: int, size: int, chunk: int, **kw):
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions

    topo = make_topology("paper-h800", nodes=1, gpus_per_node=gpus)
    return compile_plan(topo, CollectiveSpec(kind=kind, size_bytes=size, **kw),
                        CompileOptions(chunk_bytes=chunk, baselines=False, multicast=True))


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("root", [0, 2])
def test_a_broadcast_chain_runs_right_with_slow_copies(monkeypatch, root, in_place):
    """A 4-GPU broadcast is a chain root -> root+1 -> ...: each copy but the first reads the output the copy
    before it writes. Every copy is made slow, so a copy that did not wait for the one it reads would copy
    poison."""
    from hoccl_compiler import replay
    from hoccl_runtime.executor import Executor

    fake_cuda.install(monkeypatch, async_streams=True)
    _slow_copies(monkeypatch, 0.002)
    plan = _plan("broadcast", 4, 40_000, 4096, root=root, in_place=in_place)
    assert plan.options.multicast and any(v >= 0 for v in plan.flows.via)
    rng = np.random.default_rng(root)
    ins = [rng.integers(0, 256, n, dtype=np.uint8) for n in plan.ranks.input_bytes]
    outs = [np.full(n, 0xA5, np.uint8) for n in plan.ranks.output_bytes]
    if in_place:
        outs[root][:] = ins[root]
    bufs = {r: (None if in_place or not ins[r].size else dev(ins[r], r), dev(outs[r], r)) for r in range(4)}
    with Executor() as ex:
        ex.execute(plan, bufs, {r: 10 + r for r in range(4)})
        ex.synchronize()
        for r in range(4):  # the callers' streams (a root's own copy rides on its stream)
            fake_cuda.Runtime().streamSynchronize(10 + r)
    want = replay(plan, ins).outputs
    for r in range(4):
        assert np.array_equal(outs[r], want[r]), r
        assert np.array_equal(outs[r], ins[root]), r


def test_every_forwarded_copy_waits_on_an_event_recorded_after_the_copy_it_reads(monkeypatch):
    """The launch list itself: each copy that reads another rank's output is preceded on its stream by a wait on
    an event that was recorded, earlier in the list, right after the copy that wrote those bytes."""
    from hoccl_runtime.executor import Executor, _rank_buffers
    from hoccl_runtime.launch import Memcpy, Record, Wait

    fake_cuda.install(monkeypatch)
    plan = _plan("broadcast", 4, 3 * 8192, 8192, root=1)
    ins = [np.zeros(n, np.uint8) for n in plan.ranks.input_bytes]
    outs = [np.zeros(n, np.uint8) for n in plan.ranks.output_bytes]
    bufs = {r: (dev(ins[r], r) if ins[r].size else None, dev(outs[r], r)) for r in range(4)}
    out_ranges = {r: (outs[r].ctypes.data, outs[r].ctypes.data + outs[r].nbytes) for r in range(4)}
    with Executor() as ex:
        info = ex._info(plan)
        ranks = [_rank_buffers(plan, info, r, bufs[r]) for r in range(4)]
        ops = ex._build(plan, info, ranks, tuple(10 + r for r in range(4)), "events")
    recorded_after: dict[int, Memcpy] = {}
    last_copy: dict[int, Memcpy] = {}
    pending_wait: dict[int, int] = {}
    forwarded = 0
    for op in ops:
        if isinstance(op, Memcpy):
            if any(lo <= op.src < hi for lo, hi in out_ranges.values()):
                forwarded += 1
                ev = pending_wait.pop(op.stream, None)
                assert ev is not None, "a forwarded copy without a wait before it"
                writer = recorded_after[ev]
                assert writer.dst == op.src and writer.nbytes >= op.nbytes
            last_copy[op.stream] = op
        elif isinstance(op, Record) and op.stream in last_copy and op.event not in (0,):
            recorded_after[op.event] = last_copy[op.stream]
        elif isinstance(op, Wait) and op.event in recorded_after:
            pending_wait[op.stream] = op.event
    assert forwarded == 2 * 3  # two hops after the first, three chunks each


def test_runtime_paths_without_forwarding_refuse_a_multicast_plan_by_name():
    from hoccl_runtime.program import lower

    plan = _plan("broadcast", 4, 4096, 4096, root=0)
    with pytest.raises(UnsupportedPlanError, match="multicast plan.*--multicast off"):
        lower(plan)
    assert lower(plan, forwarded=True).waits


def test_a_forwarded_flow_reading_outside_its_sources_output_is_refused():
    from hoccl_runtime.errors import PlanError
    from hoccl_runtime.program import check_bounds

    plan = _plan("broadcast", 4, 4096, 4096, root=0)
    f = next(i for i, v in enumerate(plan.flows.via) if v >= 0)
    src = plan.flows.via[f]
    flows = plan.flows.model_copy(update={"dst_offset": [o + (1 if i == src else 0)
                                                         for i, o in enumerate(plan.flows.dst_offset)]})
    with pytest.raises(PlanError, match="forwarded flow"):
        check_bounds(plan.model_copy(update={"flows": flows}))


@pytest.mark.parametrize("nodes,L,queues,net", [(2, 2, 1, None), (3, 2, 1, None), (3, 1, 1, None), (2, 4, 1, None),
                                                (5, 2, 1, None), (2, 4, 2, None), (2, 2, 1, 700), (3, 2, 1, 700),
                                                (5, 2, 1, 5000), (2, 4, 2, 700)])
def test_the_gpu_network_executor_runs_multicast_plans_with_slow_copies(monkeypatch, nodes, L, queues, net):
    """GpuNodeExecutor, nodes of 2 and 4 GPUs (and of 1: a broadcast's chain of nodes alone; of 4: the parts
    round each further node's ring; 5 nodes of 2: a broadcast down two trees of nodes, a node sending a part on
    from two GPUs; 2 nodes of 4 GPUs with two DMA queues a GPU: an AllGather's copies dealt over both and the
    GPU's dma_recv queue, which take a stream each) over TCP between threads, CUDA faked with a stream per thread
    and every copy slow: a multicast AllGather (a block lands on its rail's GPU, which copies it on), a broadcast
    (a chain in the root's node, parts down the rails' chain of nodes, passed on inside each) and one in place,
    one after the other over the same connections: byte-equal to the replay, outputs poisoned first. ``net``: the
    network transfers in chunks of their own, smaller than the copies' 2048 B (700: no divisor of it, so a copy
    waits for the network chunk that holds its last byte) or larger; the broadcasts then go down one chain of
    nodes per rail."""
    from threaded import node_executors

    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
    from hoccl_compiler.ir import NATIVE, CompileOptions
    fake_cuda.install(monkeypatch, async_streams=True)
    _slow_copies(monkeypatch, 0.0005)
    topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L, dma_queues=queues)
    G = topo.num_gpus
    opts = CompileOptions(chunk_bytes=2048, net_chunk_bytes=net, baselines=False)
    specs = [CollectiveSpec(kind="allgather", size_bytes=G * 5003),
             CollectiveSpec(kind="broadcast", size_bytes=9001, root=1),
             CollectiveSpec(kind="broadcast", size_bytes=8191, root=G - 1, in_place=True)]
    plans = [compile_plan(topo, s, opts) for s in specs]
    assert [p.options.multicast for p in plans] == [L > 1, True, True]
    assert {p.options.net_chunk_bytes for p in plans} == {net}
    q = plans[0].queues
    native = [t for st in plans[0].stages for t, role in zip(st.transfers.queue, st.transfers.role, strict=True)
              if role == NATIVE]
    if L > 1:  # every DMA queue of a GPU and its dma_recv queue carry the AllGather's copies
        assert {q.index[t] for t in native if q.kind[t] == "dma"} == set(range(queues))
        assert {q.kind[t] for t in native} == {"dma", "dma_recv"}
    from hoccl_runtime.net.gpu import GpuNodeExecutor
    keys = set()
    stream_of = GpuNodeExecutor._stream

    def noted(self, key, device):
        keys.add(key)
        return stream_of(self, key, device)

    monkeypatch.setattr(GpuNodeExecutor, "_stream", noted)

    def arrays(plan, run):
        out = {}
        for r in range(G):
            inp = np.random.default_rng([r, run, 5]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
            o = np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8)
            n = plan.ranks.resident_bytes[r]
            if n:  # in place: the input already in the output
                o[plan.ranks.resident_offset[r]:][:n] = inp[:n]
            out[r] = (inp, o)
        return out

    data = [arrays(p, i) for i, p in enumerate(plans)]
    errors = node_executors(plans, nodes, lambda n: [{r: (dev(i, r % L), dev(o, r % L)) for r, (i, o) in d.items()
                                                      if r // L == n} for d in data], slots=2, timeout_s=20)
    assert not errors, errors
    for plan, d in zip(plans, data, strict=True):
        want = replay(plan, [d[r][0] for r in range(G)]).outputs
        for r in range(G):
            assert np.array_equal(d[r][1], want[r]), (plan.collective.kind, r)
    # the copies on a dma_recv queue went on a copy stream of their own, beside the GPU's other copies
    assert (("d2d", "recv") in keys) == (L > 1)


def test_the_host_network_executor_refuses_a_multicast_plan_by_name():
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_runtime.net.executor import HostNodeExecutor

    plan = compile_plan(make_topology("h200x2", nodes=2), CollectiveSpec(kind="allgather", size_bytes=4096))
    bufs = {r: (np.zeros(1024, np.uint8), np.zeros(4096, np.uint8)) for r in (0, 1)}
    with pytest.raises(UnsupportedPlanError, match="multicast plan.*GpuNodeExecutor"):
        HostNodeExecutor(plan, 0, bufs, transport=None)


def test_a_network_executor_refuses_a_plan_of_another_network_chunk(monkeypatch):
    """The rings' slots hold one network chunk: a plan whose network chunk differs is refused by name, while one
    that only takes larger copies runs on them."""
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.errors import TransportError
    from hoccl_runtime.net.executor import GpuNodeExecutor

    fake_cuda.install(monkeypatch, async_streams=True)
    topo = make_topology("h200x2", nodes=2)
    spec = CollectiveSpec(kind="allgather", size_bytes=4 * 3001)

    def plan(chunk, net):
        return compile_plan(topo, spec, CompileOptions(chunk_bytes=chunk, net_chunk_bytes=net, baselines=False))

    first = plan(4096, 1024)
    transport = GpuNodeExecutor.make_transport(first, 0, lanes=1, secret=b"test-job")
    bufs = {r: (dev(np.zeros(3001, np.uint8), r), dev(np.zeros(4 * 3001, np.uint8), r)) for r in (0, 1)}
    ex = GpuNodeExecutor(first, 0, bufs, transport, slots=2, timeout_s=5)
    try:
        assert ex.chunk == 1024
        ex._fits(plan(8192, 1024))  # larger copies, the same network chunk: fits
        with pytest.raises(TransportError, match="network chunks of 2048 B.*network chunks of 1024 B"):
            ex._fits(plan(4096, 2048))
        with pytest.raises(TransportError, match="network chunks of 4096 B"):
            ex._fits(plan(4096, None))
    finally:
        ex.close()
        transport.close()
