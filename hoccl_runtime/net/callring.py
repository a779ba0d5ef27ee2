"""How a call reaches the proxy process: a queue of messages in memory both processes map, one writer (the
training process) and one reader (the proxy process), with no system call on the caller's side.

Why: each network call's message to the proxy process went as a write on a socket pair that the proxy process slept
on: a system call that wakes another process. On the 1x H200 that cost the caller 18 us alone and 68-73 us a call
inside a training step, about a sixth of the call's host time. The proxy process looks often anyway (every
``HOCCL_NET_POLL_US``), so it can look here.

Layout: two 64-byte lines of counters, then the data. ``written`` and ``read`` count bytes ever put and taken (the
positions are those modulo the data's size); each message is its 4-byte length and then its bytes, split where it
crosses the end. Every message to the proxy process goes here, in order (only the rings' file descriptor still
goes on the socket, which also carries the proxy process's answers). One writer at a time (the caller holds its
send lock) and one reader; each counter is one aligned 8-byte word, stored after the bytes it publishes (x86's
store order: the hosts the network path runs on).
"""

from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np

from ..errors import HocclError, HocclTimeoutError

__all__ = ["CallRing", "ring_bytes"]

_HEADER = 128  # written, read: a 64-byte line each
_LENGTH = struct.Struct("<I")


def ring_bytes(data_bytes: int) -> int:
    """What a ring with ``data_bytes`` of data takes of shared memory."""
    return _HEADER + data_bytes


class CallRing:
    """A one-writer, one-reader queue of messages over ``view`` (uint8, shared by the two processes; see the
    module docstring). ``put`` is the writer's, ``take`` the reader's."""

    def __init__(self, view: np.ndarray):
        if view.dtype != np.uint8 or len(view) <= _HEADER:
            raise HocclError(f"a call ring needs more than {_HEADER} bytes of uint8 memory, got {len(view)}")
        head = view[:_HEADER].view(np.uint64)
        self._written, self._read = head[0:1], head[8:9]
        self._data = view[_HEADER:]
        self.size = len(self._data)

    # --- the writer (the training process) ------------------------------------------------------------------------
    def put(self, payload: bytes, *, timeout_s: float, alive: Any = None) -> None:
        """Append ``payload``; if the reader is that far behind, wait (up to ``timeout_s``) until it has room.
        ``alive()``, asked while waiting, raises if the reader is gone."""
        n = _LENGTH.size + len(payload)
        if n > self.size:
            raise HocclError(f"a network call's message of {len(payload)} bytes does not fit the proxy's call ring "
                             f"({self.size} bytes): a plan with fewer chunks (a larger HOCCL_NET_CHUNK_BYTES) makes "
                             "it shorter")
        w = int(self._written[0])
        if self.size - (w - int(self._read[0])) < n:
            deadline = time.monotonic() + timeout_s
            while self.size - (w - int(self._read[0])) < n:
                if alive is not None:
                    alive()
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"the network proxy process took no call for {timeout_s:g} s while its "
                                            f"call ring ({self.size} bytes) was full")
                time.sleep(50e-6)
        self._copy_in(w, _LENGTH.pack(len(payload)))
        self._copy_in(w + _LENGTH.size, payload)
        self._written[0] = w + n  # published after its bytes

    def _copy_in(self, at: int, data: bytes) -> None:
        if not data:
            return
        src = np.frombuffer(data, np.uint8)
        i = at % self.size
        first = min(len(src), self.size - i)
        self._data[i:i + first] = src[:first]
        if first < len(src):
            self._data[:len(src) - first] = src[first:]

    # --- the reader (the proxy process) ---------------------------------------------------------------------------
    def take(self) -> bytes | None:
        """The next message, or None (none put yet)."""
        r = int(self._read[0])
        if r == int(self._written[0]):
            return None
        (length,) = _LENGTH.unpack(self._copy_out(r, _LENGTH.size))
        payload = self._copy_out(r + _LENGTH.size, length)
        self._read[0] = r + _LENGTH.size + length  # the room is the writer's again
        return payload

    def _copy_out(self, at: int, n: int) -> bytes:
        i = at % self.size
        first = min(n, self.size - i)
        if first == n:
            return self._data[i:i + n].tobytes()
        return self._data[i:].tobytes() + self._data[:n - first].tobytes()
