"""Issue order without destination hot spots: inside a node, GPU u's queue serves u+1, u+2, ... so that at
every step of a stage the GPUs' copies go to distinct destinations."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.codec import load_plan
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


@pytest.mark.parametrize("kind", ["allgather", "alltoall"])
@pytest.mark.parametrize("chunk", [1 << 40, 4 << 20], ids=["one chunk per transfer", "4 MiB chunks"])
def test_one_node_is_simulated_at_the_bound_and_the_old_order_at_4x(kind, chunk):
    """The chunk-level simulation (serial queues, shared ports): the rotated order meets the bound on one
    dgx-h100 node (no DMA start cost, to see the order alone); the ascending order of before took 4x."""
    from hoccl_compiler.simulate import simulate

    plan = compile_plan(make_topology("dgx-h100", nodes=1), CollectiveSpec(kind=kind, size_bytes=1 << 30),
                        CompileOptions(chunk_bytes=chunk, baselines=False))
    bound = plan.report.lower_bound_s
    assert simulate(plan, chunk_start_s=0).total_s <= 1.05 * bound
    with_starts = simulate(plan)  # 2.5 us per chunk, serial: the cost of small chunks shows
    assert with_starts.total_s > bound and with_starts.chunks == (64 if chunk > 1 << 30 else 64 * 32)  # 8 own blocks
    stage = plan.stages[0]
    tr = stage.transfers
    ascending = sorted(stage.chunks, key=lambda i: (tr.dst[i], i))  # every queue starts on GPU 0 or 1
    old = plan.model_copy(update={"stages": [stage.model_copy(update={"chunks": ascending})]})
    if chunk > 1 << 30:
        assert simulate(old, chunk_start_s=0).total_s >= 3.5 * bound


@pytest.mark.parametrize("kind,nodes", [("alltoall", 2), ("allgather", 2), ("broadcast", 2), ("alltoall", 3)])
def test_the_simulation_is_never_below_the_bound(kind, nodes):
    from hoccl_compiler.simulate import simulate

    spec = CollectiveSpec(kind=kind, size_bytes=48 << 20, root=1 if kind == "broadcast" else None)
    plan = compile_plan(make_topology("paper-h800", nodes=nodes, gpus_per_node=4), spec,
                        CompileOptions(chunk_bytes=1 << 20, baselines=False))
    sim = simulate(plan, chunk_start_s=0)
    assert sim.total_s >= plan.report.lower_bound_s * (1 - 1e-9)
    assert len(sim.stage_s) == len(plan.stages)


def test_inspect_simulate(tmp_path, capsys):
    from hoccl_compiler.cli import compile_main, inspect_main

    out = tmp_path / "ag.json"
    assert compile_main(["allgather", "--topology", "dgx-h100", "--nodes", "1", "--size", "64MiB", "-o", str(out),
                         "-q"]) == 0
    capsys.readouterr()
    assert inspect_main([str(out), "--simulate", "--chunk-start-us", "0"]) == 0
    text = capsys.readouterr().out
    assert "simulated" in text and "cost model v2:" in text
    assert inspect_main([str(out), "--simulate", "--chunk-start-us", "0", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    plan = load_plan(out)  # no start costs: the rotated order meets the bound (every GPU's NVLink busy both ways
    # all along, at nvlink_duplex less bandwidth each way), after the call's start
    assert data["simulated_s"] == pytest.approx(plan.report.lower_bound_s * plan.topology.costs.nvlink_duplex +
                                                plan.topology.costs.call_us * 1e-6)
    assert inspect_main([str(out), "--simulate", "--chunk-start-us", "-1"]) == 2
    assert "must be a finite time >= 0" in capsys.readouterr().err


def test_no_hot_spot_warning_where_no_issue_order_avoids_it():
    """GPUs 0 and 2 send only to GPU 1, GPU 3 to GPUs 4 and 5: two queues must start on GPU 1 whatever the order,
    so hoccl-inspect --verify must not advise a recompile (it warned on skewed plans this very version wrote)."""
    G = 8
    m = np.zeros((G, G), np.int64)
    m[0, 1] = m[2, 1] = 4 << 20
    m[3, 4] = m[3, 5] = 1 << 20
    plan = compile_plan(make_topology("dgx-h100", nodes=1), CollectiveSpec(kind="alltoallv", matrix=m),
                        CompileOptions(chunk_bytes=1 << 20, baselines=False))
    assert not hot_spots(plan)  # (an avoidable hot spot is still found: the ascending-order test above)
