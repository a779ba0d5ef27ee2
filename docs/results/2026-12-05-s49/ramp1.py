"""Session 49 (the CPU VM): what chunks that grow along a transfer (small first and last chunks, the plan's chunk in
the middle) would give a one-stage plan, by session 45's chunk simulator (its event loop, a copy waiting for the
piece of the transfer it reads that holds its last byte). The ramp: the first chunks c / 2^r, c / 2^(r-1), ..., c / 2
and the last ones the same in reverse, the plan's chunk c between; each piece keeps the plan's order of its chunk.
Usage: python ramp1.py PLAN.json R..."""
import sys
from pathlib import Path

import numpy as np

from hoccl_compiler import load_plan
from hoccl_compiler import simulate as S
from hoccl_compiler.cost import collective_bound
from hoccl_compiler.ir import RDMA

source = (Path(__file__).parents[1] / "2026-12-05-s45" / "netchunk.py").read_text()
exec(source.split("plan = load_plan")[0].split("def run(plan, m):")[0])  # imports  # noqa: S102
LOG, ENDS = {}, {}
exec("def run_dep" + source.split("def run_dep")[1].split("plan = load_plan")[0])  # noqa: S102


def ramp_bounds(n, c, r):
    head = [c >> j for j in range(r, 0, -1)]  # c/2^r .. c/2
    edges, at = [0], 0
    for h in head:
        if at + h >= n:
            break
        at += h
        edges.append(at)
    tail = [c >> j for j in range(1, r + 1)]  # c/2 .. c/2^r from the end
    end_part = sum(tail)
    while at + c < n - end_part:
        at += c
        edges.append(at)
    for t in tail:
        if at + t < n:
            at += t
            edges.append(at)
    edges.append(n)
    return np.array(sorted(set(edges)), np.int64)


def simulate(plan, r):
    topo, st = plan.topology, plan.stages[0]
    G, chunk = topo.num_gpus, plan.options.chunk_bytes
    tr = st.transfers
    role, src, dst = (np.asarray(x, np.int64) for x in (tr.role, tr.src, tr.dst))
    nb, queue, after = (np.asarray(x, np.int64) for x in (tr.bytes, tr.queue, tr.after))
    bounds = {t: ramp_bounds(int(nb[t]), chunk, r) if nb[t] else np.array([0, 0]) for t in range(nb.size)}
    n_of = np.array([max(1, bounds[t].size - 1) for t in range(nb.size)], np.int64)
    out_port, in_port = S.piece_ports(role, src, dst, G)
    start = np.where(role == RDMA, topo.costs.nic_start_us, topo.costs.dma_start_us) * 1e-6
    seen, entries = {}, []
    for t in st.chunks:
        t = int(t)
        k = seen.get(t, 0)
        seen[t] = k + 1
        b = bounds[t]
        for j in np.nonzero((b[:-1] >= k * chunk) & (b[:-1] < (k + 1) * chunk))[0] if nb[t] else [0]:
            entries.append((int(queue[t]), t, int(j), int(b[j + 1] - b[j]) if nb[t] else 0))
    run = S._Run(topo, role, src, dst, out_port, in_port, start, n_of, after, plan.plan_id, 50_000_000)

    def dep(t, k):
        a, last = after[t], int(bounds[t][k + 1]) - 1 if nb[t] else 0
        return a, min(int(n_of[a]) - 1, int(np.searchsorted(bounds[a], last, side="right")) - 1)
    return run_dep(run, entries, dep)  # noqa: F821


plan = load_plan(sys.argv[1])
c = plan.collective
bound = collective_bound(c.kind, c.size_bytes, plan.topology, float("inf"))
for r in [int(x) for x in sys.argv[2:]]:
    LOG.clear()
    ENDS.clear()
    t = simulate(plan, r)
    print(f"{sys.argv[1]}: chunk {plan.options.chunk_bytes >> 20} MiB, ramp {r}: {t * 1e6:,.1f} us, "
          f"{t / bound:.3f}x the collective bound ({bound * 1e6:,.1f} us)", flush=True)
