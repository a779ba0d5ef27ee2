# Session 33: multicast AllGather / Broadcast of 1 GiB on dgx-h100 and paper-h800 (host costs at 0, as
# bench_compiler.py's multicast table): traffic and RDMA bytes over their targets' references, v2's device side over
# the collective bound. Run from the repository root: PYTHONPATH=. python3 docs/results/2026-12-04-s33/presets_v2.py
import sys
sys.path.insert(0, "."); sys.path.insert(0, "examples")
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
from hoccl_compiler.cost import collective_bound
from hoccl_compiler.report import summary
for preset in ("dgx-h100", "paper-h800"):
    for kind in ("allgather", "broadcast"):
        for nodes in (1, 2, 4, 16):
            topo = make_topology(preset, nodes=nodes)
            t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
            spec = CollectiveSpec(kind=kind, size_bytes=1 << 30)
            plan = compile_plan(t, spec, CompileOptions(baselines=False, multicast=True))
            rep = plan.report
            bound = collective_bound(kind, spec.size_bytes, t, rep.lower_bound_s)
            rdma = summary(plan)["bytes_by_domain"]["rdma"]
            print(f"{preset:10} {kind:9} {nodes:2}x8  traffic/bound {rep.lower_bound_s / bound:.3f}  "
                  f"rdma/((N-1)S) {'-' if nodes == 1 else f'{rdma / ((nodes - 1) * (1 << 30)):.3f}'}  "
                  f"v2 device/bound {rep.predicted_time_s / bound:.3f}  chunk {plan.options.chunk_bytes >> 20} MiB",
                  flush=True)
