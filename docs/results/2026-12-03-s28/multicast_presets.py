"""Session 28: multicast AllGather and Broadcast of 1 GiB on paper-h800 and dgx-h100, device side (host costs 0): the
traffic bound, v2 and the chunk simulation over the collective bound (run from the repository root)."""
import sys; sys.path.insert(0,'/work/main/examples')
import bench_compiler as b
from hoccl_compiler import compile_plan, CollectiveSpec, make_topology
from hoccl_compiler.ir import CompileOptions
from hoccl_compiler.cost import collective_bound
from hoccl_compiler.simulate import simulate
for preset in ('paper-h800','dgx-h100'):
  for kind in ('allgather','broadcast'):
    for n in (1,2,4,16):
      t=make_topology(preset, nodes=n)
      t=t.model_copy(update={'costs': t.costs.model_copy(update=b.HOST_COSTS)})
      p=compile_plan(t, CollectiveSpec(kind=kind, size_bytes=1<<30), CompileOptions(baselines=False))
      cb=collective_bound(kind, 1<<30, t, p.report.lower_bound_s)
      sim = simulate(p).total_s if n <= 4 else float('nan')
      print(preset, kind, n, 'traffic/coll %.3f v2/coll %.3f sim/coll %.3f chunk %d KiB'
            % (p.report.lower_bound_s/cb, p.report.predicted_time_s/cb, sim/cb, p.options.chunk_bytes>>10))
