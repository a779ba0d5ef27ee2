"""The driving half of the GPU network executor (:class:`GatedNodeExecutor`): it runs
:class:`~hoccl_runtime.net.host.HostNodeExecutor`'s protocol over runs whose copies another thread or process enqueued
(:meth:`hoccl_runtime.net.gpu.GpuNodeExecutor.prepare`), opening their gates and reading their counters with no CUDA
call, in the proxy process as in a proxy thread; a prepared run (:class:`PreparedRun`) and the staging rings' size."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping
from typing import Any

from hoccl_compiler.schema import Plan

from .._timer import fine_sleeps, nap
from ..errors import HocclError, HocclTimeoutError, TransportError
from ..flags import Flag, as_int32, reached
from ..settings import env_flag
from .host import HostNodeExecutor
from .wire import data_imm

__all__ = ["GatedNodeExecutor", "PreparedRun", "open_gates", "flag_count", "ring_slots", "RING_BYTES", "MAX_SLOTS"]


# Staging ring per GPU and direction when the caller does not give ``slots``: measured on the 2x H200 host
# (1 GiB over TCP, 8 lanes, docs/results/history.md) 4 slots of 8 MiB ran at 0.64-0.74 of the transport alone
# under the same protocol, 32 slots of 8 MiB at 0.84-0.95: the ring must hold enough chunks to keep every
# lane busy while the copies and credits of earlier chunks complete. The same number of slots on every
# node (the sender picks the remote slot).
RING_BYTES = 256 << 20
MAX_SLOTS = 64


def flag_count(gpus: int, slots: int) -> int:
    """Flags a :class:`GpuNodeExecutor` of ``gpus`` GPUs with ``slots`` ring slots allocates: go / staged and
    arrived / landed per GPU and slot, an end flag per copy stream."""
    return 4 * gpus * slots + 2 * gpus * gpus + gpus + 8


def ring_slots(chunk_bytes: int, ring_bytes: int = RING_BYTES) -> int:
    """Slots of a staging ring of about ``ring_bytes`` for chunks of ``chunk_bytes`` (4 to MAX_SLOTS)."""
    if ring_bytes < 1:
        raise TransportError(f"ring_bytes={ring_bytes}: give the staging ring size in bytes (default {RING_BYTES})")
    return max(4, min(MAX_SLOTS, ring_bytes // max(1, chunk_bytes)))


class PreparedRun:
    """One run of a plan whose every GPU copy is already enqueued (:meth:`GpuNodeExecutor.prepare`): the gates
    that the run opens, in the order it opens them, per staging slot, and the counters the copy streams write
    when they are through."""

    __slots__ = ("plan", "send", "recv", "ends", "parity")

    def __init__(self, plan: Plan, parity: int = 0):
        self.plan = plan
        self.parity = parity  # which half of every ring the run uses (HOCCL_NET_OVERLAP; 0 without it)
        self.send: dict[tuple[int, int], deque] = {}  # (ū, slot) -> (go flag, staged flag, count, bytes) per use
        self.recv: dict[tuple[int, int], deque] = {}  # (v̄, slot) -> (arrived flag, landed flag, count, bytes)
        self.ends: list[tuple[Flag, int]] = []        # per copy stream: its end flag and the count it writes last


def open_gates(prepared: PreparedRun) -> None:
    """Open every gate of a run that will not be driven to its end (it failed, or an earlier one did), so that its
    copy streams finish (moving stale bytes) instead of waiting forever."""
    for gates in (*prepared.send.values(), *prepared.recv.values()):
        if gates:
            gate, _, c, _ = gates[-1]  # counters only grow: the last opens every earlier wait too
            if not reached(gate, c):
                gate.write(as_int32(c))
            gates.clear()


class GatedNodeExecutor(HostNodeExecutor):
    """The driving half of :class:`GpuNodeExecutor`, free of CUDA: it runs the network protocol of a run whose
    copies were enqueued already (:class:`PreparedRun`), opening their gates (counter flags in host memory the
    GPU waits on) as slots free and chunks arrive, and reading the counters the copy streams write. The rings and
    flags are host memory the GPU reaches (pinned, or shared memory registered with CUDA by the process that
    enqueues the copies), so this half runs in that process's proxy thread or in a process of its own
    (:mod:`hoccl_runtime.net.proxyproc`)."""

    direct_receive = False  # TCP lands in host memory: always through the receive ring
    multicast = True  # GpuNodeExecutor.prepare enqueues forwarded copies after the copies they read (net/chained.py)
    _current: PreparedRun | None = None
    _release: Any = None
    _land_gates: bool | None = None  # HOCCL_NET_LAND_GATES, read at the first run
    _send_gates: bool | None = None  # HOCCL_NET_SEND_GATES, read at the first run
    _arming: set = frozenset()  # nodes whose landing gates this run arms once their plan notice matched
    _armed: set = frozenset()   # the connections (nodes) armed now

    def run(self, plan: Plan | None = None, buffers: Mapping[int, tuple] | None = None, *,
            prepared: PreparedRun | None = None, release: Any = None, stream_reached: Any = None) -> None:
        """Drive ``prepared`` (a run whose copies were enqueued, possibly by another thread or process) to
        completion, opening its gates and reading its counters: no CUDA call. ``release()``, where given, is called
        once every copy of the run is through (the staging copies took what this node sends, the landing copies put
        what it receives in place), while its last network writes may still be leaving: the caller lets its stream
        go on there, as NCCL's send does once the data is in its buffers (an error after that is the next call's).

        ``stream_reached()``, where given, says whether the caller's stream has reached the call yet: the run was
        started before (:class:`~hoccl_runtime.net.callproxy.CallProxy`'s ``early``), so that its notices, its wait
        for the other nodes and the gates of its first staging copies are done while the stream computes (the copies
        themselves wait for the stream on the GPU). Until it has, no lack of progress counts towards the timeout,
        and ``release`` waits for it."""
        if prepared is None:
            raise TransportError(f"node {self.node}: this executor only drives prepared runs (their copies enqueued "
                                 "by GpuNodeExecutor.prepare); give prepared=")
        self._current, self._release, self._reached_fn = prepared, release, stream_reached
        if self._land_gates is None:
            try:
                self._land_gates = env_flag("HOCCL_NET_LAND_GATES", True)
                self._send_gates = env_flag("HOCCL_NET_SEND_GATES", True)
            except HocclError as exc:
                raise TransportError(str(exc)) from None
        self._arming = set(self.conns) if self._land_gates else set()
        try:
            self.plan = prepared.plan
            with fine_sleeps(self._slack_ns):  # the loops' 20-50 us sleeps last about that long (hoccl_runtime._timer)
                self._drive()
                while not self._stream_reached():  # a run with nothing that waits for its stream (no copies here)
                    nap(self.poll_s)
                self._wait(lambda: all(reached(flag, c) for flag, c in prepared.ends), "its copies to finish")
                self._tick()  # release, if the driving loop ended before it saw the copies through
        except BaseException:
            self._failed = True
            self.release(prepared)
            raise
        finally:
            self._reached_fn = None
            self._disarm()

    _reached_fn: Any = None

    def _run_parity(self) -> int:
        return self._current.parity if self._current is not None else 0

    def _stream_reached(self) -> bool:
        """Whether the caller's stream has reached the run's call (always, where the run was started after it)."""
        fn = self._reached_fn
        if fn is None:
            return True
        if not fn():
            return False
        self._reached_fn = None
        self._mark("stream")
        return True

    def _stream_waiting(self) -> bool:
        return not self._stream_reached()

    def _tick(self) -> None:
        if self._arming:
            self._arm_heard()
        if self._release is not None and self._stream_reached() and \
                all(reached(flag, c) for flag, c in self._current.ends):
            release, self._release = self._release, None
            release()

    def release(self, prepared: PreparedRun) -> None:
        """Open every gate of a run that will not be driven to its end (:func:`open_gates`), once no connection
        opens one any more (a landing gate opened later with an older count would shut it again)."""
        self._disarm()
        for conn in self.conns.values():  # and no write posted ahead leaves with what the opened copies move
            conn.cancel_after()
        open_gates(prepared)

    def _after(self, token: object, conn: Any) -> dict:
        """A staged chunk's write is posted at once, to leave when its staging copy's done count shows (the native
        engine's watcher; HOCCL_NET_SEND_GATES), instead of once this loop has seen the copy done."""
        if not (self._send_gates and conn.writes_after):
            return {}
        flag, c = token
        return {"after": (flag.address, as_int32(c))}

    # --- gates the transport opens and writes it lets go (HOCCL_NET_LAND_GATES, HOCCL_NET_SEND_GATES) -------
    # A chunk of a run, with both on (time goes right; the loop is this executor's driving loop):
    #
    #   sender's GPU stream  [go >= c][staging copy][staged = c]
    #   sender's loop        write(after=(staged, c)) when it opens go ......... [sent: the slot is free again]
    #   sender's watcher                                 staged >= c? -> the part to its lane
    #   the lane                                                     [frame]
    #   receiver's engine                                                   payload in -> arrived = c, then the event
    #   receiver's GPU stream [wait arrived >= c] ............................................ [landing copy][landed]
    #   receiver's loop                                                              [completion: arrived reached]
    #
    # Off, the sender's loop posts the write once it has seen staged = c, and the receiver's loop writes arrived = c
    # once it has taken the completion; either way a gate is only ever moved on, never back.
    def _arm_heard(self) -> None:
        """Arm, on the connection of each node whose plan notice for this run matched (its data is this run's), the
        landing gates of the chunks still to come from it: the connection stores a gate's count the moment the
        chunk is in the ring (:meth:`~.transport.base.Connection.arm`), so the GPU's landing copy starts without
        waiting for this loop to see the completion (which then writes the same count again). A connection that
        cannot (the Python lanes, verbs) is not asked again."""
        heard = {n for n in self._arming if self._heard(n)}
        if not heard:
            return
        self._arming -= heard
        for n, gates in self._landing_gates(heard).items():
            if self.conns[n].arm(gates):
                self._armed = {*self._armed, n}
            else:
                self._land_gates, self._arming = False, set()
                return

    def _landing_gates(self, nodes: set) -> dict[int, list[tuple]]:
        """Per node of ``nodes`` that sends this run chunks still to come into a receive ring, their (immediate,
        region, offset, bytes, gate address, count), from one walk over the receive sequences: a slot's gates are
        queued in ring order (:meth:`_gate` takes them as the chunks arrive), so the k-th position still to come that
        uses a slot has the k-th gate left in its queue."""
        run, recv, stages, half = self._run, self._current.recv, self.plan.stages, self._half()
        gates: dict[int, list[tuple]] = {}
        for vbar, seq in run.inc.items():
            local, got, taken = vbar % self.L, run.got[vbar], {}
            rings, peers = seq.ring.tolist(), seq.peer.tolist()
            for p, ring in enumerate(rings):
                if ring < 0 or got[p]:
                    continue
                j = self._slot(ring)
                k = taken.get(j, 0)
                taken[j] = k + 1
                left, node = recv.get((vbar, j)), peers[p] // self.L
                if node not in nodes or left is None or k >= len(left):
                    continue
                gate, _, c, nb = left[k]
                start, n = self._chunk_range(stages[int(seq.stage[p])].transfers, int(seq.transfer[p]),
                                             int(seq.chunk[p]))
                if nb == n:
                    gates.setdefault(node, []).append((data_imm(local, p, half), 2 * local + 1, j * self.chunk, n,
                                                       gate.address, as_int32(c)))
        return gates

    def _disarm(self) -> None:
        for n in self._armed:
            self.conns[n].arm([])
        self._armed = frozenset()

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not ready():
            if time.monotonic() > deadline:
                raise HocclTimeoutError(f"node {self.node}: the GPU did not finish {what} within {self.timeout_s:g} s "
                                        "(a copy that never ran: is the GPU hung?)")
            nap(min(20e-6, self.poll_s))

    def _gate(self, side: dict, key: tuple, n: int) -> tuple:
        gates = side.get(key)
        if not gates:
            raise TransportError(f"node {self.node}: the run asked for a copy of slot {key} that was not prepared "
                                 "(prepare and run must see the same plan)")
        gate, done, c, nb = gates.popleft()
        if nb != n:
            raise TransportError(f"node {self.node}: slot {key} was prepared for {nb} bytes, the run moves {n}")
        if not reached(gate, c):  # a gate only moves on (the engine may have opened this one: _arm_heard)
            gate.write(as_int32(c))
        return done, c

    def _copy_within(self, dst_rank: int, dst_off: int, src_rank: int, src_off: int, n: int) -> None:
        """Enqueued by prepare (no gate: only after the callers' events)."""

    def _stage_out(self, ubar: int, slot: int, src_rank: int, src_off: int, n: int) -> object:
        return self._gate(self._current.send, (ubar, slot // self.chunk), n)

    def _land(self, vbar: int, slot: int, v: int, dst_off: int, n: int) -> object:
        return self._gate(self._current.recv, (vbar, slot // self.chunk), n)

    def _done(self, token: object) -> bool:
        flag, c = token
        return reached(flag, c)  # the copy's stream wrote it: no driver call

    def _finish_run(self) -> None:
        """Nothing: a run's copies end when their staged and landed counters were seen (the base class waits for
        them), and :meth:`run` waits for every stream's end counter."""
