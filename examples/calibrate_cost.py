"""The cost model v2 against runs measured on the 2x H200: the calibration table of docs/benchmarks.md.

    python examples/calibrate_cost.py [--sweep SWEEP.json] [--json OUT.json]

Measured rows (read from docs/results/, not re-run):

* one node, 2 GPUs: ``hoccl-bench sweep`` of the eleventh session (run 2, 2026-11-30; the communicator, one
  chunk per transfer as it compiles): send/recv, AllGather (size = output), All-to-All (size = per rank),
  2 MiB .. 1 GiB, seconds per call of back-to-back calls, and the host time per call in the same run;
* 2 "nodes" of 1 GPU over TCP: examples/bench_internode.py of the fifth session (runs 4 and 5): send/recv
  GPU to GPU through the staging rings, 8 MiB chunks, 2 MiB .. 1 GiB;
* the same send/recv on the 1x H200 machine with the eighteenth session's runtime (both "nodes" on its one GPU),
  64 KiB .. 1 GiB, 5 interleaved rounds (docs/results/2026-12-01-s18/calib_tcp.py, run 2): the median over the
  rounds, with their range. That host's TCP is not the 2x H200 host's, so its rows are predicted with the NIC
  rate this host's wire reached in the same rounds (the TCP transport host to host with the executor's 8 MiB
  writes, 1 GiB), not the preset's.

Each is compiled as the runtime compiles it, for the h200x2 preset, and its v2 predicted time set beside the
measured one. A call whose host time is at least 90% of its measured time was host-bound: v2 predicts the
device side only (the host's Python per call is not in the model), so those rows are marked and left out of
the error summary; so are send/recv calls of at most 4 MiB, which the communicator runs on its eager path
(staging slots, no rendezvous), not as the plan's rendezvous.

The sweep's figure is a batch's average: ``batch_calls(size)`` calls back to back after a barrier (10 from
128 MiB up). HOCCL's first call of a batch waits for the rank that left the barrier last, so that start-up skew
weighs 1/calls on every HOCCL row, while v2 predicts one call of ranks that start together, and the raw copies
(no synchronisation between ranks) do not pay it. Its size comes from the send/recv rows alone: HOCCL less the
raw copy = a call's cost + skew / calls, least squares over 8 MiB .. 1 GiB. Each one-node row is then also set
against its measured time less skew / calls: for AllGather and All-to-All an estimate made from other rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hoccl_bench.bench import batch_calls  # noqa: E402
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402

SWEEP = ROOT / "docs/results/2026-11-30-s11/run2-sweep.json"
TCP = [ROOT / "docs/results/2026-11-30-s5/internode-run4.json", ROOT / "docs/results/2026-11-30-s5/internode-run5.json"]
# session 18's runtime on the 1x H200 (both "nodes" on its one GPU), 5 interleaved rounds with the wire alone
TCP_TODAY = ROOT / "docs/results/2026-12-01-s18/calib_tcp-run2.json"
EAGER_BYTES = 4 << 20
OUT_OF_SAMPLE = [str(ROOT / f"docs/results/{d}") for d in (
    "2026-11-30-s10/run2-sweep.json", "2026-11-30-s7/sweep-run7.json", "2026-11-30-s6/sweep-run1.json",
    "2026-11-30-s5/sweep-run3.json", "2026-11-30-s4/sweep-run8.json")]


def spec_of(op: str, size: int) -> CollectiveSpec:
    if op == "sendrecv":
        return CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),))
    return CollectiveSpec(kind=op, size_bytes=size)


def predicted(op: str, size: int, nodes: int, chunk: int, nic_gbps: float | None = None) -> float:
    topo = make_topology("h200x2", nodes=nodes, gpus_per_node=2 if nodes == 1 else 1)
    if nic_gbps is not None:
        topo = topo.model_copy(update={"nic_gbps": nic_gbps})
    plan = compile_plan(topo, spec_of(op, size), CompileOptions(chunk_bytes=chunk, baselines=False))
    return plan.report.predicted_time_s


def calls_of(row: dict) -> int:
    """Calls per timed batch of a sweep row: recorded in the row since session 18, else the sweep's default."""
    return row.get("calls") or batch_calls(row["size"])


