"""NCCL baseline for the intra-node benchmark (run under torchrun, 2 ranks):

    torchrun --nproc_per_node 2 examples/bench_nccl.py [--sizes 2MiB:1GiB] [--step 4]

send/recv (rank 0 -> 1), all_gather_into_tensor and all_to_all_single with NCCL's defaults, timed
with CUDA events (median of 5 repeats); sizes and bandwidth definitions match bench_intranode.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from hoccl_compiler import parse_size  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="2MiB:1GiB")
    p.add_argument("--step", type=int, default=4)
    p.add_argument("--out", default=os.environ.get("OUT"), help="folder for nccl.json (default $OUT)")
    args = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device(f"cuda:{rank}"))
    lo, hi = (parse_size(x) for x in args.sizes.split(":"))
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= args.step
    if sizes[-1] != hi:
        sizes.append(hi)
    rows = []
    for size in sizes:
        iters = max(3, min(50, (2 << 30) // size))
        out = torch.empty(size, dtype=torch.uint8, device="cuda")
        inp = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
        ops = {
            "sendrecv": lambda i=inp, o=out: (dist.send(i, 1) if rank == 0 else dist.recv(o, 0)),
            "allgather": lambda i=inp, o=out, n=size: dist.all_gather_into_tensor(o, i[: n // world]),
            "alltoall": lambda i=inp, o=out: dist.all_to_all_single(o, i),
        }
        for name, fn in ops.items():
            fn()
            torch.cuda.synchronize()
            times = []
            for _ in range(5):
                dist.barrier()
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                host = (time.perf_counter() - t0) / iters * 1e6
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1e3 / iters)
            t = statistics.median(times)
            rows.append((name, size, size / t / 1e9, host))
    if rank == 0:
        print(f"NCCL {torch.cuda.nccl.version()} torch {torch.__version__}")
        for name, size, gbps, host in rows:
            print(f"{name:10} {'nccl-default':22} {size >> 20:>6} MiB {gbps:8.1f} {host:8.1f}")
        if args.out:
            import json

            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / "nccl.json").write_text(json.dumps(dict(
                date=time.strftime("%Y-%m-%d %H:%M"), gpu=torch.cuda.get_device_name(0),
                driver=".".join(map(str, torch.cuda.nccl.version())), env={},
                rows=[dict(op=n, impl="nccl-default", size=s, gbps=g, host_us=h) for n, s, g, h in rows]), indent=1))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
