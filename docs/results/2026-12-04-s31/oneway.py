"""Pair two ranks' HOCCL_NET_TRACE files (PREFIX.rank0.csv, PREFIX.rank1.csv) call by call on the host's one clock
(t0_us) and print, per kind of call, the medians (us) of a message's way: the sender's stream reached the call ->
its staging copy seen done and write posted -> the receiver's last chunk in -> the receiver's copies through.
Usage: python3 oneway.py PREFIX"""
import csv
import statistics
import sys
from collections import defaultdict


def load(prefix: str, rank: int) -> list[dict]:
    with open(f"{prefix}.rank{rank}.csv") as f:
        rows = list(csv.DictReader(f))
    out = []
    for row in rows:
        t0 = float(row["t0_us"])
        out.append({"call": row["call"], **{k[:-3]: (float(v) + t0 if v else None) for k, v in row.items()
                                             if k.endswith("_us") and k != "t0_us"}})
    return out


def main() -> None:
    prefix = sys.argv[1]
    ranks = [load(prefix, r) for r in (0, 1)]
    by = [defaultdict(list), defaultdict(list)]
    for r in (0, 1):
        for row in ranks[r]:
            by[r][row["call"]].append(row)
    print(f"{'call':<28}{'n':>5}{'dir':>5}{'stream->posted':>16}{'posted->in':>12}{'in->copies':>12}"
          f"{'stream->copies':>16}{'recv stream late':>18}")
    for call in by[0]:
        a, b = by[0][call], by[1].get(call, [])
        n = min(len(a), len(b))
        skip = n // 4  # warm-up
        for src in (0, 1):
            snd, rcv = (a, b) if src == 0 else (b, a)
            cols = defaultdict(list)
            for k in range(skip, n):
                s, r = snd[k], rcv[k]
                if s["staged"] is None or r["received"] is None or s["stream"] is None:
                    continue
                cols["sp"].append(s["staged"] - s["stream"])
                cols["pi"].append(r["received"] - s["staged"])
                cols["ic"].append(r["copies"] - r["received"])
                cols["sc"].append(r["copies"] - s["stream"])
                cols["late"].append((r["stream"] or r["received"]) - s["stream"])
            if cols["sc"]:
                m = {k: statistics.median(v) for k, v in cols.items()}
                print(f"{call:<28}{len(cols['sc']):>5}{f'{src}->{1-src}':>5}{m['sp']:>16.0f}{m['pi']:>12.0f}"
                      f"{m['ic']:>12.0f}{m['sc']:>16.0f}{m['late']:>18.0f}")


if __name__ == "__main__":
    main()
