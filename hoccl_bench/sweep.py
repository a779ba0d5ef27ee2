"""``hoccl-bench sweep`` and ``hoccl-bench launch``: bandwidth by size against raw copies and NCCL, and host
microseconds inside one call (hoccl_bench.bench has the whole description)."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from typing import Any

from .common import Bench, _baselines, _sizes, batch_calls, cpu_gauge_us, current_cpu


def sweep(b: Bench, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows, unavailable, failures = [], {}, {}
    errors: dict[tuple[str, str, int], str] = {}
    ops = [o for o in args.collectives.split(",") if o]
    impls = _baselines(args.baselines)
    for size in _sizes(args.sizes):
        iters = batch_calls(size, args.iters)
        for op in ops:
            for impl in impls:
                if impl in unavailable or (impl in ("nccl-ce", "hoccl-peer") and op == "sendrecv") or \
                        (impl == "hoccl-inplace" and op != "allgather"):
                    continue  # NCCL's copy-engine mode covers collectives, not point-to-point
                try:
                    fn, check = b.make_op(op, impl, size)
                    wrong = check() if check is not None else None
                    t, host = b.timed(fn, iters)
                    sms, kernel = b.sms(fn) if size == args.sm_size else (None, None)
                    free = b.sm_free(fn) if size == args.sm_size else None
                    failed = 0.0
                except Exception as exc:  # noqa: BLE001 - a baseline this torch/NCCL cannot run is reported
                    errors[(impl, op, size)] = f"{type(exc).__name__}: {exc}"[:300]
                    failed = 1.0
                if b.max_over_ranks(failed):  # every rank skips the point together
                    why = errors.get((impl, op, size), "failed on another rank")
                    failures[(impl, op)] = failures.get((impl, op), 0) + 1
                    b.say(f"  {impl} {op} {size} B failed: {why.splitlines()[0]}")
                    if failures[(impl, op)] >= 10:  # give up on a baseline that fails 10 sizes in a row
                        unavailable[impl] = why
                    with contextlib.suppress(Exception):  # the row's error is reported already
                        b.release()
                    b.torch.cuda.synchronize()
                    continue
                bw = size / t / 1e9
                busbw = bw * (b.world - 1) / b.world if op != "sendrecv" else bw
                gauge = b.max_over_ranks(cpu_gauge_us())  # the slowest rank's, as for the times
                rows.append(dict(op=op, impl=impl, size=size, calls=iters, seconds=t, gbps=bw, busbw=busbw,
                                 host_us=host, wrong=wrong, correct=None if wrong is None else wrong == 0, sms=sms,
                                 sm_kernel=kernel, sm_free=free, cpu_gauge_us=gauge,
                                 cpu=current_cpu()))
                failures.pop((impl, op), None)  # only consecutive failures count
                b.release()
                b.torch.cuda.empty_cache()
        b.say(f"size {size >> 20} MiB done")
    b.write(args.out, "sweep", {"rows": rows, "unavailable": unavailable,
                                "failed_points": [f"{i} {o} {n}: {e}" for (i, o, n), e in errors.items()]})
    for line in sweep_table(rows):
        b.say(line)
    return rows


def sweep_table(rows: list[dict[str, Any]]) -> list[str]:
    """The sweep's table in nccl-tests' terms: size in bytes, out- or in-place, time per call (us), algbw and busbw
    (GB/s; busbw = algbw (n - 1) / n for AllGather and All-to-All), #wrong (output bytes that differ from NCCL's, the
    most of any rank; blank: not checked), then host us per call, SMs held and SM-free at the probe size, and the
    CPU gauge."""
    lines = [f"{'op':10} {'impl':13} {'size':>12} {'place':>5} {'time(us)':>10} {'algbw':>7} {'busbw':>7} "
             f"{'#wrong':>6} {'host us':>8} {'SMs':>4} {'SM-free':>7} {'py us':>6}"]
    for r in rows:
        sms = "" if r.get("sms") is None else r["sms"]
        free = "" if r.get("sm_free") is None else "yes" if r["sm_free"] else "no"
        wrong = "" if r.get("wrong") is None else r["wrong"]
        place = "in" if "inplace" in r["impl"] else "out"
        lines.append(f"{r['op']:10} {r['impl']:13} {r['size']:>12} {place:>5} {r['seconds'] * 1e6:10.1f} "
                     f"{r['gbps']:7.1f} {r['busbw']:7.1f} {wrong!s:>6} {r['host_us']:8.1f} {sms!s:>4} {free:>7} "
                     f"{r['cpu_gauge_us']:6.2f}")
    return lines


# --- launch ----------------------------------------------------------------------------------------------
def launch(b: Bench, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Host time per call with the GPU idle at the start of each batch (so no queue is full)."""
    rows = []
    for size in _sizes(args.sizes)[::2]:
        for op in [o for o in args.collectives.split(",") if o]:
            for impl in ("hoccl", "nccl"):
                fn, _ = b.make_op(op, impl, size)
                samples = []
                with b.torch.cuda.stream(b.stream):
                    fn()
                for _ in range(args.reps):
                    b.torch.cuda.synchronize()
                    b.dist.barrier()
                    t0 = time.perf_counter()
                    with b.torch.cuda.stream(b.stream):
                        for _ in range(4):
                            fn()
                    samples.append((time.perf_counter() - t0) / 4 * 1e6)
                host = b.max_over_ranks(statistics.median(samples))
                rows.append(dict(op=op, impl=impl, size=size, host_us=host, gbps=0.0))
    b.torch.cuda.synchronize()
    b.write(args.out, "launch", {"rows": rows, "kind": "launch"})
    b.say(f"{'op':10} {'impl':8} {'size':>9} {'host us/call (slowest rank)':>28}")
    for r in rows:
        b.say(f"{r['op']:10} {r['impl']:8} {r['size'] >> 20:>5} MiB {r['host_us']:10.1f}")
    return rows


# --- contention ------------------------------------------------------------------------------------------
