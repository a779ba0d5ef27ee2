"""2 nodes x 2 GPUs on the 2-GPU machine: 4 ranks under torchrun, ranks 0-1 node 0 and 2-3 node 1, local
rank i on GPU i; node leaders joined by TCP (run by test_gpu_multiprocess.py). Prints "NODENET OK"."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import torch
    import torch.distributed as dist

    import hoccl_runtime as hr
    from hoccl_runtime.comm.nodenet import NodeNetCommunicator

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gpu = rank % min(2, torch.cuda.device_count())  # on a 1-GPU machine every rank on GPU 0 (correctness only)
    torch.cuda.set_device(gpu)
    dist.init_process_group("gloo")  # the reference results; 4 ranks share 2 GPUs, which NCCL refuses
    comm = hr.init(gpus_per_node=2, device=gpu, timeout_s=60)
    assert isinstance(comm, NodeNetCommunicator)
    s = torch.cuda.Stream()
    failures = []
    for n in (3, 4099, (2 << 20) + 1):
        inp = torch.randint(0, 256, (n,), dtype=torch.uint8)
        out = torch.full((n * world,), 0xA5, dtype=torch.uint8, device="cuda")
        want = [torch.empty_like(inp) for _ in range(world)]
        dist.all_gather(want, inp)
        torch.cuda.synchronize()
        comm.all_gather_into_tensor(out, inp.cuda(), stream=s)
        s.synchronize()
        if not torch.equal(out.cpu(), torch.cat(want)):
            failures.append(f"all_gather {n}")
        a2a_in = torch.randint(0, 256, (n * world,), dtype=torch.uint8)
        want = torch.empty_like(a2a_in)
        dist.all_to_all_single(want, a2a_in)
        a2a_out = torch.full((n * world,), 0xA5, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        comm.all_to_all_single(a2a_out, a2a_in.cuda(), stream=s)
        s.synchronize()
        if not torch.equal(a2a_out.cpu(), want):
            failures.append(f"all_to_all {n}")
        bc = torch.randint(0, 256, (n,), dtype=torch.uint8)
        dist.broadcast(bc, 3)
        mine = bc.cuda() if rank == 3 else torch.full((n,), 0xA5, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        comm.broadcast(mine, 3, stream=s)
        s.synchronize()
        if not torch.equal(mine.cpu(), bc):
            failures.append(f"broadcast {n}")
        # send/recv: 0 -> 3 and 2 -> 1 across the nodes, 1 -> 0 and 3 -> 2 within a node
        p2p = torch.randint(0, 256, (n,), dtype=torch.uint8)
        every = [torch.empty_like(p2p) for _ in range(world)]
        dist.all_gather(every, p2p)
        dst, src = {0: 3, 1: 0, 2: 1, 3: 2}[rank], {3: 0, 0: 1, 1: 2, 2: 3}[rank]
        got = torch.full((n,), 0xA5, dtype=torch.uint8, device="cuda")
        mine = p2p.cuda()
        torch.cuda.synchronize()
        if rank in (0, 2):
            comm.send(mine, dst, stream=s)
            comm.recv(got, src, stream=s)
        else:
            comm.recv(got, src, stream=s)
            comm.send(mine, dst, stream=s)
        s.synchronize()
        if not torch.equal(got.cpu(), every[src]):
            failures.append(f"send/recv {n}")
    comm.close()
    print(f"rank {rank}: {'FAILED ' + str(failures) if failures else 'NODENET OK'}", flush=True)
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
