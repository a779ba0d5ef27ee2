"""The GPU network executor with its streams sharing hardware queues (CUDA_DEVICE_MAX_CONNECTIONS below the streams a
process uses; Megatron sets 1): a stream memory wait then holds what was issued behind it on the other streams of
its queue, so a launch list that issued a wait ahead of work a peer's earlier wait needs deadlocked (session 50: the
multicast AllGather of 3 nodes of 2 ranks hung on an H100, and 2 nodes of 1 GPU hung with one queue a node in the
fake). The launch list now goes by level (hoccl_runtime/net/order.py) and the driving thread posts each GPU's staged
chunks and landings apart from the other GPUs'. Each node here is a process of its own to the fake CUDA (its streams
share ``hw_queues`` threads in the order it first uses them). Before the fix all 7 cases hung; with the level order
alone (each GPU's staged chunks still posted behind the other GPUs'), the 4 with 2 GPUs a node and 3 nodes did. Until
session 53 the Broadcast case still deadlocked about 1 run in 20 under load, its credits queued per GPU in arrival order
(test_netexec.py's test_a_landed_chunk_credits_its_slot_whatever_arrived_before_it), and the fake's 20 s wait deadline
turned that into wrong bytes; a fake stream that gives up now fails the test instead."""

from __future__ import annotations

import fake_cuda
import numpy as np
import pytest

CASES = [  # kind, nodes, GPUs a node, network chunk, slots, queues a node
    ("allgather", 2, 1, None, None, 1),
    ("allgather", 3, 1, None, 4, 1),            # a ring of nodes, more chunks than slots: credits wait too
    ("allgather", 3, 2, 256 << 10, None, 1),    # multicast with network chunks of their own (the H100's hang)
    ("allgather", 3, 2, 256 << 10, None, 2),
    ("broadcast", 3, 2, 256 << 10, 4, 1),
    ("alltoall", 3, 2, None, 4, 1),
    ("alltoall", 2, 2, None, 4, 3),
]


def _plan(kind: str, nodes: int, L: int, net: int | None, block: int = (3 << 20) + 5):
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions

    topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L)
    G = topo.num_gpus
    extra = {"root": 1} if kind == "broadcast" else {}
    return compile_plan(topo, CollectiveSpec(kind=kind, size_bytes=G * block, **extra),
                        CompileOptions(chunk_bytes=1 << 20, net_chunk_bytes=net, baselines=False))


@pytest.mark.parametrize("kind,nodes,L,net,slots,queues", CASES)
def test_the_gpu_network_executor_with_streams_sharing_hardware_queues(monkeypatch, kind, nodes, L, net, slots,
                                                                      queues):
    from threaded import check_fake_gpu_runs

    fake_cuda.install(monkeypatch, async_streams=True, hw_queues=queues)
    plans = [_plan(kind, nodes, L, net), _plan("allgather", nodes, L, net, (1 << 20) + 17)]  # two runs in turn
    options = {} if slots is None else {"slots": slots}
    check_fake_gpu_runs(plans, nodes, np.random.default_rng([nodes, L, queues]), **options)


@pytest.mark.parametrize("kind,nodes,L,net,slots", [(k, n, L, c, s or 64) for k, n, L, c, s, _ in CASES] +
                         [("allgather", 3, 2, 256 << 10, 1), ("alltoall", 4, 2, None, 2)])
def test_every_wait_in_a_launch_order_is_on_a_lower_level(kind, nodes, L, net, slots):
    """LaunchOrder, from the plan alone: along every transfer a staging copy after the one before it and after the
    landing that frees its receive slot (``slots`` back), a landing after its staging copy and the landing before,
    a forwarded copy after the copy whose bytes it reads (the chunk holding its last byte), every stage above the one
    before; and the levels at which a done count is first needed lie above the copy that writes it."""
    from hoccl_compiler.schema import chunk_sizes, waited_chunk
    from hoccl_runtime.net.order import LaunchOrder
    from hoccl_runtime.net.routes import net_chunk_of
    from hoccl_runtime.net.wire import LOCAL, NATIVE, RDMA

    plan = _plan(kind, nodes, L, net)
    via = plan.flows.via if plan.options.multicast else None
    chunk = net_chunk_of(plan)
    order = LaunchOrder(plan, chunk, slots, via)
    top = -1
    for stage in plan.stages:
        tr, s = stage.transfers, stage.index
        size = chunk_sizes(tr.role, plan.options.chunk_bytes, plan.options.net_chunk_bytes)
        low = top
        for t in range(len(tr.flow)):
            if int(tr.role[t]) not in (LOCAL, NATIVE, RDMA):  # forwards ride in the staging and landing copies
                continue
            rdma = int(tr.role[t]) == RDMA
            n = max(1, -(-int(tr.bytes[t]) // int(chunk if rdma else size[t])))
            first = order.send(s, t, 0) if rdma else order.copy(s, t, 0)
            assert first > low, (s, t)  # above every level of the stages before
            for k in range(n):
                if rdma:
                    staging, landing = order.send(s, t, k), order.land(s, t, k)
                    assert landing > staging and order.send_need(s, t, k) == landing
                    assert order.land_need(s, t, k) > landing
                    if k:
                        assert order.send(s, t, k - 1) < staging and order.land(s, t, k - 1) < landing
                    if k >= slots:
                        assert order.land(s, t, k - slots) < staging
                    top = max(top, landing)
                else:
                    try:
                        level = order.copy(s, t, k)
                    except IndexError:  # a copy not chained: one level for the whole transfer
                        assert k and order.copy(s, t, 0) == first
                        continue
                    top = max(top, level)
                a = int(tr.after[t])
                if via is not None and via[tr.flow[t]] >= 0 and a >= 0:  # forwarded: after a's chunk with its last byte
                    j = waited_chunk(k, int(size[t]), int(size[a]), int(tr.bytes[t]))
                    src = order.land(s, a, j) if int(tr.role[a]) == RDMA else order.copy(s, a, j)
                    assert (order.send(s, t, k) if rdma else order.copy(s, t, k)) > src, (s, t, k)
