"""Session 52: FSDP small's AllGather chains per pass, from a HOCCL_NET_TRACE of two ranks (one clock): a step is 10
calls, the forward's 5 (the root's, then 4 blocks') and the backward's 5. Per pass and call k (p50 us): from the
later rank's stream to both ranks' copies; the gap from call k-1's copies (both ranks) to call k's later stream; when
call k's later message arrived after call k-1 was through (negative: issued before); the later rank's arrivals of
k-1 and k apart (the training thread's pace); and the chain, from call 0's later stream to call 4's copies.
Usage: python chain.py PREFIX (PREFIX.rank0.csv, PREFIX.rank1.csv; the trace must start at a step's first call)."""
import csv
import sys

COLS = ("arrived", "taken", "stream", "received", "copies")


def load(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        t0 = float(r["t0_us"])
        out.append({c: float(r[c + "_us"]) + t0 if r[c + "_us"] else None for c in COLS})
    return out


def p50(v):
    v = sorted(v)
    return round(v[(len(v) - 1) // 2])


def later(a, b, k, col):
    return max(a[k][col], b[k][col])


prefix = sys.argv[1]
a, b = load(prefix + ".rank0.csv"), load(prefix + ".rank1.csv")
for phase, off in (("forward", 0), ("backward", 5)):
    inside, gap, late, pace = ([[] for _ in range(5)] for _ in range(4))
    chain = []
    for i in range(off, len(a) - 9, 10):
        x, y = a[i:i + 5], b[i:i + 5]
        for k in range(5):
            inside[k].append(later(x, y, k, "copies") - later(x, y, k, "stream"))
            if k:
                prev = later(x, y, k - 1, "copies")
                gap[k].append(later(x, y, k, "stream") - prev)
                late[k].append(later(x, y, k, "arrived") - prev)
                pace[k].append(later(x, y, k, "arrived") - later(x, y, k - 1, "arrived"))
        chain.append(later(x, y, 4, "copies") - later(x, y, 0, "stream"))
    print(f"{prefix} {phase}: chain p50 {p50(chain)} us; per call k = 0..4, p50 us:")
    print("   later stream -> both copies:", [p50(v) for v in inside])
    print("   gap, call k-1's copies -> call k's later stream:", [p50(v) for v in gap[1:]])
    print("   call k's later arrival - call k-1's copies:", [p50(v) for v in late[1:]])
    print("   arrivals of k-1 and k apart (the later rank's):", [p50(v) for v in pace[1:]])
