"""Session 38: skewed All-to-Allv (Zipf(1.3) blocks of 1 MiB up to 1 GiB, test_cost_v2's seed 7, plus a 4x8 case) on
paper-h800: the chunk simulation with the stages overlapped (as the runtimes run them: no barrier) against the same
stages simulated one by one, and v2's figures, at three stage cuts (--max-extra-time auto, 0, 0.05).
    python3 docs/results/2026-12-04-s38/zipf_overlap.py
Output: zipf_overlap.txt."""
import sys; sys.path.insert(0, ".")
import numpy as np
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions
from hoccl_compiler.simulate import simulate
rng = np.random.default_rng(7)
for nodes, gpn, q, chunk in ((1, 8, 1, 4 << 20), (2, 4, 2, 1 << 20), (3, 4, 1, 1 << 40), (2, 8, 2, None), (4, 8, 1, None)):
    G = nodes * gpn
    m = np.minimum(rng.zipf(1.3, (G, G)) * (1 << 20), 1 << 30).astype(np.int64)
    np.fill_diagonal(m, 0)
    topo = make_topology("paper-h800", nodes=nodes, gpus_per_node=gpn, dma_queues=q)
    for met in (None, 0.0, 0.05):
        plan = compile_plan(topo, CollectiveSpec(kind="alltoallv", matrix=tuple(map(tuple, m.tolist()))), CompileOptions(chunk_bytes=chunk, baselines=True, max_extra_time=met))
        s = simulate(plan)
        ov = s.overlapped_s if s.overlapped_s is not None else float("nan")
        b = plan.report.baselines
        print(f"{nodes}x{gpn} q{q} met {met} stages {len(plan.stages):3} chunk {plan.options.chunk_bytes>>20} MiB: sim overlapped {ov*1e3:8.2f} ms, stages one by one {sum(s.stage_s)*1e3:8.2f} ms, ratio {ov/sum(s.stage_s):.3f}; v2 stages {plan.report.breakdown_s['stages_s']*1e3:8.2f}; v2 at once {b.everything_at_once_s*1e3:.2f} total v2 {plan.report.predicted_time_s*1e3:.2f} sim total {s.total_s*1e3:.2f}", flush=True)
