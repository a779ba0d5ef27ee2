"""The inter-node path on host memory: one process per node replays a plan over a transport.

This is the reference for the GPU path of the network issue, runnable anywhere: the node's ranks
are NumPy buffers, the copies that a GPU does with its copy engines (local, native, forwarding and the
staging copies) are NumPy copies, and the network pieces go through a :class:`Transport` (TCP here).
What it pins down, before GPUs are involved:

* Staging: each GPU has a ring of ``slots`` chunk slots for the network data it receives (when the
  data must be forwarded on, ``v̄ != v``) and one for what it sends. Chunk ``k`` uses slot
  ``k % slots``; the receiver hands a slot back with a credit (a zero-byte write) once its forward
  copy has taken the chunk, and the sender reuses a send slot once its write left. In the chunk state
  machine's words: IDLE -> DMA_COPYING (staging copy) -> NETWORK (write posted) -> IDLE (sent /
  credited). With a GPU these copies overlap with the network; here they are synchronous.
* Stage order: a node finishes stage ``s`` (its sends left and were credited, its receives were
  forwarded) and tells every other node before any node starts ``s + 1``, so every GPU has at most
  one incoming and one outgoing network flow at a time, as the plan's stages promise.
* Immediates: data ``(target GPU's local index << 24) | chunk``; credits add bit 31; stage-done
  notices are ``0x7f000000 | stage``. The accepting node knows who connected from the transport's
  hello (the connecting transport's name), before any data can arrive.

Nodes connect to every other node (lower index accepts) and share nothing but the plan, whose id is
the transport session: a node with a different plan is refused at the first exchange.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from hoccl_compiler.schema import Plan

from .errors import HocclTimeoutError, PlanError, TransportError
from .flags import ChunkState, ChunkStateMachine, FlagPool, MemOps
from .transport.base import Connection, Region, Transport

__all__ = ["HostNodeExecutor", "GpuNodeExecutor", "RING_BYTES", "ring_slots"]

CREDIT = 1 << 31
STAGE_DONE = 0x7F000000
PLAN_HELLO = 0x7E000000  # first notice of every run of a reusable executor: the plan's id, 24 bits
LOCAL, NATIVE, SEND_FORWARD, RDMA, RECV_FORWARD = range(5)


class HostNodeExecutor:
    """Runs node ``node``'s part of ``plan`` with host buffers ``{rank: (input, output)}``."""

    def __init__(self, plan: Plan, node: int, buffers: Mapping[int, tuple[np.ndarray, np.ndarray]],
                 transport: Transport, *, slots: int = 4, timeout_s: float = 30.0, reuse: bool = False,
                 _check_sizes: bool = True):
        topo = plan.topology
        if not 0 <= node < topo.nodes:
            raise TransportError(f"node {node}: plan {plan.plan_id} has nodes 0..{topo.nodes - 1}; start one process "
                                 "per node of the plan's topology")
        self.plan, self.node, self.transport, self.timeout_s = plan, node, transport, timeout_s
        # reuse: run(other_plan, other_buffers) over the same connections and rings; every node must agree.
        # The network then always lands in the rings (an output registered once cannot follow new buffers)
        self.reuse = reuse
        self.direct_receive = type(self).direct_receive and not reuse
        self._stage_base = 0
        self._hellos: dict[int, list[int]] = {}
        self.L = topo.gpus_per_node
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
        self._backlog: dict[int, list] = {}        # completions read during a barrier, for the next stage
        self._early_done: set[tuple[int, int]] = set()

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
            from ._trust import plan_uid
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
            if not self.reuse:
                raise TransportError("this executor runs the plan and buffers it was created with; create it with "
                                     "reuse=True to run other plans or buffers")
            if plan is not None:
                self._use_plan(plan)
            if buffers is not None:
                self._bind(buffers)
        if self.reuse:
            self._hello()
        for stage in self.plan.stages:
            self._stage(stage)
            self._barrier(self._stage_base + stage.index)
        self._stage_base += len(self.plan.stages)
        self._early_done = {(n, s) for n, s in self._early_done if s >= self._stage_base}

    def _use_plan(self, plan: Plan) -> None:
        a, b = plan.topology, self.plan.topology
        if (a.nodes, a.gpus_per_node) != (b.nodes, b.gpus_per_node) or plan.options.chunk_bytes != self.chunk:
            raise TransportError(f"plan {plan.plan_id} ({a.nodes} x {a.gpus_per_node} GPUs, chunks of "
                                 f"{plan.options.chunk_bytes} B) does not fit this executor ({b.nodes} x "
                                 f"{b.gpus_per_node}, chunks of {self.chunk} B): compile it with the same topology "
                                 "and chunk size")
        self.plan = plan

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
        for conn in self.conns.values():
            conn.write(self.send_region[self.ranks[0]], 0, 0, 0, 0, imm=PLAN_HELLO | mine)
        deadline = time.monotonic() + self.timeout_s
        for n in sorted(self.conns):
            while not self._hellos.get(n):
                got = self.conns[n].poll(timeout_s=0)
                for c in got:
                    self._keep(n, c)
                if not got:
                    time.sleep(50e-6)
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"node {self.node}: node {n} did not start plan {self.plan.plan_id} "
                                            f"within {self.timeout_s:g} s")
            theirs = self._hellos[n].pop(0)
            if theirs != mine:
                raise PlanError(f"node {self.node} runs plan {self.plan.plan_id} ({self.plan.collective.describe()}) "
                                f"but node {n} runs another (id hash {theirs:06x} vs {mine:06x}): every node must run "
                                "the same collectives in the same order")

    def _keep(self, n: int, c) -> None:
        """A completion that arrived outside the stage that wants it: notices are recorded, the rest waits
        in the backlog for the next stage."""
        if c.kind == "received" and not c.imm & CREDIT and (c.imm & 0x7F000000) == STAGE_DONE:
            self._early_done.add((n, c.imm & 0xFFFFFF))
        elif c.kind == "received" and not c.imm & CREDIT and (c.imm & 0x7F000000) == PLAN_HELLO:
            self._hellos.setdefault(n, []).append(c.imm & 0xFFFFFF)
        elif c.kind == "received" or c.nbytes:
            self._backlog.setdefault(n, []).append(c)

    def _node_of(self, gpu: int) -> int:
        return gpu // self.L

    def _stage(self, stage) -> None:
        fl, tr, chunk, S = self.plan.flows, stage.transfers, self.chunk, self.slots
        mine = set(self.ranks)
        role, src, dst = tr.role, tr.src, tr.dst
        # copies that stay in the node: local and native (both ends here)
        for t in range(len(tr.flow)):
            if role[t] in (LOCAL, NATIVE) and src[t] in mine:
                f = tr.flow[t]
                a, b = fl.src_offset[f] + tr.offset[t], fl.dst_offset[f] + tr.offset[t]
                self._copy_within(fl.dst[f], b, fl.src[f], a, tr.bytes[t])
        sends = [t for t in range(len(tr.flow)) if role[t] == RDMA and src[t] in mine]
        recvs = {dst[t]: t for t in range(len(tr.flow)) if role[t] == RDMA and dst[t] in mine}
        # per outgoing transfer: next chunk to stage, and which chunks left / were credited (lanes and
        # forwarders finish out of order, so slot k % S is free only once chunk k - S itself is done)
        state = {t: {"next": 0, "sent": set(), "credited": set(), "n": max(1, -(-tr.bytes[t] // chunk))}
                 for t in sends}
        pending = {t: max(1, -(-tr.bytes[t] // chunk)) for t in recvs.values()}
        self._staged, self._landing = [], []
        self._inflight: dict[tuple[int, int], tuple[int, int]] = {}  # (connection, write id) -> (transfer, chunk)
        deadline = time.monotonic() + self.timeout_s
        # a stage ends when every chunk left (its "sent" completion: a credit can overtake it, and a
        # completion left for the next stage would be matched against the wrong transfers), was credited,
        # and every incoming chunk landed
        while any(len(s["credited"]) < s["n"] or len(s["sent"]) < s["n"] for s in state.values()) or \
                any(pending.values()) or self._staged or self._landing:
            progressed = False
            for t in sends:
                s = state[t]
                k = s["next"]
                # a send slot is free once write k - S left; a receive slot once chunk k - S was credited
                while k < s["n"] and (k < S or (k - S in s["sent"] and k - S in s["credited"])):
                    self._send_chunk(stage, t, k)
                    k = s["next"] = k + 1
                    progressed = True
            progressed |= self._post_ready()
            for node in self.conns:
                for c in self._poll(node):
                    progressed = True
                    self._on_completion(stage, node, c, state, recvs, pending, sends)
            if not progressed:
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"node {self.node}: stage {stage.index} made no progress for "
                                            f"{self.timeout_s:g} s (a peer node stalled or died?)")
                time.sleep(50e-6)
            else:
                deadline = time.monotonic() + self.timeout_s
        self._finish_stage()

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

    def _finish_stage(self) -> None:
        """Wait for this stage's copies (host copies are done already)."""

    def _post_ready(self) -> bool:
        """Post the network writes of staged chunks whose copy finished, and the credits of landed
        chunks whose copy finished (chunk state DMA_COPYING -> NETWORK, and back to IDLE)."""
        progressed = False
        while self._staged and self._done(self._staged[0][0]):
            _, conn, args, imm, t, k = self._staged.pop(0)
            self._inflight[(id(conn), conn.write(*args, imm=imm))] = (t, k)
            progressed = True
        while self._landing and self._done(self._landing[0][0]):
            _, conn, args, imm = self._landing.pop(0)
            conn.write(*args, imm=imm)
            progressed = True
        return progressed

    def _chunk_range(self, tr, t: int, k: int) -> tuple[int, int]:
        start = tr.offset[t] + k * self.chunk
        return start, min(self.chunk, tr.offset[t] + tr.bytes[t] - start)

    def _send_chunk(self, stage, t: int, k: int) -> None:
        fl, tr = self.plan.flows, stage.transfers
        f, ubar, vbar = tr.flow[t], tr.src[t], tr.dst[t]
        start, n = self._chunk_range(tr, t, k)
        slot = (k % self.slots) * self.chunk
        # send_forward (u -> ū) or the staging copy of ū's own data: into ū's send ring
        token = self._stage_out(ubar, slot, fl.src[f], fl.src_offset[f] + start, n)
        v = fl.dst[f]
        local_index = vbar % self.L
        if vbar == v and self.direct_receive:  # straight into the destination's output
            region, offset = 2 * local_index, fl.dst_offset[f] + start
        else:          # into v̄'s receive ring, forwarded on (or copied to the GPU) by v̄
            region, offset = 2 * local_index + 1, slot
        self._staged.append((token, self.conns[self._node_of(vbar)], (self.send_region[ubar], slot, n, region, offset),
                             (local_index << 24) | k, t, k))

    def _on_completion(self, stage, node, c, state, recvs, pending, sends) -> None:
        tr, fl = stage.transfers, self.plan.flows
        if c.kind == "sent":
            chunk = self._inflight.pop((id(self.conns[node]), c.write_id), None)
            if chunk is not None:  # a data write (credits and notices are not tracked)
                t, k = chunk
                state[t]["sent"].add(k)
                if tr.dst[t] == fl.dst[tr.flow[t]] and self.direct_receive:  # no forward there: no credit
                    state[t]["credited"].add(k)
            return
        imm = c.imm
        if imm & CREDIT:
            t = next((t for t in sends if tr.src[t] % self.L == (imm >> 24) & 0x7F and
                      self._node_of(tr.dst[t]) == node), None)
            if t is None or (imm & 0xFFFFFF) >= state[t]["n"]:
                raise TransportError(f"node {self.node}, stage {stage.index}: node {node} credited chunk "
                                     f"{imm & 0xFFFFFF} of local GPU {(imm >> 24) & 0x7F}, which this stage does not "
                                     f"send it (immediate {imm:#x}): the nodes run different schedules, or the "
                                     "peer is not a HOCCL node of this job")
            state[t]["credited"].add(imm & 0xFFFFFF)
            return
        if (imm & 0x7F000000) == STAGE_DONE:
            self._early_done.add((node, imm & 0xFFFFFF))
            return
        if (imm & 0x7F000000) == PLAN_HELLO:  # a node already in the next run
            self._hellos.setdefault(node, []).append(imm & 0xFFFFFF)
            return
        vbar = self.node * self.L + ((imm >> 24) & 0x7F)
        k = imm & 0xFFFFFF
        t = recvs.get(vbar)
        if t is None or k >= max(1, -(-tr.bytes[t] // self.chunk)) or pending[t] <= 0:
            raise TransportError(f"node {self.node}, stage {stage.index}: node {node} wrote chunk {k} for local GPU "
                                 f"{(imm >> 24) & 0x7F}, which this stage does not receive "
                                 f"{'(no more chunks are due)' if t is not None else ''} (immediate {imm:#x}): the "
                                 "nodes run different schedules, or the peer is not a HOCCL node of this job")
        f = tr.flow[t]
        v = fl.dst[f]
        if vbar != v or not self.direct_receive:  # out of the ring (recv_forward v̄ -> v), then the credit
            start, n = self._chunk_range(tr, t, k)
            slot = (k % self.slots) * self.chunk
            token = self._land(vbar, slot, v, fl.dst_offset[f] + start, n)
            self._landing.append((token, self.conns[node], (self.send_region[vbar], 0, 0, 0, 0),
                                  CREDIT | ((tr.src[t] % self.L) << 24) | k))
        pending[t] -= 1

    def _poll(self, node: int) -> list:
        items = self._backlog.pop(node, [])
        return items + self.conns[node].poll(timeout_s=0)

    def _barrier(self, stage: int) -> None:
        for conn in self.conns.values():
            conn.write(self.send_region[self.ranks[0]], 0, 0, 0, 0, imm=STAGE_DONE | (stage & 0xFFFFFF))
        stage &= 0xFFFFFF
        waiting = {n for n in self.conns if (n, stage) not in self._early_done}
        deadline = time.monotonic() + self.timeout_s
        while waiting:
            for n in list(waiting):
                for c in self.conns[n].poll(timeout_s=0):
                    self._keep(n, c)  # a node that already left this barrier may be sending the next stage
                if (n, stage) in self._early_done:
                    waiting.discard(n)
            if waiting:
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"node {self.node}: nodes {sorted(waiting)} did not finish stage {stage} "
                                            f"within {self.timeout_s:g} s")
                time.sleep(50e-6)


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


class GpuNodeExecutor(HostNodeExecutor):
    """The same schedule with GPU buffers: one process drives its node's GPUs (``{rank: (input, output)}``
    as CuPy arrays, torch tensors or anything :func:`as_buffer` takes).

    Copies within the node run on copy engines (``cudaMemcpyAsync``, peer access between the node's
    GPUs). The network side is a host transport (TCP here), so staging is pinned, device-mapped host
    memory: the copy engine of the sending GPU moves each chunk device -> staging slot (the u -> ū
    forward and the staging copy in one), the transport posts the write once that copy has completed,
    and on the far side each received chunk goes staging slot -> destination GPU on its copy
    engine, the slot's credit leaving once that copy completed. With ``slots`` chunks per ring the
    copies of chunk k+1.. overlap the network transfer of chunk k. Every slot's state lives in a flag of
    a :class:`~hoccl_runtime.flags.FlagPool` (pinned host memory) driven by a
    :class:`~hoccl_runtime.flags.ChunkStateMachine`: the host moves a send slot IDLE -> DMA_COPYING when
    it issues the staging copy, the copy's own stream writes NETWORK behind the copy (a stream memory
    operation), the host posts the write when it reads NETWORK and frees the slot (IDLE) once the write
    left and the receiver credited it; a receive slot goes IDLE -> DMA_COPYING when its chunk arrives
    and back to IDLE by the landing copy's stream, which is when the credit leaves. ``run()`` returns
    when the node's part is complete.
    By default a ring holds about ``ring_bytes`` (256 MiB, pinned; see :func:`ring_slots`).
    """

    direct_receive = False  # TCP lands in host memory: always through the receive ring

    def __init__(self, plan: Plan, node: int, buffers: Mapping[int, tuple], transport: Transport, *,
                 slots: int | None = None, timeout_s: float = 30.0, reuse: bool = False,
                 ring_bytes: int = RING_BYTES, staging: str = "auto"):
        from ._cuda import cupy_runtime

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
        self._in, self._out, self._dev = {}, {}, {}
        self._peers: set[tuple[int, int]] = set()
        self.plan, self.node, self.ranks = plan, node, ranks  # what _bind needs before the base class runs
        self._bind(buffers)
        self._host: list[int] = []
        placeholders = {r: (self._pinned(1), self._pinned(1)) for r in ranks}  # the base class's host views
        self._streams: dict[tuple[str, int], int] = {}
        self._keep_alive: list = []
        self._flags = FlagPool(2 * L * slots)
        self._chunks = {(kind, r): ChunkStateMachine([self._flags.allocate() for _ in range(slots)], cycle)
                        for kind, cycle in (("send", "send"), ("recv", "receive")) for r in ranks}
        super().__init__(plan, node, placeholders, transport, slots=slots, timeout_s=timeout_s, reuse=reuse,
                         _check_sizes=False)

    def _bind(self, buffers: Mapping[int, tuple]) -> None:
        """This run's device buffers: sizes, one GPU per rank, peer access between the node's GPUs."""
        from ._cuda import enable_peer_access
        from .interop import as_buffer

        plan = self.plan
        for r in self.ranks:
            if r not in buffers:
                raise TransportError(f"node {self.node}: no buffers for rank {r} (this node drives ranks "
                                     f"{self.ranks})")
            inp, out = buffers[r]
            ib, ob = as_buffer(inp, f"rank {r} input"), as_buffer(out, f"rank {r} output")
            if ib.nbytes != plan.ranks.input_bytes[r] or ob.nbytes != plan.ranks.output_bytes[r]:
                raise TransportError(f"rank {r}: buffers of {ib.nbytes}/{ob.nbytes} bytes, the plan needs "
                                     f"{plan.ranks.input_bytes[r]}/{plan.ranks.output_bytes[r]}")
            if ib.nbytes and ob.nbytes and ib.device != ob.device:
                raise TransportError(f"rank {r}: input and output on different GPUs ({ib.device}, {ob.device})")
            self._in[r], self._out[r] = ib, ob
            self._dev[r] = ob.device if ob.nbytes else ib.device
        for a in self.ranks:
            for b in self.ranks:
                pair = (self._dev[a], self._dev[b])
                if pair[0] != pair[1] and pair not in self._peers:
                    enable_peer_access(*pair)
                    self._peers.add(pair)

    # pinned, device-mapped staging (portable: every GPU of the node can copy to and from it)
    def _pinned(self, nbytes: int) -> np.ndarray:
        import ctypes

        from ._cuda import host_mapped_alloc

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

    def _stream(self, kind: str, device: int) -> int:
        key = (kind, device)
        if key not in self._streams:
            import cupy

            with cupy.cuda.Device(device):
                s = cupy.cuda.Stream(non_blocking=True)
            self._keep_alive.append(s)
            self._streams[key] = int(s.ptr)
        return self._streams[key]

    def _copy(self, kind: str, device: int, dst: int, src: int, n: int, then: object = None) -> None:
        """``n`` bytes on ``device``'s ``kind`` copy stream; ``then``: (flag, value) the stream writes after."""
        from ._cuda import MEMCPY_DEFAULT

        rt = self._rt
        rt.setDevice(device)
        s = self._stream(kind, device)
        rt.memcpyAsync(dst, src, n, MEMCPY_DEFAULT, s)
        if then is not None:
            MemOps().write(*then).enqueue(s)

    def _copy_within(self, dst_rank: int, dst_off: int, src_rank: int, src_off: int, n: int) -> None:
        if n:
            self._copy("d2d", self._dev[src_rank], self._out[dst_rank].ptr + dst_off, self._in[src_rank].ptr + src_off,
                       n)

    def _stage_out(self, ubar: int, slot: int, src_rank: int, src_off: int, n: int) -> object:
        chunks, j = self._chunks[("send", ubar)], slot // self.chunk
        if chunks.state(j) == ChunkState.NETWORK:  # the chunk that used the slot left and was credited
            chunks.advance(j, ChunkState.IDLE)
        chunks.advance(j, ChunkState.DMA_COPYING)
        token = (chunks.flags[j], ChunkState.NETWORK)
        ring = self._ring_at[("send", ubar)]
        self._copy("d2h", self._dev[src_rank], ring + slot, self._in[src_rank].ptr + src_off, n, token)
        return token

    def _land(self, vbar: int, slot: int, v: int, dst_off: int, n: int) -> object:
        chunks, j = self._chunks[("recv", vbar)], slot // self.chunk
        chunks.advance(j, ChunkState.DMA_COPYING)  # raises if the sender reused a slot not yet credited
        token = (chunks.flags[j], ChunkState.IDLE)
        ring = self._ring_at[("recv", vbar)]
        self._copy("h2d", self._dev[v], self._out[v].ptr + dst_off, ring + slot, n, token)
        return token

    def _done(self, token: object) -> bool:
        flag, value = token
        return flag.read() == value  # the copy's stream wrote it: no driver call

    def _finish_stage(self) -> None:
        rt = self._rt
        for (_, device), s in self._streams.items():
            rt.setDevice(device)
            rt.streamSynchronize(s)
        for chunks in self._chunks.values():  # every write left and was credited: the send slots are free
            for j in range(len(chunks.flags)):
                if chunks.state(j) == ChunkState.NETWORK:
                    chunks.advance(j, ChunkState.IDLE)

    def close(self) -> None:
        from ._cuda import host_free

        rt = self._rt
        self._finish_stage()
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
