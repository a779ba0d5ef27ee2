"""Session 35: the proxy processes' stalls from a HOCCL_NET_TRACE run: per rank, the longest poll sleep and the longest
turn of the driving loop per call (percentiles), the calls with one of 1 ms or more, and the proxy's garbage collections.
    python stalls.py PREFIX"""
import csv
import sys

prefix = sys.argv[1]
for rank in (0, 1):
    try:
        rows = list(csv.DictReader(open(f"{prefix}.rank{rank}.csv")))
        gcs = list(csv.DictReader(open(f"{prefix}.rank{rank}.gc.csv")))
    except OSError as exc:
        print(f"rank {rank}: {exc}")
        continue
    print(f"rank {rank}: {len(rows)} calls")
    for col in ("sleep_us", "turn_us"):
        gaps = sorted(float(r[col]) for r in rows)
        q = lambda p: gaps[int(p * (len(gaps) - 1))] if gaps else float("nan")  # noqa: E731
        print(f"  the loop's longest {col[:-3]} per call (us): p50 {q(.5):.0f} p90 {q(.9):.0f} p99 {q(.99):.0f} "
              f"max {gaps[-1] if gaps else 0:.0f}; calls with one >= 1 ms: {sum(g >= 1000 for g in gaps)}")
    for gen in ("0", "1", "2"):
        t = [float(g["us"]) for g in gcs if g["generation"] == gen and g["us"]]
        if t:
            print(f"  proxy gc gen {gen}: {len(t)}, {sum(t) / 1e3:.1f} ms in all, longest {max(t) / 1e3:.2f} ms")
