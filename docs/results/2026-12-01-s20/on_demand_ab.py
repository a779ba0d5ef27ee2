"""The runtime's on-demand compile (8 GPUs, one chunk per transfer, no byte replay, no baselines; as
hoccl_runtime.plans.compile_call) of an earlier commit's compiler against the work tree's, interleaved in one
process so that the VM's changing speed hits both alike (session 20): median of REPS calls per collective and
size (AllGather, All-to-All, broadcast/scatter/gather from root 3; 8 KiB .. 1 GiB), worst and mean.

    python docs/results/2026-12-01-s20/on_demand_ab.py [REV (default 82819a5)] [REPS (default 21)]
"""

from __future__ import annotations

import importlib
import io
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def main() -> int:
    rev = sys.argv[1] if len(sys.argv) > 1 else "82819a5"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 21
    tmp = Path(tempfile.mkdtemp())
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "hoccl_compiler"], check=True,
                             capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tmp, filter="data")
    (tmp / "hoccl_compiler").rename(tmp / "hc_base")  # the package imports itself relatively
    sys.path[:0] = [str(tmp), str(ROOT)]
    mods = {}
    for name, pkg in (("base", "hc_base"), ("new", "hoccl_compiler")):
        col, ir, pipe = (importlib.import_module(f"{pkg}.{m}") for m in ("collective", "ir", "pipeline"))
        mods[name] = (col.CollectiveSpec, ir.CompileOptions, pipe.compile_plan,
                      importlib.import_module(pkg).make_topology("dgx-h100", nodes=1))

    def spec(cls, kind, size):
        if kind in ("allgather", "alltoall"):
            return cls(kind=kind, size_bytes=size)
        return cls(kind=kind, size_bytes=size, root=3, in_place=kind == "broadcast")

    keys = [(k, s) for k in ("allgather", "alltoall", "broadcast", "scatter", "gather")
            for s in (8 << 10, 1 << 20, 64 << 20, 1 << 30)]
    times = {n: {k: [] for k in keys} for n in mods}
    for _ in range(reps):
        for k in keys:
            for n, (cls, options, compile_plan, topo) in mods.items():
                s, o = spec(cls, *k), options(chunk_bytes=1 << 40, baselines=False, byte_replay=False)
                t = time.perf_counter()
                compile_plan(topo, s, o)
                times[n][k].append(time.perf_counter() - t)
    med = {n: {k: sorted(v)[len(v) // 2] * 1e3 for k, v in d.items()} for n, d in times.items()}
    for k in keys:
        print(f"{k[0]:>10} {k[1]:>11} B  {rev} {med['base'][k]:.3f} ms  work tree {med['new'][k]:.3f} ms  "
              f"ratio {med['new'][k] / med['base'][k]:.3f}")
    for n, label in (("base", rev), ("new", "work tree")):
        print(f"{label}: worst median {max(med[n].values()):.3f} ms, mean {sum(med[n].values()) / len(keys):.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
