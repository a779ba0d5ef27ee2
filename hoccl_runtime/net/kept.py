"""A call from a kept launch list in one C call (``HOCCL_NET_NATIVE_CALL``, the default where it builds).

A network communicator's call on one stream (HOCCL_NET_ONE_STREAM=2: a FSDP AllGather, a pipeline's send and
receive across nodes) whose launch list is kept (net/template.py) does three things on the training thread: it moves
the list's counts on and writes them into its packed batches (``RunTemplate.issue``), tells the proxy process the
run's gates (``ProcessProxy.submit``: the gates encoded, pickled, written to its socket) and makes the list's driver
calls (``launch_deferred``). Inside FSDP small's step under MPS on a 1x H100 these took 46.8, 54.3 and 44.0 us of
the call's 192 (docs/results/training-history.md, 2026-12-06), each 2-3 times what it costs alone: Python's own
work, with caches cold between layers. Here the three are one C call (``_kept.c``, built once with the host's C
compiler as the native TCP engine is), in the same order:

- the counts are an array (:class:`~.template.Counters`) the C side moves on;
- the proxy process learns a list's form once (:meth:`NativeCalls.make`: its gates' words and counters, pickled),
  and then per run only the counters' moves, in a framed message of plain numbers (:data:`KIND`) that it turns back
  into the same :class:`~.gated.PreparedRun` (:class:`KeptForms`, with ``template.fill_run`` as RunTemplate.issue);
- the driver calls are ``cuMemcpyAsync`` and ``cuStreamBatchMemOp`` through their addresses
  (``FastDriver.entry_points``).

The error paths are those of :func:`~hoccl_runtime.comm.calls.enqueue_counted`: a message that cannot be sent (the
proxy process is gone) opens the run's gates and lets its copies run through; a driver call that fails writes
START on its own and raises, the proxy failing the run at its timeout. A list the C side cannot make (events,
graphs, two GPUs) goes the Python way.
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
import warnings
from array import array
from pathlib import Path
from typing import Any

from ..errors import CudaError, HocclError
from .gated import PreparedRun
from .template import START, fill_run, moved

__all__ = ["NativeCalls", "KeptForms", "KeptRun", "KIND", "library", "native_calls"]

SOURCE = Path(__file__).with_name("_kept.c")
VERSION = 1  # _kept.c's hk_version
KIND = b"K\0\0\0"  # a kept run's message starts so (a pickle starts with b"\x80")
HEAD = struct.Struct("<4sIII")  # KIND, the list's id, START's word, how many counters
FRAME = struct.Struct("!i")  # multiprocessing.connection's length prefix (Connection.recv_bytes reads it)
_STEP, _SLOT = 5, 3  # numbers per driver call and per count written

WHAT, FIX = "the native call path", "HOCCL_NET_NATIVE_CALL=off"
_built: dict[str, Any] = {}  # "lib", or "error": why it could not be built (transport/native.py's load_once)


def library() -> Any:
    """The C side (CDLL: its call lets go of the GIL while it writes and makes driver calls), built once per process;
    raises HocclError saying why it cannot be."""
    from .transport.native import _build, load_once

    def make() -> Any:
        lib = ctypes.CDLL(str(_build(SOURCE.read_bytes(), "hoccl_kept", WHAT, FIX, HocclError)))
        lib.hk_version.restype = ctypes.c_int
        if lib.hk_version() != VERSION:
            raise HocclError(f"{WHAT}'s build does not match this Python side (a stale cache?); remove it from "
                             f"HOCCL_CACHE_DIR, or set {FIX}")
        p, i, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
        lib.hk_issue.restype = i64
        lib.hk_issue.argtypes = [p, i, p, p, p, p, i, i64, i, p, i64, i64, p, i, p, p]
        return lib
    return load_once(_built, make, WHAT, FIX, HocclError)


def _address(a: array) -> int:
    return a.buffer_info()[0]


class NativeKept:
    """A kept list's native form: what ``hk_issue`` takes, and its gates for the proxy (:meth:`NativeCalls.make`)."""

    __slots__ = ("tid", "template", "keys", "before", "after", "slots", "steps", "msg", "by_at", "sends", "recvs",
                 "ends", "streams", "alive")

    def moves(self) -> tuple:
        """The counters' moves of the run the message in ``msg`` told (written there by the C side)."""
        return struct.unpack_from(f"<{len(self.keys)}q", self.msg, self.by_at)


class KeptRun:
    """A native run's gates as the proxy process has them, for this side's error paths (``open_gates`` reads
    ``send`` / ``recv``, made on first use); ``by`` is set once the C side moved the counts."""

    __slots__ = ("kept", "by", "_run")

    def __init__(self, kept: NativeKept):
        self.kept, self.by, self._run = kept, None, None

    def _made(self) -> PreparedRun:
        if self._run is None:
            k = self.kept
            self._run = fill_run(PreparedRun(k.template.plan, k.template.parity), k.sends, k.recvs, k.ends, self.by)
        return self._run

    @property
    def send(self) -> dict:
        return self._made().send if self.by is not None else {}

    @property
    def recv(self) -> dict:
        return self._made().recv if self.by is not None else {}


