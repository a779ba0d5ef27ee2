"""Is the network path's per-stage cost per stage or per flow? The same All-to-All staged and merged (session 18).

    python docs/results/2026-12-01-s18/merged_stages.py [--gpu] [--reps 20]

A uniform All-to-All of 64 KiB per pair on N = 2..5 "nodes" of 1 GPU (processes of this machine over TCP, as
examples/measure_net_costs.py) compiles to N - 1 stages, one flow per node and direction in each, and costs the
call plus ~381 us per further stage. Here the same plan also runs with all its stages merged into one (every
transfer, the chunk orders one after the other: each node sends N - 1 flows in that stage). The compiler never
makes such a plan and the GPU executor refuses it (one flow per GPU and direction per stage, verify rule 4); the
check is lifted here for the experiment only (its Routes give every GPU's sends and receives one sequence in
(stage, transfer, chunk) order either way). Outputs are checked against the plan's replay. If merged calls cost
what the staged ones do, the cost is per flow and merging stages buys nothing; if they cost a one-stage call, it
is per stage. Prints a table last.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from hoccl_bench.nodeprocs import run_node_processes  # noqa: E402
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402

PAIR_BYTES = 64 << 10
CHUNK, LANES = 8 << 20, 8


def merged(plan):
    """The plan with every stage's transfers in one stage (indices and waits shifted, chunk orders appended)."""
    from hoccl_compiler.schema import Stage, TransferTable

    cols = {name: [] for name in TransferTable.model_fields}
    chunks: list[int] = []
    for st in plan.stages:
        base = len(cols["flow"])
        for name in TransferTable.model_fields:
            vals = list(getattr(st.transfers, name))
            cols[name].extend([v + base if v >= 0 else v for v in vals] if name == "after" else vals)
        chunks.extend(i + base for i in st.chunks)
    stage = Stage(index=0, time_s=sum(s.time_s for s in plan.stages), transfers=TransferTable(**cols), chunks=chunks)
    return plan.model_copy(update={"stages": [stage]})


def inputs_for(plan, r):
    return np.random.default_rng([r, 5]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)


def body(node, exchange, plan_json, reps, gpu):
    from hoccl_compiler.schema import plan_from_json
    from hoccl_runtime.net.executor import GpuNodeExecutor, HostNodeExecutor, ring_slots

    plan = plan_from_json(plan_json)
    r = node  # 1 GPU per node
    if gpu:
        import cupy as cp

        with cp.cuda.Device(0):
            bufs = {r: (cp.asarray(inputs_for(plan, r)), cp.full(plan.ranks.output_bytes[r], 0xA5, cp.uint8))}
        cls = type("AnyFlows", (GpuNodeExecutor,), {"_one_per_ring": lambda self, *a: None})
    else:
        bufs = {r: (inputs_for(plan, r), np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8))}
        cls = HostNodeExecutor
    transport = cls.make_transport(plan, node, lanes=LANES)
    ex = cls(plan, node, bufs, transport, slots=ring_slots(CHUNK), timeout_s=60)
    ex.connect(exchange(transport.listen()))
    ex.run()
    out = cp.asnumpy(bufs[r][1]) if gpu else bufs[r][1].copy()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        ex.run()
        times.append(time.perf_counter() - t0)
    if gpu:
        ex.close()
    transport.close()
    return {"times": times, "out": out.tobytes()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--nodes", default="2,3,4,5")
    args = p.parse_args(argv)
    rows = []
    for n in [int(x) for x in args.nodes.split(",")]:
        topo = make_topology("h200x2", nodes=n, gpus_per_node=1)
        staged = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=PAIR_BYTES * n * n),
                              CompileOptions(chunk_bytes=CHUNK, max_extra_time=0.0, baselines=False))
        want = replay(staged, [inputs_for(staged, r) for r in range(n)]).outputs
        for name, plan in (("staged", staged), ("merged", merged(staged))):
            res = run_node_processes(body, n, (plan.model_dump_json(), args.reps, args.gpu), timeout_s=300)
            ok = all(np.array_equal(np.frombuffer(res[k]["out"], np.uint8), want[k]) for k in range(n))
            per_call = [max(res[k]["times"][i] for k in res) for i in range(args.reps)]
            rows.append(dict(nodes=n, plan=name, stages=len(plan.stages), ok=ok,
                             median_us=statistics.median(per_call) * 1e6, min_us=min(per_call) * 1e6))
            print(rows[-1], flush=True)
    print(f"\n{'nodes':>5} {'plan':>7} {'stages':>6} {'correct':>7} {'median us':>10} {'min us':>8}   "
          f"({'GPU' if args.gpu else 'host'})")
    for r in rows:
        print(f"{r['nodes']:>5} {r['plan']:>7} {r['stages']:>6} {r['ok']!s:>7} {r['median_us']:>10.0f} "
              f"{r['min_us']:>8.0f}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
