"""The network executor's idle polling: sleep 50 us between polls (today) or yield the CPU first (session 18).

Needs the experimental HOCCL_NET_SPIN_US of the session's working tree (GpuNodeExecutor._idle: sched_yield for
that long after the last progress, then the 50 us sleeps); it was measured, found no better, and not committed.

    python docs/results/2026-12-01-s18/spin.py [--rounds 3] [--spins 0,1000] [--json FILE]

HOCCL_NET_SPIN_US: after the last progress the executor polls yielding the CPU (sched_yield) for this long before
it sleeps 50 us between polls. A one-chunk call crosses several host hops (staging done, write posted, arrival,
landing gated, landing done, end notices), each of which can wait out a sleep. GPU-to-GPU send/recv over TCP
(two "nodes" on GPU 0, 8 lanes, 8 MiB chunks, as calib_tcp.py), 64 KiB .. 128 MiB, the settings interleaved.
Prints medians and ranges last.
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

SIZES = (64 << 10, 2 << 20, 8 << 20, 32 << 20, 128 << 20)


def main(argv=None) -> int:
    import bench_internode as bi

    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.net.executor import ring_slots

    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--spins", default="0,1000")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    spins = [int(x) for x in args.spins.split(",")]
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    rows = []
    for rnd in range(args.rounds):
        for size in SIZES:
            plan = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),)),
                                CompileOptions(chunk_bytes=min(8 << 20, size), baselines=False))
            for spin in spins:
                res = bi.run_nodes(plan, lanes=8, slots=ring_slots(plan.options.chunk_bytes), reps=7,
                                   env={"HOCCL_NET_SPIN_US": str(spin)})
                t = bi.slowest_median(res, 7)
                cpu = statistics.median(res[0]["cpu"])
                rows.append(dict(round=rnd, size=size, spin_us=spin, gpu_s=t, cpu_s=cpu))
                print(f"round {rnd} {size >> 10} KiB spin {spin} us: {t * 1e3:.3f} ms, cpu {cpu * 1e3:.2f} ms",
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(f"\n{'size':>9} | " + " | ".join(f"{f'spin {s} us: ms (min-max)':>26}" for s in spins)
          + " | " + " | ".join(f"{f'cpu ms, spin {s}':>15}" for s in spins))
    for size in SIZES:
        cells, cpus = [], []
        for spin in spins:
            mine = [r for r in rows if r["size"] == size and r["spin_us"] == spin]
            v = [r["gpu_s"] * 1e3 for r in mine]
            cells.append(f"{statistics.median(v):8.3f} ({min(v):.3f}-{max(v):.3f})")
            cpus.append(f"{statistics.median(r['cpu_s'] for r in mine) * 1e3:15.2f}")
        print(f"{size >> 10:>5} KiB | " + " | ".join(f"{c:>26}" for c in cells) + " | " + " | ".join(cpus))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
