"""The TCP transport's lanes in native threads (``HOCCL_TCP_ENGINE=native``): the C engine ``_lanes.c``, built once
with the host's C compiler and kept in ``HOCCL_CACHE_DIR``, and the connection that drives it
(:class:`NativeLanes`, a :class:`~.tcp.TcpConnection`'s lanes when its transport was made with ``engine="native"``).

Why: with the Python engine every lane has a sender and a receiver thread of the interpreter that also runs the
network proxy's driving loop. Each frame a lane sends or receives takes that interpreter's lock (the GIL) at least
once, and the loop waits for the lanes' turns as they wait for its: inside training the proxy's 10 us poll sleeps
lasted a median longest of 121-136 us per call, against 17 us in a process of its own (docs/results/training-history.md,
2026-12-04). The native engine's threads never take the GIL: they block in the kernel, check every frame's header
(CRC, magic, version, lane, sequence, the region's bounds) and land its payload in the registered region as the
Python lanes do, and queue what happened for the connection's ``poll``, which the loop calls anyway. The frames on
the wire are the same, so a native side talks to a Python side. Measured (docs/results/training-history.md,
2026-12-05): those sleeps 29-33 us, and FSDP over two TCP nodes on one H100 0.99-1.12x as fast as on the Python lanes.

The handshake stays in Python (:class:`~.tcp.TcpTransport`); the engine takes the sockets once it is done. Where no
compiler builds the engine, ``native`` raises a :class:`TransportError` that says so, and ``auto`` uses the Python
lanes.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import hashlib
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import HocclError, TransportError
from ...settings import cache_dir, env_choice, env_flag, env_int
from .frames import FRAME_BYTES, not_a_frame, out_of_order, outside, receive_failure

__all__ = ["ENGINES", "engine_library", "native_lanes", "NativeRegions", "NativeLanes"]

ENGINES = ("thread", "native", "auto")
SOURCE = Path(__file__).with_name("_lanes.c")
EVENT_WORDS = 14
SENT, RECEIVED, ENDED, ERROR = range(4)
_E_SEND, _E_RECV, _E_SHORT_HEAD, _E_SHORT_PAYLOAD, _E_CRC, _E_MAGIC, _E_SEQ, _E_REGION, _E_NOMEM = range(1, 10)

_lock = threading.Lock()
_built: dict[str, Any] = {}  # "lib" -> (CDLL, PyDLL), or "error" -> why it could not be built


def _ours(path: Path) -> bool:
    """Whether ``path`` is this user's and nobody else may write it (a library loaded from a folder another user
    can write to would run that user's code as this one)."""
    st = path.stat()
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def _build(source: bytes, stem: str = "hoccl_lanes", what: str = "the native TCP engine",
           fix: str = "HOCCL_TCP_ENGINE=thread", error: type[HocclError] = TransportError) -> Path:
    """The shared library for C ``source``: the cached one, or compiled now (``$CC``, else ``cc``). ``stem`` names
    the file, ``what`` the library in the errors (of class ``error``), which say ``fix``: a setting that does without it
    (hoccl_runtime/net/kept.py builds its native calls here too)."""
    tag = hashlib.sha256(source + platform.machine().encode() + sys.version.encode()).hexdigest()[:16]
    for folder in (cache_dir(), Path(tempfile.gettempdir()) / f"hoccl-{os.getuid()}"):
        path = folder / f"{stem}-{tag}.so"
        with contextlib.suppress(OSError):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not _ours(folder):
                continue
            if path.exists():
                if _ours(path):
                    return path
                continue
            break
    else:
        raise error(f"no folder to build {what} in ({cache_dir()}, or one under the temporary folder, that is this "
                    f"user's alone); set HOCCL_CACHE_DIR to one, or {fix}")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise error(f"{what} needs a C compiler (cc or gcc, or $CC) to build once; install one, or set {fix}")
    fd, tmp = tempfile.mkstemp(prefix=f"{stem}-", suffix=".so", dir=folder)
    os.close(fd)
    cmd = [*cc.split(), "-O2", "-shared", "-fPIC", "-pthread", "-o", tmp, "-x", "c", "-"]
    try:
        done = subprocess.run(cmd, input=source, capture_output=True, timeout=120)
        if done.returncode != 0:
            raise error(f"building {what} failed ({' '.join(cmd)}): "
                        f"{done.stderr.decode(errors='replace').strip()[-600:]}; set {fix}")
        os.replace(tmp, path)  # atomic: processes that build at once each land a whole file
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise error(f"building {what} failed ({exc}); set {fix}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return path


def load_once(built: dict, make: Any, what: str, fix: str, error: type[HocclError] = TransportError) -> Any:
    """``make()`` (build and load a C library: :func:`_build`), once per process: ``built`` keeps what it gave, or why
    it failed, which every later call raises again as ``error`` (naming ``what`` and the setting ``fix`` that does
    without it)."""
    with _lock:
        if "lib" in built:
            return built["lib"]
        if "error" in built:
            raise error(built["error"])
        try:
            if sys.byteorder != "little" or not sys.platform.startswith("linux"):
                raise error(f"{what} runs on little-endian Linux, not {sys.platform} ({sys.byteorder}-endian); set "
                            f"{fix}")
            built["lib"] = make()
        except HocclError as exc:
            built["error"] = str(exc)
            raise
        except OSError as exc:
            built["error"] = f"cannot load {what} ({exc}); set {fix}"
            raise error(built["error"]) from None
        return built["lib"]


def engine_library() -> tuple[Any, Any]:
    """(CDLL, PyDLL) of the engine: the first lets go of the GIL in its calls (the waits), the second keeps it (the
    short calls, which only take the engine's own locks). Built once per process; raises TransportError saying why
    it cannot be."""
    def make() -> tuple[Any, Any]:
        path = _build(SOURCE.read_bytes())
        free, held = ctypes.CDLL(str(path)), ctypes.PyDLL(str(path))
        for lib in (free, held):
            _declare(lib)
        if held.hl_event_words() != EVENT_WORDS:
            raise TransportError("the native TCP engine's build does not match this Python side (a stale cache?)")
        return free, held
    return load_once(_built, make, "the native TCP engine", "HOCCL_TCP_ENGINE=thread")


def _declare(lib: Any) -> None:
    p, i, u32, u64, i64, d = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64, \
        ctypes.c_double
    for name, res, args in (("hl_event_words", i, ()), ("hl_engine", p, ()), ("hl_region", i, (p, u32, u64, u64)),
                            ("hl_engine_free", None, (p,)), ("hl_open", p, (p, p, i)),
                            ("hl_post", i, (p, i, i64, u32, u32, u64, u64, u32, u64, u32, u64, u64)),
                            ("hl_post_after", i, (p, i, i64, u32, u32, u64, u64, u32, u64, u32, u64, u64, u64,
                                                  ctypes.c_int32)),
                            ("hl_poll", i, (p, p, i, d)), ("hl_arm", i, (p, i, p)), ("hl_cancel", i, (p,)),
                            ("hl_spin", None, (p, i64)), ("hl_stop_senders", i, (p, d)), ("hl_join", None, (p,)),
                            ("hl_free", None, (p,))):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, list(args)


_open: weakref.WeakSet = weakref.WeakSet()  # connections whose threads may still run (in this process)
os.register_at_fork(after_in_child=_open.clear)  # a forked child has none of them: it must not touch its parent's


@atexit.register
def _close_at_exit() -> None:
    """Before the interpreter frees the regions' arrays, end the threads of every connection left open: a thread that
    still received would write into freed memory while the process exits."""
    for lanes in list(_open):
        with contextlib.suppress(Exception):
            lanes.close(0.0)


def spin_us() -> int:
    """How long a lane's threads look again for work (a part to send, bytes to read) before they block, us
    (HOCCL_TCP_SPIN_US; 0, the default: they block at once; see _lanes.c, "Spinning")."""
    try:
        return env_int("HOCCL_TCP_SPIN_US", 0, 0, 1_000_000)
    except HocclError as exc:
        raise TransportError(str(exc)) from None


def native_lanes(engine: str | None, receive: str) -> NativeRegions | None:
    """The engine a :class:`~.tcp.TcpTransport` runs its lanes on: ``engine`` (``HOCCL_TCP_ENGINE`` where None)
    "thread" (None: the Python lanes), "native" (the engine, or a TransportError saying why not) or "auto" (the
    engine where it builds, else None)."""
    try:
        engine = engine if engine is not None else env_choice("HOCCL_TCP_ENGINE", "auto", ENGINES)
    except HocclError as exc:
        raise TransportError(str(exc)) from None
    if engine not in ENGINES:
        raise TransportError(f"engine={engine!r}: choose one of {', '.join(ENGINES)}")
    if engine == "thread" or (engine == "auto" and receive != "thread"):
        return None
    if receive != "thread":
        raise TransportError(f"HOCCL_TCP_ENGINE=native receives in the engine's threads; HOCCL_TCP_RECEIVE={receive} "
                             "is for the Python lanes (set one of them back)")
    try:
        return NativeRegions()
    except TransportError:
        if engine == "auto":
            return None
        raise


class NativeRegions:
    """A transport's side of the engine: its regions as the engine's receiving threads see them (base address and
    size by id), and the connections it opens (:meth:`open`)."""

    def __init__(self) -> None:
        self.free, self.held = engine_library()
        self.handle = self.held.hl_engine()
        if not self.handle:
            raise TransportError("the native TCP engine could not start (no memory)")

    def add(self, region_id: int, address: int, nbytes: int) -> None:
        if self.held.hl_region(self.handle, region_id, address, nbytes) != 0:
            raise TransportError(f"the native TCP engine could not register region {region_id} (no memory)")

    def open(self, conn: Any) -> NativeLanes:
        return NativeLanes(conn, self)

    def close(self) -> None:
        if self.handle:
            self.held.hl_engine_free(self.handle)
            self.handle = None


def _why(row: list[int]) -> str:
    """An error event of the engine in the Python lanes' words (frames.py, tcp.py)."""
    code, a, b, c, f = row[13], row[5], row[6], row[7], row[8]
    if code == _E_SEND:
        reset = b in (errno.ECONNRESET, errno.EPIPE)
        return "the peer closed the connection (reset while sending: process gone?)" if reset else \
            f"send: {os.strerror(b)}"
    if code == _E_RECV:
        why = receive_failure(ConnectionResetError() if b in (errno.ECONNRESET, errno.EPIPE) else
                              OSError(b, os.strerror(b)))
        return f"payload: {why}" if a else why
    if code == _E_SHORT_HEAD:
        return f"stream ended after {b} of {FRAME_BYTES} bytes (peer closed mid-frame)"
    if code == _E_SHORT_PAYLOAD:
        return "the peer closed the connection mid-write"
    if code == _E_CRC:
        return "corrupt frame header (CRC mismatch)"
    if code == _E_MAGIC:
        return not_a_frame((c & 0xFFFFFFFF).to_bytes(4, "little"), a, b)
    if code == _E_SEQ:
        return out_of_order(b, c)
    if code == _E_REGION:
        return outside(a, b, c, None if f < 0 else f)
    return "the native TCP engine ran out of memory, or could not start its threads"


class NativeLanes:
    """A :class:`~.tcp.TcpConnection`'s lanes as the engine's threads: :meth:`post` queues each part of a write on
    its lane (no frame leaves from the caller's thread), :meth:`gather` turns what the threads did into the
    connection's completions (through its own bookkeeping: ``_arrived``, ``_frame_sent``, ``_lane_ended``,
    ``_fail``), :meth:`close` ends them."""

    def __init__(self, conn: Any, regions: NativeRegions):
        self.conn, self.free, self.held = conn, regions.free, regions.held
        self.wake = env_flag("HOCCL_NET_WAKE", True)  # the driving loop's pause ends at the next event (tcp.wait)
        self.gates_opened = 0  # landing gates the receiving threads opened (arm)
        self.rows = np.zeros((64, EVENT_WORDS), np.int64)
        fds = (ctypes.c_int * len(conn.lanes))(*(s.fileno() for s in conn.lanes))
        self.handle = self.held.hl_open(regions.handle, fds, len(conn.lanes))
        if not self.handle:
            raise TransportError("the native TCP engine could not open the connection (no memory)")
        self.held.hl_spin(self.handle, spin_us() * 1000)
        self.pid = os.getpid()
        _open.add(self)

    def post(self, cuts: list, items: list, after: tuple[int, int] | None = None) -> None:
        """Queue each part of a write on its lane; with ``after`` (a flag's address, a count), off the lanes until the
        int32 there reaches the count (the connection's watcher thread then queues it)."""
        conn, ahead = self.conn, () if after is None else after
        post = self.held.hl_post if after is None else self.held.hl_post_after
        for (lane, _, _), item in zip(cuts, items, strict=True):
            write_id, part, parts, local, off, n, rregion, roff, imm, rbase, total = item
            if post(self.handle, lane, write_id, part, parts, local.address + off, n, rregion, roff, imm, rbase,
                    total, *ahead) != 0:
                conn._fail(lane, "its sender has stopped (an earlier send failed)")
                raise conn._error or TransportError(f"connection to {conn.who} is closed")

    def cancel(self) -> int:
        """Drop the parts still waiting for their flags (:meth:`post`'s ``after``): how many."""
        return self.held.hl_cancel(self.handle) if self.handle is not None and self.pid == os.getpid() else 0

    def arm(self, gates: list) -> bool:
        """Replace the landing gates the receiving threads open (:meth:`~.base.Connection.arm`); True."""
        if self.handle is None or self.pid != os.getpid():
            return False
        rows = np.array(gates, np.int64).reshape(-1, 6)
        if self.held.hl_arm(self.handle, len(rows), rows.ctypes.data) != 0:
            raise TransportError("the native TCP engine could not arm its landing gates (no memory)")
        return True

    def gather(self, timeout_s: float) -> bool:
        """What the engine's threads did, into the connection's completions, waiting (without the GIL) up to
        ``timeout_s`` until one is ready (a write's parts but the last make none); True."""
        deadline = time.monotonic() + timeout_s
        while True:
            wait = deadline - time.monotonic() if self.conn._completions.empty() else 0.0
            if not self._take(wait) or wait <= 0 or not self.conn._completions.empty():
                return True

    def _take(self, wait: float) -> int:
        """Turn up to a batch of the engine's events into the connection's bookkeeping, waiting up to ``wait`` s for
        the first: how many there were."""
        conn, rows = self.conn, self.rows
        if self.handle is None:
            return 0
        k = (self.free if wait > 0 else self.held).hl_poll(self.handle, rows.ctypes.data, len(rows), max(wait, 0.0))
        trace = conn.transport.trace
        for row in rows[:k].tolist():
            kind, lane, write_id, part, parts, region, off, n, imm, base, total, t0, t1, opened = row
            if kind == RECEIVED:
                self.gates_opened += opened
                if trace is not None:
                    trace.append(("recv", lane, write_id, part, n, t0 * 1e-9, t1 * 1e-9))
                    if opened:  # this frame's landing opened a gate (arm): at the payload's end, as the store
                        trace.append(("gate", lane, write_id, part, total, t1 * 1e-9, t1 * 1e-9))
                conn._arrived((write_id, part, parts, region, off, n, imm, base, total, None))
            elif kind == SENT:
                if trace is not None:
                    trace.append(("send", lane, write_id, part, n, t0 * 1e-9, t1 * 1e-9))
                conn._seq[lane] += 1
                conn._frame_sent(lane, write_id, n, imm, region, base, total)
            elif kind == ENDED:
                conn._lane_ended(lane)
            else:
                conn._fail(lane, _why(row))
        return k

    def close(self, drain_timeout_s: float) -> None:
        """Let the queued frames leave (up to ``drain_timeout_s``), shut every lane down, join the threads, then close
        the sockets (never before: a thread still in ``recv`` would read a reused descriptor)."""
        if self.handle is None:
            return
        if self.pid != os.getpid():  # a forked child's copy: the threads and the sockets' other end are its parent's
            self.handle = None     # (a shutdown here would cut the parent's connection)
            return
        self.free.hl_stop_senders(self.handle, max(0.0, drain_timeout_s))
        for sock in self.conn.lanes:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # the receiving threads return, a sender still blocked fails
        self.free.hl_join(self.handle)
        while self._take(0.0):  # what the threads did last (frames that left while closing: the trace's rows)
            pass
        self.held.hl_free(self.handle)
        self.handle = None
        for sock in self.conn.lanes:
            sock.close()
