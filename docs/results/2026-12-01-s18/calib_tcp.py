"""TCP send/recv GPU to GPU, repeated, for the cost model's calibration (session 18).

    python docs/results/2026-12-01-s18/calib_tcp.py [--rounds 5] [--json FILE]

Two "nodes" (processes) on this machine's GPU 0 joined by the TCP transport, as examples/bench_internode.py times
them (8 lanes, 8 MiB chunks, the executor's default ring), 64 KiB .. 1 GiB. Rounds interleave the sizes; each round
times, per size, the GPU path (median of the slowest node over its calls), the TCP transport alone host to host
(one write of the whole size; and "chunked": the executor's protocol without its copies, writes of 8 MiB into a
ring of slots credited by the receiver) and plain sockets (examples/bench_tcp.py). Prints per size the median
over rounds and the spread; writes every round to --json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

SIZES = (64 << 10, 2 << 20, 8 << 20, 32 << 20, 128 << 20, 512 << 20, 1 << 30)


def main(argv=None) -> int:
    import bench_internode as bi
    import bench_tcp

    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.net.executor import ring_slots

    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    rows = []
    for rnd in range(args.rounds):
        for size in SIZES:
            plan = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),)),
                                CompileOptions(chunk_bytes=min(8 << 20, size), baselines=False))
            reps = 7 if size <= (128 << 20) else 3
            res = bi.run_nodes(plan, lanes=8, slots=ring_slots(plan.options.chunk_bytes), reps=reps)
            gpu = bi.slowest_median(res, reps)
            transport, sockets = bench_tcp.hoccl(8, size), bench_tcp.raw(8, size)
            chunk = min(8 << 20, size)
            chunked = bench_tcp.chunked(8, size, chunk, ring_slots(chunk))
            rows.append(dict(round=rnd, size=size, gpu_s=gpu, transport_s=transport, chunked_s=chunked,
                             sockets_s=sockets))
            print(f"round {rnd} {size >> 10} KiB: gpu {gpu * 1e3:.3f} ms transport {transport * 1e3:.3f} "
                  f"chunked {chunked * 1e3:.3f} sockets {sockets * 1e3:.3f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    keys = ("gpu_s", "transport_s", "chunked_s", "sockets_s")
    print(f"\n{'size':>9} | " + " | ".join(f"{k[:-2] + ' ms (min-max)':>24}" for k in keys))
    for size in SIZES:
        cells = []
        for key in keys:
            v = [r[key] * 1e3 for r in rows if r["size"] == size]
            cells.append(f"{statistics.median(v):8.3f} ({min(v):.3f}-{max(v):.3f})")
        print(f"{size >> 10:>6} KiB | " + " | ".join(f"{c:>24}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
