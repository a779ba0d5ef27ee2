"""Where a one-chunk network call's time goes (session 17's diagnostic; run from the repository root)."""
import sys

sys.path[:0] = [".", "examples"]

import bench_internode as bi  # noqa: E402
import bench_tcp  # noqa: E402

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402


def main():
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    for size in (2 << 20, 8 << 20, 32 << 20):
        plan = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),)),
                            CompileOptions(chunk_bytes=min(8 << 20, size), baselines=False))
        for rnd in range(2):
            cells = []
            for variant in ("", "no-d2h", "no-h2d", "no-copies"):
                res = bi.run_nodes(plan, lanes=8, slots=32, reps=9, variant=variant)
                cells.append(f"{variant or 'gpu'} {bi.slowest_median(res, 9) * 1e3:.2f}")
            res = bi.run_nodes(plan, lanes=8, slots=32, reps=9, host=True, variant="no-copies")
            cells.append(f"host-protocol {bi.slowest_median(res, 9) * 1e3:.2f}")
            cells.append(f"transport {bench_tcp.hoccl(8, size) * 1e3:.2f}")
            print(size >> 20, "MiB round", rnd, " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
