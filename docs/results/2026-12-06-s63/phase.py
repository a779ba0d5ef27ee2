"""Session 63: when a GPU's DMA and dma_recv queues start their chunks, in the chunk simulation of stage 0 of a
multicast AllGather of 1 GiB (one GPU's queues, device side, a forced chunk). The simulation's event loop is run with
a line added that logs each chunk's start. Run from the project root:
python docs/results/2026-12-06-s63/phase.py PRESET NODES CHUNK_MIB [GPU]"""
import inspect
import sys
import textwrap

sys.path.insert(0, "examples")
import bench_compiler  # noqa: E402

from hoccl_compiler import CompileOptions, compile_plan  # noqa: E402
from hoccl_compiler import simulate as simmod  # noqa: E402
from hoccl_compiler.collective import CollectiveSpec  # noqa: E402

LOG = []
START = "active[q] = [t, k, float(nbytes), now + float(self.start_of[t])]"
src = textwrap.dedent(inspect.getsource(simmod._Run.run))
assert START in src, "the simulation's event loop changed: find where a chunk starts in _Run.run"
src = src.replace(START, START + "; LOG.append((now, q, t))")
ns = dict(vars(simmod), LOG=LOG)
exec(src, ns)  # the same loop, logging
simmod._Run.run = ns["run"]

preset, nodes, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
gpu0 = int(sys.argv[4]) if len(sys.argv) > 4 else 0
topo = bench_compiler.topology(8 * nodes, device_only=True, preset=preset)
plan = compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=1 << 30),
                    CompileOptions(baselines=False, chunk_bytes=chunk << 20))
stage = plan.stages[0]
tr = stage.transfers
alone = simmod.simulate(plan.model_copy(update={"stages": [stage]}))
kinds, gpu = plan.queues.kind, plan.queues.gpu
print(f"{preset} {nodes}x8, {chunk} MiB chunks: stage 0 alone {alone.stage_s[0] * 1e6:.1f} us; GPU {gpu0}'s queues, "
      "each chunk's start (us, destination GPU, 1 where it waits on a path):")
for q in sorted({q for _, q, _ in LOG if gpu[q] == gpu0}):
    starts = [(round(float(n) * 1e6, 1), int(tr.dst[t]), int(tr.after[t] >= 0)) for n, qq, t in LOG if qq == q]
    print(f"  {kinds[q]:9s} {len(starts):3d} chunks, the first 14: {starts[:14]}")
