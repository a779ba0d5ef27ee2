"""Multicast plans on hoccl_runtime.execute on a real GPU (ranks share GPU 0 where there is one): a broadcast's
chain, each copy reading what the one before it wrote, chunk after chunk, with CUDA events between the copy
streams. Fresh random data, poisoned outputs.

The network executor's nodes are threads of one process in most tests here, all on GPU 0: 18 copy streams for 3
nodes of 2 ranks. With CUDA's default 8 hardware queues their waits shared queues and interleaved in any order (the
3x2 cases hung on 1x H100s, 2026-12-06), which no launch order of a node can prevent. So this module asks for 32
queues where none are set (before CUDA starts: pytest imports every module before any test runs, so the whole pytest
process and the processes it starts get them; the tests of CUDA_DEVICE_MAX_CONNECTIONS=1 set theirs); with them all
11 cases passed on a 1x H100 (2026-12-06). A node per process (the communicators' way) is covered by
hoccl_runtime/net/order.py; ``test_multicast_plans_on_gpu_node_processes`` runs it so, each node process back on
CUDA's default queues (its 4 cases and the module's other 11 passed on another 1x H100, 2026-12-06, with the same
inputs in every run; with fresh inputs for each run, as now, all 15 passed on a third 1x H100 the same day)."""

from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

import numpy as np  # noqa: E402
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("sync", ["events", "flags"])
@pytest.mark.parametrize("gpus,root,in_place", [(4, 0, False), (4, 2, True), (8, 5, False)])
def test_a_broadcast_chain_on_copy_engines(gpus, root, in_place, sync):
    import cupy as cp

    import hoccl_runtime as hr

    n_dev = cp.cuda.runtime.getDeviceCount()
    size = (24 << 20) + 4099  # chunks of 1 MiB and a ragged tail
    plan = compile_plan(make_topology("h200x2", nodes=1, gpus_per_node=gpus),
                        CollectiveSpec(kind="broadcast", size_bytes=size, root=root, in_place=in_place),
                        CompileOptions(chunk_bytes=1 << 20, baselines=False))
    assert plan.options.multicast and sum(v >= 0 for v in plan.flows.via) == gpus - 2
    rng = np.random.default_rng([gpus, root, int(in_place)])
    for rep in range(2):  # the second call replays the cached launch list with its events
        data = rng.integers(0, 256, size, dtype=np.uint8)
        bufs, streams = {}, {}
        for r in range(gpus):
            with cp.cuda.Device(r % n_dev):
                out = cp.full(size, 0xA5, dtype=cp.uint8)
                inp = None
                if r == root:
                    if in_place:
                        out[:] = cp.asarray(data)
                    else:
                        inp = cp.asarray(data)
                bufs[r] = (inp, out)
                streams[r] = cp.cuda.Stream(non_blocking=True)
        for d in range(min(n_dev, gpus)):
            cp.cuda.Device(d).synchronize()
        hr.execute(plan, bufs, streams, sync=sync)
        for r in range(gpus):
            with cp.cuda.Device(r % n_dev):
                streams[r].synchronize()
                got = cp.asnumpy(bufs[r][1])
            assert np.array_equal(got, data), (rep, r, int(np.count_nonzero(got != data)))


def _multicast_plans(nodes: int, L: int, net: int | None) -> list:
    """A multicast AllGather (unicast where L is 1) and two Broadcasts, one in place, on ``nodes`` nodes of ``L``
    ranks, in 1 MiB chunks with network chunks of ``net`` bytes (None: the copies' size), ragged sizes."""
    topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L)
    G = topo.num_gpus
    opts = CompileOptions(chunk_bytes=1 << 20, net_chunk_bytes=net, baselines=False)
    plans = [compile_plan(topo, s, opts) for s in (
        CollectiveSpec(kind="allgather", size_bytes=G * ((3 << 20) + 5)),
        CollectiveSpec(kind="broadcast", size_bytes=(5 << 20) + 3, root=1),
        CollectiveSpec(kind="broadcast", size_bytes=(4 << 20) + 1, root=G - 1, in_place=True))]
    assert [p.options.multicast for p in plans] == [L > 1, True, True]
    return plans


@pytest.mark.parametrize("nodes,L,net", [(2, 2, None), (3, 1, None), (3, 2, None), (2, 2, 300_000),
                                              (3, 2, 256 << 10)])
