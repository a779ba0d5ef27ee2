"""Session 48 (the CPU VM): when each queue of a Broadcast plan starts and ends in the chunk simulation (session 45's
netchunk.py simulator with the network chunks as large as the NVLink ones), to see where the dgx-h100 4x8 Broadcast's
time above the bound goes. Usage: python bc_starts.py PLAN.json (hoccl-compile broadcast --topology dgx-h100
--nodes 4 --size 1GiB -o PLAN.json)"""
import sys
from pathlib import Path

plan_path = sys.argv[1]
source = (Path(__file__).parents[1] / "2026-12-05-s45" / "netchunk.py").read_text()
exec(source.split("plan = load_plan")[0])  # its simulator: run(plan, m), LOG, ENDS  # noqa: S102
plan = load_plan(plan_path)  # noqa: F821 - defined by the simulator's source
LOG.clear()  # noqa: F821
ENDS.clear()  # noqa: F821
print("stage us", round(run(plan, 1) * 1e6, 1))  # noqa: F821
qs = plan.queues
rows = []
for q in LOG:  # noqa: F821
    starts, ends = [x[0] for x in LOG[q]], ENDS[q]  # noqa: F821
    rows.append((qs.kind[q], int(qs.gpu[q]), starts[0] * 1e6, ends[-1] * 1e6, len(starts)))
for kind, gpu, first, end, n in sorted(rows, key=lambda r: (r[0], r[1])):
    print(f"{kind:9s} gpu {gpu:2d}  first {first:7.1f}  end {end:7.1f}  chunks {n}")
