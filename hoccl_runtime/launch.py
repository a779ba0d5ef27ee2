"""Launch lists: the CUDA calls of one collective call, as typed ops, built once per (plan, buffers, streams) and
issued on every call.

Both intra-node paths (:class:`~hoccl_runtime.executor.Executor`, one process driving every GPU, and
:class:`~hoccl_runtime.comm.Communicator`, one process per GPU) build a call as a list of these ops and issue it
through :func:`compile_launch`, which binds every op to its CUDA function and arguments once, so issuing a list
is a loop of bound calls with no dispatch on op kinds (the hot path: a few microseconds per call).

=================  ==============================================================================
op                 what it issues
=================  ==============================================================================
``Device(d)``      make GPU ``d`` current (only before work that needs it: the driver's batch memops
                   and the legacy default stream, whose handle means "the current device's")
``Memcpy``         ``cudaMemcpyAsync(dst, src, nbytes, default, stream)``: a copy engine
``Record``         ``cudaEventRecord(event, stream)``
``Wait``           ``cudaStreamWaitEvent(stream, event)``
``Memops``         one ``cuStreamBatchMemOp`` of a :class:`~hoccl_runtime.flags.MemOps` batch on ``stream``
``Call``           ``fn(*args)``: anything else, bound as it is
``GraphLaunch``    ``cudaGraphLaunch(graph, stream)``
``Restore()``      the end: put back the device that was current when the list started
=================  ==============================================================================
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import _cuda  # no CUDA at import (its names are looked up when called: tests fake them)

__all__ = ["Device", "Memcpy", "Record", "Wait", "Memops", "Call", "GraphLaunch", "Restore", "Op", "LaunchCache",
           "compile_launch", "replay", "squeeze_devices"]


@dataclass(frozen=True, slots=True)
class Device:
    device: int

    def bind(self, rt: Any) -> tuple[Callable, tuple]:
        return rt.setDevice, (self.device,)


@dataclass(frozen=True, slots=True)
class Memcpy:
    dst: int
    src: int
    nbytes: int
    stream: int

    def bind(self, rt: Any) -> tuple[Callable, tuple]:
        return rt.memcpyAsync, (self.dst, self.src, self.nbytes, _cuda.MEMCPY_DEFAULT, self.stream)


@dataclass(frozen=True, slots=True)
class Record:
    event: int
    stream: int

    def bind(self, rt: Any) -> tuple[Callable, tuple]:
        return rt.eventRecord, (self.event, self.stream)


@dataclass(frozen=True, slots=True)
class Wait:
    stream: int
    event: int

    def bind(self, rt: Any) -> tuple[Callable, tuple]:
        return rt.streamWaitEvent, (self.stream, self.event, 0)


@dataclass(frozen=True, slots=True, eq=False)
class Memops:
    batch: Any  # a hoccl_runtime.flags.MemOps
    stream: int

    def bind(self, rt: Any) -> tuple[Callable, tuple]:
        return self.batch.bound(self.stream)


@dataclass(frozen=True, slots=True, eq=False)
class Call:
    fn: Callable
    args: tuple = ()

    def bind(self, rt: Any) -> tuple[Callable, tuple]:
        return self.fn, tuple(self.args)


@dataclass(frozen=True, slots=True)
class GraphLaunch:
    graph: int
    stream: int

    def bind(self, rt: Any) -> tuple[Callable, tuple]:
        return rt.graphLaunch, (self.graph, self.stream)


@dataclass(frozen=True, slots=True)
class Restore:
    """The end of a list that switches devices: the caller's device is put back."""


Op = Device | Memcpy | Record | Wait | Memops | Call | GraphLaunch | Restore


def on(device: int, stream: int) -> list[Op]:
    """The device switch an op on ``stream`` needs: only the special handles (0 and cudaStreamLegacy: the legacy
    default stream; cudaStreamPerThread) are device-relative."""
    return [Device(device)] if stream in (0, 1, 2) else []