def start_skew(sweep_rows: list[dict], op: str = "sendrecv") -> tuple[float, float]:
    """(a call's cost, the start-up skew of a batch), seconds, from the sweep's ``op`` rows above 4 MiB: HOCCL
    less the raw copy of the same size and batch length against 1 / calls per batch, least squares (see the
    module docstring). The rows may come from several sweeps (one size timed with several ``--iters``)."""
    import numpy as np

    gaps = {k: g for k, g in hoccl_less_raw(sweep_rows, op).items() if k[0] > EAGER_BYTES}
    if len({c for _, c in gaps}) < 2:
        raise ValueError(f"the sweep needs hoccl and raw {op} rows above 4 MiB with 2 batch lengths or more to "
                         "estimate the batches' start-up skew (hoccl-bench sweep --baselines hoccl,raw,...)")
    x = np.array([1 / c for _, c in gaps])
    y = np.array(list(gaps.values()))
    (call, skew), *_ = np.linalg.lstsq(np.c_[np.ones_like(x), x], y, rcond=None)
    return float(call), float(skew)


def hoccl_less_raw(sweep_rows: list[dict], op: str) -> dict[tuple[int, int], float]:
    """{(size, calls per batch): HOCCL's seconds less the raw copy's} for the ``op`` rows timed both ways."""
    t = {(r["impl"], r["size"], calls_of(r)): r["seconds"] for r in sweep_rows if r["op"] == op}
    return {(n, c): t[("hoccl", n, c)] - t[("raw", n, c)] for (impl, n, c) in t
            if impl == "hoccl" and ("raw", n, c) in t}


def skew_check(paths: list[Path]) -> int:
    """The start-up skew from sweeps of one size timed with several batch lengths (scripts/device-check.sh skew):
    per op, the call's cost and the skew, each batch length's HOCCL less raw beside the fitted line."""
    rows_all = [r for path in paths for r in json.loads(path.read_text())["rows"]]
    for op in dict.fromkeys(r["op"] for r in rows_all):
        try:
            call, skew = start_skew(rows_all, op)
        except ValueError as exc:
            print(f"{op}: {exc}")
            continue
        gaps = hoccl_less_raw(rows_all, op)
        cells = ", ".join(f"{c} calls {gaps[(n, c)] * 1e6:.1f} us (fit {(call + skew / c) * 1e6:.1f})"
                          for n, c in sorted(gaps))
        print(f"{op}: call {call * 1e6:.1f} us + skew {skew * 1e6:.0f} us / calls; HOCCL less raw: {cells}")
    return 0


