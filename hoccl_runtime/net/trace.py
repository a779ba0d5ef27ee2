"""The network proxy's trace (``HOCCL_NET_TRACE``): its calls' steps, its garbage collections and its TCP frames, as
CSV files a run's analysis reads (``docs/results/2026-12-04-s35/stalls.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

__all__ = ["write_trace"]


def write_trace(path: str, rank: int, rows: list, collections: Sequence = (), frames: Sequence = ()) -> None:
    """One CSV row per call of this rank (times in us from the first call's arrival): the call, when its message
    came, when the proxy took it (its run began: the previous call was through), when its first staging copies were
    let go, when its plan notice was written, when the nodes it waits for were through the previous run (every
    node's notice checked), when its stream reached it (START seen; blank: before the run began), when its last
    network write was posted (its staging copy seen done; blank: it sends nothing) and its last chunk came in
    (blank: it receives nothing), when the network part was through (its writes posted, its chunks in and
    credited on), when its copies had finished (DONE given by then). The last column, ``t0_us``, is the first call's
    arrival on the host's monotonic clock (``time.perf_counter``, one clock for every process of the host): the
    ranks' rows line up by adding it, so a message's way from one rank's stream to the other's landing can be read
    off. Then ``sleep_us`` and ``turn_us``: the longest of the driving loop's poll sleeps in the call's run, and its
    longest turn between two sleeps (stalls of this process). PREFIX.rankN.gc.csv: this process's garbage
    collections (generation, start as above, us). PREFIX.rankN.frames.csv: every TCP frame its lanes sent and
    received (:attr:`TcpTransport.trace`: a send's start and end, a receive's header in and payload in, on the same
    clock as above)."""
    import csv

    with contextlib.suppress(OSError), open(f"{path}.rank{rank}.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["call", "arrived_us", "taken_us", "begun_us", "announced_us", "hello_us", "stream_us",
                      "staged_us", "received_us", "network_us", "copies_us", "t0_us", "sleep_us", "turn_us"])
        t0 = rows[0][1] if rows else 0.0
        for key, *times, gap in rows:
            out.writerow([str(key)] + ["" if t is None else f"{(t - t0) * 1e6:.1f}" for t in times] +
                         [f"{t0 * 1e6:.1f}", f"{gap[0] * 1e6:.1f}", f"{gap[1] * 1e6:.1f}"])
    with contextlib.suppress(OSError), open(f"{path}.rank{rank}.gc.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["generation", "start_us", "us"])
        t0 = rows[0][1] if rows else 0.0
        for gen, start, took in collections:
            out.writerow([gen, f"{(start - t0) * 1e6:.1f}", "" if took is None else f"{took * 1e6:.1f}"])
    with contextlib.suppress(OSError), open(f"{path}.rank{rank}.frames.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["what", "lane", "write", "part", "bytes", "start_us", "end_us", "t0_us"])
        t0 = rows[0][1] if rows else 0.0
        for what, lane, write, part, n, start, end in frames:
            out.writerow([what, lane, write, part, n, f"{(start - t0) * 1e6:.1f}", f"{(end - t0) * 1e6:.1f}",
                          f"{t0 * 1e6:.1f}"])
