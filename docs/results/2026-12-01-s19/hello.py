"""A reusable network executor's plan notice, waited for (before: the committed executor, a round trip before any
chunk) or checked on arrival (after: session 19's try, hello-notice.patch, not committed: chunks move at once and
wait in the rings until the sender's notice came), A/B in interleaved rounds (session 19).

    cp hoccl_runtime/net/executor.py /tmp/executor_after.py && patch /tmp/executor_after.py \
        docs/results/2026-12-01-s19/hello-notice.patch
    python docs/results/2026-12-01-s19/hello.py --after /tmp/executor_after.py [--gpu] [--rounds 3] [--reps 100]

Two "nodes" (processes) joined by the TCP transport, as the network communicators set them up (reuse=True, 8
lanes, 8 MiB chunks, ring_slots); send/recv GPU 0 -> GPU 1 of 64 KiB, 2 MiB and 8 MiB. "after" loads
the --after file as a module of the package. Median per call of the
slowest node over --reps calls after a warm-up; prints a table last.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

SIZES = tuple(int(s) << 10 for s in __import__("os").environ.get("HELLO_SIZES_KIB", "64,2048,8192").split(","))


def executor_module(variant: str, after: str):
    if variant == "before":
        from hoccl_runtime.net import executor
        return executor
    spec = importlib.util.spec_from_file_location("hoccl_runtime.net.executor_after", after)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def body(node, exchange, plan_json, reps, gpu, variant, after):
    from measure_net_costs import timed_runs

    from hoccl_compiler.schema import plan_from_json

    mod = executor_module(variant, after)
    plan = plan_from_json(plan_json)
    return timed_runs(node, plan, exchange, reps, gpu, slots=mod.ring_slots(plan.options.chunk_bytes), reuse=True,
                      executor=mod)


def main(argv=None) -> int:
    from hoccl_bench.nodeprocs import run_node_processes
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions

    p = argparse.ArgumentParser()
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--after", required=True, help="the executor with hello-notice.patch applied")
    args = p.parse_args(argv)
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    got: dict[tuple[str, int], list[float]] = {}
    for rnd in range(args.rounds):
        for size in SIZES:
            plan = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),)),
                                CompileOptions(chunk_bytes=min(8 << 20, size), baselines=False))
            for variant in (("before", "after") if rnd % 2 == 0 else ("after", "before")):
                res = run_node_processes(body, 2, (plan.model_dump_json(), args.reps, args.gpu, variant, args.after),
                                         timeout_s=300)
                med = statistics.median(max(res[n][i] for n in res) for i in range(args.reps))
                got.setdefault((variant, size), []).append(med)
                print(f"round {rnd} {size >> 10} KiB {variant}: {med * 1e6:.0f} us", flush=True)
    print(f"\n{'size':>9} | {'before us (rounds)':>28} | {'after us (rounds)':>28} | after / before   "
          f"({'GPU' if args.gpu else 'host'})")
    for size in SIZES:
        b, a = got[("before", size)], got[("after", size)]
        fmt = lambda v: f"{statistics.median(v) * 1e6:.0f} ({min(v) * 1e6:.0f}-{max(v) * 1e6:.0f})"  # noqa: E731
        print(f"{size >> 10:>5} KiB | {fmt(b):>28} | {fmt(a):>28} | {statistics.median(a) / statistics.median(b):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
