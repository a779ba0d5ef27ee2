"""Buffers and streams from CuPy, torch or anything speaking the CUDA array / stream protocols.

HOCCL moves bytes: a buffer is (device pointer, byte size, device), of any dtype (bf16 included).
Streams are explicit: a CuPy or torch stream, an object with ``__cuda_stream__``, a raw handle, or
``None`` for the legacy default stream of the buffer's device.
"""

from __future__ import annotations

import operator
from typing import Any

from .errors import BufferError, CollectiveError, StreamError

__all__ = ["DeviceBuffer", "as_buffer", "as_rank", "as_stream", "window_buffer"]


class DeviceBuffer:
    """(device pointer, byte size, GPU): a value, to be treated as immutable (compared and hashed by its three
    fields). A class with slots rather than a frozen dataclass: two are made per call on the hot path, at
    0.20 us each against 0.54 on the CPU VM (a NamedTuple: 0.30, and slower to read fields from)."""

    __slots__ = ("ptr", "nbytes", "device")

    def __init__(self, ptr: int, nbytes: int, device: int) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device

    def __repr__(self) -> str:
        return f"DeviceBuffer(ptr={self.ptr:#x}, nbytes={self.nbytes}, device={self.device})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DeviceBuffer):
            return NotImplemented
        return self.ptr == other.ptr and self.nbytes == other.nbytes and self.device == other.device

    def __hash__(self) -> int:
        return hash((self.ptr, self.nbytes, self.device))

    def slice(self, offset: int, nbytes: int) -> DeviceBuffer:
        """The ``nbytes`` bytes from ``offset`` on (e.g. an in-place input inside its output)."""
        return DeviceBuffer(self.ptr + offset, nbytes, self.device)


def _torch_buffer(x: Any, what: str) -> DeviceBuffer:
    # as few calls into torch as will do: this runs for two tensors per call (examples/profile_host.py timed
    # 2.0 us per tensor with is_cuda as a fifth call on one H200 host, 1.1 us with these four on another)
    device = x.get_device()  # -1 off the GPU
    if device < 0:
        raise BufferError(f"{what} is a CPU tensor ({tuple(x.shape)}, {x.dtype}); HOCCL moves GPU memory: "
                          "pass x.cuda() or allocate it on the GPU")
    if not x.is_contiguous():
        raise BufferError(f"{what} is not contiguous (strides {x.stride()}); pass x.contiguous()")
    return DeviceBuffer(x.data_ptr(), x.nbytes, device)


def _cai_buffer(x: Any, what: str) -> DeviceBuffer:
    cai = x.__cuda_array_interface__
    ptr = int(cai["data"][0])
    shape = tuple(cai["shape"])
    itemsize = _itemsize(cai["typestr"])
    count = 1
    for n in shape:
        count *= n
    strides = cai.get("strides")
    if strides is not None:
        expected, acc = [], itemsize
        for n in reversed(shape):
            expected.append(acc)
            acc *= n
        if count > 1 and tuple(s for s, n in zip(strides, shape, strict=True) if n > 1) != \
                tuple(s for s, n in zip(tuple(reversed(expected)), shape, strict=True) if n > 1):
            raise BufferError(f"{what} is not C-contiguous (strides {strides}); pass a contiguous copy")
    device = getattr(getattr(x, "device", None), "id", None)
    if device is None:
        device = _pointer_device(ptr, what)
    return DeviceBuffer(ptr, count * itemsize, int(device))


def _itemsize(typestr: str) -> int:
    return int(typestr[2:])


def _pointer_device(ptr: int, what: str) -> int:
    from ._cuda import runtime_call

    try:
        attrs = runtime_call("pointerGetAttributes", "cudaPointerGetAttributes", ptr)
    except Exception as exc:  # noqa: BLE001
        raise BufferError(f"{what}: cannot tell which GPU owns pointer {ptr:#x} ({exc})") from None
    if attrs.type != 2:  # cudaMemoryTypeDevice
        raise BufferError(f"{what}: pointer {ptr:#x} is not device memory; HOCCL moves GPU memory")
    return int(attrs.device)


