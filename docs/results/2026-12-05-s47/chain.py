"""Session 47: where a layer AllGather's time goes between calls, from a HOCCL_NET_TRACE of FSDP small (both ranks on
one clock; needs the landed_us column, session 47's). Per rank, medians (p10 / p50 / p90 us) of each step of call k
and of the gaps that lead into call k + 1, and across the ranks how long after the peer's network end of call k
this rank's wait for it (hello) ended. Usage: python chain.py PREFIX (PREFIX.rank0.csv, PREFIX.rank1.csv)."""
import csv
import sys

COLS = ("taken", "begun", "announced", "hello", "stream", "staged", "received", "landed", "network", "copies")


def load(path):
    rows = []
    for r in csv.DictReader(open(path)):
        t0 = float(r["t0_us"])
        rows.append({"call": r["call"], **{c: float(r[f"{c}_us"]) + t0 if r[f"{c}_us"] else None for c in COLS}})
    return rows


def q(v, p):
    v = sorted(v)
    return v[int(p * (len(v) - 1))] if v else float("nan")


prefix = sys.argv[1]
ranks = [load(f"{prefix}.rank{r}.csv") for r in (0, 1)]
for r, (me, peer) in enumerate(((ranks[0], ranks[1]), (ranks[1], ranks[0]))):
    gaps = {}
    for k in range(1, len(me)):
        c, p, pp = me[k], me[k - 1], peer[k - 1]
        if not (c["call"].endswith(" 6304768") and p["call"].endswith(" 6304768")):
            continue
        for name, a, b in (("stream -> received", c["stream"], c["received"]),
                           ("received -> landed", c["received"], c["landed"]),
                           ("landed -> network", c["landed"], c["network"]),
                           ("network -> copies", c["network"], c["copies"]),
                           ("prev copies -> announced", p["copies"], c["announced"]),
                           ("announced -> hello", c["announced"], c["hello"]),
                           ("announced -> stream", c["announced"], c["stream"]),
                           ("hello - stream", c["stream"], c["hello"]),
                           ("peer prev network -> hello", pp["network"], c["hello"]),
                           ("prev received -> received", p["received"], c["received"])):
            if a is not None and b is not None:
                gaps.setdefault(name, []).append(b - a)
    print(f"rank {r}: layer AllGathers, us p10 / p50 / p90")
    for name, v in gaps.items():
        print(f"  {name:28s} {q(v, .1):7.0f} {q(v, .5):7.0f} {q(v, .9):7.0f}  (n={len(v)})")
