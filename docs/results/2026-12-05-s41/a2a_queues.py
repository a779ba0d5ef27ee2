"""Session 41: uniform All-to-All with one and two DMA queues per GPU (host costs 0, auto chunk): v2 and the chunk
simulation in ms, and the lower bound (output: a2a_queues.txt)."""
import sys, time
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.topology import make_topology
from hoccl_compiler.simulate import simulate
for preset in ("dgx-h100","paper-h800"):
  for n in (1,2,4):
    for size in (64<<20, 1<<30):
      row=[]
      for q in (1,2):
        topo = make_topology(preset, nodes=n, dma_queues=q)
        t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
        p = compile_plan(t, CollectiveSpec(kind="alltoall", size_bytes=size), CompileOptions(baselines=False))
        s = simulate(p)
        row.append(f"q{q} v2 {p.report.predicted_time_s*1e3:.3f} sim {s.total_s*1e3:.3f} lb {p.report.lower_bound_s*1e3:.3f} c{p.options.chunk_bytes>>20}")
      print(preset, n, size>>20, " | ".join(row), flush=True)
