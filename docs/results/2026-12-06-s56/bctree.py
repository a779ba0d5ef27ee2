"""Session 56: a Broadcast inside one node down two trees of GPUs (NCCL's double binary tree: each half of S down one
heap of the other GPUs) against the compiler's chain, 1 GiB, host costs 0: v2 and the chunk simulation over the
collective bound. Run from the project root: python docs/results/2026-12-06-s56/bctree.py"""
import dataclasses
import sys

import numpy as np

sys.path.insert(0, "examples")
from bench_compiler import topology  # noqa: E402

import hoccl_compiler.multicast as M  # noqa: E402
from hoccl_compiler import CollectiveSpec, compile_plan  # noqa: E402
from hoccl_compiler.cost import collective_bound  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402
from hoccl_compiler.simulate import simulate  # noqa: E402

orig = M._broadcast

def tree_broadcast(spec, topo, lay, trees=True):
    G, N = topo.num_gpus, topo.nodes
    if N != 1:
        return orig(spec, topo, lay, trees)
    root, size = int(spec.root or 0), int(spec.size_bytes or 0)
    others = [(root + k) % G for k in range(1, G)]
    P = 2
    bounds = np.array([size * p // P for p in range(P + 1)], np.int64)
    part_bytes = np.diff(bounds)
    rows = []
    for v in range(G):
        if v == root:
            if not spec.in_place:
                rows.append((v, -1, size))
            continue
        rows += [(v, p, int(part_bytes[p])) for p in range(P) if part_bytes[p]]
    dst = np.array([r[0] for r in rows])
    part = np.array([r[1] for r in rows])
    nb = np.array([r[2] for r in rows])
    offset = np.where(part >= 0, bounds[np.maximum(part, 0)], 0)
    flow_of = {(int(d), int(p)): f for f, (d, p) in enumerate(zip(dst, part, strict=True))}
    parent = {}
    for p, order in enumerate((others, others[::-1])):
        for j, v in enumerate(order):
            parent[(v, p)] = root if j == 0 else order[(j - 1) // 2]
    via = np.full(dst.size, -1, np.int64)
    for f, (v, p) in enumerate(zip(dst.tolist(), part.tolist(), strict=True)):
        if p < 0:
            continue
        prev = parent[(v, p)]
        via[f] = -1 if prev == root else flow_of[(prev, p)]
    n = dst.size
    return dataclasses.replace(lay, src=np.full(n, root, np.int64), dst=dst, bytes=nb, src_offset=offset,
                               dst_offset=offset, via=via)

for preset in ("dgx-h100", "paper-h800"):
    t = topology(8, device_only=True, preset=preset)
    spec = CollectiveSpec(kind="broadcast", size_bytes=1 << 30)
    for name, fn in (("chain", orig), ("trees", tree_broadcast)):
        M._broadcast = fn
        for chunk in (None, 4 << 20, 8 << 20, 16 << 20):
            plan = compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=chunk))
            rep = plan.report
            b = collective_bound("broadcast", 1 << 30, t, rep.lower_bound_s)
            sim = simulate(plan)
            print(preset, name, plan.options.chunk_bytes >> 20, "MiB", "v2", round(rep.predicted_time_s / b, 3),
                  "sim", round(sim.time_s / b, 3) if hasattr(sim, "time_s") else sim)
