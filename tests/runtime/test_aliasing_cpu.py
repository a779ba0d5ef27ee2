"""Buffers that share memory (hoccl_runtime.aliasing), on hr.execute's executor and the network node executor with
CUDA faked in host memory: the in-place forms a plan has run right, and every other overlap is refused by name
before a byte moves (an All-to-All given one buffer as input and output ran and gave wrong outputs before)."""

from __future__ import annotations

import fake_cuda
import numpy as np
import pytest
from fake_cuda import dev

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
from hoccl_compiler.ir import CompileOptions
from hoccl_runtime.aliasing import plan_in_place
from hoccl_runtime.errors import BufferError, StreamError

OPTS = CompileOptions(chunk_bytes=1024, baselines=False)


def _plan(kind: str, size: int = 8192, **kw):
    return compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind=kind, size_bytes=size, **kw), OPTS)


def _inputs(plan, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, dtype=np.uint8) for n in plan.ranks.input_bytes]


def _run(monkeypatch, plan, bufs, streams=None):
    from hoccl_runtime.executor import Executor

    fake_cuda.install(monkeypatch)
    with Executor() as ex:
        ex.execute(plan, bufs, {0: 7, 1: 8} if streams is None else streams)


@pytest.mark.parametrize("kind", ["alltoall", "allgather"])
def test_one_buffer_as_input_and_output_is_refused_unless_it_is_the_in_place_form(monkeypatch, kind):
    plan = _plan(kind)
    ins = _inputs(plan)
    spaces = [np.full(max(plan.ranks.output_bytes[r], ins[r].size), 0xA5, np.uint8) for r in range(2)]
    for r in range(2):  # each rank's input at the start of its output
        spaces[r][:ins[r].size] = ins[r]
    bufs = {r: (dev(spaces[r][:ins[r].size], r), dev(spaces[r][:plan.ranks.output_bytes[r]], r)) for r in range(2)}
    before = [s.copy() for s in spaces]
    fix = "has no in-place form with this input: pass separate buffers" if kind == "alltoall" else \
        r"in place, pass the output's bytes \[4096, 8192\) as the input"
    with pytest.raises(BufferError, match=rf"rank \d: the input \[0x[0-9a-f]+, \+\d+\) overlaps the output .*{fix}"):
        _run(monkeypatch, plan, bufs)
    assert all(np.array_equal(a, b) for a, b in zip(spaces, before, strict=True))  # nothing moved


def test_an_allgather_given_each_input_inside_its_output_runs_in_place_right(monkeypatch):
    """NCCL's and torch's in-place AllGather (input = output[rank * n:(rank + 1) * n]) on an out-of-place plan."""
    plan = _plan("allgather")
    ins, n = _inputs(plan), plan.ranks.input_bytes[0]
    outs = [np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8) for r in range(2)]
    for r in range(2):
        outs[r][r * n:(r + 1) * n] = ins[r]
    assert [plan_in_place(plan, r) for r in range(2)] == [(0, None), (n, None)]
    _run(monkeypatch, plan, {r: (dev(outs[r][r * n:(r + 1) * n], r), dev(outs[r], r)) for r in range(2)})
    want = replay(plan, ins).outputs
    assert all(np.array_equal(outs[r], want[r]) for r in range(2))


def test_an_in_place_plan_takes_its_resident_block_and_refuses_another(monkeypatch):
    plan = _plan("allgather", in_place=True)
    n = int(plan.ranks.resident_bytes[1])
    outs = [np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8) for r in range(2)]
    with pytest.raises(BufferError, match=rf"rank 1: .* at offset 0; in place, pass the output's bytes \[{n}, {2 * n}\)"):
        _run(monkeypatch, plan, {0: (None, dev(outs[0], 0)), 1: (dev(outs[1][:n], 1), dev(outs[1], 1))})
    _run(monkeypatch, plan, {r: (dev(outs[r][r * n:(r + 1) * n], r), dev(outs[r], r)) for r in range(2)})


def test_a_scatter_root_given_its_own_block_of_the_input_as_output_runs_right(monkeypatch):
    plan = _plan("scatter", root=0)
    ins = _inputs(plan)
    m = plan.ranks.output_bytes[0]
    assert plan_in_place(plan, 0)[1] == 0
    root_in = ins[0].copy()
    out1 = np.full(plan.ranks.output_bytes[1], 0xA5, np.uint8)
    _run(monkeypatch, plan, {0: (dev(root_in, 0), dev(root_in[:m], 0)), 1: (None, dev(out1, 1))})
    want = replay(plan, ins).outputs
    assert np.array_equal(root_in[:m], want[0]) and np.array_equal(out1, want[1])


