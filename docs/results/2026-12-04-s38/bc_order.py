"""Session 38: a Broadcast's chunk order longest way first (simulate.ready_first_order, critical_path_s) and v2 reading
each piece's turn off the chunk order (cost.stage_times_v2's ``done``). 1 GiB and 64 MiB on dgx-h100 and
paper-h800, host costs at 0 (bench_compiler.py's multicast table): v2 and the chunk simulation over the collective
bound, the chunk size auto chose, compile s.
    python3 docs/results/2026-12-04-s38/bc_order.py CHECKOUT   (a checkout of 1ace508, then of this session's code)
Output: bc_order.txt (both, line by line: 1ace508 first)."""
import sys, time
root = sys.argv[1]
sys.path.insert(0, root); sys.path.insert(0, root + "/examples")
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.cost import collective_bound
from hoccl_compiler.simulate import simulate
cases = [(p, n, k, s) for p in ("dgx-h100", "paper-h800") for n in (1, 2, 4, 8, 16) for k, s in
         (("broadcast", 1 << 30), ("broadcast", 64 << 20))]
for preset, nodes, kind, size in cases:
    topo = make_topology(preset, nodes=nodes)
    t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
    spec = CollectiveSpec(kind=kind, size_bytes=size)
    t0 = time.perf_counter()
    plan = compile_plan(t, spec, CompileOptions(baselines=False, multicast=True))
    took = time.perf_counter() - t0
    bound = collective_bound(kind, size, t, plan.report.lower_bound_s)
    sim = simulate(plan).total_s if nodes <= 8 else float("nan")
    print(f"{preset:10} {nodes:3}x8 {kind:9} {size>>20:5} MiB  chunk {plan.options.chunk_bytes>>10:6} KiB  "
          f"v2 {plan.report.predicted_time_s/bound:.3f}  sim {sim/bound:.3f}  v2/sim {plan.report.predicted_time_s/sim:.3f}  compile {took:.2f}", flush=True)
