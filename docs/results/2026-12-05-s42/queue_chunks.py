"""Session 42: multicast AllGather of 1 GiB (host costs 0) at fixed chunks 8-64 MiB, 1-3 DMA queues: v2 and the chunk
simulation over the collective bound (output: queue_chunks.txt)."""
import sys
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.topology import make_topology
from hoccl_compiler.simulate import simulate
from hoccl_compiler.cost import collective_bound
import numpy as np
cases = [("dgx-h100", 2, 3), ("paper-h800", 4, 2), ("paper-h800", 8, 2), ("dgx-h100", 2, 1)]
for preset, n, q in cases:
    topo = make_topology(preset, nodes=n, dma_queues=q)
    t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
    spec = CollectiveSpec(kind="allgather", size_bytes=1 << 30)
    for c in (8, 16, 32, 64):
        p = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=c << 20))
        b = collective_bound("allgather", spec.size_bytes, t, p.report.lower_bound_s)
        s = simulate(p)
        st = [x.predicted_time_s for x in p.stages] if hasattr(p.stages[0], "predicted_time_s") else None
        print(preset, n, "q", q, "c", c, f"v2 {p.report.predicted_time_s/b:.3f} sim {s.total_s/b:.3f}",
              "sim stages alone", [round(x/b, 3) for x in s.stage_s], "stages", len(p.stages), flush=True)
