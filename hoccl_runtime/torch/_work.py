"""``dist.Work`` for HOCCL calls: a CUDA event on the group's stream, waited on the GPU.

A HOCCL call is enqueued on a stream and returns; its Work holds the event recorded after it there::

    caller's stream  ─[work]─(ready)──────────────────────── [wait end] ─[work using the result]─▶
    group's stream   ───────── [wait ready] ─[HOCCL call: copies, flag memops]─(end)─────────────▶

``wait()`` makes the caller's current stream wait for that event (``cudaStreamWaitEvent``: no kernel, no
SM; torch's ``Work.block_current_stream`` would launch a spin kernel) and returns at once, as NCCL's Work
does; from then on the call no longer holds its tensors (memory the caller frees is reused after the call, by
the caller's stream, as with NCCL's ``TORCH_NCCL_AVOID_RECORD_STREAMS=1``). ``get_future()`` does the same and
returns a future that follows it on the GPU. ``wait(timeout)`` blocks the host too, until the call is through or
the timeout has passed (then HocclTimeoutError), as NCCL's Work does. ``synchronize()`` blocks the host;
``is_completed()`` polls. A Work whose call is still deferred (a send or recv waiting for its batch, see
:mod:`hoccl_runtime.torch._group`) issues the batch first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .._cuda_streams import stream_wait_event

__all__ = ["HocclWork", "Completion", "wait_on_current_stream"]


def current_raw_stream() -> int:
    """The raw handle of the current device's current stream: torch's own C call (torch.cuda.current_stream() builds
    a Stream object through a few Python layers, about 10 us of a HOCCL call on the H200 host, twice a call)."""
    return torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())


def wait_on_current_stream(event: Any, done: Any = None) -> None:
    """The caller's current CUDA stream waits for ``event`` (a recorded torch.cuda.Event), on the GPU; the host goes
    on. ``done``: the Completion the event ends, which remembers the last stream made to wait for it: the Works of
    one batch (a 1F1B send and receive) share one, and a second wait on the same stream is a driver call for nothing
    (the stream's later work is after its first wait already)."""
    stream = current_raw_stream()
    if done is not None:
        if done.waited == stream:
            return
        done.waited = stream
    stream_wait_event(stream, event.cuda_event)


class Completion:
    """What a Work waits for: the end event of one call (or batch), set once it is issued, and the tensors
    it keeps alive until then. ``issue`` issues a deferred batch (and sets ``event``)."""

    __slots__ = ("event", "issue", "tensors", "error", "host_wait", "waited")

    def __init__(self, event: Any = None, tensors: list | None = None, issue: Callable[[], None] | None = None,
                 host_wait: bool = False):
        self.event, self.tensors, self.issue, self.error = event, tensors or [], issue, None
        self.host_wait = host_wait  # barrier: wait() blocks the host too, as torch's barrier does
        self.waited: int | None = None  # the raw stream last made to wait for it (a batch's Works share one)

    def let_go(self) -> None:
        """The call's stream hold ends (the caller's stream now waits for it): empty the list in place, which the
        group's stream shares (:meth:`ProcessGroupHoccl._issue`)."""
        self.tensors.clear()

    def ready(self) -> Any:
        if self.event is None and self.issue is not None:
            self.issue()
        if self.error is not None:
            raise self.error
        return self.event


def _through_within(event: Any, limit_s: float) -> None:
    """Poll ``event`` until it has been reached, or raise HocclTimeoutError after ``limit_s`` seconds."""
    import time

    from ..errors import HocclTimeoutError

    deadline = time.monotonic() + limit_s
    while not event.query():
        if time.monotonic() > deadline:
            raise HocclTimeoutError(f"Work.wait(timeout={limit_s:g} s): the call is not through; its peers may not "
                                    "have issued it (the call goes on: a later wait or synchronize() may still end)")
        time.sleep(0.001)


class HocclWork(dist.Work):
    """The Work of a HOCCL call (see the module docstring). ``result()`` is the call's output tensors."""

    def __init__(self, done: Completion, outputs: list | None = None):
        super().__init__()
        self._done = done
        self._outputs = outputs or []

    def wait(self, timeout: Any = None) -> bool:
        """The caller's current stream waits for the call (the host goes on). ``timeout`` (a ``timedelta`` or
        seconds; 0 or None: none, torch's ``kNoTimeout``): the host also waits until the call is through, and a
        call not through by then raises HocclTimeoutError, as NCCL's Work does. The call itself is not stopped."""
        event = self._done.ready()
        if event is not None:
            if self._done.host_wait:
                event.synchronize()
            else:
                wait_on_current_stream(event, self._done)
            self._done.let_go()  # later work of the caller's stream is after the call: its tensors may be freed
            limit = timeout.total_seconds() if hasattr(timeout, "total_seconds") else float(timeout or 0)
            if limit > 0:
                _through_within(event, limit)
        return True

    def is_completed(self) -> bool:
        event = self._done.ready()
        return event is None or event.query()

    def is_success(self) -> bool:
        return self._done.error is None

    def exception(self) -> Any:
        return self._done.error

    def synchronize(self) -> None:
        event = self._done.ready()
        if event is not None:
            event.synchronize()

    def result(self) -> list:
        return self._outputs

    def get_future(self) -> torch.futures.Future:
        """A future of ``result()`` that follows the call on the GPU, as NCCL's does: the caller's current stream
        waits for the call (``wait()``, no host block), then the future is completed; for CUDA outputs it is a
        CUDA-aware future, which records that stream, so whoever waits on it (``value()``, ``then()``) waits on
        the GPU for the call's end. A call that failed gives a future holding its error."""
        devices = sorted({t.device for t in self._outputs if getattr(t, "is_cuda", False)}, key=str)
        fut: torch.futures.Future = torch.futures.Future(devices=devices) if devices else torch.futures.Future()
        try:
            self.wait()
            fut.set_result(self._outputs)
        except Exception as exc:  # noqa: BLE001 - handed to the future's waiter
            fut.set_exception(exc)
        return fut
