"""CUDA faked in host memory, for running the GPU code paths' logic on a CPU (tests only).

"Device" pointers are host addresses. A stream runs everything at once, in the caller's thread:
copies are ``memmove``; a batch of stream memory operations writes its flags and *blocks* on its
waits (as a stream would, but holding up the caller instead of a queue), with a deadline. Events are
always complete. Enough of ``cupy`` and ``hoccl_runtime._cuda`` for the network communicator, the GPU
node executor and the flag pool.
"""

from __future__ import annotations

import ctypes
import itertools
import struct
import sys
import threading
import time
import types

from hoccl_runtime import _cuda

_MEMOP = struct.Struct("<I4xQQI4xQ8x")
_buffers: dict[int, ctypes.Array] = {}
_lock = threading.Lock()
_current = threading.local()
_event_ids = itertools.count(1)


class Runtime:
    """cupy.cuda.runtime's calls the code uses."""

    def getDeviceCount(self):  # noqa: N802 - CuPy's names
        return 8

    def getDevice(self):  # noqa: N802
        return getattr(_current, "device", 0)

    def setDevice(self, d):  # noqa: N802
        _current.device = d

    def memcpyAsync(self, dst, src, n, kind, stream):  # noqa: N802
        _issue(lambda: ctypes.memmove(dst, src, n))

    def eventCreateWithFlags(self, flags):  # noqa: N802 - a fresh number per event, so waits name their event
        return next(_event_ids)

    def eventRecord(self, ev, stream):  # noqa: N802
        pass

    def eventQuery(self, ev):  # noqa: N802
        return 0

    def eventDestroy(self, ev):  # noqa: N802
        pass

    def eventElapsedTime(self, start, end):  # noqa: N802 - a stream here runs at once: no time passes
        return 0.0

    def streamWaitEvent(self, stream, ev, flags):  # noqa: N802
        pass

    def streamSynchronize(self, stream):  # noqa: N802
        pass

    def streamIsCapturing(self, stream):  # noqa: N802
        return int(getattr(_current, "capture", None) is not None and stream == _current.capture_stream)

    # a capture records this thread's work (any stream: thread-local capture mode) until it ends
    def streamBeginCapture(self, stream, mode):  # noqa: N802
        if getattr(_current, "capture", None) is not None:
            raise RuntimeError("fake: capture already in progress in this thread")
        _current.capture, _current.capture_stream = [], stream

    def streamEndCapture(self, stream):  # noqa: N802
        work, _current.capture = _current.capture, None
        _graphs[id(work)] = work
        return id(work)

    def graphInstantiate(self, graph):  # noqa: N802
        return graph

    def graphDestroy(self, graph):  # noqa: N802
        pass

    def graphExecDestroy(self, exe):  # noqa: N802
        _graphs.pop(exe)

    def graphLaunch(self, exe, stream):  # noqa: N802
        launches.append(exe)
        for step in _graphs[exe]:
            _issue(step)

    def deviceCanAccessPeer(self, a, b):  # noqa: N802
        return True

    def deviceEnablePeerAccess(self, peer):  # noqa: N802
        pass

    def hostRegister(self, ptr, size, flags):  # noqa: N802
        pass

    def hostUnregister(self, ptr):  # noqa: N802
        pass

    def ipcGetMemHandle(self, ptr):  # noqa: N802 - the "handle" carries the address (one process)
        return struct.pack("<Q", ptr) + bytes(56)

    def ipcOpenMemHandle(self, handle):  # noqa: N802
        return struct.unpack_from("<Q", handle)[0]

    def ipcCloseMemHandle(self, ptr):  # noqa: N802
        pass

    def malloc(self, nbytes):
        return host_mapped_alloc(nbytes)

    def free(self, ptr):
        host_free(ptr)


class Driver:
    """The cuda.bindings calls the communicator makes: (error, values...) tuples."""

    def cuMemHostGetDevicePointer(self, ptr, flags):  # noqa: N802 - mapped host memory: the same address
        return 0, ptr

    def cuMemGetAddressRange(self, ptr):  # noqa: N802 - every buffer its own allocation
        return 0, ptr, 0


