"""A hoccl process group's CUDA stream and the events that order it with the caller's (the only CUDA of the torch
backend's group; the CPU tests give a ProcessGroupHoccl one that runs everything at once)."""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Sequence
from typing import Any

import torch

from .._cuda_streams import event_record, stream_wait_event
from ._work import current_raw_stream

__all__ = ["_Streams", "EventPool"]



def _unshared() -> int:
    """sys.getrefcount of an object one local name holds, as :meth:`_Streams.end` asks it (the interpreter's own
    count: the call's argument adds one where it is not borrowed)."""
    probe = object()
    return sys.getrefcount(probe)


_UNSHARED = _unshared()


class EventPool:
    """CUDA events recorded one after another, each reused once reached and referred to by nothing but the pool
    (``sys.getrefcount``), as torch's ProcessGroupNCCL caches its events (``TORCH_NCCL_CUDA_EVENT_CACHE``): a steady
    loop whose Works are dropped makes a few events, not a ``torch.cuda.Event`` a call with its ``cudaEventCreate``
    at the first record and ``cudaEventDestroy`` when collected. One still referred to is never recorded again: a
    Work that waits on it later must wait for its own call, not a later one (which may need work queued after that
    wait: a pipeline's next receive)."""

    def __init__(self) -> None:
        self._ends: deque = deque()  # the events in the order recorded: the oldest is reused once done and unshared
        self.made = 0  # events made (diagnostics)

    def record(self, stream: Any = None) -> Any:
        """An event recorded on ``stream`` (a torch stream; None: the current one)."""
        ends, event = self._ends, None
        if ends and ends[0].query():  # the oldest reached: reused where nothing else refers to it
            oldest = ends.popleft()
            if sys.getrefcount(oldest) <= _UNSHARED:
                event = oldest
            del oldest
        if event is None:
            event = torch.cuda.Event()
            self.made += 1
        event.record(stream)
        ends.append(event)
        return event


class _Streams:
    """The group's CUDA stream and the events that order it with the caller's. Tensors of a call are held here
    until its end event has completed or its Work was waited for, whichever comes first, so memory freed early by
    the caller is not reused under the copies (what NCCL's ``TORCH_NCCL_AVOID_RECORD_STREAMS=1`` does, without
    ``record_stream``'s cost per tensor). Letting go at ``wait()`` makes the moment a tensor can be freed a point
    of the program, the same on every rank, not one of GPU timing (FSDP's window blocks come back then). The calls'
    end events come from an :class:`EventPool`."""

    def __init__(self, device: int):
        self.device = device
        self.stream = torch.cuda.Stream(device)
        self.handle = self.stream.cuda_stream  # the raw handle the communicators take
        self._ready = torch.cuda.Event()
        self._ready.record(self.stream)  # made now (torch makes an event at its first record): its handle is used
        self._held: deque = deque()  # (end event, tensors) of calls that may still run
        self.events = EventPool()  # the calls' end events

    def follow(self) -> None:
        """The group's stream waits for the work on the caller's current stream so far (one reused event:
        a stream wait takes the event's state when it is enqueued). Raw handles: see ``current_raw_stream``."""
        ready = self._ready.cuda_event
        event_record(ready, current_raw_stream())
        stream_wait_event(self.handle, ready)

    def torch_ops(self) -> Any:
        """The context in which a call's own torch work (reduction kernels, temporaries) goes on the group's
        stream."""
        return torch.cuda.stream(self.stream)

    def end(self, tensors: Sequence[Any]) -> Any:
        """Record the end of the call just issued on the group's stream, hold ``tensors`` until it is reached (or
        its Work waited for), and return the event."""
        held = self._held
        while held and held[0][0].query():
            held.popleft()
        event = self.events.record(self.stream)
        if tensors:
            held.append((event, tensors))
        return event
