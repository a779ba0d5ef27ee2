"""AllGather over two TCP nodes sharing one GPU: the hoccl group against NCCL's socket transport, at FSDP small's
sizes, alone and beside an NCCL reduce-scatter on another stream (what FSDP with NCCL reducing runs at once).

    bash scripts/tcp-nodes.sh [--mps] docs/results/2026-12-04-s34/agbench.py [--sizes 1,3,8] [--repeats 15]

Sizes are MiB per rank (the output is twice that). Each repeat draws fresh random inputs, poisons the output, times
the AllGather on its stream with CUDA events (the stream held by a sleep kernel ahead of it unless "host in"), then checks every byte (the peer's input is regenerated from its
seed). Variants interleave within a repeat; medians are printed last.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))


MODES = ("alone", "host in", "beside RS")  # held stream; idle stream (the call's host time timed); held, beside RS


def data(seed: int, n: int, device) -> torch.Tensor:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device=device, generator=g)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="1,3,8")
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--chunks", default="8", help="MiB: one hoccl group per network chunk size (HOCCL_NET_CHUNK_BYTES)")
    p.add_argument("--hold-ms", type=float, default=3.0, help="a sleep kernel ahead of the timed call")
    p.add_argument("--rs-mib", type=float, default=64.0, help="the reduce-scatter's fp32 input per rank, MiB")
    args = p.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    import hoccl_runtime.torch as ht

    ht.configure(reduce="nccl", device=0)
    variants = []
    for c in args.chunks.split(","):
        os.environ["HOCCL_NET_CHUNK_BYTES"] = str(int(float(c) * 2**20))
        variants.append((f"hoccl/{c}", dist.new_group(backend="hoccl")))
    nccl = dist.group.WORLD
    variants.append(("nccl", nccl))
    side = torch.cuda.Stream(dev)
    rs_in = torch.randn(int(args.rs_mib * 2**20 / 4), device=dev)
    rs_out = torch.empty(rs_in.numel() // world, device=dev)
    times: dict = {}
    bad = 0
    sizes = [int(float(s) * 2**20) for s in args.sizes.split(",")]
    for rep in range(args.repeats + 2):
        for n in sizes:
            for mode in MODES:
                for name, group in variants:
                    inp = data(1000 * rep + 10 * rank + n % 7, n, dev)
                    out = torch.full((world * n,), 0xA5, dtype=torch.uint8, device=dev)
                    torch.cuda.synchronize()
                    dist.barrier(group=nccl, device_ids=[0])
                    torch.cuda.synchronize()
                    if mode != "host in":  # the stream held: the host's enqueue is not timed (it runs ahead)
                        torch.cuda._sleep(int(args.hold_ms * 1.9e6))
                    if mode == "beside RS":
                        side.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(side):
                            dist.reduce_scatter_tensor(rs_out, rs_in, group=nccl)
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()  # (after the sleep, where there is one)
                    dist.all_gather_into_tensor(out, inp, group=group)
                    b.record()
                    torch.cuda.synchronize()
                    want = torch.cat([data(1000 * rep + 10 * r + n % 7, n, dev) for r in range(world)])
                    if not torch.equal(out, want):
                        bad += 1
                    if rep >= 2:
                        times.setdefault((n, mode, name), []).append(a.elapsed_time(b))
    # a rank that reached the call late makes the other's time long: the figure is the shorter of the two ranks'
    every = [None] * world
    dist.all_gather_object(every, times)
    times = {k: [min(t[k][i] for t in every) for i in range(len(v))] for k, v in times.items()}
    if rank == 0:
        names = [n for n, _ in variants]
        print(f"AllGather over 2 TCP nodes on one GPU, {os.environ.get('CUDA_MPS_PIPE_DIRECTORY') and 'MPS' or 'time-sliced'}"
              f", medians of {args.repeats} of the shorter rank's time; wrong outputs: {bad}")
        print(f"{'MiB/rank':>9} {'mode':<10}" + "".join(f"{k + ' ms':>12}" for k in names) + "  nccl / each")
        for n in sizes:
            for mode in MODES:
                med = [statistics.median(times[(n, mode, k)]) for k in names]
                print(f"{n / 2**20:>9.1f} {mode:<10}" + "".join(f"{m:>12.3f}" for m in med) + "  " +
                      " ".join(f"{med[-1] / m:.2f}" for m in med[:-1]))
    dist.barrier(device_ids=[0])
    dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
