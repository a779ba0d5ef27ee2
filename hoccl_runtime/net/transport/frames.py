"""The TCP transport's receiving side, apart from its connections' threads: the header's checks
(:func:`check_header`), a lane's reader that a polling thread advances without blocking (:class:`LaneReader`,
``TcpTransport(receive="poll")``), and the blocking socket helpers (:func:`recv_exact`, :func:`recv_struct`,
:func:`tune`).

A frame is a header (``HEADER`` and a CRC-32 of it) and its payload, received straight into the registered region
the header names (docs/architecture.md, "Transports"). With ``receive="thread"`` (the default) each lane has a thread
that blocks in the kernel for a whole header, then a whole payload. With ``receive="poll"`` no thread receives: the
thread that polls the connection (the network executor's driving loop) reads what each lane has, without waiting,
and a frame completes once its last byte is in. That takes the lanes' receiving threads out of the process, and
with them their turns at the interpreter beside the driving loop.
"""

from __future__ import annotations

import contextlib
import errno
import select
import socket
import struct
import time
import zlib
from typing import Any

from ...errors import TransportError

__all__ = ["MAGIC", "VERSION", "HEADER", "CRC", "check_header", "receive_failure", "not_a_frame", "out_of_order",
           "outside", "LaneReader", "read_lanes", "recv_exact", "recv_struct", "tune"]

MAGIC = b"HOCL"
VERSION = 3  # 3: the codes cover both ends' addresses and ports
HEADER = struct.Struct("<4sHHQQHHIQQIQQ")        # + crc32 appended as "<I"
CRC = struct.Struct("<I")
FRAME_BYTES = HEADER.size + CRC.size  # what a frame has before its payload


def receive_failure(exc: BaseException) -> str:
    """Why a lane's receiving failed, in words (its thread's or its poller's)."""
    if isinstance(exc, TransportError):
        return str(exc)
    if isinstance(exc, (ConnectionResetError, BrokenPipeError)):  # the peer's socket closed with data unread on it
        return "the peer closed the connection (reset: process gone?)"
    return f"receive: {getattr(exc, 'strerror', None) or exc}"


def not_a_frame(magic: bytes, version: int, lane: int) -> str:
    return f"not a HOCCL frame (magic {magic!r}, version {version}, lane {lane})"


def out_of_order(seq: int, expected: int) -> str:
    return f"frame {seq} arrived where {expected} was due (lost or reordered data)"


def outside(region: int, off: int, n: int, size: int | None) -> str:
    """Why a write into ``region`` (``size`` bytes registered, None: no such region) cannot land."""
    what = "no such region" if size is None else f"{size} bytes"
    return (f"a write into region {region} bytes {off}..{off + n} is outside what this side registered ({what}); "
            "do both ends run the same plan, chunk size and ring_bytes?")


def check_header(head: bytes | bytearray | memoryview, lane: int, expected: int, regions: dict) -> tuple:
    """The frame a received header (``HEADER.size + 4`` bytes) announces on ``lane``, where frame ``expected`` is
    due: ``(write id, part, parts, region, offset, nbytes, imm, write offset, write bytes, target view)``; raises
    :class:`TransportError` with why it is not a frame this side can take."""
    (crc,) = CRC.unpack_from(head, HEADER.size)
    if zlib.crc32(memoryview(head)[:HEADER.size]) != crc:
        raise TransportError("corrupt frame header (CRC mismatch)")
    magic, version, lane_in, seq, write_id, part, parts, region, off, n, imm, base, total = HEADER.unpack_from(head)
    if magic != MAGIC or version != VERSION or lane_in != lane:
        raise TransportError(not_a_frame(magic, version, lane_in))
    if seq != expected:
        raise TransportError(out_of_order(seq, expected))
    target = regions.get(region)
    if target is None or off + n > target.nbytes:
        raise TransportError(outside(region, off, n, None if target is None else target.nbytes))
    return write_id, part, parts, region, off, n, imm, base, total, memoryview(target.view)[off:off + n]


