# Session 33: the same scan as bc_order_scan2.py for AllGather. Run: PYTHONPATH=. python3 docs/results/2026-12-04-s33/ag_order_scan3.py
import sys
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.simulate import simulate
topo = make_topology("dgx-h100", nodes=2)
t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
bad = []
for mib in range(512, 1601, 96):
    spec = CollectiveSpec(kind="allgather", size_bytes=mib << 20)
    plan = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=8 << 20))
    sim = simulate(plan)
    r = plan.report.predicted_time_s / sim.total_s
    print(f"{mib} MiB ({mib/64:.2f} chunks a part): v2/sim {r:.3f}", flush=True)
