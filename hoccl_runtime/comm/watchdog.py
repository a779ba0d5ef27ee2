"""Faults: a partner process that died is found by a watchdog thread (its pid in the shared memory), its
waits are released so no stream hangs, and the survivors' calls raise naming it."""

from __future__ import annotations

import os
import time

from ..errors import TransportError
from ._base import (
    _NOT_READY,
    EAGER_SLOTS,
    _pair_flag,
    _slot_flag_index,
)


class Watchdog:
    """The Communicator's fault handling (see the module docstring)."""

    # --- lifetime and faults -------------------------------------------------------------------------------
    def _pending(self) -> list[int]:
        """Events that mark the end of this rank's calls (one per caller stream), not yet reached. An event
        last recorded inside a stream capture (a call the user captured into a graph) says
        cudaErrorCapturedEvent, not "not ready": the graph's launches are the user's to wait for."""
        from .._cuda_streams import event_query

        busy = []
        for key, ev in list(self._events.items()):
            if key[0] in ("end", "side") and event_query(ev) == _NOT_READY:
                busy.append(ev)
        return busy

    def _dead_peer(self) -> int | None:
        pids = self._shared.pids
        for r in range(self.world):
            if r != self.rank and pids[r] > 0:
                try:
                    os.kill(int(pids[r]), 0)
                except ProcessLookupError:
                    return r
                except PermissionError:
                    pass
        return None

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _watch(self) -> None:
        """The watchdog thread: sleeps, and every ``watch_interval_s`` checks that partner processes live.
        When one died while this rank's GPU work waits on it, the flags it would have written are
        written here so this rank's streams drain (a stream waiting on a dead process would otherwise
        wait forever), and every later call raises TransportError naming the dead rank."""
        while not self._stop.wait(self.watch_interval_s):
            dead = self._dead_peer()
            if dead is not None and self._pending():  # a partner that left after its work is no fault
                self._fail(dead)
                return

    def _fail(self, dead: int) -> None:
        if self._failure is None:
            self._failure = TransportError(
                f"rank {dead} (pid {int(self._shared.pids[dead])}) exited while rank {self.rank} was "
                "communicating with it; this communicator is unusable: close it and create a new one")
        self._drain(dead)

    def _drain(self, dead: int, limit_s: float = 5.0) -> None:
        flags, me, w = self._shared.flags, self.rank, self.world
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and self._events and self._pending():
            flags[_pair_flag(w, 0, me, dead)] = 1    # "dead's buffers are ready"
            flags[_pair_flag(w, 1, dead, me)] = 1    # "dead's copies into me are done"
            flags[_pair_flag(w, 0, dead, me)] = 0    # "dead consumed my READY"
            flags[_pair_flag(w, 1, me, dead)] = 0    # "dead consumed my DONE"
            for j in range(EAGER_SLOTS):             # eager slots: "dead's message is there", "dead emptied mine"
                flags[_slot_flag_index(w, dead, me, j)] = 1
                flags[_slot_flag_index(w, me, dead, j)] = 0
            time.sleep(1e-3)
