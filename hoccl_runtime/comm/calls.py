"""How a network call sits in its caller's stream: the events that mark it (:class:`CallEvents`) and the order of
its START, gated copies and DONE wait (:func:`enqueue_call`), shared by both network communicators."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from .._cuda_streams import event_create, event_destroy, event_record  # no CUDA at import (looked up when called)
from ..net.template import moved

__all__ = ["CallEvents", "enqueue_call", "enqueue_on_stream", "enqueue_counted", "counted_start", "start_done_ops"]


class CallEvents:
    """CUDA events that mark where each call sits in its caller's stream. The call's copy streams wait for them
    on the GPU (``GpuNodeExecutor.prepare(after=...)``) before their first copy: the order of the copies after the
    caller's work is then one CUDA sees (the driver's manual asks for orders set through stream memory operations
    to be expressed with events too), whatever thread or process enqueued them.

    ``interprocess``: events another process of the node opens (the node leader's copies wait for them).
    ``record(stream)`` takes a free event and records it; ``give_back(event)`` returns it once the copies that
    wait for it were enqueued (a wait takes the event's state when it is enqueued)."""

    def __init__(self, device: int, *, interprocess: bool = False):
        self.device = device
        self._interprocess = interprocess  # cudaEventInterprocess (events other processes wait on)
        self._free: list[int] = []
        self._made: list[int] = []
        self._handles: dict[int, bytes] = {}
        self._lock = threading.Lock()

    def record(self, stream: int) -> int:
        with self._lock:
            event = self._free.pop() if self._free else None
        if event is None:
            event = event_create(interprocess=self._interprocess)
            self._made.append(event)
        event_record(event, stream)
        return event

    def handle(self, event: int) -> bytes:
        """The event's IPC handle (64 bytes; ``interprocess`` events), made once per event."""
        if event not in self._handles:
            from .._cuda_memory import ipc_get_event_handle

            self._handles[event] = ipc_get_event_handle(event)
        return self._handles[event]

    def give_back(self, event: int) -> None:
        with self._lock:
            self._free.append(event)

    def close(self) -> None:
        for event in self._made:
            with contextlib.suppress(Exception):  # closing anyway
                event_destroy(event)
        self._made.clear()
        self._free.clear()


def enqueue_call(stream: int, start: Any, done: Any, events: CallEvents, prepare: Any, submit: Any) -> None:
    """Enqueue one network call on ``stream``: START, then the call's gated copies (``prepare(event)``, after an
    event recorded past START), ``submit(prepared, error)`` to the proxy, then the wait for DONE.

    The order is what keeps this free of deadlock where streams share a hardware queue (more streams than
    ``CUDA_DEVICE_MAX_CONNECTIONS``, 8 by default; under MPS; 1 under Megatron's setting)::

        caller's stream  ─[work]─(START=1)─(event)───────────────────────── [wait DONE==1; DONE=0] ─[work]─▶
        copy streams     ───────────────── [wait event] [wait gate][copy] ... (proxy opens the gates) ──▶

    A gate opens only once the proxy has seen START, and a stream memory wait blocks its whole hardware queue. Had
    the gated copies been enqueued before START (the event recorded before it), a copy stream sharing a queue with
    the caller's stream would hold START behind a gate that waits for START. The event after START makes the
    dependency one CUDA sees (the driver's manual asks for orders set through stream memory operations to be
    expressed with events too): everything a gate or the DONE wait waits for was enqueued before it, on this
    process and, calls being made in one order on every rank, on the others.

    A ``prepare`` that raises is submitted as ``(None, error)``: the proxy then only takes the stream's START and
    gives its DONE (the pair stays in step with the stream), and the error is raised here."""
    start_ops, done_ops = start_done_ops(start, done)
    start_ops.enqueue(stream)
    event = events.record(stream)
    prepared, error = None, None
    try:
        prepared = prepare(event)
    except BaseException as exc:  # noqa: BLE001 - raised below, once the stream's DONE wait is in place
        error = exc
    finally:
        events.give_back(event)  # the waits on it are enqueued (or nothing was)
    submit(prepared, error)
    done_ops.enqueue(stream)
    if error is not None:
        raise error


def enqueue_on_stream(stream: int, start: Any, done: Any, prepare: Any, submit: Any) -> None:
    """As :func:`enqueue_call`, for a call whose copies all go on ``stream`` itself
    (:meth:`~hoccl_runtime.net.gpu.GpuNodeExecutor.one_stream`, HOCCL_NET_ONE_STREAM=1): START, then
    ``prepare(finish)``, which enqueues the copies with ``finish`` (the DONE wait) in their last batch, then
    ``submit``. No event: the copies follow START in the stream's own order, and nothing of the call waits on
    another stream, so no hardware queue it shares can hold START behind it. A ``prepare`` that raises enqueued no
    DONE wait (that batch is the list's last operation): it is enqueued here, as :func:`enqueue_call` does."""
    start_ops, done_ops = start_done_ops(start, done)
    start_ops.enqueue(stream)
    prepared, error = None, None
    try:
        prepared = prepare(done_ops)
    except BaseException as exc:  # noqa: BLE001 - raised below, once the stream's DONE wait is in place
        error = exc
    submit(prepared, error)
    if error is not None:
        done_ops.enqueue(stream)
        raise error


def counted_start(counter: Any) -> list:
    """A stream's counted START (HOCCL_NET_ONE_STREAM=2): [its counter flag, the batch that writes it, the last
    count], for :func:`enqueue_counted`."""
    from ..flags import MemOps

    return [counter, MemOps().write(counter, 0), 0]


def enqueue_counted(stream: int, counted: list, prepare: Any, submit: Any, launch: Any) -> None:
    """A call on ``stream`` alone that the stream does not wait for (HOCCL_NET_ONE_STREAM=2): ``prepare((START,
    count))`` enqueues the copies (staging then landing, after which the stream goes on in its own order) with
    START moved on to the stream's next count first in their first batch (``counted``: :func:`counted_start`), then
    ``submit(prepared, count)``, and no DONE: a 1F1B exchange is 5 driver calls. The proxy sees START as a counter
    (:class:`~hoccl_runtime.net.callproxy.StartFlag`), so the next call setting it before the proxy looked at this
    one loses nothing. A run from a kept launch list is told to the proxy before it is launched
    (``prepare(start, deferred)`` fills it in and leaves its launch in ``deferred``; ``launch(prepared, deferred)``
    issues it), so the proxy opens its first gates while the driver calls are made. A ``prepare`` that raises is
    submitted as (None, count); a launch that raises leaves its run to the proxy, which fails it at its timeout
    (:meth:`~hoccl_runtime.net.gpu.GpuNodeExecutor.launch_deferred`). Either way START is written here on its own
    (the same count twice, where the failed list had written it, is the same), the proxy takes it, and the error is
    raised here."""
    counter, batch, n = counted
    n = counted[2] = moved(n, 1)  # 1, 2, ... modulo 2**32, never 0 (the flag starts at 0)
    prepared, error, deferred = None, None, []
    try:
        prepared = prepare((counter, n), deferred)
    except BaseException as exc:  # noqa: BLE001 - raised below, once the proxy has the call
        error = exc
    try:
        submit(prepared, n)
    except BaseException:
        if deferred:  # no proxy to tell (it is gone, and opened the run's gates): the copies run through, their end
            with contextlib.suppress(Exception):  # counts written, so that nothing waits for them at close
                launch(prepared, deferred)
        raise
    if error is None and deferred:
        try:
            launch(prepared, deferred)
        except BaseException as exc:  # noqa: BLE001 - the proxy fails the run at its timeout, on both nodes
            error = exc
    if error is not None:
        batch.set_value(0, n).enqueue(stream)
        raise error


_START_DONE: dict[tuple[int, int], tuple] = {}  # (START, DONE) addresses -> their two batches, packed once
_START_DONE_LIMIT = 256  # pairs kept (a communicator has one per stream, MAX_STREAMS at most)


def start_done_ops(start: Any, done: Any) -> tuple:
    """A call's two batches on its stream: ``START = 1``, and ``wait DONE == 1; DONE = 0``. The same for every call
    of a pair of flags, so built and packed once per pair (by address: a batch holds addresses and values only),
    for every communicator that enqueues calls."""
    key = (start.address, done.address)
    ops = _START_DONE.get(key)
    if ops is None:
        from ..flags import MemOps

        if len(_START_DONE) >= _START_DONE_LIMIT:
            _START_DONE.pop(next(iter(_START_DONE)))
        ops = _START_DONE[key] = (MemOps().write(start, 1), MemOps().wait_eq(done, 1).write(done, 0))
    return ops
