"""Session 45 experiment: the first chunk of every transfer cut into a ramp (chunk/2^r, chunk/2^r, ..., chunk/2), the
rest whole; every transfer alike, so chunk k still waits for chunk k. Usage: python ramp.py PLAN.json"""
import sys, numpy as np
sys.argv = [sys.argv[0], sys.argv[1]]
exec(open(__file__.replace('ramp.py', 'netchunk.py')).read().split("plan = load_plan")[0])
from hoccl_compiler import load_plan

def bounds_of(nbytes, chunk, ramp):
    # chunk sizes: chunk/2^ramp, chunk/2^ramp, chunk/2^(ramp-1), ..., chunk/2 (adding up to chunk), then chunk
    first = [chunk >> ramp] + [chunk >> r for r in range(ramp, 0, -1)] if ramp else []
    sizes = []
    left = nbytes
    for s in first:
        if left <= 0: break
        sizes.append(min(s, left)); left -= s
    while left > 0:
        sizes.append(min(chunk, left)); left -= chunk
    return sizes or [0]

def run_ramp(plan, ramp):
    topo = plan.topology; G = topo.num_gpus; chunk = plan.options.chunk_bytes
    st = plan.stages[0]; tr = st.transfers
    role = np.asarray(tr.role, np.int64); src = np.asarray(tr.src, np.int64); dst = np.asarray(tr.dst, np.int64)
    nb = np.asarray(tr.bytes, np.int64); queue = np.asarray(tr.queue, np.int64); after = np.asarray(tr.after, np.int64)
    sizes = [bounds_of(int(b), chunk, ramp) for b in nb]
    n_of = np.array([len(s) for s in sizes])
    out_port, in_port = S.piece_ports(role, src, dst, G)
    start = np.where(role == RDMA, topo.costs.nic_start_us, topo.costs.dma_start_us) * 1e-6
    seen = {}; entries = []
    extra = ramp  # the first original chunk becomes ramp + 1 chunks
    for t in st.chunks:
        t = int(t); k = seen.get(t, 0); seen[t] = k + 1
        js = range(0, min(extra + 1, n_of[t])) if k == 0 else [k + extra]
        for j in js:
            if j < n_of[t]:
                entries.append((int(queue[t]), t, j, sizes[t][j]))
    r = S._Run(topo, role, src, dst, out_port, in_port, start, n_of, after, plan.plan_id, 50_000_000)
    return run_dep(r, entries, lambda t, k: (after[t], min(k, n_of[after[t]] - 1)))

plan = load_plan(sys.argv[1])
for ramp in (0, 1, 2, 3, 4):
    print("ramp", ramp, round(run_ramp(plan, ramp) * 1e6, 1))
for ramp in (0, 3):
    LOG.clear(); ENDS.clear(); T = run_ramp(plan, ramp)
    qs = plan.queues
    rows = sorted((LOG[q][0][0], q, int(qs.gpu[q]), qs.kind[q], ENDS[q][-1], len(LOG[q])) for q in LOG)
    print('ramp', ramp, T*1e6)
    for r in rows:
        if r[3] == 'nic': print('   nic gpu%d first %.1f end %.1f n %d' % (r[2], r[0]*1e6, r[4]*1e6, r[5]))
