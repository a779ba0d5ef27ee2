# Session 33: v2 against the chunk-level simulation for AllGather and Broadcast of sizes that are not powers of two,
# 2 nodes of 8, --chunk auto, host costs at 0. Run from the repository root:
# PYTHONPATH=. python3 docs/results/2026-12-04-s33/odd_sizes.py
import sys
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.simulate import simulate
for preset in ("dgx-h100", "paper-h800"):
    for kind in ("broadcast", "allgather"):
        for size in (10**9, 1 << 30, 3 * 10**8):
            topo = make_topology(preset, nodes=2)
            t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
            spec = CollectiveSpec(kind=kind, size_bytes=size - size % 16, root=0 if kind == "broadcast" else None)
            plan = compile_plan(t, spec, CompileOptions(baselines=False))
            sim = simulate(plan)
            print(f"{preset} {kind} {size/2**20:.0f} MiB chunk {plan.options.chunk_bytes>>20} MiB: v2 {plan.report.predicted_time_s*1e3:.3f}  sim {sim.total_s*1e3:.3f}  v2/sim {plan.report.predicted_time_s/sim.total_s:.3f}", flush=True)
