"""TCP transport: the fallback that runs anywhere (like NCCL's socket transport), and the one that
joins "nodes" on machines without RDMA NICs.

A connection is ``lanes`` TCP sockets (the analogue of several queue pairs: on the 32-core GPU host,
plain sockets over loopback moved 3.7 / 14.6 / 23.4 GB/s with 1 / 4 / 8 connections). Which lanes carry
a write (:func:`lane_parts`, ``split="balance"``, the default): it goes whole to the lane with the fewest
bytes queued when that lane would still be through within ``1 + split_slack`` times the time the write
cut over the least-loaded lanes would take (a pipelined sender with many chunks queued: no part framing
per MiB); otherwise it is cut over those lanes so that they finish together (parts of at least
``min_part`` bytes): a call of a few chunks spreads over every lane instead of riding one each.
``split="idle"`` is the rule up to 2026-12-01: idle lanes share a write, else it goes whole to the
least-loaded lane. Each part is sent as a frame::

    magic "HOCL" | version | lane | seq | write id | part | parts | region | offset | nbytes | imm |
    write offset | write bytes | crc32
    followed by nbytes of payload, received straight into the registered region (no extra copy,
    one MSG_WAITALL receive per part)

Per-lane sequence numbers and the header's CRC-32 detect a short, reordered or corrupt stream. One
sender and one receiver thread per lane block in the kernel (the GIL is free while they wait); the
caller's ``poll`` waits on a queue. With ``receive="poll"`` (``HOCCL_TCP_RECEIVE``) no thread receives: ``poll``
reads what each lane has without waiting (:mod:`.frames`). A peer that dies shows up as EOF or a reset, reported by
``poll`` as :class:`TransportError` naming the peer.

Connection setup, per lane, a challenge-response over both sides' nonces with the job's secret (``secret=``,
made at bootstrap and shared through the store by the communicators)::

    connector -> acceptor   hello: magic, version, lane, lanes, connection id, session, name, nonce_c
    acceptor  -> connector  1, nonce_a, HMAC(secret, "acceptor" | hello | nonce_a | ends)  (0: refused, closed)
    connector -> acceptor   HMAC(secret, "connector" | hello | nonce_a | ends)
    acceptor  -> connector  1                                                            (0: failed the check)

``ends`` is the connection's two (address, port) pairs, connector's first, as each side sees them, so a relay that
forwards a real handshake fails it. What is not defended against: docs/architecture.md, "Transports".

Each side proves it holds the secret before a byte of data moves, and the hello (its name, lane and session)
is covered by both codes, so a name cannot be claimed. Without a secret the same exchange runs with an empty
key: it then authenticates nobody (threat model: docs/architecture.md, "Transports"). The acceptor groups lanes
by connection id. Hellos are read concurrently, each by a deadline for its whole handshake, at most
``MAX_HELLOS`` at once, so silent, slow or half-open sockets of anyone on the host do not hold the real peer back.
A connection that fails any check (another session, not a HOCCL peer, a lane outside the count, a wrong code, a
handshake not done within ``HELLO_TIMEOUT_S``) is answered 0 where it can be, dropped, and the acceptor keeps
waiting for its real peer; if none comes, its timeout (a hard limit) names the last refusal.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import queue
import select
import socket
import struct
import threading
import time
import zlib
from typing import Any

import numpy as np

from ...errors import HocclError, HocclTimeoutError, TransportError
from ...settings import env_choice, env_float
from . import frames
from .base import Completion, Completions, Connection, Region, Transport, open_listener
from .frames import HEADER, MAGIC, VERSION, LaneReader, check_header, recv_exact, recv_struct, tune
from .lanes import SPLIT_SLACK, SPLITS, lane_parts, setting
from .native import native_lanes

__all__ = ["TcpTransport", "TcpConnection", "HEADER", "lane_parts", "RECEIVES"]

HELLO = struct.Struct("<4sHHH8s32s16s16s")        # magic, version, lane, lanes, connection id, session, name, nonce
CHALLENGE = struct.Struct("<B16s32s")             # status, the acceptor's nonce, its code
HELLO_TIMEOUT_S = 5.0                             # how long the acceptor waits for one connection's handshake
MAX_HELLOS = 128                                  # handshakes an acceptor reads at once (more sockets: closed)
MIN_PART = 1 << 20                                # default: do not split writes into parts smaller than this
DIRECT_BYTES = 1 << 20                            # default: writes up to this size leave from the caller's thread
RECEIVES = ("thread", "poll")                     # who receives a lane's frames (frames.py)


def _ends(connector: tuple, acceptor: tuple) -> bytes:
    """Both ends of one TCP connection, (address, port) of the connector then the acceptor, as bytes for the
    handshake's codes: a relay that forwards a real handshake between two connections of its own changes them."""
    return f"{connector[0]}|{connector[1]}|{acceptor[0]}|{acceptor[1]}".encode()


