"""Session 52: a call's time and the time between calls, from a HOCCL_NET_TRACE of two ranks (both on one clock).
For the most frequent call (FSDP small: the layer AllGather), per rank, p10 / p50 / p90 us of
- each step of call k from its stream (START seen),
- the way into call k from call k-1's end (its copies seen done): when k arrived at the proxy, was taken, its
  plan notice written, the other node's notice in, its stream there;
and across the ranks: the streams' skew, and from the later stream to both ranks' copies.
Usage: python gaps.py PREFIX [PREFIX ...] (PREFIX.rank0.csv and PREFIX.rank1.csv each)."""
import csv
import sys
from collections import Counter

COLS = ("arrived", "taken", "begun", "announced", "hello", "stream", "staged", "received", "landed", "network",
        "copies")


def load(path):
    rows = []
    with open(path) as f:
        records = list(csv.DictReader(f))
    for r in records:
        t0 = float(r["t0_us"])
        rows.append({"call": r["call"], **{c: float(r[f"{c}_us"]) + t0 if r.get(f"{c}_us") else None for c in COLS}})
    return rows


def q(v, p):
    v = sorted(v)
    return v[int(p * (len(v) - 1))] if v else float("nan")


def show(name, v):
    if v:
        print(f"  {name:34s} {q(v, .1):8.0f} {q(v, .5):8.0f} {q(v, .9):8.0f}  (n={len(v)})")


for prefix in sys.argv[1:]:
    ranks = [load(f"{prefix}.rank{r}.csv") for r in (0, 1)]
    call = Counter(r["call"] for r in ranks[0]).most_common(1)[0][0]
    print(f"{prefix}: {len(ranks[0])} / {len(ranks[1])} calls; the most frequent: {call!r}; us p10 / p50 / p90")
    for r, me in enumerate(ranks):
        print(f" rank {r}")
        gaps = {}
        for k in range(1, len(me)):
            c, p = me[k], me[k - 1]
            if c["call"] != call:
                continue
            for a in COLS[COLS.index("stream") + 1:]:
                if c["stream"] is not None and c[a] is not None:
                    gaps.setdefault(f"stream -> {a}", []).append(c[a] - c["stream"])
            if p["copies"] is not None:
                for a in COLS[:COLS.index("stream") + 1]:
                    if c[a] is not None:
                        gaps.setdefault(f"previous call's copies -> {a}", []).append(c[a] - p["copies"])
                gaps.setdefault("previous call's copies -> copies", []).append(c["copies"] - p["copies"])
        for name, v in gaps.items():
            show(name, v)
    both = {}
    for a, b in zip(*ranks, strict=False):
        if a["call"] != call or b["call"] != call or None in (a["stream"], b["stream"]):
            continue
        later = max(a["stream"], b["stream"])
        both.setdefault("the ranks' streams apart", []).append(abs(a["stream"] - b["stream"]))
        both.setdefault("later stream -> both copies", []).append(max(a["copies"], b["copies"]) - later)
        if a["received"] and b["received"]:
            both.setdefault("later stream -> both received", []).append(max(a["received"], b["received"]) - later)
    print(" both ranks")
    for name, v in both.items():
        show(name, v)
