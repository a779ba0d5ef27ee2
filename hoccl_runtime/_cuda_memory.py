"""The CUDA door for device memory and CUDA IPC: each wrapper calls CuPy's runtime binding and raises
:class:`~hoccl_runtime.errors.CudaError` naming the CUDA call where CuPy's own error would escape the hierarchy
(pinned host memory and its registration: :mod:`hoccl_runtime._cuda`)."""

from __future__ import annotations

from ._cuda import runtime_call as _call

__all__ = ["malloc", "free", "ipc_get_mem_handle", "ipc_open_mem_handle", "ipc_close_mem_handle",
           "ipc_get_event_handle", "ipc_open_event_handle", "copy_peer_async"]


def malloc(nbytes: int) -> int:
    """``nbytes`` of device memory on the current device."""
    return int(_call("malloc", "cudaMalloc", nbytes))


def free(ptr: int) -> None:
    _call("free", "cudaFree", ptr)


def ipc_get_mem_handle(ptr: int) -> bytes:
    return bytes(_call("ipcGetMemHandle", "cudaIpcGetMemHandle", ptr))


def ipc_open_mem_handle(handle: bytes) -> int:
    """Another process's allocation, mapped here (its base address)."""
    return int(_call("ipcOpenMemHandle", "cudaIpcOpenMemHandle", handle))


def ipc_close_mem_handle(base: int) -> None:
    _call("ipcCloseMemHandle", "cudaIpcCloseMemHandle", base)


def ipc_get_event_handle(event: int) -> bytes:
    return bytes(_call("ipcGetEventHandle", "cudaIpcGetEventHandle", event))


def ipc_open_event_handle(handle: bytes) -> int:
    return int(_call("ipcOpenEventHandle", "cudaIpcOpenEventHandle", handle))


def copy_peer_async(dst: int, dst_device: int, src: int, src_device: int, nbytes: int, stream: int) -> None:
    _call("memcpyPeerAsync", f"cudaMemcpyPeerAsync of {nbytes} bytes (GPU {src_device} -> {dst_device})", dst,
          dst_device, src, src_device, nbytes, stream)
