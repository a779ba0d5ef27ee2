"""Session 61: why v2 puts the one-node Broadcasts tried in sessions 57 and 61 near 2x the collective bound while the
chunk simulation does not. For the chain (the compiler's), the pipelined scatter plus AllGather (sag.py, 8 equal
rounds, slot order) and the hypercube pipeline (session 57's bcpipe.py, steps order, 32 and 64 chunks): v2's plan
figure and its per-stage terms (ports, busiest queue, pipeline fill) over the collective bound, then the same with
v2's convergence delay (chunks of one kind at the same queue position on the same port share it,
chain.shared_delay) set to zero. dgx-h100, one node of 8, 1 GiB, in place, host costs 0.
Run from the project root: python docs/results/2026-12-06-s61/v2terms.py"""
import sys

import numpy as np

sys.path.insert(0, "examples")
from bench_compiler import topology  # noqa: E402

import hoccl_compiler.cost as C  # noqa: E402
from hoccl_compiler import CollectiveSpec, compile_plan  # noqa: E402
from hoccl_compiler.cost import collective_bound  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402

REC = []
stage_times_v2, shared_delay = C.stage_times_v2, C.shared_delay


def recorded(*a, **k):
    REC.append(stage_times_v2(*a, **k))
    return REC[-1]


C.stage_times_v2 = recorded


def builders(path: str, name: str) -> dict:
    """A results script's plan builders (the part before its loop), run as a module of its own."""
    with open(path) as f:
        src = f.read()
    g = {"__name__": name}
    exec(compile(src[:src.index("S = 1 << 30\n")], path, "exec"), g)
    return g


sag = builders("docs/results/2026-12-06-s61/sag.py", "sag")
hyp = builders("docs/results/2026-12-06-s57/bcpipe.py", "bcpipe")
S = 1 << 30
t = topology(8, device_only=True, preset="dgx-h100")
spec = CollectiveSpec(kind="broadcast", size_bytes=S, in_place=True)
per, _ = sag["pieces"](S, [1] * 8)


def plans():
    """(name, a function that compiles the plan with the patches it needs in place)."""
    def chain():
        sag["M"]._broadcast = sag["orig"]
        sag["SLOTS"].clear()
        return compile_plan(t, spec, CompileOptions(baselines=False))

    def scatter_ag():
        sag["M"]._broadcast, sag["MODE"] = sag["sag"], "slot"
        sag["SHAPE"][:] = [1] * 8
        sag["CH"].ready_first = sag["ready_first"]
        return compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=max(per) + 4096))

    def hypercube(K):
        def build():
            hyp["M"]._broadcast, hyp["MODE"], hyp["K"] = hyp["hyper"], "step", K
            hyp["CH"].ready_first = hyp["ready_first"]
            return compile_plan(t, spec, CompileOptions(baselines=False, chunk_bytes=S // K))
        return build

    return [("chain", chain), ("scatter + AllGather, 8 rounds", scatter_ag), ("hypercube, 32 chunks", hypercube(32)),
            ("hypercube, 64 chunks", hypercube(64))]


for label, conv in (("v2 as it is", shared_delay), ("convergence delay 0", lambda key, b: np.zeros(np.size(b)))):
    C.shared_delay = conv
    for name, build in plans():
        REC.clear()
        plan = build()
        sag["M"]._broadcast, sag["CH"].ready_first = sag["orig"], sag["orig_rf"]  # undo for the next
        b = collective_bound("broadcast", S, t, plan.report.lower_bound_s)
        sc = REC[-1]
        print(f"{label:20s} {name:31s} plan {plan.report.predicted_time_s / b:.3f}  ports {sc.ports_s[0] / b:.3f}  "
              f"queues {sc.queues_s[0] / b:.3f}  pipeline {sc.pipeline_s[0] / b:.3f}", flush=True)
C.shared_delay = shared_delay
