"""The network path's fixed costs, for the cost model v2 (topology ``costs.net_call_us`` and ``stage_sync_us``).

    python examples/measure_net_costs.py [--gpu] [--reps 30] [--json FILE]

"Nodes" are processes of one machine joined by the TCP transport (as in examples/bench_internode.py), one GPU
each (``--gpu``: GpuNodeExecutor with every node on GPU 0, staging through pinned host rings; otherwise
HostNodeExecutor on host buffers). A uniform All-to-All of 64 KiB per pair on N = 2, 3, 4, 5 nodes has N - 1
stages (one shift each) and moves almost nothing, so a call's time is its start plus N - 1 stages of fixed
costs: the least-squares line over N gives the call's start (intercept at one stage) and the cost of each
further stage (slope: the barrier, plus a stage's first and last chunk). Medians of ``--reps`` calls of the
slowest node after a warm-up call. Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hoccl_bench.nodeprocs import run_node_processes  # noqa: E402
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402
from hoccl_runtime.net.executor import ring_slots  # noqa: E402

PAIR_BYTES = 64 << 10
CHUNK, LANES = 8 << 20, 8  # as the network communicators (hoccl_runtime/comm/net.py)


def body(node, exchange, plan_json, reps, gpu):
    from hoccl_compiler.schema import plan_from_json
    from hoccl_runtime.net.executor import GpuNodeExecutor, HostNodeExecutor

    plan = plan_from_json(plan_json)
    bufs = {}
    L = plan.topology.gpus_per_node
    for r in range(node * L, node * L + L):
        sizes = plan.ranks.input_bytes[r], plan.ranks.output_bytes[r]
        if gpu:
            import cupy as cp

            with cp.cuda.Device(0):
                bufs[r] = tuple(cp.zeros(n, cp.uint8) for n in sizes)
        else:
            bufs[r] = tuple(np.zeros(n, np.uint8) for n in sizes)
    cls = GpuNodeExecutor if gpu else HostNodeExecutor
    transport = cls.make_transport(plan, node, lanes=LANES)
    ex = cls(plan, node, bufs, transport, slots=ring_slots(CHUNK), timeout_s=60)
    ex.connect(exchange(transport.listen()))
    ex.run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        ex.run()
        times.append(time.perf_counter() - t0)
    if gpu:
        ex.close()
    transport.close()
    return times


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    rows = []
    for nodes, L in ((2, 1), (3, 1), (4, 1), (5, 1), (2, 2), (2, 4)):
        topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L)
        plan = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=PAIR_BYTES * nodes * L),
                            CompileOptions(chunk_bytes=CHUNK, max_extra_time=0.0, baselines=False))
        res = run_node_processes(body, nodes, (plan.model_dump_json(), args.reps, args.gpu), timeout_s=300)
        per_call = [max(res[n][i] for n in res) for i in range(args.reps)]
        rows.append({"nodes": nodes, "gpus_per_node": L, "stages": len(plan.stages),
                     "median_us": statistics.median(per_call) * 1e6, "min_us": min(per_call) * 1e6,
                     "max_us": max(per_call) * 1e6})
        print(f"{nodes} nodes x {L} done", flush=True)
    one = [r for r in rows if r["gpus_per_node"] == 1]
    x = np.array([r["stages"] for r in one], float)
    y = np.array([r["median_us"] for r in one])
    slope, intercept = np.polyfit(x, y, 1)
    fit = {"net_call_us": float(intercept + slope), "stage_sync_us": float(slope)}
    two = [r for r in rows if r["nodes"] == 2]
    per_stage_2 = float(np.polyfit([r["stages"] for r in two], [r["median_us"] for r in two], 1)[0])
    where = "GPU" if args.gpu else "host"
    print(f"\n{'nodes':>5} {'GPUs':>4} {'stages':>6} {'median us':>10} {'min us':>9} {'max us':>9}   ({where})")
    for r in rows:
        print(f"{r['nodes']:>5} {r['gpus_per_node']:>4} {r['stages']:>6} {r['median_us']:>10.0f} "
              f"{r['min_us']:>9.0f} {r['max_us']:>9.0f}")
    print(f"fit (1 GPU per node): one-stage call {fit['net_call_us']:.0f} us, each further stage "
          f"{fit['stage_sync_us']:.0f} us")
    print(f"2 nodes of 1, 2, 4 GPUs: {per_stage_2:.0f} us per further stage of L flows per node")
    fit["two_nodes_stage_us"] = per_stage_2
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": args.gpu, "rows": rows, "fit": fit}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
