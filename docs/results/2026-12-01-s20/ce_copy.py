"""Can a copy within one GPU run on a copy engine instead of SMs (session 20)? Out-of-place calls copy the rank's own
block within its GPU, which cudaMemcpyAsync does with a kernel (SMs). Test: a spinning kernel fills every SM for
about 20 ms on one stream; a 64 MiB same-GPU copy is enqueued on another stream right after; how long until the copy
is done? A copy on SMs waits for the spinner, one on a copy engine does not. Variants: cudaMemcpyAsync, and
cuMemcpyBatchAsync with CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE (and without). Also a device-to-host copy of the
same size as the copy-engine reference. Medians of 5, ms; the copied bytes are checked.

    python docs/results/2026-12-01-s20/ce_copy.py
"""

from __future__ import annotations

import statistics
import time

N = 64 << 20

SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"""


def main() -> int:
    import cupy as cp
    from cuda.bindings import driver as cu

    dev = cp.cuda.Device(0)
    dev.use()
    sms = dev.attributes["MultiProcessorCount"]
    spin = cp.RawKernel(SPIN, "spin")
    a = cp.random.randint(0, 255, N, dtype=cp.uint8)
    b = cp.zeros(N, cp.uint8)
    host = cp.cuda.alloc_pinned_memory(N)
    s_spin, s_copy = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    clock_khz = dev.attributes["ClockRate"]
    cycles = int(20e-3 * clock_khz * 1e3)  # ~20 ms at the base clock

    def batch(flags):
        def go():
            attr = cu.CUmemcpyAttributes()
            attr.srcAccessOrder = cu.CUmemcpySrcAccessOrder.CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
            attr.flags = flags
            loc = cu.CUmemLocation()
            loc.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            loc.id = 0
            attr.srcLocHint = loc
            attr.dstLocHint = loc
            res = cu.cuMemcpyBatchAsync([cu.CUdeviceptr(b.data.ptr)], [cu.CUdeviceptr(a.data.ptr)], [N], 1, [attr], [0],
                                        1, cu.CUstream(s_copy.ptr))
            err = res[0] if isinstance(res, tuple) else res  # CUDA 12.x also returns a failed index
            if int(err) != 0:
                raise RuntimeError(f"cuMemcpyBatchAsync: {err}")
        return go

    variants = {
        "cudaMemcpyAsync d2d": lambda: cp.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, N, 3, s_copy.ptr),
        "cuMemcpyBatchAsync d2d, default": batch(0),
        "cuMemcpyBatchAsync d2d, prefer overlap": batch(1),
        "cudaMemcpyAsync d2h (copy engine)": lambda: cp.cuda.runtime.memcpyAsync(host.ptr, a.data.ptr, N, 2,
                                                                                 s_copy.ptr),
    }
    for name, copy in variants.items():
        alone, beside, spin_ms = [], [], []
        try:
            for _ in range(5):
                b.fill(0)
                cp.cuda.Device().synchronize()
                t = time.perf_counter()
                copy()
                s_copy.synchronize()
                alone.append((time.perf_counter() - t) * 1e3)
                b.fill(0)
                cp.cuda.Device().synchronize()
                t = time.perf_counter()
                spin((sms * 4,), (1024,), (cp.int64(cycles),), stream=s_spin)
                time.sleep(1e-3)  # the spinner holds the SMs
                copy()
                s_copy.synchronize()
                beside.append((time.perf_counter() - t) * 1e3)
                s_spin.synchronize()
                spin_ms.append((time.perf_counter() - t) * 1e3)
            ok = bool((b == a).all()) if "d2h" not in name else True
            print(f"{name:>40}: alone {statistics.median(alone):.2f} ms, beside the spinner done at "
                  f"{statistics.median(beside):.2f} ms (spinner {statistics.median(spin_ms):.1f} ms), bytes "
                  f"{'right' if ok else 'WRONG'}", flush=True)
        except Exception as exc:  # an API this driver lacks: say so and go on
            print(f"{name:>40}: {type(exc).__name__}: {exc}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
