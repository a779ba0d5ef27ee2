"""Launch building as functions of their arguments (hoccl_runtime.comm.build.build_launch over a BuildContext, and
hoccl_runtime.comm.intranode.plan_state): the exact ops of a call, with no Communicator and no CUDA."""

from __future__ import annotations

import types

import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions
from hoccl_runtime.comm.build import BuildContext, build_launch
from hoccl_runtime.comm.intranode import plan_state
from hoccl_runtime.errors import PlanError
from hoccl_runtime.interop import DeviceBuffer
from hoccl_runtime.launch import Memcpy, Memops, Record, Wait

USER, PEER_OUT = 7, 0x900000


def flag_address(phase: int, a: int, b: int) -> int:
    return 0x1000 + 16 * phase + 4 * (2 * a + b)


def context(rank: int = 0):
    events: dict = {}
    paced: list = []
    ctx = BuildContext(rank=rank, flag=lambda ph, a, b: types.SimpleNamespace(address=flag_address(ph, a, b)),
                       event=lambda key: events.setdefault(key, 500 + len(events)),
                       side_stream=lambda slot: 90 + slot,
                       paced=lambda ops, rate, user: paced.append((rate, user, ops)) or ["paced"])
    return ctx, events, paced


def plan(kind: str = "allgather", **kw):
    return compile_plan(make_topology("h200x2"), CollectiveSpec(kind=kind, size_bytes=2 << 20, **kw),
                        CompileOptions(chunk_bytes=1 << 40, baselines=False))


def test_out_of_place_allgather_on_rank_0():
    """The handshake batch, the own block on the local side stream (started before the handshake), the send to
    rank 1 on the caller's stream, the join, the exit batch: nothing else."""
    ctx, events, _ = context()
    inp, out = DeviceBuffer(0x10000, 1 << 20, 0), DeviceBuffer(0x200000, 2 << 20, 0)
    built = build_launch(ctx, plan_state(plan(), 0, 2, "sm", None), inp, out, {1: PEER_OUT}, USER)
    pre, side = events[("pre", USER)], events[("side", 1)]
    ops = built.ops
    assert [type(op) for op in ops] == [Record, Memops, Wait, Memcpy, Record, Memcpy, Wait, Memops]
    assert ops[0] == Record(pre, USER) and ops[2].event == pre and ops[2].stream != USER
    local, send = ops[3], ops[5]
    assert (local.dst, local.src, local.nbytes) == (out.ptr, inp.ptr, 1 << 20) and local.stream == ops[2].stream
    assert (send.dst, send.src, send.nbytes, send.stream) == (PEER_OUT, inp.ptr, 1 << 20, USER)
    assert ops[4] == Record(side, local.stream) and ops[6] == Wait(USER, side)
    # entry: tell rank 1 my output may be written, then wait until its output may be; exit: the reverse
    assert ops[1].batch.ops == [("wait_eq", flag_address(0, 1, 0), 0), ("write", flag_address(0, 1, 0), 1),
                                ("wait_eq", flag_address(0, 0, 1), 1), ("write", flag_address(0, 0, 1), 0)]
    assert ops[7].batch.ops == [("wait_eq", flag_address(1, 0, 1), 0), ("write", flag_address(1, 0, 1), 1),
                                ("wait_eq", flag_address(1, 1, 0), 1), ("write", flag_address(1, 1, 0), 0)]
    assert built.local_side


def test_in_place_allgather_copies_nothing_within_the_gpu():
    ctx, _, _ = context(rank=1)
    out = DeviceBuffer(0x200000, 2 << 20, 0)
    inp = DeviceBuffer(out.ptr + (1 << 20), 1 << 20, 0)  # rank 1's own block, already in place
    built = build_launch(ctx, plan_state(plan(in_place=True), 1, 2, "sm", None), inp, out, {0: PEER_OUT}, USER)
    copies = [op for op in built.ops if isinstance(op, Memcpy)]
    assert not built.local_side and len(copies) == 1
    assert (copies[0].dst, copies[0].src, copies[0].stream) == (PEER_OUT + (1 << 20), inp.ptr, USER)


def test_peer_mode_routes_the_own_block_over_nvlink():
    """local_copies="peer": no same-GPU copy; the own block goes out and back through rank 1's output."""
    ctx, _, _ = context()
    inp, out = DeviceBuffer(0x10000, 1 << 20, 0), DeviceBuffer(0x200000, 2 << 20, 0)
    state = plan_state(plan(), 0, 2, "peer", None)
    built = build_launch(ctx, state, inp, out, {1: PEER_OUT}, USER)
    copies = [op for op in built.ops if isinstance(op, Memcpy)]
    assert not built.local_side and state.bounce and all(c.stream == USER for c in copies)
    assert any(c.dst == out.ptr for c in copies)  # my block lands in my output, copied back from the peer's
    assert all(c.src != inp.ptr or c.dst != out.ptr for c in copies)  # never input -> output on this GPU


