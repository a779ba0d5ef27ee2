"""CUDA faked in host memory, for running the GPU code paths' logic on a CPU (tests only).

"Device" pointers are host addresses. By default a stream runs everything at once, in the caller's
thread: copies are ``memmove``; a batch of stream memory operations writes its flags and *blocks* on its
waits (as a stream would, but holding up the caller instead of a queue), with a deadline; events are
always complete. ``install(monkeypatch, async_streams=True)`` gives every stream a thread of its own that
runs its work in order after the caller moved on, as a GPU does: events then complete when their stream
reaches them, and a stream that waits on an event or a flag holds up only itself. Enough of ``cupy`` and
``hoccl_runtime._cuda`` for the network communicator, the GPU node executor and the flag pool.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import queue
import struct
import sys
import threading
import time
import types

from hoccl_runtime import _cuda

_MEMOP = struct.Struct("<I4xQQI4xQ8x")
_buffers: dict[int, ctypes.Array] = {}
_lock = threading.RLock()  # re-entrant: a FlagPool collected (its __del__ frees) while this thread holds it
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
        _trace("copy", stream, dst)
        _issue(lambda: ctypes.memmove(dst, src, n), stream)

    def eventCreateWithFlags(self, flags):  # noqa: N802 - a fresh number per event, so waits name their event
        return next(_event_ids)

    def eventRecord(self, ev, stream):  # noqa: N802
        _trace("record", ev, stream)
        if _streams.on:
            with _lock:
                seq = _streams.recorded[ev] = _streams.recorded.get(ev, 0) + 1
            _issue(lambda: _streams.reached(ev, seq), stream)

    def eventQuery(self, ev):  # noqa: N802
        if _streams.on and _streams.done.get(ev, 0) < _streams.recorded.get(ev, 0):
            return 600  # cudaErrorNotReady
        return 0

    def eventDestroy(self, ev):  # noqa: N802
        pass

    def eventElapsedTime(self, start, end):  # noqa: N802 - a stream here runs at once: no time passes
        return 0.0

    def streamWaitEvent(self, stream, ev, flags):  # noqa: N802
        _trace("wait", stream, ev)
        if _streams.on:
            target = _streams.recorded.get(ev, 0)  # the record the event had when the wait was enqueued
            _issue(lambda: _until(lambda: _streams.done.get(ev, 0) >= target, f"event {ev}"), stream)

    def streamSynchronize(self, stream):  # noqa: N802
        _trace("synchronize", stream, 0)
        if _streams.on:
            _streams.worker(stream).drain()

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

    def hostUnregister(self, ptr):  # noqa: N802 - the memory is unmapped next: let no stream thread still read it
        if _streams.on:
            # this "process"'s streams only (and those of no known rank): another rank's are another process's,
            # which CUDA does not wait for; waiting here for them would tie the ranks where real processes are not
            process = getattr(_current, "process", None)
            mine = [w for w in list(_streams.workers.values()) if process is None or w.process in (process, None)]
            for worker in mine:
                with contextlib.suppress(TimeoutError):  # a wait that never comes ends by its own deadline (20 s)
                    worker.drain(timeout_s=25)

    def ipcGetMemHandle(self, ptr):  # noqa: N802 - the "handle" carries the address (one process)
        return struct.pack("<Q", ptr) + bytes(56)

    def ipcOpenMemHandle(self, handle):  # noqa: N802
        return struct.unpack_from("<Q", handle)[0]

    def ipcCloseMemHandle(self, ptr):  # noqa: N802
        pass

    def ipcGetEventHandle(self, ev):  # noqa: N802 - the "handle" carries the event's number (one process)
        return struct.pack("<Q", ev) + bytes(56)

    def ipcOpenEventHandle(self, handle):  # noqa: N802
        return struct.unpack_from("<Q", handle)[0]

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


trace: list | None = None  # set to [] to record (what, a, b, thread name) of copies, events, memops, synchronizes


def _trace(what: str, a: int, b: int) -> None:
    if trace is not None:
        with _lock:
            trace.append((what, a, b, threading.current_thread().name))


def _issue(step, stream=None) -> None:
    """Run a step now (or on its stream's thread, with async streams), or record it when this thread captures."""
    capture = getattr(_current, "capture", None)
    if capture is not None:
        capture.append(step)
    elif _streams.on and stream is not None:
        _streams.worker(stream).put(step)
    else:
        step()


def _until(ready, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"fake stream: {what} never came")
        time.sleep(1e-4)


class _Worker:
    """One stream: a thread running its steps in order."""

    def __init__(self, stream: int, process: object = None):
        self.process = process  # the rank (run_ranks' "process") whose thread first used the stream, else None
        self.queue: queue.Queue = queue.Queue()
        self.pending = 0
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._loop, name=f"fake-stream-{stream}", daemon=True)

    def start(self) -> None:
        """Start the stream's thread: never under the fake's lock, as starting a thread waits for it to run, and
        its first steps may collect garbage whose finalizers (a FlagPool's host_free) take that lock (a test hung
        so, 1 run in ~40: the starter held the lock, the new thread waited for it)."""
        self.thread.start()

    def put(self, step) -> None:
        with self.cond:
            self.pending += 1
        self.queue.put(step)

    failed: BaseException | None = None  # a step raised (a wait gave up): nothing after it runs, as on a GPU whose
    # stream never got past it, so no later copy moves stale bytes (the test fails on it: tests/conftest.py)

    def _loop(self) -> None:
        while True:
            step = self.queue.get()
            try:
                if self.failed is None:
                    step()
            except BaseException as exc:  # noqa: BLE001 - kept for the test to see
                self.failed = exc
                _streams.errors.append(exc)
            finally:
                with self.cond:
                    self.pending -= 1
                    self.cond.notify_all()

    def drain(self, timeout_s: float = 30.0) -> None:
        with self.cond:
            if not self.cond.wait_for(lambda: self.pending == 0, timeout_s):
                raise TimeoutError("fake stream: work still pending at synchronize")


