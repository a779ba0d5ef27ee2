"""Session 28: a broadcast on hoccl_runtime.execute, multicast (a chain, each copy reading what the one before it
wrote) against unicast (the root copies S to every rank), ranks sharing the one GPU (so every copy is a same-GPU
copy: this checks the chain's events on a real GPU and times the two on one GPU's memory, not NVLink). CUDA events
on the root's stream, medians of repeats, outputs poisoned and checked after every variant."""

from __future__ import annotations

import statistics
import sys

import cupy as cp
import numpy as np

import hoccl_runtime as hr
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions


def main() -> None:
    G = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    rows = []
    for size in (4 << 20, 64 << 20, 512 << 20):
        plans = {mc: compile_plan(make_topology("h200x2", nodes=1, gpus_per_node=G),
                                  CollectiveSpec(kind="broadcast", size_bytes=size, root=0),
                                  CompileOptions(chunk_bytes=None if mc else 1 << 40, baselines=False, multicast=mc))
                 for mc in (True, False)}
        data = cp.random.randint(0, 256, size, dtype=cp.uint8)
        outs = {r: cp.empty(size, cp.uint8) for r in range(G)}
        streams = {r: cp.cuda.Stream(non_blocking=True) for r in range(G)}
        times = {True: [], False: []}
        for rep in range(12):
            for mc in (True, False) if rep % 2 else (False, True):
                for o in outs.values():
                    o.fill(0xA5)
                cp.cuda.Device().synchronize()
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record(streams[0])
                for r in range(1, G):
                    streams[r].wait_event(start)
                hr.execute(plans[mc], {r: (data if r == 0 else None, outs[r]) for r in range(G)}, streams)
                for r in range(1, G):
                    ev = cp.cuda.Event()
                    ev.record(streams[r])
                    streams[0].wait_event(ev)
                end.record(streams[0])
                end.synchronize()
                for r in range(G):
                    assert bool((outs[r] == data).all()), (size, mc, r)
                if rep >= 2:
                    times[mc].append(cp.cuda.get_elapsed_time(start, end) * 1e3)
        m, u = statistics.median(times[True]), statistics.median(times[False])
        rows.append((size, plans[True].options.chunk_bytes, m, u))
    print(f"broadcast, {G} ranks on one GPU (same-GPU copies), median of 10, us")
    print(f"{'size':>10} {'chunk':>9} {'multicast':>10} {'unicast':>10} {'uni/multi':>9}")
    for size, chunk, m, u in rows:
        print(f"{size >> 20:>7} MiB {chunk >> 10:>6} KiB {m:>10.1f} {u:>10.1f} {u / m:>9.2f}")


if __name__ == "__main__":
    main()
