"""Session 38: what chunks smaller than the auto choice could give a multicast plan without their copy-engine start:
1 GiB Broadcast and AllGather on 2, 4, 8 nodes of dgx-h100 and paper-h800 (host costs 0), the chunk simulation over
the collective bound with the auto chunk, with 1 and 2 MiB chunks, and with those chunks' DMA start at 0
(hoccl-inspect --simulate --chunk-start-us 0): the most a plan of small chunks on the network path and large ones
for the copies could reach, had a forwarded copy not to wait for its own chunk whole.
    python3 docs/results/2026-12-04-s38/small_chunks.py
Output: small_chunks.txt."""
import sys
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.cost import collective_bound
from hoccl_compiler.simulate import simulate
for preset in ("dgx-h100", "paper-h800"):
    for kind in ("broadcast", "allgather"):
        for nodes in (2, 4, 8):
            topo = make_topology(preset, nodes=nodes)
            t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
            spec = CollectiveSpec(kind=kind, size_bytes=1 << 30)
            auto = compile_plan(t, spec, CompileOptions(baselines=False))
            bound = collective_bound(kind, spec.size_bytes, t, auto.report.lower_bound_s)
            line = f"{preset} {kind} {nodes}x8 auto c{auto.options.chunk_bytes>>20} sim {simulate(auto).total_s/bound:.3f}"
            for c in (1, 2):
                p = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=c << 20))
                line += f" | {c} MiB sim {simulate(p).total_s/bound:.3f} no-DMA-start {simulate(p, chunk_start_s=0.0).total_s/bound:.3f}"
            print(line, flush=True)
