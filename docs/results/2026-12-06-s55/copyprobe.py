"""Copy-engine copies between the GPU and host memory of the two kinds HOCCL uses: pinned memory from cuMemHostAlloc
(the one-process paths, gatewake.py's) and a memfd mapped and registered with cuMemHostRegister (the network proxy
process's shared arena, net/arena.SharedArena). Per kind, direction and size: the GPU time of one copy (CUDA
events, median and p90 of 200, each copy alone on its stream), and the time from a host flag's write to a landing
copy's end as gatewake.py measures it (memfd source). Prints us and GB/s.

    python3 copyprobe.py
"""
import ctypes
import time

import torch

from hoccl_runtime._cuda import copy_async, fast_driver, host_mapped_alloc, pack_memops
from hoccl_runtime.net.arena import SharedArena

torch.zeros(1, device="cuda")
N = 64 << 20
pinned = host_mapped_alloc(N)
arena = SharedArena(N + 4096)
arena.register_with_cuda()
shm = arena.base
dev = torch.empty(N, dtype=torch.uint8, device="cuda")
s = torch.cuda.Stream()
sp = s.cuda_stream
ctypes.memset(pinned, 7, N)
arena.view[:] = 7


def timed(dst, src, n, reps=200):
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(s)
        copy_async(dst, src, n, sp)
        b.record(s)
        b.synchronize()
        out.append(a.elapsed_time(b) * 1e3)
    out.sort()
    return out[len(out) // 2], out[int(0.9 * (len(out) - 1))]


for name, host in (("cuMemHostAlloc", pinned), ("memfd registered", shm)):
    for n in (2 << 20, 3 << 20, 16 << 20):
        h2d = timed(dev.data_ptr(), host, n)
        d2h = timed(host, dev.data_ptr(), n)
        print(f"{name:17s} {n >> 20:3d} MiB  H2D p50 {h2d[0]:7.1f} us ({n / h2d[0] / 1e3:5.1f} GB/s) p90 {h2d[1]:7.1f}"
              f"   D2H p50 {d2h[0]:7.1f} us ({n / d2h[0] / 1e3:5.1f} GB/s) p90 {d2h[1]:7.1f}", flush=True)

fd = fast_driver()
flags = host_mapped_alloc(4096)
fin, fout = ctypes.c_int32.from_address(flags), ctypes.c_int32.from_address(flags + 64)
lat = []
for i in range(1, 201):
    buf = ctypes.create_string_buffer(pack_memops([("wait_geq", flags, i)]))
    fd.batch_memop(sp, 1, buf)
    copy_async(dev.data_ptr(), shm, 3 << 20, sp)
    buf2 = ctypes.create_string_buffer(pack_memops([("write", flags + 64, i)]))
    fd.batch_memop(sp, 1, buf2)
    time.sleep(0.0015)
    t0 = time.perf_counter()
    fin.value = i
    while fout.value != i:
        pass
    lat.append((time.perf_counter() - t0) * 1e6)
lat.sort()
print(f"memfd source: wait, then flag, 3 MiB landing copy: p50 {lat[100]:.1f} p90 {lat[180]:.1f} max {lat[-1]:.1f} us")
