# Session 50: a repro, not a test (copy into tests/runtime/ to run it with the fakes; see the docstring).
"""A known deadlock (a strict xfail once copied into tests/runtime/): the GPU network executor's streams sharing hardware
queues (CUDA_DEVICE_MAX_CONNECTIONS=1, Megatron's setting; fewer queues than streams).

Session 50's GPU run hung on the multicast AllGather of 3 nodes of 2 ranks on GPU 0 (tests/gpu/test_gpu_multicast.py,
256 KiB network chunks; the nodes are threads of one process there, so their streams share the GPU's 8 hardware
queues). The fake CUDA's ``hw_queues`` (a process's streams share K threads, as a GPU's streams share its hardware
queues: a stream memory wait holds what is queued behind it) reproduces a hang with each node a process of its own
and one queue: a node's landing gate waits, in the queue, ahead of the staging copies its peer waits for. The
emulation is stricter than the GPU (with all nodes in one process and 8 queues it hangs 2x2 cases the H100 ran), so
it says where the order can deadlock, not that every such run does. Fixing it means ordering each node's launch list
so that no wait precedes work a peer's earlier wait needs (by stage, then bytes along the transfer, then depth).
"""

import threading

import fake_cuda
import numpy as np
import pytest
from fake_cuda import dev


@pytest.mark.xfail(strict=True, reason="known: the GPU network executor deadlocks with its streams in one hardware "
                                       "queue (session 50)")
@pytest.mark.parametrize("nodes,L,net", [(2, 1, None), (3, 2, 256 << 10)])
def test_the_gpu_network_executor_with_one_hardware_queue_a_node(monkeypatch, nodes, L, net):
    from threaded import node_executors

    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
    from hoccl_compiler.ir import CompileOptions
    fake_cuda.install(monkeypatch, async_streams=True, hw_queues=1)
    topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L)
    G = topo.num_gpus
    plan = compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=G * ((3 << 20) + 5)),
                        CompileOptions(chunk_bytes=1 << 20, net_chunk_bytes=net, baselines=False))
    rng = np.random.default_rng([nodes, L])
    d = {}
    for r in range(G):
        d[r] = (rng.integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8),
                np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8))
    errors = node_executors([plan], nodes, lambda n: [{r: (dev(i, 0), dev(o, 0)) for r, (i, o) in d.items()
                                                       if r // L == n}], timeout_s=5,
                            setup=lambda: setattr(fake_cuda._current, "process", threading.get_ident()))
    assert not errors, str(errors)[:1000]
    want = replay(plan, [d[r][0] for r in range(G)]).outputs
    for r in range(G):
        assert np.array_equal(d[r][1], want[r]), r
