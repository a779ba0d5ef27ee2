"""Session 62: multicast AllGathers of 1 GiB across nodes with each GPU's copies dealt over its DMA queue and its
dma_recv queue (today's passes/chunks.assign_queues): v2 and the chunk simulation over the collective bound, host
costs at 0, the chunk the compiler chooses. Run from the project root: python docs/results/2026-12-06-s62/recvq.py"""
import sys

sys.path.insert(0, "examples")
import bench_compiler  # noqa: E402

from hoccl_compiler import CompileOptions, compile_plan  # noqa: E402
from hoccl_compiler.collective import CollectiveSpec  # noqa: E402
from hoccl_compiler.cost import collective_bound  # noqa: E402
from hoccl_compiler.simulate import simulate  # noqa: E402

for preset in ("dgx-h100", "paper-h800"):
    for nodes in (2, 4, 8):
        t = bench_compiler.topology(8 * nodes, device_only=True, preset=preset)
        spec = CollectiveSpec(kind="allgather", size_bytes=1 << 30)
        plan = compile_plan(t, spec, CompileOptions(baselines=False))
        b = collective_bound("allgather", spec.size_bytes, t, plan.report.lower_bound_s)
        kinds = sorted({plan.queues.kind[q] for st in plan.stages for q, r in zip(st.transfers.queue,
                                                                                   st.transfers.role) if r == 1})
        print(f"{preset:10s} {nodes}x8  chunk {plan.options.chunk_bytes >> 20:3d} MiB  v2 "
              f"{plan.report.predicted_time_s / b:.3f}  simulation {simulate(plan).total_s / b:.3f}  native copies on "
              f"{' + '.join(kinds)}", flush=True)
