"""A peer that dies while the GPUs still wait on it (torchrun, 2+ ranks; run by test_gpu_multiprocess.py).

The last rank blocks its own stream (a stream wait on a host flag nobody sets), calls all_gather, so
the host-side exchange completes but its stream never signals READY, and exits. The others' call has
returned at once; their stream waits on the dead rank. Their watchdog must see the exit, release the
streams (they drain instead of hanging forever) and make synchronize() raise TransportError naming it.
Prints "DEATH OK" on each surviving rank.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import cupy as cp
    import torch
    import torch.distributed as dist

    from hoccl_runtime import init
    from hoccl_runtime.errors import TransportError
    from hoccl_runtime.flags import FlagPool, MemOps

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cp.cuda.Device(rank).use()
    dist.init_process_group("nccl", device_id=torch.device(f"cuda:{rank}"))
    comm = init(timeout_s=30)
    stream = cp.cuda.Stream(non_blocking=True)
    inp, out = cp.ones(1 << 20, cp.uint8), cp.zeros(world << 20, cp.uint8)
    comm.all_gather_into_tensor(out, inp, stream=stream)
    stream.synchronize()
    dist.barrier()
    if rank == world - 1:
        pool = FlagPool(1)
        MemOps().wait_eq(pool.allocate(), 1).enqueue(stream.ptr)  # this stream never goes on
        comm.all_gather_into_tensor(out, inp, stream=stream)
        time.sleep(0.5)
        os._exit(0)
    comm.all_gather_into_tensor(out, inp, stream=stream)  # returns at once; the stream waits on the dead rank
    t0 = time.monotonic()
    try:
        comm.synchronize(timeout_s=20)
        print(f"rank {rank}: FAILED: synchronize returned although rank {world - 1} died", flush=True)
        return 1
    except TransportError as exc:
        waited = time.monotonic() - t0
        print(f"rank {rank}: synchronize raised after {waited:.2f} s: {str(exc)[:90]}", flush=True)
        if f"rank {world - 1}" not in str(exc):
            return 1
    stream.synchronize()  # drained: returns instead of waiting forever
    try:
        comm.all_gather_into_tensor(out, inp, stream=stream)
        print(f"rank {rank}: FAILED: a call on the failed communicator went through", flush=True)
        return 1
    except TransportError:
        pass
    comm.close()
    print(f"rank {rank}: DEATH OK after {time.monotonic() - t0:.2f} s", flush=True)
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
