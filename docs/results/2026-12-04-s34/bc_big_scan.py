# Session 34: v2 against the chunk simulation for Broadcasts whose plans have more than the 20,000 chunk entries up to
# which a deep multicast plan's order is list-scheduled (above, chunk_order's shifted order is kept): 4x8 and 8x8,
# both presets, host costs at 0, --chunk auto. A v2/sim well below 1 is a queue holding a chunk that has not arrived.
# Run from the repository root: PYTHONPATH=. python3 docs/results/2026-12-04-s34/bc_big_scan.py
import sys
import time

sys.path.insert(0, ".")
sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, CollectiveSpec, CompileOptions, compile_plan, make_topology  # noqa: E402

from hoccl_compiler.simulate import simulate  # noqa: E402

for preset in ("dgx-h100", "paper-h800"):
    for nodes in (4, 8):
        topo = make_topology(preset, nodes=nodes)
        t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
        for mib in range(512, 1601, 176):
            spec = CollectiveSpec(kind="broadcast", size_bytes=mib << 20, root=0)
            t0 = time.time()
            plan = compile_plan(t, spec, CompileOptions(baselines=False))
            entries = sum(len(s.chunks) for s in plan.stages)
            sim = simulate(plan)
            r = plan.report.predicted_time_s / sim.total_s
            print(f"{preset} {nodes}x8 {mib} MiB: chunk {plan.options.chunk_bytes >> 20} MiB, {entries} entries, "
                  f"v2 {plan.report.predicted_time_s * 1e3:.3f} ms, sim {sim.total_s * 1e3:.3f} ms, v2/sim {r:.3f} "
                  f"({time.time() - t0:.0f} s)", flush=True)
