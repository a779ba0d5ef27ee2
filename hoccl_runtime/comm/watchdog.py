"""Faults: a partner process that died is found by a watchdog thread (its pid in the shared memory), its
waits are released so no stream hangs, and the survivors' calls raise naming it."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from ..errors import HocclError, TransportError
from ._base import (
    _NOT_READY,
    EAGER_SLOTS,
    _pair_flag,
    _slot_flag_index,
)

__all__ = ["Watchdog"]


class Watchdog:
    """A part of the Communicator: it owns the fault state (``failure``), its thread and how often it looks
    (``interval_s``). It reads two things it is given: the node's shared memory (the partners' pids, the pair and
    eager flags it writes for a dead one) and the communicator's end-of-call events (``events``: the same dict
    the communicator keeps them in, never rebound). ``start=False``: no thread (tests drive it by hand)."""

    def __init__(self, rank: int, world: int, shared: Any, events: dict, *, interval_s: float = 0.1,
                 start: bool = True):
        self.rank, self.world, self.shared, self.events = rank, world, shared, events
        self.interval_s = interval_s
        self.failure: HocclError | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if start:
            self._thread = threading.Thread(target=self._watch, name=f"hoccl-watchdog-{rank}", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout_s: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)  # a drain in progress ends within 5 s

    def pending(self) -> list[int]:
        """Events that mark the end of this rank's calls (one per caller stream), not yet reached. An event
        last recorded inside a stream capture (a call the user captured into a graph) says
        cudaErrorCapturedEvent, not "not ready": the graph's launches are the user's to wait for."""
        from .._cuda_streams import event_query

        busy = []
        for key, ev in list(self.events.items()):
            if key[0] in ("end", "side") and event_query(ev) == _NOT_READY:
                busy.append(ev)
        return busy

    def dead_peer(self) -> int | None:
        pids = self.shared.pids
        for r in range(self.world):
            if r != self.rank and pids[r] > 0:
                try:
                    os.kill(int(pids[r]), 0)
                except ProcessLookupError:
                    return r
                except PermissionError:
                    pass
        return None

    def raise_if_failed(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _watch(self) -> None:
        """The watchdog thread: sleeps, and every ``interval_s`` checks that partner processes live.
        When one died while this rank's GPU work waits on it, the flags it would have written are
        written here so this rank's streams drain (a stream waiting on a dead process would otherwise
        wait forever), and every later call raises TransportError naming the dead rank."""
        while not self._stop.wait(self.interval_s):
            dead = self.dead_peer()
            if dead is not None and self.pending():  # a partner that left after its work is no fault
                self.fail(dead)
                return

    def fail(self, dead: int) -> None:
        if self.failure is None:
            self.failure = TransportError(
                f"rank {dead} (pid {int(self.shared.pids[dead])}) exited while rank {self.rank} was "
                "communicating with it; this communicator is unusable: close it and create a new one")
        self.drain(dead)

    def drain(self, dead: int, limit_s: float = 5.0) -> None:
        flags, me, w = self.shared.flags, self.rank, self.world
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and self.events and self.pending():
            flags[_pair_flag(w, 0, me, dead)] = 1    # "dead's buffers are ready"
            flags[_pair_flag(w, 1, dead, me)] = 1    # "dead's copies into me are done"
            flags[_pair_flag(w, 0, dead, me)] = 0    # "dead consumed my READY"
            flags[_pair_flag(w, 1, me, dead)] = 0    # "dead consumed my DONE"
            for j in range(EAGER_SLOTS):             # eager slots: "dead's message is there", "dead emptied mine"
                flags[_slot_flag_index(w, dead, me, j)] = 1
                flags[_slot_flag_index(w, me, dead, j)] = 0
            time.sleep(1e-3)