class NativeCalls:
    """A network communicator's native calls (one per communicator with a proxy process)."""

    def __init__(self, proxy: Any, arena: Any, node: int):
        from .._cuda import fast_driver

        self.proxy, self.arena, self.node = proxy, arena, node
        self.lib = library()
        fast = fast_driver()
        points = getattr(fast, "entry_points", None) if fast is not None else None
        if not points or not all(points):
            raise HocclError("the native call path needs the CUDA driver's cuMemcpyAsync and cuStreamBatchMemOp_v2 "
                             "(libcuda.so.1); set HOCCL_NET_NATIVE_CALL=off")
        self.copy, self.memops = points
        self._next = 0
        self.calls = 0  # calls issued here (tests and benchmarks read it)
        # (plan, stream, buffers) -> (plan, its list's native form) of calls checked already (kept_list's checks
        # hold for the same plan on the same buffers: they cost 37 us a call inside FSDP small's step)
        self._checked: dict[tuple, tuple] = {}

    def make(self, ex: Any, template: Any, key: Any, start: Any) -> NativeKept | None:
        """``template``'s native form, its gates told to the proxy process; None where it has none (its list holds
        more than copies and batches on one GPU, or the proxy process did not take the form)."""
        if template.steps is None or template.device not in (None, ex_device(ex)):
            return None
        k = NativeKept()
        self._next += 1
        k.tid, k.template, k.alive = self._next, template, True
        keys = list(template.before)
        pos = {key: i for i, key in enumerate(keys)}
        k.keys = array("q", [ex._counts.index(key) for key in keys])
        k.before = array("q", [template.before[key] for key in keys])
        k.after = array("q", [template.after[key] for key in keys])
        k.slots = array("q", [v for block, at, key, value in template.slots
                              for v in (ctypes.addressof(block) + at, -1 if key is START else pos[key], value)])
        k.steps = array("q", [v for step in template.steps for v in step])
        k.sends = [(w, g, d, pos[c], n, nb) for w, g, d, c, n, nb in template.sends]
        k.recvs = [(w, g, d, pos[c], n, nb) for w, g, d, c, n, nb in template.recvs]
        k.ends = [(f, pos[c], n) for f, c, n in template.ends]
        k.streams = [c[1] for _, c, _ in template.ends]  # an end counter's key is ("end", stream)
        size = HEAD.size + 8 * (1 + len(keys))  # the START count, then the moves
        k.msg = ctypes.create_string_buffer(FRAME.size + size)
        FRAME.pack_into(k.msg, 0, size)
        HEAD.pack_into(k.msg, FRAME.size, KIND, k.tid, self.arena.word(start), len(keys))
        k.by_at = FRAME.size + HEAD.size + 8
        word = self.arena.word
        dropped = ex._templates.dropped
        forget = [d.tid for d in dropped]
        dropped.clear()
        form = ("template", k.tid, key, [(w, word(g), word(d), p, n, nb) for w, g, d, p, n, nb in k.sends],
                [(w, word(g), word(d), p, n, nb) for w, g, d, p, n, nb in k.recvs],
                [(word(f), p, n) for f, p, n in k.ends], forget, template.parity)
        try:
            self.proxy.send(form)
        except HocclError:
            return None  # the proxy process is gone: the Python path meets that and says so
        return k

    def call(self, ex: Any, plan: Any, buffers: dict, stream: int, counted: list, key: Any) -> bool:
        """Issue a call of ``plan`` on ``stream`` (HOCCL_NET_ONE_STREAM=2, ``counted``: the stream's START counter,
        comm/calls.py's counted_start) from its kept list in one C call; False (nothing done) where it has none yet
        or the list has no native form: the Python path then runs it."""
        seen = (id(plan), stream, *[(b.ptr, b.nbytes, b.device) for pair in buffers.values() for b in pair],
                ex.next_parity())
        hit = self._checked.get(seen)
        if hit is not None and hit[0] is plan and hit[1].alive:
            k = hit[1]
            template = k.template
        else:
            template = ex.kept_list(plan, buffers, stream)
            if template is None:
                return False
            k = template.native
            if k is None:
                k = template.native = self.make(ex, template, key, counted[0]) or False
            if not k:
                return False
            if len(self._checked) >= 256:
                self._checked.pop(next(iter(self._checked)))
            self._checked[seen] = (plan, k)
        counter, batch, n = counted
        n = counted[2] = moved(n, 1)
        run = KeptRun(k)
        counts, lib = ex._counts.table, self.lib

        def issue(fd: int) -> int:
            rc = lib.hk_issue(_address(counts), len(k.keys), _address(k.keys), _address(k.before),
                              _address(k.after), _address(k.slots), len(k.slots) // _SLOT, n, fd, k.msg,
                              len(k.msg), k.by_at, _address(k.steps), len(k.steps) // _STEP, self.copy, self.memops)
            run.by = k.moves()  # the counts moved whatever came of the rest
            return rc

        rc = self.proxy.submit_with((key, run, (counter, None), n), issue)
        by = run.by
        ends = [(f, moved(c, by[p])) for f, p, c in k.ends]
        if rc <= 0:  # the list is launched (below, where the message could not be sent)
            ex.streams_end_at(zip(k.streams, ends, strict=True))
        if rc == 0:
            ex.count_reissued()
            self.calls += 1
            return True
        if rc < 0:  # the message was not sent: the proxy process is gone
            error = self.proxy.failed_send(run)
            with contextlib.suppress(Exception):  # the proxy's error is the one to raise
                template.launch()  # the copies run through, their end counts written: nothing waits for them
            raise error
        # a driver call failed: its run was never launched whole
        ex.streams_end_at((s, (f, moved(c, -1))) for s, (f, c) in zip(k.streams, ends, strict=True))
        step, err = (rc >> 32) - 1, rc & 0xFFFFFFFF
        batch.set_value(0, n).enqueue(stream)  # START on its own: the proxy takes the call and fails it
        what = "cuMemcpyAsync" if k.steps[_STEP * step] == 0 else "cuStreamBatchMemOp"
        raise CudaError(f"node {self.node}: enqueuing the copies of plan {plan.plan_id}: {what} failed: "
                        f"{_error_text(err)}")


def native_calls(proxy: Any, arena: Any, node: int) -> NativeCalls | None:
    """A communicator's :class:`NativeCalls` as HOCCL_NET_NATIVE_CALL says: ``auto`` where the C side builds and the
    driver's entry points are there (else None, and the Python path, with a warning saying why), ``on`` the same but
    raising where it cannot, ``off`` None."""
    from ..settings import env_choice

    how = env_choice("HOCCL_NET_NATIVE_CALL", "auto", ("auto", "on", "off"))
    if how == "off":
        return None
    try:
        return NativeCalls(proxy, arena, node)
    except HocclError as exc:
        if how == "on":
            raise
        if not _warned:
            _warned.append(True)
            warnings.warn(f"HOCCL: calls take the Python path: {exc}", RuntimeWarning, stacklevel=3)
        return None


_warned: list = []


def ex_device(ex: Any) -> int | None:
    """The GPU a network executor's buffers are on (one GPU per node)."""
    devices = set(ex._dev.values())
    return next(iter(devices)) if len(devices) == 1 else None


def _error_text(err: int) -> str:
    from .._cuda import _driver_error_text, driver

    try:
        cu = driver()
        return _driver_error_text(cu, cu.CUresult(err))
    except Exception:  # noqa: BLE001 - best effort text for an error we are already raising
        return f"CUresult {err}"


class KeptForms:
    """The proxy process's side: the forms of the kept lists it was told (``("template", ...)`` messages), and the
    runs that their :data:`KIND` messages stand for."""

    def __init__(self, words: Any):
        self._words = words
        self._forms: dict[int, tuple] = {}

    def learn(self, message: tuple) -> None:
        """A list's form (its flags as words of the shared flags, made Flags here once), and the lists to forget."""
        from ..flags import Flag

        _, tid, key, sends, recvs, ends, forget, parity = message
        for old in forget:
            self._forms.pop(old, None)
        words = self._words
        sides = [[(w, Flag(words, g), Flag(words, d), k, c, nb) for w, g, d, k, c, nb in side]
                 for side in (sends, recvs)]
        self._forms[tid] = (key, *sides, [(Flag(words, f), k, c) for f, k, c in ends], parity)

    def key_of(self, data: bytes) -> Any:
        tid = HEAD.unpack_from(data, 0)[1]
        form = self._forms.get(tid)
        if form is None:
            raise HocclError(f"the training process sent a run of kept list {tid}, whose form it never sent (a "
                             "protocol error: please report it; HOCCL_NET_NATIVE_CALL=off avoids this path)")
        return form[0]

    def call(self, data: bytes) -> tuple[Any, Any, int, int]:
        """(its list's key, ``rebuild(plan)`` that makes its run, START's word, START's count) of a :data:`KIND`
        message."""
        key = self.key_of(data)
        _, tid, start_word, nkeys = HEAD.unpack_from(data, 0)
        count, *by = struct.unpack_from(f"<{1 + nkeys}q", data, HEAD.size)
        _, sends, recvs, ends, parity = self._forms[tid]
        return key, lambda plan: fill_run(PreparedRun(plan, parity), sends, recvs, ends, by), start_word, count
