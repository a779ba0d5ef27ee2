"""hoccl-run and hr.execute for plans of several nodes, on a CPU: the check's definition of every output byte (against
the compiler's reference replay of the plan itself), the refusals a user meets, and one-line errors without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from hoccl_bench.run import POISON, expected_output, main, pattern
from hoccl_compiler import CollectiveSpec, CompileOptions, compile_plan, make_topology
from hoccl_compiler.verify import replay


@pytest.mark.parametrize("spec, nodes, in_place", [
    (CollectiveSpec(kind="allgather", size_bytes=3 << 10), 2, False),
    (CollectiveSpec(kind="allgather", size_bytes=3 << 10, in_place=True), 2, True),
    (CollectiveSpec(kind="alltoall", size_bytes=8 << 10), 2, False),
    (CollectiveSpec(kind="broadcast", size_bytes=5000, root=1), 2, False),
    (CollectiveSpec(kind="scatter", size_bytes=4 << 10, root=1), 1, False),
    (CollectiveSpec(kind="gather", size_bytes=4 << 10, root=0), 2, False),
    (CollectiveSpec(kind="sendrecv", pairs=((0, 3, 1000), (2, 1, 77))), 2, False),
])
def test_the_check_is_the_collectives_definition(spec, nodes, in_place):
    """Every byte hoccl-run expects is what the plan, replayed by the compiler's reference executor on the same
    inputs, writes: the definition and the schedule agree (an independent derivation: the layout, not the plan)."""
    plan = compile_plan(make_topology("h200x2", nodes=nodes), spec, CompileOptions(chunk_bytes=1 << 10))
    G = plan.topology.num_gpus
    inputs = [pattern(np, r, 0, int(plan.ranks.input_bytes[r])) for r in range(G)]
    outputs = replay(plan, inputs).outputs
    for r in range(G):
        want = expected_output(plan, r)
        assert want.size == outputs[r].size
        assert np.array_equal(outputs[r], want), (r, np.flatnonzero(outputs[r] != want)[:5])
        if plan.ranks.output_bytes[r] and spec.kind in ("allgather", "alltoall"):
            assert (want != POISON).mean() > 0.9  # the pattern is data, not the poison


def test_the_pattern_is_the_same_for_any_range_and_differs_between_ranks():
    whole = pattern(np, 3, 0, 10_000)
    assert np.array_equal(pattern(np, 3, 1234, 500), whole[1234:1734])
    assert (whole != pattern(np, 4, 0, 10_000)).mean() > 0.9
    assert 200 < len(np.unique(whole)) <= 256


def test_hoccl_run_says_in_one_line_what_it_needs(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)  # as on a machine without CuPy
    plan = compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind="allgather", size_bytes=4096))
    path = tmp_path / "p.json"
    path.write_text(plan.model_dump_json())
    assert main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "needs a CUDA GPU" in err and "hoccl[gpu,torch]" in err
    assert main([str(tmp_path / "missing.json")]) == 2
    assert "cannot read plan" in capsys.readouterr().err
    assert main([str(path), "--iters", "0"]) == 2
    assert "--iters 0" in capsys.readouterr().err


def test_execute_of_a_multi_node_plan_names_what_a_process_must_give(monkeypatch):
    import hoccl_runtime as hr
    from hoccl_runtime.errors import BufferError, HocclError

    plan = compile_plan(make_topology("h200x2", nodes=2), CollectiveSpec(kind="allgather", size_bytes=4096))
    with pytest.raises(BufferError, match=r"2 nodes of 2 GPUs, run one process per node.*got ranks \[0, 1, 2\]"):
        hr.execute(plan, {0: None, 1: None, 2: None})
    with pytest.raises(BufferError, match=r"got ranks \[1, 2\]"):
        hr.execute(plan, {1: None, 2: None})
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(HocclError, match="one process per node under torchrun"):
        hr.execute(plan, {2: None, 3: None})
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(HocclError, match="WORLD_SIZE=4 processes"):
        hr.execute(plan, {2: None, 3: None})
