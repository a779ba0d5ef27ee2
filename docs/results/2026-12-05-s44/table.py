"""Session 44: one markdown row per run and variant from the JSONs of tcp-nodes.sh runs (FSDP: train_fsdp.py's
summary; pipeline: the last stage's entry, the one train_pipeline.py prints). Usage: python table.py DIR..."""
import glob
import json
import os
import sys


def rows(path):
    with open(path) as fh:
        d = json.load(fh)
    if "summary" in d:  # train_fsdp.py
        s = d["summary"]
        for name, v in s.items():
            yield name, v["tokens_per_s"], v["round_spread"], v["step_ms"], v.get("slack_ms_median")
        return
    for name, entries in d["by_comm"].items():  # train_pipeline.py
        e = next((x for x in reversed(entries) if x["losses"]), entries[-1])
        r = e["tokens_per_s_rounds"]
        yield name, e["tokens_per_s"], (max(r) - min(r)) / e["tokens_per_s"], e["step_ms"], None


for folder in sys.argv[1:]:
    for path in sorted(glob.glob(os.path.join(folder, "**", "*.json"), recursive=True)):
        got = list(rows(path))
        base = {n: t for n, t, *_ in got}
        nccl = base.get("nccl")
        for name, tok, spread, step, slack in got:
            ratio = f"{tok / nccl:.3f}" if nccl and name != "nccl" else "-"
            slack = "-" if slack is None else f"{slack:.2f}"
            run = os.path.basename(path)[:-5]
            print(f"| {run} | {name} | {tok:,.0f} | {spread * 100:.1f}% | {step:.1f} | {slack} | {ratio} |")
