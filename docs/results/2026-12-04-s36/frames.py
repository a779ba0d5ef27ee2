"""Session 36: where a TCP write's time goes, from a HOCCL_NET_TRACE run's PREFIX.rankN.frames.csv (both ranks of
two TCP nodes on one host, one clock). For every payload frame one rank sent and the other received, by size class:
  handoff  the write posted (the driving loop) -> its lane began sending it (a lane thread, or the caller)
  send     the lane's sendall of header and payload
  wire     the sender's sendall returned -> the receiver's payload was all in (negative: in before the send returned)
  landed   the receiver's header in -> its payload in
  post->in the write posted -> its last frame's payload in at the peer (the whole write)
    python frames.py PREFIX [PREFIX ...]"""
import csv
import sys
from collections import defaultdict


def load(prefix, rank):
    with open(f"{prefix}.rank{rank}.frames.csv") as f:
        rows = list(csv.DictReader(f))
    t0 = float(rows[0]["t0_us"]) if rows else 0.0
    out = defaultdict(dict)
    for r in rows:
        k = r["what"]
        key = (int(r["write"]), int(r["part"])) if k != "post" else int(r["write"])
        out[k][key] = (int(r["bytes"]), float(r["start_us"]) + t0, float(r["end_us"]) + t0, int(r["lane"]))
    return out


def q(xs, p):
    xs = sorted(xs)
    return xs[int(p * (len(xs) - 1))] if xs else float("nan")


def size_class(n):
    for lim, name in ((4096, "<=4K"), (262144, "<=256K"), (1 << 20, "<=1M"), (4 << 20, "<=4M")):
        if n <= lim:
            return name
    return ">4M"


for prefix in sys.argv[1:]:
    try:
        ranks = [load(prefix, r) for r in (0, 1)]
    except OSError as exc:
        print(f"{prefix}: {exc}")
        continue
    print(f"== {prefix}")
    stats = defaultdict(lambda: defaultdict(list))
    for a, b in ((0, 1), (1, 0)):
        snd, rcv, post = ranks[a]["send"], ranks[b]["recv"], ranks[a]["post"]
        last_in = defaultdict(float)
        for key, (n, s0, s1, _) in snd.items():
            if key not in rcv:
                continue
            _, r0, r1, _ = rcv[key]
            wid = key[0]
            if wid in post:
                last_in[wid] = max(last_in[wid], r1)
            if n == 0:
                continue
            c = size_class(n)
            st = stats[c]
            if wid in post:
                st["handoff"].append(s0 - post[wid][1])
            st["send"].append(s1 - s0)
            st["wire"].append(r1 - s1)
            st["landed"].append(r1 - r0)
        for wid, t in last_in.items():
            n = post[wid][0]
            if n:
                stats["write " + size_class(n)]["post->in"].append(t - post[wid][1])
    for c in sorted(stats):
        parts = ", ".join(f"{k} p50 {q(v, .5):.0f} p90 {q(v, .9):.0f}" for k, v in stats[c].items())
        n = len(next(iter(stats[c].values())))
        print(f"  {c:>12} ({n}): {parts} us")
