"""Session 36: a Broadcast across nodes spread both ways from where each part is (the root scatters the parts to
their rails' GPUs; in every node a part spreads both ways), against the chains (the root's node a chain from the
root, every other node a ring one way round). 1 GiB on dgx-h100 and paper-h800 (host costs at 0, as bench_compiler.py's
multicast table): traffic over the collective bound, v2's device side over it, the chunk simulation's, and the
deepest path of a part (hops).
    PYTHONPATH=. python3 docs/results/2026-12-04-s36/bc_spread.py [NODES ...]
Runs on commit 6e3454d only: the switches it sets were reverted after it.
Output: bc_spread.txt."""
import sys
import time

sys.path.insert(0, "."); sys.path.insert(0, "examples")
import numpy as np
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler import multicast
from hoccl_compiler.cost import collective_bound
from hoccl_compiler.simulate import simulate

nodes_list = [int(x) for x in sys.argv[1:]] or [2, 4]
for preset in ("dgx-h100", "paper-h800"):
    for nodes in nodes_list:
        for mode in ("chain", "both-ways", "scatter"):  # both-ways: other nodes only; scatter: the root's node too
            multicast.BROADCAST_SPREAD = "chain" if mode == "chain" else "scatter"
            multicast.BROADCAST_ROOT = "scatter" if mode == "scatter" else "chain"
            topo = make_topology(preset, nodes=nodes)
            t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
            spec = CollectiveSpec(kind="broadcast", size_bytes=1 << 30)
            t0 = time.perf_counter()
            plan = compile_plan(t, spec, CompileOptions(baselines=False, multicast=True))
            took = time.perf_counter() - t0
            rep = plan.report
            bound = collective_bound("broadcast", spec.size_bytes, t, rep.lower_bound_s)
            sim = simulate(plan)
            sim_s = sim.total_s
            via = np.asarray(plan.flows.via) if hasattr(plan.flows, "via") else None
            depth = 0
            if via is not None:
                for f in range(via.size):
                    d, g = 0, f
                    while g >= 0:
                        g, d = int(via[g]), d + 1
                    depth = max(depth, d)
            print(f"{preset:10} {nodes:2}x8 {mode:9} traffic/bound {rep.lower_bound_s / bound:.3f}  "
                  f"v2/bound {rep.predicted_time_s / bound:.3f}  sim/bound {sim_s / bound:.3f}  "
                  f"depth {depth}  chunk {plan.options.chunk_bytes >> 20} MiB  compile {took:.1f} s", flush=True)
