"""The inter-node path on host memory: one process per node replays a plan over a transport.

This is the reference for the GPU path of the network issue, runnable anywhere: the node's ranks
are NumPy buffers, the copies that a GPU does with its copy engines (local, native, forwarding and the
staging copies) are NumPy copies, and the network pieces go through a :class:`Transport` (TCP here).
What it pins down, before GPUs are involved:

* Staging: each GPU has a ring of ``slots`` chunk slots for the network data it receives (when the
  data must be forwarded on, ``v̄ != v``) and one for what it sends. A GPU's network chunks of one run
  form one sequence per direction, stage after stage (:class:`Routes`); position ``x`` uses slot
  ``x % slots``. The receiver hands a slot on with a credit (a zero-byte write) once its forward copy
  has taken the chunk: to the sender of the chunk that uses the slot next, which may be the next
  stage's flow, from another GPU; the sender reuses a send slot once its write left. In the chunk state
  machine's words: IDLE -> DMA_COPYING (staging copy) -> NETWORK (write posted) -> IDLE (sent /
  credited). With a GPU these copies overlap with the network; here they are synchronous.
* Stage order without a barrier: the rings run each GPU's stages in order, and a stage's flow into a
  GPU takes over that GPU's receive slots one by one as the previous stage's chunks leave them. So a GPU
  has one incoming and one outgoing network flow at a time (as the plan's stages promise) but for the
  few slots where one stage's tail meets the next one's head, and no node waits for the slowest one
  between stages. Every run starts with a notice of the plan's id to every node: a node sends it only
  once its previous run is through, so a run's chunks never meet the previous run's, and no barrier ends
  a run of a reusable executor (:meth:`HostNodeExecutor.leave` waits for the last one before closing).
* Immediates: data ``(target GPU's local index << 24) | its receive position``; credits
  ``bit 31 | (sending GPU's local index << 24) | the send position they let go``; plan notices
  ``0x7e000000 | 24 bits of the plan id's CRC``. The accepting node knows who connected from the
  transport's hello (the connecting transport's name), before any data can arrive.

Nodes connect to every other node (lower index accepts) and share nothing but the plan, whose id is
the transport session: a node with a different plan is refused at the first exchange.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hoccl_compiler.schema import Plan

from .._timer import fine_sleeps, slack_setting
from ..errors import HocclTimeoutError, PlanError, TransportError
from ..flags import Flag, FlagPool, MemOps, as_int32, reached
from .transport.base import Connection, Region, Transport

__all__ = ["HostNodeExecutor", "GpuNodeExecutor", "PreparedRun", "RING_BYTES", "ring_slots"]

CREDIT = 1 << 31
RUN_DONE = 0x7F000000    # a node's run n is through: 0x7f000000 | (n mod 2**24)
PLAN_HELLO = 0x7E000000  # first notice of every run of a reusable executor: the plan's id, 24 bits
LOCAL, NATIVE, SEND_FORWARD, RDMA, RECV_FORWARD = range(5)


class HostNodeExecutor:
    """Runs node ``node``'s part of ``plan`` with host buffers ``{rank: (input, output)}``."""

    def __init__(self, plan: Plan, node: int, buffers: Mapping[int, tuple[np.ndarray, np.ndarray]],
                 transport: Transport, *, slots: int = 4, timeout_s: float = 30.0, reuse: bool = False,
                 _check_sizes: bool = True):
        from .._trust import verified

        verified(plan)  # the one door: a plan from outside runs only once it passed verify_plan
        topo = plan.topology
        if not 0 <= node < topo.nodes:
            raise TransportError(f"node {node}: plan {plan.plan_id} has nodes 0..{topo.nodes - 1}; start one process "
                                 "per node of the plan's topology")
        self.plan, self.node, self.transport, self.timeout_s = plan, node, transport, timeout_s
        # reuse: run(other_plan, other_buffers) over the same connections and rings; every node must agree.
        # The network then always lands in the rings (an output registered once cannot follow new buffers)
        self.reuse = reuse
        self.direct_receive = type(self).direct_receive and not reuse
        self._slack_ns = slack_setting()  # the driving thread's timer slack while it runs (hoccl_runtime._timer)
        self._hellos: dict[int, list[int]] = {}
        self.L = topo.gpus_per_node
        if self.L > 126:  # an immediate names a local GPU in 7 bits; 126 and 127 are the notices'
            raise TransportError(f"plan {plan.plan_id} has {self.L} GPUs per node; the network executor drives at "
                                 "most 126 per node")
        self.ranks = list(range(node * self.L, (node + 1) * self.L))
        missing = [r for r in self.ranks if r not in buffers]
        if missing:
            raise TransportError(f"node {node} drives ranks {self.ranks} of plan {plan.plan_id}; no buffers for "
                                 f"{missing}")
        self.chunk = plan.options.chunk_bytes
        self.slots = slots
        for r in self.ranks:
            inp, out = buffers[r]
            if _check_sizes and (inp.nbytes != plan.ranks.input_bytes[r] or
                                 out.nbytes != plan.ranks.output_bytes[r]):
                raise TransportError(f"rank {r}: buffers of {inp.nbytes}/{out.nbytes} bytes, the plan needs "
                                     f"{plan.ranks.input_bytes[r]}/{plan.ranks.output_bytes[r]}")
        self.inputs = {r: buffers[r][0] for r in self.ranks}
        self.outputs = {r: buffers[r][1] for r in self.ranks}
        # regions, in the same order on every node: per local GPU its output (2i) and receive ring (2i + 1)
        self.recv_ring, self.send_ring = {}, {}
        for r in self.ranks:
            out = self.outputs[r]
            transport.register(out if out.nbytes else np.zeros(1, np.uint8))
            self.recv_ring[r], _ = self._make_ring("recv", r, slots * self.chunk)
        self.send_region = {}
        for r in self.ranks:
            self.send_ring[r], self.send_region[r] = self._make_ring("send", r, slots * self.chunk)
        self.conns: dict[int, Connection] = {}
        self._backlog: dict[int, list] = {}        # completions read while waiting for the plan notices
        self._route_cache: dict[tuple, tuple[Plan, Routes]] = {}
        self._runs = 0                               # runs through so far
        self._failed = False                         # a run failed (or the executor left): leave() waits for nobody
        self._early_done: set[tuple[int, int]] = set()  # (node, run) run-done notices not yet waited for
        self._run: _RunState | None = None

    # --- setup -------------------------------------------------------------------------------------
    def _ring(self, nbytes: int) -> np.ndarray:
        """A staging ring (host memory; pinned and device-mapped in the GPU executor)."""
        return np.zeros(nbytes, np.uint8)

    def _make_ring(self, kind: str, rank: int, nbytes: int) -> tuple[object, Region]:
        """Rank ``rank``'s ``kind`` ("send" / "recv") staging ring, registered with the transport once."""
        ring = self._ring(nbytes)
        return ring, self.transport.register(ring)

    def connect(self, addresses: Mapping[int, str]) -> None:
        """Connect to every other node (``addresses[n]`` is node n's listening address)."""
        nodes = self.plan.topology.nodes
        if sorted(addresses) != list(range(nodes)):
            raise TransportError(f"node {self.node}: plan {self.plan.plan_id} is for {nodes} nodes, so give an address "
                                 f"for each of 0..{nodes - 1}; got {sorted(addresses)} (a different world size?)")
        for other in range(self.node + 1, nodes):
            self.conns[other] = self.transport.connect(addresses[other], timeout_s=self.timeout_s)
        for _ in range(self.node):
            conn = self.transport.accept(timeout_s=self.timeout_s)
            try:  # the connecting node's transport was named "node<i>" (see make_transport)
                other = int(conn.peer_name.removeprefix("node"))
            except ValueError:
                raise TransportError(f"node {self.node}: a peer named {conn.peer_name!r} connected; expected "
                                     "node<index> (create transports with HostNodeExecutor.make_transport)") from None
            self.conns[other] = conn

    @staticmethod
    def make_transport(plan: Plan, node: int, kind: str = "tcp", **kwargs) -> Transport:
        """A transport for ``node`` (``kind`` "tcp" or "verbs"): a hash of the plan's content as session (a node
        with another plan, or another schedule under the same claimed id, is refused at the first exchange) and
        the node's name, by which the accepting node knows who connected. Give TCP ``secret=`` (the job's, shared
        through the store) so that peers prove they belong to the job; without it nobody is authenticated."""
        if kind == "tcp":
            from .._trust import plan_uid
            from .transport.tcp import TcpTransport

            return TcpTransport(session=plan_uid(plan)[7:39], name=f"node{node}", **kwargs)
        if kind == "verbs":
            from .transport.verbs import VerbsTransport

            return VerbsTransport(session=plan.plan_id, name=f"node{node}", **kwargs)
        raise TransportError(f"transport kind {kind!r}: choose 'tcp' or 'verbs'")

    # --- the plan ----------------------------------------------------------------------------------
    def run(self, plan: Plan | None = None, buffers: Mapping[int, tuple] | None = None) -> None:
        """Run the plan (or, with ``reuse=True``, another plan of the same topology and chunk size, on
        other buffers) to completion. With ``reuse`` every run starts with a notice of the plan's id to
        every node, so nodes in different collectives raise PlanError instead of mixing data."""
        if plan is not None or buffers is not None:
            self._only_with_reuse()
            if plan is not None:
                self._use_plan(plan)
            if buffers is not None:
                self._bind(buffers)
        try:
            with fine_sleeps(self._slack_ns):
                self._drive()
        except BaseException:
            self._failed = True  # the other nodes' runs fail too: leave() waits for none of them
            raise

    def _only_with_reuse(self) -> None:
        if not self.reuse:
            raise TransportError("this executor runs the plan and buffers it was created with; create it with "
                                 "reuse=True to run other plans or buffers")

    def _drive(self) -> None:
        """The run's network protocol: the plan notice (every node has finished its previous run), then every
        stage's chunks, each GPU's rings handing their slots from one stage's flow to the next (no barrier)."""
        if self.reuse:
            self._hello()
        self._begin_run()
        self._local_copies()
        deadline = time.monotonic() + self.timeout_s
        while not self._run_done():
            progressed = self._send_ready()
            progressed |= self._post_ready()
            for node in self.conns:
                for c in self._poll(node):
                    progressed = True
                    self._on_completion(node, c)
            if progressed:
                deadline = time.monotonic() + self.timeout_s
            else:
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"node {self.node}: plan {self.plan.plan_id} made no progress for "
                                            f"{self.timeout_s:g} s: {self._waiting_for()} (a peer node stalled or "
                                            "died?)")
                time.sleep(50e-6)
        self._finish_run()
        self._end_run()

    def _end_run(self) -> None:
        """After a run's last chunk. A reusable executor does not wait for the other nodes here: the next run's
        plan notices order it after this one on every node (a node sends its notice only once its previous run is
        through, and no node sends a run's chunks before every node's notice came), so a node whose part is done
        (a sender whose chunks left) lets its caller go on at once instead of waiting for the slowest node; its
        last run is waited for by :meth:`leave`. A single-run executor ends with the barrier."""
        if self.reuse:
            self._runs += 1
        else:
            self._barrier()

    def leave(self) -> None:
        """Before the transport closes: tell every node this one is through with its last run, and wait (at most
        the timeout, and 5 s) until each said so too, so that nothing a slower node still expects (a credit in the
        transport's queue) is lost with the connection. A node that is gone, or an executor whose run failed, is
        not waited for; nothing here raises."""
        if not self.reuse or not self.conns or not self._runs or self._failed:
            return
        last = (self._runs - 1) & 0xFFFFFF
        saved, self.timeout_s = self.timeout_s, min(self.timeout_s, 5.0)
        try:
            self._tell_all(RUN_DONE | last)
            self._wait_for_nodes(lambda n: (n, last) in self._early_done, lambda waiting: f"nodes {waiting} left")
        except (HocclTimeoutError, TransportError):
            pass  # closing anyway: a peer that is gone or stuck has its own error
        finally:
            self.timeout_s = saved
            self._failed = True  # once: the connections are about to close

    def close(self) -> None:
        """Leave (:meth:`leave`); the transport is the caller's to close."""
        self.leave()

    def _use_plan(self, plan: Plan) -> None:
        from .._trust import verified

        verified(plan)
        self._fits(plan)
        self.plan = plan

    def _fits(self, plan: Plan) -> None:
        a, b = plan.topology, self.plan.topology
        if (a.nodes, a.gpus_per_node) != (b.nodes, b.gpus_per_node) or plan.options.chunk_bytes != self.chunk:
            raise TransportError(f"plan {plan.plan_id} ({a.nodes} x {a.gpus_per_node} GPUs, chunks of "
                                 f"{plan.options.chunk_bytes} B) does not fit this executor ({b.nodes} x "
                                 f"{b.gpus_per_node}, chunks of {self.chunk} B): compile it with the same topology "
                                 "and chunk size")

    def _bind(self, buffers: Mapping[int, tuple]) -> None:
        """Take this run's buffers ({rank: (input, output)} for the node's ranks), checking their sizes."""
        plan = self.plan
        for r in self.ranks:
            if r not in buffers:
                raise TransportError(f"node {self.node}: no buffers for rank {r}")
            inp, out = buffers[r]
            if inp.nbytes != plan.ranks.input_bytes[r] or out.nbytes != plan.ranks.output_bytes[r]:
                raise TransportError(f"rank {r}: buffers of {inp.nbytes}/{out.nbytes} bytes, plan {plan.plan_id} "
                                     f"needs {plan.ranks.input_bytes[r]}/{plan.ranks.output_bytes[r]}")
        self.inputs = {r: buffers[r][0] for r in self.ranks}
        self.outputs = {r: buffers[r][1] for r in self.ranks}

    def _hello(self) -> None:
        """Tell every node which plan this run is, and check theirs (24 bits of the plan id's CRC)."""
        import zlib

        mine = zlib.crc32(self.plan.plan_id.encode()) & 0xFFFFFF
        self._tell_all(PLAN_HELLO | mine)
        self._wait_for_nodes(lambda n: bool(self._hellos.get(n)),
                             lambda waiting: f"nodes {waiting} did not start plan {self.plan.plan_id}")
        for n in sorted(self.conns):
            theirs = self._hellos[n].pop(0)
            if theirs != mine:
                raise PlanError(f"node {self.node} runs plan {self.plan.plan_id} ({self.plan.collective.describe()}) "
                                f"but node {n} runs another (id hash {theirs:06x} vs {mine:06x}): every node must run "
                                "the same collectives in the same order")

    def _tell_all(self, imm: int) -> None:
        """A notice (a zero-byte write with immediate ``imm``) to every other node."""
        for conn in self.conns.values():
            self._notify(conn, imm)

    def _notify(self, conn: Connection, imm: int) -> None:
        conn.write(self.send_region[self.ranks[0]], 0, 0, 0, 0, imm=imm)

    def _wait_for_nodes(self, ready: Any, late: Any) -> None:
        """Poll every node until ``ready(node)`` holds for all, keeping what arrives meanwhile (:meth:`_keep`);
        ``late(sorted nodes still waited for)`` words the timeout."""
        waiting = {n for n in self.conns if not ready(n)}
        deadline = time.monotonic() + self.timeout_s
        while waiting:
            for n in list(waiting):
                for c in self.conns[n].poll(timeout_s=0):
                    self._keep(n, c)  # a node already past this point may be sending what comes next
                if ready(n):
                    waiting.discard(n)
            if waiting:
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"node {self.node}: {late(sorted(waiting))} within {self.timeout_s:g} s")
                time.sleep(50e-6)

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
        """A completion that arrived outside the run that wants it: plan notices are recorded, the rest waits
        in the backlog for the next run."""
        if c.kind == "received" and self._notice(n, c.imm):
            return
        if c.kind == "received" or c.nbytes:
            self._backlog.setdefault(n, []).append(c)

    def _node_of(self, gpu: int) -> int:
        return gpu // self.L

    # --- one run: every stage's chunks through the rings -------------------------------------------------
    def _routes(self, plan: Plan) -> Routes:
        key = (id(plan), self.direct_receive)
        got = self._route_cache.get(key)
        if got is None or got[0] is not plan:
            got = self._route_cache[key] = (plan, Routes(plan, self.direct_receive, self.ranks))
            while len(self._route_cache) > 16:
                self._route_cache.pop(next(iter(self._route_cache)))
        return got[1]

    def _begin_run(self) -> None:
        """The state of one run: per local GPU, the next chunk its send ring stages, which of its chunks left
        and which were granted a receive slot (credits); which incoming chunks arrived."""
        routes = self._routes(self.plan)
        self._run = _RunState(routes, self.ranks)
        self._staged, self._landing = deque(), deque()
        self._inflight: dict[tuple[int, int], tuple[int, int]] = {}  # (connection, write id) -> (ū, send position)

    def _local_copies(self) -> None:
        """Copies that stay in the node (local and native: both ends here), stage by stage."""
        fl, mine = self.plan.flows, set(self.ranks)
        for stage in self.plan.stages:
            tr = stage.transfers
            for t in range(len(tr.flow)):
                if tr.role[t] in (LOCAL, NATIVE) and tr.src[t] in mine:
                    f = tr.flow[t]
                    a, b = fl.src_offset[f] + tr.offset[t], fl.dst_offset[f] + tr.offset[t]
                    self._copy_within(fl.dst[f], b, fl.src[f], a, tr.bytes[t])

    def _run_done(self) -> bool:
        run = self._run
        return (run.sends_left == 0 and run.receives_left == 0 and not self._staged and not self._landing)

    def _send_ready(self) -> bool:
        """Stage every chunk, in each send ring's order, whose send slot is free (the write of the chunk ``S``
        before it left) and whose receive slot is granted (one of the ring's first ``S``, or credited)."""
        run, S, progressed = self._run, self.slots, False
        for ubar, seq in run.out.items():
            x, total = run.next[ubar], len(seq.stage)
            sent, credit = run.sent[ubar], run.credit[ubar]
            while x < total and (x < S or sent[x - S]):
                ring = int(seq.ring[x])
                if ring >= S and not credit[x]:
                    break
                self._send_chunk(ubar, seq, x)
                x += 1
                progressed = True
            run.next[ubar] = x
        return progressed

    def _post_ready(self) -> bool:
        """Post the network writes of staged chunks whose copy finished, and the credits of landed chunks whose
        copy finished (chunk state DMA_COPYING -> NETWORK, and back to IDLE)."""
        progressed = False
        while self._staged and self._done(self._staged[0][0]):
            _, conn, args, imm, ubar, x = self._staged.popleft()
            self._inflight[(id(conn), conn.write(*args, imm=imm))] = (ubar, x)
            progressed = True
        while self._landing and self._done(self._landing[0][0]):
            _, conn, imm = self._landing.popleft()
            if conn is not None:
                self._notify(conn, imm)
            progressed = True
        return progressed

    def _chunk_range(self, tr, t: int, k: int) -> tuple[int, int]:
        start = tr.offset[t] + k * self.chunk
        return start, min(self.chunk, tr.offset[t] + tr.bytes[t] - start)

    def _send_chunk(self, ubar: int, seq: _Sequence, x: int) -> None:
        fl = self.plan.flows
        tr = self.plan.stages[int(seq.stage[x])].transfers
        t, k = int(seq.transfer[x]), int(seq.chunk[x])
        f, vbar = tr.flow[t], tr.dst[t]
        start, n = self._chunk_range(tr, t, k)
        slot = (x % self.slots) * self.chunk
        # send_forward (u -> ū) or the staging copy of ū's own data: into ū's send ring
        token = self._stage_out(ubar, slot, fl.src[f], fl.src_offset[f] + start, n)
        local_index, ring = vbar % self.L, int(seq.ring[x])
        if ring < 0:   # straight into the destination's output
            region, offset = 2 * local_index, fl.dst_offset[f] + start
        else:          # into v̄'s receive ring, forwarded on (or copied to the GPU) by v̄
            region, offset = 2 * local_index + 1, (ring % self.slots) * self.chunk
        self._staged.append((token, self.conns[self._node_of(vbar)], (self.send_region[ubar], slot, n, region, offset),
                             (local_index << 24) | int(seq.peer_pos[x]), ubar, x))

    def _forged(self, node: int, what: str, imm: int) -> TransportError:
        return TransportError(f"node {self.node}, plan {self.plan.plan_id}: node {node} {what} (immediate {imm:#x}): "
                              "the nodes run different schedules, or the peer is not a HOCCL node of this job")

    def _on_completion(self, node: int, c) -> None:
        run = self._run
        if c.kind == "sent":
            chunk = self._inflight.pop((id(self.conns[node]), c.write_id), None)
            if chunk is not None:  # a data write (credits and notices are not tracked)
                ubar, x = chunk
                run.sent[ubar][x] = 1
                run.sends_left -= 1
            return
        imm = c.imm
        local, pos = (imm >> 24) & 0x7F, imm & 0xFFFFFF
        if imm & CREDIT:  # chunk ``pos`` of local GPU ``local``'s sends may write its receive slot
            ubar = self.node * self.L + local
            seq = run.out.get(ubar) if local < self.L else None
            if seq is None or pos >= len(seq.stage) or seq.ring[pos] < self.slots or \
                    self._node_of(int(seq.peer[pos])) != node or run.credit[ubar][pos]:
                raise self._forged(node, f"credited chunk {pos} of local GPU {local}, which is not a chunk of this "
                                   "run that waits for that node's credit", imm)
            run.credit[ubar][pos] = 1
            return
        if self._notice(node, imm):  # a node through with this run already, or in the next one
            return
        vbar = self.node * self.L + local
        seq = run.inc.get(vbar) if local < self.L else None
        if seq is None or pos >= len(seq.stage) or self._node_of(int(seq.peer[pos])) != node or run.got[vbar][pos]:
            why = ("the plan does not send it" if seq is None else
                   "no chunk of this run has that position" if pos >= len(seq.stage) else
                   f"GPU {int(seq.peer[pos])} sends that one" if self._node_of(int(seq.peer[pos])) != node else
                   "it arrived twice")
            raise self._forged(node, f"wrote chunk {pos} for local GPU {local}, which this run does not receive "
                               f"from it ({why})", imm)
        run.got[vbar][pos] = 1
        run.receives_left -= 1
        ring = int(seq.ring[pos])
        if ring < 0:
            return
        fl, tr = self.plan.flows, self.plan.stages[int(seq.stage[pos])].transfers
        t, k = int(seq.transfer[pos]), int(seq.chunk[pos])
        f = tr.flow[t]
        start, n = self._chunk_range(tr, t, k)
        token = self._land(vbar, (ring % self.slots) * self.chunk, fl.dst[f], fl.dst_offset[f] + start, n)
        # the slot goes to the chunk that uses it next: ``S`` ring positions on, from whichever GPU sends it
        nxt = run.routes.ring_user(vbar, ring + self.slots)
        if nxt is None:
            self._landing.append((token, None, 0))
        else:
            ubar2, x2 = nxt
            self._landing.append((token, self.conns[self._node_of(ubar2)], CREDIT | ((ubar2 % self.L) << 24) | x2))

    def _waiting_for(self) -> str:
        """What a stalled run waits for, in words (for the timeout's message)."""
        run = self._run
        for ubar, seq in run.out.items():
            x = run.next[ubar]
            if x < len(seq.stage):
                what = "its credit" if seq.ring[x] >= self.slots and not run.credit[ubar][x] else "a free send slot"
                return (f"GPU {ubar}'s chunk {x} to GPU {int(seq.peer[x])} (stage {int(seq.stage[x])}) waits for "
                        f"{what}")
        for vbar, seq in run.inc.items():
            missing = np.flatnonzero(np.frombuffer(run.got[vbar], np.uint8) == 0)
            if missing.size:
                x = int(missing[0])
                return (f"GPU {vbar} waits for chunk {x} from GPU {int(seq.peer[x])} (stage {int(seq.stage[x])}) and "
                        f"{missing.size - 1} more")
        return f"{run.sends_left} writes to leave, {len(self._staged) + len(self._landing)} copies to finish"

    def _poll(self, node: int) -> list:
        items = self._backlog.pop(node, [])
        return items + self.conns[node].poll(timeout_s=0)

    def _barrier(self) -> None:
        """The end of a run: tell every node, and wait until every node said so too (a node may close its
        transport, or start its next run, only once no node expects anything more of this one)."""
        run = self._runs & 0xFFFFFF
        self._runs += 1
        self._tell_all(RUN_DONE | run)
        self._wait_for_nodes(lambda n: (n, run) in self._early_done,
                             lambda waiting: f"nodes {waiting} did not finish plan {self.plan.plan_id}")
        self._early_done = {(n, r) for n, r in self._early_done if r != run}

    # --- the copies: host memory here, copy engines in GpuNodeExecutor ----------------------------------
    # Each returns a token; ``_done(token)`` says whether that copy finished (here: always at once).
    direct_receive = True  # the network may write straight into a destination output (host memory)

    def _copy_within(self, dst_rank: int, dst_off: int, src_rank: int, src_off: int, n: int) -> None:
        self.outputs[dst_rank][dst_off:dst_off + n] = self.inputs[src_rank][src_off:src_off + n]

    def _stage_out(self, ubar: int, slot: int, src_rank: int, src_off: int, n: int) -> object:
        self.send_ring[ubar][slot:slot + n] = self.inputs[src_rank][src_off:src_off + n]
        return None

    def _land(self, vbar: int, slot: int, v: int, dst_off: int, n: int) -> object:
        self.outputs[v][dst_off:dst_off + n] = self.recv_ring[vbar][slot:slot + n]
        return None

    def _done(self, token: object) -> bool:
        return True

    def _finish_run(self) -> None:
        """Wait for this run's copies (host copies are done already)."""


