"""Per-call time of the network communicator's collectives through the torch backend, each rank its own "node" over
TCP (HOCCL_GPUS_PER_NODE=1), both ranks on GPU 0 (session 20; HOCCL_DIAG_ROOT: another tree's code to time, for an
A/B of the same script): which calls cost ~2.2 ms at 64 KiB where send/recv
costs ~0.85 ms (session 19)? AllGather and All-to-All copy the rank's own block within its GPU (the driver runs
that on SMs), broadcast (in place) and send/recv do not. Back-to-back calls, median of 5 windows of 40 calls.

    HOCCL_GPUS_PER_NODE=1 torchrun --nproc_per_node 2 docs/results/2026-12-01-s20/net_ops.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, os.environ.get("HOCCL_DIAG_ROOT") or str(Path(__file__).resolve().parents[3]))  # the code to time


def main() -> int:
    import torch
    import torch.distributed as dist

    import hoccl_runtime.torch as ht

    rank = int(os.environ["RANK"])
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")
    ht.configure(device=0, reduce="hoccl")
    group = dist.new_group(backend="hoccl")
    rows = []
    for size in (64 << 10, 2 << 20):
        x = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
        out = torch.empty(2 * size, dtype=torch.uint8, device="cuda")
        out2 = torch.randint(0, 255, (2 * size,), dtype=torch.uint8, device="cuda")
        mine = out[rank * size:(rank + 1) * size]
        calls = {
            "allgather": lambda x=x, out=out: dist.all_gather_into_tensor(out, x, group=group),
            "allgather in place": lambda out=out, mine=mine: dist.all_gather_into_tensor(out, mine, group=group),
            "alltoall": lambda out=out, out2=out2: dist.all_to_all_single(out, out2, group=group),
            "broadcast": lambda x=x: dist.broadcast(x, 0, group=group),
            "sendrecv": lambda x=x, out=out, size=size: (dist.send(x, 1, group=group) if rank == 0 else
                                                         dist.recv(out[:size], 0, group=group)),
        }
        for op, call in calls.items():
            for _ in range(10):
                call()
            torch.cuda.synchronize()
            windows = []
            for _ in range(5):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(40):
                    call()
                torch.cuda.synchronize()
                windows.append((time.perf_counter() - t0) / 40)
            rows.append((op, size, statistics.median(windows), min(windows), max(windows)))
    if rank == 1:
        import hoccl_runtime

        root = "code " + str(Path(hoccl_runtime.__file__).parents[1])
        for op, size, med, lo, hi in rows:
            print(f"{root} {op:>18} {size >> 10:>5} KiB {med * 1e6:8.0f} us per call "
                  f"({lo * 1e6:.0f}-{hi * 1e6:.0f})", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
