"""Session 37: a Broadcast across nodes down two trees of nodes (multicast.node_trees) against the chain of nodes
(multicast.node_chain). 1 GiB on dgx-h100 and paper-h800, host costs at 0 (as bench_compiler.py's multicast table):
traffic over the collective bound, v2's device side over it, the chunk simulation's, the deepest path of a part
(hops), the chunk size and the compile time.
    PYTHONPATH=. python3 docs/results/2026-12-04-s37/bc_trees.py [NODES ...]
Output: bc_trees.txt."""
import sys
import time

sys.path.insert(0, "."); sys.path.insert(0, "examples")
import numpy as np
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler import multicast
from hoccl_compiler.cost import collective_bound
from hoccl_compiler.simulate import simulate

nodes_list = [int(x) for x in sys.argv[1:]] or [3, 4, 8, 16]
for preset in ("dgx-h100", "paper-h800"):
    for nodes in nodes_list:
        for mode in ("chain", "trees"):
            multicast.TREE_NODES = 10**9 if mode == "chain" else 3
            topo = make_topology(preset, nodes=nodes)
            t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
            spec = CollectiveSpec(kind="broadcast", size_bytes=1 << 30)
            t0 = time.perf_counter()
            plan = compile_plan(t, spec, CompileOptions(baselines=False, multicast=True))
            took = time.perf_counter() - t0
            rep = plan.report
            bound = collective_bound("broadcast", spec.size_bytes, t, rep.lower_bound_s)
            sim_s = simulate(plan).total_s if nodes <= 16 else float("nan")
            via = np.asarray(plan.flows.via)
            depth = np.zeros(via.size, np.int64)
            for _ in range(via.size):
                nxt = np.where(via >= 0, depth[np.maximum(via, 0)] + 1, 1)
                if np.array_equal(nxt, depth):
                    break
                depth = nxt
            print(f"{preset:10} {nodes:4}x8 {mode:6} traffic/bound {rep.lower_bound_s / bound:.3f}  "
                  f"v2/bound {rep.predicted_time_s / bound:.3f}  sim/bound {sim_s / bound:.3f}  "
                  f"depth {int(depth.max())}  chunk {plan.options.chunk_bytes >> 20} MiB  compile {took:.1f} s",
                  flush=True)
