"""Medians per call kind of a HOCCL_NET_TRACE run (the last two thirds of each rank's calls): from the stream
reaching the call to its last write posted, its last chunk in, its network part through and its copies through;
and how long before its stream the call reached the proxy.

    python trace_summary.py PREFIX   # reads PREFIX.rank0.csv, PREFIX.rank1.csv
"""

import csv
import statistics
import sys
from collections import defaultdict


def main() -> None:
    prefix = sys.argv[1]
    for rank in (0, 1):
        try:
            rows = list(csv.DictReader(open(f"{prefix}.rank{rank}.csv")))
        except OSError as exc:
            print(f"rank {rank}: {exc}")
            continue
        rows = rows[len(rows) // 3:]
        by: dict = defaultdict(lambda: defaultdict(list))
        for r in rows:
            if not r["stream_us"]:
                continue
            s = float(r["stream_us"])
            k = r["call"][:90]
            for col in ("staged_us", "received_us", "network_us", "copies_us"):
                if r[col]:
                    by[k][col].append(float(r[col]) - s)
            by[k]["ahead"].append(s - float(r["arrived_us"]))
        print(f"rank {rank}: {len(rows)} calls; us after the stream reached the call (median)")
        print(f"{'n':>5} {'ahead':>8} {'staged':>8} {'received':>9} {'network':>8} {'copies':>8}  call")
        for k, d in sorted(by.items(), key=lambda kv: -len(kv[1]["copies_us"])):
            med = {c: (statistics.median(v) if v else float('nan')) for c, v in d.items()}
            print(f"{len(d['copies_us']):>5} {med.get('ahead', 0):>8.0f} {med.get('staged_us', float('nan')):>8.0f} "
                  f"{med.get('received_us', float('nan')):>9.0f} {med.get('network_us', float('nan')):>8.0f} "
                  f"{med.get('copies_us', float('nan')):>8.0f}  {k}")


if __name__ == "__main__":
    main()
