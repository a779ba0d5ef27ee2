"""A multicast plan's stage in a GPU node's launch list (:class:`~hoccl_runtime.net.gpu.GpuNodeExecutor`): the order
its transfers are issued in and the events between a copy and the copies that read what it wrote."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._cuda import set_device
from ..launch import Record, Wait
from .wire import RDMA

__all__ = ["Chained"]


class Chained:
    """A multicast plan's stage in a node's launch list: the order its transfers are issued in (by path depth, so
    that every event is recorded in the list before a wait on it) and the events between the copies: transfer t's
    chunk k, where another transfer reads what it wrote, records event (stage, t, k) on its stream after its copy;
    a forwarded transfer's chunk k waits for its ``after`` transfer's (where the plan's network transfers have a
    chunk of their own, the chunk of it that holds chunk k's last byte: the copies' chunks run in order on their
    stream, and so do a ring's landings, so that one recorded, every byte before it has landed too). Events are the
    executor's, one per (stage, transfer, chunk), made once and recorded again by every run (a wait takes the record
    before it in the list)."""

    def __init__(self, ex: Any, stage: Any, via: Sequence[int], options: Any):  # ex: the GpuNodeExecutor
        from hoccl_compiler.schema import chunk_sizes, waited_chunk

        from ..plans import chain_depth

        tr = stage.transfers
        self.size = chunk_sizes(tr.role, options.chunk_bytes, options.net_chunk_bytes).tolist()
        self._waited = waited_chunk
        self.ex, self.index, self.tr = ex, stage.index, tr
        after = np.asarray(tr.after, dtype=np.int64)
        self.order = [int(t) for t in np.argsort(chain_depth(after), kind="stable")]
        self.targets = {int(a) for a in after if a >= 0}
        self.after = after
        self.forwarded = {t for t in range(len(tr.flow)) if via[tr.flow[t]] >= 0}

    def per_chunk(self, t: int) -> bool:
        return t in self.targets or t in self.forwarded

    def _event(self, t: int, k: int) -> int:
        """The event of transfer t's chunk k, on the GPU whose stream writes it (the landing copy's, for a network
        transfer): any plan's run reuses it, each wait taking the record issued before it."""
        from .._cuda_streams import event_create

        device = self.ex._dev[self.tr.dst[t] if self.tr.role[t] == RDMA else self.tr.src[t]]
        key = (device, self.index, t, k)
        ev = self.ex._events.get(key)
        if ev is None:
            set_device(device)
            ev = self.ex._events[key] = event_create()
        return ev

    def waited(self, t: int, k: int) -> int:
        """The chunk of forwarded transfer t's ``after`` transfer that its chunk k waits for (the one holding its last
        byte)."""
        a = int(self.after[t])
        return self._waited(k, self.size[t], self.size[a], int(self.tr.bytes[t]))

    @contextlib.contextmanager
    def _around(self, ops: list, t: int, k: int, s: int, wait: bool, record: bool):
        if wait and t in self.forwarded and self.after[t] >= 0:
            ops.append(Wait(s, self._event(int(self.after[t]), self.waited(t, k))))
        yield
        if record and t in self.targets:
            ops.append(Record(self._event(t, k), s))

    def around(self, ops: list, t: int, side: str):
        """The chunk context of a network transfer's staging copy (``side`` "send": it waits, where it reads a
        forwarded flow's bytes) or landing copy ("recv": it records, where another copy reads what it landed)."""
        return lambda k, s: self._around(ops, t, k, s, side == "send", side == "recv")

    def copy_chunk(self, ops: list, tr: Any, t: int, k: int, s: int, copy: Any) -> None:
        """Chunk k of a native transfer (the plan's copy chunk) inside its waits and records: ``copy(start, bytes)``
        (its chunks go in the launch list by level, :class:`~hoccl_runtime.net.order.LaunchOrder`)."""
        size = self.size[t]
        start = tr.offset[t] + k * size
        nb = min(size, tr.offset[t] + tr.bytes[t] - start)
        with self._around(ops, t, k, s, True, True):
            if nb:
                copy(start, nb)
