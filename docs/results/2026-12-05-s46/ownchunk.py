"""Session 46 experiment (the CPU VM): simulate a multicast AllGather, all stages overlapped (each queue: its stage 0 chunks, then stage 1's...),
with a GPU's own-block NVLink copies (no wait) cut into chunks of OWN bytes while forwarded copies and RDMA keep the
plan's chunk. Usage: python ownchunk.py PLAN.json OWN_MIB..."""
import sys
import numpy as np
from hoccl_compiler import load_plan
from hoccl_compiler import simulate as S
from hoccl_compiler.ir import RDMA

# run_dep (the chunk event loop with a dependency rule of the caller's): session 45's netchunk.py, taken as its ramp.py
# takes it; this script's run() below replaces netchunk's
from pathlib import Path
exec(open(Path(__file__).resolve().parents[1] / "2026-12-05-s45" / "netchunk.py").read().split("plan = load_plan")[0])

def run(plan, own):
    topo = plan.topology; G = topo.num_gpus; chunk = plan.options.chunk_bytes
    R, SRC, DST, NB, Q, AF, CS = [], [], [], [], [], [], []
    orders = []
    base = 0
    for st in plan.stages:
        tr = st.transfers
        role = np.asarray(tr.role, np.int64); after = np.asarray(tr.after, np.int64)
        nb = np.asarray(tr.bytes, np.int64)
        cs = np.where((role != RDMA) & (after < 0), own, chunk)
        R.append(role); SRC.append(np.asarray(tr.src, np.int64)); DST.append(np.asarray(tr.dst, np.int64)); NB.append(nb)
        Q.append(np.asarray(tr.queue, np.int64)); AF.append(np.where(after >= 0, after + base, -1)); CS.append(cs)
        orders.append((base, [int(t) for t in st.chunks]))
        base += len(role)
    role, src, dst, nb, queue, after, cs = (np.concatenate(x) for x in (R, SRC, DST, NB, Q, AF, CS))
    n_of = np.maximum(1, -(-nb // cs))
    out_port, in_port = S.piece_ports(role, src, dst, G)
    start = np.where(role == RDMA, topo.costs.nic_start_us, topo.costs.dma_start_us) * 1e-6
    entries = []
    for b, order in orders:
        seen = {}
        for t in order:
            t += b
            k = seen.get(t, 0); seen[t] = k + 1
            # each original chunk k covers bytes [k*chunk, (k+1)*chunk): emit the sub-chunks of size cs[t] starting there
            lo, hi = k * chunk, min((k + 1) * chunk, int(nb[t]))
            j0 = lo // int(cs[t]); j1 = -(-hi // int(cs[t]))
            for j in range(j0, j1):
                if (t, j) in emitted: continue
                emitted.add((t, j))
                entries.append((int(queue[t]), t, j, max(0, min(int(cs[t]), int(nb[t]) - j * int(cs[t])))))
    r = S._Run(topo, role, src, dst, out_port, in_port, start, n_of, after, plan.plan_id, 50_000_000)
    # a forwarded chunk k (plan's chunk) waits for the chunk of its source transfer that holds its last byte
    def dep(t, k):
        a = after[t]
        return a, min(int(n_of[a]) - 1, ((k + 1) * int(cs[t]) - 1) // int(cs[a]))
    return run_dep(r, entries, dep)

plan = load_plan(sys.argv[1])
from hoccl_compiler.cost import collective_bound
print("chunk MiB", plan.options.chunk_bytes >> 20)
for own in sys.argv[2:]:
    emitted = set()
    o = int(float(own) * (1 << 20))
    t = run(plan, o)
    print(f"own chunk {own} MiB: {t*1e6:.1f} us")
