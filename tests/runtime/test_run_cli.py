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


@pytest.mark.parametrize("kind, nodes, gpus", [("allgather", 2, 1), ("alltoall", 2, 2), ("broadcast", 2, 2)])
def test_execute_runs_a_plan_file_of_several_nodes_one_process_each(tmp_path, kind, nodes, gpus):
    """hr.execute across nodes, end to end on a CPU: one process per node (RANK / WORLD_SIZE / MASTER_ADDR as
    torchrun sets them, torch's TCPStore), CUDA faked in host memory, the real TCP transport and GPU node executor;
    every output byte as the collective defines it, twice (the second run over the first's connections)."""
    import json
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    spec = CollectiveSpec(kind=kind, size_bytes=6 << 10, root=1 if kind == "broadcast" else None)
    plan = compile_plan(make_topology("h200x2", nodes=nodes, gpus_per_node=gpus), spec,
                        CompileOptions(chunk_bytes=1 << 10, multicast=False))
    path = tmp_path / "plan.json"
    path.write_text(plan.model_dump_json())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # the store's (bootstrap_store listens at MASTER_PORT + 1)
    worker = Path(__file__).resolve().parents[1] / "support" / "mp_execute_nodes.py"
    procs = [subprocess.Popen([sys.executable, str(worker), str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "RANK": str(n), "WORLD_SIZE": str(nodes),
                                              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port - 1)})
             for n in range(nodes)]
    results = {}
    for n, p in enumerate(procs):
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
        line = next(line for line in out.splitlines() if line.startswith("RESULT "))
        results[n] = json.loads(line[7:])
    for n in range(nodes):
        for run in ("0", "1"):
            assert set(results[n][run].values()) == {0}, results


def test_execute_takes_a_plan_file_and_a_list_of_buffers_and_refuses_other_arguments_by_name(tmp_path):
    """hr.execute (and Executor.execute) take a plan or the path of a plan file, and {rank: (input, output)} or a list
    of the pairs in rank order; anything else is refused with its type named (before: a plan path met
    "'str' object has no attribute 'num_ranks'", a list of buffers "'<' not supported between 'NoneType'...")."""
    import hoccl_runtime as hr
    from hoccl_runtime.errors import BufferError, PlanError

    one = compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind="allgather", size_bytes=4096))
    path = tmp_path / "one.json"
    path.write_text(one.model_dump_json())
    # both forms reach the per-rank buffer check: the file was read, the list taken as ranks 0, 1
    for plan in (one, str(path), path):
        with pytest.raises(BufferError, match="rank 0: give buffers as \\(input, output\\).*got NoneType"):
            hr.execute(plan, [None, None])
    with pytest.raises(BufferError, match=r"is for 2 ranks; pass buffers for ranks 0..1 \(got \[0\]\)"):
        hr.execute(str(path), [(None, None)])
    with pytest.raises(PlanError, match="cannot read plan"):
        hr.execute(str(tmp_path / "missing.json"), [None, None])
    with pytest.raises(TypeError, match="plan must be a plan .* not a int"):
        hr.execute(42, {})
    with pytest.raises(BufferError, match="buffers must be .* not a int"):
        hr.execute(one, 5)
    # a plan file of two nodes is routed as the plan is: one process per node
    two = compile_plan(make_topology("h200x2", nodes=2), CollectiveSpec(kind="allgather", size_bytes=4096))
    path2 = tmp_path / "two.json"
    path2.write_text(two.model_dump_json())
    with pytest.raises(BufferError, match=r"2 nodes of 2 GPUs, run one process per node.*got ranks \[0, 1, 2, 3\]"):
        hr.execute(str(path2), [None] * 4)
