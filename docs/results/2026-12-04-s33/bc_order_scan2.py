# Session 33: v2 against the chunk simulation for 2x8 dgx-h100 Broadcasts of 512-1568 MiB in 8 MiB chunks (host costs
# at 0). Run from the repository root: PYTHONPATH=. python3 docs/results/2026-12-04-s33/bc_order_scan2.py
import sys
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.simulate import simulate
topo = make_topology("dgx-h100", nodes=2)
t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
bad = []
for mib in range(512, 1601, 48):
    spec = CollectiveSpec(kind="broadcast", size_bytes=mib << 20, root=0)
    plan = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=8 << 20))
    sim = simulate(plan)
    r = plan.report.predicted_time_s / sim.total_s
    print(f"{mib} MiB ({mib/64:.2f} chunks a part): v2/sim {r:.3f}", flush=True)
