"""The only module that touches CUDA. Imported lazily: ``import hoccl_runtime`` needs no GPU.

Every call goes through :func:`check`, which raises :class:`CudaError` naming the call and the error.
Copies use CuPy's runtime bindings (fast Cython calls). Stream memory operations, which CuPy does not
expose, are on the hot path of every call: they go to ``libcuda`` through ctypes with parameter
blocks packed once (:class:`FastDriver`: 2.5-3.2 us for a batch of two on the H200 host, against
4.0-4.3 us through ``cuda.bindings`` objects), and fall back to ``cuda.bindings.driver`` where that is
not possible.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Callable
from typing import Any

from .errors import BufferError, CudaError, HocclError

__all__ = ["driver", "cupy_runtime", "check", "device_count", "set_device", "get_device", "can_access_peer", "runtime_call",
           "host_register", "host_unregister", "device_name", "on_device", "enable_peer_access", "ipc_export",
           "host_mapped_alloc", "host_free", "dmabuf_fd", "MEMCPY_DEFAULT",
           "copy_async", "cuda_error", "fast_driver", "FastDriver", "pack_memops",
           "MEMOP_BYTES"]

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


@functools.lru_cache(maxsize=1)  # once it answered (an error is raised again at the next call, not cached)
def cupy_runtime() -> Any:
    """``cupy.cuda.runtime``, once it has answered one call; else a CudaError in one line saying what is needed
    (CuPy missing, or built for another CUDA than this driver runs, or no GPU)."""
    from .errors import GPU_NEEDS

    try:
        import cupy
    except ImportError:
        raise CudaError(f"CuPy is missing; pip install 'hoccl[gpu]' (cupy-cuda13x): HOCCL needs {GPU_NEEDS}") from None
    except Exception as exc:  # noqa: BLE001 - a CuPy whose CUDA libraries fail to load: one line, not a traceback
        raise CudaError(f"CuPy does not load ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}): HOCCL "
                        f"needs {GPU_NEEDS}") from None
    rt = cupy.cuda.runtime
    try:
        rt.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - CUDARuntimeError: no driver, a driver older than CuPy's CUDA, no GPU
        built = getattr(cupy, "__version__", "?")
        raise CudaError(f"CuPy {built} cannot reach a GPU ({' '.join(str(exc).split())[:200]}); a CuPy built for "
                        f"another CUDA than this driver runs fails so too: HOCCL needs {GPU_NEEDS}") from None
    return rt


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


def cuda_error(exc: BaseException, what: str) -> BaseException:
    """``exc`` as a :class:`CudaError` naming ``what`` when it is CuPy's or cuda-bindings' own CUDA error (which
    would otherwise escape the hierarchy); anything else unchanged."""
    if isinstance(exc, CudaError) or type(exc).__name__ not in ("CUDARuntimeError", "CUDADriverError", "CUDARTError"):
        return exc
    return CudaError(f"{what}: a CUDA call failed: {exc}")


class cuda_errors:  # noqa: N801 - used like a function; a class, not a generator: it sits on every network call
    """``with cuda_errors(what):`` inside, CuPy's and cuda-bindings' own CUDA errors leave as a :class:`CudaError`
    naming ``what()`` (worked out only then: the calls this wraps are hot; :func:`cuda_error`); every other exception
    leaves unchanged."""

    __slots__ = ("what",)

    def __init__(self, what: Callable[[], str]) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        err = cuda_error(exc, self.what())
        if err is exc:
            return False
        raise err from exc


def p2p_native_atomics(a: int, b: int) -> bool:
    """cudaDevP2PAttrNativeAtomicSupported between two GPUs: NVLink has native atomics, PCIe does not."""
    try:
        from cuda.bindings import runtime as cudart

        err, value = cudart.cudaDeviceGetP2PAttribute(
            cudart.cudaDeviceP2PAttr.cudaDevP2PAttrNativeAtomicSupported, a, b)
    except Exception:  # noqa: BLE001 - no cuda-bindings: the link's kind is unknown, taken as NVLink (the presets)
        return True
    return int(err) == 0 and bool(value)


def copy_async(dst: int, src: int, nbytes: int, stream: int) -> None:
    """``cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream)`` on the current device; a failure raises
    :class:`CudaError` naming the call."""
    try:
        cupy_runtime().memcpyAsync(dst, src, nbytes, MEMCPY_DEFAULT, stream)
    except Exception as exc:  # noqa: BLE001 - cupy's CUDARuntimeError, into the hierarchy
        raise CudaError(f"cudaMemcpyAsync of {nbytes} bytes {src:#x} -> {dst:#x} failed: {exc}") from None


def runtime_call(name: str, cuda_name: str, *args: Any) -> Any:
    """``cupy.cuda.runtime.<name>(*args)``, CuPy's own CUDA error leaving as a :class:`CudaError` naming
    ``cuda_name`` (the door's wrappers, here and in ``_cuda_streams`` / ``_cuda_memory``, are made of it)."""
    try:
        return getattr(cupy_runtime(), name)(*args)
    except Exception as exc:
        err = cuda_error(exc, cuda_name)
        if err is exc:
            raise
        raise err from None


def host_register(ptr: int, nbytes: int) -> int:
    """Register host memory with CUDA (portable, mapped); its device pointer."""
    runtime_call("hostRegister", f"cudaHostRegister of {nbytes} bytes at {ptr:#x}", ptr, nbytes, 1 | 2)
    return int(check("cuMemHostGetDevicePointer", driver().cuMemHostGetDevicePointer(ptr, 0)))


def host_unregister(ptr: int) -> None:
    runtime_call("hostUnregister", "cudaHostUnregister", ptr)


def device_name(device: int) -> str:
    name = runtime_call("getDeviceProperties", f"cudaGetDeviceProperties({device})", device)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def set_device(device: int) -> None:
    runtime_call("setDevice", f"cudaSetDevice({device})", device)


def get_device() -> int:
    return int(runtime_call("getDevice", "cudaGetDevice"))


def can_access_peer(device: int, peer: int) -> bool:
    return bool(runtime_call("deviceCanAccessPeer", f"cudaDeviceCanAccessPeer({device}, {peer})", device, peer))


def device_count() -> int:
    try:
        return int(cupy_runtime().getDeviceCount())
    except CudaError:
        return 0
    except Exception:  # noqa: BLE001 - no driver / no device
        return 0


class on_device:  # noqa: N801 - used like a function, as torch.cuda.device
    """``with on_device(d):`` the runtime's current device is ``d`` inside and the caller's again after,
    whatever happens inside (as ``torch.cuda.device`` and ``cupy.cuda.Device``). A class, not a generator:
    some of its users run on every call of the network communicators."""

    __slots__ = ("device", "prev")

    def __init__(self, device: int) -> None:
        self.device, self.prev = device, None

    def __enter__(self) -> Any:
        rt = cupy_runtime()
        self.prev = rt.getDevice()
        if self.prev != self.device:  # the usual case on a network call's path: already there, two calls fewer
            rt.setDevice(self.device)
        return rt

    def __exit__(self, *exc: object) -> None:
        rt = cupy_runtime()
        if self.prev != self.device or rt.getDevice() != self.prev:  # (getDevice: a thread-local read, no switch)
            rt.setDevice(self.prev)


def enable_peer_access(src: int, dst: int) -> None:
    """Let ``src`` address ``dst``'s memory (idempotent)."""
    rt = cupy_runtime()
    if src == dst:
        return
    if not rt.deviceCanAccessPeer(src, dst):
        raise CudaError(f"GPU {src} cannot access GPU {dst} directly (no P2P); HOCCL's intra-node path needs "
                        "NVLink or PCIe peer access between GPUs of a node")
    with on_device(src):
        try:
            rt.deviceEnablePeerAccess(dst)
        except Exception as exc:  # noqa: BLE001 - "already enabled" is fine
            if "PeerAccessAlreadyEnabled" not in str(exc) and "already" not in str(exc).lower():
                raise CudaError(f"cudaDeviceEnablePeerAccess({src} -> {dst}) failed: {exc}") from None


def ipc_export(ptr: int, what: str = "buffer") -> tuple[bytes, int]:
    """(CUDA IPC handle of the allocation that holds device address ``ptr``, ``ptr``'s offset in it): what
    another process needs to map it. Memory that is not IPC-capable raises BufferError naming ``what``.
    (Asked of the driver on every call: ``cudaIpcGetMemHandle`` + ``cuMemGetAddressRange`` measured 1.4-3.0 us
    together on the H200 host, less than the ``cuPointerGetAttributes`` (2.8-3.9 us) a cache keyed by
    allocation id needed.)"""
    try:
        handle = bytes(cupy_runtime().ipcGetMemHandle(ptr))
    except Exception as exc:  # noqa: BLE001
        raise BufferError(f"{what} at {ptr:#x} cannot be shared with other processes ({exc}); memory from "
                          "cudaMallocAsync pools or expandable segments is not IPC-capable: allocate with "
                          "cudaMalloc (torch's default allocator, CuPy's default pool)") from None
    base, _ = check("cuMemGetAddressRange", driver().cuMemGetAddressRange(ptr))
    return handle, ptr - int(base)


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


DMA_BUF_SUPPORTED = 124          # CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
RANGE_HANDLE_DMA_BUF_FD = 1      # CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
DMA_BUF_PAGE = 4096              # the range given to the driver: host pages


def dmabuf_fd(address: int, nbytes: int, device: int) -> tuple[int, int]:
    """A dma-buf file descriptor for the GPU memory ``[address, address + nbytes)`` of ``device`` (what an
    RDMA NIC registers for GPUDirect RDMA: ``ibv_reg_dmabuf_mr``), and ``address``'s offset in it. The
    exported range is the enclosing whole host pages, which must lie inside the allocation. The caller
    closes the fd (after the memory region that uses it)."""
    lib = ctypes.CDLL("libcuda.so.1")
    rt = cupy_runtime()
    caller_device = rt.getDevice()
    try:
        rt.setDevice(device)
        rt.free(0)  # makes the device's primary context current for the driver calls below
        value = ctypes.c_int(0)
        err = lib.cuDeviceGetAttribute(ctypes.byref(value), DMA_BUF_SUPPORTED, ctypes.c_int(device))
        if err or not value.value:
            raise CudaError(f"GPU {device} cannot export dma-bufs (cuDeviceGetAttribute DMA_BUF_SUPPORTED: error "
                            f"{err}, value {value.value}); it needs the open GPU kernel modules, CUDA 11.7+ and a "
                            "kernel with dma-buf")
        base, size = check("cuMemGetAddressRange", driver().cuMemGetAddressRange(address))
        base, size = int(base), int(size)
        start = address - address % DMA_BUF_PAGE
        end = -(-(address + nbytes) // DMA_BUF_PAGE) * DMA_BUF_PAGE
        if start < base or end > base + size:
            raise CudaError(f"GPU memory {address:#x}+{nbytes} (as whole host pages {start:#x}..{end:#x}) is not "
                            f"inside its allocation {base:#x}+{size}; register whole 4 KiB pages of one allocation")
        fd = ctypes.c_int(-1)
        lib.cuMemGetHandleForAddressRange.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t,
                                                      ctypes.c_int, ctypes.c_ulonglong]
        err = lib.cuMemGetHandleForAddressRange(ctypes.byref(fd), start, end - start, RANGE_HANDLE_DMA_BUF_FD, 0)
        if err or fd.value < 0:
            raise CudaError(f"cuMemGetHandleForAddressRange (dma-buf) failed with CUresult {err}")
        return fd.value, address - start
    finally:
        rt.setDevice(caller_device)


def host_free(ptr: int) -> None:
    cu = driver()
    check("cuMemFreeHost", cu.cuMemFreeHost(ptr))


# --- stream memory operations and pointer attributes through ctypes -------------------------------------
# CUstreamBatchMemOpParams (cuda.h, CUDA 12/13): a 48-byte union; the wait and write members share the
# layout {operation u32, pad, address u64, value u64 (union with value64), flags u32, pad, alias u64}.
MEMOP_BYTES = 48
_MEMOP = struct.Struct("<I4xQQI4xQ8x")
assert _MEMOP.size == MEMOP_BYTES
WAIT_VALUE_32, WRITE_VALUE_32 = 1, 2          # CUstreamBatchMemOpType
WAIT_EQ, WRITE_DEFAULT = 1, 0                 # CUstreamWaitValue_flags / CUstreamWriteValue_flags
WAIT_GEQ = 0                                  # (int32)(*address - value) >= 0: cyclic, ignores wraparound


def pack_memops(ops: list[tuple[str, int, int]]) -> bytes:
    """The parameter block of ``cuStreamBatchMemOp`` for [("wait_eq" | "wait_geq" | "write", address, value)]."""
    out = bytearray(MEMOP_BYTES * len(ops))
    for i, (kind, address, value) in enumerate(ops):
        if kind in ("wait_eq", "wait_geq"):
            _MEMOP.pack_into(out, i * MEMOP_BYTES, WAIT_VALUE_32, address, value & 0xFFFFFFFF,
                             WAIT_EQ if kind == "wait_eq" else WAIT_GEQ, 0)
        elif kind == "write":
            _MEMOP.pack_into(out, i * MEMOP_BYTES, WRITE_VALUE_32, address, value & 0xFFFFFFFF, WRITE_DEFAULT, 0)
        else:
            raise HocclError(f"unknown stream memory operation {kind!r}: give 'wait_eq', 'wait_geq' or 'write'")
    return bytes(out)


class FastDriver:
    """``cuStreamBatchMemOp`` called through ctypes (see the module docstring)."""

    def __init__(self, lib: ctypes.CDLL, cu: Any):
        self._batch = lib.cuStreamBatchMemOp_v2  # the CUDA 12+ entry point that cuda.h maps the name to
        self._batch.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_uint]
        self._batch.restype = ctypes.c_int
        self._cu = cu
        # (cuMemcpyAsync, cuStreamBatchMemOp_v2) as addresses, for C that makes a launch list's calls itself
        # (hoccl_runtime/net/kept.py): a copy between any two addresses of the unified space, on an explicit stream
        self.entry_points = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (lib.cuMemcpyAsync, self._batch))

    def batch_memop(self, stream: int, count: int, params: Any) -> None:
        """Enqueue ``count`` packed operations (the ctypes buffer holding :func:`pack_memops`'s bytes) on
        ``stream``."""
        err = self._batch(stream, count, params, 0)
        if err:
            raise CudaError(f"cuStreamBatchMemOp failed: {_driver_error_text(self._cu, self._cu.CUresult(err))}")


@functools.lru_cache(maxsize=1)
def fast_driver() -> FastDriver | None:
    """The ctypes driver path, or None where libcuda or its symbols, or the enum values, differ from ours."""
    cu = driver()
    t, w, v = cu.CUstreamBatchMemOpType, cu.CUstreamWaitValue_flags, cu.CUstreamWriteValue_flags
    if (int(t.CU_STREAM_MEM_OP_WAIT_VALUE_32), int(t.CU_STREAM_MEM_OP_WRITE_VALUE_32),
            int(w.CU_STREAM_WAIT_VALUE_EQ), int(w.CU_STREAM_WAIT_VALUE_GEQ), int(v.CU_STREAM_WRITE_VALUE_DEFAULT)) != \
            (WAIT_VALUE_32, WRITE_VALUE_32, WAIT_EQ, WAIT_GEQ, WRITE_DEFAULT):
        return None
    try:
        return FastDriver(ctypes.CDLL("libcuda.so.1"), cu)
    except (OSError, AttributeError):
        return None
