"""The only module that touches CUDA. Imported lazily: ``import hoccl_runtime`` needs no GPU.

Every call goes through :func:`check`, which raises :class:`CudaError` naming the call and the error.
Copies use CuPy's runtime bindings (fast Cython calls); stream memory operations use
``cuda.bindings.driver`` (CuPy does not expose them).
"""

from __future__ import annotations

import functools
from typing import Any

from .errors import CudaError

__all__ = ["driver", "cupy_runtime", "check", "device_count", "enable_peer_access", "host_mapped_alloc",
           "host_free", "MEMCPY_DEFAULT"]

MEMCPY_DEFAULT = 4  # cudaMemcpyDefault: direction inferred from unified addresses


@functools.lru_cache(maxsize=1)
def driver() -> Any:
    try:
        from cuda.bindings import driver as cu
    except ImportError:
        raise CudaError("the CUDA driver bindings are missing; pip install 'hoccl[gpu]' (cuda-bindings)") from None
    (err,) = cu.cuInit(0)
    if int(err) != 0:
        raise CudaError(f"cuInit failed: {_driver_error_text(cu, err)}; is there an NVIDIA GPU and driver here?")
    return cu


@functools.lru_cache(maxsize=1)
def cupy_runtime() -> Any:
    try:
        import cupy
    except ImportError:
        raise CudaError("CuPy is missing; pip install 'hoccl[gpu]' (cupy-cuda13x)") from None
    return cupy.cuda.runtime


def _driver_error_text(cu: Any, err: Any) -> str:
    try:
        _, name = cu.cuGetErrorName(err)
        _, text = cu.cuGetErrorString(err)
        return f"{name.decode()} ({text.decode()})"
    except Exception:  # noqa: BLE001 - best effort text for an error we are already raising
        return str(err)


def check(call: str, result: Any) -> Any:
    """Unpack a cuda.bindings result tuple ``(err, *values)``, raising CudaError on failure."""
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    if int(err) != 0:
        raise CudaError(f"{call} failed: {_driver_error_text(driver(), err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def device_count() -> int:
    try:
        return int(cupy_runtime().getDeviceCount())
    except CudaError:
        return 0
    except Exception:  # noqa: BLE001 - no driver / no device
        return 0


def enable_peer_access(src: int, dst: int) -> None:
    """Let ``src`` address ``dst``'s memory (idempotent)."""
    rt = cupy_runtime()
    if src == dst:
        return
    if not rt.deviceCanAccessPeer(src, dst):
        raise CudaError(f"GPU {src} cannot access GPU {dst} directly (no P2P); HOCCL's intra-node path needs "
                        "NVLink or PCIe peer access between GPUs of a node")
    prev = rt.getDevice()
    try:
        rt.setDevice(src)
        try:
            rt.deviceEnablePeerAccess(dst)
        except Exception as exc:  # noqa: BLE001 - "already enabled" is fine
            if "PeerAccessAlreadyEnabled" not in str(exc) and "already" not in str(exc).lower():
                raise CudaError(f"cudaDeviceEnablePeerAccess({src} -> {dst}) failed: {exc}") from None
    finally:
        rt.setDevice(prev)


def host_mapped_alloc(nbytes: int) -> int:
    """Pinned host memory mapped into every GPU's address space (portable + device-mapped).

    Returns the pointer, which under unified addressing is also the device address."""
    cu = driver()
    flags = cu.CU_MEMHOSTALLOC_PORTABLE | cu.CU_MEMHOSTALLOC_DEVICEMAP
    rt = cupy_runtime()
    caller_device = rt.getDevice()
    try:
        rt.free(0)  # the classic idiom: makes the current device's primary context current
        ptr = check("cuMemHostAlloc", cu.cuMemHostAlloc(nbytes, flags))
    finally:
        rt.setDevice(caller_device)
    return int(ptr)


def host_free(ptr: int) -> None:
    cu = driver()
    check("cuMemFreeHost", cu.cuMemFreeHost(ptr))
