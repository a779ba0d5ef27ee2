"""The one-GPU-per-node communicator on one machine: each GPU its own "node", joined by TCP
(torchrun --nproc_per_node 2; run by test_gpu_multiprocess.py). Prints "NET OK" on each rank."""

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
    from hoccl_runtime.comm.net import NetCommunicator

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device(f"cuda:{rank}"))
    comm = hr.init(gpus_per_node=1, timeout_s=30)
    assert isinstance(comm, NetCommunicator)
    s = torch.cuda.Stream()
    failures = []
    for n in (1, 4099, (3 << 20) + 5, 64 << 20):
        inp = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
        out = torch.full((n * world,), 0xA5, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        comm.all_gather_into_tensor(out, inp, stream=s)
        s.synchronize()  # the proxy releases the stream once the data landed
        want = torch.empty_like(out)
        dist.all_gather_into_tensor(want, inp)
        if not torch.equal(out, want):
            failures.append(f"all_gather {n}")
        a2a_in = torch.randint(0, 256, (n * world,), dtype=torch.uint8, device="cuda")
        a2a_out = torch.full_like(a2a_in, 0xA5)
        torch.cuda.synchronize()
        comm.all_to_all_single(a2a_out, a2a_in, stream=s)
        s.synchronize()
        want = torch.empty_like(a2a_out)
        dist.all_to_all_single(want, a2a_in)
        if not torch.equal(a2a_out, want):
            failures.append(f"all_to_all {n}")
        buf = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda") if rank == 0 else \
            torch.full((n,), 0xA5, dtype=torch.uint8, device="cuda")
        ref = buf.clone()
        dist.broadcast(ref, 0)
        torch.cuda.synchronize()
        if rank == 0:
            comm.send(buf, 1, stream=s)
        elif rank == 1:
            comm.recv(buf, 0, stream=s)
        s.synchronize()
        if rank == 1 and not torch.equal(buf, ref):
            failures.append(f"send/recv {n}")
        bc = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
        ref = bc.clone()
        dist.broadcast(ref, 1)
        torch.cuda.synchronize()
        comm.broadcast(bc, 1, stream=s)
        s.synchronize()
        if not torch.equal(bc, ref):
            failures.append(f"broadcast {n}")
        sc_in = torch.randint(0, 256, (n * world,), dtype=torch.uint8, device="cuda")
        ref = sc_in.clone()
        dist.broadcast(ref, 0)  # what rank 0 scatters
        sc_out = torch.full((n,), 0xA5, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        comm.scatter(sc_out, sc_in if rank == 0 else None, root=0, stream=s)
        s.synchronize()
        if not torch.equal(sc_out, ref[rank * n:(rank + 1) * n]):
            failures.append(f"scatter {n}")
        ga_in = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
        ga_out = torch.full((n * world,), 0xA5, dtype=torch.uint8, device="cuda")
        want = torch.empty_like(ga_out)
        dist.all_gather_into_tensor(want, ga_in)
        torch.cuda.synchronize()
        comm.gather(ga_in, ga_out if rank == 0 else None, root=0, stream=s)
        s.synchronize()
        if rank == 0 and not torch.equal(ga_out, want):
            failures.append(f"gather {n}")
    comm.synchronize()
    # 1 GiB send/recv, timed with events on the caller's stream (the proxy runs the network part)
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    for rep in range(3):
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(s)
        comm.send(big, 1, stream=s) if rank == 0 else comm.recv(big, 0, stream=s)
        end.record(s)
        end.synchronize()
        if rank == 1:
            print(f"rank 1: 1 GiB over the network path in {start.elapsed_time(end):.1f} ms "
                  f"({(1 << 30) / start.elapsed_time(end) / 1e6:.2f} GB/s), rep {rep}", flush=True)
    t0 = time.monotonic()
    comm.close()
    print(f"rank {rank}: {'FAILED ' + str(failures) if failures else 'NET OK'} (close {time.monotonic() - t0:.2f} s)",
          flush=True)
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