class _Streams:
    def __init__(self):
        self.on = False
        self.workers: dict[int, _Worker] = {}
        self.recorded: dict[int, int] = {}
        self.done: dict[int, int] = {}
        self.errors: list[BaseException] = []
        self.hw_queues: int | None = None  # install(hw_queues=K): a process's streams share K threads
        self.slots: dict = {}

    def worker(self, stream: int) -> _Worker:
        # the streams the code makes (_Stream: 1001, ...) are unique; a raw handle a test passes (7) is each rank's
        # own, as in separate processes (run_ranks names the rank of its threads)
        process = getattr(_current, "process", None)
        if stream < 1000:
            stream = (process, stream)
        if self.hw_queues:  # as CUDA_DEVICE_MAX_CONNECTIONS: the n-th stream a process uses takes queue n mod K
            with _lock:
                seen = self.slots.setdefault(process, {})
                stream = (process, "hw", seen.setdefault(stream, len(seen)) % self.hw_queues)
        with _lock:
            w = self.workers.get(stream)
            fresh = w is None
            if fresh:
                w = self.workers[stream] = _Worker(stream, process)  # steps put before it starts wait in its queue
        if fresh:
            w.start()
        return w

    def reached(self, ev: int, seq: int) -> None:
        with _lock:
            self.done[ev] = max(self.done.get(ev, 0), seq)


_streams = _Streams()
installed: _Streams | None = None  # the streams of the last install()


_graphs: dict[int, list] = {}
launches: list[int] = []  # graph launches so far (tests look)
memops: list[str] = []  # every batch of stream memory operations: "captured" into a graph or "direct"


native_calls: list[str] = []  # the driver calls C made through FastDriver.entry_points: "copy" / "memops"


def native_call_builds() -> bool:
    """Whether the native call path (hoccl_runtime/net/kept.py) builds here (a C compiler): its tests skip where not."""
    from hoccl_runtime.errors import HocclError
    from hoccl_runtime.net import kept

    try:
        kept.library()
    except HocclError:
        return False
    return True


def fail_native_calls(*errors: int) -> None:
    """Tests: the next driver calls that C makes in this thread return these CUresults, one each, instead of running."""
    _current.native_errors = list(errors)


def _native(kind, run):
    """A driver call from C (hoccl_runtime/net/kept.py): the fake's own, or this thread's next fail_native_calls."""
    errors = getattr(_current, "native_errors", None)
    if errors:
        return errors.pop(0)
    try:
        run()
    except Exception:  # noqa: BLE001 - a C caller sees a CUresult, never a Python exception
        return 1  # CUDA_ERROR_INVALID_VALUE
    native_calls.append(kind)
    return 0


_COPY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_uint64)(
    lambda dst, src, n, stream: _native("copy", lambda: _cuda.cupy_runtime().memcpyAsync(dst, src, n, 0, stream)))
_BATCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint, ctypes.c_uint64, ctypes.c_uint)(
    lambda stream, count, params, flags: _native("memops", lambda: FastDriver().batch_memop(stream, count, params)))


class FastDriver:
    """cuStreamBatchMemOp, run at once: writes land, waits block (up to 20 s) until their value shows. The
    parameters are read when the batch is enqueued (or captured), as the driver reads them: the caller may
    rewrite its block afterwards (hoccl_runtime.net.template does). ``entry_points``: cuMemcpyAsync and
    cuStreamBatchMemOp_v2 as C function pointers, into the same fakes."""

    entry_points = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in (_COPY, _BATCH))

    def batch_memop(self, stream, count, params):
        address = params if isinstance(params, int) else ctypes.addressof(params)
        memops.append("captured" if getattr(_current, "capture", None) is not None else "direct")
        _trace("memops", stream, count)
        block = ctypes.string_at(address, 48 * count)
        _issue(lambda: self._run(block, count), stream)

    def _run(self, block, count):
        for i in range(count):
            op, flag, value, how, _ = _MEMOP.unpack_from(block, 48 * i)
            cell = ctypes.c_int32.from_address(flag)
            if op == _cuda.WRITE_VALUE_32:
                cell.value = value  # a 32-bit counter: c_int32 keeps its low 32 bits
                continue
            if how == _cuda.WAIT_GEQ:  # cyclic: (int32)(*flag - value) >= 0
                _until(lambda c=cell, v=value: ((c.value - v) & 0xFFFFFFFF) < 1 << 31, f"flag {flag:#x} >= {value}")
            else:
                _until(lambda c=cell, v=value: (c.value & 0xFFFFFFFF) == v, f"flag {flag:#x} == {value}")


def host_mapped_alloc(nbytes: int) -> int:
    buf = ctypes.create_string_buffer(nbytes)
    with _lock:
        _buffers[ctypes.addressof(buf)] = buf
    return ctypes.addressof(buf)


kept: list = []  # arrays handed out as device buffers (dev): alive until the test's streams drained (conftest)


def dev(a, device: int):
    """A DeviceBuffer over NumPy array ``a`` on fake GPU ``device``, ``a`` kept alive until the test ends and its
    fake streams drained: a rank's buffers die when its body returns, while copies enqueued on its streams (or a
    peer's) may still run; into freed memory they corrupted the heap (malloc abort, ~1 in 10 full runs)."""
    from hoccl_runtime.interop import DeviceBuffer

    kept.append(a)
    return DeviceBuffer(int(a.ctypes.data), a.nbytes, device)


_freed: list = []  # "freed" host memory stays alive: a fake stream thread still polling a flag reads no freed memory


def host_free(ptr: int) -> None:
    with _lock:
        buf = _buffers.pop(ptr, None)
        if buf is not None:
            _freed.append(buf)


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


def install(monkeypatch, *, async_streams: bool = False, hw_queues: int | None = None) -> None:
    """Replace CUDA for the code under test (cupy module, the driver helpers, peer access); ``async_streams``:
    streams that run on threads of their own (see the module docstring); ``hw_queues``: with them, a process's
    streams share that many threads, in the order it first uses them, as a GPU's streams share its
    CUDA_DEVICE_MAX_CONNECTIONS hardware queues (a wait on one holds the work queued behind it on the others)."""
    global _streams, installed
    monkeypatch.setattr(sys.modules[__name__], "_streams", _Streams())
    installed = _streams  # the test's streams, still there for tests/conftest.py once monkeypatch undid the above
    _streams.on = async_streams
    _streams.hw_queues = hw_queues
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


def drained(stream: int, timeout_s: float = 10) -> bool:
    """Whether the fake ``stream`` (async streams) gets past everything enqueued on it so far within ``timeout_s``:
    a marker is enqueued after it and waited for."""
    reached = threading.Event()
    _issue(reached.set, stream)
    return reached.wait(timeout_s)


def run_ranks(world: int, make, body, timeout_s: float = 120) -> dict:
    """Ranks as threads: ``make(rank)`` builds the communicator, ``body(comm, rank)`` uses it, and the
    communicator is closed after; returns {rank: body's result, or the exception it raised}."""
    from threaded import in_threads

    def rank(r):
        _current.process = r
        comm = make(r)
        try:
            return body(comm, r)
        finally:
            comm.close()

    return in_threads(world, rank, timeout_s)
