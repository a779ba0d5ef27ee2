"""Session 61: a Broadcast inside one node as a pipelined scatter plus AllGather, against the compiler's chain.

The root r cuts S into rounds of L - 1 pieces; in round n it sends piece (n, j) to owner j (the GPUs other than r,
in order), and owner j passes it on to the other L - 2 owners, each copy reading what the root wrote into j's output
(a forwarded flow: `via`, chunk after chunk; the plan format as it is). The queue order is a Latin schedule in slots:
the root sends to owner x = t mod (L - 1) in slot t; owner j, idle as a sender while it takes from the root, sends
its newest piece to owner (2x - j) mod (L - 1), so that in every slot each owner takes from exactly one sender and
each piece reaches the L - 2 others in the L - 2 slots after it lands. Round sizes: `shape` (equal rounds, with
smaller ones at the head and tail, which the fill and drain wait on). Against the chain: v2 and the chunk
simulation over the collective bound (dgx-h100 and paper-h800, one node of 8, 1 GiB, in place, host costs 0), and
the schedule in lockstep by arithmetic. Run from the project root: python docs/results/2026-12-06-s61/sag.py"""
import dataclasses
import sys

import numpy as np

sys.path.insert(0, "examples")
from bench_compiler import topology  # noqa: E402

import hoccl_compiler.multicast as M  # noqa: E402
import hoccl_compiler.passes.chunks as CH  # noqa: E402
from hoccl_compiler import CollectiveSpec, compile_plan  # noqa: E402
from hoccl_compiler.cost import collective_bound  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402
from hoccl_compiler.simulate import simulate  # noqa: E402

orig, orig_rf = M._broadcast, CH.ready_first
SHAPE, MODE, SLOTS = [], "slot", []


def pieces(size: int, shape: list[float]) -> list[int]:
    """Each round's piece size (bytes, multiples of 4 KiB), rounds in proportion to ``shape``, L - 1 = 7 pieces a
    round; the last round takes what rounding leaves."""
    w = np.asarray(shape, float) / sum(shape)
    per = [int(size * x / 7) // 4096 * 4096 for x in w]
    per[-1] = 0
    rest = size - 7 * sum(per)
    return per[:-1] + [rest // 7], rest - 7 * (rest // 7)


def sag(spec, topo, lay, trees=True):
    root, size, L = int(spec.root or 0), int(spec.size_bytes or 0), topo.gpus_per_node
    n_own = L - 1
    owners = [(root + 1 + j) % L for j in range(n_own)]
    per, extra = pieces(size, SHAPE)
    rows = []  # (dst, offset, bytes, via (row index), slot)
    off = 0
    for n, c in enumerate(per):
        got = {}
        for j in range(n_own):
            b = c + (extra if n == len(per) - 1 and j == n_own - 1 else 0)
            got[j] = len(rows)
            rows.append((owners[j], off, b, -1, n_own * n + j))
            for k in range(1, n_own):  # slots n_own*n + j + k: x = (j + k) mod n_own, to (2x - j) mod n_own
                x = (j + k) % n_own
                d = (2 * x - j) % n_own
                rows.append((owners[d], off, b, got[j], n_own * n + j + k))
            off += b
    assert off == size, (off, size)
    order = sorted(range(len(rows)), key=lambda f: (rows[f][0], rows[f][1]))  # the layout's flow order
    new = {f: i for i, f in enumerate(order)}
    rows = [(r[0], r[1], r[2], -1 if r[3] < 0 else new[r[3]], r[4]) for r in (rows[f] for f in order)]
    SLOTS[:] = [r[4] for r in rows]
    dst, offs, nb, via = (np.array([r[i] for r in rows], np.int64) for i in range(4))
    return dataclasses.replace(lay, src=np.full(dst.size, root, np.int64), dst=dst, bytes=nb, src_offset=offs,
                               dst_offset=offs, via=via)


def ready_first(topo, chunk_bytes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, after, depth, order,
                limit=CH.READY_FIRST_MAX_ENTRIES):
    if MODE == "slot" and SLOTS and order.size == len(SLOTS):  # one chunk a transfer, a transfer a flow
        return order[np.argsort(np.asarray(SLOTS)[order], kind="stable")]
    return orig_rf(topo, chunk_bytes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, after, depth, order,
                   limit)


CH.ready_first = ready_first
S = 1 << 30
SHAPES = {
    "8 equal": [1] * 8,
    "16 equal": [1] * 16,
    "32 equal": [1] * 32,
    "8, ramps 1/4,1/2 | 1/2,1/4,1/8": [.25, .5] + [1] * 8 + [.5, .25, .125],
    "12, ramps 1/4,1/2 | 1/2,1/4,1/8,1/16": [.25, .5] + [1] * 12 + [.5, .25, .125, .0625],
    "16, ramps 1/4,1/2 | 1/2,1/4,1/8,1/16": [.25, .5] + [1] * 16 + [.5, .25, .125, .0625],
}
for preset in ("dgx-h100", "paper-h800"):
    t = topology(8, device_only=True, preset=preset)
    spec = CollectiveSpec(kind="broadcast", size_bytes=S, in_place=True)
    M._broadcast = orig
    SLOTS.clear()
    plan = compile_plan(t, spec, CompileOptions(baselines=False))
    b = collective_bound("broadcast", S, t, plan.report.lower_bound_s)
    print(f"{preset:10s} chain, {plan.options.chunk_bytes >> 20} MiB chunks: v2 {plan.report.predicted_time_s / b:.3f}"
          f"  simulation {simulate(plan).total_s / b:.3f}", flush=True)
    M._broadcast = sag
    for name, shape in SHAPES.items():
        SHAPE[:] = shape
        per, _ = pieces(S, shape)
        for mode in ("slot", "list"):
            MODE = mode
            plan = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=max(per) + 4096))
            assert len(plan.stages) == 1 and len(plan.stages[0].transfers.flow) == len(plan.flows.dst)
            sim = simulate(plan).total_s
            # lockstep: slot t's length is the largest piece in flight then, at NVLink's rate with the duplex factor
            # (every owner sends and takes), plus the copy engine's start
            slot_piece = np.zeros(7 * len(per) + 6)
            for n, c in enumerate(per):
                for j in range(7):
                    slot_piece[7 * n + j: 7 * n + j + 7] = np.maximum(slot_piece[7 * n + j: 7 * n + j + 7], c)
            nv = S / b  # one node: b is S / NVLink
            lock = float((slot_piece / nv * t.costs.nvlink_duplex + t.costs.dma_start_us * 1e-6).sum())
            print(f"{preset:10s} scatter+AG {name:38s} {mode:4s}: v2 {plan.report.predicted_time_s / b:.3f}  "
                  f"simulation {sim / b:.3f}  lockstep {lock / b:.3f}", flush=True)