class _Sequence:
    """The chunks one GPU sends (or receives) over the network in one run, in ring order, as parallel arrays:
    per position its stage, transfer and chunk index, the GPU at the other end, that chunk's position in the
    other end's sequence, and its receive-ring position (-1: it lands straight in the output, no ring)."""

    __slots__ = ("stage", "transfer", "chunk", "peer", "peer_pos", "ring")

    def __init__(self, parts: list[tuple]):  # per transfer: its six columns (a GPU with none has no sequence)
        self.stage, self.transfer, self.chunk, self.peer, self.peer_pos, self.ring = (
            np.concatenate(c) for c in zip(*parts, strict=True))


class Routes:
    """Where every network chunk of a plan goes, the same on every node (a pure function of the plan).

    Each GPU's sends form one sequence over the run, stage after stage (stages are matchings: at most one flow
    per GPU and direction in each), and so do its receives; position ``x`` of a send sequence uses send-ring slot
    ``x % S``, and the receives that land in a ring (not straight in an output) use receive-ring slot ``r % S``
    for their ring position ``r``. A receive slot passes from one chunk to the one ``S`` ring positions on, which
    may be the next stage's, from another GPU: stages follow each other slot by slot on every ring, without a
    barrier between them. A data write's immediate names the receiving GPU and its receive position; a credit
    names the sending GPU and the send position it lets go."""

    def __init__(self, plan: Plan, direct_receive: bool, gpus: Sequence[int] | None = None):
        """``gpus``: the GPUs whose sequences to keep (a node's; default all). Every transfer is counted, so
        positions at other GPUs are right too, but arrays are built for these GPUs' transfers only."""
        chunk = plan.options.chunk_bytes
        keep = None if gpus is None else set(gpus)
        fl = plan.flows
        n_send: dict[int, int] = {}
        n_recv: dict[int, int] = {}
        n_ring: dict[int, int] = {}
        out: dict[int, list] = {}
        inc: dict[int, list] = {}
        bases: dict[tuple[int, int], tuple[int, int]] = {}  # (stage, transfer) -> (send, ring position of chunk 0)
        self._bases = bases
        for stage in plan.stages:
            tr = stage.transfers
            for t in range(len(tr.flow)):
                if tr.role[t] != RDMA:
                    continue
                ubar, vbar = int(tr.src[t]), int(tr.dst[t])
                n = max(1, -(-int(tr.bytes[t]) // chunk))
                x0, r0 = n_send.get(ubar, 0), n_recv.get(vbar, 0)
                ringed = not (direct_receive and vbar == int(fl.dst[tr.flow[t]]))
                g0 = n_ring.get(vbar, 0)
                if keep is None or ubar in keep or vbar in keep:
                    ks = np.arange(n, dtype=np.int64)
                    ring = g0 + ks if ringed else np.full(n, -1, np.int64)
                    st, tt = np.full(n, stage.index, np.int64), np.full(n, t, np.int64)
                    if keep is None or ubar in keep:
                        out.setdefault(ubar, []).append((st, tt, ks, np.full(n, vbar, np.int64), r0 + ks, ring))
                    if keep is None or vbar in keep:
                        inc.setdefault(vbar, []).append((st, tt, ks, np.full(n, ubar, np.int64), x0 + ks, ring))
                n_send[ubar], n_recv[vbar] = x0 + n, r0 + n
                if ringed:
                    n_ring[vbar] = g0 + n
                bases[(stage.index, t)] = (x0, g0 if ringed else -1)
        for g, count in (*n_send.items(), *n_recv.items()):
            if count > 0xFFFFFF:
                raise TransportError(f"plan {plan.plan_id}: GPU {g} moves {count} network chunks in one run, more "
                                     f"than an immediate can number (2**24); compile with a larger chunk size")
        self.out = {g: _Sequence(p) for g, p in out.items()}
        self.inc = {g: _Sequence(p) for g, p in inc.items()}
        # per receiving GPU: send (GPU, position) of each ring position, for the credits
        self._ring_users: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for g, seq in self.inc.items():
            ringed = seq.ring >= 0
            self._ring_users[g] = (seq.peer[ringed], seq.peer_pos[ringed])

    def ring_user(self, vbar: int, ring_pos: int) -> tuple[int, int] | None:
        """(sending GPU, its send position) of ``vbar``'s receive-ring position ``ring_pos``, or None past the end."""
        peers, pos = self._ring_users[vbar]
        if ring_pos >= len(peers):
            return None
        return int(peers[ring_pos]), int(pos[ring_pos])

    def send_base(self, stage: int, t: int) -> int:
        """The send position of transfer ``t``'s (of ``stage``) first chunk in its sender's sequence."""
        return self._bases[(stage, t)][0]

    def ring_base(self, stage: int, t: int) -> int:
        """The receive-ring position of transfer ``t``'s first chunk at its receiver (-1: no ring)."""
        return self._bases[(stage, t)][1]


class _RunState:
    """The driving thread's state of one run (see :class:`Routes`)."""

    __slots__ = ("routes", "out", "inc", "next", "sent", "credit", "got", "sends_left", "receives_left")

    def __init__(self, routes: Routes, ranks: Sequence[int]):
        self.routes = routes
        self.out = {g: routes.out[g] for g in ranks if g in routes.out}
        self.inc = {g: routes.inc[g] for g in ranks if g in routes.inc}
        self.next = dict.fromkeys(self.out, 0)
        self.sent = {g: bytearray(len(s.stage)) for g, s in self.out.items()}
        self.credit = {g: bytearray(len(s.stage)) for g, s in self.out.items()}
        self.got = {g: bytearray(len(s.stage)) for g, s in self.inc.items()}
        self.sends_left = sum(len(s.stage) for s in self.out.values())
        self.receives_left = sum(len(s.stage) for s in self.inc.values())


# Staging ring per GPU and direction when the caller does not give ``slots``: measured on the 2x H200 host
# (1 GiB over TCP, 8 lanes, docs/benchmarks.md) 4 slots of 8 MiB ran at 0.64-0.74 of the transport alone
# under the same protocol, 32 slots of 8 MiB at 0.84-0.95: the ring must hold enough chunks to keep every
# lane busy while the copies and credits of earlier chunks complete. The same number of slots on every
# node (the sender picks the remote slot).
RING_BYTES = 256 << 20
MAX_SLOTS = 64


def ring_slots(chunk_bytes: int, ring_bytes: int = RING_BYTES) -> int:
    """Slots of a staging ring of about ``ring_bytes`` for chunks of ``chunk_bytes`` (4 to MAX_SLOTS)."""
    if ring_bytes < 1:
        raise TransportError(f"ring_bytes={ring_bytes}: give the staging ring size in bytes (default {RING_BYTES})")
    return max(4, min(MAX_SLOTS, ring_bytes // max(1, chunk_bytes)))


class PreparedRun:
    """One run of a plan whose every GPU copy is already enqueued (:meth:`GpuNodeExecutor.prepare`): the gates
    that the run opens, in the order it opens them, per staging slot, and the counters the copy streams write
    when they are through."""

    __slots__ = ("plan", "send", "recv", "ends")

    def __init__(self, plan: Plan):
        self.plan = plan
        self.send: dict[tuple[int, int], deque] = {}  # (ū, slot) -> (go flag, staged flag, count, bytes) per use
        self.recv: dict[tuple[int, int], deque] = {}  # (v̄, slot) -> (arrived flag, landed flag, count, bytes)
        self.ends: list[tuple[Flag, int]] = []        # per copy stream: its end flag and the count it writes last


class GpuNodeExecutor(HostNodeExecutor):
    """The same schedule with GPU buffers: one process drives its node's GPUs (``{rank: (input, output)}``
    as CuPy arrays, torch tensors or anything :func:`as_buffer` takes).

    Copies within the node run on copy engines (``cudaMemcpyAsync``, peer access between the node's
    GPUs). The network side is a host transport (TCP here), so staging is pinned, device-mapped host
    memory: the copy engine of the sending GPU moves each chunk device -> staging slot (the u -> ū
    forward and the staging copy in one), the transport posts the write once that copy has completed,
    and on the far side each received chunk goes staging slot -> destination GPU on its copy engine, the
    slot's credit leaving once that copy completed. With ``slots`` chunks per ring the copies of chunk
    k+1.. overlap the network transfer of chunk k.

    Every copy of a run is enqueued up front, by :meth:`prepare` in the thread that calls it, each gated on the
    GPU by a counter flag (pinned host memory) that the driving thread (:meth:`run`) opens: a staging copy waits
    for its slot's ``go`` counter (written when the slot is free) and writes ``staged`` after it; a landing copy
    waits for ``arrived`` (written when the chunk is in the ring) and writes ``landed``, after which the credit
    leaves. So ``run`` makes no CUDA call at all: a thread that drives the network while the application's thread
    sits in a blocking CUDA call (a ``tensor.cpu()`` waiting for this very run) cannot be blocked behind it, which
    is what happened on the H200 when the proxy issued its copies itself. Every copy stream also waits for the
    ``after`` events (where the buffers' producers sit in their streams) before its first copy. A run that fails
    opens every gate it still holds (its data is then wrong), so no stream waits forever.
    By default a ring holds about ``ring_bytes`` (256 MiB, pinned; see :func:`ring_slots`).
    """

    direct_receive = False  # TCP lands in host memory: always through the receive ring

    def __init__(self, plan: Plan, node: int, buffers: Mapping[int, tuple], transport: Transport, *,
                 slots: int | None = None, timeout_s: float = 30.0, reuse: bool = False,
                 ring_bytes: int = RING_BYTES, staging: str = "auto"):
        from .._cuda import cupy_runtime
        from .._trust import verified

        verified(plan)  # before anything is allocated (the base class checks again, from its cache)
        if staging not in ("auto", "host", "device"):
            raise TransportError(f"staging={staging!r}: choose 'host' (pinned host rings), 'device' (rings in GPU "
                                 "memory registered with an RDMA NIC) or 'auto'")
        if staging == "device" and not transport.device_memory:
            raise TransportError(f"staging='device' needs a transport that registers GPU memory (verbs); the "
                                 f"{transport.name} transport moves host memory: use staging='host'")
        self.staging = "device" if staging == "auto" and transport.device_memory else \
            ("host" if staging == "auto" else staging)
        self._ring_at: dict[tuple[str, int], int] = {}   # (kind, rank) -> the ring's address
        self._device_rings: list[tuple[int, int]] = []  # (GPU, pointer) of rings in GPU memory
        if slots is None:
            slots = ring_slots(plan.options.chunk_bytes, ring_bytes)
        topo = plan.topology
        L = topo.gpus_per_node
        ranks = list(range(node * L, (node + 1) * L))
        self._rt = cupy_runtime()
        self._peers: set[tuple[int, int]] = set()
        self.plan, self.node, self.ranks = plan, node, ranks  # what _check_buffers needs before the base class runs
        given = self._check_buffers(plan, buffers)
        self._given, self._dev = buffers, {r: b[2] for r, b in given.items()}  # what run() runs without arguments
        self._current: PreparedRun | None = None
        self._host: list[int] = []
        placeholders = {r: (self._pinned(1), self._pinned(1)) for r in ranks}  # the base class's host views
        self._streams: dict[tuple, int] = {}
        self._keep_alive: list = []
        # per local rank and slot: go/staged (its send ring) and arrived/landed (its receive ring); per stream: end
        self._flags = FlagPool(4 * L * slots + 2 * L * L + L + 8)
        self._gates = {(kind, r, j): (self._flags.allocate(), self._flags.allocate())
                       for kind in ("send", "recv") for r in ranks for j in range(slots)}
        self._ends: dict[int, Flag] = {}
        self._last_end: dict[int, tuple[Flag, int]] = {}  # stream -> the end count of the last run prepared on it
        self._counts: dict[object, int] = {}  # the last count of every gate and end flag
        self._bounds_checked: dict[int, Plan] = {}  # id -> plan: plans whose transfers were checked in bounds
        super().__init__(plan, node, placeholders, transport, slots=slots, timeout_s=timeout_s, reuse=reuse,
                         _check_sizes=False)

    def _check_buffers(self, plan: Plan, buffers: Mapping[int, tuple]) -> dict:
        """{rank: (input, output, GPU)} of a run's buffers: sizes, one GPU per rank, peer access between them."""
        from .._cuda import enable_peer_access
        from ..interop import as_buffer

        bound = {}
        for r in self.ranks:
            if r not in buffers:
                raise TransportError(f"node {self.node}: no buffers for rank {r} (this node drives ranks "
                                     f"{self.ranks})")
            inp, out = buffers[r]
            ib, ob = as_buffer(inp, f"rank {r} input"), as_buffer(out, f"rank {r} output")
            if ib.nbytes != plan.ranks.input_bytes[r] or ob.nbytes != plan.ranks.output_bytes[r]:
                raise TransportError(f"rank {r}: buffers of {ib.nbytes}/{ob.nbytes} bytes, plan {plan.plan_id} "
                                     f"needs {plan.ranks.input_bytes[r]}/{plan.ranks.output_bytes[r]}")
            if ib.nbytes and ob.nbytes and ib.device != ob.device:
                raise TransportError(f"rank {r}: input and output on different GPUs ({ib.device}, {ob.device})")
            bound[r] = (ib, ob, ob.device if ob.nbytes else ib.device)
        for a in self.ranks:
            for b in self.ranks:
                pair = (bound[a][2], bound[b][2])
                if pair[0] != pair[1] and pair not in self._peers:
                    enable_peer_access(*pair)
                    self._peers.add(pair)
        return bound

    # pinned, device-mapped staging (portable: every GPU of the node can copy to and from it)
    def _pinned(self, nbytes: int) -> np.ndarray:
        import ctypes

        from .._cuda import host_mapped_alloc

        ptr = host_mapped_alloc(max(1, nbytes))
        self._host.append(ptr)
        return np.frombuffer((ctypes.c_uint8 * max(1, nbytes)).from_address(ptr), dtype=np.uint8)

    def _ring(self, nbytes: int) -> np.ndarray:
        return self._pinned(nbytes)

    def _make_ring(self, kind: str, rank: int, nbytes: int) -> tuple[object, Region]:
        """Host staging: pinned, device-mapped host memory. Device staging (an RDMA transport): GPU memory
        of the rank's GPU, registered once for GPUDirect RDMA (dma-buf, else peer memory)."""
        if self.staging == "host":
            ring, region = super()._make_ring(kind, rank, nbytes)
            self._ring_at[(kind, rank)] = int(ring.ctypes.data)
            return ring, region
        rt, device = self._rt, self._dev[rank]
        rt.setDevice(device)
        size = -(-max(1, nbytes) // (2 << 20)) * (2 << 20)  # whole 2 MiB pages: the dma-buf range is whole pages
        ptr = int(rt.malloc(size))
        self._device_rings.append((device, ptr))
        self._ring_at[(kind, rank)] = ptr
        return ptr, self.transport.register_device(ptr, nbytes, device)

    def _stream(self, key: tuple, device: int) -> int:
        """The copy stream of ``key``: ("d2h", ū) and ("h2d", v̄) per staging ring (each carries one transfer
        per stage, so no ring's copies queue behind another's), ("d2d", GPU) for the copies within the node."""
        key = (*key, device)
        if key not in self._streams:
            import cupy

            with cupy.cuda.Device(device):
                s = cupy.cuda.Stream(non_blocking=True)
            self._keep_alive.append(s)
            self._streams[key] = int(s.ptr)
        return self._streams[key]

    def _count(self, key: object) -> int:
        """The next value of a counter (1, 2, ... modulo 2**32, never 0: the flags start at 0)."""
        n = self._counts.get(key, 0) % 0xFFFFFFFF + 1
        self._counts[key] = n
        return n

    # --- the copies, enqueued up front ------------------------------------------------------------------------
    def prepare(self, plan: Plan | None = None, buffers: Mapping[int, tuple] | None = None, *,
                after: Sequence[int] = ()) -> PreparedRun:
        """Enqueue every copy of one run of ``plan`` on ``buffers`` (default: the executor's) and return what
        :meth:`run` needs to drive it. Runs are driven in the order they were prepared; preparing may go ahead
        of driving (the network communicators prepare at call time, their proxy drives). ``after``: CUDA events
        (raw handles) that every copy of the run waits for on the GPU."""
        plan = self.plan if plan is None else plan
        if plan is not self.plan or buffers is not None:
            self._only_with_reuse()
        self._fits(plan)
        self._checked_bounds(plan)
        bound = self._check_buffers(plan, self._given if buffers is None else buffers)
        run = PreparedRun(plan)
        try:
            self._enqueue(run, bound, after)
        except BaseException:
            self.release(run)  # what was enqueued before the error must not wait forever
            raise
        return run

    def _checked_bounds(self, plan: Plan) -> None:
        """Every transfer of ``plan`` inside its buffers (:func:`~hoccl_runtime.program.check_bounds`), once per
        plan object (a few recent ones remembered)."""
        from .._trust import verified
        from ..program import check_bounds

        seen = self._bounds_checked
        if seen.get(id(plan)) is plan:
            return
        verified(plan)  # the one door (as the host executor's): verify_plan unless this process compiled it
        check_bounds(plan)
        seen[id(plan)] = plan
        while len(seen) > 32:
            seen.pop(next(iter(seen)))

    def _enqueue(self, run: PreparedRun, bound: dict, after: Sequence[int]) -> None:
        from .._cuda import MEMCPY_DEFAULT

        plan, rt, mine = run.plan, self._rt, set(self.ranks)
        fl = plan.flows
        used: dict[int, int] = {}  # stream -> its GPU

        def stream(key: tuple, device: int) -> int:
            s = self._stream(key, device)
            rt.setDevice(device)
            if s not in used:
                for event in after:  # the run's first copy on this stream: after the callers' work
                    rt.streamWaitEvent(s, event, 0)
                used[s] = device
            return s

        routes = self._routes(plan)
        for stage in plan.stages:
            tr = stage.transfers
            sending, receiving = set(), set()
            for t in range(len(tr.flow)):
                f, role, n = tr.flow[t], tr.role[t], tr.bytes[t]
                if role in (LOCAL, NATIVE) and tr.src[t] in mine:
                    src, dst = bound[fl.src[f]], bound[fl.dst[f]]
                    to = dst[1].ptr + fl.dst_offset[f] + tr.offset[t]
                    frm = src[0].ptr + fl.src_offset[f] + tr.offset[t]
                    # a rank's own block given in place (its input inside its output, as FSDP's AllGather does)
                    # is there already: no copy, so no same-GPU copy on SMs (as the intra-node path, bounce_moves)
                    if n and (to != frm or dst[2] != src[2]):
                        rt.memcpyAsync(to, frm, n, MEMCPY_DEFAULT, stream(("d2d",), src[2]))
                    continue
                if role != RDMA:
                    continue
                if tr.src[t] in mine:  # ū's send ring: staging copies u -> slot, each once its slot is free (go)
                    ubar, u = tr.src[t], fl.src[f]
                    self._one_per_ring(sending, ubar, stage, "sends")
                    ring, data = self._ring_at[("send", ubar)], bound[u][0].ptr + fl.src_offset[f]
                    self._gated(run.send, "send", ubar, stream(("d2h", ubar), bound[u][2]), tr, t,
                                routes.send_base(stage.index, t),
                                lambda slot, start, ring=ring, data=data: (ring + slot, data + start))
                if tr.dst[t] in mine:  # v̄'s receive ring: landing copies slot -> v, each once its chunk arrived
                    vbar, v = tr.dst[t], fl.dst[f]
                    self._one_per_ring(receiving, vbar, stage, "receives")
                    ring, data = self._ring_at[("recv", vbar)], bound[v][1].ptr + fl.dst_offset[f]
                    self._gated(run.recv, "recv", vbar, stream(("h2d", vbar), bound[v][2]), tr, t,
                                routes.ring_base(stage.index, t),
                                lambda slot, start, ring=ring, data=data: (data + start, ring + slot))
        for s, device in used.items():  # each stream says when it is through with the run
            flag = self._ends.get(s)
            if flag is None:
                flag = self._ends[s] = self._flags.allocate()
            c = self._count(("end", s))
            rt.setDevice(device)
            MemOps().write(flag, c).enqueue(s)
            run.ends.append((flag, c))
            self._last_end[s] = (flag, c)

    def _gated(self, side: dict, kind: str, ring: int, s: int, tr: Any, t: int, base: int, where: Any) -> None:
        """Transfer ``t``'s chunks through ``ring``'s slots on stream ``s`` (its first chunk at ring position
        ``base``, :class:`Routes`), each copy (``where(slot offset, chunk start)`` gives its (destination, source))
        after its slot's gate count and writing the done count after."""
        from .._cuda import MEMCPY_DEFAULT

        for k in range(max(1, -(-tr.bytes[t] // self.chunk))):
            start, nb = self._chunk_range(tr, t, k)
            j = (base + k) % self.slots
            gate, done = self._gates[(kind, ring, j)]
            c = self._count((kind, ring, j))
            MemOps().wait_geq(gate, c).enqueue(s)
            if nb:
                self._rt.memcpyAsync(*where(j * self.chunk, start), nb, MEMCPY_DEFAULT, s)
            MemOps().write(done, c).enqueue(s)
            side.setdefault((ring, j), deque()).append((gate, done, c, nb))

    def _one_per_ring(self, seen: set, ring: int, stage: Any, what: str) -> None:
        if ring in seen:
            raise TransportError(f"plan stage {stage.index}: GPU {ring} {what} two network transfers in one stage; "
                                 "a stage holds at most one per GPU and direction (the plan is not a valid HOCCL "
                                 "schedule: hoccl-inspect --verify)")
        seen.add(ring)

    def run(self, plan: Plan | None = None, buffers: Mapping[int, tuple] | None = None, *,
            after: Sequence[int] = (), prepared: PreparedRun | None = None) -> None:
        """Drive one run to completion: ``prepared`` (from :meth:`prepare`, possibly in another thread), else
        this plan and buffers prepared here first. Makes no CUDA call when given ``prepared``."""
        if prepared is None:
            prepared = self.prepare(plan, buffers, after=after)
        self._current = prepared
        try:
            self.plan = prepared.plan
            with fine_sleeps(self._slack_ns):  # the loops' 20-50 us sleeps last about that long (hoccl_runtime._timer)
                self._drive()
                self._wait(lambda: all(reached(flag, c) for flag, c in prepared.ends), "its copies to finish")
        except BaseException:
            self._failed = True
            self.release(prepared)
            raise

    def release(self, prepared: PreparedRun) -> None:
        """Open every gate of a run that will not be driven to its end (it failed, or an earlier one did), so
        that its copy streams finish (moving stale bytes) instead of waiting forever."""
        for gates in (*prepared.send.values(), *prepared.recv.values()):
            if gates:
                gate, _, c, _ = gates[-1]  # counters only grow: the last opens every earlier wait too
                if not reached(gate, c):
                    gate.write(as_int32(c))
                gates.clear()

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + self.timeout_s
        while not ready():
            if time.monotonic() > deadline:
                raise HocclTimeoutError(f"node {self.node}: the GPU did not finish {what} within {self.timeout_s:g} s "
                                        "(a copy that never ran: is the GPU hung?)")
            time.sleep(20e-6)

    def _gate(self, side: dict, key: tuple, n: int) -> tuple:
        gates = side.get(key)
        if not gates:
            raise TransportError(f"node {self.node}: the run asked for a copy of slot {key} that was not prepared "
                                 "(prepare and run must see the same plan)")
        gate, done, c, nb = gates.popleft()
        if nb != n:
            raise TransportError(f"node {self.node}: slot {key} was prepared for {nb} bytes, the run moves {n}")
        gate.write(as_int32(c))
        return done, c

    def _copy_within(self, dst_rank: int, dst_off: int, src_rank: int, src_off: int, n: int) -> None:
        """Enqueued by prepare (no gate: only after the callers' events)."""

    def _stage_out(self, ubar: int, slot: int, src_rank: int, src_off: int, n: int) -> object:
        return self._gate(self._current.send, (ubar, slot // self.chunk), n)

    def _land(self, vbar: int, slot: int, v: int, dst_off: int, n: int) -> object:
        return self._gate(self._current.recv, (vbar, slot // self.chunk), n)

    def _done(self, token: object) -> bool:
        flag, c = token
        return reached(flag, c)  # the copy's stream wrote it: no driver call

    def _finish_run(self) -> None:
        """Nothing: a run's copies end when their staged and landed counters were seen (the base class waits for
        them), and :meth:`run` waits for every stream's end counter."""

    def close(self) -> None:
        """Wait (up to the timeout) for the copies of every run prepared, then free the rings and flags. Copies
        still pending then (a caller's stream that never reached its call) keep their memory: it is left
        allocated, with a warning, rather than freed under them."""
        import warnings

        from .._cuda import host_free

        self.leave()
        rt = self._rt
        deadline = time.monotonic() + self.timeout_s
        while not all(reached(flag, c) for flag, c in self._last_end.values()):
            if time.monotonic() > deadline:
                warnings.warn(f"node {self.node}: copies of a network call are still pending at close (its caller's "
                              "stream never reached it?); its staging memory is left allocated", stacklevel=2)
                return
            time.sleep(1e-3)
        for (*_, device), s in self._streams.items():
            rt.setDevice(device)
            rt.streamSynchronize(s)
        self._flags.close()
        self.send_ring = self.recv_ring = self.inputs = self.outputs = {}
        for ptr in self._host:
            host_free(ptr)
        self._host.clear()
        for device, ptr in self._device_rings:
            rt.setDevice(device)
            rt.free(ptr)
        self._device_rings.clear()
        self._keep_alive.clear()
