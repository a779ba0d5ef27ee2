"""``hoccl-run PLAN``: run a plan file as written, check every output byte, time it (the runtime's main job for
someone who got a plan from ``hoccl-compile``).

    hoccl-run plan.json                                  # a one-node plan, from one process
    torchrun --nnodes 2 --nproc-per-node 1 ... -m hoccl_bench.run plan.json   # one process per node
    bash scripts/tcp-nodes.sh -m hoccl_bench.run plan.json                    # two "nodes" on this host

Every buffer the plan names is allocated on this process's GPUs (local GPU i of a node on device i modulo the
devices it sees, so the ranks of a plan may share one GPU), inputs get a pattern that any node can work out for any
rank (so no node needs another's data to check), outputs are poisoned (0xA5), and after the first run every output
byte is compared with the collective's definition (the compiler's byte layout: block j of rank i's input lands at
its place in rank j's output). Then ``--iters`` timed runs; the last line is nccl-tests': size, time, algbw,
busbw and #wrong (bytes not as the definition says; 0 or the run failed).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np

__all__ = ["main", "pattern", "expected_output"]

POISON = 0xA5


def pattern(xp: Any, rank: int, start: int, n: int) -> Any:
    """Bytes ``start .. start + n`` of rank ``rank``'s input: a hash of (rank, index), the same from NumPy and
    CuPy, so any node works out any rank's input without it."""
    i = xp.arange(start, start + n, dtype=xp.uint64)
    salt = xp.uint64((rank * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)  # worked out in Python: no overflow warning
    h = (i + salt) * xp.uint64(0xBF58476D1CE4E5B9)  # wraps modulo 2**64 element-wise, as intended
    return ((h >> xp.uint64(29)) & xp.uint64(0xFF)).astype(xp.uint8)


def expected_output(plan: Any, rank: int) -> np.ndarray:
    """Rank ``rank``'s output as the collective defines it (poison where nothing lands)."""
    from hoccl_compiler.collective import layout

    lay = layout(plan.collective, plan.topology.num_gpus)
    out = np.full(int(plan.ranks.output_bytes[rank]), POISON, np.uint8)
    res_off, res_bytes = lay.resident()
    if res_bytes[rank]:
        out[res_off[rank]:res_off[rank] + res_bytes[rank]] = pattern(np, rank, 0, int(res_bytes[rank]))
    for b in np.flatnonzero(lay.dst == rank):
        n, s, d = int(lay.bytes[b]), int(lay.src_offset[b]), int(lay.dst_offset[b])
        out[d:d + n] = pattern(np, int(lay.src[b]), s, n)
    return out


def _bus_factor(plan: Any) -> float:
    G = plan.topology.num_gpus
    return 1.0 if plan.collective.kind in ("broadcast", "sendrecv") else (G - 1) / G


def _size(plan: Any) -> int:
    spec = plan.collective
    return int(spec.size_bytes) if spec.size_bytes is not None else int(max(plan.ranks.output_bytes))


def _parser() -> argparse.ArgumentParser:
    from hoccl_compiler.cli import _Parser

    p = _Parser(prog="hoccl-run", description="Run a plan file (from hoccl-compile) on this machine's GPUs, check "
                "every output byte against the collective's definition, and time it. A plan of several nodes runs "
                "one process per node under torchrun (or scripts/tcp-nodes.sh).")
    p.add_argument("plan", help="the plan file (.json, .json.gz, compact or pattern)")
    p.add_argument("--iters", type=int, default=20, help="timed runs after the checked one (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="untimed runs before them (default 2)")
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the byte check")
    return p


def _gpus() -> int:
    """The GPUs this process sees, or a one-line error naming what hoccl-run needs (the runtime's own check of CuPy:
    missing, built for another CUDA, no driver)."""
    from hoccl_runtime._cuda import cupy_runtime
    from hoccl_runtime.errors import GPU_NEEDS, CudaError, HocclError

    try:
        count = cupy_runtime().getDeviceCount()
    except CudaError as exc:
        raise HocclError(f"hoccl-run needs a CUDA GPU: {exc}") from None
    if count < 1:
        raise HocclError(f"hoccl-run needs a CUDA GPU and sees none: it needs {GPU_NEEDS}")
    return count


def _body(argv: list[str] | None) -> int:
    from hoccl_compiler.cli import _UsageError

    args = _parser().parse_args(argv)
    if args.iters < 1 or args.warmup < 0:
        raise _UsageError(f"--iters {args.iters} --warmup {args.warmup}: give at least 1 timed run and 0 or more "
                          "warm-up runs")
    import hoccl_runtime as hr

    plan = hr.load_plan(args.plan)
    count = _gpus()
    import cupy

    topo = plan.topology
    N, L = topo.nodes, topo.gpus_per_node
    node = int(os.environ.get("RANK", "0")) if N > 1 else 0
    if N == 1 and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise _UsageError(f"plan {plan.plan_id} is for one node: run it from one process (WORLD_SIZE is "
                          f"{os.environ['WORLD_SIZE']})")
    ranks = list(range(node * L, node * L + L))
    say = (lambda text: print(text, flush=True)) if node == 0 else (lambda text: None)
    say(f"hoccl-run: plan {plan.plan_id}: {plan.collective.describe()} on {N} node(s) x {L} GPU(s); this process: "
        f"node {node}, ranks {ranks[0]}..{ranks[-1]} on {min(L, count)} of {count} visible GPU(s)")
    resident = plan.ranks.resident_bytes
    buffers, views = {}, {}
    for r in ranks:
        with cupy.cuda.Device((r % L) % count):
            out = cupy.full(int(plan.ranks.output_bytes[r]), POISON, cupy.uint8)
            if plan.collective.in_place and resident is not None and resident[r]:
                off = int(plan.ranks.resident_offset[r])
                inp = out[off:off + int(resident[r])]
            else:
                inp = cupy.empty(int(plan.ranks.input_bytes[r]), cupy.uint8)
            buffers[r], views[r] = (inp, out), (inp, out)

    def fill() -> None:
        for r, (inp, out) in views.items():
            with cupy.cuda.Device(out.device.id if out.size else inp.device.id):
                out.fill(POISON)
                if inp.size:
                    inp[...] = pattern(cupy, r, 0, inp.size)

    def sync() -> None:
        for d in range(min(L, count)):
            with cupy.cuda.Device(d):
                cupy.cuda.runtime.deviceSynchronize()

    fill()
    sync()
    hr.execute(plan, buffers)
    sync()
    wrong = 0
    if args.check:
        for r in ranks:
            got = cupy.asnumpy(views[r][1])
            bad = int(np.count_nonzero(got != expected_output(plan, r)))
            if bad:
                first = int(np.flatnonzero(got != expected_output(plan, r))[0])
                print(f"hoccl-run: node {node}: rank {r}: {bad} of {got.size} output bytes wrong (the first at byte "
                      f"{first})", flush=True)
            wrong += bad
    for _ in range(args.warmup):
        hr.execute(plan, buffers)
    sync()
    t0 = time.perf_counter()
    for _ in range(args.iters):
        hr.execute(plan, buffers)
    sync()
    seconds = (time.perf_counter() - t0) / args.iters
    size = _size(plan)
    algbw = size / seconds / 1e9
    say(f"{'#':>1} {'size':>12} {'time(us)':>10} {'algbw(GB/s)':>12} {'busbw(GB/s)':>12} {'#wrong':>7}")
    print(f"{'':>1} {size:>12} {seconds * 1e6:>10.1f} {algbw:>12.2f} {algbw * _bus_factor(plan):>12.2f} "
          f"{wrong if args.check else 'N/A':>7}" + (f"   (node {node})" if N > 1 else ""), flush=True)
    return 1 if wrong else 0


def main(argv: list[str] | None = None) -> int:
    from hoccl_compiler.cli import _run

    return _run("hoccl-run", lambda: _body(argv))


if __name__ == "__main__":
    sys.exit(main())
