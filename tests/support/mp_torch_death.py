"""A rank of a hoccl group that dies (torchrun, 2 ranks on GPU 0; run by tests/gpu/test_gpu_torch.py).

After a first AllGather, the last rank exits. Rank 0's next call must raise a HocclError (the dead rank named, or
its timeout) within the group's timeout, not hang. Prints "DEATH OK <seconds>" on rank 0.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import torch
    import torch.distributed as dist

    import hoccl_runtime.torch as ht
    from hoccl_runtime.errors import HocclError

    torch.cuda.set_device(0)
    dist.init_process_group("gloo")
    ht.configure(device=0, reduce="hoccl")
    g = dist.new_group(backend="hoccl", timeout=datetime.timedelta(seconds=20))
    me, w = dist.get_rank(), dist.get_world_size()
    n = 8 << 20
    out, inp = torch.zeros(w * n, dtype=torch.uint8, device="cuda"), torch.ones(n, dtype=torch.uint8, device="cuda")
    dist.all_gather_into_tensor(out, inp, group=g)
    torch.cuda.synchronize()
    dist.barrier()
    if me == w - 1:
        os._exit(0)
    time.sleep(1.0)
    t0 = time.monotonic()
    try:
        for _ in range(3):
            dist.all_gather_into_tensor(out, inp, group=g)
            torch.cuda.synchronize()
    except HocclError as exc:
        print(f"rank {me}: raised {type(exc).__name__}: {exc}", flush=True)
        print(f"DEATH OK {time.monotonic() - t0:.1f}", flush=True)
        os._exit(0)
    print("DEATH FAILED: no error", flush=True)
    os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
