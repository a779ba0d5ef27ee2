"""The network proxy's trace (``HOCCL_NET_TRACE``): its calls' steps, its garbage collections and its TCP frames, as
CSV files (:func:`write_trace`), and a summary of them (:func:`summarize`)::

    python -m hoccl_runtime.net.trace PREFIX [PREFIX ...]     # e.g. /tmp/t, or /tmp/t.g1 for a second group
"""

from __future__ import annotations

import contextlib
import csv
import glob
import re
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

__all__ = ["write_trace", "summarize", "main"]

STEPS = ("arrived", "taken", "begun", "announced", "hello", "stream", "staged", "received", "landed", "network",
         "copies")
SIZES = ((4096, "<= 4 KiB"), (256 << 10, "<= 256 KiB"), (1 << 20, "<= 1 MiB"), (4 << 20, "<= 4 MiB"))


def write_trace(path: str, rank: int, rows: list, collections: Sequence = (), frames: Sequence = ()) -> None:
    """One CSV row per call of this rank (times in us from the first call's arrival): the call, when its message
    came, when the proxy took it (its run began: the previous call was through), when its first staging copies were
    let go, when its plan notice was written, when the nodes it waits for were through the previous run (every
    node's notice checked), when its stream reached it (START seen, also while the run waited for those nodes;
    blank: before the run began; seen when the driving loop looks, which a loop busy every turn may do only once
    the network part is through), when its last network write was posted (its staging copy seen done; blank: it
    sends nothing), its last chunk came in (blank: it receives nothing) and its last landing copy was seen done
    (blank: it lands nothing), when the network part was through (its writes posted, its chunks in and
    credited on), when its copies had finished (DONE given by then). The last column, ``t0_us``, is the first call's
    arrival on the host's monotonic clock (``time.perf_counter``, one clock for every process of the host): the
    ranks' rows line up by adding it, so a message's way from one rank's stream to the other's landing can be read
    off. Then ``sleep_us`` and ``turn_us``: the longest of the driving loop's poll sleeps in the call's run, and its
    longest turn between two sleeps (stalls of this process). PREFIX.rankN.gc.csv: this process's garbage
    collections (generation, start as above, us). PREFIX.rankN.frames.csv: every TCP write it posted and every frame
    its lanes sent and received (:attr:`TcpTransport.trace`, on the same clock as above): ``post`` rows (the write's
    first lane, its id, its parts in the ``part`` column, its bytes, when it was posted twice), ``send`` rows (lane,
    write, part, bytes, the ``sendall`` of its header and payload: start and end), ``recv`` rows (the sender's
    write id and part, the header in and the payload in) and ``gate`` rows (the native engine opened a landing gate
    as that frame's payload was in, HOCCL_NET_LAND_GATES: the write's bytes, that moment twice)."""
    t0 = rows[0][1] if rows else 0.0
    with contextlib.suppress(OSError), open(f"{path}.rank{rank}.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["call", "arrived_us", "taken_us", "begun_us", "announced_us", "hello_us", "stream_us",
                      "staged_us", "received_us", "landed_us", "network_us", "copies_us", "t0_us", "sleep_us",
                      "turn_us"])
        for key, *times, gap in rows:
            out.writerow([str(key)] + ["" if t is None else f"{(t - t0) * 1e6:.1f}" for t in times] +
                         [f"{t0 * 1e6:.1f}", f"{gap[0] * 1e6:.1f}", f"{gap[1] * 1e6:.1f}"])
    with contextlib.suppress(OSError), open(f"{path}.rank{rank}.gc.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["generation", "start_us", "us"])
        for gen, start, took in collections:
            out.writerow([gen, f"{(start - t0) * 1e6:.1f}", "" if took is None else f"{took * 1e6:.1f}"])
    with contextlib.suppress(OSError), open(f"{path}.rank{rank}.frames.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["what", "lane", "write", "part", "bytes", "start_us", "end_us", "t0_us"])
        for what, lane, write, part, n, start, end in frames:
            out.writerow([what, lane, write, part, n, f"{(start - t0) * 1e6:.1f}", f"{(end - t0) * 1e6:.1f}",
                          f"{t0 * 1e6:.1f}"])


def _quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[int(q * (len(values) - 1))] if values else float("nan")


def _spread(values: list[float]) -> str:
    return f"p50 {_quantile(values, .5):.0f} p90 {_quantile(values, .9):.0f}"


CALL_COLUMNS = ("call", *(f"{s}_us" for s in STEPS), "t0_us", "sleep_us", "turn_us")
GC_COLUMNS = ("generation", "start_us", "us")
FRAME_COLUMNS = ("what", "lane", "write", "part", "bytes", "start_us", "end_us", "t0_us")


def _read(path: str, columns: Sequence[str]) -> list[dict]:
    """The rows of one trace file, refused with its name where it lacks a column the summary reads."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or ())]
        if missing:
            raise ValueError(f"{path} is not a HOCCL_NET_TRACE file of this version: it lacks the column(s) "
                             f"{', '.join(missing)}; trace the run again with this HOCCL")
        return list(reader)


def _size_class(n: int) -> str:
    return next((name for most, name in SIZES if n <= most), "> 4 MiB")


def summarize(prefix: str) -> str:
    """What :func:`write_trace` wrote under ``prefix``, in words (us): per rank, for its most frequent calls, the
    median and 90th percentile of the time from each step to the next, and the spread of the time from its stream
    reaching it to its copies through; for its most frequent call, the way in from the call before (see
    :func:`_between`); its driving loop's longest poll sleep and turn per call; its garbage collections. Where the
    trace has the frames of exactly two ranks (one connection between them), a write's time split up, by size: the
    hand-off (posted -> its lane began sending it), the send (the lane's ``sendall``), the
    wire (the send returned -> the peer's receiving thread had the payload; negative: before), the landing (the
    peer's header in -> payload in) and the whole write (posted -> its last part in at the peer)."""
    files = sorted(glob.glob(glob.escape(prefix) + ".rank*.csv"))
    ranks = sorted(int(m.group(1)) for f in files if (m := re.fullmatch(r".*\.rank(\d+)\.csv", f)))
    if not ranks:
        raise FileNotFoundError(f"no trace under {prefix!r}: expected {prefix}.rank0.csv, ... (written at close by the "
                                f"proxy processes of a run with HOCCL_NET_TRACE={prefix})")
    out = [f"trace {prefix}: ranks {', '.join(map(str, ranks))}"]
    for rank in ranks:
        _named(f"{prefix}.rank{rank}", _rank, prefix, rank, out)
    if len(ranks) == 2:
        out += _named(f"{prefix} (frames)", _frames, prefix, ranks)
    return "\n".join(out)


def _named(where: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``, a value that is not a number (or a field that is missing) named with the trace it is in."""
    try:
        return fn(*args)
    except (ValueError, KeyError) as exc:
        if where.split(" ")[0] in str(exc):
            raise
        raise ValueError(f"{where}: {exc!s} (not a HOCCL_NET_TRACE file of this version?)") from None


def _rank(prefix: str, rank: int, out: list[str]) -> None:
    rows = _read(f"{prefix}.rank{rank}.csv", CALL_COLUMNS)
    out.append(f"rank {rank}: {len(rows)} calls")
    by_call: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_call[row["call"]].append(row)
    ranked = sorted(by_call.items(), key=lambda kv: -len(kv[1]))  # the most frequent first
    for call, some in ranked[:4]:
        steps, tails = [], []
        for a, b in zip(STEPS, STEPS[1:], strict=False):
            d = [float(r[f"{b}_us"]) - float(r[f"{a}_us"]) for r in some if r[f"{a}_us"] and r[f"{b}_us"]]
            if d:
                steps.append(f"{b} +{_quantile(d, .5):.0f}")
                tails.append(f"{b} {_quantile(d, .9):+.0f}")
        out.append(f"  {call} x{len(some)}: " + ", ".join(steps))
        out.append("    p90: " + ", ".join(tails))
        whole = [float(r["copies_us"]) - float(r["stream_us"]) for r in some if r["stream_us"] and r["copies_us"]]
        if whole:
            out.append(f"    from its stream to its copies through: p10 {_quantile(whole, .1):.0f} {_spread(whole)}")
    if ranked:
        out.append(_between(rows, ranked[0][0]))
    for col, what in (("sleep_us", "longest poll sleep"), ("turn_us", "longest turn")):
        v = [float(r[col]) for r in rows if r.get(col)]
        out.append(f"  the loop's {what} per call: {_spread(v)} max {max(v, default=0):.0f}")
    with contextlib.suppress(OSError):
        gcs = _read(f"{prefix}.rank{rank}.gc.csv", GC_COLUMNS)
        for gen in ("0", "1", "2"):
            t = [float(g["us"]) for g in gcs if g["generation"] == gen and g["us"]]
            if t:
                out.append(f"  gc generation {gen}: {len(t)}, {sum(t) / 1e3:.1f} ms in all, longest "
                           f"{max(t) / 1e3:.2f} ms")


def _between(rows: list[dict], call: str) -> str:
    """The way into each ``call`` from the call before it on the rank (p50, us), from that call's copies done: when
    ``call``'s message arrived (negative: it was issued while the one before still ran; positive: the caller issued
    it only after that one was through, so its host, not the network, set the pace), was taken, and its stream
    reached it; and the time between the two calls' arrivals (the caller's pace)."""
    ways: dict[str, list[float]] = defaultdict(list)
    for before, row in zip(rows, rows[1:], strict=False):
        if row["call"] != call or not before["copies_us"]:
            continue
        for step in ("arrived", "taken", "stream"):
            if row[f"{step}_us"]:
                ways[step].append(float(row[f"{step}_us"]) - float(before["copies_us"]))
        if row["arrived_us"] and before["arrived_us"]:
            ways["pace"].append(float(row["arrived_us"]) - float(before["arrived_us"]))
    if not ways["arrived"] or not ways["pace"]:
        return f"  {call}: no call before it to measure the way in from"
    p50 = {k: f"{_quantile(v, .5):+.0f}" if v else "-" for k, v in ways.items()}  # "-": never seen (a blank step)
    return (f"  {call}, after the call before it was through: arrived {p50['arrived']}, taken {p50.get('taken', '-')}, "
            f"its stream there {p50.get('stream', '-')}; arrivals {_quantile(ways['pace'], .5):.0f} apart "
            f"(x{len(ways['pace'])})")


def _frames(prefix: str, ranks: list[int]) -> list[str]:
    try:
        tables = [_read(f"{prefix}.rank{r}.frames.csv", FRAME_COLUMNS) for r in ranks]
    except OSError:
        return []
    kinds = []
    for rows in tables:
        k: dict[str, dict] = defaultdict(dict)
        for r in rows:
            t0 = float(r["t0_us"])
            key = int(r["write"]) if r["what"] == "post" else (int(r["write"]), int(r["part"]))
            k[r["what"]][key] = (int(r["bytes"]), float(r["start_us"]) + t0, float(r["end_us"]) + t0)
        kinds.append(k)
    stats: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for a, b in ((0, 1), (1, 0)):
        sends, lands, posts = kinds[a]["send"], kinds[b]["recv"], kinds[a]["post"]
        last: dict[int, float] = {}
        for key, (n, s0, s1) in sends.items():
            if key not in lands:
                continue
            _, r0, r1 = lands[key]
            last[key[0]] = max(last.get(key[0], r1), r1)
            if n:
                part = stats["part " + _size_class(n)]
                if key[0] in posts:
                    part["hand-off"].append(s0 - posts[key[0]][1])
                part["send"].append(s1 - s0)
                part["wire"].append(r1 - s1)
                part["landing"].append(r1 - r0)
        for write, t in last.items():
            if write in posts and posts[write][0]:
                stats["write " + _size_class(posts[write][0])]["whole"].append(t - posts[write][1])
    if not stats:
        return []
    out = ["TCP frames between the two ranks (us):"]
    for rank, k in zip(ranks, kinds, strict=True):  # the native engine's landing gates (HOCCL_NET_LAND_GATES)
        writes = {key[0] for key, (n, _, _) in k["recv"].items() if n}
        if k["gate"]:
            out.append(f"  rank {rank}: the engine opened the landing gates of {len(k['gate'])} of the {len(writes)} "
                       "data writes it received")
    for what in sorted(stats):
        cols = stats[what]
        out.append(f"  {what} x{len(next(iter(cols.values())))}: " +
                   "; ".join(f"{k} {_spread(v)}" for k, v in cols.items()))
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if args else 2
    for prefix in args:
        try:
            print(summarize(prefix))
        except (OSError, KeyError, ValueError) as exc:
            print(f"hoccl trace: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
