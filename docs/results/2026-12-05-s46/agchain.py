"""Session 46 (the CPU VM): FSDP small's AllGathers under MPS, read off session 36's run 6 traces (HOCCL_NET_TRACE,
both ranks on one clock). Per layer AllGather (3 MiB a rank): the two ranks' stream skew, the time from the later
rank's stream reaching the call to both ranks having the last chunk in and to both ranks' copies done, and on each
rank the time from a call's copies done to the next call's stream. Usage: python agchain.py PREFIX (e.g.
run6/fsdp-mps; the files PREFIX.rank0.csv and PREFIX.rank1.csv)."""
import csv
import sys


def load(path):
    out = []
    for r in csv.DictReader(open(path)):
        t0 = float(r["t0_us"])
        out.append((r["call"], *(float(r[k]) + t0 if r[k] else None for k in
                                 ("arrived_us", "stream_us", "received_us", "copies_us"))))
    return out


def q(v, p):
    v = sorted(v)
    return v[int(p * (len(v) - 1))]


prefix = sys.argv[1]
a, b = load(f"{prefix}.rank0.csv"), load(f"{prefix}.rank1.csv")
skew, data, done = [], [], []
for x, y in zip(a, b):
    if x[0] != y[0] or not (x[2] and y[2]) or not x[0].endswith(" 6304768"):
        continue
    later = max(x[2], y[2])
    skew.append(abs(x[2] - y[2]))
    data.append(max(x[3], y[3]) - later)
    done.append(max(x[4], y[4]) - later)
print(f"{prefix}: {len(data)} layer AllGathers (3 MiB a rank), us p10 / p50 / p90")
for name, v in (("the ranks' stream skew", skew), ("later stream -> both ranks' last chunk in", data),
                ("later stream -> both ranks' copies done", done)):
    print(f"  {name}: {q(v, .1):.0f} / {q(v, .5):.0f} / {q(v, .9):.0f}")
for rank, rows in enumerate((a, b)):
    gaps = [c[2] - p[4] for p, c in zip(rows, rows[1:]) if c[2] and p[4] and c[0].endswith(" 6304768")]
    print(f"  rank {rank}: a call's copies done -> the next layer call's stream: "
          f"{q(gaps, .1):.0f} / {q(gaps, .5):.0f} / {q(gaps, .9):.0f}")
