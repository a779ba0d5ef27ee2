"""TCP writes of a few MiB: does cutting them into smaller parts across lanes cut their latency? (session 18)

    python docs/results/2026-12-01-s18/min_part.py [--rounds 5] [--json FILE]

The TCP transport (8 lanes) cuts a write into parts of at least HOCCL_TCP_MIN_PART bytes (default 1 MiB), so
a 2 MiB write rides 2 lanes. Per size, interleaved rounds of each setting: the transport alone host to host
(examples/bench_tcp.py: one write and its acknowledgement) and the GPU path (two "nodes" on GPU 0, as
calib_tcp.py). Prints the medians and ranges last.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

SIZES = (256 << 10, 2 << 20, 8 << 20, 32 << 20)
PARTS = (1 << 20, 512 << 10, 256 << 10, 128 << 10)


def main(argv=None) -> int:
    import bench_internode as bi
    import bench_tcp

    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.net.executor import ring_slots

    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--gpu", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    rows = []
    for rnd in range(args.rounds):
        for size in SIZES:
            plan = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),)),
                                CompileOptions(chunk_bytes=min(8 << 20, size), baselines=False))
            for part in PARTS:
                env = {"HOCCL_TCP_MIN_PART": str(part)}
                os.environ.update(env)
                try:
                    transport = bench_tcp.hoccl(8, size)
                finally:
                    os.environ.pop("HOCCL_TCP_MIN_PART")
                gpu = None
                if args.gpu:
                    res = bi.run_nodes(plan, lanes=8, slots=ring_slots(plan.options.chunk_bytes), reps=7, env=env)
                    gpu = bi.slowest_median(res, 7)
                rows.append(dict(round=rnd, size=size, min_part=part, transport_s=transport, gpu_s=gpu))
                print(f"round {rnd} {size >> 10} KiB min_part {part >> 10} KiB: transport {transport * 1e3:.3f} ms"
                      + (f" gpu {gpu * 1e3:.3f} ms" if gpu is not None else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    keys = ["transport_s"] + (["gpu_s"] if args.gpu else [])
    print(f"\n{'size':>9} {'min part':>9} | " + " | ".join(f"{k[:-2] + ' ms (min-max)':>24}" for k in keys))
    for size in SIZES:
        for part in PARTS:
            cells = []
            for key in keys:
                v = [r[key] * 1e3 for r in rows if r["size"] == size and r["min_part"] == part]
                cells.append(f"{statistics.median(v):8.3f} ({min(v):.3f}-{max(v):.3f})")
            print(f"{size >> 10:>5} KiB {part >> 10:>5} KiB | " + " | ".join(f"{c:>24}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
