"""Flags in host memory that GPU streams write and wait on without a kernel, and what they encode.

* :class:`FlagPool`: int32 slots in pinned, device-mapped host memory (``cuMemHostAlloc``), or in a
  plain NumPy array for CPU tests. Flags stay in host memory: since CUDA 13.1 a stream write may not
  target a peer GPU's memory.
* :class:`MemOps`: a batch of ``cuStreamWaitValue32`` / ``cuStreamWriteValue32`` operations enqueued
  with one ``cuStreamBatchMemOp`` call.
* :func:`handshake`: the producer/consumer protocol on one flag, replay-safe (no sequence number is
  baked in, so a CUDA graph that captured it can be replayed)::

      producer stream  ──wait(f == 0)──write(f = 1)──▶
      consumer stream                    ──wait(f == 1)──write(f = 0)──▶ (work after this waits for the producer)

  The producer's wait(f == 0) keeps a second signal from overwriting one not yet consumed.
* Counters (:func:`reached`, :func:`as_int32`): a flag that only grows (1, 2, ... modulo 2**32), that a stream
  waits on with :meth:`MemOps.wait_geq` and the host reads with :func:`reached`; a later value opens every
  earlier wait. The staging slots of the network path are gated by them (hoccl_runtime.net.executor.GpuNodeExecutor:
  the paper's chunk states IDLE -> DMA_COPYING -> NETWORK -> IDLE become the counts of go / staged and
  arrived / landed).
"""

from __future__ import annotations

import ctypes
import struct
from typing import Any

import numpy as np

from . import _cuda  # no CUDA at import (its names are looked up when called: tests fake them)
from .errors import HocclError

_VALUE = struct.Struct("<Q")  # a packed memory operation's value (hoccl_runtime._cuda.pack_memops: bytes 16..23)

__all__ = ["FlagPool", "Flag", "MemOps", "handshake", "as_int32", "reached"]


class Flag:
    __slots__ = ("pool", "index")

    def __init__(self, pool: FlagPool, index: int):
        self.pool, self.index = pool, index

    @property
    def address(self) -> int:
        """Device-visible address (equal to the host address under unified addressing)."""
        return self.pool.base + 4 * self.index

    def read(self) -> int:
        return int(self.pool.view[self.index])

    def write(self, value: int) -> None:
        self.pool.view[self.index] = value

    def __repr__(self) -> str:
        return f"Flag({self.index}, value={self.read()})"


class FlagPool:
    """``capacity`` int32 flags, all 0 at start. ``device=True`` puts them in pinned, mapped host memory;
    ``memory=`` (an int32 NumPy view of ``capacity`` words the GPU reaches, e.g. shared memory registered with
    CUDA) places them there instead, the memory staying its owner's to free."""

    def __init__(self, capacity: int, *, device: bool = True, memory: np.ndarray | None = None):
        if capacity <= 0:
            raise HocclError(f"flag pool capacity {capacity} must be positive")
        self.capacity = capacity
        self._next = 0
        self._free: list[int] = []
        self._ptr = 0
        if memory is not None:
            if memory.dtype != np.int32 or memory.size != capacity:
                raise HocclError(f"a flag pool's memory must be {capacity} int32 words, got {memory.size} "
                                 f"{memory.dtype}")
            self.view = memory
            self.base = int(memory.ctypes.data)
        elif device:
            from ._cuda import host_mapped_alloc

            self._ptr = host_mapped_alloc(4 * capacity)
            buf = (ctypes.c_int32 * capacity).from_address(self._ptr)
            self.view = np.frombuffer(buf, dtype=np.int32)
            self.base = self._ptr
            self.view[:] = 0
        else:
            self.view = np.zeros(capacity, dtype=np.int32)
            self.base = int(self.view.ctypes.data)

    def allocate(self) -> Flag:
        if self._free:
            index = self._free.pop()
        elif self._next < self.capacity:
            index, self._next = self._next, self._next + 1
        else:
            raise HocclError(f"flag pool exhausted ({self.capacity} flags); create the runtime with a larger "
                             "flag_capacity")
        self.view[index] = 0
        return Flag(self, index)

    def release(self, flag: Flag) -> None:
        if flag.pool is not self:
            raise HocclError("flag belongs to another pool: free it to the pool it came from")
        self._free.append(flag.index)

    def close(self) -> None:
        if self._ptr:
            from ._cuda import host_free

            self.view = np.zeros(0, dtype=np.int32)
            host_free(self._ptr)
            self._ptr = 0

    def __enter__(self) -> FlagPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:  # noqa: SIM105 - at interpreter shutdown even `contextlib` may already be gone
            self.close()
        except Exception:  # noqa: BLE001 - the driver may be gone already
            pass


