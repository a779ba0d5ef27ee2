"""A network run's launch list kept for the next runs of the same plan on the same buffers (HOCCL_NET_LAUNCH_CACHE).

:meth:`~hoccl_runtime.net.gpu.GpuNodeExecutor.launch_ops` builds a run's CUDA work: per copy stream the waits for
the call's event, each copy between its gate wait and its done write, the stream's end write. What changes from one
run of a plan to the next on the same buffers is only the counts those waits and writes carry: each gate, done and
end flag is a counter, and a run takes the next values of each. On the H200 host ``prepare`` took 52-65 us of a 1 MiB
send's 160-200 us, 22-27 us of it building the list; with the list kept, 31.5 us (docs/results/training-history.md,
"A call's host path").

So a :class:`RunTemplate` keeps the list of one run, compiled (:func:`~hoccl_runtime.launch.compile_launch`: its
memory-operation batches packed once), and where each count sits in those packed batches. The next run of the same
key moves every count on by what its counter moved since (a run uses the counters ``c + 1 .. c + m`` after ``c``;
the next one after ``c'`` uses the same offsets from ``c'``, cyclically over 1..2**32 - 1 as
:meth:`~hoccl_runtime.net.gpu.GpuNodeExecutor._count`), writes them into the batches in place (the driver reads a
batch's parameters when it is enqueued, so a batch may be rewritten once its enqueue returned) and issues the list.
The key holds everything else the list depends on: the plan (by identity), the buffers' addresses and sizes, and the
events the copies wait for.
"""

from __future__ import annotations

import ctypes
import struct
from array import array
from collections import deque
from collections.abc import Callable
from typing import Any

from .._cuda import MEMOP_BYTES
from ..flags import Flag
from ..launch import Device, LaunchCache, Memcpy, Memops, Restore, compile_launch

__all__ = ["Counters", "RunTemplate", "Templates", "CYCLE", "START", "fill_run", "moved", "native_steps"]

CYCLE = 0xFFFFFFFF  # counter values run 1 .. CYCLE, then 1 again (never 0: the flags start at 0)
_VALUE = struct.Struct("<Q")  # a packed memory operation's value (hoccl_runtime._cuda.pack_memops: bytes 16..23)
_VALUE_AT = 16


START = ("start",)  # counter_of's key of the caller's START counter: its count is given anew by every run


def moved(value: int, by: int) -> int:
    """A counter value moved on by ``by`` (or back, by less than 0) cyclically over 1 .. CYCLE."""
    return (value - 1 + by) % CYCLE + 1


class Counters:
    """An executor's counters (each gate and end flag's last count) by key, their values in one array of int64 that
    C reads and moves on (net/_kept.c) at :meth:`index` ``(key)``; otherwise used as a dict of them."""

    __slots__ = ("_index", "table")

    def __init__(self) -> None:
        self._index: dict[Any, int] = {}
        self.table = array("q")

    def index(self, key: Any) -> int:
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self.table)
            self.table.append(0)
        return i

    def get(self, key: Any, default: int = 0) -> int:
        i = self._index.get(key)
        return default if i is None else self.table[i]

    def __getitem__(self, key: Any) -> int:
        return self.table[self._index[key]]

    def __setitem__(self, key: Any, value: int) -> None:
        self.table[self.index(key)] = value

    def __contains__(self, key: Any) -> bool:
        return key in self._index

    def __len__(self) -> int:
        return len(self._index)

    def __iter__(self) -> Any:
        return iter(self._index)

    def keys(self) -> Any:
        return self._index.keys()

    def values(self) -> list[int]:
        return [self.table[i] for i in self._index.values()]

    def items(self) -> list[tuple[Any, int]]:
        return [(key, self.table[i]) for key, i in self._index.items()]


