"""The runtime never runs an unverified plan, and knows plans by their content, not the id they claim."""

from __future__ import annotations

import fake_cuda
import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
from hoccl_compiler.ir import CompileOptions
from hoccl_runtime import _trust
from hoccl_runtime.errors import PlanError
from hoccl_runtime.interop import DeviceBuffer

OPTS = CompileOptions(chunk_bytes=1 << 30, baselines=False)


def _plan(kind="allgather", size=4096):
    return compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind=kind, size_bytes=size), OPTS)


def _moved(plan, by=1 << 30):
    """The plan with one flow's destination offset moved by ``by`` bytes: well typed, loads, would write outside."""
    offsets = list(plan.flows.dst_offset)
    offsets[-1] += by
    return plan.model_copy(update={"flows": plan.flows.model_copy(update={"dst_offset": offsets})})


def _buffers(plan, seed):
    ins = [np.random.default_rng(seed + r).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
           for r in range(2)]
    outs = [np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8) for r in range(2)]
    bufs = {r: (DeviceBuffer(ins[r].ctypes.data, ins[r].nbytes, r),
                DeviceBuffer(outs[r].ctypes.data, outs[r].nbytes, r)) for r in range(2)}
    return ins, outs, bufs


def test_a_tampered_plan_is_refused_before_any_copy(monkeypatch):
    fake_cuda.install(monkeypatch)
    from hoccl_runtime.executor import Executor

    bad = _moved(_plan())
    ins, outs, bufs = _buffers(bad, 1)
    copies = []
    with Executor() as ex:
        monkeypatch.setattr(ex, "_build", lambda *a, **k: copies.append(a) or [])
        with pytest.raises(PlanError, match=r"fails verification, so the runtime will not run it .* recompile"):
            ex.execute(bad, bufs, {0: 7, 1: 8})
    assert not copies and all((o == 0xA5).all() for o in outs)


def test_a_plan_claiming_another_plans_id_runs_its_own_copies(monkeypatch):
    fake_cuda.install(monkeypatch)
    from hoccl_runtime.executor import Executor

    first, second = _plan("allgather", 4096), _plan("alltoall", 4096)
    spoof = second.model_copy(update={"plan_id": first.plan_id})  # valid, but not the plan that id names
    with Executor() as ex:
        for plan in (first, spoof):
            ins, outs, bufs = _buffers(plan, 5)
            ex.execute(plan, bufs, {0: 7, 1: 8})
            want = replay(plan, ins).outputs
            assert all(np.array_equal(outs[r], want[r]) for r in range(2)), plan.collective.kind


def test_the_verdict_is_cached_by_content(monkeypatch):
    import hoccl_compiler.verify as verify

    calls = []
    real = verify.verify_plan
    monkeypatch.setattr(verify, "verify_plan", lambda p, **k: calls.append(p.plan_id) or real(p, **k))
    plan = _plan("allgather", 8192)
    same = plan.model_copy(deep=True)  # another object, the same content
    assert _trust.trusted(plan) == _trust.trusted(same) == _trust.plan_uid(plan)
    assert calls == [plan.plan_id]
    with pytest.raises(PlanError, match="fails verification"):
        _trust.trusted(_moved(plan, 8))  # one byte range changed: another content, verified again, refused
    assert len(calls) == 2


def test_behind_verification_lowering_keeps_every_copy_inside_the_buffers(monkeypatch):
    """Were verification skipped (a bug, or a plan trusted by mistake), lowering still refuses a copy outside the
    plan's buffer sizes, which every call checks the buffers against: the last line before the copy engines."""
    fake_cuda.install(monkeypatch)
    from hoccl_runtime import plans
    from hoccl_runtime.executor import Executor
    from hoccl_runtime.program import check_bounds

    monkeypatch.setattr(plans, "verify", lambda plan: None)  # verification bypassed
    monkeypatch.setattr(_trust, "_VERIFIED", type(_trust._VERIFIED)())  # ... and its verdicts forgotten after
    bad = _moved(_plan(), 8)  # the last flow's last bytes now end 8 bytes past its rank's output
    with pytest.raises(PlanError, match=r"would copy bytes \[\d+, \d+\) of rank \d's output, which holds 4096"):
        check_bounds(bad)
    check_bounds(_plan())  # a good plan passes
    ins, outs, bufs = _buffers(bad, 1)
    with Executor() as ex, pytest.raises(PlanError, match="would copy bytes"):
        ex.execute(bad, bufs, {0: 7, 1: 8})
    assert all((o == 0xA5).all() for o in outs)


def test_the_node_executor_refuses_a_plan_that_reaches_outside_its_buffers(monkeypatch):
    """The same bound in GpuNodeExecutor.prepare, for plans handed to it directly (not compiled by a communicator),
    behind verification (bypassed here)."""
    fake_cuda.install(monkeypatch)
    from hoccl_runtime import plans

    monkeypatch.setattr(plans, "verify", lambda plan: None)  # verification bypassed
    monkeypatch.setattr(_trust, "_VERIFIED", type(_trust._VERIFIED)())  # ... and its verdicts forgotten after

    plan = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1), CollectiveSpec(kind="allgather",
                        size_bytes=8192), CompileOptions(chunk_bytes=4096, baselines=False))  # small rings
    bad = _moved(plan, 1 << 30)
    keep = _refused_by_prepare(plan, bad, "would copy bytes")
    assert (keep[1] == 0xA5).all()