def squeeze_devices(ops: Sequence[Op]) -> list[Op]:
    """Drop the ``Device`` ops that do not change the current device; end with ``Restore()`` if any remain, so that
    issuing the list puts the caller's current device back."""
    out: list[Op] = []
    current = None
    for op in ops:
        if type(op) is Device:
            if op.device == current:
                continue
            current = op.device
        out.append(op)
    if current is not None:
        out.append(Restore())
    return out


def compile_launch(ops: Sequence[Op]) -> Callable[[], None]:
    """A launch list as one closure of bound calls (no dispatch on op kinds when it runs). A list with ``Device``
    ops leaves the caller's current device as it found it; when every ``Device`` names one GPU and that GPU is
    already current, the switches are skipped."""
    rt = _cuda.cupy_runtime()
    steps: list[tuple[Callable, tuple]] = []
    quiet: list[tuple[Callable, tuple]] = []  # the same without the device switches
    devices: set[int] = set()
    for op in ops:
        if type(op) is Restore:
            break
        steps.append(op.bind(rt))
        if type(op) is Device:
            devices.add(op.device)
        else:
            quiet.append(steps[-1])
    full, quiet_t = tuple(steps), tuple(quiet)
    if not devices:
        def run() -> None:
            for fn, args in full:
                fn(*args)
        return run
    set_device, get_device = rt.setDevice, rt.getDevice
    only = next(iter(devices)) if len(devices) == 1 else None

    def run_on_device() -> None:
        caller = get_device()
        if caller == only:  # already on the one device the list uses
            for fn, args in quiet_t:
                fn(*args)
            return
        try:
            for fn, args in full:
                fn(*args)
        finally:
            set_device(caller)  # leave the caller's current device as it was
    return run_on_device


def replay(ops: Sequence[Op]) -> None:
    """Issue a launch list once, binding each op as it goes (where a list is not worth keeping compiled: a graph
    capture, a network run whose gate counts change every run). A list with ``Device`` ops leaves the caller's
    current device as it found it."""
    rt = _cuda.cupy_runtime()
    caller = current = None
    try:
        for op in ops:
            kind = type(op)
            if kind is Restore:
                break
            if kind is Device:
                if caller is None:
                    caller = current = rt.getDevice()
                if op.device != current:
                    rt.setDevice(op.device)
                    current = op.device
                continue
            fn, args = op.bind(rt)
            fn(*args)
    finally:
        if current != caller:
            rt.setDevice(caller)


class LaunchCache:
    """Launch lists (or what a caller keeps per list) by key, least recently used dropped beyond ``limit``;
    ``drop`` is called with each entry that leaves (evicted or cleared)."""

    def __init__(self, limit: int = 256, drop: Callable[[Any], None] | None = None):
        self.limit = limit
        self.drop = drop
        self._lists: OrderedDict[tuple, Any] = OrderedDict()

    def hit(self, key: tuple) -> Any:
        """The entry for ``key`` (now the most recently used), or None: no builder to make on the hot path."""
        launch = self._lists.get(key)
        if launch is not None:
            self._lists.move_to_end(key)
        return launch

    def get(self, key: tuple, build: Callable[[], Any]) -> Any:
        launch = self.hit(key)
        if launch is None:
            launch = build()
            self.set(key, launch)
        return launch

    def set(self, key: tuple, entry: Any) -> None:
        """Put ``entry`` under ``key`` (replacing what was there, without ``drop``), the most recently used; the least
        recently used leaves beyond ``limit``."""
        self._lists[key] = entry
        self._lists.move_to_end(key)
        if len(self._lists) > self.limit:
            _, old = self._lists.popitem(last=False)
            if self.drop is not None:
                self.drop(old)

    def clear(self) -> None:
        entries = list(self._lists.values())
        self._lists.clear()
        if self.drop is not None:
            for entry in entries:
                self.drop(entry)

    def __len__(self) -> int:
        return len(self._lists)