class RunTemplate:
    """One run's compiled launch list and where its counts sit (see the module docstring). Made by :meth:`make`
    after the run was built and issued; :meth:`issue` makes and issues the next run."""

    __slots__ = ("plan", "launch", "slots", "sends", "recvs", "ends", "before", "after", "steps", "device", "native",
                 "parity")

    def __init__(self) -> None:
        self.plan: Any = None
        self.launch: Callable[[], None] | None = None
        self.slots: list[tuple[Any, int, Any, int]] = []  # (packed batch, byte offset, counter, value at build)
        self.sends: list[tuple] = []  # ((ring, slot), gate, done, counter, value, bytes), in run order
        self.recvs: list[tuple] = []
        self.ends: list[tuple[Flag, Any, int]] = []  # (end flag, counter, value)
        self.before: dict = {}  # counter -> its value before the built run
        self.after: dict = {}   # counter -> its value after it
        self.steps: list[tuple] | None = None  # the list's driver calls as plain numbers (native_steps), or None
        self.device: int | None = None  # the one GPU the list makes current (None: none)
        self.native: Any = None  # its native form (net/kept.py: a NativeKept, or False where it has none)

    @classmethod
    def make(cls, run: Any, ops: list, counter_of: dict[int, Any], before: dict, counts: dict) -> RunTemplate | None:
        """The template of ``run`` (a PreparedRun whose ``ops`` were just issued), or None where its batches are not
        packed blocks (no ctypes driver path). ``counter_of``: flag address -> its counter's key; ``before`` /
        ``counts``: the counters before and after the run was built."""
        t = cls()
        t.plan, t.launch, t.parity = run.plan, compile_launch(ops), run.parity
        t.steps, t.device = native_steps(ops)
        for op in ops:
            if type(op) is not Memops:
                continue
            fast, block = op.batch._params or (None, None)
            if fast is None:
                return None
            for i, (_, address, value) in enumerate(op.batch.ops):
                key = counter_of.get(address)
                if key is not None:
                    t.slots.append((block, i * MEMOP_BYTES + _VALUE_AT, key, value))
        for side, mine in ((run.send, t.sends), (run.recv, t.recvs)):
            for where, uses in side.items():
                mine.extend((where, g, d, counter_of[g.address], c, nb) for g, d, c, nb in uses)
        t.ends = [(f, counter_of[f.address], c) for f, c in run.ends]
        used = {key for *_, key, _ in t.slots} - {START}
        t.before = {key: before.get(key, 0) for key in used}
        t.after = {key: counts[key] for key in used}
        return t

    def issue(self, run: Any, counts: dict, start: tuple | None = None, deferred: list | None = None) -> None:
        """Fill ``run`` (a fresh PreparedRun of the same plan) with this run's gates, counts moved on from
        ``counts`` (the executor's counters, advanced here), and issue the launch list. ``start``: (flag, count) of
        the caller's START, written with the count given (a list kept with one). ``deferred``: the launch is appended
        there instead, for the caller to issue (once it has told the proxy: GpuNodeExecutor.prepare)."""
        by = {key: counts.get(key, 0) - was for key, was in self.before.items()}
        for block, at, key, value in self.slots:
            _VALUE.pack_into(block, at, start[1] if key is START else moved(value, by[key]))
        fill_run(run, self.sends, self.recvs, self.ends, by)
        for key, value in self.after.items():
            counts[key] = moved(value, by[key])
        if deferred is None:
            self.launch()
        else:
            deferred.append(self.launch)


def fill_run(run: Any, sends: list, recvs: list, ends: list, by: Any) -> Any:
    """Fill ``run`` (a fresh PreparedRun) with a kept list's gates and end counts, each count moved on by ``by[k]``,
    the move of its counter ``k``: ``sends`` / ``recvs`` [((ring, slot), gate, done, k, count, bytes)] and ``ends``
    [(end flag, k, count)] as the list was made (:class:`RunTemplate`, by counter key; net/kept.py's native forms, by
    position). Returns ``run``."""
    for side, mine in ((run.send, sends), (run.recv, recvs)):
        for where, g, d, k, c, nb in mine:
            uses = side.get(where)
            if uses is None:
                uses = side[where] = deque()
            uses.append((g, d, moved(c, by[k]), nb))
    run.ends = [(f, moved(c, by[k])) for f, k, c in ends]
    return run


