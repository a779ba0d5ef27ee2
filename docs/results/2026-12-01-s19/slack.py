"""The network executor's poll-loop sleeps under Linux's default timer slack (50 us: a 50 us sleep took 124 us on
the VM) and with the driving thread's slack at 1 us, A/B in interleaved rounds (session 19). Two "nodes" over TCP
as the communicators set them up (reuse=True, 8 lanes), send/recv of 64 KiB, 2 MiB, 8 MiB, 100 calls each,
medians of the slowest node. The variants set HOCCL_TIMER_SLACK_NS (0: the kernel's, 1000: the runtime's default
since session 19). slack_gpu.txt and slack_host.txt are this script's first version, run before the runtime set
the slack itself, which called prctl(PR_SET_TIMERSLACK) in each node process instead.

    python docs/results/2026-12-01-s19/slack.py [--gpu]
"""
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))


def body(node, exchange, plan_json, reps, slack_ns, gpu):
    import os

    os.environ["HOCCL_TIMER_SLACK_NS"] = str(slack_ns)  # read by the executor when it is made
    from measure_net_costs import timed_runs

    from hoccl_compiler.schema import plan_from_json
    from hoccl_runtime.net.executor import ring_slots

    plan = plan_from_json(plan_json)
    return timed_runs(node, plan, exchange, reps, gpu, slots=ring_slots(plan.options.chunk_bytes), reuse=True)


if __name__ == "__main__":
    from hoccl_bench.nodeprocs import run_node_processes
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions
    gpu = "--gpu" in sys.argv
    rounds = 3
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    got = {}
    for rnd in range(rounds):
        for size in (64 << 10, 2 << 20, 8 << 20):
            plan = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),)),
                                CompileOptions(chunk_bytes=min(8 << 20, size), baselines=False))
            for slack in ((0, 1000) if rnd % 2 == 0 else (1000, 0)):
                res = run_node_processes(body, 2, (plan.model_dump_json(), 100, slack, gpu), timeout_s=120)
                med = statistics.median(max(res[n][i] for n in res) for i in range(100))
                got.setdefault((size, slack), []).append(med)
    for size in (64 << 10, 2 << 20, 8 << 20):
        a, b = got[(size, 0)], got[(size, 1000)]
        fmt = lambda v: f"{statistics.median(v) * 1e6:.0f} ({min(v) * 1e6:.0f}-{max(v) * 1e6:.0f})"  # noqa: E731
        print(f"{size >> 10:>6} KiB  default slack {fmt(a)}  slack 1 us {fmt(b)}  "
              f"ratio {statistics.median(b) / statistics.median(a):.3f}", flush=True)
