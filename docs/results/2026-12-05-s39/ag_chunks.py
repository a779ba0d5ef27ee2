"""Session 39: the dgx-h100 AllGather of 1 GiB (host costs 0) at 2, 4, 8 nodes: v2 and the chunk simulation over the
collective bound, with the auto chunk and with 4-64 MiB chunks. Run from the repository root; output ag_chunks.txt."""
import sys
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.cost import collective_bound
from hoccl_compiler.simulate import simulate
for nodes in (2, 4, 8):
    topo = make_topology("dgx-h100", nodes=nodes)
    t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
    spec = CollectiveSpec(kind="allgather", size_bytes=1 << 30)
    auto = compile_plan(t, spec, CompileOptions(baselines=False))
    bound = collective_bound("allgather", spec.size_bytes, t, auto.report.lower_bound_s)
    line = f"{nodes}x8 auto c{auto.options.chunk_bytes>>20} v2 {auto.report.predicted_time_s/bound:.3f} sim {simulate(auto).total_s/bound:.3f} stages {len(auto.stages)}"
    for c in (4, 8, 16, 32, 64):
        p = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=c << 20))
        line += f" | {c}: v2 {p.report.predicted_time_s/bound:.3f} sim {simulate(p).total_s/bound:.3f}"
    print(line, flush=True)
