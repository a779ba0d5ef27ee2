"""What the staged GPU path adds to the TCP wire, per size (session 18, calib_tcp-run2.json).

    python docs/results/2026-12-01-s18/decompose.py

Per size, medians over the 5 rounds: the GPU path, and the wire it rides as the TCP transport moves it host to
host with the executor's own writes (8 MiB chunks into a ring of slots credited by the receiver, "chunked").
Their difference is the GPU path's own part: v2 charges it as the call's protocol work (the 64 KiB row: one
chunk, nothing to stage) plus the staging's fill and drain (2 x min(8 MiB, size) / costs.net_staging_gbps).
The residual is what v2 does not charge. Also tried here and rejected: a fixed cost per chunk (the residual per
further chunk falls from 0.28 ms at 32 MiB to 0.09 ms at 1 GiB, so it is not one).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHUNK, STAGING_GBPS = 8 << 20, 22.0


def main() -> int:
    rows = json.loads((HERE / "calib_tcp-run2.json").read_text())
    sizes = sorted({r["size"] for r in rows})

    def med(size, key):
        return statistics.median(r[key] for r in rows if r["size"] == size)

    call = med(sizes[0], "gpu_s") - med(sizes[0], "chunked_s")
    print(f"{'size':>9} | {'GPU ms':>7} | {'wire ms':>7} | {'GPU - wire':>10} | {'call + fill':>11} | "
          f"{'residual ms':>11} | {'of GPU':>6} | {'per further chunk ms':>20}")
    for s in sizes:
        gpu, wire = med(s, "gpu_s"), med(s, "chunked_s")
        fill = 2 * min(CHUNK, s) / (STAGING_GBPS * 1e9)
        residual = gpu - wire - call - fill
        chunks = -(-s // CHUNK)
        per = f"{residual / (chunks - 1) * 1e3:.3f}" if chunks > 1 else ""
        print(f"{s >> 10:>5} KiB | {gpu * 1e3:7.3f} | {wire * 1e3:7.3f} | {(gpu - wire) * 1e3:10.3f} | "
              f"{(call + fill) * 1e3:11.3f} | {residual * 1e3:11.3f} | {residual / gpu:6.1%} | {per:>20}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
