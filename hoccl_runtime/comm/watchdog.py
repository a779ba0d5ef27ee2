"""Faults: a partner process that died is found by a watchdog thread (its pid in the shared memory), its
waits are released so no stream hangs, and the survivors' calls raise naming it.

A partner that refused a collective call (an All-to-Allv whose sizes were wrong there: it raised instead of
taking part) leaves a record in the shared memory: the calls it refused and why. A rank that comes to that call
after it skips it too, raising a CollectiveError naming the partner; the communicators stay usable. A rank that
made it already waits in vain: it is failed like a dead partner's survivor (its waits released, the reason in
the message), and marks itself failed, so the refusing rank fails too at its next call: from then on the ranks'
calls do not pair."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from ..errors import CollectiveError, HocclError, TransportError
from ._base import (
    _NOT_READY,
    EAGER_SLOTS,
    REFUSAL_BYTES,
    _pair_flag,
    _slot_flag_index,
)

__all__ = ["Watchdog"]

_CALLS, _BROKEN, _RING, _RING_LEN = 0, 1, 2, 32  # the words of a rank's refusal record (Watchdog._record)
_REASON_AT = 8 * (_RING + _RING_LEN)          # its reason's first byte


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

    # --- refused collective calls (All-to-Allv: its split sizes are checked where it is made) ----------------
    # Each rank's record in the shared memory (int64 words): how many such calls it reached (made or refused),
    # whether its communicator failed over a refusal, a ring of the calls it refused; then its latest reason.
    def _record(self) -> Any:
        return self.shared.refusals.view(np.int64).reshape(self.world, REFUSAL_BYTES // 8)

    def next_call(self) -> int:
        """The index (1, 2, ...) of this rank's next refusable collective call; every rank makes the same ones."""
        return int(self._record()[self.rank, _CALLS]) + 1

    def make(self, k: int) -> None:
        """This rank makes call ``k``, unless a partner refused it already: then this rank skips it too (nothing
        moves on any rank; the communicator stays usable) and raises a CollectiveError naming that partner and
        its reason."""
        self._fail_if_refused()
        record = self._record()
        for r in range(self.world):
            if r != self.rank and k in record[r, _RING:_RING + _RING_LEN]:
                reason = self.refusal(r)
                self.refuse(k, f"rank {r} refused it: {reason}")
                raise CollectiveError(f"rank {self.rank}: rank {r} refused All-to-Allv call {k} ({reason}); this "
                                      "call moves nothing on any rank: fix the split sizes there")
        record[self.rank, _CALLS] = k

    def refuse(self, k: int, reason: str) -> None:
        """This rank refuses call ``k`` (``reason``: what was wrong here). A partner that has not made it yet
        skips it too (:meth:`make`); one that made it already waits for this rank: its watchdog fails its
        communicator naming this rank and ``reason``, and releases those waits."""
        record, me = self._record(), self.rank
        data = reason.encode("utf-8", "replace")[:REFUSAL_BYTES - _REASON_AT - 1]
        text = self.shared.refusals[me * REFUSAL_BYTES + _REASON_AT:(me + 1) * REFUSAL_BYTES]
        text[:] = 0
        text[:len(data)] = np.frombuffer(data, np.uint8)
        record[me, _RING + k % _RING_LEN] = k  # the reason first, then the call: a partner reads them in turn
        record[me, _CALLS] = max(k, int(record[me, _CALLS]))

    def refusal(self, r: int) -> str:
        """Rank ``r``'s latest reason for refusing a call."""
        text = self.shared.refusals[r * REFUSAL_BYTES + _REASON_AT:(r + 1) * REFUSAL_BYTES]
        return bytes(text).split(b"\0", 1)[0].decode("utf-8", "replace")

    def refused_fault(self) -> tuple[int, str] | None:
        """(partner, message) where a partner refused a call this rank made (this rank waits for it in vain),
        or failed over such a refusal itself (it waits for this rank in vain); else None. The ring holds a
        rank's refusals among its last ``_RING_LEN`` calls exactly; each call checks (:meth:`make`), so a rank
        does not get that far past a refusal unseen."""
        record, me = self._record(), self.rank
        mine, reached = set(record[me, _RING:_RING + _RING_LEN].tolist()), int(record[me, _CALLS])
        for r in range(self.world):
            if r == me:
                continue
            if record[r, _BROKEN]:
                return r, (f"rank {r}'s communicator failed (a call it made was refused: {self.refusal(r)}), so the "
                           f"ranks' calls no longer pair: rank {self.rank}'s communicator is unusable: close it and "
                           "create a new one")
            for k in record[r, _RING:_RING + _RING_LEN].tolist():
                if max(0, reached - _RING_LEN) < k <= reached and k not in mine:
                    return r, (f"rank {r} refused All-to-Allv call {k}, which rank {me} made ({self.refusal(r)}); "
                               "the ranks' calls no longer pair, so this communicator is unusable: fix that call "
                               f"on rank {r}, close this communicator and create a new one")
        return None

    def _fail_if_refused(self, raise_it: bool = True) -> bool:
        """Fail this communicator where :meth:`refused_fault` finds a fault (whether or not this rank waits on the
        partner now: its calls and ours no longer pair), and tell the partners (one may wait for this rank in its
        next call); raise the failure if ``raise_it``. Whether it failed."""
        fault = self.refused_fault() if self.failure is None else None
        if fault is not None:
            self._record()[self.rank, _BROKEN] = 1
            self.fail(*fault)
        if raise_it:
            self.raise_if_failed()
        return fault is not None

    def raise_if_failed(self) -> None:
        if self.failure is not None:
            raise self.failure

    def _watch(self) -> None:
        """The watchdog thread: sleeps, and every ``interval_s`` checks that partner processes live.
        When one died while this rank's GPU work waits on it, the flags it would have written are
        written here so this rank's streams drain (a stream waiting on a dead process would otherwise
        wait forever), and every later call raises TransportError naming the dead rank."""
        while not self._stop.wait(self.interval_s):
            if self._fail_if_refused(raise_it=False):
                return
            dead = self.dead_peer()
            if dead is not None and self.pending():  # a partner that left after its work is no fault
                self.fail(dead)
                return

    def fail(self, dead: int, why: str | None = None) -> None:
        if self.failure is None:
            self.failure = CollectiveError(why) if why is not None else TransportError(
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