def test_ranks_that_share_an_output_or_write_into_anothers_input_are_refused(monkeypatch):
    plan = _plan("alltoall")
    ins = _inputs(plan)
    out = np.full(plan.ranks.output_bytes[0] + 512, 0xA5, np.uint8)
    shared = {0: (dev(ins[0], 0), dev(out[:8192], 0)), 1: (dev(ins[1], 1), dev(out[512:], 1))}
    with pytest.raises(BufferError, match=r"rank 0's output \[0x[0-9a-f]+, \+8192\) and rank 1's output .* share "
                                          r"bytes; give each rank buffers of its own"):
        _run(monkeypatch, plan, shared)
    into = {0: (dev(ins[0], 0), dev(out[:8192], 0)), 1: (dev(out[:8192], 1), dev(np.zeros(8192, np.uint8), 1))}
    with pytest.raises(BufferError, match=r"rank \d's (input|output) .* and rank \d's (input|output) .* share bytes"):
        _run(monkeypatch, plan, into)
    assert (out == 0xA5).all()


def test_ranks_may_read_one_input(monkeypatch):
    """Inputs are only read: two ranks may pass the same bytes."""
    plan = _plan("alltoall")
    one = _inputs(plan)[0]
    outs = [np.full(8192, 0xA5, np.uint8) for _ in range(2)]
    _run(monkeypatch, plan, {r: (dev(one, r), dev(outs[r], r)) for r in range(2)})
    want = replay(plan, [one, one]).outputs
    assert all(np.array_equal(outs[r], want[r]) for r in range(2))


def test_streams_take_a_mapping_a_list_or_none_and_refuse_anything_else(monkeypatch):
    plan = _plan("alltoall")
    ins = _inputs(plan)
    outs = [np.full(8192, 0xA5, np.uint8) for _ in range(2)]
    bufs = {r: (dev(ins[r], r), dev(outs[r], r)) for r in range(2)}
    with pytest.raises(StreamError, match="streams must be {rank: stream}, a list of streams in rank order or None, "
                                          "not a str"):
        _run(monkeypatch, plan, bufs, streams="7")
    _run(monkeypatch, plan, bufs, streams=[7, 8])
    want = replay(plan, ins).outputs
    assert all(np.array_equal(outs[r], want[r]) for r in range(2))


@pytest.mark.parametrize("preset,nodes", [("h200x2", 1), ("dgx-h100", 2)])
def test_every_allgather_plan_lets_each_rank_sit_in_its_own_block(preset, nodes):
    """From the flows alone, unicast and multicast plans (whose flows are cut in parts and forwarded) alike; an
    All-to-All has no such form."""
    topo = make_topology(preset, nodes=nodes)
    gather = compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=1 << 16), OPTS)
    n = gather.ranks.input_bytes[0]
    assert [plan_in_place(gather, r) for r in range(topo.num_gpus)] == [(r * n, None) for r in range(topo.num_gpus)]
    a2a = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=1 << 16), OPTS)
    assert {plan_in_place(a2a, r) for r in range(topo.num_gpus)} == {(None, None)}


def test_the_network_node_executor_refuses_an_overlap_before_it_moves_anything(monkeypatch):
    from hoccl_runtime.interop import DeviceBuffer
    from hoccl_runtime.net.executor import GpuNodeExecutor
    from hoccl_runtime.net.transport.tcp import TcpTransport

    fake_cuda.install(monkeypatch)
    plan = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1), CollectiveSpec(kind="allgather",
                        size_bytes=8192), CompileOptions(chunk_bytes=4096, baselines=False))
    keep = [np.zeros(4096, np.uint8), np.full(8192, 0xA5, np.uint8)]
    good = {0: (DeviceBuffer(keep[0].ctypes.data, 4096, 0), DeviceBuffer(keep[1].ctypes.data, 8192, 0))}
    bad = {0: (DeviceBuffer(keep[1].ctypes.data + 4096, 4096, 0), DeviceBuffer(keep[1].ctypes.data, 8192, 0))}
    with TcpTransport(session="t", name="node0") as transport:
        ex = GpuNodeExecutor(plan, 0, good, transport, reuse=True, slots=4)
        try:
            with pytest.raises(BufferError, match=r"rank 0: .* at offset 4096; in place, pass the output's bytes "
                                                  r"\[0, 4096\) as the input"):
                ex.prepare(plan, bad)
        finally:
            ex.close()
    assert (keep[1] == 0xA5).all()