def rows(sweep: Path = SWEEP, skew: float | None = None, network: bool = True) -> list[dict]:
    """Every measured row beside its v2 prediction; ``skew``: the sweep's start-up skew per batch (start_skew),
    None for no skew column; ``network``: with the TCP rows."""
    out = []
    for r in json.loads(sweep.read_text())["rows"]:
        if r["impl"] != "hoccl" or r["op"] not in ("sendrecv", "allgather", "alltoall"):
            continue
        note = ""
        if r["op"] == "sendrecv" and r["size"] <= EAGER_BYTES:
            note = "eager path"
        elif r["host_us"] is not None and r["host_us"] >= 0.9 * r["seconds"] * 1e6:
            note = "host-bound"
        out.append(dict(setting="1 node, NVLink", op=r["op"], size=r["size"], measured_s=r["seconds"],
                        host_us=r["host_us"], predicted_s=predicted(r["op"], r["size"], 1, 1 << 40), note=note,
                        skew_s=None if skew is None else skew / calls_of(r)))
    if not network:
        for r in out:
            r["ratio"] = r["predicted_s"] / r["measured_s"]
        return out
    by_size: dict[int, list[float]] = {}
    for path in TCP:
        for r in json.loads(path.read_text())["rows"]:
            if r["impl"] == "hoccl-gpu-tcp" and r["op"] == "sendrecv":
                by_size.setdefault(r["size"], []).append(r["seconds"])
    for size, secs in sorted(by_size.items()):
        out.append(dict(setting="2 nodes, TCP", op="sendrecv", size=size, measured_s=statistics.median(secs),
                        host_us=None, predicted_s=predicted("sendrecv", size, 2, min(8 << 20, size)), note=""))
    today = json.loads(TCP_TODAY.read_text())
    wire = statistics.median(r["chunked_s"] for r in today if r["size"] == 1 << 30)
    nic = (1 << 30) / wire / 1e9
    for size in sorted({r["size"] for r in today}):
        secs = [r["gpu_s"] for r in today if r["size"] == size]
        pred = predicted("sendrecv", size, 2, min(8 << 20, size), nic_gbps=nic)
        inside = "inside" if min(secs) <= pred <= max(secs) else "outside"
        out.append(dict(setting=f"2 nodes, TCP, 1x H200, session 18 (NIC {nic:.1f} GB/s)", op="sendrecv",
                        size=size, measured_s=statistics.median(secs), host_us=None, predicted_s=pred,
                        note=f"rounds {min(secs) * 1e3:.2f}-{max(secs) * 1e3:.2f} ms ({inside})"))
    for r in out:
        r["ratio"] = r["predicted_s"] / r["measured_s"]
        r.setdefault("skew_s", None)
        r["ratio_less_skew"] = r["predicted_s"] / (r["measured_s"] - r["skew_s"]) if r["skew_s"] is not None else None
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweep", default=str(SWEEP), help="a hoccl-bench sweep.json of 2 GPUs of one node (default: the "
                   "eleventh session's run 2)")
    p.add_argument("--json", default=None, help="also write the rows here")
    p.add_argument("--skew-from", nargs="+", default=None, metavar="SWEEP.json",
                   help="only fit the start-up skew from these sweeps (one size, several --iters) and print it")
    p.add_argument("--skew-estimate", action="store_true",
                   help="also set each one-node row against its time less a start-up skew estimated from the "
                        "sweep's own send/recv rows (an estimate: scripts/device-check.sh skew measures it, on 2 GPUs)")
    p.add_argument("--out-of-sample", nargs="*", default=OUT_OF_SAMPLE, metavar="SWEEP.json",
                   help="other 2-GPU sweeps whose one-node rows are summarised beside the fitted one (default: the "
                        "other sessions' full sweeps; their runtimes differ from the fitted one's)")
    args = p.parse_args(argv)
    if args.skew_from:
        return skew_check([Path(x) for x in args.skew_from])
    sweep = Path(args.sweep)
    skew = None
    if args.skew_estimate:
        try:
            call, skew = start_skew(json.loads(sweep.read_text())["rows"])
            print(f"One node: the sweep's batches carry an estimated start-up skew of {skew * 1e6:.0f} us each (a "
                  f"call costs {call * 1e6:.1f} us above the raw copy; both from the send/recv rows, not measured), "
                  f"{skew * 1e6 / 10:.1f} us per call in a batch of 10\n")
        except ValueError as exc:
            print(f"One node: no start-up skew column: {exc}\n")
    table = rows(sweep, skew)
    skew_cols = skew is not None
    print("| setting | op | size | measured us | host us per call | v2 predicted us | v2 / measured | "
          + ("estimated start skew per call us | v2 / (measured - skew) | " if skew_cols else "") + "|")
    print("|---|---|---:|---:|---:|---:|---:|" + ("---:|---:|" if skew_cols else "") + "---|")
    for r in table:
        host = f"{r['host_us']:.1f}" if r["host_us"] is not None else ""
        size = f"{r['size'] >> 20} MiB" if r["size"] >= 1 << 20 else f"{r['size'] >> 10} KiB"
        extra = ""
        if skew_cols:
            extra = "| |" if r["skew_s"] is None else f"| {r['skew_s'] * 1e6:.1f} | {r['ratio_less_skew']:.3f} |"
        print(f"| {r['setting']} | {r['op']} | {size} | {r['measured_s'] * 1e6:.1f} | {host} | "
              f"{r['predicted_s'] * 1e6:.1f} | {r['ratio']:.3f} {extra or '|'} {r['note']} |")
    modelled = [r for r in table if not r["note"] or r["note"].startswith("rounds")]
    for setting in dict.fromkeys(r["setting"] for r in modelled):
        mine = [r for r in modelled if r["setting"] == setting]
        for what, key in (("", "ratio"), (" against the measured time less the start skew", "ratio_less_skew")):
            if mine[0][key] is None:
                continue
            errs = [abs(r[key] - 1) for r in mine]
            inside = sum(e <= 0.10 for e in errs)
            print(f"\n{setting}: {inside} of {len(errs)} device-bound rows within 10%{what} (worst {max(errs):.1%})")
    if args.out_of_sample:
        print("\nThe same one-node rows of other 2-GPU sweeps (out of sample: the costs were not fitted to them; each "
              "is a session's runtime of then), device-bound rows:\n")
        print("| sweep | device-bound rows | within 10% of measured | median v2 / measured | worst |")
        print("|---|---:|---:|---:|---:|")
        for other in [sweep, *(Path(x) for x in args.out_of_sample)]:
            mine = [r for r in rows(other, None, network=False) if not r["note"]]
            errs = [abs(r["ratio"] - 1) for r in mine]
            label = f"{other.relative_to(ROOT) if other.is_relative_to(ROOT) else other}" + \
                (" (fitted)" if other == sweep else "")
            if errs:
                print(f"| {label} | {len(errs)} | {sum(e <= 0.10 for e in errs)} | "
                      f"{statistics.median(r['ratio'] for r in mine):.3f} | {max(errs):.1%} |")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
