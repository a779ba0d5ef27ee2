"""Session 63: multicast AllGathers of 1 GiB at a forced chunk, v2 and the chunk simulation over the collective bound
with the copy engine's start (2.5 us) and with it at 0, beside the sum of the stages' port times. Run from the
project root: python docs/results/2026-12-06-s63/starts0.py"""
import sys

sys.path.insert(0, "examples")
import bench_compiler  # noqa: E402

from hoccl_compiler import CompileOptions, compile_plan  # noqa: E402
from hoccl_compiler.collective import CollectiveSpec  # noqa: E402
from hoccl_compiler.cost import collective_bound  # noqa: E402
from hoccl_compiler.simulate import simulate  # noqa: E402

CASES = [("dgx-h100", 2, 4), ("dgx-h100", 2, 32), ("dgx-h100", 4, 4), ("paper-h800", 2, 4), ("paper-h800", 8, 4)]
for preset, nodes, chunk in CASES:
    t = bench_compiler.topology(8 * nodes, device_only=True, preset=preset)
    spec = CollectiveSpec(kind="allgather", size_bytes=1 << 30)
    plan = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=chunk << 20))
    b = collective_bound("allgather", spec.size_bytes, t, plan.report.lower_bound_s)
    s = simulate(plan)
    s0 = simulate(plan, chunk_start_s=0.0)
    t0 = t.model_copy(update={"costs": t.costs.model_copy(update={"dma_start_us": 0.0})})
    p0 = compile_plan(t0, spec, CompileOptions(baselines=False, chunk_bytes=chunk << 20))
    print(preset, nodes, chunk, f"v2 {plan.report.predicted_time_s / b:.3f} sim {s.total_s / b:.3f} | start 0: v2 "
          f"{p0.report.predicted_time_s / b:.3f} sim {s0.total_s / b:.3f} port-sum "
          f"{plan.report.breakdown_s['ports'] / b:.3f}")
