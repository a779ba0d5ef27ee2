"""Session 64: where v2's 2.12x for session 57's Broadcast over a hypercube of 8 GPUs (dgx-h100, 1 GiB in place, 64
chunks, each queue in the steps' order: bcpipe.py's plan) comes from. Prints v2's terms over the collective bound:
the port model, the busiest queue (its chunks' starts, bytes and convergence delays summed), the paths' fill, and
the chain of queues. Run from the project root: python docs/results/2026-12-07-s64/hypv2.py"""
import sys

sys.path.insert(0, "examples")
import hoccl_compiler.cost as C  # noqa: E402
import hoccl_compiler.multicast as M  # noqa: E402
from hoccl_compiler.ir import CompileOptions, chunk_sizes  # noqa: E402
from hoccl_compiler.pipeline import compile_state  # noqa: E402

with open("docs/results/2026-12-06-s57/bcpipe.py") as f:
    src = f.read()
g = {"__name__": "bcpipe"}
exec(compile(src[:src.index("S = 1 << 30\n")], "bcpipe.py", "exec"), g)  # its plan builders, not its loop
S = 1 << 30
t = g["topology"](8, device_only=True, preset="dgx-h100")
spec = g["CollectiveSpec"](kind="broadcast", size_bytes=S, in_place=True)
M._broadcast, g["MODE"], g["K"] = g["hyper"], "step", 64
st = compile_state(t, spec, CompileOptions(baselines=False, chunk_bytes=S // 64))
ch = st.chunks
sizes = chunk_sizes(ch.tr_role, ch.chunk_bytes, ch.net_chunk_bytes)
sc = C.stage_times_v2(t, sizes, ch.tr_stage, ch.tr_role, ch.tr_src, ch.tr_dst, ch.tr_bytes, ch.tr_queue,
                      ch.tr_after, ch.order_transfer, st.schedule.num_stages)
b = C.collective_bound("broadcast", S, t, st.costing.report["lower_bound_s"])
print(f"over the collective bound ({b * 1e6:.1f} us): ports {sc.ports_s[0] / b:.3f}, busiest queue "
      f"{sc.queues_s[0] / b:.3f}, paths' fill {sc.pipeline_s[0] / b:.3f}, chain {sc.chain.time_s() / b:.3f}; "
      f"the plan {st.costing.report['predicted_time_s'] / b:.3f}")

# the same with the convergence delay off (chunks at one queue position sharing a port: cost.shared_delay)
real = C.shared_delay
C.shared_delay = lambda key, nbytes: 0.0 * nbytes
sc = C.stage_times_v2(t, sizes, ch.tr_stage, ch.tr_role, ch.tr_src, ch.tr_dst, ch.tr_bytes, ch.tr_queue,
                      ch.tr_after, ch.order_transfer, st.schedule.num_stages)
C.shared_delay = real
print(f"without the convergence delay: busiest queue {sc.queues_s[0] / b:.3f}, chain {sc.chain.time_s() / b:.3f}")
