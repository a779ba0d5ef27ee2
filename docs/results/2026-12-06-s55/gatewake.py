"""How long a stream held by a host flag (cuStreamWaitValue32 on pinned, device-mapped memory, as HOCCL's landing
gates) takes to go on once the host writes the flag, with the GPU idle or busy with another process's kernels, under
MPS or time-sliced. Each of N rounds: the stream gets [wait flag_in >= i, (a 3 MiB copy host -> device, as a landing
copy), write flag_out = i]; the host sleeps 1.5 ms (the stream is then waiting), writes flag_in = i and spins until
it reads flag_out == i. Also with the flag written before the work is enqueued ("open": no wait on the GPU). Prints
p10/p50/p90 us.

    python3 gatewake.py ROLE [SECONDS]      ROLE: probe | load (matmuls on its own stream until SECONDS pass)
"""
import ctypes
import sys
import time

import torch

role = sys.argv[1]
if role == "load":
    secs = float(sys.argv[2]) if len(sys.argv) > 2 else 30
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    end = time.perf_counter() + secs
    n = 0
    while time.perf_counter() < end:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
        n += 20
    print(f"load: {n} matmuls in {secs:.0f} s", flush=True)
    sys.exit(0)

from hoccl_runtime._cuda import copy_async, fast_driver, host_mapped_alloc, pack_memops  # noqa: E402

torch.zeros(1, device="cuda")
fd = fast_driver()
flags = host_mapped_alloc(4096)
fin, fout = ctypes.c_int32.from_address(flags), ctypes.c_int32.from_address(flags + 64)
fin.value = fout.value = 0
src = host_mapped_alloc(3 << 20)
dst = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
s = torch.cuda.Stream()
sp = s.cuda_stream
N = int(sys.argv[2]) if len(sys.argv) > 2 else 300


def batch(ops):
    buf = ctypes.create_string_buffer(pack_memops(ops))
    fd.batch_memop(sp, len(ops), buf)


def rounds(copy: bool, open_first: bool) -> list[float]:
    out = []
    for _ in range(N):
        i = fin.value + 1
        if open_first:
            fin.value = i
        batch([("wait_geq", flags, i)])
        if copy:
            copy_async(dst.data_ptr(), src, 3 << 20, sp)
        batch([("write", flags + 64, i)])
        if not open_first:
            time.sleep(0.0015)
            t0 = time.perf_counter()
            fin.value = i
        else:
            t0 = time.perf_counter()
        while fout.value != i:
            pass
        out.append((time.perf_counter() - t0) * 1e6)
    return out


for copy in (False, True):
    for open_first in (True, False):
        v = sorted(rounds(copy, open_first))
        q = lambda p, v=v: v[int(p * (len(v) - 1))]  # noqa: E731
        print(f"{'copy 3 MiB' if copy else 'no copy':10s} {'flag first' if open_first else 'wait, then flag':16s} "
              f"p10 {q(.1):7.1f}  p50 {q(.5):7.1f}  p90 {q(.9):7.1f}  max {v[-1]:8.1f} us", flush=True)
