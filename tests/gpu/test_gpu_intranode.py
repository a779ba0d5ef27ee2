"""Single-process, multi-GPU replay on copy engines (run on the 2-GPU machine; skipped elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.collective import layout
from hoccl_compiler.ir import CompileOptions
from hoccl_runtime.errors import HocclError

pytestmark = pytest.mark.multi_gpu(2)

BIG_CHUNK = 1 << 30


def plan_for(spec: CollectiveSpec, chunk: int = BIG_CHUNK):
    return compile_plan(make_topology("h200x2", nodes=1), spec, CompileOptions(chunk_bytes=chunk, baselines=False))


def run_and_check(plan, *, sync="flags", streams="new", in_place=False, seed=None, executor=None, gpus=None):
    """Fresh random inputs, poisoned outputs, execute (on ``executor``, else hoccl_runtime's default one),
    compare with the layout on the host. Rank r's buffers are on GPU r, or on GPU r % ``gpus``."""
    import cupy as cp

    import hoccl_runtime as hr

    G = plan.num_ranks
    rng = np.random.default_rng(seed)
    lay = layout(plan.collective, G)
    inputs, outputs, bufs, strm = [], [], {}, {}
    gpu = [r % gpus if gpus else r for r in range(G)]
    for r in range(G):
        with cp.cuda.Device(gpu[r]):
            host_in = rng.integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
            out = cp.full(plan.ranks.output_bytes[r], 0xA5, dtype=cp.uint8)
            if in_place:
                off, n = (int(x[r]) for x in lay.resident())
                out[off:off + n] = cp.asarray(host_in)
                inp = None
            else:
                inp = cp.asarray(host_in)
            s = cp.cuda.Stream(non_blocking=True) if streams == "new" else None
            inputs.append(host_in)
            outputs.append(out)
            bufs[r] = (inp, out)
            strm[r] = s
    for r in range(G):
        cp.cuda.Device(gpu[r]).synchronize()
    (executor.execute if executor is not None else hr.execute)(plan, bufs, strm, sync=sync)
    for r in range(G):
        with cp.cuda.Device(gpu[r]):
            (strm[r] or cp.cuda.Stream.null).synchronize()
    for r in range(G):
        got = cp.asnumpy(outputs[r])
        expected = np.full(plan.ranks.output_bytes[r], 0xA5, dtype=np.uint8)
        off, n = (int(x[r]) for x in lay.resident())
        expected[off:off + n] = inputs[r][:n]
        for i in np.nonzero(lay.dst == r)[0]:
            expected[lay.dst_offset[i]:lay.dst_offset[i] + lay.bytes[i]] = \
                inputs[lay.src[i]][lay.src_offset[i]:lay.src_offset[i] + lay.bytes[i]]
        assert np.array_equal(got, expected), f"rank {r}: first wrong byte {np.nonzero(got != expected)[0][:1]}"


SPECS = [
    lambda n: CollectiveSpec(kind="allgather", size_bytes=2 * n),
    lambda n: CollectiveSpec(kind="alltoall", size_bytes=2 * n),
    lambda n: CollectiveSpec(kind="alltoallv", matrix=((n, 2 * n + 1), (3, n + 7))),
    lambda n: CollectiveSpec(kind="broadcast", size_bytes=n, root=1),
    lambda n: CollectiveSpec(kind="scatter", size_bytes=2 * n, root=0),
    lambda n: CollectiveSpec(kind="gather", size_bytes=2 * n, root=1),
    lambda n: CollectiveSpec(kind="sendrecv", pairs=((0, 1, n), (1, 0, n + 5))),
]


@pytest.mark.parametrize("sync", ["flags", "events"])
@pytest.mark.parametrize("n", [1, 7, 4099, (1 << 20) + 3, 48 << 20])
@pytest.mark.parametrize("make", SPECS, ids=[f"c{i}" for i in range(len(SPECS))])
def test_collectives_correct(make, n, sync):
    run_and_check(plan_for(make(n)), sync=sync)


@pytest.mark.parametrize("n", [1, 4099, 48 << 20])
@pytest.mark.parametrize("make", SPECS, ids=[f"c{i}" for i in range(len(SPECS))])
def test_collectives_correct_with_own_blocks_through_the_peer(make, n):
    from hoccl_runtime.executor import Executor

    with Executor(local_copies="peer") as ex:
        run_and_check(plan_for(make(n)), executor=ex)
        run_and_check(plan_for(make(n)), executor=ex, sync="events")


def test_own_blocks_through_the_peer_need_no_sm():
    """An out-of-place AllGather and All-to-All beside a kernel that holds every SM of GPU 0: with
    local_copies="peer" they end long before it; with "sm" GPU 0's own-block copy (a kernel of the CUDA
    driver 580) waits for it. If a later driver runs same-GPU copies on copy engines, the second half
    fails: then the default mode is SM-free too (docs/architecture.md, same-GPU copies)."""
    import cupy as cp

    from hoccl_bench.smfree import SmProbe
    from hoccl_runtime.executor import Executor

    probe = SmProbe(0, hold_ms=100.0)
    for spec in (CollectiveSpec(kind="allgather", size_bytes=2 * (8 << 20)),
                 CollectiveSpec(kind="alltoall", size_bytes=2 * (8 << 20))):
        plan = plan_for(spec)
        bufs, strm = {}, {}
        for r in range(2):
            with cp.cuda.Device(r):
                bufs[r] = (cp.ones(plan.ranks.input_bytes[r], cp.uint8), cp.zeros(plan.ranks.output_bytes[r], cp.uint8))
                strm[r] = cp.cuda.Stream(non_blocking=True)
        verdicts = {}
        for mode in ("peer", "sm"):
            with Executor(local_copies=mode) as ex:
                ex.execute(plan, bufs, strm)  # warm: launch list, peer access
                ex.synchronize()
                for r in range(2):
                    strm[r].synchronize()
                verdicts[mode] = probe.sm_free(lambda ex=ex, p=plan, b=bufs, s=strm: ex.execute(p, b, s), strm[0].ptr)
                for r in range(2):
                    strm[r].synchronize()
        assert verdicts == {"peer": True, "sm": False}, (spec.kind, verdicts)


@pytest.mark.parametrize("queues", [2, 3])
@pytest.mark.parametrize("n", [(1 << 20) + 3, 24 << 20])
@pytest.mark.parametrize("kind", ["allgather", "alltoall"])
def test_several_dma_queues_per_rank(kind, n, queues):
    """Plans whose ranks spread their peers over 2 or 3 copy streams each (HOCCL_DMA_QUEUES; for NVSwitch
    machines, where several copy engines run at once): 4 ranks, two on each GPU (on 2 GPUs a rank has one
    peer, and one queue carries it all), right in both sync modes."""
    topo = make_topology("h200x2", nodes=1, gpus_per_node=4, dma_queues=queues)
    plan = compile_plan(topo, CollectiveSpec(kind=kind, size_bytes=4 * n), CompileOptions(baselines=False))
    from hoccl_runtime.program import dma_queues, lower

    prog = lower(plan)
    assert all(len(dma_queues(prog, plan.queues.kind, r)) > 1 for r in range(4))  # the case this test is for
    run_and_check(plan, gpus=2)
    run_and_check(plan, sync="events", gpus=2)


def test_allgather_1gib_and_chunked_plan():
    run_and_check(plan_for(CollectiveSpec(kind="allgather", size_bytes=1 << 30)))
    run_and_check(plan_for(CollectiveSpec(kind="alltoall", size_bytes=64 << 20), chunk=4 << 20))


def test_legacy_default_stream_and_in_place():
    import cupy as cp

    run_and_check(plan_for(CollectiveSpec(kind="allgather", size_bytes=2 * 3001)), streams=None)
    for current in (1, 0):  # the legacy stream is "the current device's": any current device must work
        cp.cuda.runtime.setDevice(current)
        run_and_check(plan_for(CollectiveSpec(kind="alltoall", size_bytes=2 * 5003)), streams=None)
        assert cp.cuda.runtime.getDevice() == current  # and the caller's current device is left alone
    run_and_check(plan_for(CollectiveSpec(kind="allgather", size_bytes=2 * 3001, in_place=True)), in_place=True)
    run_and_check(plan_for(CollectiveSpec(kind="broadcast", size_bytes=999, root=0, in_place=True)), in_place=True)


def test_repeated_calls_reuse_flags():
    plan = plan_for(CollectiveSpec(kind="alltoall", size_bytes=2 * 65536))
    for _ in range(50):
        run_and_check(plan)


def test_bad_buffers_are_refused():
    import cupy as cp

    import hoccl_runtime as hr
    from hoccl_runtime.errors import BufferError, UnsupportedPlanError

    plan = plan_for(CollectiveSpec(kind="allgather", size_bytes=2 * 1024))
    with cp.cuda.Device(0):
        a_in, a_out = cp.zeros(1024, cp.uint8), cp.zeros(2048, cp.uint8)
    with cp.cuda.Device(1):
        b_in, b_out = cp.zeros(1024, cp.uint8), cp.zeros(2048, cp.uint8)
        short = cp.zeros(1000, cp.uint8)
        strided = cp.zeros((2048, 2), cp.uint8)[:, 0]
    with pytest.raises(BufferError, match="1000 bytes but plan .* needs 1024"):
        hr.execute(plan, {0: (a_in, a_out), 1: (short, b_out)})
    with pytest.raises(BufferError, match="host memory"):
        hr.execute(plan, {0: (a_in, a_out), 1: (np.zeros(1024, np.uint8), b_out)})
    with pytest.raises(BufferError, match="not C-contiguous"):
        hr.execute(plan, {0: (a_in, a_out), 1: (b_in, strided)})
    with pytest.raises(BufferError, match="for 2 ranks"):
        hr.execute(plan, {0: (a_in, a_out)})
    with pytest.raises(BufferError, match="different GPUs"):
        hr.execute(plan, {0: (a_in, a_out), 1: (b_in, a_out)})
    inter = compile_plan(make_topology("h200x2", nodes=2), CollectiveSpec(kind="allgather", size_bytes=4 * 1024))
    with pytest.raises(UnsupportedPlanError, match="inter-node"):
        hr.execute(inter, {r: (a_in, a_out) for r in range(4)})
    with pytest.raises(HocclError, match="sync="):
        hr.execute(plan, {0: (a_in, a_out), 1: (b_in, b_out)}, sync="spin")


def test_torch_tensors_bf16():
    torch = pytest.importorskip("torch")

    import hoccl_runtime as hr

    plan = plan_for(CollectiveSpec(kind="allgather", size_bytes=2 * 2 * 1000))  # 1000 bf16 per rank
    ins = [torch.randn(1000, device=f"cuda:{r}").to(torch.bfloat16) for r in range(2)]
    outs = [torch.full((2000,), float("nan"), device=f"cuda:{r}", dtype=torch.bfloat16) for r in range(2)]
    streams = [torch.cuda.Stream(device=r) for r in range(2)]
    hr.execute(plan, {r: (ins[r], outs[r]) for r in range(2)}, {r: streams[r] for r in range(2)})
    for r in range(2):
        streams[r].synchronize()
    expected = torch.cat([ins[0].cpu(), ins[1].cpu()])
    for r in range(2):
        assert torch.equal(outs[r].cpu(), expected)


def test_executor_close_cycles():
    from hoccl_runtime.executor import Executor

    plan = plan_for(CollectiveSpec(kind="allgather", size_bytes=2 * 4096))
    import cupy as cp

    bufs = {}
    for r in range(2):
        with cp.cuda.Device(r):
            bufs[r] = (cp.zeros(4096, cp.uint8), cp.zeros(8192, cp.uint8))
    for _ in range(100):
        with Executor() as ex:
            ex.execute(plan, bufs)
            ex.synchronize()
        assert ex.closed


def test_cuda_graph_capture_replays_with_fresh_data():
    """Captured once (rank 0's stream originates, rank 1's joins), replayed 20 times on new inputs."""
    import cupy as cp

    import hoccl_runtime as hr

    plan = plan_for(CollectiveSpec(kind="alltoall", size_bytes=2 * 333_333))
    rng = np.random.default_rng()
    streams, ins, outs = {}, {}, {}
    for r in range(2):
        with cp.cuda.Device(r):
            streams[r] = cp.cuda.Stream(non_blocking=True)
            ins[r] = cp.zeros(plan.ranks.input_bytes[r], cp.uint8)
            outs[r] = cp.zeros(plan.ranks.output_bytes[r], cp.uint8)
    bufs = {r: (ins[r], outs[r]) for r in range(2)}
    hr.execute(plan, bufs, streams)
    for r in range(2):
        cp.cuda.Device(r).synchronize()
    with cp.cuda.Device(0):
        streams[0].begin_capture()
        fork = cp.cuda.Event(disable_timing=True)
        fork.record(streams[0])
    with cp.cuda.Device(1):
        streams[1].wait_event(fork)
    hr.execute(plan, bufs, streams)
    with cp.cuda.Device(1):
        join = cp.cuda.Event(disable_timing=True)
        join.record(streams[1])
    with cp.cuda.Device(0):
        streams[0].wait_event(join)
        graph = streams[0].end_capture()
    lay = layout(plan.collective, 2)
    for _ in range(20):
        host = {r: rng.integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8) for r in range(2)}
        for r in range(2):
            with cp.cuda.Device(r):
                ins[r].set(host[r])
                outs[r].fill(0xA5)
                cp.cuda.Device(r).synchronize()
        with cp.cuda.Device(0):
            graph.launch(streams[0])
            streams[0].synchronize()
        for r in range(2):
            got = cp.asnumpy(outs[r])
            for i in np.nonzero(lay.dst == r)[0]:
                want = host[lay.src[i]][lay.src_offset[i]:lay.src_offset[i] + lay.bytes[i]]
                assert np.array_equal(got[lay.dst_offset[i]:lay.dst_offset[i] + lay.bytes[i]], want)