def native_steps(ops: list) -> tuple[list[tuple] | None, int | None]:
    """A launch list's driver calls as numbers for C (net/_kept.c): (0, stream, dst, src, bytes) a copy, (1, stream,
    count, block address, 0) a packed batch of memory operations; and the one GPU it makes current. (None, None)
    where it holds anything else (events, graphs, calls, two GPUs, a device-relative stream handle)."""
    steps, devices = [], set()
    for op in ops:
        kind = type(op)
        if kind is Restore:
            break
        if kind is Device:
            devices.add(op.device)
        elif kind is Memcpy and op.stream not in (0, 1, 2):
            steps.append((0, op.stream, op.dst, op.src, op.nbytes))
        elif kind is Memops and op.stream not in (0, 1, 2):
            if not op.batch.ops:
                continue
            fast, block = op.batch._params or (None, None)
            if fast is None:
                return None, None
            steps.append((1, op.stream, len(op.batch.ops), ctypes.addressof(block), 0))
        else:
            return None, None
    if len(devices) > 1:
        return None, None
    return steps, next(iter(devices), None)


_SEEN = object()  # a key run once: its template is made at its second run


class Templates:
    """An executor's kept launch lists, by (plan, events, buffers); a key's template is made at its second run, so
    buffers seen once (a new tensor every call) cost only the key. ``reissued`` / ``built``: runs issued from a kept
    list / built anew."""

    def __init__(self, limit: int = 64):
        self._cache = LaunchCache(limit, drop=self._dropped)
        self.reissued = self.built = 0
        self.dropped: list = []  # the native forms of templates let go (net/kept.py tells the proxy process)

    def _dropped(self, template: Any) -> None:
        if isinstance(template, RunTemplate) and template.native:
            template.native.alive = False  # its calls take the way through kept() again
            self.dropped.append(template.native)

    def kept(self, key: tuple, plan: Any) -> RunTemplate | None:
        """The key's kept list where it has one for ``plan`` (no run issued)."""
        template = self._cache.hit(key)
        return template if type(template) is RunTemplate and template.plan is plan else None

    @staticmethod
    def key(plan: Any, after: Any, bound: dict) -> tuple:
        """``bound``: {rank: (input, output, GPU)} as the executor checked them."""
        return (id(plan), tuple(after), *((b[0].ptr, b[0].nbytes, b[1].ptr, b[1].nbytes) for b in bound.values()))

    def issue(self, key: tuple, run: Any, counts: dict, last_end: dict, errors: Callable,
              start: tuple | None = None, deferred: list | None = None) -> tuple[bool, dict | None]:
        """Issue ``run`` from the key's kept list if there is one: (True, None). Else (False, the counters before the
        run, which the caller builds and then :meth:`keep` s) at the key's second run (or where its plan object
        changed), (False, None) at its first. ``last_end``: stream -> its last end count, updated; ``errors()``: the
        context that words CUDA's errors; ``start``: the caller's START (flag, count) where the key's list has one;
        ``deferred``: see :meth:`RunTemplate.issue`."""
        template = self._cache.hit(key)
        if template is None or template is _SEEN or template.plan is not run.plan:
            self.built += 1
            if template is None:
                self._cache.set(key, _SEEN)
                return False, None
            return False, dict(counts)
        with errors():
            template.issue(run, counts, start, deferred)
        for (flag, c), (_, counter, _) in zip(run.ends, template.ends, strict=True):
            last_end[counter[1]] = (flag, c)
        self.reissued += 1
        return True, None

    def keep(self, key: tuple, run: Any, ops: list, before: dict, counter_of: dict, counts: dict) -> None:
        """Keep the list of ``run`` (just built and issued) for the key's next runs."""
        template = RunTemplate.make(run, ops, counter_of, before, counts)
        if template is not None:
            self._dropped(self._cache.hit(key))  # a list made again (its plan object changed) replaces the old
            self._cache.set(key, template)
