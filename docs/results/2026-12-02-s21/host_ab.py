"""A/B of the network executor's host path on any CPU (no GPU): two node processes joined by TCP (8 lanes), a
reusable HostNodeExecutor as the communicators hold it, send/recv and All-to-All runs back to back; the executor of
a given commit (``git show``) against the work tree's, interleaved rounds in one invocation.

    python docs/results/2026-12-02-s21/host_ab.py BEFORE_COMMIT [--reps 200] [--rounds 3]

Prints per variant and case the median run of each round (the slower node's), in microseconds."""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))


def _executor(source: str | None):
    if source is None:
        from hoccl_runtime.net import executor

        return executor
    spec = importlib.util.spec_from_file_location("hoccl_runtime.net._executor_before", source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def body(node, exchange, plan_json, reps, source):
    from measure_net_costs import timed_runs

    from hoccl_compiler.schema import plan_from_json
    from hoccl_runtime.net.executor import ring_slots

    plan = plan_from_json(plan_json)
    return timed_runs(node, plan, exchange, reps, False, slots=ring_slots(8 << 20), reuse=True,
                      executor=_executor(source))


def main() -> int:
    from hoccl_bench.nodeprocs import run_node_processes
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions

    p = argparse.ArgumentParser()
    p.add_argument("before")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    old = Path(tempfile.mkdtemp()) / "executor_before.py"
    old.write_text(subprocess.run(["git", "-C", str(ROOT), "show", f"{args.before}:hoccl_runtime/net/executor.py"],
                                  check=True, capture_output=True, text=True).stdout)
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    opts = CompileOptions(chunk_bytes=8 << 20, baselines=False)
    cases = {"sendrecv 64KiB": CollectiveSpec(kind="sendrecv", pairs=((0, 1, 64 << 10),)),
             "sendrecv 1MiB": CollectiveSpec(kind="sendrecv", pairs=((0, 1, 1 << 20),)),
             "alltoall 64KiB": CollectiveSpec(kind="alltoall", size_bytes=2 * (64 << 10))}
    rows: dict = {}
    for _ in range(args.rounds):
        for name, spec in cases.items():
            plan_json = compile_plan(topo, spec, opts).model_dump_json()
            for variant, source in (("before", str(old)), ("now", None)):
                res = run_node_processes(body, 2, (plan_json, args.reps, source))
                slowest = [max(a, b) for a, b in zip(res[0], res[1], strict=True)]
                rows.setdefault((name, variant), []).append(statistics.median(slowest) * 1e6)
    print(f"{'case':<16}{'variant':<8} median us per round")
    for (name, variant), meds in rows.items():
        print(f"{name:<16}{variant:<8}" + "".join(f"{m:>9.0f}" for m in meds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
