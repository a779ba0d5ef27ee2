"""The transport interface, shaped after NCCL's net plugin and RDMA verbs.

* ``listen()`` / ``connect(address, timeout_s)`` / ``accept(timeout_s)``: never block forever.
* ``register(buffer)``: a staging region, registered once and reused (no per-call registration:
  the paper's lesson from VCCL's registration stalls); the peer writes into it by region id.
* ``Connection.write(local, offset, nbytes, remote_region, remote_offset, imm)``: an RDMA
  write-with-immediate: the bytes land in the peer's region, then the peer is told ``imm``.
* ``Connection.poll(timeout_s)``: completions, both "my write #k left" and "a peer's write with imm
  landed in my region". Waiting releases the GIL (no busy polling in the caller's process).
* ``close()``: idempotent; frees sockets/queue pairs and threads.
"""

from __future__ import annotations

import socket
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..._timer import nap
from ...errors import TransportError

__all__ = ["Region", "Completion", "Completions", "Connection", "Transport", "open_listener", "pause"]


@dataclass(frozen=True)
class Region:
    """A registered buffer known to the transport by ``id``: host memory (a NumPy byte view), or GPU
    memory (``view`` None; ``device_address`` and ``device_bytes``), which only an RDMA transport can
    register (:meth:`Transport.register_device`)."""

    id: int
    view: np.ndarray | None  # uint8, contiguous; None for GPU memory
    device_address: int = 0
    device_bytes: int = 0

    @property
    def nbytes(self) -> int:
        return int(self.view.nbytes) if self.view is not None else self.device_bytes

    @property
    def address(self) -> int:
        return int(self.view.ctypes.data) if self.view is not None else self.device_address


@dataclass(frozen=True)
class Completion:
    kind: Literal["sent", "received"]
    write_id: int       # sent: the id write() returned; received: the sender's id
    imm: int            # the 32-bit immediate of the write
    region: int         # received: the region written; sent: the remote region
    offset: int
    nbytes: int


class Completions:
    """A connection's completions (and the error that ended it) on their way to the one thread that polls: lane
    threads or that thread itself append, the poller takes. A deque: a look that finds nothing costs a truth test,
    where ``queue.Queue``'s ``get_nowait`` took its lock and raised ``Empty`` (1.3 us against 0.04 on the CPU VM), once
    per connection in every turn of a driving loop. The lock and condition are touched only while the poller waits
    (``take`` with a timeout): an ``append`` after the poller found the deque empty sees ``_waiting`` set and
    notifies under the lock, which the poller holds from setting it until its wait lets go."""

    __slots__ = ("_items", "_cond", "_waiting")

    def __init__(self) -> None:
        self._items: deque = deque()
        self._cond = threading.Condition()
        self._waiting = False

    def put(self, item: object) -> None:
        self._items.append(item)
        if self._waiting:
            with self._cond:
                self._cond.notify()

    def empty(self) -> bool:
        return not self._items

    def take(self, timeout_s: float = 0.0) -> object | None:
        """The oldest item, waiting up to ``timeout_s`` for one (0: not at all); None if none came."""
        items = self._items
        if not items and timeout_s > 0:
            with self._cond:
                self._waiting = True
                try:
                    self._cond.wait_for(items.__len__, timeout_s)
                finally:
                    self._waiting = False
        try:
            return items.popleft()
        except IndexError:
            return None


class Connection(ABC):
    peer: str

    @abstractmethod
    def write(self, local: Region, offset: int, nbytes: int, remote_region: int, remote_offset: int,
              imm: int = 0, *, ordered: bool = False) -> int:
        """Queue a write; returns its id. Completion comes through poll(). The ``ordered`` writes of a connection
        arrive (their "received" completions come) in the order they were written, whatever their sizes; other
        writes may overtake each other and the ordered ones (a connection spreads them over its lanes)."""

    @abstractmethod
    def poll(self, timeout_s: float = 0.0, max_items: int = 64) -> list[Completion]:
        """Completions so far, waiting up to ``timeout_s`` for the first: with ``timeout_s`` 0 it returns at
        once (maybe an empty list); with a positive one it raises HocclTimeoutError if nothing came. Raises
        TransportError if the connection failed (peer gone, corrupt stream)."""

    @abstractmethod
    def close(self) -> None: ...

    def arm(self, gates: list[tuple[int, int, int, int, int, int]]) -> bool:
        """Landing gates this connection opens itself, replacing those armed before (``[]``: none): per gate the
        immediate, region, offset and size of a write expected, a 32-bit flag's address in this process and the
        value to store there once every byte of that write is in place, before its "received" completion is
        queued. The native TCP engine's receiving threads do (HOCCL_NET_LAND_GATES); False where the connection
        cannot (the default), and its caller opens the gate on the completion."""
        return False

    #: whether :meth:`write` takes ``after=(flag address, count)``: the write leaves once the int32 there reached the
    #: count, without its caller waiting for that (the native TCP engine's watcher; HOCCL_NET_SEND_GATES)
    writes_after = False

    def cancel_after(self) -> None:
        """Drop the writes still waiting for their ``after`` flags (a failed run's, before its gates are opened)."""
        return None  # none wait where writes_after is False

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transport(ABC):
    name: str

    @abstractmethod
    def register(self, buffer: np.ndarray) -> Region: ...

    #: whether :meth:`register_device` can register GPU memory (GPUDirect RDMA)
    device_memory = False

    def register_device(self, address: int, nbytes: int, device: int) -> Region:
        """Register ``nbytes`` of GPU ``device``'s memory at ``address`` once (RDMA transports only)."""
        raise TransportError(f"the {self.name} transport moves host memory only and cannot register GPU memory "
                             f"({nbytes} bytes on GPU {device}); stage through pinned host memory (GpuNodeExecutor's "
                             "staging='host', the default for it)")

    @abstractmethod
    def listen(self) -> str:
        """Start listening; returns the address peers connect to."""

    @abstractmethod
    def connect(self, address: str, timeout_s: float = 30.0) -> Connection: ...

    @abstractmethod
    def accept(self, timeout_s: float = 30.0) -> Connection: ...

    @abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_listener(host: str, port: int, backlog: int) -> socket.socket:
    """A listening TCP socket on host:port (0: any free port), or a TransportError that says what to do."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise TransportError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another port (or 0 for "
                             "any free one)") from None
    sock.listen(backlog)
    return sock


def pause(conns: dict, seconds: float) -> None:
    """A driving loop's sleep between its looks: where it has one connection that can wake it at its next
    completion (``wait``: the native TCP engine's), that wait; else a sleep of ``seconds``. ``seconds`` 0: spin
    (:func:`nap`), with no wait on the engine."""
    if seconds <= 0:
        nap(0)
        return
    if len(conns) == 1:
        wait = getattr(next(iter(conns.values())), "wait", None)
        if wait is not None:
            wait(seconds)
            return
    time.sleep(seconds)