def test_multicast_plans_on_the_gpu_network_executor_over_tcp(nodes, L, net):
    """GpuNodeExecutor, one thread per node joined by TCP on this machine, every rank's buffers on GPU 0 (2 nodes
    of 2 ranks sharing it, or 3 nodes of 1 or 2): a multicast AllGather and broadcasts (a chain in the root's node and
    down the nodes), outputs poisoned, byte-equal to the compiler's replay. ``net``: the network transfers in chunks
    of their own under the 1 MiB copies (300,000 B: no divisor of them). On a 1x H100 (2026-12-06) the 3x2 AllGather
    with 256 KiB network chunks hung (no progress for 60 s; the 3x2 case without one had not run): the nodes are
    threads of one process here, so their streams shared the GPU's hardware queues (see the module's docstring)."""
    import cupy as cp
    from threaded import node_executors

    from hoccl_compiler import replay

    plans = _multicast_plans(nodes, L, net)
    G = plans[0].num_ranks
    host = [_poisoned_data(plan, [nodes, L, i]) for i, plan in enumerate(plans)]
    with cp.cuda.Device(0):
        dev = [({r: (cp.asarray(i[r]), cp.asarray(o[r])) for r in range(G)}) for i, o in host]
    errors = node_executors(plans, nodes, lambda n: [{r: b for r, b in d.items() if r // L == n} for d in dev],
                            setup=lambda: cp.cuda.Device(0).use(), secret=b"gpu-test", timeout_s=60)
    assert not errors, errors
    cp.cuda.Device(0).synchronize()
    for plan, (ins, _), d in zip(plans, host, dev, strict=True):
        want = replay(plan, ins).outputs
        for r in range(G):
            assert np.array_equal(cp.asnumpy(d[r][1]), want[r]), (plan.collective.kind, r)


def _poisoned_data(plan, seed) -> tuple[list, list]:
    """Fresh random inputs of every rank of ``plan`` and its poisoned outputs (0xA5, the resident bytes in place)."""
    rng = np.random.default_rng(seed)
    ins = [rng.integers(0, 256, n, dtype=np.uint8) for n in plan.ranks.input_bytes]
    outs = []
    for r in range(plan.num_ranks):
        o = np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8)
        n = plan.ranks.resident_bytes[r]
        if n:
            o[plan.ranks.resident_offset[r]:][:n] = ins[r][:n]
        outs.append(o)
    return ins, outs


def _gpu_node(node, exchange, plan_jsons, reps):
    """One node process: a GpuNodeExecutor on GPU 0 with CUDA's default hardware queues (as a communicator's node
    has), the plans run in turn ``reps`` times over the same connections and buffers; before each run its buffers
    get fresh random inputs (every node draws the same, from the run's seed) and poisoned outputs, so that bytes left
    in a staging ring by an earlier run cannot pass for this one's, and after it they are read back. Returns (rep,
    kind, rank, wrong bytes) of every output that is not the replay's."""
    import os

    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)  # before CUDA starts here: the default 8 queues
    import cupy as cp

    from hoccl_compiler import replay
    from hoccl_compiler.codec import plan_from_json
    from hoccl_runtime.net.executor import GpuNodeExecutor

    plans = [plan_from_json(j) for j in plan_jsons]
    L = plans[0].topology.gpus_per_node
    mine = range(node * L, node * L + L)
    dev = cp.cuda.Device(0)
    dev.use()
    bufs = [{r: (cp.empty(p.ranks.input_bytes[r], cp.uint8), cp.empty(p.ranks.output_bytes[r], cp.uint8))
             for r in mine} for p in plans]
    transport = GpuNodeExecutor.make_transport(plans[0], node, lanes=2, secret=b"gpu-test")
    ex = GpuNodeExecutor(plans[0], node, bufs[0], transport, reuse=True, timeout_s=60)
    wrong = []
    try:
        ex.connect(exchange(transport.listen()))
        for rep in range(reps):
            for i, plan in enumerate(plans):
                ins, outs = _poisoned_data(plan, [len(plans), i, rep])
                for r in mine:
                    if ins[r].size:
                        bufs[i][r][0].set(ins[r])
                    bufs[i][r][1].set(outs[r])
                dev.synchronize()
                ex.run(plan, bufs[i])
                dev.synchronize()
                want = replay(plan, ins).outputs
                for r in mine:
                    got = cp.asnumpy(bufs[i][r][1])
                    if not np.array_equal(got, want[r]):
                        wrong.append((rep, plan.collective.kind, r, int(np.count_nonzero(got != want[r]))))
    finally:
        ex.close()
        transport.close()
    return wrong


@pytest.mark.parametrize("nodes,L,net", [(3, 1, None), (3, 2, None), (3, 2, 256 << 10), (4, 1, None)])
def test_multicast_plans_on_gpu_node_processes(nodes, L, net):
    """Each node a process of its own (as each node's communicator is), on GPU 0 with CUDA's default hardware
    queues, joined by TCP: a multicast AllGather and two Broadcasts, the three in turn three times over the same
    connections, so that the rings' alternate halves and a node one run ahead of another (its credits sent before
    the slower node is through the run before) are exercised; fresh random inputs and poisoned outputs before every
    run, every run's bytes equal to the compiler's replay on every node."""
    from hoccl_bench.nodeprocs import run_node_processes

    plans = _multicast_plans(nodes, L, net)
    got = run_node_processes(_gpu_node, nodes, ([p.model_dump_json() for p in plans], 3), timeout_s=240)
    assert got == {n: [] for n in range(nodes)}, got
