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

from .._timer import fine_sleeps
from ..errors import HocclTimeoutError, TransportError
from ..flags import Flag, as_int32, reached
from .host import HostNodeExecutor

__all__ = ["GatedNodeExecutor", "PreparedRun", "open_gates", "flag_count", "ring_slots", "RING_BYTES", "MAX_SLOTS"]


# Staging ring per GPU and direction when the caller does not give ``slots``: measured on the 2x H200 host
# (1 GiB over TCP, 8 lanes, docs/benchmarks.md) 4 slots of 8 MiB ran at 0.64-0.74 of the transport alone
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

    __slots__ = ("plan", "send", "recv", "ends")

    def __init__(self, plan: Plan):
        self.plan = plan
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
        try:
            self.plan = prepared.plan
            with fine_sleeps(self._slack_ns):  # the loops' 20-50 us sleeps last about that long (hoccl_runtime._timer)
                self._drive()
                while not self._stream_reached():  # a run with nothing that waits for its stream (no copies here)
                    time.sleep(self.poll_s)
                self._wait(lambda: all(reached(flag, c) for flag, c in prepared.ends), "its copies to finish")
                self._tick()  # release, if the driving loop ended before it saw the copies through
        except BaseException:
            self._failed = True
            self.release(prepared)
            raise
        finally:
            self._reached_fn = None

    _reached_fn: Any = None

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
        if self._release is not None and self._stream_reached() and \
                all(reached(flag, c) for flag, c in self._current.ends):
            release, self._release = self._release, None
            release()

    def release(self, prepared: PreparedRun) -> None:
        """Open every gate of a run that will not be driven to its end (:func:`open_gates`)."""
        open_gates(prepared)

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not ready():
            if time.monotonic() > deadline:
                raise HocclTimeoutError(f"node {self.node}: the GPU did not finish {what} within {self.timeout_s:g} s "
                                        "(a copy that never ran: is the GPU hung?)")
            time.sleep(min(20e-6, self.poll_s))

    def _gate(self, side: dict, key: tuple, n: int) -> tuple:
        gates = side.get(key)
        if not gates:
            raise TransportError(f"node {self.node}: the run asked for a copy of slot {key} that was not prepared "
                                 "(prepare and run must see the same plan)")
        gate, done, c, nb = gates.popleft()
        if nb != n:
            raise TransportError(f"node {self.node}: slot {key} was prepared for {nb} bytes, the run moves {n}")
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
