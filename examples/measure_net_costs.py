"""The network path's fixed costs, for the cost model v2 (topology ``costs.net_call_us``, ``net_flow_us`` and
``net_node_flow_us``).

    python examples/measure_net_costs.py [--gpu] [--reps 30] [--shapes 2x1,3x1,...] [--json FILE]

"Nodes" are processes of one machine joined by the TCP transport (as in examples/bench_internode.py), one GPU
each (``--gpu``: GpuNodeExecutor with every node on GPU 0, staging through pinned host rings; otherwise
HostNodeExecutor on host buffers). A uniform All-to-All of 64 KiB per pair on N = 2, 3, 4, 5 nodes has N - 1
stages (one shift each) and moves almost nothing, so a call's time is its start plus N - 1 stages of fixed
costs: the least-squares line over N gives the call's start (intercept at one stage) and the cost of each
further stage (slope: one further transfer of every GPU; session 18 found no barrier in it). Medians of
``--reps`` calls of the slowest node after a warm-up call. ``--shapes`` (nodes x GPUs per node) adds nodes of
several GPUs: there each node's GPUs send to every remote GPU, so the busiest node has more network transfers
than stages. Each row shows the busiest node's transfers and the busiest GPU's (``cost.plan_net_flows``) and v2's
predicted time for the plan. Prints a table last.
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
from hoccl_compiler.cost import plan_net_flows  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402
from hoccl_runtime.net.executor import ring_slots  # noqa: E402

PAIR_BYTES = 64 << 10
CHUNK, LANES = 8 << 20, 8  # as the network communicators (hoccl_runtime/comm/net.py)


def timed_runs(node, plan, exchange, reps, gpu, *, slots, reuse=False, executor=None) -> list[float]:
    """Node ``node``'s part of ``plan`` on zeroed buffers (on GPU 0 with ``gpu``), its node executor (from the
    module ``executor``, by default hoccl_runtime.net.executor) joined to the others over TCP with ``LANES`` lanes:
    one warm-up run, then the seconds of each of ``reps`` runs."""
    if executor is None:
        from hoccl_runtime.net import executor

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
    cls = executor.GpuNodeExecutor if gpu else executor.HostNodeExecutor
    transport = cls.make_transport(plan, node, lanes=LANES, open=True)  # one host's benchmark
    ex = cls(plan, node, bufs, transport, slots=slots, timeout_s=60, reuse=reuse)
    ex.connect(exchange(transport.listen()))
    ex.run()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        ex.run()
        times.append(time.perf_counter() - t0)
    if hasattr(ex, "close"):  # (a host executor of a commit before it had one, for A/B runs: nothing to free)
        ex.close()  # leaves the other nodes (a reusable executor's last run), frees what it holds
    transport.close()
    return times


def shape_plan(nodes: int, L: int):
    """The measured plan of a shape: a uniform All-to-All of PAIR_BYTES per pair, CHUNK chunks, the stages of the
    time-optimal peel (one shift each)."""
    topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L)
    return compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=PAIR_BYTES * nodes * L),
                        CompileOptions(chunk_bytes=CHUNK, max_extra_time=0.0, baselines=False))


def shape_row(plan, per_call: list[float]) -> dict:
    """A table row: the plan's shape, its network transfers, and the seconds of its calls (median, min, max)."""
    topo = plan.topology
    gpu_flows, node_flows = plan_net_flows(plan)
    return {"nodes": topo.nodes, "gpus_per_node": topo.gpus_per_node, "stages": len(plan.stages),
            "node_flows": node_flows, "gpu_flows": gpu_flows, "median_us": statistics.median(per_call) * 1e6,
            "min_us": min(per_call) * 1e6, "max_us": max(per_call) * 1e6}


def parse_shapes(p: argparse.ArgumentParser, text: str) -> list[tuple[int, int]]:
    """``--shapes`` (NODESxGPUS, comma-separated), checked: nodes 2 or more, two shapes of 1 GPU per node for the
    fit; else the parser's error."""
    try:
        shapes = [tuple(int(v) for v in s.split("x")) for s in text.split(",") if s]
        if any(len(sh) != 2 or sh[0] < 2 or sh[1] < 1 for sh in shapes):
            raise ValueError
    except ValueError:
        p.error(f"--shapes {text!r}: give NODESxGPUS pairs, nodes 2 or more, e.g. 2x1,3x1,2x2")
    if sum(1 for _, L in shapes if L == 1) < 2:
        p.error(f"--shapes {text!r}: the fit needs two shapes of 1 GPU per node or more")
    return shapes


def fit_costs(rows: list[dict]) -> tuple[dict, list[float]]:
    """The network costs from the rows' medians: 1 GPU per node, each further stage is one further transfer of every
    GPU (net_flow_us, the slope; net_call_us the one-stage call); nodes of several GPUs, each further transfer of
    the busiest node above the call (net_node_flow_us, the median over those shapes, which are returned too)."""
    one = [r for r in rows if r["gpus_per_node"] == 1]
    slope, intercept = np.polyfit(np.array([r["stages"] for r in one], float), np.array([r["median_us"] for r in one]),
                                  1)
    fit = {"net_call_us": float(intercept + slope), "net_flow_us": float(slope)}
    multi = [(r["median_us"] - fit["net_call_us"]) / (r["node_flows"] - 1) for r in rows
             if r["gpus_per_node"] > 1 and r["node_flows"] > 1]
    fit["net_node_flow_us"] = float(statistics.median(multi)) if multi else float("nan")
    return fit, multi


def body(node, exchange, plan_json, reps, gpu):
    from hoccl_compiler.codec import plan_from_json

    return timed_runs(node, plan_from_json(plan_json), exchange, reps, gpu, slots=ring_slots(CHUNK))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--shapes", default="2x1,3x1,4x1,5x1,2x2,2x4",
                   help="NODESxGPUS, comma-separated (the 1-GPU shapes give the fit)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    shapes = parse_shapes(p, args.shapes)
    rows = []
    for nodes, L in shapes:
        plan = shape_plan(nodes, L)
        res = run_node_processes(body, nodes, (plan.model_dump_json(), args.reps, args.gpu), timeout_s=300)
        per_call = [max(res[n][i] for n in res) for i in range(args.reps)]
        rows.append({**shape_row(plan, per_call), "v2_us": plan.report.predicted_time_s * 1e6})
        print(f"{nodes} nodes x {L} done", flush=True)
    fit, multi = fit_costs(rows)
    where = "GPU" if args.gpu else "host"
    print(f"\n{'nodes':>5} {'GPUs':>4} {'stages':>6} {'node flows':>10} {'GPU flows':>9} {'median us':>10} "
          f"{'min us':>9} {'max us':>9} {'v2 us':>8} {'v2/meas':>7}   ({where})")
    for r in rows:
        print(f"{r['nodes']:>5} {r['gpus_per_node']:>4} {r['stages']:>6} {r['node_flows']:>10} {r['gpu_flows']:>9} "
              f"{r['median_us']:>10.0f} {r['min_us']:>9.0f} {r['max_us']:>9.0f} {r['v2_us']:>8.0f} "
              f"{r['v2_us'] / r['median_us']:>7.3f}")
    print(f"fit (1 GPU per node): one-stage call {fit['net_call_us']:.0f} us, each further transfer (stage) "
          f"{fit['net_flow_us']:.0f} us")
    if multi:
        print(f"nodes of several GPUs: each further transfer of the busiest node {fit['net_node_flow_us']:.0f} us "
              f"above that call (median; {min(multi):.0f}-{max(multi):.0f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": args.gpu, "rows": rows, "fit": fit}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