def _issue(step) -> None:
    """Run a step now, or record it when this thread captures."""
    capture = getattr(_current, "capture", None)
    if capture is None:
        step()
    else:
        capture.append(step)


_graphs: dict[int, list] = {}
launches: list[int] = []  # graph launches so far (tests look)
memops: list[str] = []  # every batch of stream memory operations: "captured" into a graph or "direct"


class FastDriver:
    """cuStreamBatchMemOp, run at once: writes land, waits block (up to 20 s) until their value shows."""

    def batch_memop(self, stream, count, params):
        address = params if isinstance(params, int) else ctypes.addressof(params)
        memops.append("captured" if getattr(_current, "capture", None) is not None else "direct")
        _issue(lambda keep=params: self._run(address, count))  # the block lives as long as a graph

    def _run(self, address, count):
        for i in range(count):
            op, flag, value, _, _ = _MEMOP.unpack(ctypes.string_at(address + 48 * i, 48))
            cell = ctypes.c_int32.from_address(flag)
            if op == _cuda.WRITE_VALUE_32:
                cell.value = value
                continue
            deadline = time.monotonic() + 20
            while cell.value != value:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"fake stream: flag {flag:#x} never became {value}")
                time.sleep(1e-4)


def host_mapped_alloc(nbytes: int) -> int:
    buf = ctypes.create_string_buffer(nbytes)
    with _lock:
        _buffers[ctypes.addressof(buf)] = buf
    return ctypes.addressof(buf)


def host_free(ptr: int) -> None:
    with _lock:
        _buffers.pop(ptr, None)


class _Device:
    def __init__(self, d):
        self.id = d

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def use(self):
        pass


class _Stream:
    _next = 1000

    def __init__(self, non_blocking=False):
        _Stream._next += 1
        self.ptr = _Stream._next

    def synchronize(self):
        pass


dmabuf_exports: list[tuple[int, int, int]] = []  # (address, bytes, device) of every dma-buf exported


def dmabuf_fd(address: int, nbytes: int, device: int) -> tuple[int, int]:
    """A real file descriptor (of /dev/null) standing for the dma-buf; offset 0."""
    import os

    dmabuf_exports.append((address, nbytes, device))
    return os.open(os.devnull, os.O_RDONLY), 0


def install(monkeypatch) -> None:
    """Replace CUDA for the code under test (cupy module, the driver helpers, peer access)."""
    rt = Runtime()
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(Device=_Device, Stream=_Stream, runtime=rt)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(_cuda, "cupy_runtime", lambda: rt)
    monkeypatch.setattr(_cuda, "fast_driver", lambda: FastDriver())
    monkeypatch.setattr(_cuda, "driver", lambda: Driver())
    monkeypatch.setattr(_cuda, "host_mapped_alloc", host_mapped_alloc)
    monkeypatch.setattr(_cuda, "host_free", host_free)
    monkeypatch.setattr(_cuda, "enable_peer_access", lambda a, b: None)
    monkeypatch.setattr(_cuda, "dmabuf_fd", dmabuf_fd)
    dmabuf_exports.clear()


class Store:
    """torch.distributed's store, in one process: set, and get that waits for the key."""

    def __init__(self):
        self._data: dict[str, bytes] = {}
        self._cond = threading.Condition()

    def set(self, key, value):
        with self._cond:
            self._data[key] = value.encode() if isinstance(value, str) else value
            self._cond.notify_all()

    def add(self, key, n):
        with self._cond:
            value = int(self._data.get(key, b"0")) + n
            self._data[key] = str(value).encode()
            self._cond.notify_all()
            return value

    def check(self, keys):
        with self._cond:
            return all(k in self._data for k in keys)

    def get(self, key):
        with self._cond:
            if not self._cond.wait_for(lambda: key in self._data, timeout=30):
                raise TimeoutError(key)
            return self._data[key]


def run_ranks(world: int, make, body, timeout_s: float = 120) -> dict:
    """Ranks as threads: ``make(rank)`` builds the communicator, ``body(comm, rank)`` uses it, and the
    communicator is closed after; returns {rank: body's result, or the exception it raised}."""
    from threaded import in_threads

    def rank(r):
        comm = make(r)
        try:
            return body(comm, r)
        finally:
            comm.close()

    return in_threads(world, rank, timeout_s)
