"""Session 48: from a session 47 trace (HOCCL_NET_TRACE, FSDP small's layer AllGathers), per rank the proxy's
reaction to a call's last data frame (its payload in, on the engine's thread -> the call's "received" mark in the
proxy's loop; one host clock): what the engine's landing gates (HOCCL_NET_LAND_GATES) take off a call's way; and
the received mark -> the landing seen done; and where the engine opened landing gates (``gate`` rows, session 48),
the last gate opened before the mark -> the landing seen done (the GPU's part, plus the loop's look). Usage: python
react.py PREFIX [CALL] (e.g. the s47 run 8 trace's tr/fsdp; CALL: the calls to read, default FSDP small's layer
AllGathers, "allgather 6304768")."""
import bisect
import csv
import statistics
import sys


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def q(v):
    deciles = statistics.quantiles(v, n=10)
    return [round(deciles[0]), round(statistics.median(v)), round(deciles[-1])]


pre = sys.argv[1]
call = sys.argv[2] if len(sys.argv) > 2 else "allgather 6304768"
for rank in (0, 1):
    calls, frames = rows(f"{pre}.rank{rank}.csv"), rows(f"{pre}.rank{rank}.frames.csv")
    recv_ends = sorted(float(f["end_us"]) for f in frames if f["what"] == "recv" and int(f["bytes"]) > 0)
    gates = sorted(float(f["end_us"]) for f in frames if f["what"] == "gate")
    react, land, gated = [], [], []
    for c in calls:
        if not c["received_us"] or c["call"] != call:
            continue
        r = float(c["received_us"])
        i = bisect.bisect_right(recv_ends, r) - 1  # the last data frame in before the proxy marked received
        if i >= 0:
            react.append(r - recv_ends[i])
        if c["landed_us"]:
            land.append(float(c["landed_us"]) - r)
            g = bisect.bisect_right(gates, r) - 1
            if g >= 0 and i >= 0 and gates[g] >= recv_ends[i]:  # the gate of that last frame, opened by the engine
                gated.append(float(c["landed_us"]) - gates[g])
    print(f"rank {rank}: last data frame in -> received mark (p10/p50/p90 us) {q(react)} n={len(react)}; "
          f"received -> landed seen {q(land)}" + (f"; its gate opened -> landed seen {q(gated)} n={len(gated)}"
                                                  if len(gated) > 1 else ""))