class TcpConnection(Connection):
    def __init__(self, transport: TcpTransport, sockets: list[socket.socket], peer: str, peer_name: str = ""):
        self.transport = transport
        self.peer = peer
        self.peer_name = peer_name  # what the connecting side called itself (TcpTransport(name=...))
        self.lanes = sockets
        self._completions = Completions()
        self._error: TransportError | None = None
        self._closing = False
        self._next_write = 0
        self._lock = threading.Lock()
        self._send_queues: list[queue.Queue] = [queue.Queue() for _ in sockets]
        self._queued = [0] * len(sockets)  # bytes (+ 1 per part) handed to each lane and not yet sent
        self.frames_sent = [0] * len(sockets)  # per lane (diagnostics)
        self._sent_parts: dict[int, int] = {}
        self._recv_parts: dict[int, int] = {}
        self._ended = 0
        # a lane's frames leave one at a time, under its lock, numbered in the order they leave: by its sender thread,
        # or by the caller itself for a small write into a lane with nothing queued (no thread hand-off)
        self._lane_locks = [threading.Lock() for _ in sockets]
        self._seq = [0] * len(sockets)
        regions, polled = transport._regions, transport.receive == "poll"  # poll: read by poll()'s caller, no thread
        self._readers = [LaneReader(sock, lane, regions, self._arrived) for lane, sock in enumerate(sockets)] \
            if polled else []
        self._threads: list[list[threading.Thread]] = [[], []]  # senders, receivers
        self._start_lanes(polled)

    _engine: Any = None  # the native engine's lanes (native.NativeLanes), where the transport runs on it

    def _start_lanes(self, polled: bool) -> None:
        """A sender and (unless polled) a receiver thread per lane, or the native engine's threads."""
        if self.transport._native is not None:
            self._engine = self.transport._native.open(self)  # its landing gates and writes posted ahead (base.py):
            self.arm, self.cancel_after, self.writes_after = self._engine.arm, self._engine.cancel, True
            return
        for lane, sock in enumerate(self.lanes):
            for k, (target, name) in enumerate(((self._send_loop, "send"), (self._recv_loop, "recv"))[:2 - polled]):
                t = threading.Thread(target=target, args=(lane, sock), name=f"hoccl-tcp-{name}-{lane}", daemon=True)
                t.start()
                self._threads[k].append(t)

    @property
    def who(self) -> str:
        """The peer in messages: its name (``node1``: the acceptor learns it from the hello, the connector is told
        by the executor) and its address."""
        return f"{self.peer_name} ({self.peer})" if self.peer_name else self.peer

    # --- caller side ------------------------------------------------------------------------------
    def write(self, local: Region, offset: int, nbytes: int, remote_region: int, remote_offset: int,
              imm: int = 0, *, ordered: bool = False, after: tuple[int, int] | None = None) -> int:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise TransportError(f"connection to {self.who} is closed")
        if after is not None and (self._engine is None or ordered):  # ordered writes keep their order: none wait
            raise TransportError("write(after=...) needs the native TCP engine (Connection.writes_after), unordered")
        if offset < 0 or nbytes < 0 or offset + nbytes > local.nbytes:
            raise TransportError(f"write of bytes {offset}..{offset + nbytes} is outside local region {local.id} "
                                 f"({local.nbytes} bytes)")
        if not 0 <= imm < 2**32:
            raise TransportError(f"immediate {imm} does not fit in 32 bits")
        tr = self.transport
        with self._lock:
            write_id = self._next_write
            self._next_write += 1
            queued = self._queued
            n = len(queued)  # ordered writes: lane 0, whole (one socket and receiving thread: in order); the
            cuts = [(0, 0, nbytes)] if ordered else [  # others take lane 0 last among equals
                ((lane + 1) % n, lo, hi) for lane, lo, hi in
                lane_parts(queued[1:] + queued[:1], nbytes, tr.min_part, tr.split, tr.split_slack)]
            parts = len(cuts)
            self._sent_parts[write_id] = parts
            for lane, lo, hi in cuts:
                queued[lane] += hi - lo + 1  # + 1: a zero-byte write still occupies its lane
        items = [(write_id, part, parts, local, offset + lo, hi - lo, remote_region, remote_offset + lo, imm,
                  remote_offset, nbytes) for part, (lane, lo, hi) in enumerate(cuts)]
        if tr.trace is not None:
            tr.trace.append(("post", cuts[0][0], write_id, parts, nbytes, *(time.perf_counter(),) * 2))
        self._hand(cuts, items, after)
        return write_id

    def _hand(self, cuts: list, items: list, after: tuple[int, int] | None = None) -> None:
        """Hand a write's parts to their lanes (the first, if small and its lane idle, sent from here)."""
        if self._engine is not None:
            return self._engine.post(cuts, items, after)
        tr = self.transport
        lane, lo, hi = cuts[0]
        direct = hi - lo <= tr.direct_bytes  # the first part may leave from here, after the others were handed over
        for (other, _, _), item in zip(cuts[direct:], items[direct:], strict=True):
            self._send_queues[other].put(item)
        if direct and self._lane_locks[lane].acquire(blocking=False):  # the lane is idle (nothing unsent but this):
            try:  # send it from here (an empty queue is not enough: its thread may hold a frame it has not sent yet)
                ok = self._queued[lane] == hi - lo + 1 and self._send_frame(lane, self.lanes[lane], items[0])
            finally:
                self._lane_locks[lane].release()
        else:
            ok = not direct  # not direct: it was handed over with the others
        if not ok:
            self._send_queues[lane].put(items[0])

    def poll(self, timeout_s: float = 0.0, max_items: int = 64) -> list[Completion]:
        out: list[Completion] = []
        polled = self._gather(timeout_s)  # True: the waiting was done there
        comps = self._completions
        if self._error is not None and comps.empty():
            raise self._error
        item = comps.take(timeout_s if timeout_s > 0 and not polled else 0.0)
        if item is None:
            if self._error is not None:
                raise self._error
            if timeout_s > 0:
                raise HocclTimeoutError(f"no completion from {self.who} within {timeout_s:g} s")
            return out
        while item is not None:
            if isinstance(item, TransportError):
                if out:
                    return out  # deliver what completed first; the next poll raises (self._error is set)
                raise item
            out.append(item)
            if len(out) >= max_items:
                return out
            item = comps.take()
        return out

    def wait(self, timeout_s: float) -> None:
        """Up to ``timeout_s``, ended early by a completion where the native engine runs the lanes (HOCCL_NET_WAKE)."""
        if self._engine is not None and self._engine.wake:
            self._engine.gather(timeout_s)
        else:
            time.sleep(timeout_s)

    def _gather(self, timeout_s: float) -> bool:
        """What came: the native engine's events, or with receive="poll" the lanes read here (frames.read_lanes); True
        where that did the waiting."""
        if self._engine is not None:
            return self._engine.gather(timeout_s)
        return bool(self._readers) and frames.read_lanes(self, timeout_s)

    def close(self, drain_timeout_s: float = 5.0) -> None:
        """Flush the writes already queued (up to ``drain_timeout_s``), then close every lane."""
        if self._closing:
            return
        self._closing = True
        if self._engine is not None:
            return self._engine.close(drain_timeout_s)
        for q in self._send_queues:
            q.put(None)  # after the queued writes: each sender thread finishes those first
        deadline = time.monotonic() + drain_timeout_s
        for t in self._threads[0]:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        for sock in self.lanes:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for t in self._threads[1]:
            t.join(timeout=5)

    # --- lane threads -------------------------------------------------------------------------------
    def _fail(self, lane: int, why: str) -> None:
        if self._closing or self._error is not None:
            return
        self._error = TransportError(f"connection to {self.who} failed on lane {lane}: {why}")
        self._completions.put(self._error)

    def _send_loop(self, lane: int, sock: socket.socket) -> None:
        q, lock = self._send_queues[lane], self._lane_locks[lane]
        while True:
            item = q.get()
            if item is None:
                return
            with lock:
                if not self._send_frame(lane, sock, item):
                    return

    def _send_frame(self, lane: int, sock: socket.socket, item: tuple) -> bool:
        """Send one frame on ``lane`` (its lock held) and count it; False if the lane failed."""
        write_id, part, parts, local, off, n, rregion, roff, imm, rbase, total = item
        head = HEADER.pack(MAGIC, VERSION, lane, self._seq[lane], write_id, part, parts, rregion, roff, n, imm, rbase,
                           total)
        trace = self.transport.trace
        start = time.perf_counter() if trace is not None else 0.0
        try:
            sock.sendall(head + struct.pack("<I", zlib.crc32(head)))
            if n:
                sock.sendall(memoryview(local.view)[off:off + n])
            if trace is not None:
                trace.append(("send", lane, write_id, part, n, start, time.perf_counter()))
        except (ConnectionResetError, BrokenPipeError):
            self._fail(lane, "the peer closed the connection (reset while sending: process gone?)")
            return False
        except OSError as exc:
            self._fail(lane, f"send: {exc.strerror or exc}")
            return False
        self._seq[lane] += 1
        self._frame_sent(lane, write_id, n, imm, rregion, rbase, total)
        return True

    def _frame_sent(self, lane: int, write_id: int, n: int, imm: int, rregion: int, rbase: int, total: int) -> None:
        """A part of write ``write_id`` left on ``lane``: counted, and the write's "sent" once every part has."""
        with self._lock:
            self._queued[lane] -= n + 1
            self.frames_sent[lane] += 1
            left = self._sent_parts[write_id] - 1
            if left:
                self._sent_parts[write_id] = left
            else:
                del self._sent_parts[write_id]
        if not left:
            self._completions.put(Completion("sent", write_id, imm, rregion, rbase, total))

    def _recv_loop(self, lane: int, sock: socket.socket) -> None:
        expected = 0
        head = bytearray(HEADER.size + 4)
        view = memoryview(head)
        regions = self.transport._regions
        while True:
            try:
                if not recv_exact(sock, view):
                    self._lane_ended(lane)
                    return
                frame = check_header(head, lane, expected, regions)
            except (TransportError, OSError) as exc:
                self._fail(lane, frames.receive_failure(exc))
                return
            expected += 1
            trace = self.transport.trace
            start = time.perf_counter() if trace is not None else 0.0
            try:
                if frame[5] and not recv_exact(sock, frame[9]):
                    self._fail(lane, "the peer closed the connection mid-write")
                    return
            except (TransportError, OSError) as exc:
                self._fail(lane, f"payload: {exc}")
                return
            if trace is not None:
                trace.append(("recv", lane, frame[0], frame[1], frame[5], start, time.perf_counter()))
            self._arrived(frame)

    def _lane_ended(self, lane: int) -> None:
        """A clean end between frames: fail once every lane has ended, so that the writes that completed on other
        lanes are reported first (a peer that finished and closed is not an error until something more is expected
        of it)."""
        with self._lock:
            self._ended += 1
            all_ended = self._ended == len(self.lanes)
        if all_ended:
            self._fail(lane, "the peer closed the connection (process gone?)")

    def _arrived(self, frame: tuple) -> None:
        """One whole frame (:func:`~.frames.check_header`'s tuple) is in place: its write's "received" completion
        once every part of it is."""
        write_id, _, parts, region, _, _, imm, base, total, _ = frame
        with self._lock:
            got = self._recv_parts.get(write_id, 0) + 1
            if got == parts:
                self._recv_parts.pop(write_id, None)
            else:
                self._recv_parts[write_id] = got
        if got == parts:
            self._completions.put(Completion("received", write_id, imm, region, base, total))


