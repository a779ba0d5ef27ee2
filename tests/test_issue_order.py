"""Issue order without destination hot spots: inside a node, GPU u's queue serves u+1, u+2, ... so that at
every step of a stage the GPUs' copies go to distinct destinations."""

from __future__ import annotations

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions
from hoccl_compiler.passes.chunks import issue_rotation
from hoccl_compiler.verify import hot_spots, verify_plan


def _steps(plan):
    """Per stage, per position k: the destinations of the k-th entry of each DMA queue (sending queues only)."""
    kinds = plan.queues.kind
    for stage in plan.stages:
        tr = stage.transfers
        per_queue: dict[int, list[int]] = {}
        for i in stage.chunks:
            if kinds[tr.queue[i]] == "dma" and tr.src[i] != tr.dst[i]:
                per_queue.setdefault(tr.queue[i], []).append(tr.dst[i])
        depth = max((len(v) for v in per_queue.values()), default=0)
        for k in range(depth):
            yield stage.index, k, [v[k] for v in per_queue.values() if k < len(v)]

@pytest.mark.parametrize("kind", ["allgather", "alltoall"])
@pytest.mark.parametrize("chunk", [1 << 40, 4 << 20], ids=["one chunk per transfer", "4 MiB chunks"])
def test_one_node_sends_to_a_permutation_at_every_step(kind, chunk):
    plan = compile_plan(make_topology("dgx-h100", nodes=1), CollectiveSpec(kind=kind, size_bytes=64 << 20),
                        CompileOptions(chunk_bytes=chunk, baselines=False))
    verify_plan(plan)
    steps = list(_steps(plan))
    assert steps
    for stage, k, dests in steps:
        assert len(dests) == len(set(dests)), (stage, k, dests)
    assert not hot_spots(plan)

def test_the_rotation_and_the_warning():
    src = np.array([0, 0, 0, 3, 3, 9])
    dst = np.array([1, 2, 3, 0, 1, 1])
    assert issue_rotation(src, dst, 8, 2).tolist() == [1, 2, 3, 5, 6, 8 * 1 + 0]
    plan = compile_plan(make_topology("dgx-h100", nodes=1), CollectiveSpec(kind="allgather", size_bytes=8 << 20),
                        CompileOptions(chunk_bytes=1 << 40, baselines=False))
    # the ascending order of before (every queue starts on GPU 0 or 1) is what the warning is for
    stage = plan.stages[0]
    tr = stage.transfers
    ascending = sorted(stage.chunks, key=lambda i: (tr.dst[i], i))
    old = plan.model_copy(update={"stages": [stage.model_copy(update={"chunks": ascending}), *plan.stages[1:]]})
    warnings = hot_spots(old)
    assert warnings and "DMA queues start on GPU 0" in warnings[0] and "hot spot" in warnings[0]
    assert not hot_spots(plan)