def _refused_by_prepare(plan, bad, text: str, *, at_construction: bool = False) -> list:
    """Node 0's GpuNodeExecutor of ``plan`` (a 2 x 1 AllGather of 8 KiB) on host arrays faked as GPU memory, handed
    ``bad`` (prepare raises a PlanError matching ``text``; ``at_construction``: so does making one of ``bad``); its
    (input, output) arrays, for the caller to check that nothing was written."""
    from hoccl_runtime.net.executor import GpuNodeExecutor
    from hoccl_runtime.net.transport.tcp import TcpTransport

    keep = [np.zeros(4096, np.uint8), np.full(8192, 0xA5, np.uint8)]
    bufs = {0: (DeviceBuffer(keep[0].ctypes.data, 4096, 0), DeviceBuffer(keep[1].ctypes.data, 8192, 0))}
    with TcpTransport(session="t", name="node0") as transport:
        if at_construction:
            with pytest.raises(PlanError, match=text):
                GpuNodeExecutor(bad, 0, bufs, transport, reuse=True, slots=4)
        ex = GpuNodeExecutor(plan, 0, bufs, transport, reuse=True, slots=4)
        try:
            with pytest.raises(PlanError, match=text):
                ex.prepare(bad, bufs)
        finally:
            ex.close()
    return keep


def _unchecked_stage(stage: dict):
    """A Stage model of ``stage`` as given, even with values the schema refuses (a plan file with an integer past
    int64 never loads; a plan built in code may still carry one, and the runtime's bounds check must refuse it)."""
    from hoccl_compiler.schema import Stage, TransferTable

    return Stage.model_construct(**{**stage, "transfers": TransferTable.model_construct(**stage["transfers"])})


def test_the_vectorized_bounds_check_agrees_with_the_one_by_one_check():
    """check_bounds checks whole stages with NumPy and names a bad transfer by the per-transfer check: on random
    corruptions of a real plan (offsets, sizes, flows moved, huge values NumPy cannot hold) both refuse the same
    plans, with the same message."""
    import random

    from hoccl_runtime.program import _check_stage_bounds, check_bounds

    base = compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind="alltoall", size_bytes=8192),
                        CompileOptions(chunk_bytes=1024, baselines=False))
    rng = random.Random(7)
    refused = 0
    for _ in range(300):
        data = base.model_dump()
        stage = rng.randrange(len(data["stages"]))
        tr = data["stages"][stage]["transfers"]
        where = rng.choice([("t", "offset"), ("t", "bytes"), ("t", "flow"), ("f", "src_offset"), ("f", "dst_offset"),
                            ("f", "src"), ("f", "dst")])
        column = tr[where[1]] if where[0] == "t" else data["flows"][where[1]]
        i = rng.randrange(len(column))
        column[i] += rng.choice([1, -1, 4096, -(1 << 20), 1 << 62, 1 << 70])
        plan = type(base).model_construct(**{**base.__dict__, "stages": [_unchecked_stage(s) for s in data["stages"]],
                                             "flows": type(base.flows).model_construct(**data["flows"])})
        expected = None
        try:
            for s in plan.stages:
                _check_stage_bounds(plan, s)
        except PlanError as exc:
            expected = str(exc)
        try:
            check_bounds(plan)
            got = None
        except PlanError as exc:
            got = str(exc)
        assert got == expected, (where, i)
        refused += got is not None
    assert 50 < refused < 300  # both outcomes seen


def _swapped(plan):
    """The plan with two flows' destination offsets swapped: both stay inside the buffers, so only the
    verifier (the byte layout of the collective) can tell; run, the output would be silently wrong."""
    offsets = list(plan.flows.dst_offset)
    j = next(j for j in range(1, len(offsets)) if offsets[j] != offsets[0])
    offsets[0], offsets[j] = offsets[j], offsets[0]
    return plan.model_copy(update={"flows": plan.flows.model_copy(update={"dst_offset": offsets})})


@pytest.mark.parametrize("edit", ["swap", "negative", "far"])
def test_executors_across_nodes_run_only_verified_plans(monkeypatch, edit):
    """Both node executors go through the runtime's one door (verify_plan, cached by content): a plan whose offsets
    were edited is a PlanError before any copy, at construction and when a reusable executor is handed it later
    (GpuNodeExecutor queued the swapped copy at 4096 instead of 0; a negative offset wrapped in NumPy; +1 GiB was
    a bare ValueError). Plans the runtime compiled itself (plans.compile_call) pass without being verified again."""
    fake_cuda.install(monkeypatch)
    from hoccl_runtime.net.executor import HostNodeExecutor
    from hoccl_runtime.net.transport.tcp import TcpTransport
    from hoccl_runtime.plans import CallKey, compile_call

    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    plan = compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=8192),
                        CompileOptions(chunk_bytes=4096, baselines=False))
    bad = {"swap": _swapped(plan), "negative": _moved(plan, -(1 << 20)), "far": _moved(plan, 1 << 30)}[edit]
    host = {0: (np.zeros(4096, np.uint8), np.full(8192, 0xA5, np.uint8))}
    with TcpTransport(session="t", name="node0") as transport:
        with pytest.raises(PlanError, match="fails verification"):
            HostNodeExecutor(bad, 0, host, transport, reuse=True)
        ex = HostNodeExecutor(plan, 0, host, transport, reuse=True)
        with pytest.raises(PlanError, match="fails verification"):
            ex.run(bad, host)
    keep = _refused_by_prepare(plan, bad, "fails verification", at_construction=True)
    assert (keep[1] == 0xA5).all() and (host[0][1] == 0xA5).all()
    own = compile_call(topo, CallKey.allgather(8192), 4096)
    monkeypatch.setattr(_trust, "trusted", lambda plan: pytest.fail("a plan the runtime compiled was verified again"))
    _trust.verified(own)
    with pytest.raises(BaseException, match="verified again"):
        _trust.verified(plan)  # a plan from outside is (here: the door calls trusted)
