"""Session 71: v2's device-side prediction of the one-node dgx-h100 Broadcast of 1 GiB (the chain of 8 GPUs) over
the collective bound, with the chunk hoccl-compile chooses and with fixed chunks. Run from the repository root:
python docs/results/2026-12-07-s71/bcast_chunks.py"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from bench_compiler import CollectiveSpec, CompileOptions, compile_plan, topology  # noqa: E402

from hoccl_compiler.cost import collective_bound  # noqa: E402

print("chunk | plan's chunk | v2 device side ms | collective bound ms | ratio")
for chunk in (None, 1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20):
    topo = topology(8, device_only=True, preset="dgx-h100")
    spec = CollectiveSpec(kind="broadcast", size_bytes=1 << 30)
    fixed = {} if chunk is None else {"chunk_bytes": chunk}
    plan = compile_plan(topo, spec, CompileOptions(baselines=False, **fixed))
    bound = collective_bound("broadcast", spec.size_bytes, topo, plan.report.lower_bound_s)
    print(f"{'auto' if chunk is None else chunk >> 20} | {plan.options.chunk_bytes >> 20} MiB | "
          f"{plan.report.predicted_time_s * 1e3:.3f} | {bound * 1e3:.3f} | {plan.report.predicted_time_s / bound:.3f}")
