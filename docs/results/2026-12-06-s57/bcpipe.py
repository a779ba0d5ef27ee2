"""Session 57: a Broadcast inside one node as a pipeline over a hypercube of GPUs (the binomial pipeline's exchange:
in step t every pair of GPUs along dimension t mod 3 swaps the newest chunk one has and the other lacks, the root
sends chunk t to its partner; k chunks reach all 8 GPUs in k + 3 steps, where the compiler's chain of 8 takes
k + 6), each chunk a flow of its own, its queue order the steps' (`step`) or the compiler's list schedule (`list`),
against the chain, 1 GiB, host costs 0: v2 and the chunk simulation over the collective bound, and the steps in
lockstep by arithmetic ((k + 3) x (chunk / NVLink + the DMA start)). Run from the project root:
python docs/results/2026-12-06-s57/bcpipe.py"""
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


def hypercube(k: int, d: int) -> list[tuple[int, int, int, int]]:
    """(step, from, to, chunk) of every send; GPU 0 is the root and holds every chunk."""
    p = 1 << d
    have = [set(range(k))] + [set() for _ in range(p - 1)]
    sends, t = [], 0
    while any(len(h) < k for h in have[1:]):
        bit = 1 << (t % d)
        moves = []
        for u in range(p):
            v = u ^ bit
            if u == 0 and t < k:
                moves.append((0, v, t))
            elif u and v and have[u] - have[v]:
                moves.append((u, v, max(have[u] - have[v])))
        for u, v, c in moves:
            have[v].add(c)
            sends.append((t, u, v, c))
        t += 1
    return sends


orig, orig_rf = M._broadcast, CH.ready_first
K, MODE, STEPS = 0, "list", []


def hyper(spec, topo, lay, trees=True):
    root, size = int(spec.root or 0), int(spec.size_bytes or 0)
    bounds = np.array([size * p // K for p in range(K + 1)], np.int64)
    rows = [] if spec.in_place else [(root, -1, size, -1, -1)]  # (dst, part, bytes, via, step)
    flow_of = {}
    for t, u, v, c in hypercube(K, topo.num_gpus.bit_length() - 1):
        flow_of[(v, c)] = len(rows)
        rows.append((v ^ root, c, int(bounds[c + 1] - bounds[c]), -1 if u == 0 else flow_of[(u, c)], t))
    order = sorted(range(len(rows)), key=lambda f: (rows[f][0], rows[f][1]))  # the layout's flow order
    new = {f: i for i, f in enumerate(order)}
    rows = [(r[0], r[1], r[2], -1 if r[3] < 0 else new[r[3]], r[4]) for r in (rows[f] for f in order)]
    STEPS[:] = [r[4] for r in rows]
    dst, part, nb, via = (np.array([r[i] for r in rows]) for i in range(4))
    off = np.where(part >= 0, bounds[np.maximum(part, 0)], 0)
    return dataclasses.replace(lay, src=np.full(dst.size, root, np.int64), dst=dst, bytes=nb, src_offset=off,
                               dst_offset=off, via=via)


def ready_first(topo, chunk_bytes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, after, depth, order,
                limit=CH.READY_FIRST_MAX_ENTRIES):
    if MODE == "step":  # one transfer a flow, in flow order: each queue's chunks in the steps' order
        return order[np.argsort(np.asarray(STEPS)[order], kind="stable")]
    return orig_rf(topo, chunk_bytes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, after, depth, order,
                   limit)


CH.ready_first = ready_first
S = 1 << 30
for preset in ("dgx-h100", "paper-h800"):
    t = topology(8, device_only=True, preset=preset)
    spec = CollectiveSpec(kind="broadcast", size_bytes=S)
    for name, fn, ks, mode in (("chain", orig, (None,), "list"), ("hypercube, list", hyper, (32, 64, 128, 256), "list"),
                               ("hypercube, steps", hyper, (16, 32, 64, 128, 256), "step")):
        M._broadcast, MODE = fn, mode  # MODE: read by ready_first
        for K in ks:
            plan = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=None if K is None else S // K))
            rep = plan.report
            b = collective_bound("broadcast", S, t, rep.lower_bound_s)
            sim = simulate(plan).total_s
            line = (f"{preset:10s} {name:17s} chunks {K or '-':>4} of {plan.options.chunk_bytes >> 20:3d} MiB: "
                    f"v2 {rep.predicted_time_s / b:.3f}  simulation {sim / b:.3f}")
            if K:  # the steps in lockstep: every GPU sends and takes one chunk a step at the NVLink's full rate
                step = S / K / (S / b) + t.costs.dma_start_us * 1e-6  # b is S / NVLink on one node
                line += f"  lockstep {(K + 3) * step / b:.3f}"
            print(line, flush=True)
