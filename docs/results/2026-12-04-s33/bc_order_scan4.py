# Session 33: the chunk simulation of 2x8 dgx-h100 Broadcasts (8 MiB chunks, host costs at 0) under other values of
# the chunk order's DEPTH_SHIFT and NETWORK_SHIFT (ms). Run: PYTHONPATH=. python3 docs/results/2026-12-04-s33/bc_order_scan4.py
import sys
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.simulate import simulate
import hoccl_compiler.passes.chunks as ch
topo = make_topology("dgx-h100", nodes=2)
t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
sizes = (752, 1024, 1232, 1280, 1424, 1520)
for ds, ns in ((0.25, 1.0), (0.125, 1.0), (0.5, 1.0), (0.25, 0.5), (0.25, 2.0), (1.0, 1.0)):
    ch.DEPTH_SHIFT, ch.NETWORK_SHIFT = ds, ns
    row = []
    for mib in sizes:
        plan = compile_plan(t, CollectiveSpec(kind="broadcast", size_bytes=mib << 20, root=0), CompileOptions(baselines=False, chunk_bytes=8 << 20))
        sim = simulate(plan)
        row.append(f"{mib}:{sim.total_s*1e3:.2f}")
    print(ds, ns, " ".join(row), flush=True)
