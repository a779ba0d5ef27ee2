"""The notices that tie the nodes' runs together (:class:`RunNotices`, mixed into
:class:`~hoccl_runtime.net.host.HostNodeExecutor`): zero-byte writes whose immediate says what happened.

* The plan notice (``PLAN_HELLO | 24 bits of the plan id's CRC``): every run of a reusable executor starts with one to
  every node, as an ordered write. A node takes another node's data or credits of a run only once that node's notice
  for the run matched its own; notices are matched with runs in the order they arrive, so nodes in different
  collectives raise PlanError instead of mixing data.
* The run-done notice (``RUN_DONE | the run's number``): a node is through with a run (its rings are free again).
  A run writes nothing before every node that received network chunks in the previous run said so
  (:meth:`RunNotices._wait_for_previous`); a single-run executor ends with all of them (:meth:`RunNotices._barrier`),
  a reusable one waits for the last one in :meth:`RunNotices.leave`.

What comes meanwhile is kept (:meth:`RunNotices._keep`): notices recorded, an earlier run's write that left frees its
send slot, data and credits wait in the backlog for the run that wants them. The executor provides the state these
methods read and write (``conns``, ``reuse``, ``plan``, ``node``, ``timeout_s``, ``poll_s``, ``send_region``,
``ranks``, ``_runs``, ``_failed``, ``_hellos``, ``_mine``, ``_checked``, ``_deferred``, ``_backlog``, ``_early_done``,
``_receivers_hist``, ``halves``, ``_leaving``) and ``_send_ready`` / ``_stream_waiting``.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import HocclTimeoutError, PlanError, TransportError
from .transport.base import Connection, pause
from .wire import CREDIT, PLAN_HELLO, RUN_DONE

__all__ = ["RunNotices"]


class RunNotices:
    """The plan and run-done notices of a node's runs (see the module docstring)."""

    def leave(self) -> None:
        """Before the transport closes: tell every node this one is through with its last run, and wait (at most
        the timeout, and 5 s) until each said so too, so that nothing a slower node still expects (a credit in the
        transport's queue) is lost with the connection. A node that is gone, or an executor whose run failed, is
        not waited for; nothing here raises."""
        if not self.reuse or not self.conns or not self._runs or self._failed:
            return
        last = (self._runs - 1) & 0xFFFFFF  # this node's notice for it left at its end (_end_run)
        try:
            self._wait_for_nodes(lambda n: (n, last) in self._early_done, lambda waiting: f"nodes {waiting} left",
                                 min(self.timeout_s, 5.0))
        except (HocclTimeoutError, TransportError):
            pass  # closing anyway: a peer that is gone or stuck has its own error
        finally:
            self._failed = True  # once: the connections are about to close

    def _plan_crc(self) -> int:
        """What this run's plan notice carries (``PLAN_HELLO | it``): 24 bits of the plan id's CRC."""
        import zlib

        return zlib.crc32(self.plan.plan_id.encode()) & 0xFFFFFF

    def _announce(self) -> None:
        """Tell every node which plan this run is (the plan notice). The notices are matched with the runs in the
        order they arrive, so they are ordered writes: two that leave close together on two lanes could arrive the
        other way round (seen on the 1x H200 once runs began before their streams reached them: a PlanError after
        1,200 good runs)."""
        mine = self._plan_crc()
        self._mine[self._runs] = (mine, self.plan)  # the plan too: a mismatch may be found during a later run
        self._tell_all(PLAN_HELLO | mine, ordered=True)

    def _wait_for_previous(self) -> None:
        """Wait until every node that received network chunks in the previous run is through it (its receive rings
        are free), not until it reached this one, and check the plan notices that came meanwhile. A node that
        received none (a pipeline's last sender) is not waited for: its rings hold nothing of that run (nor of earlier
        ones), and what this run writes it while still in the previous run it keeps for the next
        (:meth:`_on_completion`): every node runs the same plans, so it knows it receives nothing there."""
        back = 2 if self.halves else 1  # alternate halves of the rings: the last run to use this run's half
        if self._runs >= back:
            prev, cur = (self._runs - back) & 0xFFFFFF, self._runs & 0xFFFFFF
            receivers = self._receivers_hist[-back]
            before = " (or the one before it)" if back > 1 else ""
            self._wait_for_nodes(lambda n: n not in receivers or (n, prev) in self._early_done,
                                 lambda waiting: f"nodes {waiting} did not finish the run before plan "
                                                 f"{self.plan.plan_id}{before}")
            # keep the notices a later run waits for (and later ones: a node not waited for may be through them)
            keep_from = (cur - back + 1) & 0xFFFFFF
            self._early_done = {(n, r) for n, r in self._early_done if (r - keep_from) & 0xFFFFFF < 0x800000}
        self._check_notices()

    def _check_notices(self) -> None:
        """Match every node's plan notices that came, in order, with this node's plan of the same run; a node's
        completions held until its notice for this run matched go back to its backlog."""
        for n in sorted(self.conns):
            got = self._hellos.get(n)
            while got:
                theirs, run = got.pop(0), self._checked.get(n, 0)
                entry = self._mine.get(run)
                if entry is None:  # a notice of a run this node has not started: the peer is one ahead
                    got.insert(0, theirs)
                    break
                mine, plan = entry
                if theirs != mine:
                    raise PlanError(f"node {self.node} ran plan {plan.plan_id} ({plan.collective.describe()}) as its "
                                    f"run {run}, but node {n} ran another there (id hash {theirs:06x} vs "
                                    f"{mine:06x}): every node must run the same collectives, of the same sizes, in "
                                    "the same order")
                self._checked[n] = run + 1
            if self._heard(n) and self._deferred.get(n):
                self._backlog.setdefault(n, []).extend(self._deferred.pop(n))
        done = min((self._checked.get(n, 0) for n in self.conns), default=self._runs)
        for run in [r for r in self._mine if r < done]:
            del self._mine[run]

    def _heard(self, n: int) -> bool:
        """Whether node ``n``'s plan notice for this run came and matched (always, without reuse: no notices)."""
        return not self.reuse or self._checked.get(n, 0) > self._runs

    def _tell_all(self, imm: int, ordered: bool = False) -> None:
        """A notice (a zero-byte write with immediate ``imm``) to every other node."""
        for conn in self.conns.values():
            self._notify(conn, imm, ordered)

    def _notify(self, conn: Connection, imm: int, ordered: bool = False) -> None:
        conn.write(self.send_region[self.ranks[0]], 0, 0, 0, 0, imm=imm, ordered=ordered)

    def _wait_for_nodes(self, ready: Any, late: Any, timeout_s: float | None = None) -> None:
        """Poll every node until ``ready(node)`` holds for all, keeping what arrives meanwhile (:meth:`_keep`);
        ``late(sorted nodes still waited for)`` words the timeout (``timeout_s``, default the executor's)."""
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        waiting = {n for n in self.conns if not ready(n)}
        deadline = time.monotonic() + timeout_s
        while waiting:
            for n in list(waiting):
                for c in self.conns[n].poll(timeout_s=0):
                    self._keep(n, c)  # a node already past this point may be sending what comes next
                if ready(n):
                    waiting.discard(n)
            if waiting:
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"node {self.node}: {late(sorted(waiting))} within {timeout_s:g} s")
                self._stream_waiting()  # the trace's "stream" when it comes meanwhile (an early run's notices wait)
                pause(self.conns, self.poll_s)

    def _notice(self, n: int, imm: int) -> bool:
        """Record node ``n``'s run-done or plan notice ``imm``; False when ``imm`` is not one."""
        if imm & CREDIT:
            return False
        if (imm & 0x7F000000) == RUN_DONE:
            self._early_done.add((n, imm & 0xFFFFFF))
            return True
        if (imm & 0x7F000000) == PLAN_HELLO:
            self._hellos.setdefault(n, []).append(imm & 0xFFFFFF)
            return True
        return False

    def _keep(self, n: int, c) -> None:
        """A completion outside the run that wants it: plan notices are recorded, an earlier run's write that left
        frees its send slot (and what waited for it is staged), the rest waits in the backlog for the next run."""
        if c.kind == "received" and self._notice(n, c.imm):
            return
        if c.kind == "sent" and self._leaving.left((id(self.conns[n]), c.write_id)):
            self._send_ready()
            return
        if c.kind == "received" or c.nbytes:
            self._backlog.setdefault(n, []).append(c)

    def _barrier(self) -> None:
        """The end of a run: tell every node, and wait until every node said so too (a node may close its
        transport, or start its next run, only once no node expects anything more of this one)."""
        run = self._runs & 0xFFFFFF
        self._runs += 1
        self._tell_all(RUN_DONE | run)
        self._wait_for_nodes(lambda n: (n, run) in self._early_done,
                             lambda waiting: f"nodes {waiting} did not finish plan {self.plan.plan_id}")
        self._early_done = {(n, r) for n, r in self._early_done if r != run}
