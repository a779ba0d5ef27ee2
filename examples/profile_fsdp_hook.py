"""Host time per AllGather call: the communicator's own call, FSDP2's hook (HocclAllGather) and the hoccl backend
(dist.all_gather_into_tensor), in place on window memory, under torchrun; and of the output's ``allocate()`` that
FSDP2 makes before each, from the window and from torch's allocator.

    torchrun --nproc_per_node 2 examples/profile_fsdp_hook.py [--share-gpu] [--calls 200] [--size 2MiB]
    bash scripts/tcp-nodes.sh examples/profile_fsdp_hook.py --size 6MiB    # each rank its own node, over TCP

Each row issues ``--calls`` calls back to back on a stream held by a wait on a host flag (so the GPU runs none of
them while they are timed, and a full launch queue cannot slow the host), divides the host time by the count,
then releases the stream and checks the output; rows are interleaved over ``--repeats`` rounds and the median
is printed. With ``--share-gpu`` (every rank on GPU 0) the copies are same-GPU copies: the host figures hold, the
GPU's do not say anything about copy engines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--share-gpu", action="store_true")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--size", default="2MiB", help="output bytes per call (KiB / MiB suffixes)")
    args = p.parse_args(argv)
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    size = next((int(args.size[:-3]) * m for u, m in units.items() if args.size.endswith(u)), None) or int(args.size)

    import hoccl_runtime.torch as ht
    from hoccl_runtime.torch import HocclAllGather, WindowPool

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = 0 if args.share_gpu else int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo")
    ht.configure(device=dev, reduce="hoccl")
    g = dist.new_group(backend="hoccl")
    n = size // world // 2  # bf16 elements per rank
    pool = WindowPool(g.comm, 4 * size, dev)
    gather = HocclAllGather(g, pool)
    out = gather.allocate((world * n,), dtype=torch.bfloat16, device=torch.device("cuda", dev))
    mine = out[rank * n:(rank + 1) * n]
    stream = torch.cuda.Stream()
    import cupy

    from hoccl_runtime.flags import FlagPool, MemOps

    with cupy.cuda.Device(dev):
        flags = FlagPool(1)
    hold = flags.allocate()
    shape, cuda = (world * n,), torch.device("cuda", dev)
    rows = {
        "communicator": lambda: g.comm.all_gather_into_tensor(out, mine, stream=stream),
        "FSDP hook": lambda: gather(out, mine, g),
        "hoccl backend": lambda: dist.all_gather_into_tensor(out, mine, group=g),
        # what FSDP2 calls before each AllGather: a window block (made a tensor through CuPy and DLPack, given back
        # as it dies), against torch's allocator (FSDP's own default, and use_for_fsdp(window_bytes=0))
        "allocate, window": lambda: gather.allocate(shape, dtype=torch.bfloat16, device=cuda),
        "allocate, torch": lambda: torch.empty(shape, dtype=torch.bfloat16, device=cuda),
    }
    times: dict[str, list[float]] = {k: [] for k in rows}
    with torch.cuda.stream(stream):
        for _ in range(args.repeats):
            for name, call in rows.items():
                mine.fill_(rank + 1)
                for _ in range(5):
                    call()
                torch.cuda.synchronize()
                dist.barrier()
                hold.write(0)
                with cupy.cuda.Device(dev):
                    MemOps().wait_eq(hold, 1).enqueue(stream.cuda_stream)  # the stream stops here until released
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    call()
                times[name].append((time.perf_counter() - t0) / args.calls * 1e6)
                hold.write(1)
                torch.cuda.synchronize()
                want = torch.repeat_interleave(torch.arange(1, world + 1, device=out.device, dtype=out.dtype), n)
                if not torch.equal(out, want):
                    raise SystemExit(f"rank {rank}: {name}: wrong output")
                dist.barrier()
    if rank == 0:
        print(f"AllGather of {size} bytes ({world} ranks{', sharing GPU 0' if args.share_gpu else ''}), in place on "
              f"window memory; host us per call, median of {args.repeats} rounds of {args.calls} calls")
        for name, ts in times.items():
            print(f"{name:<15}{statistics.median(ts):>8.2f}   (range {min(ts):.2f}-{max(ts):.2f})")
    dist.barrier()
    pool.close()
    flags.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
