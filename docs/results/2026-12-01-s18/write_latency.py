"""Where does a 2 MiB TCP write's time go? (session 18)

    python docs/results/2026-12-01-s18/write_latency.py [--rounds 5]

The TCP transport alone, host to host (examples/bench_tcp.py: one write and its acknowledgement, median of its
repeats), 64 KiB .. 8 MiB, by lanes (1, 2, 8) and by socket buffers (the kernel's autotuning, or fixed
HOCCL_TCP_SOCKET_BUFFER 4 / 32 MiB), interleaved rounds. Prints the medians and ranges last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

SIZES = (64 << 10, 512 << 10, 2 << 20, 8 << 20)
SETTINGS = [(1, 0), (2, 0), (8, 0), (8, 4 << 20), (8, 32 << 20)]  # (lanes, socket buffer; 0 = autotuning)


def main(argv=None) -> int:
    import bench_tcp

    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    got: dict = {}
    for rnd in range(args.rounds):
        for size in SIZES:
            for lanes, buf in SETTINGS:
                if buf:
                    os.environ["HOCCL_TCP_SOCKET_BUFFER"] = str(buf)
                try:
                    t = bench_tcp.hoccl(lanes, size)
                finally:
                    os.environ.pop("HOCCL_TCP_SOCKET_BUFFER", None)
                got.setdefault((size, lanes, buf), []).append(t)
        print(f"round {rnd} done", flush=True)
    print(f"\n{'size':>9} | " + " | ".join(f"{f'{lanes} lanes, buf ' + (f'{buf >> 20} MiB' if buf else 'auto'):>24}"
                                           for lanes, buf in SETTINGS))
    for size in SIZES:
        cells = []
        for lanes, buf in SETTINGS:
            v = [x * 1e3 for x in got[(size, lanes, buf)]]
            cells.append(f"{statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})")
        print(f"{size >> 10:>5} KiB | " + " | ".join(f"{c:>24}" for c in cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
