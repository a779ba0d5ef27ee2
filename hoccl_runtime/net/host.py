"""The inter-node path on host memory: one process per node replays a plan over a transport.

This is the reference for the GPU path of the network issue, runnable anywhere: the node's ranks are NumPy buffers,
the copies that a GPU does with its copy engines (local, native, forwarding and the staging copies) are NumPy copies,
and the network pieces go through a :class:`Transport` (TCP here). What it pins down, before GPUs are involved:

* Staging: each GPU has a ring of ``slots`` chunk slots for the network data it receives (when the data must be
  forwarded on, ``v̄ != v``) and one for what it sends. A GPU's network chunks of one run form one sequence per
  direction, stage after stage (:class:`Routes`); position ``x`` uses slot ``x % slots``. The receiver hands a slot on
  with a credit (a zero-byte write) once its forward copy has taken the chunk: to the sender of the chunk that uses
  the slot next, which may be the next stage's flow, from another GPU; the sender reuses a send slot once its write
  left. In the chunk state machine's words: IDLE -> DMA_COPYING (staging copy) -> NETWORK (write posted) -> IDLE (sent
  / credited). With a GPU these copies overlap with the network; here they are synchronous.
* Stage order without a barrier: the rings run each GPU's stages in order, and a stage's flow into a GPU takes over
  that GPU's receive slots one by one as the previous stage's chunks leave them. So a GPU has one incoming and one
  outgoing network flow at a time (as the plan's stages promise) but for the few slots where one stage's tail meets
  the next one's head, and no node waits for the slowest one between stages.
* Runs of a reusable executor, eagerly: a node tells every node when its run ``n`` is through (its rings are free
  again), and sends run ``n + 1``'s chunks once every node said so, without waiting for the receiver to reach its call
  (the sender's call ends once its writes left: NCCL's eager send into the receiver's buffers, one run deep). Every
  run also starts with a notice of the plan's id to every node; a node takes another node's data or credits of a run
  only once that node's notice for the run matched its own (the notices of a pure sender's peers are checked as they
  come, in order), so nodes in different collectives raise PlanError instead of mixing data. No barrier ends such a
  run (:meth:`HostNodeExecutor.leave` waits for the last one before closing). These notices: :mod:`.notices`.
* Immediates (:mod:`.wire`): data ``(target GPU's local index << 24) | HALF | its receive position`` (HALF: the run
  fills the second half of alternate ring halves); credits ``bit 31 | (sending GPU's
  local index << 24) | the send position they let go``; plan notices ``0x7e000000 | 24 bits of the plan id's CRC``.
  The accepting node knows who connected from the transport's hello (the connecting transport's name), before any data
  can arrive.

Nodes connect to every other node (lower index accepts) and share nothing but the plan, whose id is the transport
session: a node with a different plan is refused at the first exchange.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping

import numpy as np

from hoccl_compiler.schema import Plan

from .._timer import fine_sleeps, slack_setting
from .._trust import verified
from ..errors import HocclTimeoutError, TransportError
from ..executor import check_buffers
from ..settings import env_flag
from .notices import RunNotices
from .routes import ChunkSequence, LeavingWrites, Routes, RunState, net_chunk_of, refuse_multicast
from .transport.base import Connection, Region, Transport, pause
from .wire import CREDIT, HALF, LOCAL, NATIVE, PLAN_HELLO, POSITIONS, RUN_DONE, data_imm

__all__ = ["HostNodeExecutor"]


class HostNodeExecutor(RunNotices):
    """Runs node ``node``'s part of ``plan`` with host buffers ``{rank: (input, output)}``."""

    poll_s = 50e-6  # the driving loops' sleep between polls (the proxy process sets HOCCL_NET_POLL_US)
    multicast = False  # runs forwarded copies (a multicast plan's): the GPU executors, which enqueue them up front
    marks: list | None = None  # (what, time.perf_counter()) of each run's steps, where a trace is asked for

    def _mark(self, what: str) -> None:
        if self.marks is not None:
            self.marks.append((what, time.perf_counter()))

    def __init__(self, plan: Plan, node: int, buffers: Mapping[int, tuple[np.ndarray, np.ndarray]],
                 transport: Transport, *, slots: int = 4, timeout_s: float = 30.0, reuse: bool = False,
                 overlap: bool | None = None, _check_sizes: bool = True):
        verified(plan)  # the one door: a plan from outside runs only once it passed verify_plan
        refuse_multicast(plan, type(self).multicast)
        topo = plan.topology
        if not 0 <= node < topo.nodes:
            raise TransportError(f"node {node}: plan {plan.plan_id} has nodes 0..{topo.nodes - 1}; start one process "
                                 "per node of the plan's topology")
        self.plan, self.node, self.transport, self.timeout_s = plan, node, transport, timeout_s
        # reuse: run(other_plan, other_buffers) over the same connections and rings; every node must agree. The
        # network then always lands in the rings (an output registered once cannot follow new buffers)
        self.reuse = reuse
        self.direct_receive = type(self).direct_receive and not reuse
        # HOCCL_NET_OVERLAP: consecutive runs use alternate halves of every ring, so a run waits only for the nodes
        # that received two runs back (its half's last users), not the last one (net/notices.py)
        # overlap: None reads HOCCL_NET_OVERLAP now; a communicator passes what it read when it was made (every node's
        # executors, and the proxy process's, must agree)
        self.halves = reuse and (overlap_setting() if overlap is None else overlap) and slots >= 2
        self.span = slots // 2 if self.halves else slots  # ring positions a run cycles through before credits
        self._base = 0  # this run's first slot (its half's)
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
        self.chunk = net_chunk_of(plan)  # a network chunk: one ring slot (the plan's copies may take larger ones)
        self.slots = slots
        for r in self.ranks:
            inp, out = buffers[r]
            if _check_sizes:
                check_buffers(r, inp, out, plan)
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
        self._receivers_hist: tuple[frozenset[int], ...] = ()  # the nodes that received in the last two runs
        self._ahead: dict[int, list] = {}  # per node, what came for the next run (its data, its credits)
        # With alternate halves a node may start the next run while this one still sends to it, and its credits
        # carry no run: one that matches no credit this run still waits for is the next run's (a node through this
        # run has sent every credit of it, each before the chunk it lets go could leave), taken then or refused
        self._replayed: dict[int, object] = {}  # the completions kept from the last run, by id (held: ids stay theirs)
        self._mine: dict[int, tuple] = {}    # run -> (this node's plan notice, plan), until all were checked
        self._checked: dict[int, int] = {}   # node -> how many of its plan notices matched this node's runs
        self._deferred: dict[int, list] = {}  # node -> its completions of this run, held until its notice matched
        self._run: RunState | None = None
        self._leaving = LeavingWrites()  # earlier runs' writes still leaving, and the send slots they hold

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
            conn = self.conns[other] = self.transport.connect(addresses[other], timeout_s=self.timeout_s)
            if not getattr(conn, "peer_name", ""):
                conn.peer_name = f"node{other}"  # its errors name the node, not only host:port
        for _ in range(self.node):
            conn = self.transport.accept(timeout_s=self.timeout_s)
            try:  # the connecting node's transport was named "node<i>" (see make_transport)
                other = int(conn.peer_name.removeprefix("node"))
            except ValueError:
                raise TransportError(f"node {self.node}: a peer named {conn.peer_name!r} connected; expected "
                                     "node<index> (create transports with HostNodeExecutor.make_transport)") from None
            self.conns[other] = conn

    @staticmethod
    def make_transport(plan: Plan, node: int, kind: str = "tcp", *, secret: bytes | None = None, open: bool = False,
                       **kwargs) -> Transport:
        """A transport for ``node`` (``kind`` "tcp" or "verbs"): a hash of the plan's content as session (a node
        with another plan, or another schedule under the same claimed id, is refused at the first exchange) and
        the node's name, by which the accepting node knows who connected. TCP needs ``secret=`` (the job's bytes,
        shared by every node, e.g. through the store as the communicators do: peers prove they hold it), or
        ``open=True`` for a transport that authenticates nobody (anyone who reaches the port can join)."""
        if kind == "tcp":
            from .._trust import plan_uid
            from .transport.tcp import TcpTransport

            if secret is None and not open:
                raise TransportError("make_transport(kind='tcp') needs the job's secret= (bytes every node shares, "
                                     "e.g. os.urandom(32) set in the store by node 0), or open=True for a transport "
                                     "that authenticates nobody")
            return TcpTransport(session=plan_uid(plan)[7:39], name=f"node{node}", secret=secret, **kwargs)
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
        """The run's network protocol: the plan notice (and the wait for the nodes that received in the previous
        run to be through it), then every stage's chunks, each GPU's rings handing their slots from one stage's flow
        to the next (no barrier). The staging copies of the first chunks start before the plan notice is written and
        go on during the wait (as the previous run's writes leave, :meth:`_keep`): they fill only this node's own
        send rings, and no write leaves before the wait. So a send's copy out of the GPU overlaps the notices (on the
        1x H200's TCP nodes the notice's write took 30-48 us of a 1 MiB send, the copy 70-76 us)."""
        self._begin_run()
        self._take_ahead()
        self._local_copies()
        self._send_ready()
        self._mark("begun")
        if self.reuse:
            self._announce()  # while the staging copies run
            self._mark("announced")
            self._wait_for_previous()
        self._mark("hello")
        deadline = time.monotonic() + self.timeout_s
        while not self._run_done():
            self._mark("turn")  # the trace: each turn's work and each poll sleep, timed (stalls of this process)
            self._tick()
            progressed = self._send_ready() | self._post_ready()
            for node in self.conns:
                for c in self._poll(node):
                    progressed = True
                    self._on_completion(node, c)
            if progressed or self._stream_waiting():  # no progress is owed before the caller's stream is there
                deadline = time.monotonic() + self.timeout_s
            else:
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"node {self.node}: plan {self.plan.plan_id} made no progress for "
                                            f"{self.timeout_s:g} s: {self._stalled()} (a peer node stalled or "
                                            "died?)")
                self._mark("sleep")
                pause(self.conns, self.poll_s)
        self._tick()  # the caller's stream goes on before this run's notices (a send's run ends at its last post)
        self._mark("network")
        self._finish_run()
        self._end_run()

    def _tick(self) -> None:
        """Each turn of the driving loop (the GPU executor lets the caller's stream go here once its copies are
        through)."""

    def _stream_waiting(self) -> bool:  # whether the run still waits for its caller's stream (the GPU's early runs)
        return False

    def _end_run(self) -> None:
        """After a run's last chunk. A reusable executor tells every node that its rings are free (the run-done
        notice, which the next run of every node waits for before it sends) and does not wait for the other nodes:
        a node whose part is done (a sender whose chunks left) lets its caller go on at once instead of waiting for
        the slowest node; its last run is waited for by :meth:`leave`. A single-run executor ends with the
        barrier."""
        if self.reuse:
            self._leaving.keep(self._inflight, self.span, self._base)  # writes still leaving hold their slots
            self._inflight = {}
            self._tell_all(RUN_DONE | (self._runs & 0xFFFFFF))
            received = frozenset(g // self.L for g in self._run.routes.receivers)
            self._receivers_hist = (*self._receivers_hist, received)[-2:]
            self._runs += 1
        else:
            self._barrier()

    def close(self) -> None:
        """Leave (:meth:`leave`); the transport is the caller's to close."""
        self.leave()

    def _use_plan(self, plan: Plan) -> None:
        verified(plan)
        refuse_multicast(plan, type(self).multicast)
        self._fits(plan)
        self.plan = plan

    def _fits(self, plan: Plan) -> None:
        a, b = plan.topology, self.plan.topology
        if (a.nodes, a.gpus_per_node) != (b.nodes, b.gpus_per_node) or net_chunk_of(plan) != self.chunk:
            raise TransportError(f"plan {plan.plan_id} ({a.nodes} x {a.gpus_per_node} GPUs, network chunks of "
                                 f"{net_chunk_of(plan)} B) does not fit this executor ({b.nodes} x "
                                 f"{b.gpus_per_node}, network chunks of {self.chunk} B): compile it with the same "
                                 "topology and (network) chunk size")

    def _bind(self, buffers: Mapping[int, tuple]) -> None:
        """Take this run's buffers ({rank: (input, output)} for the node's ranks), checking their sizes."""
        plan = self.plan
        for r in self.ranks:
            if r not in buffers:
                raise TransportError(f"node {self.node}: no buffers for rank {r}")
            inp, out = buffers[r]
            check_buffers(r, inp, out, plan)
        self.inputs = {r: buffers[r][0] for r in self.ranks}
        self.outputs = {r: buffers[r][1] for r in self.ranks}

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
        self._run = RunState(routes, self.ranks)
        self._base = self._run_parity() * self.span if self.halves else 0
        # staged chunks per GPU (send ring order); landed ones per GPU and receive slot: chunks arrive out of ring order
        # (lanes), and a credit behind a later position's landing would wait for a copy net/order.py does not order
        # below the staging copy it frees (3 nodes with one hardware queue each deadlocked: test_hw_queues_cpu.py)
        self._staged, self._landing = {}, {}  # GPU -> deque; (GPU, slot) -> deque
        self._inflight: dict[tuple[int, int], tuple[int, int]] = {}  # (connection, write id) -> (ū, send position)

    def _run_parity(self) -> int:
        """Which half of every ring this run uses (HOCCL_NET_OVERLAP): alternate runs, the same on every node."""
        return self._runs & 1

    def _slot(self, position: int) -> int:
        """The ring slot of send or receive-ring position ``position`` in this run (its half's, HOCCL_NET_OVERLAP)."""
        return self._base + position % self.span

    def _half(self) -> int:
        """The ring half this run uses: 1 for the second half of alternate halves (HOCCL_NET_OVERLAP), else 0."""
        return int(self._base > 0)

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
        """Whether this node's part of the run is through: every chunk it receives in place (and credited on), every
        chunk it sends posted (a single run's: left). A reusable executor's next call, a receive say, starts while a
        send's last writes still go out; their send slots stay taken until they left (:class:`LeavingWrites`)."""
        run = self._run
        return ((run.posts_left if self.reuse else run.sends_left) == 0 and run.receives_left == 0
                and not any(self._staged.values()) and not any(self._landing.values()))

    def _send_ready(self) -> bool:
        """Stage every chunk, in each send ring's order, whose send slot is free (the write of the chunk ``S``
        before it left) and whose receive slot is granted (one of the ring's first ``S``, or credited)."""
        run, S, progressed = self._run, self.span, False
        for ubar, seq in run.out.items():
            x, total = run.next[ubar], len(seq.stage)
            sent, credit = run.sent[ubar], run.credit[ubar]
            busy = self._leaving.busy(ubar)  # slots an earlier run's writes still hold (slot x for position x < S)
            while x < total and (sent[x - S] if x >= S else not (busy and self._base + x in busy)):
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
        for staged in self._staged.values():
            while staged and ((after := self._after(*staged[0][:2])) or self._done(staged[0][0])):
                _, conn, args, imm, ubar, x = staged.popleft()
                self._mark("staged")
                self._inflight[(id(conn), conn.write(*args, imm=imm, **after))] = (ubar, x)
                self._run.posts_left -= 1
                progressed = True
        for key, landing in list(self._landing.items()):  # only slots with landings due (GPUs x slots in all)
            while landing and self._done(landing[0][0]):
                _, conn, imm = landing.popleft()
                self._mark("landed")
                if conn is not None:
                    self._notify(conn, imm)
                progressed = True
            if not landing:
                del self._landing[key]
        return progressed

    def _after(self, token: object, conn: Connection) -> dict:
        """``write``'s keywords that let a staged chunk's write go before its copy was seen done (none here)."""
        return {}

    def _chunk_range(self, tr, t: int, k: int) -> tuple[int, int]:
        start = tr.offset[t] + k * self.chunk
        return start, min(self.chunk, tr.offset[t] + tr.bytes[t] - start)

    def _send_chunk(self, ubar: int, seq: ChunkSequence, x: int) -> None:
        fl = self.plan.flows
        tr = self.plan.stages[int(seq.stage[x])].transfers
        t, k = int(seq.transfer[x]), int(seq.chunk[x])
        f, vbar = tr.flow[t], tr.dst[t]
        start, n = self._chunk_range(tr, t, k)
        slot = self._slot(x) * self.chunk
        # send_forward (u -> ū) or the staging copy of ū's own data: into ū's send ring
        token = self._stage_out(ubar, slot, fl.src[f], fl.src_offset[f] + start, n)
        local_index, ring = vbar % self.L, int(seq.ring[x])
        if ring < 0:   # straight into the destination's output
            region, offset = 2 * local_index, fl.dst_offset[f] + start
        else:          # into v̄'s receive ring, forwarded on (or copied to the GPU) by v̄
            region, offset = 2 * local_index + 1, self._slot(ring) * self.chunk
        self._staged.setdefault(ubar, deque()).append((token, self.conns[self._node_of(vbar)], (
            self.send_region[ubar], slot, n, region, offset), data_imm(local_index, int(seq.peer_pos[x]), self._half()),
            ubar, x))

    def _take_ahead(self) -> None:
        """What came for this run while the previous one ran (data, credits) goes to the backlog, to be taken now:
        a credit of it that matches none this run waits for is refused then, not kept again."""
        self._replayed = {id(c): c for early in self._ahead.values() for c in early}
        for n, early in self._ahead.items():
            self._backlog.setdefault(n, []).extend(early)
        self._ahead.clear()

    def _forged(self, node: int, what: str, imm: int) -> TransportError:
        return TransportError(f"node {self.node}, plan {self.plan.plan_id}: node {node} {what} (immediate {imm:#x}): "
                              "the nodes run different schedules, or the peer is not a HOCCL node of this job")

    def _on_completion(self, node: int, c) -> None:
        run = self._run
        if c.kind == "sent":
            key = (id(self.conns[node]), c.write_id)
            chunk = self._inflight.pop(key, None)
            if chunk is not None:  # a data write (credits and notices are not tracked)
                ubar, x = chunk
                run.sent[ubar][x] = 1
                run.sends_left -= 1
            else:  # an earlier run's write, perhaps: its send slot is free again
                self._leaving.left(key)
            return
        imm = c.imm
        local, pos = (imm >> 24) & 0x7F, imm & (0xFFFFFF if imm & CREDIT else POSITIONS)
        if self._notice(node, imm):  # a node through with this run already, or in the next one
            if (imm & 0x7F000000) == PLAN_HELLO:
                self._check_notices()
            return
        # the next run's data, into the other half of the ring: its immediate says so (a write over RDMA completes
        # with its immediate alone, not where it landed)
        if self.halves and not imm & CREDIT and bool(imm & HALF) != self._half():
            self._ahead.setdefault(node, []).append(c)
            return
        if not self._heard(node):  # its plan notice for this run is not in yet: its data waits for it
            self._deferred.setdefault(node, []).append(c)
            return
        if not imm & CREDIT and not run.inc:  # this run receives nothing: the data is for this node's next run that
            self._ahead.setdefault(node, []).append(c)  # receives (its sender waited for this node only through the
            return                                      # last run it received in)
        if imm & CREDIT:  # chunk ``pos`` of local GPU ``local``'s sends may write its receive slot
            ubar = self.node * self.L + local
            seq = run.out.get(ubar) if local < self.L else None
            if seq is None or pos >= len(seq.stage) or seq.ring[pos] < self.span or \
                    self._node_of(int(seq.peer[pos])) != node or run.credit[ubar][pos]:
                if self.halves and id(c) not in self._replayed:  # a node already in the next run (see __init__)
                    self._ahead.setdefault(node, []).append(c)
                    return
                raise self._forged(node, f"credited chunk {pos} of local GPU {local}, which is not a chunk of this "
                                   "run that waits for that node's credit", imm)
            run.credit[ubar][pos] = 1
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
        self._mark("received")
        ring = int(seq.ring[pos])
        if ring < 0:
            return
        fl, tr = self.plan.flows, self.plan.stages[int(seq.stage[pos])].transfers
        t, k = int(seq.transfer[pos]), int(seq.chunk[pos])
        f = tr.flow[t]
        start, n = self._chunk_range(tr, t, k)
        slot = self._slot(ring)
        token = self._land(vbar, slot * self.chunk, fl.dst[f], fl.dst_offset[f] + start, n)
        # the slot goes to the chunk that uses it next: ``S`` ring positions on, from whichever GPU sends it
        nxt = run.routes.ring_user(vbar, ring + self.span)
        self._landing.setdefault((vbar, slot), deque()).append((token, None, 0) if nxt is None else (
            token, self.conns[self._node_of(nxt[0])], CREDIT | ((nxt[0] % self.L) << 24) | nxt[1]))

    def _stalled(self) -> str:
        """What a stalled run waits for, in words (for the timeout's message)."""
        copies = sum(map(len, (*self._staged.values(), *self._landing.values())))
        return self._run.waiting_for(self._deferred, self._node_of, self.span, copies)

    def _poll(self, node: int) -> list:
        return self._backlog.pop(node, []) + self.conns[node].poll(timeout_s=0)

    # --- the copies: host memory here, copy engines in GpuNodeExecutor ----------------------------------
    # Each returns a token; ``_done(token)`` says whether that copy finished (here: always at once).
    direct_receive = True  # the network may write straight into a destination output (host memory)

    def _copy_within(self, dst_rank: int, dst_off: int, src_rank: int, src_off: int, n: int) -> None:
        self.outputs[dst_rank][dst_off:dst_off + n] = self.inputs[src_rank][src_off:src_off + n]

    def _stage_out(self, ubar: int, slot: int, src_rank: int, src_off: int, n: int) -> object:
        self.send_ring[ubar][slot:slot + n] = self.inputs[src_rank][src_off:src_off + n]

    def _land(self, vbar: int, slot: int, v: int, dst_off: int, n: int) -> object:
        self.outputs[v][dst_off:dst_off + n] = self.recv_ring[vbar][slot:slot + n]

    def _done(self, token: object) -> bool:
        return True

    def _finish_run(self) -> None:
        """Wait for this run's copies (host copies are done already)."""


def overlap_setting() -> bool:
    """HOCCL_NET_OVERLAP (default on): a reusable network executor's consecutive runs use alternate halves of its
    rings."""
    from ..errors import HocclError

    try:
        return env_flag("HOCCL_NET_OVERLAP", True)
    except HocclError as exc:
        raise TransportError(str(exc)) from None
