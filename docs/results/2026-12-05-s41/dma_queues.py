"""Session 41 (after passes/chunks.assign_queues deals groups of copies by issue rotation): multicast AllGather / Broadcast of 1 GiB (host costs 0, auto chunk) with 1, 2, 3 DMA queues per GPU: v2 and
the chunk simulation over the collective bound (output: dma_queues.txt)."""
import sys
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.topology import make_topology
from hoccl_compiler.simulate import simulate
from hoccl_compiler.cost import collective_bound
for preset in ("dgx-h100", "paper-h800"):
  for kind in ("allgather", "broadcast"):
    for n in (2, 4, 8):
      row = []
      for q in (1, 2, 3):
        topo = make_topology(preset, nodes=n, dma_queues=q)
        t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
        spec = CollectiveSpec(kind=kind, size_bytes=1 << 30)
        p = compile_plan(t, spec, CompileOptions(baselines=False))
        b = collective_bound(kind, spec.size_bytes, t, p.report.lower_bound_s)
        s = simulate(p)
        row.append(f"q{q}: v2 {p.report.predicted_time_s/b:.3f} sim {s.total_s/b:.3f} c{p.options.chunk_bytes>>20}")
      print(preset, kind, n, " | ".join(row), flush=True)