class TcpTransport(Transport):
    """TCP over ``lanes`` sockets per connection. ``session`` must match on both sides (e.g. a plan id)."""

    name = "tcp"
    # a list to trace writes and frames into (HOCCL_NET_TRACE; receive="thread"), time.perf_counter: ("post", first
    # lane, write, parts, bytes, t, t), ("send", lane, write, part, bytes, start, end), ("recv", ..., header, payload)
    trace: list | None = None

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, lanes: int = 4, session: str = "",
                 name: str = "", min_part: int | None = None, socket_buffer: int | None = None,
                 secret: bytes | None = None, split: str | None = None, split_slack: float | None = None,
                 receive: str | None = None, engine: str | None = None):
        if lanes < 1 or lanes > 64:
            raise TransportError(f"lanes={lanes}: use 1..64 connections per peer")
        # a write is cut into parts of at least min_part bytes (HOCCL_TCP_MIN_PART) by the rule ``split``
        # (HOCCL_TCP_SPLIT, with HOCCL_TCP_SPLIT_SLACK: lane_parts); socket_buffer > 0 fixes SO_SNDBUF/SO_RCVBUF
        # (HOCCL_TCP_SOCKET_BUFFER), 0 leaves the kernel's autotuning
        self.min_part = setting(min_part, "HOCCL_TCP_MIN_PART", MIN_PART, 1)
        # writes of at most direct_bytes into an idle lane are sent by the caller's thread (HOCCL_TCP_DIRECT_BYTES;
        # 0: every write through the lane's thread)
        self.direct_bytes = setting(None, "HOCCL_TCP_DIRECT_BYTES", DIRECT_BYTES, 0)
        try:
            self.split = split if split is not None else env_choice("HOCCL_TCP_SPLIT", "balance", SPLITS)
            self.split_slack = split_slack if split_slack is not None else \
                env_float("HOCCL_TCP_SPLIT_SLACK", SPLIT_SLACK)
        except HocclError as exc:
            raise TransportError(str(exc)) from None
        try:  # who receives (HOCCL_TCP_RECEIVE): a thread per lane, or whoever polls the connection (frames.py)
            self.receive = receive if receive is not None else env_choice("HOCCL_TCP_RECEIVE", "thread", RECEIVES)
        except HocclError as exc:
            raise TransportError(str(exc)) from None
        if self.receive not in RECEIVES:
            raise TransportError(f"receive={self.receive!r}: choose one of {', '.join(RECEIVES)}")
        if self.receive == "poll":  # the poller is this side's only reader: it must never block in a send (two
            self.direct_bytes = 0   # pollers each sending into the other's full buffers would wait for good)
        self._native = native_lanes(engine, self.receive)  # HOCCL_TCP_ENGINE; None: the Python lanes
        if self.split not in SPLITS:
            raise TransportError(f"split={self.split!r}: choose one of {', '.join(SPLITS)}")
        if not self.split_slack >= 0:
            raise TransportError(f"split_slack={self.split_slack}: give 0 or more (default {SPLIT_SLACK})")
        # a socket option is a C int: 2 GiB - 1 at most (larger gave OverflowError / TypeError from setsockopt)
        self.socket_buffer = setting(socket_buffer, "HOCCL_TCP_SOCKET_BUFFER", 0, 0, most=2**31 - 1)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise TransportError(f"port={port!r}: give a TCP port in 0..65535 (0: any free one)")
        if secret is not None and not isinstance(secret, (bytes, bytearray, memoryview)):
            raise TransportError(f"secret is a {type(secret).__name__}; give bytes (the job's secret, e.g. "
                                 "os.urandom(32)), or None for an unauthenticated transport")
        self.host, self.port, self.lanes = host, port, lanes
        self.session = session.encode()[:32].ljust(32, b"\0")
        self.name = name.encode()[:16].ljust(16, b"\0")  # sent in the hello: the acceptor's peer_name
        self._key = bytes(secret or b"")  # the job's secret (empty: peers are not authenticated)
        self.refused: list[str] = []  # why connections were dropped by accept (newest last)
        self._regions: dict[int, Region] = {}
        self._listener: socket.socket | None = None
        self._pending: dict[bytes, dict[int, socket.socket]] = {}
        self._connections: list[TcpConnection] = []
        self._hellos: queue.Queue = queue.Queue()  # (socket, address, outcome) of finished handshakes
        self._hellos_running = 0
        self._hello_lock = threading.Lock()

    def register(self, buffer: np.ndarray) -> Region:
        arr = np.asarray(buffer)
        if arr.dtype != np.uint8 or arr.ndim != 1 or not arr.flags.c_contiguous or not arr.flags.writeable:
            raise TransportError("register a writable, contiguous 1-D uint8 array (a pinned staging buffer)")
        region = Region(len(self._regions), arr)
        self._regions[region.id] = region
        if self._native is not None:
            self._native.add(region.id, region.address, region.nbytes)
        return region

    def listen(self) -> str:
        if self._listener is not None:
            return f"{self.host}:{self.port}"
        sock = open_listener(self.host, self.port, 256)
        self._listener = sock
        self.port = sock.getsockname()[1]
        return f"{self.host}:{self.port}"

    def connect(self, address: str, timeout_s: float = 30.0) -> TcpConnection:
        host, _, port_text = address.rpartition(":")
        try:
            port = int(port_text)
        except ValueError:
            raise TransportError(f"address {address!r} is not host:port") from None
        conn_id = os.urandom(8)
        deadline = time.monotonic() + timeout_s
        sockets: list[socket.socket] = []
        try:
            for lane in range(self.lanes):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HocclTimeoutError(f"connecting to {address} took longer than {timeout_s:g} s")
                try:
                    sock = socket.create_connection((host, port), timeout=left)
                except OSError as exc:
                    raise TransportError(f"cannot connect to {address}: {exc.strerror or exc} (is the peer "
                                         "listening there?)") from None
                sockets.append(sock)
                tune(sock, self.socket_buffer)
                hello = HELLO.pack(MAGIC, VERSION, lane, self.lanes, conn_id, self.session, self.name,
                                   os.urandom(16))
                sock.sendall(hello)
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    reply = recv_struct(sock, CHALLENGE, first_byte_only_on_refusal=True)
                    if reply is None or reply[0] != 1:
                        raise TransportError(f"{address} refused the connection: session mismatch (another plan or "
                                             "communicator on the two sides), or another lane count or protocol "
                                             "version")
                    _, nonce_a, code = reply
                    ends = _ends(sock.getsockname(), sock.getpeername())  # (connector, acceptor) as seen here
                    if not hmac.compare_digest(code, self._code(b"acceptor", hello, nonce_a, ends)):
                        raise TransportError(f"{address} failed authentication: it does not hold this job's secret "
                                             "(a stray or hostile process, or another job), or a relay or NAT sits "
                                             "between the two ends (each end must see the other's address as it is)")
                    sock.sendall(self._code(b"connector", hello, nonce_a, ends))
                    final = bytearray(1)
                    if not recv_exact(sock, memoryview(final)) or final[0] != 1:
                        raise TransportError(f"{address} refused this side's authentication: the two sides hold "
                                             "different secrets (different jobs?)")
                except TimeoutError:
                    raise HocclTimeoutError(f"{address} did not answer the hello within {timeout_s:g} s") from None
                sock.settimeout(None)
        except BaseException:
            for s in sockets:
                s.close()
            raise
        conn = TcpConnection(self, sockets, address)
        self._connections.append(conn)
        return conn

    def _code(self, side: bytes, hello: bytes, nonce_a: bytes, ends: bytes) -> bytes:
        return hmac.new(self._key, side + hello + nonce_a + ends, hashlib.sha256).digest()

    def accept(self, timeout_s: float = 30.0) -> TcpConnection:
        """The next whole connection (every lane authenticated). A connection that fails a check is dropped and
        the wait goes on (see the module docstring); the timeout names the last refusal.

        Hellos are read concurrently, each in a thread of its own with a deadline for the whole handshake
        (``HELLO_TIMEOUT_S``, not per read: a hello sent a byte at a time is dropped at it), at most
        ``MAX_HELLOS`` at once (further sockets are closed unread), so silent, slow or half-open sockets of
        anyone on the host cannot hold the real peer back; ``timeout_s`` is a hard limit."""
        if self._listener is None:
            self.listen()
        assert self._listener is not None
        deadline = time.monotonic() + timeout_s
        while True:
            conn = self._take_hellos()
            if conn is not None:
                return conn
            left = deadline - time.monotonic()
            if left <= 0:
                last = f" (refused {len(self.refused)} connection(s); the last: {self.refused[-1]})" \
                    if self.refused else ""
                partial = sum(len(g) for g in self._pending.values())
                self._drop_pending()  # lanes of a connection that never completed: closed, not left open
                some = f"; closed {partial} lane(s) of connections that never completed" if partial else ""
                raise HocclTimeoutError(f"no peer connected to {self.host}:{self.port} within {timeout_s:g} s"
                                        f"{last}{some}")
            readable, _, _ = select.select([self._listener], [], [], min(left, 0.01))
            if not readable:
                continue
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, TimeoutError, InterruptedError):
                continue
            if self._hellos_running >= MAX_HELLOS:
                self._refuse(addr, f"closed unread: {MAX_HELLOS} handshakes already pending")
                with contextlib.suppress(OSError):
                    sock.close()
                continue
            tune(sock, self.socket_buffer)
            with self._hello_lock:
                self._hellos_running += 1
            threading.Thread(target=self._hello_worker, args=(sock, addr, time.monotonic() + HELLO_TIMEOUT_S),
                             name="hoccl-tcp-hello", daemon=True).start()

    def _hello_worker(self, sock: socket.socket, addr: tuple, deadline: float) -> None:
        """One connection's handshake, by its deadline; the outcome goes to the accepting thread."""
        try:
            got = self._handshake(sock, deadline)
        except (OSError, TransportError, ValueError) as exc:  # a silent, short, slow or broken connection
            got = f"no valid hello ({type(exc).__name__}: {exc})"
        finally:
            with self._hello_lock:
                self._hellos_running -= 1
        self._hellos.put((sock, addr, got))

    def _refuse(self, addr: tuple, why: str) -> None:
        self.refused.append(f"{addr[0]}:{addr[1]}: {why}")
        del self.refused[:-16]

    def _take_hellos(self) -> TcpConnection | None:
        """Group the lanes whose handshakes finished; the first connection with all its lanes, if any."""
        while True:
            try:
                sock, addr, got = self._hellos.get_nowait()
            except queue.Empty:
                return None
            if isinstance(got, str) or self._listener is None:
                self._refuse(addr, got if isinstance(got, str) else "closed: the transport was closing")
                with contextlib.suppress(OSError):
                    sock.close()
                continue
            lane, lanes, conn_id, name = got
            sock.settimeout(None)
            group = self._pending.setdefault(conn_id, {})
            group[lane] = sock
            if len(group) == lanes:
                del self._pending[conn_id]
                conn = TcpConnection(self, [group[i] for i in range(lanes)], f"{addr[0]}:{addr[1]}",
                                     name.rstrip(b"\0").decode(errors="replace"))
                self._connections.append(conn)
                return conn

    def _handshake(self, sock: socket.socket, deadline: float) -> tuple | str:
        """The acceptor's side of one lane's handshake, done by ``deadline`` (monotonic) or failed: (lane, lanes,
        connection id, name), or why it failed."""
        raw = bytearray(HELLO.size)
        if not recv_exact(sock, memoryview(raw), deadline):
            return "closed before its hello"
        hello = bytes(raw)
        magic, version, lane, lanes, conn_id, session, name, _ = HELLO.unpack(hello)
        why = ("not a HOCCL peer" if magic != MAGIC else
               f"protocol version {version}, this side {VERSION}" if version != VERSION else
               f"peer uses {lanes} lanes, this side {self.lanes}" if lanes != self.lanes else
               f"lane {lane} of {lanes}" if lane >= lanes else
               "session mismatch (different plan or communicator on the two sides)" if session != self.session else
               None)
        if why is not None:
            with contextlib.suppress(OSError):
                sock.sendall(CHALLENGE.pack(0, b"\0" * 16, b"\0" * 32))
            return why
        nonce_a = os.urandom(16)
        ends = _ends(sock.getpeername(), sock.getsockname())  # (connector, acceptor) as seen here
        sock.sendall(CHALLENGE.pack(1, nonce_a, self._code(b"acceptor", hello, nonce_a, ends)))
        code = bytearray(32)
        if not recv_exact(sock, memoryview(code), deadline) or \
                not hmac.compare_digest(bytes(code), self._code(b"connector", hello, nonce_a, ends)):
            with contextlib.suppress(OSError):
                sock.sendall(b"\0")
            return "failed authentication (it does not hold this job's secret)"
        sock.sendall(b"\1")
        return lane, lanes, conn_id, name

    def _drop_pending(self) -> None:
        for group in self._pending.values():
            for s in group.values():
                with contextlib.suppress(OSError):
                    s.close()
        self._pending.clear()

    def close(self) -> None:
        for conn in self._connections:
            conn.close()
        self._connections.clear()
        self._drop_pending()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._take_hellos()  # handshakes done meanwhile: their sockets closed (later ones close at their deadline)
        if self._native is not None:
            self._native.close()  # after every connection's threads were joined
