"""Is the start-up skew of a timed batch what HOCCL's sweep rows carry above the raw copies? (session 18)

    torchrun --nproc_per_node 2 docs/results/2026-12-01-s18/skew.py [--json FILE]

The sweep (hoccl_bench.bench) times a batch of calls back to back after a barrier and divides by the calls; a
call that synchronises the ranks waits at the batch's first call for the later rank. If that is what the one-node
rows carry, then at a fixed size the per-call figure is c + skew / calls: a line in 1 / calls whose slope is the
skew. Here both ranks share GPU 0 (same-GPU copies: the figures are not the 2x H200's), the barrier is gloo's,
and each batch is timed as the sweep times it (CUDA events on the call stream, the slowest rank). Beside the
fit, the ranks' barrier exits measured directly (perf_counter, one host). Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

CALLS = (5, 10, 20, 40, 80, 160)
SIZES = (8 << 20, 64 << 20)
REPS = 7


def main(argv=None) -> int:
    import numpy as np
    import torch
    import torch.distributed as dist

    import hoccl_runtime as hr

    p = argparse.ArgumentParser()
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")
    comm = hr.init(device=0)
    stream = torch.cuda.Stream()
    rows = []
    for size in SIZES:
        out = torch.empty(size, dtype=torch.uint8, device="cuda")
        inp = torch.randint(0, 256, (size // world,), dtype=torch.uint8, device="cuda")

        def call(out=out, inp=inp):
            comm.all_gather_into_tensor(out, inp, stream)

        with torch.cuda.stream(stream):
            call()
        torch.cuda.synchronize()
        want = [torch.empty(size // world, dtype=torch.uint8) for _ in range(world)]
        dist.all_gather(want, inp.cpu())
        ok = bool(torch.equal(out.cpu(), torch.cat(want)))
        for calls in CALLS:
            per_call, exits = [], []
            for _ in range(REPS):
                dist.barrier()
                torch.cuda.synchronize()
                t_exit = time.perf_counter()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(stream)
                with torch.cuda.stream(stream):
                    for _ in range(calls):
                        call()
                end.record(stream)
                end.synchronize()
                mine = torch.tensor([start.elapsed_time(end) / 1e3 / calls, t_exit], dtype=torch.float64)
                both = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
                dist.all_gather(both, mine)
                per_call.append(max(float(b[0]) for b in both))
                exits.append(max(float(b[1]) for b in both) - min(float(b[1]) for b in both))
            rows.append(dict(size=size, calls=calls, per_call_s=statistics.median(per_call),
                             exit_skew_s=statistics.median(exits), correct=ok))
            if rank == 0:
                print(rows[-1], flush=True)
    if rank == 0:
        print(f"\n{'size':>8} {'calls':>6} {'per call us':>12} {'barrier exit skew us':>21}")
        for r in rows:
            print(f"{r['size'] >> 20:>4} MiB {r['calls']:>6} {r['per_call_s'] * 1e6:12.1f} "
                  f"{r['exit_skew_s'] * 1e6:21.1f}")
        for size in SIZES:
            mine = [r for r in rows if r["size"] == size]
            x = np.array([1 / r["calls"] for r in mine])
            y = np.array([r["per_call_s"] for r in mine])
            (c, skew), *_ = np.linalg.lstsq(np.c_[np.ones_like(x), x], y, rcond=None)
            resid = y - (c + skew * x)
            print(f"{size >> 20} MiB: per call = {c * 1e6:.1f} us + {skew * 1e6:.0f} us / calls (residuals "
                  f"{', '.join(f'{v * 1e6:+.1f}' for v in resid)} us); barrier exits "
                  f"{statistics.median(r['exit_skew_s'] for r in mine) * 1e6:.0f} us apart (median)")
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    comm.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
