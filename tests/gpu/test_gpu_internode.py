"""The inter-node path on GPUs: nodes as processes joined by TCP on the 2-GPU machine (skipped elsewhere)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multi_gpu(2)
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "bench_internode.py"


def test_two_nodes_of_one_and_of_two_gpus_over_tcp():
    out = subprocess.run([sys.executable, str(SCRIPT), "--check-only"], capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "INTERNODE ALL OK" in text, text[-4000:]
    for name in ("allgather", "alltoall", "alltoallv", "sendrecv"):
        assert f"2 nodes x 1 GPUs {name}: OK" in text and f"2 nodes x 2 GPUs {name}: OK" in text


@pytest.mark.gpu
def test_gpu_memory_exports_as_a_dmabuf():
    """The CUDA half of GPUDirect RDMA over dma-buf, on the real driver (no NIC needed): a staging ring's
    GPU memory is exported as a dma-buf fd that the kernel knows as a dma-buf; edges that are not whole
    pages of the allocation are refused. Skipped where the GPU cannot export dma-bufs."""
    import os

    import cupy as cp

    from hoccl_runtime import _cuda
    from hoccl_runtime.errors import CudaError

    ptr = int(cp.cuda.runtime.malloc(4 << 20))
    try:
        try:
            fd, offset = _cuda.dmabuf_fd(ptr + 8192, 1 << 20, 0)
        except CudaError as exc:
            if "cannot export dma-bufs" in str(exc):
                pytest.skip(str(exc))
            raise
        try:
            assert offset == 0
            assert "dmabuf" in os.readlink(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        fd, offset = _cuda.dmabuf_fd(ptr + 100, 5000, 0)  # inside: whole pages around it, the offset in them
        os.close(fd)
        assert offset == 100
        with pytest.raises(CudaError, match="not inside its allocation"):
            _cuda.dmabuf_fd(ptr + (4 << 20) - 100, 200, 0)  # runs past the allocation's end
    finally:
        cp.cuda.runtime.free(ptr)
