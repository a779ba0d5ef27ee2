"""Session 38: v2 against the chunk simulation (hoccl-inspect --simulate) for All-to-All, AllGather, sendrecv
(i -> i+1) and Broadcast of 4 MiB, 64 MiB, 1 GiB on 1, 2, 4 nodes of dgx-h100, paper-h800 and h200x2, default
options (auto chunk, the presets' host costs).
    python3 docs/results/2026-12-04-s38/v2_sweep.py CHECKOUT
Output: v2_sweep.txt (1ace508 and this session's code, with the changed rows)."""
import sys, time
root = sys.argv[1]
sys.path.insert(0, root); sys.path.insert(0, root + "/examples")
from bench_compiler import make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.simulate import simulate
MiB = 1 << 20
for preset in ("dgx-h100", "paper-h800", "h200x2"):
    for nodes in ((1, 2, 4)):
        for kind in ("alltoall", "allgather", "sendrecv", "broadcast"):
            for size in (4 * MiB, 64 * MiB, 1024 * MiB):
                topo = make_topology(preset, nodes=nodes)
                G = topo.num_gpus
                if G < 2:
                    continue
                spec = (CollectiveSpec(kind=kind, pairs=tuple((u, (u + 1) % G, size) for u in range(G)))
                        if kind == "sendrecv" else CollectiveSpec(kind=kind, size_bytes=size))
                t0 = time.perf_counter()
                plan = compile_plan(topo, spec, CompileOptions(baselines=False))
                took = time.perf_counter() - t0
                sim = simulate(plan).total_s
                print(f"{preset:10} {nodes}x{topo.gpus_per_node} {kind:9} {size>>20:5} MiB chunk {plan.options.chunk_bytes>>10:7} KiB "
                      f"v2 {plan.report.predicted_time_s*1e6:10.1f} us sim {sim*1e6:10.1f} us v2/sim {plan.report.predicted_time_s/sim:.3f}", flush=True)
