"""Session 48 (the CPU VM): what chunks of two sizes in one Broadcast plan could reach, by simulation (issue 35).
Session 45's chunk simulator (netchunk.py) with chunks cut smaller per transfer: the root node's NVLink chain keeps
the plan's chunk (each of its copies pays the copy engine's start, and it carries S through every GPU of that node);
every other transfer (the NICs, the other nodes' rings) has its chunks cut M ways, all of them ("all") or only its
last one ("tail": a smaller last chunk drains the paths sooner); a copy of one waits for the chunk of the transfer it
reads that holds its last byte. Then the same with every GPU's NVLink copies dealt over two DMA queues piece by piece
(the pieces of one transfer alternating, the two queues overlapping their starts and sharing the GPU's ports).
Prints the simulated stage time and its ratio to the collective bound, per M.
Usage: python two_sizes.py PLAN.json M... (a one-stage multicast Broadcast plan)"""
import sys
from pathlib import Path

import numpy as np

from hoccl_compiler import load_plan
from hoccl_compiler import simulate as S
from hoccl_compiler.cost import collective_bound
from hoccl_compiler.ir import RDMA

source = (Path(__file__).parents[1] / "2026-12-05-s45" / "netchunk.py").read_text()
exec(source.split("plan = load_plan")[0].split("def run(plan, m):")[0])  # imports  # noqa: S102
LOG, ENDS = {}, {}  # what its event loop records
exec("def run_dep" + source.split("def run_dep")[1].split("plan = load_plan")[0])  # its event loop  # noqa: S102


def simulate(plan, M, tail, queues=1):
    topo, st = plan.topology, plan.stages[0]
    G, L, chunk = topo.num_gpus, topo.gpus_per_node, plan.options.chunk_bytes
    tr = st.transfers
    role, src, dst = (np.asarray(x, np.int64) for x in (tr.role, tr.src, tr.dst))
    nb, queue, after = (np.asarray(x, np.int64) for x in (tr.bytes, tr.queue, tr.after))
    root_node = int(plan.collective.root or 0) // L
    m = np.where((src // L == root_node) & (role != RDMA), 1, M)  # the root node's chain keeps the plan's chunk
    whole = np.maximum(1, -(-nb // chunk))  # the plan's chunks of each transfer
    # a transfer's pieces: its plan chunks cut m ways (all), or all whole but its last, cut m ways (tail)
    bounds = {}
    for t in range(nb.size):
        edges = np.arange(int(whole[t]) + 1) * chunk
        cut = range(int(whole[t])) if not tail else [int(whole[t]) - 1]
        fine = [int(e) for e in edges]
        for k in cut:
            fine += [k * chunk + (chunk * j) // int(m[t]) for j in range(1, int(m[t]))]
        fine = sorted({min(int(nb[t]), e) for e in fine} | {int(nb[t])})
        bounds[t] = np.array(fine if fine[0] == 0 else [0, *fine], np.int64)
    n_of = np.array([max(1, bounds[t].size - 1) for t in range(nb.size)], np.int64)
    out_port, in_port = S.piece_ports(role, src, dst, G)
    start = np.where(role == RDMA, topo.costs.nic_start_us, topo.costs.dma_start_us) * 1e-6
    seen, entries = {}, []
    for t in st.chunks:  # the plan's order, each of its chunks standing for the pieces cut from it
        t = int(t)
        k = seen.get(t, 0)
        seen[t] = k + 1
        b = bounds[t]
        for j in np.nonzero((b[:-1] >= k * chunk) & (b[:-1] < (k + 1) * chunk))[0] if nb[t] else [0]:
            q = int(queue[t]) + (int(j) % queues) * 1_000_000 * (role[t] != RDMA)  # queues: a GPU's copies dealt
            entries.append((q, t, int(j), int(b[j + 1] - b[j]) if nb[t] else 0))  # over that many, piece by piece
    r = S._Run(topo, role, src, dst, out_port, in_port, start, n_of, after, plan.plan_id, 50_000_000)

    def dep(t, k):  # the piece of after[t] that holds piece k's last byte
        a, last = after[t], int(bounds[t][k + 1]) - 1 if nb[t] else 0
        return a, min(int(n_of[a]) - 1, int(np.searchsorted(bounds[a], last, side="right")) - 1)
    return run_dep(r, entries, dep)  # noqa: F821 - defined above from the simulator's source


plan = load_plan(sys.argv[1])
c = plan.collective
bound = collective_bound(c.kind, c.size_bytes, plan.topology, float("inf"))
for queues in (1, 2):
    for M in [int(x) for x in sys.argv[2:]]:
        for tail in (False, True) if queues == 1 else (False,):
            LOG.clear()
            ENDS.clear()
            t = simulate(plan, M, tail, queues)
            print(f"{queues} DMA queue(s), M {M} {'tail' if tail else 'all '}: cut to "
                  f"{plan.options.chunk_bytes // M >> 10} KiB, stage {t * 1e6:,.1f} us, {t / bound:.3f}x the "
                  f"collective bound ({bound * 1e6:,.1f} us)")
