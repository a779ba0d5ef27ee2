"""The host memory a training process shares with its network proxy process (:mod:`hoccl_runtime.net.proxyproc`):
the arena itself (:class:`SharedArena`, a memfd both map, registered with CUDA by the training process), the
training process's stand-in for the transport the proxy owns (:class:`LocalRegions`), and a prepared run as the
arena's words (:func:`encode` / :func:`decode`)."""

from __future__ import annotations

import contextlib
import mmap
import os
from collections import deque
from typing import Any

import numpy as np

from ..errors import HocclError, TransportError
from ..flags import Flag, FlagPool
from .gated import PreparedRun
from .transport.base import Region, Transport

__all__ = ["ALIGN", "SharedArena", "LocalRegions", "arena_bytes", "encode", "decode"]

ALIGN = 256


def arena_bytes(gpus: int, slots: int, chunk_bytes: int) -> int:
    """What a :class:`SharedArena` for one executor's rings holds: a send and a receive ring per GPU, two
    placeholders per GPU, alignment slack (the flags live in an arena of their own)."""
    return 2 * gpus * slots * chunk_bytes + (6 * gpus + 24) * ALIGN


class SharedArena:
    """Host memory shared with the proxy process: a memfd of ``nbytes`` mapped here, carved front to back
    (:meth:`array`, :meth:`flag_pool`). The training process registers it with CUDA (:meth:`register_with_cuda`:
    portable, device-mapped, so copy engines and stream memory operations reach it at its host address); the proxy
    process maps the same file (``fd=``) and touches it as plain memory."""

    def __init__(self, nbytes: int = 0, *, fd: int | None = None):
        if fd is None:
            size = -(-max(nbytes, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
            fd = os.memfd_create("hoccl-net-proxy", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, size)
            except OSError as exc:
                os.close(fd)
                raise HocclError(f"cannot make {size} bytes of shared memory for the network proxy process "
                                 f"({exc.strerror or exc}); lower ring_bytes=, or set HOCCL_NET_PROXY=thread") from None
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self._map = mmap.mmap(fd, self.size)
        self.view = np.frombuffer(self._map, dtype=np.uint8)
        self.base = int(self.view.ctypes.data)
        self._next = 0
        self.registered = False

    def register_with_cuda(self) -> None:
        from .._cuda import host_register

        dev = host_register(self.base, self.size)
        self.registered = True
        if dev != self.base:
            raise HocclError(f"the GPU sees shared host memory at {dev:#x}, not at its host address {self.base:#x} (no "
                             "unified addressing of registered memory here); set HOCCL_NET_PROXY=thread")

    def carve(self, nbytes: int) -> int:
        """The offset of ``nbytes`` not yet handed out."""
        off = -(-self._next // ALIGN) * ALIGN
        if off + nbytes > self.size:
            raise HocclError(f"the network proxy's shared memory ({self.size} bytes) has no room for {nbytes} more "
                             f"(at {off}): the arena was sized for other rings (a bug: please report it)")
        self._next = off + nbytes
        return off

    def array(self, nbytes: int) -> np.ndarray:
        off = self.carve(nbytes)
        return self.view[off:off + nbytes]

    def flag_pool(self, capacity: int) -> FlagPool:
        off = self.carve(4 * capacity)
        return FlagPool(capacity, memory=self.view[off:off + 4 * capacity].view(np.int32))

    def word(self, flag: Flag) -> int:
        """Where ``flag`` sits, in int32 words from the arena's start (what the proxy process is told)."""
        return (flag.pool.base - self.base) // 4 + flag.index

    def words(self) -> FlagPool:
        """Every word of the arena as flags (the proxy process's view: ``Flag(pool, word)``)."""
        return FlagPool(self.size // 4, memory=self.view.view(np.int32))

    def close(self) -> None:
        if self.registered:
            from .._cuda import host_unregister

            self.registered = False
            with contextlib.suppress(Exception):  # closing anyway
                host_unregister(self.base)
        self.view = np.zeros(0, np.uint8)
        with contextlib.suppress(BufferError):  # a view still alive elsewhere: unmapped with it
            self._map.close()
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


class LocalRegions(Transport):
    """The training process's stand-in for the transport its proxy process owns: it numbers the regions the
    executor registers (in the order the proxy process's executor registers the same ones) and moves nothing."""

    name = "tcp"

    def __init__(self) -> None:
        self._count = 0

    def register(self, buffer: np.ndarray) -> Region:
        self._count += 1
        return Region(self._count - 1, buffer)

    def listen(self) -> str:
        raise TransportError("the network proxy process listens, not the training process")

    def connect(self, address: str, timeout_s: float = 30.0) -> Any:
        raise TransportError("the network proxy process connects, not the training process")

    accept = connect

    def close(self) -> None:
        pass


def encode(prepared: PreparedRun, arena: SharedArena) -> tuple:
    """What the proxy process needs of a prepared run: per (ring, slot) the gates' words, counts and bytes in
    order, and every copy stream's end word and count."""
    def side(gates: dict) -> dict:
        return {key: [(arena.word(g), arena.word(d), c, nb) for g, d, c, nb in q] for key, q in gates.items()}

    return side(prepared.send), side(prepared.recv), [(arena.word(f), c) for f, c in prepared.ends], prepared.parity


def decode(plan: Any, encoded: tuple, words: FlagPool) -> PreparedRun:
    send, recv, ends, parity = encoded
    run = PreparedRun(plan, parity)
    for mine, theirs in ((run.send, send), (run.recv, recv)):
        for key, q in theirs.items():
            mine[key] = deque((Flag(words, g), Flag(words, d), c, nb) for g, d, c, nb in q)
    run.ends = [(Flag(words, w), c) for w, c in ends]
    return run
