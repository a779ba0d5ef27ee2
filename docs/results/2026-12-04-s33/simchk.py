# Session 33: v2 against the chunk-level simulation at chunk sizes between powers of two (host costs at 0). Run from
# the repository root: PYTHONPATH=. python3 docs/results/2026-12-04-s33/simchk.py
import sys, time
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.simulate import simulate
for preset, kind, nodes, chunks in (("dgx-h100", "broadcast", 2, (4, 6, 8)), ("dgx-h100", "allgather", 4, (8, 12, 16)), ("paper-h800", "alltoall", 4, (4, 6, 8))):
    topo = make_topology(preset, nodes=nodes)
    t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
    spec = CollectiveSpec(kind=kind, size_bytes=1 << 30, root=0 if kind == "broadcast" else None)
    for c in chunks:
        plan = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=c << 20))
        a = time.perf_counter(); sim = simulate(plan); el = time.perf_counter() - a
        print(f"{preset} {kind} {nodes}x8 chunk {c} MiB: v2 {plan.report.predicted_time_s*1e3:.3f} ms  sim {sim.total_s*1e3:.3f} ms  ({el:.1f}s)", flush=True)
