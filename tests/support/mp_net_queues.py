"""Network calls where every stream shares one hardware queue (``CUDA_DEVICE_MAX_CONNECTIONS=1``, as Megatron sets
it; with more streams than queues, or under MPS, some streams share one too): two ranks, each its own "node" over
TCP, both on GPU 0 (torchrun --nproc_per_node 2; tests/gpu/test_gpu_training_tcp.py). A call's gated copies must
not hold the caller's START behind a gate that waits for it (comm.net.enqueue_call): before that order, the first
call's copies waited out the communicator's timeout. Prints "QUEUES OK" on each rank."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import torch
    import torch.distributed as dist

    import hoccl_runtime as hr

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")
    comm = hr.init(gpus_per_node=1, device=0, timeout_s=20)
    side = torch.cuda.Stream()  # the calls' stream, with compute on the default stream beside it
    failures = []
    t0 = time.monotonic()
    for n in (4099, 20 << 20):  # one chunk, and ten of the communicator's 2 MiB
        g = torch.Generator(device="cuda").manual_seed(rank * 1000 + n)
        inp = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda", generator=g)
        out = torch.full((n * world,), 0xA5, dtype=torch.uint8, device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        comm.all_gather_into_tensor(out, inp, stream=side)
        a = torch.randn(2048, 2048, device="cuda")
        (a @ a).sum().item()  # compute on the default stream meanwhile
        buf = torch.full((n,), 0x5A, dtype=torch.uint8, device="cuda")
        if rank == 0:
            comm.send(inp, 1, stream=side)
        else:
            comm.recv(buf, 0, stream=side)
        side.synchronize()
        want = [torch.empty_like(inp, device="cpu") for _ in range(world)]
        dist.all_gather(want, inp.cpu())
        if not torch.equal(out.cpu(), torch.cat(want)):
            failures.append(f"all_gather {n}")
        if rank == 1 and not torch.equal(buf.cpu(), want[0]):
            failures.append(f"send/recv {n}")
    comm.close()
    seconds = time.monotonic() - t0
    dist.destroy_process_group()
    if failures:
        print(f"rank {rank}: FAILED {failures}", flush=True)
        return 1
    print(f"rank {rank}: QUEUES OK in {seconds:.1f} s (CUDA_DEVICE_MAX_CONNECTIONS="
          f"{os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS', 'unset')})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
