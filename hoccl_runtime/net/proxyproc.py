"""The network proxy in a process of its own, so that it never waits for the training loop's GIL.

Why: the proxy of :class:`~hoccl_runtime.comm.net.NetCommunicator` is the thread that sees a call's START, drives
the run over TCP (its lane threads too) and gives DONE. As Python threads of the training process they run only
when the training loop's thread lets go of the GIL, which a busy loop does every 5 ms (``sys.getswitchinterval``)
and a CUDA call that blocks holding it never does (the deadlock ``HOCCL_NET_AHEAD`` bounds). On the 1x H200, two
TCP "nodes" of the small models ran at 0.62x (pipeline) and 0.84x (FSDP, reduce by HOCCL) of NCCL, whose proxy is a
C++ thread with no GIL.

How: the driving half of the GPU executor needs no CUDA (:class:`~hoccl_runtime.net.gpu.GatedNodeExecutor`: it
opens gates and reads counters in host memory the GPU reaches). So the staging rings and every flag live in one
:class:`SharedArena` (a memfd the training process registers with CUDA and the proxy process maps), the training
process enqueues each call's gated copies as before (:meth:`~hoccl_runtime.net.gpu.GpuNodeExecutor.prepare`, no
transport), and sends the proxy process a few words per call over a socket pair: the call's key (the process
compiles the same plan from it), the gates' flag words and counts, and its stream's START/DONE words. The proxy
process owns the TCP transport, runs the calls in order with a :class:`~hoccl_runtime.comm.net.CallProxy`, and
reports the first error. It counts the calls it took and those it gave DONE in the arena (a call's DONE comes once
its copies are through, its last writes possibly still leaving); the training process reads them to wait
(``synchronize``) and, should the proxy process die, releases the calls it left (gates opened, DONE given, the
error raised by the next call), so no stream waits forever.

``HOCCL_NET_PROXY=thread`` keeps the proxy a thread of the training process (the path before this one).
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from ..errors import HocclError, HocclTimeoutError, TransportError
from ..flags import Flag, as_int32
from .arena import SharedArena, decode, encode
from .callproxy import CallProxy, DoneOnce, StartFlag
from .gated import GatedNodeExecutor, open_gates
from .kept import KIND, KeptForms
from .trace import write_trace
from .transport.base import Region, Transport

__all__ = ["ProcessProxy", "main"]

_ERRORS = ("TransportError", "PlanError", "HocclTimeoutError", "CollectiveError", "HocclError")


def _rebuilt(kind: str, message: str) -> BaseException:
    from .. import errors

    cls = getattr(errors, kind, None) if kind in _ERRORS else None
    return (cls or HocclError)(message if cls else f"{kind}: {message}")


class ProcessProxy:
    """The training process's side of the proxy process: the same calls as :class:`~hoccl_runtime.comm.net.CallProxy`
    (``submit``, ``error``, ``wait_idle``, ``wait_pending``, ``close``), plus :meth:`request` for set-up.

    Should the proxy process die, this side releases the calls it left (:meth:`_drain`)."""

    def __init__(self, arena: SharedArena, *, name: str, timeout_s: float):
        self._arena, self.timeout_s, self.name = arena, timeout_s, name
        # calls the proxy process took (reset START) and finished (gave DONE), and whether it has told an error (read
        # on every call: a word of memory, not a system call)
        self._counters = arena.flag_pool(3)
        self._taken, self._done, self._failed = (self._counters.allocate() for _ in range(3))
        self._submitted = 0
        self._pending: deque = deque()  # (number, prepared, (START, DONE)) of calls perhaps not finished yet
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._closing = False
        self._draining = False
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)  # what this process imports, the proxy does
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "hoccl_runtime.net.proxyproc", str(theirs.fileno()), str(arena.fd),
                 str(arena.word(self._taken)), str(arena.word(self._done)), str(arena.word(self._failed))],
                pass_fds=(theirs.fileno(), arena.fd), env=env, stdin=subprocess.DEVNULL)
        except OSError as exc:
            ours.close()
            raise HocclError(f"cannot start the network proxy process ({exc.strerror or exc}); set "
                             "HOCCL_NET_PROXY=thread to drive the network from a thread of this process") from None
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        self._send_lock = threading.Lock()
        self._watcher = threading.Thread(target=self._watch, name=f"{name}-watch", daemon=True)
        self._watcher.start()

    # --- set-up ---------------------------------------------------------------------------------------------------
    def send(self, message: tuple) -> None:
        """Send ``message`` (plain data: the proxy process reads it with ``Connection.recv``). Pickled here with
        pickle itself: ``Connection.send``'s ForkingPickler sets a pickler up per message, which a call pays for."""
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        try:
            with self._send_lock:
                self._conn.send_bytes(data)
        except OSError:
            raise self._gone() from None

    def send_arena(self, message: tuple, arena: SharedArena) -> None:
        """Send ``message`` and then ``arena``'s memfd (SCM_RIGHTS over the socket pair): the proxy process maps
        it."""
        from multiprocessing.reduction import send_handle

        try:
            with self._send_lock:
                self._conn.send(message)
                send_handle(self._conn, arena.fd, self._proc.pid)
        except OSError:
            raise self._gone() from None

    def request(self, message: tuple, timeout_s: float) -> Any:
        """Send ``message`` and return the proxy process's answer to it (or raise the error it reports)."""
        self.send(message)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                ready = self._conn.poll(max(0.0, min(left, 0.05)))
            except OSError:
                raise self._gone() from None
            if ready:
                try:
                    reply = self._conn.recv()
                except (EOFError, OSError):
                    raise self._gone() from None
                if reply[0] == "error":
                    self._error = _rebuilt(reply[1], reply[2])
                    raise self._error
                return reply[1]
            if self._proc.poll() is not None:
                raise self._gone()
            if left <= 0:
                raise HocclTimeoutError(f"{self.name}: the network proxy process did not answer {message[0]!r} "
                                        f"within {timeout_s:g} s")

    def _gone(self) -> HocclError:
        rc = self._proc.poll()
        if self._error is not None:
            return self._error  # type: ignore[return-value]
        how = "is not answering" if rc is None else f"exited with code {rc}"
        return TransportError(f"{self.name}: the network proxy process (pid {self._proc.pid}) {how}; its output, "
                              "above, says why (HOCCL_NET_PROXY=thread drives the network from this process instead)")

    # --- calls ----------------------------------------------------------------------------------------------------
    def submit(self, call: tuple) -> None:
        """``call``: (key, prepared run or None, (START, DONE) of its stream, START's count or None). A count: START
        is a counter the stream moves on to it and DONE is None, the stream waiting for none (callproxy.StartFlag).
        Raises if the proxy process is gone (its copies' gates opened first), before the caller's stream would wait
        for the call."""
        key, prepared, pair, count = call
        self._trim()  # what the proxy process finished is let go here: a training loop may never synchronize
        with self._lock:
            self._submitted += 1
            self._pending.append((self._submitted, prepared, pair, count))
        arena = self._arena
        message = ("call", key, None if prepared is None else encode(prepared, arena), arena.word(pair[0]),
                   None if pair[1] is None else arena.word(pair[1]), count)
        try:
            self.send(message)
        except HocclError as exc:  # the proxy process is gone: this call's copies must not wait for it
            raise self.failed_send(prepared, exc) from None  # before the caller's stream would wait for its DONE

    def submit_with(self, call: tuple, issue: Any) -> int:
        """:meth:`submit` where ``issue(fd)`` writes the message to the socket itself (net/kept.py's native call,
        which enqueues the call's copies too), under the locks of the pending list and of the socket; returns what
        ``issue`` returned (below 0: the message was not sent, see :meth:`failed_send`)."""
        self._trim()
        with self._send_lock, self._lock:
            self._submitted += 1
            self._pending.append((self._submitted, *call[1:]))
            return issue(self._conn.fileno())

    def failed_send(self, prepared: Any, exc: BaseException | None = None) -> BaseException:
        """A call's message could not be sent: the proxy process is gone, or is killed now (if it only stopped
        answering; the watcher releases what it left). The call's gates are opened, so its copies do not wait for it;
        returns the error to raise."""
        self._error = self._error or exc or self._gone()
        if prepared is not None:
            open_gates(prepared)
        with contextlib.suppress(OSError):
            self._proc.kill()
        return self._error

    @property
    def error(self) -> BaseException | None:
        if self._error is None and self._failed.read():
            try:
                while self._conn.poll(0):
                    reply = self._conn.recv()
                    if reply[0] == "error":
                        self._error = _rebuilt(reply[1], reply[2])
                        break
            except (EOFError, OSError):
                pass  # the watcher says why
        return self._error

    def _finished(self) -> int:
        return self._submitted - ((self._submitted - self._done.read()) & 0xFFFFFFFF)

    def _unfinished(self) -> int:
        return (self._submitted - self._done.read()) & 0xFFFFFFFF

    def wait_idle(self, timeout_s: float) -> bool:
        return self.wait_pending(0, timeout_s, on_error=False)

    def wait_pending(self, most: int, timeout_s: float, on_error: bool = True) -> bool:
        deadline = time.monotonic() + timeout_s
        while self._unfinished() > most:
            if on_error and self.error is not None:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(50e-6)
        self._trim()
        return True

    def _trim(self) -> None:
        done = self._finished()
        with self._lock:
            while self._pending and self._pending[0][0] <= done:
                self._pending.popleft()

    def _watch(self) -> None:
        rc = self._proc.wait()
        if self._closing:
            return
        if self._error is None:
            self._error = TransportError(f"{self.name}: the network proxy process (pid {self._proc.pid}) exited with "
                                         f"code {rc}; its output, above, says why. This communicator's calls since "
                                         "then moved nothing")
        self._drain()

    def _drain(self) -> None:
        """Release every call the proxy process did not finish, in order, as its thread would have: the one it took
        (START seen) at once, the others once their stream reaches them. Runs in the watcher thread, once the proxy
        process is gone."""
        with self._lock:
            if self._draining:
                return
            self._draining = True
        taken = self._taken.read()
        while True:
            done = self._finished()
            with self._lock:
                while self._pending and self._pending[0][0] <= done:
                    self._pending.popleft()
                if not self._pending:
                    if self._closing or self._submitted == done:
                        self._draining = False
                        return
                    item = None
                else:
                    item = self._pending[0]
            if item is None:  # nothing left for now; calls submitted later are drained as they come
                self._draining = False
                return
            number, prepared, (start, done_flag), count = item
            mark = StartFlag(start, count)
            if number > taken:  # not taken yet: wait until its stream reaches it
                deadline = time.monotonic() + self.timeout_s
                while not mark.seen():
                    if time.monotonic() > deadline:
                        self._draining = False
                        return  # the stream never got here; close() frees what is left
                    time.sleep(1e-3)
                mark.reset()
            if prepared is not None:
                open_gates(prepared)
            if done_flag is not None:
                done_flag.write(1)
            self._done.write(as_int32(number))

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the proxy process: it releases the calls whose streams never reached them, leaves its peers, and
        exits (killed after ``timeout_s``)."""
        if self._proc.poll() is None:
            with contextlib.suppress(Exception):
                self.send(("close",))
            try:
                self._proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        self._closing = True
        with contextlib.suppress(OSError):
            self._conn.close()


# --- the proxy process ----------------------------------------------------------------------------------------------
class _ArenaExecutor(GatedNodeExecutor):
    """The driving half over the arena's rings, at the offsets the training process's executor carved them."""

    def __init__(self, plan: Any, node: int, arena: SharedArena, rings: dict, transport: Transport, *, slots: int,
                 timeout_s: float, overlap: bool = False):
        self._arena, self._rings = arena, rings
        L = plan.topology.gpus_per_node
        placeholders = {r: (np.zeros(1, np.uint8), np.zeros(1, np.uint8)) for r in range(node * L, (node + 1) * L)}
        super().__init__(plan, node, placeholders, transport, slots=slots, timeout_s=timeout_s, reuse=True,
                         overlap=overlap, _check_sizes=False)

    def _make_ring(self, kind: str, rank: int, nbytes: int) -> tuple[object, Region]:
        off, size = self._rings[(kind, rank)]
        if size != nbytes:
            raise TransportError(f"rank {rank}'s {kind} ring is {size} bytes in the shared memory, the plan needs "
                                 f"{nbytes}")
        ring = self._arena.view[off:off + size]
        return ring, self.transport.register(ring)


def _serve(conn: Connection, arena: SharedArena, taken: Flag, done: Flag, failed: Flag) -> None:
    from ..plans import compile_call, topology_of
    from .transport.tcp import TcpTransport

    words = arena.words()
    setup = conn.recv()[1]
    transport = TcpTransport(host=setup["host"], lanes=setup["lanes"], session=setup["session"], name=setup["name"],
                             secret=setup["secret"])
    topology = topology_of(setup["topology"])
    chunk, timeout_s, rank = setup["chunk_bytes"], setup["timeout_s"], setup["rank"]
    poll_s = setup["poll_us"] * 1e-6  # this process has a core to itself: it may look often
    conn.send(("address", transport.listen()))
    plans: dict = {}
    state: dict = {}
    reported = []

    def plan_of(key: Any) -> Any:  # a CallKey
        plan = plans.get(key)
        if plan is None:
            if len(plans) >= 1024:
                plans.pop(next(iter(plans)))
            plan = plans[key] = compile_call(topology, key, chunk, multicast=True)  # as the caller's process does
            settle()
        return plan

    def settle() -> None:
        """What this process holds for good so far (its modules, the executor, the plans) leaves the garbage
        collector's generations (``gc.freeze``): a full collection then scans only what came since, instead of every
        object of the process while a call waits (on the 1x H200, 2026-12-04: 15.5-30.9 ms, once per run of 453-600
        calls, in the middle of training). Frozen objects are still freed when nothing refers to them."""
        gc.freeze()

    trace_path = setup.get("trace")  # HOCCL_NET_TRACE: one row per call, written when this process ends
    rows: list = []
    collections: list = []  # (generation, start, seconds) of this process's garbage collections, when tracing
    if trace_path:
        transport.trace = []

        def clock(phase: str, info: dict) -> None:
            if phase == "start":
                collections.append((info["generation"], time.perf_counter(), None))
            elif collections:
                gen, start, _ = collections[-1]
                collections[-1] = (gen, start, time.perf_counter() - start)

        gc.callbacks.append(clock)

    def run(call: tuple, reached: Any) -> None:
        """Drive the call from the moment it is taken, before its stream reaches it (CallProxy's ``early``)."""
        if call[0] is None:
            return
        ex = state["executor"]
        if trace_path:
            ex.marks = [("taken", time.perf_counter())]
        # DONE once the copies are through (and the stream reached the call)
        ex.run(prepared=call[0], release=lambda: give(call), stream_reached=reached)
        if trace_path:
            t = dict(ex.marks)
            t["copies"] = time.perf_counter()
            turns = [(what, w) for what, w in ex.marks if what in ("turn", "sleep", "network")]
            steps = [(a[0], b[1] - a[1]) for a, b in zip(turns, turns[1:], strict=False)]
            gap = (max((d for what, d in steps if what == "sleep"), default=0.0),  # the longest sleep of its loop
                   max((d for what, d in steps if what == "turn"), default=0.0))   # and its longest turn's work
            rows.append((call[3], call[4], t["taken"], t["begun"], t["announced"], t["hello"], t.get("stream"),
                         t.get("staged"), t.get("received"), t.get("landed"), t["network"], t["copies"], gap))

    def give(call: tuple) -> None:
        """The call's DONE and its count, once: at its release (its copies through, its last writes may still leave)
        or at its finish. The count is what the training process's watcher reads should this process die: a call
        counted is not released a second time (a second DONE would pass the stream's next wait early)."""
        if not call[2].written:
            call[2]()
            done.write(as_int32(done.read() + 1))

    def finish(call: tuple) -> None:
        if proxy.error is not None and not reported:  # told before the call counts as finished: a synchronize that
            reported.append(True)                      # sees it finished sees the error too
            with contextlib.suppress(Exception):
                conn.send(("error", type(proxy.error).__name__, str(proxy.error)))
            failed.write(1)
        give(call)

    def reset(call: tuple) -> None:
        call[1].reset()
        taken.write(as_int32(taken.read() + 1))

    proxy = CallProxy(run, lambda call: call[1].seen(), reset, finish, name=f"hoccl-proxy-{rank}", poll_s=poll_s,
                      skip=lambda call: call[0] is not None and open_gates(call[0]), early=True)
    forms = KeptForms(words)

    def take(key: Any, rebuild: Any, start_word: int, done_word: int | None, count: int | None) -> None:
        """A call to the proxy, its run made by ``rebuild(plan)`` (None: its preparation failed; its stream is only
        released). Where that fails, the run is made without a plan (its gates opened, skip) and the error reported."""
        prepared = None
        if rebuild is not None:
            try:
                prepared = rebuild(plan_of(key))
            except BaseException as exc:  # noqa: BLE001 - as a failed run: reported, later calls skipped
                proxy.error = proxy.error or exc
                prepared = rebuild(None)
        done_flag = None if done_word is None else Flag(words, done_word)
        proxy.submit((prepared, StartFlag(Flag(words, start_word), count), DoneOnce(done_flag), key,
                      time.perf_counter()))
    try:
        while True:
            try:
                data = conn.recv_bytes()
            except (EOFError, OSError):
                return  # the training process is gone
            if data[:4] == KIND:  # a kept list's run, as its counters' moves (net/kept.py)
                key, rebuild, start_word, count = forms.call(data)
                take(key, rebuild, start_word, None, count)
                continue
            message = pickle.loads(data)
            what = message[0]
            if what == "template":
                forms.learn(message)
            elif what == "addresses":
                state["addresses"] = message[1]
            elif what == "driver":
                _, key, slots, rings, overlap = message
                from multiprocessing.reduction import recv_handle

                try:
                    ring_arena = state["rings"] = SharedArena(fd=recv_handle(conn))
                    ex = _ArenaExecutor(plan_of(key), rank, ring_arena, rings, transport, slots=slots,
                                        timeout_s=timeout_s, overlap=overlap)
                    ex.poll_s = poll_s
                    state["executor"] = ex
                    ex.connect(state["addresses"])
                    settle()
                except BaseException as exc:  # noqa: BLE001 - every call after this is skipped, the error reported
                    proxy.error = exc
            elif what == "call":
                _, key, encoded, start_word, done_word, count = message
                take(key, None if encoded is None else lambda plan, e=encoded: decode(plan, e, words), start_word,
                     done_word, count)
            elif what == "close":
                return
    finally:
        proxy.close()
        ex = state.get("executor")
        if ex is not None:
            with contextlib.suppress(Exception):
                ex.close()
        with contextlib.suppress(Exception):
            transport.close()
        if trace_path:  # after the close: the frames that left last are in the transport's trace by then
            write_trace(trace_path, rank, rows, collections, transport.trace or ())


def main(argv: list[str] | None = None) -> int:
    """The proxy process: ``python -m hoccl_runtime.net.proxyproc SOCKET_FD ARENA_FD TAKEN DONE FAILED`` (the last
    three: words of the arena)."""
    args = sys.argv[1:] if argv is None else argv
    conn = Connection(int(args[0]))
    arena = SharedArena(fd=int(args[1]))
    words = arena.words()
    failed = Flag(words, int(args[4]))
    try:
        _serve(conn, arena, Flag(words, int(args[2])), Flag(words, int(args[3])), failed)
    except BaseException as exc:  # noqa: BLE001 - told to the training process, which raises it
        with contextlib.suppress(Exception):
            conn.send(("error", type(exc).__name__, str(exc)))
            failed.write(1)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
