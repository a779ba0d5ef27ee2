"""Session 39: the 4x8 dgx-h100 AllGather of 1 GiB (host costs 0, auto chunk): per stage its v2 time and the MiB per
role, and the report's parts; appended to ag_chunks.txt."""
import sys
sys.path.insert(0, "."); sys.path.insert(0, "examples")
import numpy as np
from bench_compiler import HOST_COSTS, make_topology, CollectiveSpec, compile_plan, CompileOptions
topo = make_topology("dgx-h100", nodes=4)
t = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
p = compile_plan(t, CollectiveSpec(kind="allgather", size_bytes=1 << 30), CompileOptions(baselines=False))
names = [r.name for r in p.roles]
for st in p.stages:
    tr = st.transfers
    role, b, src = np.asarray(tr.role), np.asarray(tr.bytes), np.asarray(tr.src)
    fwd = np.asarray(tr.after) >= 0
    print(st.index, f"time {st.time_s*1e3:.3f} ms", {names[r]: int(b[(role == r)].sum() >> 20) for r in np.unique(role)},
          "forwarded MiB", int(b[fwd].sum() >> 20), "gpu0 out native", int(b[(src == 0) & (role == 1) & ~fwd].sum() >> 20))
print(p.report.breakdown_s, p.report.lower_bound_by_domain_s)