def test_a_rate_paces_the_sends_through_the_context():
    ctx, _, paced = context()
    inp, out = DeviceBuffer(0x10000, 1 << 20, 0), DeviceBuffer(0x200000, 2 << 20, 0)
    built = build_launch(ctx, plan_state(plan(), 0, 2, "sm", None), inp, out, {1: PEER_OUT}, USER, rate=50.0)
    assert "paced" in built.ops and len(paced) == 1
    rate, user, sends = paced[0]
    assert (rate, user) == (50.0, USER) and [(c.dst, c.nbytes) for c in sends] == [(PEER_OUT, 1 << 20)]


def test_eager_layout_and_digest_follow_the_arguments():
    p = compile_plan(make_topology("h200x2"), CollectiveSpec(kind="sendrecv", pairs=((0, 1, 4096),)),
                     CompileOptions(chunk_bytes=1 << 40, baselines=False))
    assert plan_state(p, 0, 2, "sm", 1 << 20).eager is not None
    assert plan_state(p, 0, 2, "sm", 1024).eager is None  # 4 KiB does not fit a 1 KiB slot
    assert plan_state(p, 0, 2, "sm", None).eager is None
    assert plan_state(p, 0, 2, "sm", None).digest != plan_state(p, 0, 2, "peer", None).digest


def test_a_helped_rank_without_its_input_address_is_refused():
    gather = compile_plan(make_topology("h200x2"), CollectiveSpec(kind="gather", size_bytes=2 << 20, root=0),
                          CompileOptions(chunk_bytes=1 << 40, baselines=False))
    states = [plan_state(gather, r, 2, "peer", None) for r in range(2)]
    helper = next((r for r, st in enumerate(states) if st.helped is not None), None)
    if helper is None:
        pytest.skip("no rank helps another in this plan")
    ctx, _, _ = context(rank=helper)
    with pytest.raises(PlanError, match="sent no input address"):
        build_launch(ctx, states[helper], DeviceBuffer(0x10000, 1 << 20, 0), DeviceBuffer(0x200000, 2 << 20, 0),
                     {states[helper].helped: PEER_OUT}, USER, helped_in=None)


def test_an_eager_send_and_its_receive():
    """The eager path's ops on both sides of a 4 KiB send/recv: the sender waits for its slot to be empty, copies
    into the receiver's staging (mapped here), marks it full; the receiver waits for full, copies out, marks it
    empty. All on the caller's stream, addresses from the context."""
    import dataclasses

    from hoccl_runtime.comm.eager import eager_ops

    p = compile_plan(make_topology("h200x2"), CollectiveSpec(kind="sendrecv", pairs=((0, 1, 4096),)),
                     CompileOptions(chunk_bytes=1 << 40, baselines=False))
    slot_bytes, slot = 1 << 20, 2

    def ctx(rank):
        base, _, _ = context(rank)
        return dataclasses.replace(base, slot_flag=lambda a, b, j: types.SimpleNamespace(address=0x8000 + 64 * a +
                                                                                            16 * b + 4 * j),
                                   slot_bytes=slot_bytes, stage_in={1 - rank: 0x500000}, stage_out={1 - rank: 0x600000})

    full = 0x8000 + 64 * 0 + 16 * 1 + 4 * slot  # FULL of slot 2 for messages 0 -> 1
    inp = DeviceBuffer(0x10000, 4096, 0)
    send = eager_ops(ctx(0), plan_state(p, 0, 2, "sm", slot_bytes).eager, inp, None, {1: slot}, USER)
    assert [type(op) for op in send] == [Memops, Memcpy, Memops]
    assert send[0].batch.ops == [("wait_eq", full, 0)] and send[2].batch.ops == [("write", full, 1)]
    assert (send[1].dst, send[1].src, send[1].nbytes, send[1].stream) == (0x600000 + slot * slot_bytes, inp.ptr,
                                                                          4096, USER)
    out = DeviceBuffer(0x20000, 4096, 0)
    recv = eager_ops(ctx(1), plan_state(p, 1, 2, "sm", slot_bytes).eager, None, out, {0: slot}, USER)
    assert [type(op) for op in recv] == [Memops, Memcpy, Memops]
    assert recv[0].batch.ops == [("wait_eq", full, 1)] and recv[2].batch.ops == [("write", full, 0)]
    assert (recv[1].dst, recv[1].src, recv[1].nbytes) == (out.ptr, 0x500000 + slot * slot_bytes, 4096)
