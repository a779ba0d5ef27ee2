"""``hoccl-bench``: HOCCL against raw copy-engine copies and NCCL, in one run (torchrun, one process per GPU).

    torchrun --nproc_per_node 2 -m hoccl_bench.bench sweep --out results/
    torchrun --nproc_per_node 2 -m hoccl_bench.bench contention --out results/
    torchrun --nproc_per_node 2 -m hoccl_bench.bench launch --out results/
    hoccl-bench-report results/ -o report.md

* ``sweep``: bandwidth by size (nccl-tests' definitions: send/recv bytes/t; AllGather and All-to-All
  algbw = total bytes/t, busbw = algbw (n-1)/n) for ``--baselines`` among ``hoccl``, ``hoccl-graph``
  (each call captured once into a CUDA graph and launched: no Python per call), ``hoccl-inplace``
  (AllGather with the input in the output's own block), ``hoccl-peer`` (a communicator with
  ``local_copies="peer"``: own blocks through the peer GPUs, no SM), ``hoccl-window`` (the buffers
  carved from one registered window per rank: no per-call address exchange), ``raw`` (one
  ``cudaMemcpyAsync`` per peer through CUDA IPC and the local part on a second stream, no
  synchronisation between ranks: the copy engines' limit),
  ``nccl``, ``nccl-ctas=K`` (a communicator with min = max CTAs = K) and ``nccl-ce`` (NCCL's
  copy-engine collectives: symmetric memory, CTA policy zero). HOCCL's output is checked once per
  size on fresh random data with a poisoned output. SMs per row come from a torch.profiler trace
  (the largest grid of any kernel the call launched; 0 when it launched none; the JSON names that
  kernel), after one empty trace (a process's first trace once recorded a kernel not of the call).
* ``contention``: a bf16 8192^3 GEMM loop and a memory-bound loop timed alone and beside back-to-back
  AllGathers of each communicator, in interleaved rounds (the order rotates every round); each window
  is preceded by untimed load with the same traffic (``--settle-iters``), so that it starts from that
  pairing's clock and power state rather than from the previous window's; slowdown = median time /
  median time alone, and "paired" = median over rounds of time / the same round's time alone
  (drift-resistant), with the bandwidth each communicator delivered inside the window, and HOCCL and
  raw copies paced at several rates (``--rates``). GPU power and SM clock sampled with nvidia-smi per
  variant.
* ``launch``: host microseconds inside one call, by size, for HOCCL and NCCL.

Each writes ``<command>.json`` (machine, GPU, driver, NCCL and torch versions, date, every figure)
into ``--out`` on rank 0 and prints a table last.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from .common import (  # noqa: F401
    OPS,
    Bench,
    PowerLog,
    _baselines,
    _loads,
    _sizes,
    batch_calls,
    cpu_gauge_us,
    current_cpu,
    ipc_export,
    raw_call,
    raw_plan,
)
from .contention import contention, contention_rows  # noqa: F401 - the names the tests and examples import here
from .sweep import launch, sweep


def _check_numbers(args: argparse.Namespace) -> None:
    """Refuse the other bad arguments before anything starts too: under torchrun they would surface only once the
    communicators are up and the loads timed alone (minutes), or never (a rate of 0 paces a call forever)."""
    ops = [o for o in args.collectives.split(",") if o]
    if not ops or set(ops) - set(OPS):
        raise SystemExit(f"hoccl-bench: --collectives {args.collectives!r}: give some of {', '.join(OPS)}, "
                         "comma-separated")
    if args.iters < 0:
        raise SystemExit(f"hoccl-bench: --iters {args.iters}: give a positive number of calls (or 0: by size)")
    for name, value, least in (("--size", args.size, 1), ("--sm-size", args.sm_size, 1), ("--rounds", args.rounds, 1),
                               ("--reps", args.reps, 1), ("--gemm-iters", args.gemm_iters, 1),
                               ("--mem-iters", args.mem_iters, 1), ("--settle-iters", args.settle_iters, 0)):
        if value is not None and value < least:
            raise SystemExit(f"hoccl-bench: {name} {value}: give a whole number of at least {least}")
    if not 0 <= args.warmup_s < float("inf"):
        raise SystemExit(f"hoccl-bench: --warmup-s {args.warmup_s}: give seconds >= 0")
    for name, spec in (("--rates", args.rates), ("--period-us", args.period_us)):
        try:
            values = [float(v) for v in spec.split(",") if v]
        except ValueError:
            values = [float("nan")]
        if not all(0 < v < float("inf") for v in values):
            raise SystemExit(f"hoccl-bench: {name} {spec!r}: give numbers above 0, comma-separated")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hoccl-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("sweep", "contention", "launch"))
    p.add_argument("--out", default=os.environ.get("OUT", "results"), help="folder for <command>.json")
    p.add_argument("--sizes", default="2MiB:1GiB", help="LOW:HIGH, powers of two between (default 2MiB:1GiB)")
    p.add_argument("--collectives", default=",".join(OPS))
    p.add_argument("--baselines",
                   default="hoccl,hoccl-graph,hoccl-inplace,hoccl-peer,hoccl-window,raw,nccl,nccl-ctas=1,2,4,8,nccl-ce")
    p.add_argument("--iters", type=int, default=0,
                   help="sweep: calls per timed batch (default: about 1 GiB per batch, 10 to 512 calls)")
    p.add_argument("--sm-size", type=int, default=64 << 20, help="size at which SMs are counted by trace")
    p.add_argument("--size", type=int, default=256 << 20, help="contention: AllGather bytes per call")
    p.add_argument("--rates", default="100,200,300", help="contention: paced rates in GB/s")
    p.add_argument("--period-us", default="", help="contention: also pace every rate with these clock ticks (us; "
                   "the default tick is 250 us): e.g. 4000 for longer idle gaps between larger pieces")
    p.add_argument("--in-place", action="store_true",
                   help="contention: also hoccl-inplace and raw-inplace (input = the output's own block: no "
                   "same-GPU copy), at full rate and at each rate")
    p.add_argument("--controls", action="store_true",
                   help="contention: also ticks@R (the pacing clock stream and its waits, no copies) and "
                   "raw-inplace-host@R (in-place copies in the same pieces, issued at the rate by a sleeping host "
                   "thread: no clock): what pacing costs the load apart from the bytes it moves")
    p.add_argument("--peer", action="store_true",
                   help="contention: also hoccl-peer and hoccl-peer@R: out-of-place AllGathers whose own block goes "
                   "through the peer GPU (local_copies=\"peer\"; no SM)")
    p.add_argument("--pace-feedback", action="store_true",
                   help="contention: paced calls (HOCCL's and raw) learn their sleeps (HOCCL_PACE_FEEDBACK=1)")
    p.add_argument("--copier-process", action="store_true",
                   help="contention: also raw-proc, raw-proc@R: the raw copies issued from a process of its own "
                   "(another CUDA context; measured 2026-11-30: far worse for the load, +15..25%% GEMM at 55 GB/s)")
    p.add_argument("--loads", default="gemm,membound", help="contention: loads to run beside (gemm, membound)")
    p.add_argument("--traffic-first", action="store_true",
                   help="contention: enqueue the traffic before the load (as a step issues a background collective "
                   "before the compute it overlaps) instead of the load first, held until both are enqueued")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup-s", type=float, default=2.0, help="contention: seconds of load before the rounds")
    p.add_argument("--reps", type=int, default=15, help="launch: batches per point")
    p.add_argument("--gemm-iters", type=int, default=60, help="contention: GEMMs per timed window (~100 ms)")
    p.add_argument("--mem-iters", type=int, default=200, help="contention: memory-bound adds per timed window")
    p.add_argument("--settle-iters", type=int, default=None,
                   help="contention: untimed iterations before each window, traffic running (default: as many)")
    args = p.parse_args(argv)
    _baselines(args.baselines), _sizes(args.sizes), _loads(args.loads)  # refuse bad arguments before starting anything
    _check_numbers(args)
    b = Bench(what=f"hoccl-bench {args.command}")
    t0 = time.time()
    try:
        {"sweep": sweep, "contention": contention, "launch": launch}[args.command](b, args)
    finally:
        b.say(f"hoccl-bench {args.command}: {time.time() - t0:.0f} s")
        b.close()
        b.dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