def as_buffer(x: Any, what: str = "buffer") -> DeviceBuffer:
    """(pointer, bytes, device) of a torch tensor, a CuPy array or a ``__cuda_array_interface__`` object."""
    if isinstance(x, DeviceBuffer):
        return x
    module = type(x).__module__
    if module.startswith("cupy"):  # fast path: attributes, not the __cuda_array_interface__ dict
        if not x.flags.c_contiguous:
            raise BufferError(f"{what} is not C-contiguous (strides {x.strides}); pass cupy.ascontiguousarray(x)")
        return DeviceBuffer(int(x.data.ptr), int(x.nbytes), int(x.device.id))
    if module.startswith("torch"):
        return _torch_buffer(x, what)
    if hasattr(x, "__cuda_array_interface__"):
        return _cai_buffer(x, what)
    if hasattr(x, "__array_interface__") or hasattr(x, "__array__"):
        raise BufferError(f"{what} is host memory ({type(x).__name__}); HOCCL moves GPU memory: pass a CuPy "
                          "array or a CUDA torch tensor")
    raise BufferError(f"{what} of type {type(x).__name__} is not a GPU buffer; pass a CuPy array, a CUDA torch "
                      "tensor or an object with __cuda_array_interface__")


def window_buffer(tensor: Any, rank: int, device: int) -> DeviceBuffer:
    """The buffer a rank registers as a window (``register_window`` of every communicator): on its GPU."""
    buf = as_buffer(tensor, "window")
    if buf.device != device:
        raise BufferError(f"rank {rank}'s window is on GPU {buf.device}, its communicator on GPU {device}: "
                          f"register memory of GPU {device}")
    return buf


_STREAM_GETTERS: dict[type, Any] = {}  # CuPy / torch / cuda.core stream type -> how its handle was read first
_KNOWN_STREAMS = ("torch", "cupy", "cuda")  # modules of stream types whose handles are read the same way each time


def as_rank(x: Any, world: int, what: str, other_than: int | None = None) -> int:
    """``x`` as a rank of a group of ``world`` (a Python or NumPy integer, not a bool): else a CollectiveError naming
    ``what`` (root, dst, src, ...), the value and the range. ``other_than``: the calling rank, which a send's or a
    receive's peer must not be."""
    try:
        if isinstance(x, bool):  # an int to Python, not a rank to anyone
            raise TypeError
        r = operator.index(x)
    except TypeError:
        raise CollectiveError(f"{what}={x!r} is not a rank: pass an int in 0..{world - 1}") from None
    if r == other_than:
        raise CollectiveError(f"{what}={r} is this rank itself: pass another rank in 0..{world - 1}")
    if not 0 <= r < world:
        raise CollectiveError(f"{what}={r} is out of range: pass a rank in 0..{world - 1}")
    return r


def as_stream(s: Any) -> int:
    """A raw ``cudaStream_t`` handle from a CuPy/torch stream, ``__cuda_stream__``, an int, or None (legacy 0)."""
    if s is None:
        return 0
    get = _STREAM_GETTERS.get(type(s))
    if get is not None:  # a stream type seen before: read its handle the way that worked then
        return get(s)
    if isinstance(s, bool):
        raise StreamError(f"{s!r} is not a stream")
    if isinstance(s, int):
        if s < 0:
            raise StreamError(f"stream handle {s} is negative")
        return s
    proto = getattr(s, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if isinstance(value, tuple) and len(value) == 2:
            if callable(proto) and type(s).__module__.startswith(_KNOWN_STREAMS):
                _STREAM_GETTERS[type(s)] = lambda x: int(x.__cuda_stream__()[1])
            return int(value[1])
    for attr in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy Stream, cuda.core Stream
        value = getattr(s, attr, None)
        if isinstance(value, int):
            if type(s).__module__.startswith(_KNOWN_STREAMS):
                _STREAM_GETTERS[type(s)] = operator.attrgetter(attr)
            return value
    raise StreamError(f"cannot use {type(s).__name__} as a CUDA stream; pass a CuPy or torch stream, an object "
                      "with __cuda_stream__, a raw handle, or None for the legacy default stream")
