"""Does a call need SMs? A profiler trace cannot say.

The CUDA driver moves a same-GPU copy (``cudaMemcpyAsync`` device to device on one GPU, also through
``cuMemcpyBatchAsync`` with or without CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE, and as a graph's
memcpy node) with a kernel of its own, and CUPTI traces list it as a memcpy: measured on 2x H200, driver
580.159.04 (CUDA 13.0), 2026-11-30, with ``examples/sm_free_copies.py``. Copies to a peer GPU run on copy
engines. So the probe here holds every SM of the GPU with a spinner kernel (two blocks of 1024 threads per
SM, each spinning on ``%globaltimer`` for ``hold_ms``) and issues the call right after it on the call's
own stream: the call's work ends before the spinner only if none of it needed an SM.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hoccl_runtime.errors import HocclError

__all__ = ["SmProbe", "SPIN_SOURCE"]

SPIN_SOURCE = r"""
extern "C" __global__ void hoccl_spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""


class SmProbe:
    """``probe.run(issue, stream)`` -> (ms until the work ``issue()`` enqueued on ``stream`` ended, ms the
    spinner held the SMs), both from the spinner's start; ``probe.sm_free(issue, stream)`` -> whether the
    work ended well before the spinner (it needed no SM). Needs CuPy with NVRTC (a kernel is compiled)."""

    def __init__(self, device: int, hold_ms: float = 100.0):
        from hoccl_runtime._cuda import cupy_runtime

        rt = cupy_runtime()  # CudaError naming the extra when CuPy is missing
        if not 0 <= device < rt.getDeviceCount():
            raise HocclError(f"SmProbe(device={device}): this process sees {rt.getDeviceCount()} GPU(s)")
        if not hold_ms > 0:
            raise HocclError(f"SmProbe(hold_ms={hold_ms!r}): give a positive time in ms (the spinner's length)")
        import cupy

        self.device, self.hold_ms = device, hold_ms
        with cupy.cuda.Device(device):
            self._kernel = cupy.RawKernel(SPIN_SOURCE, "hoccl_spin")
            self._sms = cupy.cuda.runtime.getDeviceProperties(device)["multiProcessorCount"]
            self._stream = cupy.cuda.Stream(non_blocking=True)

    def run(self, issue: Callable[[], Any], stream: int) -> tuple[float, float]:
        import cupy

        rt = cupy.cuda.runtime
        with cupy.cuda.Device(self.device):
            start, held = cupy.cuda.Event(), cupy.cuda.Event()
            done = rt.eventCreate()
            try:
                start.record(self._stream)
                self._kernel((2 * self._sms,), (1024,), (cupy.uint64(int(self.hold_ms * 1e6)),), stream=self._stream)
                held.record(self._stream)
                time.sleep(0.005)  # the spinner's blocks hold every SM by now
                issue()
                rt.eventRecord(done, stream)
                rt.eventSynchronize(done)
                held.synchronize()
                done_ms = rt.eventElapsedTime(start.ptr, done)
            finally:
                rt.eventDestroy(done)
            return done_ms, cupy.cuda.get_elapsed_time(start, held)

    def sm_free(self, issue: Callable[[], Any], stream: int) -> bool:
        return self.free(*self.run(issue, stream))

    @staticmethod
    def free(done_ms: float, held_ms: float) -> bool:
        """The verdict on one :meth:`run`: the work ended well before the spinner (in its first 90%)."""
        return done_ms < 0.9 * held_ms
