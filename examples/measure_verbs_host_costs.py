"""The RDMA (verbs) path's host costs for the cost model v2, timed on its host code with a fake NIC: what the
``verbs`` transport's cost profile (``hoccl_compiler.topology.TRANSPORT_COSTS``) is made of until a NIC is lent.

    python examples/measure_verbs_host_costs.py [--reps 40] [--shapes 2x1,3x1,4x1,5x1,2x2,2x4] [--json FILE]

The network executor (HostNodeExecutor, reusable, as the communicators hold it) drives a uniform All-to-All of
64 KiB per pair over ``VerbsTransport`` on the in-process fake of pyverbs (tests/support/fake_pyverbs.py: a write
with immediate lands its bytes and completes at once, as if the wire took no time). The nodes are threads of this
process, so what is timed is each node's **driving thread's CPU time** per call (``time.thread_time``), not the
wall clock that the shared GIL stretches; the loops poll every ``--poll-us`` (1000) so that waiting costs little
CPU. As in examples/measure_net_costs.py, 1 GPU per node on N nodes is N - 1 stages of one transfer each: the line
over N gives the call's own cost (intercept at one stage) and each further transfer's (slope); nodes of several
GPUs give each further transfer of the busiest node. Not included, because no NIC was there: the NIC's latency and
the wire. Prints a table last.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "examples"))

from measure_net_costs import fit_costs, parse_shapes, shape_plan, shape_row  # noqa: E402


def run_shape(pv, nodes: int, L: int, reps: int, poll_s: float) -> dict:
    from hoccl_runtime.net.host import HostNodeExecutor
    from hoccl_runtime.net.transport.verbs import VerbsTransport

    plan = shape_plan(nodes, L)
    transports = [VerbsTransport(pyverbs=pv, session=plan.plan_id, name=f"node{n}", qps=2, timeout_s=30)
                  for n in range(nodes)]
    bufs = [{r: (np.zeros(plan.ranks.input_bytes[r], np.uint8), np.zeros(plan.ranks.output_bytes[r], np.uint8))
             for r in range(n * L, (n + 1) * L)} for n in range(nodes)]
    execs = [HostNodeExecutor(plan, n, bufs[n], transports[n], slots=4, timeout_s=30, reuse=True)
             for n in range(nodes)]
    for ex in execs:
        ex.poll_s = poll_s
    addresses = {n: t.listen() for n, t in enumerate(transports)}
    cpu = {n: [] for n in range(nodes)}
    errors = []

    def node(n: int) -> None:
        try:
            ex = execs[n]
            ex.connect(addresses)
            ex.run(plan, bufs[n])  # warm-up
            for _ in range(reps):
                t0 = time.thread_time()
                ex.run(plan, bufs[n])
                cpu[n].append(time.thread_time() - t0)
            ex.leave()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append((n, exc))

    threads = [threading.Thread(target=node, args=(n,)) for n in range(nodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    for t in transports:
        t.close()
    if errors:
        raise SystemExit(f"{nodes} x {L}: {errors}")
    return shape_row(plan, [max(cpu[n][i] for n in cpu) for i in range(reps)])  # the busiest node's thread


def main(argv=None) -> int:
    import fake_pyverbs
    import pytest

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=40)
    p.add_argument("--poll-us", type=float, default=1000.0, help="the driving loops' sleep between polls")
    p.add_argument("--shapes", default="2x1,3x1,4x1,5x1,2x2,2x4",
                   help="NODESxGPUS, comma-separated (the 1-GPU shapes give the fit)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    shapes = parse_shapes(p, args.shapes)
    rows = []
    with pytest.MonkeyPatch.context() as mp:
        pv = fake_pyverbs.install(mp)
        for nodes, L in shapes:
            rows.append(run_shape(pv, nodes, L, args.reps, args.poll_us * 1e-6))
            print(f"{nodes} nodes x {L} done", flush=True)
    fit, _ = fit_costs(rows)
    print(f"\n{'nodes':>5} {'GPUs':>4} {'stages':>6} {'node flows':>10} {'GPU flows':>9} {'median us':>10} "
          f"{'min us':>9} {'max us':>9}   (the busiest node's driving-thread CPU time per call, fake NIC)")
    for r in rows:
        print(f"{r['nodes']:>5} {r['gpus_per_node']:>4} {r['stages']:>6} {r['node_flows']:>10} {r['gpu_flows']:>9} "
              f"{r['median_us']:>10.0f} {r['min_us']:>9.0f} {r['max_us']:>9.0f}")
    print(f"fit (1 GPU per node): one-stage call {fit['net_call_us']:.0f} us, each further transfer "
          f"{fit['net_flow_us']:.0f} us; nodes of several GPUs: each further transfer of the busiest node "
          f"{fit['net_node_flow_us']:.0f} us (host code only, not measured on a NIC)")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "fit": fit}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
