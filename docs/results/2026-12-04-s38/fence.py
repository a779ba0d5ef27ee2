"""Session 38, a simulation experiment (nothing of it is in the library): test_cost_v2's skewed All-to-Allv cases (and a
4x8 one), their stages overlapped as the runtimes run them, against the same with a per-in-port fence (a chunk of stage
s starts only once every chunk of earlier stages into the same in-port has landed), and against the stages one by one.
It patches a copy of simulate._Run.run.
    python3 docs/results/2026-12-04-s38/fence.py
Output: fence.txt."""
import sys, textwrap; sys.path.insert(0, ".")
import numpy as np
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions
from hoccl_compiler import simulate as S
rng = np.random.default_rng(7)
cases = []
for nodes, gpn, q, chunk in ((1, 8, 1, 4 << 20), (2, 4, 2, 1 << 20), (3, 4, 1, 1 << 40), (2, 8, 2, None), (4, 8, 1, None)):
    G = nodes * gpn
    m = np.minimum(rng.zipf(1.3, (G, G)) * (1 << 20), 1 << 30).astype(np.int64)
    np.fill_diagonal(m, 0)
    cases.append((nodes, gpn, q, chunk, m))
src = open("hoccl_compiler/simulate.py").read()
body = src[src.index("    def run(self, entries: list, what: str) -> float:"):]
# fence: per (in_port, stage) remaining chunk counts; lowest incomplete stage per port
body = body.replace("        done: set[tuple[int, int]] = set()\n", """        done: set[tuple[int, int]] = set()
        FENCE = FLAG["on"] and what == "the plan"
        if FENCE:
            from collections import defaultdict
            remaining = defaultdict(int)
            for q_, t_, k_, nb_ in entries:
                remaining[(int(self.in_port[t_]), int(STAGE[t_]))] += 1
            stages_of = defaultdict(list)
            for (p_, s_), n_ in remaining.items():
                stages_of[p_].append(s_)
            for p_ in stages_of: stages_of[p_].sort()
            low = {p_: 0 for p_ in stages_of}  # index into stages_of[p]
""")
body = body.replace("""                if after >= 0 and k < self.n_of[after] and (after, k) not in done:
                    continue
""", """                if after >= 0 and k < self.n_of[after] and (after, k) not in done:
                    continue
                if FENCE and self.in_port[t] >= 0:
                    p_ = int(self.in_port[t]); sl = stages_of[p_]
                    if low[p_] < len(sl) and sl[low[p_]] < STAGE[t]:
                        continue
""")
body = body.replace("""                done.add((t, k))
                del active[q]""", """                done.add((t, k))
                del active[q]
                if FENCE and self.in_port[t] >= 0:
                    p_ = int(self.in_port[t]); key = (p_, int(STAGE[t]))
                    remaining[key] -= 1
                    sl = stages_of[p_]
                    while low[p_] < len(sl) and remaining[(p_, sl[low[p_]])] == 0:
                        low[p_] += 1""")
assert "FENCE and self.in_port" in body and "remaining[key] -= 1" in body and "FENCE = FLAG" in body
body = textwrap.dedent(body)
FLAG = {"on": False}
STAGE = None
ns = {"np": np, "PlanError": Exception, "max_min_rates": S.max_min_rates, "duplex_capacity": S.duplex_capacity,
      "incast_senders": S.incast_senders, "FLAG": FLAG}
exec(body, ns)
S._Run.run = ns["run"]
topos = {}
for nodes, gpn, q, chunk, m in cases:
    if nodes == 1: continue
    topo = make_topology("paper-h800", nodes=nodes, gpus_per_node=gpn, dma_queues=q)
    plan = compile_plan(topo, CollectiveSpec(kind="alltoallv", matrix=tuple(map(tuple, m.tolist()))), CompileOptions(chunk_bytes=chunk, baselines=False))
    ns["STAGE"] = np.concatenate([np.full(len(st.transfers.flow), i) for i, st in enumerate(plan.stages)])
    res = []
    for on in (False, True):
        FLAG["on"] = on
        s = S.simulate(plan)
        res.append((s.overlapped_s, sum(s.stage_s)))
    print(f"{nodes}x{gpn} stages {len(plan.stages)}: overlapped {res[0][0]*1e3:.1f} ms, fenced {res[1][0]*1e3:.1f} ms, one by one {res[0][1]*1e3:.1f} ms, v2 stages {plan.report.breakdown_s['stages_s']*1e3:.1f}", flush=True)
