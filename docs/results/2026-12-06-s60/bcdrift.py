"""Session 60: why session 57's Broadcast as a binomial pipeline over a hypercube of 8 GPUs (bcpipe.py there)
simulates at 1.5x its collective bound though its steps in lockstep come to 1.117x. Runs that script's plans
(dgx-h100, 1 GiB, in place, each queue in the steps' order) with NVLink's duplex factor as the preset has it (1.026:
a GPU whose NVLink moves bytes both ways at once runs each way that much slower) and at 1.0, and traces the chunks'
starts and ends step by step at 64 chunks. Then "paced": the simulation's event loop with one more rule, as a plan
format with a pacing wait would have it (no such field exists): a copy of step s to GPU v starts only once the copy of
step s - 1 to v has landed. Run from the project root: python docs/results/2026-12-06-s60/bcdrift.py"""
import inspect
import sys
import textwrap

import numpy as np

sys.path.insert(0, "examples")
import bench_compiler  # noqa: E402

import hoccl_compiler.simulate as SIM  # noqa: E402

with open("docs/results/2026-12-06-s57/bcpipe.py") as f:
    src = f.read()
src = src[:src.index("S = 1 << 30\n")]  # its plan builders, not its loop
LOG: list = []
A = "            active[q] = [t, k, float(nbytes), now + float(self.start_of[t])]\n"
B = "            done.add((t, k))\n"
run_src = textwrap.dedent(inspect.getsource(SIM._Run.run))
run_src = run_src.replace(A, A + "            LOG.append(('s', t, now))\n")
run_src = run_src.replace(B, B + "            LOG.append(('e', t, now))\n")
C = "                continue\n"  # after the check of the chunk's own dependency: the pacing wait, where PACE has one
i = run_src.index(C, run_src.index("(after, d) not in done")) + len(C)
run_src = run_src[:i] + ("            if PACE and PACE.get(t, -1) >= 0 and (PACE[t], 0) not in done:\n"
                         "                continue\n") + run_src[i:]
assert run_src.count("LOG.append") == 2 and "PACE" in run_src
PACE: dict = {}
ns = dict(SIM.__dict__, LOG=LOG, PACE=PACE)
exec(run_src, ns)
SIM._Run.run = ns["run"]  # the same event loop, each chunk's start and end logged

import hoccl_compiler.multicast as M  # noqa: E402
import hoccl_compiler.passes.chunks as CH  # noqa: E402

S = 1 << 30
ORIG = M._broadcast, CH.ready_first  # bcpipe.py patches both when it runs: each pass starts from these


def fresh(duplex: float) -> tuple[dict, object, object]:
    """bcpipe.py's builders run anew (from the compiler's own chain and order), the dgx-h100 node with NVLink's duplex
    factor ``duplex`` and the in-place Broadcast of S: (its namespace, the topology, the spec)."""
    M._broadcast, CH.ready_first = ORIG
    g = {"__name__": "bcpipe"}
    exec(compile(src, "bcpipe.py", "exec"), g)
    t = bench_compiler.topology(8, device_only=True, preset="dgx-h100")
    t = t.model_copy(update={"costs": t.costs.model_copy(update={"nvlink_duplex": duplex})})
    return g, t, g["CollectiveSpec"](kind="broadcast", size_bytes=S, in_place=True)


def compiled(g: dict, t, spec, K: int | None):
    """The plan in K chunks (None: the compiler's choice) and its collective bound."""
    g["K"] = K
    plan = g["compile_plan"](t, spec, g["CompileOptions"](baselines=False, chunk_bytes=None if K is None else S // K))
    return plan, g["collective_bound"]("broadcast", S, t, plan.report.lower_bound_s)


for duplex in (1.026, 1.0):
    g, t, spec = fresh(duplex)
    for name, fn, ks, mode in (("chain", g["orig"], (None,), "list"),
                               ("hypercube, steps", g["hyper"], (32, 64, 128), "step")):
        g["M"]._broadcast, g["MODE"] = fn, mode
        for K in ks:
            plan, b = compiled(g, t, spec, K)
            LOG.clear()
            sim = g["simulate"](plan).total_s
            print(f"duplex {duplex}: {name:17s} chunks {K or '-':>4}: v2 {plan.report.predicted_time_s / b:.3f}  "
                  f"simulation {sim / b:.3f}", flush=True)
            if K == 64 and duplex != 1.0:
                step = np.array(g["STEPS"])
                starts = {tr: now for kind, tr, now in LOG if kind == "s"}
                ends = {tr: now for kind, tr, now in LOG if kind == "e"}
                for s in (0, 1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 63, 66):
                    ts = [tr for tr in starts if step[tr] == s]
                    st, en = [starts[x] * 1e6 for x in ts], [ends[x] * 1e6 for x in ts]
                    print(f"    step {s:2d}: {len(ts)} chunks, started {min(st):7.1f}-{max(st):7.1f} us, "
                          f"landed {min(en):7.1f}-{max(en):7.1f} us")

# paced: each transfer (one chunk, one flow each here) waits for the one that brought its receiver the step before
g, t, spec = fresh(1.026)
g["M"]._broadcast, g["MODE"] = g["hyper"], "step"
for K in (32, 64, 128, 256):  # powers of two: every flow one whole chunk
    plan, b = compiled(g, t, spec, K)
    tr = plan.stages[0].transfers
    assert len(plan.stages) == 1 and list(tr.flow) == list(range(len(tr.flow)))  # a transfer per flow
    step, dst = np.array(g["STEPS"]), np.asarray(tr.dst)
    into = {(int(s), int(v)): i for i, (s, v) in enumerate(zip(step, dst, strict=True))}
    PACE.clear()
    PACE.update({i: into.get((int(s) - 1, int(v)), -1) for i, (s, v) in enumerate(zip(step, dst, strict=True))})
    sim = g["simulate"](plan).total_s
    print(f"duplex 1.026: hypercube, paced   chunks {K:4d}: simulation {sim / b:.3f}", flush=True)
PACE.clear()
