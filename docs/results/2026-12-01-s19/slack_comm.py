"""Per-call time of the network communicator through the torch backend, each rank its own "node" over TCP
(HOCCL_GPUS_PER_NODE=1), both ranks on GPU 0 (session 19): AllGather and send/recv of 64 KiB and 2 MiB, back-to-back
calls, median of 5 windows of 40 calls. Run it under the two timer-slack settings to compare:

    for v in 0 1000; do HOCCL_TIMER_SLACK_NS=$v HOCCL_GPUS_PER_NODE=1 torchrun --nproc_per_node 2 \\
        docs/results/2026-12-01-s19/slack_comm.py; done
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


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
    for op in ("allgather", "sendrecv"):
        for size in (64 << 10, 2 << 20):
            x = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
            out = torch.empty(2 * size, dtype=torch.uint8, device="cuda")

            def call(op=op, x=x, out=out, size=size):
                if op == "allgather":
                    dist.all_gather_into_tensor(out, x, group=group)
                elif rank == 0:
                    dist.send(x, 1, group=group)
                else:
                    dist.recv(out[:size], 0, group=group)

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
            rows.append((op, size, statistics.median(windows)))
    if rank == 1:
        slack = os.environ.get("HOCCL_TIMER_SLACK_NS", "1000 (default)")
        for op, size, s in rows:
            print(f"slack {slack:>14} {op:>9} {size >> 10:>5} KiB {s * 1e6:8.0f} us per call", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
