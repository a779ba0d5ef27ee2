"""Session 45 experiment (the CPU VM): simulate a plan with its RDMA transfers cut into chunks m times smaller than
the NVLink ones (an NVLink copy waits for the last sub-chunk of its chunk); per m the stage time, the NIC queues and
the last queues to finish, then the first chunks of one chain. Usage: python netchunk.py PLAN.json M..."""
import sys
import numpy as np
from hoccl_compiler import load_plan
from hoccl_compiler import simulate as S
from hoccl_compiler.ir import RDMA

def run(plan, m):
    topo = plan.topology
    G = topo.num_gpus
    chunk = plan.options.chunk_bytes
    st = plan.stages[0]
    tr = st.transfers
    role = np.asarray(tr.role, np.int64); src = np.asarray(tr.src, np.int64); dst = np.asarray(tr.dst, np.int64)
    nb = np.asarray(tr.bytes, np.int64); queue = np.asarray(tr.queue, np.int64); after = np.asarray(tr.after, np.int64)
    cs = np.where(role == RDMA, chunk // m, chunk)
    n_of = np.maximum(1, -(-nb // cs))
    out_port, in_port = S.piece_ports(role, src, dst, G)
    start = np.where(role == RDMA, topo.costs.nic_start_us, topo.costs.dma_start_us) * 1e-6
    # the order: each entry of an RDMA transfer stands for m sub-chunks
    seen = {}
    entries = []
    for t in st.chunks:
        t = int(t); k = seen.get(t, 0); seen[t] = k + 1
        subs = range(k * m, min((k + 1) * m, n_of[t])) if role[t] == RDMA else [k]
        for j in subs:
            left = int(nb[t]) - j * int(cs[t])
            entries.append((int(queue[t]), t, j, max(0, min(int(cs[t]), left))))
    r = S._Run(topo, role, src, dst, out_port, in_port, start, n_of, after, plan.plan_id, 50_000_000)
    # dependency: chunk k of t waits for the chunk of after[t] that holds its last byte
    orig = r.run
    def dep(t, k):
        a = after[t]
        j = min(int(n_of[a]) - 1, ((k + 1) * int(cs[t]) - 1) // int(cs[a]))
        return a, j
    return run_dep(r, entries, dep)

LOG={}; ENDS={}
def run_dep(self, entries, dep):
    queues = {}
    for q, t, k, nbytes in entries:
        queues.setdefault(q, []).append((t, k, nbytes))
    done = set(); head = {q: 0 for q in queues}; active = {}
    local, out_port, in_port = self.local, self.out_port, self.in_port
    now = 0.0
    while True:
        for q, items in queues.items():
            if q in active or head[q] >= len(items):
                continue
            t, k, nbytes = items[head[q]]
            if self.after_of[t] >= 0 and dep(t, k) not in done:
                continue
            active[q] = [t, k, float(nbytes), now + float(self.start_of[t])]
            LOG.setdefault(q, []).append((now, t, k))
            head[q] += 1
        if not active:
            assert all(head[q] >= len(v) for q, v in queues.items()), "deadlock"
            return now
        moving = [q for q, a in active.items() if a[3] <= now and a[2] > 0 and not local[a[0]]]
        rate = np.zeros(0)
        if moving:
            ts = np.array([active[q][0] for q in moving])
            busy = np.zeros(self.capacity.size, bool)
            busy[out_port[ts]] = busy[in_port[ts]] = True
            rate = S.max_min_rates(out_port[ts], in_port[ts], S.duplex_capacity(self.topo, busy, None))
        dt = np.inf
        for a in active.values():
            if a[3] > now: dt = min(dt, a[3] - now)
            elif a[2] <= 0 or local[a[0]]: dt = 0.0
        for i, q in enumerate(moving):
            dt = min(dt, active[q][2] / rate[i])
        now += dt
        for i, q in enumerate(moving):
            active[q][2] -= rate[i] * dt
        for q in [q for q, a in active.items() if a[3] <= now * (1 + 1e-12) and (a[2] <= 1e-3 or local[a[0]])]:
            done.add((active[q][0], active[q][1])); ENDS.setdefault(q, []).append(now); del active[q]

plan = load_plan(sys.argv[1])
from hoccl_compiler.cost import collective_bound
print("bound 2684.4")
for m in [int(x) for x in sys.argv[2:]]:
    LOG.clear(); ENDS.clear()
    print(m, "stage us", round(run(plan, m) * 1e6, 1))
    qs = plan.queues
    rows=[]
    for q in LOG:
        st=[x[0] for x in LOG[q]]; en=ENDS[q]
        rows.append((en[-1], q, int(qs.gpu[q]), qs.kind[q], st[0], len(st)))
    rows.sort(reverse=True)
    for r in [r for r in rows if r[3] != "dma"][:6] + rows[:3]: print('  end %.1f q%d gpu%d %s first %.1f n %d' % (r[0]*1e6, r[1], r[2], r[3], r[4]*1e6, r[5]))
m=4
LOG.clear(); ENDS.clear(); run(plan, m)
tr=plan.stages[0].transfers
for t in (5, 197, 69):
    q=int(tr.queue[t]); lst=[(s,k) for (s,tt,k) in LOG[q] if tt==t][:6]
    print(t, 'q', q, [(k, round(s*1e6,1)) for s,k in lst])
