"""Where every network chunk of a plan goes (:class:`Routes`, the same on every node) and one run's state in the
driving thread (:class:`RunState`); see :mod:`hoccl_runtime.net.host` for the protocol that uses them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from hoccl_compiler.schema import Plan

from ..errors import TransportError, UnsupportedPlanError
from .wire import POSITIONS, RDMA

__all__ = ["Routes", "RunState", "ChunkSequence", "LeavingWrites", "refuse_multicast", "net_chunk_of"]


class ChunkSequence:
    """The chunks one GPU sends (or receives) over the network in one run, in ring order, as parallel arrays:
    per position its stage, transfer and chunk index, the GPU at the other end, that chunk's position in the
    other end's sequence, and its receive-ring position (-1: it lands straight in the output, no ring)."""

    __slots__ = ("stage", "transfer", "chunk", "peer", "peer_pos", "ring")

    def __init__(self, parts: list[tuple]):  # per transfer: its six columns (a GPU with none has no sequence)
        self.stage, self.transfer, self.chunk, self.peer, self.peer_pos, self.ring = (
            np.concatenate(c) for c in zip(*parts, strict=True))


def net_chunk_of(plan: Plan) -> int:
    """The chunk of a plan's network transfers (its own where the plan has one, else the plan's): what one ring slot
    holds and one network write carries."""
    return plan.options.net_chunk_bytes or plan.options.chunk_bytes


def refuse_multicast(plan: Plan, runs_it: bool = False) -> None:
    """A multicast plan is refused before anything runs by an executor that does not run forwarded copies (the
    host-memory one; ``runs_it``: the GPU one does)."""
    if plan.options.multicast and not runs_it:
        raise UnsupportedPlanError(
            f"plan {plan.plan_id} is a multicast plan (its {plan.collective.kind}'s forwarded copies read what "
            "other transfers wrote), which this executor does not run (host buffers): run it with GpuNodeExecutor, "
            "or recompile it with hoccl-compile --multicast off (compile_plan(..., CompileOptions(multicast=False)))")


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
        chunk = net_chunk_of(plan)
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
        # a credit names a send position in 24 bits, a data write a receive position in 23 (net/wire.py)
        for counts, most, bits in ((n_send, 0xFFFFFF, 24), (n_recv, POSITIONS, 23)):
            for g, count in counts.items():
                if count > most:
                    raise TransportError(f"plan {plan.plan_id}: GPU {g} moves {count} network chunks in one run, "
                                         f"more than an immediate can number (2**{bits}); compile with a larger "
                                         "chunk size")
        self.out = {g: ChunkSequence(p) for g, p in out.items()}
        self.inc = {g: ChunkSequence(p) for g, p in inc.items()}
        self.receivers = frozenset(n_recv)  # every GPU (of any node) that receives network chunks in a run
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


class RunState:
    """The driving thread's state of one run (see :class:`Routes`)."""

    __slots__ = ("routes", "out", "inc", "next", "sent", "credit", "got", "sends_left", "posts_left",
                 "receives_left")

    def __init__(self, routes: Routes, ranks: Sequence[int]):
        self.routes = routes
        self.out = {g: routes.out[g] for g in ranks if g in routes.out}
        self.inc = {g: routes.inc[g] for g in ranks if g in routes.inc}
        self.next = dict.fromkeys(self.out, 0)
        self.sent = {g: bytearray(len(s.stage)) for g, s in self.out.items()}
        self.credit = {g: bytearray(len(s.stage)) for g, s in self.out.items()}
        self.got = {g: bytearray(len(s.stage)) for g, s in self.inc.items()}
        self.sends_left = sum(len(s.stage) for s in self.out.values())  # writes whose "sent" has not come
        self.posts_left = self.sends_left  # writes not yet posted
        self.receives_left = sum(len(s.stage) for s in self.inc.values())

    def waiting_for(self, deferred: dict, node_of: Callable[[int], int], slots: int, copies: int) -> str:
        """What a stalled run waits for, in words (the timeout's message): a node's plan notice (``deferred``: its
        writes held for it), a send's credit or free slot, a chunk to come, or writes and ``copies`` to finish."""
        for n in sorted(deferred):
            if deferred[n]:
                return (f"node {n}'s plan notice for this run ({len(deferred[n])} of its writes wait for it: "
                        "does it run the same collectives?)")
        for ubar, seq in self.out.items():
            x = self.next[ubar]
            if x < len(seq.stage):
                what = "its credit" if seq.ring[x] >= slots and not self.credit[ubar][x] else "a free send slot"
                peer = int(seq.peer[x])
                return (f"GPU {ubar}'s chunk {x} to GPU {peer} of node {node_of(peer)} (stage "
                        f"{int(seq.stage[x])}) waits for {what}")
        for vbar, seq in self.inc.items():
            missing = np.flatnonzero(np.frombuffer(self.got[vbar], np.uint8) == 0)
            if missing.size:
                x = int(missing[0])
                peer = int(seq.peer[x])
                return (f"GPU {vbar} waits for chunk {x} from node {node_of(peer)} (its GPU {peer}, stage "
                        f"{int(seq.stage[x])}) and {missing.size - 1} more")
        return f"{self.sends_left} writes to leave, {copies} copies to finish"


class LeavingWrites:
    """The writes of a reusable executor's earlier runs that are still leaving (a run ends once its writes are
    posted, not once they left) and the send slots they read, per GPU, taken until their "sent" completions come:
    the next runs stage nothing into those slots before."""

    __slots__ = ("_writes", "_busy")

    def __init__(self) -> None:
        self._writes: dict[tuple[int, int], tuple[int, int]] = {}  # (connection, write id) -> (GPU, send slot)
        self._busy: dict[int, set[int]] = {}

    def keep(self, inflight: dict, slots: int, base: int = 0) -> None:
        """Take over a run's writes still in flight: ``{(connection, write id): (GPU, send position)}``; position x
        used slot ``base + x % slots``."""
        for key, (ubar, x) in inflight.items():
            self._writes[key] = (ubar, base + x % slots)
            self._busy.setdefault(ubar, set()).add(base + x % slots)

    def left(self, key: tuple[int, int]) -> bool:
        """A "sent" completion: whether it was one of these writes (its slot is free again)."""
        got = self._writes.pop(key, None)
        if got is not None:
            self._busy[got[0]].discard(got[1])
        return got is not None

    def busy(self, ubar: int) -> set[int] | None:
        return self._busy.get(ubar)
