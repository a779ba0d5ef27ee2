"""Bad plans and buffers on a real GPU, on the 1-GPU machine: both ranks' buffers on GPU 0 (their copies are
same-GPU copies; this checks refusals, and that nothing outside the caller's buffers is written, not speed).
Every buffer is a view into an allocation with guard bytes before and after it, all poisoned first."""

from __future__ import annotations

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
from hoccl_compiler.ir import CompileOptions

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")

GUARD = 64 << 10
POISON = 0xA5


def _plan(kind: str, size: int = 64 << 10):
    return compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind=kind, size_bytes=size),
                        CompileOptions(chunk_bytes=16 << 10, baselines=False))


def _moved(plan, by: int):
    """One flow's destination offset moved by ``by`` bytes: well typed, it loads, it would write outside."""
    offsets = list(plan.flows.dst_offset)
    offsets[-1] += by
    return plan.model_copy(update={"flows": plan.flows.model_copy(update={"dst_offset": offsets})})


def _guarded(nbytes: int):
    whole = cp.full(nbytes + 2 * GUARD, POISON, dtype=cp.uint8)
    return whole, whole[GUARD:GUARD + nbytes]


def _buffers(plan, seed: int, out_bytes=None):
    rng = np.random.default_rng(seed)
    ins = [rng.integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8) for r in range(2)]
    wholes, bufs = [], {}
    for r in range(2):
        w_in, v_in = _guarded(ins[r].nbytes)
        v_in[:] = cp.asarray(ins[r])
        w_out, v_out = _guarded(plan.ranks.output_bytes[r] if out_bytes is None else out_bytes)
        wholes += [(w_in, ins[r]), (w_out, None)]
        bufs[r] = (v_in, v_out)
    cp.cuda.Device(0).synchronize()
    return ins, wholes, bufs


def _untouched(wholes) -> bool:
    """Every allocation as it was: inputs with their data, outputs and every guard still poisoned."""
    for whole, data in wholes:
        got = cp.asnumpy(whole)
        want = np.full(got.size, POISON, np.uint8)
        if data is not None:
            want[GUARD:GUARD + data.size] = data
        if not np.array_equal(got, want):
            return False
    return True


def test_a_tampered_plan_is_refused_and_writes_nothing():
    import hoccl_runtime as hr
    from hoccl_runtime.errors import PlanError

    good = _plan("allgather")
    bad = _moved(good, 4096)  # into the output's guard bytes
    _, wholes, bufs = _buffers(bad, 1)
    with pytest.raises(PlanError, match="fails verification"):
        hr.execute(bad, bufs)
    cp.cuda.Device(0).synchronize()
    assert _untouched(wholes)
    ins, wholes, bufs = _buffers(good, 2)  # the real plan still runs, and right, on the same executor
    hr.execute(good, bufs)
    cp.cuda.Device(0).synchronize()
    want = replay(good, ins).outputs
    for r in range(2):
        assert np.array_equal(cp.asnumpy(bufs[r][1]), want[r]), r
    assert _untouched([(w, d) for w, d in wholes if d is not None])  # inputs unchanged
    for w, d in wholes:
        if d is None:  # outputs: guards poisoned
            host = cp.asnumpy(w)
            assert (host[:GUARD] == POISON).all() and (host[-GUARD:] == POISON).all()


def test_a_plan_claiming_another_plans_id_runs_its_own_copies():
    import hoccl_runtime as hr

    first, second = _plan("allgather"), _plan("alltoall")
    spoof = second.model_copy(update={"plan_id": first.plan_id})
    for plan in (first, spoof):
        ins, _, bufs = _buffers(plan, 5)
        hr.execute(plan, bufs)
        cp.cuda.Device(0).synchronize()
        want = replay(plan, ins).outputs
        assert all(np.array_equal(cp.asnumpy(bufs[r][1]), want[r]) for r in range(2)), plan.collective.kind


def test_an_output_smaller_than_the_plan_is_refused_and_writes_nothing():
    import hoccl_runtime as hr
    from hoccl_runtime.errors import BufferError

    plan = _plan("allgather")
    _, wholes, bufs = _buffers(plan, 3, out_bytes=plan.ranks.output_bytes[0] - 512)
    with pytest.raises(BufferError, match="needs"):
        hr.execute(plan, bufs)
    cp.cuda.Device(0).synchronize()
    assert _untouched(wholes)


def test_behind_verification_the_bounds_check_still_refuses(monkeypatch):
    """Verification bypassed (as if a plan were trusted by mistake): lowering's bounds check refuses the tampered
    plan before any copy, and the guard bytes stay poisoned."""
    import hoccl_runtime as hr
    from hoccl_runtime import plans
    from hoccl_runtime.errors import PlanError

    monkeypatch.setattr(plans, "verify", lambda plan: None)
    bad = _moved(_plan("alltoall"), 4096)
    _, wholes, bufs = _buffers(bad, 4)
    with pytest.raises(PlanError, match="would copy bytes"):
        hr.execute(bad, bufs)
    cp.cuda.Device(0).synchronize()
    assert _untouched(wholes)


def test_the_gpu_network_executor_runs_only_verified_plans():
    """Across nodes on a real GPU (two "nodes" of one GPU each, both on GPU 0): a plan whose two flows' destination
    offsets were swapped (both in bounds, so only verification sees it) is refused when the executor is made and
    when a reusable executor is handed it; nothing is copied (every buffer and guard as it was), and the executor
    still prepares and releases its own plan."""
    from hoccl_runtime.errors import PlanError
    from hoccl_runtime.net.executor import GpuNodeExecutor

    good = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1),
                        CollectiveSpec(kind="allgather", size_bytes=64 << 10),
                        CompileOptions(chunk_bytes=16 << 10, baselines=False))
    offsets = list(good.flows.dst_offset)
    moving = [f for f in range(len(offsets)) if good.flows.src[f] != good.flows.dst[f]]
    a, b = moving[0], moving[1]
    offsets[a], offsets[b] = offsets[b], offsets[a]
    bad = good.model_copy(update={"flows": good.flows.model_copy(update={"dst_offset": offsets})})
    assert offsets[a] != offsets[b]
    _, wholes, bufs = _buffers(good, 3)
    transport = GpuNodeExecutor.make_transport(good, 0, lanes=1, secret=b"hostile-gpu")
    try:
        with pytest.raises(PlanError, match="fails verification"):
            GpuNodeExecutor(bad, 0, {0: bufs[0]}, transport, slots=4, timeout_s=5)
        ex = GpuNodeExecutor(good, 0, {0: bufs[0]}, transport, slots=4, timeout_s=5, reuse=True)
        try:
            with pytest.raises(PlanError, match="fails verification"):
                ex.prepare(bad)
            cp.cuda.Device(0).synchronize()
            assert _untouched(wholes)
            ex.release(ex.prepare())  # its own plan: enqueued, then let go (no peer drives it here)
        finally:
            ex.close()
    finally:
        transport.close()