class MemOps:
    """An ordered batch of 32-bit stream waits and writes, enqueued with one ``cuStreamBatchMemOp``."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, int, int]] = []  # ("wait_eq" | "wait_geq" | "write", address, value)
        self._params: Any = None

    def wait_eq(self, flag: Flag, value: int) -> MemOps:
        self.ops.append(("wait_eq", flag.address, value))
        self._params = None
        return self

    def wait_geq(self, flag: Flag, value: int) -> MemOps:
        """Wait until the flag has reached ``value``: ``(int32)(flag - value) >= 0``, a cyclic comparison, so
        counters that wrap at 2**32 keep working and a later value releases every earlier wait."""
        self.ops.append(("wait_geq", flag.address, value))
        self._params = None
        return self

    def write(self, flag: Flag, value: int) -> MemOps:
        self.ops.append(("write", flag.address, value))
        self._params = None
        return self

    def extend(self, other: MemOps) -> MemOps:
        self.ops.extend(other.ops)
        self._params = None
        return self

    def set_value(self, i: int, value: int) -> MemOps:
        """Give operation ``i`` another value, in the packed block where there is one (the driver reads a batch's
        parameters when it is enqueued, so a batch may be rewritten once its enqueue returned): a counter's write
        enqueued again with its next count costs no rebuild."""
        kind, address, _ = self.ops[i]
        self.ops[i] = (kind, address, value)
        params = self._params
        if params is not None and params[0] is not None:
            _VALUE.pack_into(params[1], i * _cuda.MEMOP_BYTES + 16, value & 0xFFFFFFFF)
        else:
            self._params = None
        return self

    def _build(self) -> Any:
        """What enqueue passes: a packed parameter block for the ctypes path, else cuda.bindings objects."""
        fast = _cuda.fast_driver()
        if fast is not None:
            # the block travels with every enqueue (ctypes passes it by address), which keeps it alive as
            # long as any launch list that uses it: a bare address would dangle once the MemOps is gone
            block = ctypes.create_string_buffer(_cuda.pack_memops(self.ops), len(self.ops) * _cuda.MEMOP_BYTES)
            return fast, block
        cu = _cuda.driver()
        params = []
        for kind, address, value in self.ops:
            p = cu.CUstreamBatchMemOpParams()
            if kind in ("wait_eq", "wait_geq"):
                p.operation = cu.CUstreamBatchMemOpType.CU_STREAM_MEM_OP_WAIT_VALUE_32
                p.waitValue.address = address
                p.waitValue.value = value & 0xFFFFFFFF  # a 32-bit counter
                p.waitValue.flags = cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_EQ if kind == "wait_eq" else \
                    cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ
            else:
                p.operation = cu.CUstreamBatchMemOpType.CU_STREAM_MEM_OP_WRITE_VALUE_32
                p.writeValue.address = address
                p.writeValue.value = value & 0xFFFFFFFF
                p.writeValue.flags = cu.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT
            params.append(p)
        return None, params

    def bound(self, stream: int) -> tuple[Any, tuple]:
        """(function, arguments) that enqueue the batch on ``stream``: the ctypes call itself where
        possible (one Python frame less on the hot path)."""
        if self._params is None:
            self._params = self._build()
        fast, block = self._params
        if fast is not None and self.ops:
            return fast.batch_memop, (stream, len(self.ops), block)
        return self.enqueue, (stream,)

    def enqueue(self, stream: int) -> None:
        """Enqueue the batch on ``stream`` (a raw handle; its device's context must be current)."""
        if not self.ops:
            return
        if self._params is None:
            self._params = self._build()
        fast, params = self._params
        if fast is not None:
            fast.batch_memop(stream, len(self.ops), params)
            return
        from ._cuda import check, driver

        cu = driver()
        check("cuStreamBatchMemOp", cu.cuStreamBatchMemOp(cu.CUstream(stream), len(params), params, 0))


def handshake(flag: Flag) -> tuple[MemOps, MemOps]:
    """(producer ops, consumer ops) of one signal on ``flag`` (see the module docstring)."""
    return MemOps().wait_eq(flag, 0).write(flag, 1), MemOps().wait_eq(flag, 1).write(flag, 0)


def as_int32(count: int) -> int:
    """A 32-bit counter value as the int32 a flag stores (what the host writes)."""
    count &= 0xFFFFFFFF
    return count - (1 << 32) if count >= 1 << 31 else count


def reached(flag: Flag, count: int) -> bool:
    """Whether a counter flag has reached ``count``: the cyclic comparison of the GPU's GEQ wait."""
    return ((flag.read() - count) & 0xFFFFFFFF) < 1 << 31