class LaneReader:
    """One lane's receiving side, advanced by :meth:`read` without blocking: a header, then its payload straight into
    its region, frame after frame. ``done(frame)`` is called for each whole frame (``check_header``'s tuple)."""

    __slots__ = ("sock", "lane", "regions", "done", "expected", "head", "view", "got", "frame", "ended")

    def __init__(self, sock: socket.socket, lane: int, regions: dict, done: Any):
        self.sock, self.lane, self.regions, self.done = sock, lane, regions, done
        self.expected = 0
        self.head = bytearray(HEADER.size + CRC.size)
        self.view = memoryview(self.head)
        self.got = 0
        self.frame: tuple | None = None  # the frame whose payload is coming in
        self.ended = False  # the peer closed the lane between frames

    def read(self, budget: int = 4 << 20) -> bool | None:
        """Take what the socket has, up to about ``budget`` bytes (so that a lane that keeps streaming does not hold
        the polling thread: the rest waits for its next call); True if anything came, None on a clean end between
        frames (the peer closed). Raises :class:`TransportError` on a short or bad frame, and OSError from the
        socket."""
        moved = False
        while budget > 0:
            frame = self.frame
            into = self.view[self.got:] if frame is None else frame[9][self.got:]
            if len(into):
                try:
                    n = self.sock.recv_into(into, len(into), socket.MSG_DONTWAIT)
                except BlockingIOError:
                    return moved
                except InterruptedError:
                    continue
                except OSError as exc:
                    if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                        return moved
                    raise
                if n == 0:
                    if frame is None and self.got == 0:
                        return None
                    raise TransportError("the peer closed the connection mid-write" if frame is not None else
                                         f"stream ended after {self.got} of {len(self.head)} bytes (peer closed "
                                         "mid-frame)")
                moved = True
                self.got += n
                budget -= n
                if self.got < (len(self.head) if frame is None else frame[5]):
                    continue
            if frame is None:  # a whole header: its payload comes next (none: the frame is whole)
                self.frame = check_header(self.head, self.lane, self.expected, self.regions)
                self.expected += 1
                self.got = 0
                if self.frame[5]:
                    continue
            whole, self.frame, self.got = self.frame, None, 0
            self.done(whole)
            moved = True
        return moved


def read_lanes(conn: Any, timeout_s: float) -> bool:
    """receive="poll": read what every lane of ``conn`` (a TcpConnection) has, and until a completion is ready (or an
    error), for up to ``timeout_s`` (waiting in ``select`` meanwhile); True. A lane that fails fails the connection,
    as its thread would."""
    deadline = time.monotonic() + timeout_s
    while True:
        for r in conn._readers:
            if r.ended or r.sock.fileno() < 0:
                continue
            try:
                if r.read() is None:
                    r.ended = True
                    conn._lane_ended(r.lane)
            except (TransportError, OSError) as exc:  # a failed lane is read no more
                r.ended = True
                conn._fail(r.lane, receive_failure(exc))
        left = deadline - time.monotonic()
        live = [r.sock for r in conn._readers if not r.ended and r.sock.fileno() >= 0]
        if left <= 0 or not live or not conn._completions.empty() or conn._error is not None:
            return True
        select.select(live, [], [], left)


def recv_exact(sock: socket.socket, view: memoryview, deadline: float | None = None) -> bool:
    """Fill ``view`` from ``sock``; False on a clean EOF before the first byte, raise on a short stream. With
    ``deadline`` (monotonic; the handshake's) each read waits only for what is left of it, so a peer that sends a
    byte at a time is cut off at the deadline, not once per byte."""
    got = 0
    while got < len(view):
        if deadline is None:
            # MSG_WAITALL: one system call (and one GIL hand-back) per frame part instead of one per socket
            # buffer's worth; it returns early only on EOF, an error or a signal, which the loop handles
            n = sock.recv_into(view[got:], 0, socket.MSG_WAITALL)
        else:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TransportError(f"handshake not done by its deadline ({got} of {len(view)} bytes)")
            sock.settimeout(left)
            n = sock.recv_into(view[got:])
        if n == 0:
            if got == 0:
                return False
            raise TransportError(f"stream ended after {got} of {len(view)} bytes (peer closed mid-frame)")
        got += n
    return True


def recv_struct(sock: socket.socket, layout: struct.Struct, first_byte_only_on_refusal: bool = False) -> tuple | None:
    """One ``layout`` from ``sock``; None on EOF. A refusal may be a lone 0 byte then EOF (older peers)."""
    buf = bytearray(layout.size)
    view = memoryview(buf)
    if not recv_exact(sock, view[:1]):
        return None
    if first_byte_only_on_refusal and buf[0] != 1:
        return (buf[0], b"", b"")
    if not recv_exact(sock, view[1:]):
        return None
    return layout.unpack(buf)


def tune(sock: socket.socket, buffer: int) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if buffer > 0:  # a fixed size turns the kernel's autotuning off (and is capped at net.core.[rw]mem_max)
        for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, opt, buffer)
