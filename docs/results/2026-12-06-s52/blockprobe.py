"""Session 52: does a CUDA op on the default stream block the host while that stream waits (by an event) for a
stream held by a HOCCL-style flag wait (cuStreamWaitValue32 on host memory) - and not for one held by a kernel?
FSDP2's copy-out (torch.split_with_sizes_copy, whose CUDA fast path packs its pointers in pinned host memory and
copies them with .to(non_blocking=True)) and a linear layer are timed on the host, the side stream held 3 ms by
(a) nothing, (b) a sleep kernel, (c) a flag wait released by a thread, (d) as (c) with the source a window tensor
made as HOCCL's FSDP AllGather makes it (DLPack over CuPy). Medians of 30, us."""
import statistics
import sys
import threading
import time

import torch
import torch.nn.functional as F

from hoccl_runtime.flags import FlagPool, MemOps
from hoccl_runtime.torch._fsdp import _tensor_on

dev = torch.device("cuda", 0)
torch.cuda.set_device(dev)
pool = FlagPool(64)
side = torch.cuda.Stream()
numels = [2304 * 768, 768 * 768, 3072 * 768, 768 * 3072, 768, 768, 768, 768, 3 * 768, 3072]
world, total = 2, sum([2304 * 768, 768 * 768, 3072 * 768, 768 * 3072, 768, 768, 768, 768, 3 * 768, 3072])
src = torch.randn(world, total, dtype=torch.bfloat16, device=dev)
space = torch.empty(world * total * 2, dtype=torch.uint8, device=dev)


class Owner:
    pass


win = _tensor_on(space.data_ptr(), space.numel(), 0, Owner()).view(torch.bfloat16).view(world, total)
win.copy_(src)
outs = [torch.empty(world, n, dtype=torch.bfloat16, device=dev) for n in numels]
x = torch.randn(4096, 768, dtype=torch.bfloat16, device=dev)
w = torch.randn(768, 768, dtype=torch.bfloat16, device=dev)
HOLD_MS = 3.0


def once(kind: str, source: torch.Tensor) -> tuple[float, float, float]:
    if kind == "kernel":
        with torch.cuda.stream(side):
            torch.cuda._sleep(int(HOLD_MS * 1.7e6))
    elif kind == "flag":
        flag = pool.allocate()
        flag.write(0)
        MemOps().wait_geq(flag, 1).enqueue(side.cuda_stream)
        threading.Timer(HOLD_MS / 1e3, flag.write, args=(1,)).start()
    ev = side.record_event()
    torch.cuda.current_stream().wait_event(ev)
    t0 = time.perf_counter()
    torch.split_with_sizes_copy(source, numels, dim=1, out=outs)
    t1 = time.perf_counter()
    F.linear(x, w)
    t2 = time.perf_counter()
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    if kind == "flag":
        pool.release(flag)
    return (t1 - t0) * 1e6, (t2 - t1) * 1e6, (t3 - t0) * 1e6


rows = []
for kind, source, name in (("none", src, "nothing"), ("kernel", src, "sleep kernel"), ("flag", src, "flag wait"),
                           ("flag", win, "flag wait, window source"), ("kernel", win, "sleep kernel, window source")):
    for _ in range(3):
        once(kind, source)
    got = [once(kind, source) for _ in range(30)]
    rows.append((name, *(statistics.median(g[i] for g in got) for i in range(3))))
print(f"{sys.argv[1] if len(sys.argv) > 1 else ''}: host us (median of 30), side stream held {HOLD_MS} ms by:")
print(f"  {'held by':30s} {'split_with_sizes_copy':>22s} {'linear':>8s} {'until synchronized':>19s}")
for name, a, b, c in rows:
    print(f"  {name:30s} {a:22.0f} {b:8.0f} {c:19.0f}")
