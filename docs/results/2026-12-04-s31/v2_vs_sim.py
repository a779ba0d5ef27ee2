"""Issue 35's agreement check and multicast table on today's compiler: paper-h800, 1 GiB, the default options
(--chunk auto, multicast), nodes of 8 GPUs. Per plan: v2's prediction, the chunk simulation's
(hoccl_compiler.simulate), their ratio; then bench_compiler.py's multicast table (traffic and v2 device side over the
collective bound). Run from the repository root: PYTHONPATH=. python3 docs/results/2026-12-04-s31/v2_vs_sim.py"""
import sys
import time

sys.path.insert(0, "examples")

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402
from hoccl_compiler.simulate import simulate  # noqa: E402

print("| collective | nodes x 8 | chunk | v2 us | simulated us | v2 / simulated |")
print("|---|---:|---:|---:|---:|---:|")
for kind in ("allgather", "alltoall", "broadcast"):
    for nodes in (1, 2, 4):
        topo = make_topology("paper-h800", nodes=nodes)
        spec = CollectiveSpec(kind=kind, size_bytes=1 << 30, root=0 if kind == "broadcast" else None,
                              in_place=kind == "broadcast")
        plan = compile_plan(topo, spec, CompileOptions(baselines=False))
        v2, sim = plan.report.predicted_time_s, simulate(plan).total_s
        print(f"| {kind} | {nodes} | {plan.options.chunk_bytes >> 20} MiB | {v2 * 1e6:,.1f} | {sim * 1e6:,.1f} | "
              f"{v2 / sim:.3f} |", flush=True)

import bench_compiler  # noqa: E402

print("\n| collective | nodes x 8 | multicast: traffic / collective bound | multicast: v2 device side / collective "
      "bound | compile s |")
print("|---|---:|---:|---:|---:|")
t0 = time.perf_counter()
for r in bench_compiler.multicast_bounds((1, 2, 4, 16)):
    print(f"| {r['kind']} | {r['nodes']} | {r['multicast']:.2f} | {r['device_v2']:.2f} | {r['seconds']:.2f} |")
