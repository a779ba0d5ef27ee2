"""v2 against the chunk simulation (`hoccl_compiler.simulate`) over a grid: dgx-h100 and paper-h800, AllGather,
All-to-All and Broadcast of 1 GiB, 1-8 nodes of 8 GPUs, one or two DMA queues a GPU, the auto chunk and 1 / 4 / 16
MiB, host costs at 0 (examples/bench_compiler.py's device side). One line a case; the JSON to argv[1]. Run from the
project root: python docs/results/2026-12-06-s63/v2grid.py OUT.json (about 2 minutes on the 2-core VM)."""
import json
import sys

sys.path.insert(0, "examples")
import bench_compiler  # noqa: E402

from hoccl_compiler import CompileOptions, compile_plan  # noqa: E402
from hoccl_compiler.collective import CollectiveSpec  # noqa: E402
from hoccl_compiler.cost import collective_bound  # noqa: E402
from hoccl_compiler.simulate import simulate  # noqa: E402

out = {}
for preset in ("dgx-h100", "paper-h800"):
    for kind in ("allgather", "alltoall", "broadcast"):
        for nodes in (1, 2, 4, 8):
            for dq in (1, 2):
                for chunk in (None, 1 << 20, 4 << 20, 16 << 20):
                    if nodes == 8 and (dq == 2 or chunk == 1 << 20 or kind == "alltoall"):
                        continue
                    t = bench_compiler.topology(8 * nodes, device_only=True, preset=preset).model_copy(
                        update={"dma_queues": dq})
                    spec = CollectiveSpec(kind=kind, size_bytes=1 << 30)
                    plan = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=chunk))
                    b = collective_bound(kind, spec.size_bytes, t, plan.report.lower_bound_s)
                    sim = simulate(plan).total_s
                    key = f"{preset} {kind} {nodes}x8 dq{dq} chunk {chunk and chunk >> 20}"
                    out[key] = dict(v2=plan.report.predicted_time_s / b, sim=sim / b,
                                    chosen=plan.options.chunk_bytes >> 20)
                    print(key, json.dumps(out[key]), flush=True)
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=0)
