"""The order a GPU node's launch list issues a run's chunk copies in (:class:`LaunchOrder`), the same on every node: a
list that cannot deadlock where streams share a hardware queue.

A GPU runs a process's streams on a few hardware queues (``CUDA_DEVICE_MAX_CONNECTIONS``, 8 by default; Megatron
sets 1); streams that share one run in the order their work was issued, so a stream memory wait holds everything
issued behind it on the other streams of its queue. The GPU network executor's copies wait on gates that other
nodes' copies open (a landing copy for the peer's staging copy, through the network; a staging copy for a slot the
peer's landing copy credits back), so a list that issued, say, all of a transfer's staging copies and only then its
landings could stall on one node while its peer stalls on the first (shown with the fake CUDA's ``hw_queues``,
one node a process; an H100 run whose nodes were threads of one process also hung, which no order within a node can
prevent: their lists interleave in the shared queues; docs/architecture.md).

Each chunk copy gets a level, a function of the plan alone: one more than the highest level of what its gate or
event waits for (its peer's staging copy, the landing that credits its slot, the copy whose bytes it forwards) and
than the copy before it on its stream. Stages follow each other (every level of stage s below every level of s+1).
A node issues its copies in level order, so on every queue a wait stands behind nothing that needs it. A copy's
done count (a memory write the driving thread or a peer waits for) may ride in the next batch of memory operations
on its stream, which saves a driver call, but only while no copy of a level that needs it has been issued yet
(:meth:`LaunchOrder.send_need`, :meth:`LaunchOrder.land_need`): then it goes in a batch of its own first.
"""

from __future__ import annotations

from typing import Any

from .wire import LOCAL, NATIVE, RDMA

__all__ = ["LaunchOrder", "NEVER"]

NEVER = 1 << 62  # a done count nothing in the run waits for on the GPU


class LaunchOrder:
    """The levels of every chunk copy of ``plan`` (network chunks of ``chunk`` bytes through rings of ``slots``
    slots; ``via``: the plan's forwarding, where the executor runs forwarded copies), as global levels (stage by
    stage): :meth:`send` (a staging copy), :meth:`land` (a landing copy), :meth:`copy` (a copy within the node)."""

    def __init__(self, plan: Any, chunk: int, slots: int, via: Any = None):
        from .chained import Chained

        self.slots = slots
        self._send: dict[tuple[int, int], list[int]] = {}  # (stage, transfer) -> level per chunk
        self._land: dict[tuple[int, int], list[int]] = {}
        self._copy: dict[tuple[int, int], list[int]] = {}
        self._start: list[int] = []  # per stage, its first level
        base = 0
        for stage in plan.stages:
            tr, s = stage.transfers, stage.index
            self._start.append(base)
            top = 0
            # the stage's chains as the launch list issues them (no events are made: no executor is given)
            chain = Chained(None, stage, via, plan.options) if via is not None else None
            for t in chain.order if chain is not None else range(len(tr.flow)):
                role, n_bytes = int(tr.role[t]), int(tr.bytes[t])
                forwarded = chain is not None and t in chain.forwarded
                if role == RDMA:
                    n = max(1, -(-n_bytes // chunk))
                    ev = self._events(s, t, n, chain) if forwarded else None
                    sends, lands = self._rdma(n, ev)
                    self._send[(s, t)] = [base + v for v in sends]
                    self._land[(s, t)] = [base + v for v in lands]
                    top = max(top, lands[-1])
                elif role in (LOCAL, NATIVE):
                    if chain is None or not chain.per_chunk(t):
                        self._copy[(s, t)] = [base]
                        continue
                    n = max(1, -(-n_bytes // chain.size[t]))
                    ev = self._events(s, t, n, chain) if forwarded else None
                    levels, last = [], -1
                    for k in range(n):
                        last = max(last + 1, ev[k] + 1 if ev is not None else 0)
                        levels.append(last)
                    self._copy[(s, t)] = [base + v for v in levels]
                    top = max(top, levels[-1])
            base += top + 1
        self._start.append(base)

    def _events(self, s: int, t: int, n: int, chain: Any) -> list[int] | None:
        """Per chunk of forwarded transfer ``t`` of stage ``s``, the level (within the stage) of the copy whose event
        it waits for (its ``after`` transfer's chunk that holds its last byte, :meth:`Chained.waited`; issued before
        it, by path depth)."""
        a = int(chain.after[t])
        if a < 0:
            return None
        levels = (self._land if int(chain.tr.role[a]) == RDMA else self._copy)[(s, a)]
        start = self._start[s]
        return [levels[chain.waited(t, k)] - start for k in range(n)]

    def _rdma(self, n: int, ev: list[int] | None) -> tuple[list[int], list[int]]:
        """Levels (within the stage) of a network transfer's n staging and landing copies: a staging copy after the
        one before it on its stream, after the landing that frees its receive slot (``slots`` chunks back) and after
        the copy it forwards (``ev``); its landing after it and after the landing before."""
        S = self.slots
        if ev is None and S >= 2:  # nothing but the transfer itself: one level a chunk
            return list(range(n)), list(range(1, n + 1))
        sends: list[int] = []
        lands: list[int] = []
        for k in range(n):
            level = sends[-1] + 1 if k else 0
            if k >= S:
                level = max(level, lands[k - S] + 1)
            if ev is not None:
                level = max(level, ev[k] + 1)
            sends.append(level)
            lands.append(max(level + 1, lands[-1] + 1 if k else 0))
        return sends, lands

    def chunks(self, stage: int, t: int) -> int:
        """How many copies transfer ``t`` of ``stage`` is issued as (its network chunks, or its copy chunks where a
        chain runs through it, else one)."""
        return len((self._send if (stage, t) in self._send else self._copy)[(stage, t)])

    def send(self, stage: int, t: int, k: int) -> int:
        return self._send[(stage, t)][k]

    def land(self, stage: int, t: int, k: int) -> int:
        return self._land[(stage, t)][k]

    def copy(self, stage: int, t: int, k: int = 0) -> int:
        return self._copy[(stage, t)][k]

    def send_need(self, stage: int, t: int, k: int) -> int:
        """The lowest level that waits for staging copy k's done count: its landing at the peer."""
        return self._land[(stage, t)][k]

    def land_need(self, stage: int, t: int, k: int) -> int:
        """The lowest level that may wait for landing copy k's done count (its credit frees the receive slot for the
        chunk ``slots`` ring positions on): that chunk's staging copy, or the next stage's first level."""
        sends = self._send[(stage, t)]
        return sends[k + self.slots] if k + self.slots < len(sends) else self._start[stage + 1]
