"""Session 68: every training record kept under docs/results (the JSON files, loose and inside the runs' .tgz logs),
read for how each variant's rounds move: is a variant's first round off the rest (a warm-up left in), does a run
drift, and how often is a variant's rounds' spread ((max - min) / min, issue 34's bar) within 3%, by library and
setting. Records that appear twice (a JSON kept loose and in a tarball) count once.  python rounds.py [RESULTS_DIR]"""
import collections
import json
import os
import statistics
import sys
import tarfile
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])


def documents():
    for path in sorted(root.rglob("*.json")):
        try:
            yield path.name, json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    for path in sorted(root.rglob("*.tgz")):
        try:
            with tarfile.open(path) as tar:
                for m in tar.getmembers():
                    if m.isfile() and m.name.endswith(".json"):
                        try:
                            yield os.path.basename(m.name), json.loads(tar.extractfile(m).read())
                        except (OSError, ValueError):
                            continue
        except (OSError, tarfile.TarError):
            continue


def rounds(doc):
    """(kind, {variant: [tokens/s per round]}, variant order) of one record, or None."""
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("summary"), dict):
        per = {k: v["rounds_tokens_per_s"] for k, v in doc["summary"].items()
               if isinstance(v, dict) and "rounds_tokens_per_s" in v}
        order = doc.get("args", {}).get("comm") or list(per)
        return "fsdp", per, order.split(",") if isinstance(order, str) else order
    if isinstance(doc.get("by_comm"), dict):
        per = {k: v[0]["tokens_per_s_rounds"] for k, v in doc["by_comm"].items()
               if v and isinstance(v, list) and isinstance(v[0], dict) and "tokens_per_s_rounds" in v[0]}
        return "pipeline", per, list(doc["by_comm"])
    return None


seen, first, spread, lowest = set(), collections.defaultdict(list), collections.defaultdict(list), collections.defaultdict(
    collections.Counter)
for name, doc in documents():
    got = rounds(doc)
    if not got or not got[1]:
        continue
    kind, per, order = got
    key = json.dumps(per, sort_keys=True)
    if key in seen:
        continue
    seen.add(key)
    setting = "MPS" if "mps" in name else "time-sliced" if "sliced" in name else None
    for pos, v in enumerate(k for k in order if k in per):
        r = per[v]
        if len(r) < 3:
            continue
        first[(kind, pos)].append(r[0] / statistics.median(r[1:]))
        if setting:
            lib = v.split("+")[0]
            spread[(kind, setting, lib)].append((max(r) - min(r)) / min(r))
            if len(r) == 3:
                lowest[(setting, lib)][min(range(3), key=r.__getitem__)] += 1

print(f"{len(seen)} distinct records under {root}")
print("\nA variant's first round over the median of its later rounds, by its place in the run's order of variants:")
print("| example | place | records | median | 25th-75th percentile | below 0.97 |\n|---|---:|---:|---:|---|---:|")
for (kind, pos), v in sorted(first.items()):
    if len(v) >= 10:
        v = sorted(v)
        print(f"| {kind} | {pos + 1} | {len(v)} | {statistics.median(v):.3f} | {v[len(v) // 4]:.3f}-"
              f"{v[3 * len(v) // 4]:.3f} | {sum(x < 0.97 for x in v) / len(v):.0%} |")
print("\nThe rounds' spread ((max - min) / min) by library and setting (records whose file names the setting):")
print("| example | setting | variant | records | median spread | within 3% |\n|---|---|---|---:|---:|---:|")
for (kind, setting, lib), v in sorted(spread.items()):
    if len(v) >= 10 and lib in ("hoccl", "nccl", "none"):
        print(f"| {kind} | {setting} | {lib} | {len(v)} | {statistics.median(v):.1%} | "
              f"{sum(x <= 0.03 for x in v) / len(v):.0%} |")
print("\nWhich of 3 rounds was a variant's slowest (runs of 3 rounds):")
for (setting, lib), c in sorted(lowest.items()):
    if lib in ("hoccl", "nccl", "none"):
        print(f"  {setting:12s} {lib:6s} first {c[0]:4d}  second {c[1]:4d}  third {c[2]:4d}")
