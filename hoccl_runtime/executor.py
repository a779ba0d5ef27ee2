"""Replaying single-node plans on copy engines, driven from one process (nccl-tests' ``-g`` mode).

Every copy of the plan is enqueued at call time with ``cudaMemcpyAsync`` (a copy engine; no
kernel): on one CUDA stream per plan queue, except a GPU's local copies, which run on the caller's
own stream of that GPU (still a copy engine, and ordered with the caller's work for free). The
caller's streams and the copy streams are ordered by signals that cost no SM either: CUDA events
(``sync="events"``, the default) or stream memory operations on flags in host memory
(``sync="flags"``, the protocol a multi-process path needs; while a caller's stream is being
captured into a CUDA graph, events are used, because only an event pulls the copy streams into the
capture)::

    user stream r   ─[work]─▶ signal(r -> q) ······································ wait(q -> r) ─▶ [work]
    copy stream q              wait(r -> q) ─[copy][copy]...─ signal(q -> r) ─────────────▲

A copy stream waits for every rank whose buffers it touches (its input must be ready, the
destination's output free); each rank's stream waits for every copy stream that read or wrote its
buffers. The call returns at once; nothing on the host waits for the GPU.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hoccl_compiler.schema import Plan

from . import _cuda  # no CUDA at import: its functions load cupy / cuda-bindings when first called
from ._cuda_streams import event_create, event_destroy, stream_is_capturing
from .aliasing import check_aliasing
from .errors import BufferError, HocclError, StreamError
from .flags import FlagPool, MemOps, handshake
from .interop import DeviceBuffer, as_buffer, as_stream
from .launch import Device, LaunchCache, Memcpy, Memops, Op, Record, Wait, compile_launch, on, squeeze_devices
from .program import Program, bounce_moves, bounce_route, dma_queues, local_copies_setting, lower, own_copies

__all__ = ["Executor", "RankBuffers", "Sync", "check_buffer", "check_buffers"]

Sync = Literal["flags", "events"]


_SIZES = {  # how a collective's buffers' sizes go together (what a wrong-sized buffer's error says)
    "allgather": "an AllGather's output holds every rank's input: the group size x the input",
    "alltoall": "an All-to-All's input and output are the same size, the group size x one block",
    "broadcast": "every rank's broadcast buffer is the root's size",
    "scatter": "a scatter's input, on the root, is the group size x each rank's output",
    "gather": "a gather's output, on the root, is the group size x each rank's input",
    "sendrecv": "a receive is the size of the send it pairs with",
    "alltoallv": "an All-to-Allv's buffers hold the blocks of its split sizes",
}


def check_buffer(rank: int, what: str, buf: DeviceBuffer | None, want: int, plan: Plan,
                 device: int | None = None) -> None:
    """The size (and, if given, the GPU) a rank's input or output must have for ``plan``."""
    if want and buf is None:
        raise BufferError(f"rank {rank} needs a {want}-byte {what} buffer for plan {plan.plan_id} "
                          f"({plan.collective.describe()})")
    if buf is None:
        return
    if buf.nbytes != want:
        rule = _SIZES.get(plan.collective.kind)
        raise BufferError(f"rank {rank} {what} has {buf.nbytes} bytes but plan {plan.plan_id} "
                          f"({plan.collective.describe()}) needs {want}" + (f" ({rule})" if rule else "")
                          + "; pass a buffer of that size (for a plan file: or compile one for your sizes)")
    if device is not None and buf.device != device:
        raise BufferError(f"rank {rank}'s {what} is on GPU {buf.device}, but this communicator drives GPU {device}")


def check_buffers(rank: int, inp: DeviceBuffer | None, out: DeviceBuffer | None, plan: Plan,
                  device: int | None = None) -> None:
    """:func:`check_buffer` for a rank's input and output, at the sizes ``plan`` gives them."""
    check_buffer(rank, "input", inp, int(plan.ranks.input_bytes[rank]), plan, device)
    check_buffer(rank, "output", out, int(plan.ranks.output_bytes[rank]), plan, device)


class _Built:
    """A cached launch list and its compiled form (what a call runs)."""

    __slots__ = ("ops", "run")

    def __init__(self, ops: list[Op]):
        self.ops, self.run = ops, compile_launch(ops)


@dataclass(frozen=True)
class RankBuffers:
    input: DeviceBuffer | None
    output: DeviceBuffer | None
    device: int


@dataclass(frozen=True)
class _PlanInfo:
    """What the hot path needs of a plan, computed once per plan."""

    program: Program
    input_bytes: tuple[int, ...]
    output_bytes: tuple[int, ...]
    resident_offset: tuple[int, ...]
    resident_bytes: tuple[int, ...]
    queue_kind: tuple[str, ...]
    uid: str = ""  # the plan's content hash (hoccl_runtime._trust): what the caches key it by


def _split(rank: int, value: Any) -> tuple[Any, Any]:
    """Accept (input, output), {"input": x, "output": y} or an object with .input/.output."""
    if isinstance(value, tuple | list) and len(value) == 2:
        return value[0], value[1]
    if isinstance(value, Mapping):
        return value.get("input"), value.get("output")
    if hasattr(value, "output"):
        return getattr(value, "input", None), value.output
    raise BufferError(f"rank {rank}: give buffers as (input, output), {{'input': x, 'output': y}} or an object "
                      f"with .input and .output; got {type(value).__name__}")


def _rank_buffers(plan: Plan, info: _PlanInfo, rank: int, value: Any) -> RankBuffers:
    inp, out = _split(rank, value)
    want_in = info.input_bytes[rank]
    out_buf = as_buffer(out, f"rank {rank} output") if out is not None else None
    in_buf = as_buffer(inp, f"rank {rank} input") if inp is not None else None
    if in_buf is None and want_in and info.resident_bytes[rank] and out_buf is not None:  # in place
        in_buf = out_buf.slice(info.resident_offset[rank], info.resident_bytes[rank])
    check_buffers(rank, in_buf, out_buf, plan)
    if in_buf is not None and out_buf is not None and in_buf.device != out_buf.device:
        raise BufferError(f"rank {rank}'s input and output are on different GPUs "
                          f"{sorted({in_buf.device, out_buf.device})}; a rank is one GPU")
    device = out_buf.device if out_buf is not None else (in_buf.device if in_buf is not None else -1)
    return RankBuffers(in_buf, out_buf, device)


def _apart(plan: Plan, ranks: list[RankBuffers]) -> list[RankBuffers]:
    """``ranks``, once no two of their buffers share bytes in a way the plan does not allow (hoccl_runtime.aliasing).
    Checked when a launch list is built: the list is kept by the buffers' addresses, and their sizes are the plan's."""
    check_aliasing(plan, {r: (b.input, b.output) for r, b in enumerate(ranks)})
    return ranks


def streams_by_rank(streams: Any) -> Mapping[int, Any]:
    """``execute``'s ``streams``: ``{rank: stream}``, a list of streams in rank order, or None (each rank's device's
    legacy default stream; so is a rank the mapping leaves out). Anything else is refused by name."""
    if streams is None:
        return {}
    if isinstance(streams, (list, tuple)):
        return dict(enumerate(streams))
    if not isinstance(streams, Mapping):
        raise StreamError(f"streams must be {{rank: stream}}, a list of streams in rank order or None, not a "
                          f"{type(streams).__name__}")
    return streams


def call_args(plan: Any, buffers: Any) -> tuple[Plan, Mapping[int, Any]]:
    """``execute``'s two arguments in the form it runs: ``plan`` a plan or the path of a plan file (read with
    :func:`hoccl_runtime.load_plan`); ``buffers`` ``{rank: (input, output)}`` or a list of the pairs in rank order.
    Anything else is refused by name."""
    if isinstance(plan, (str, os.PathLike)):
        from .plans import load_plan

        plan = load_plan(plan)
    elif not isinstance(plan, Plan):
        raise TypeError(f"plan must be a plan (hoccl_runtime.load_plan(path)) or the path of a plan file, not a "
                        f"{type(plan).__name__}")
    if isinstance(buffers, (list, tuple)):
        buffers = dict(enumerate(buffers))
    elif not isinstance(buffers, Mapping):
        raise BufferError(f"buffers must be {{rank: (input, output)}} or a list of (input, output) in rank order, "
                          f"not a {type(buffers).__name__}")
    return plan, buffers


class Executor:
    """Owns copy streams, events and flags per GPU; replays plans. Thread-safe; ``close()`` frees everything.

    The first call for a (plan, buffers, streams) combination builds its launch list (every CUDA call
    with its arguments); later calls with the same combination replay the list, which keeps the host
    time per call to the CUDA calls themselves. Local copies run on the caller's stream (a copy
    engine copy, ordered with the caller's work for free); the other queues get their own streams.
    """

    def __init__(self, *, flag_capacity: int = 4096, local_copies: str | None = None):
        # who copies a rank's own block (default HOCCL_LOCAL_COPIES or "sm"): "sm", a same-GPU copy, which
        # the CUDA driver runs as a kernel on SMs; "peer", copy engines through a peer GPU's output
        # (program.bounce_route), or for a rank whose sends do not carry it (a gather's root) the next
        # rank's first DMA queue, reading its input and writing its output over NVLink
        self.local_copies = local_copies_setting(local_copies)
        self._lock = threading.Lock()
        self._streams: dict[tuple[int, int], Any] = {}   # (device, plan queue id) -> cupy Stream
        self._events: dict[tuple[str, int, int], int] = {}
        self._flag_capacity = flag_capacity
        self._flags: FlagPool | None = None
        self._pair_flags: dict[tuple, Any] = {}
        self._plans: dict[str, _PlanInfo] = {}
        self._launches = LaunchCache()
        self._peer_ok: set[tuple[int, int]] = set()
        self.closed = False

    # --- resources --------------------------------------------------------------------------------
    def _stream(self, device: int, queue: int) -> int:
        key = (device, queue)
        s = self._streams.get(key)
        if s is None:
            import cupy

            with cupy.cuda.Device(device):
                s = cupy.cuda.Stream(non_blocking=True)
            self._streams[key] = s
        return int(s.ptr)

    def _event(self, kind: str, device: int, key: Any) -> int:
        k = (kind, device, key)
        ev = self._events.get(k)
        if ev is None:
            _cuda.set_device(device)
            ev = event_create()
            self._events[k] = ev
        return ev

    def _info(self, plan: Plan) -> _PlanInfo:
        from ._trust import trusted

        uid = trusted(plan)  # verified before its first run; known by its content, not the id it claims
        info = self._plans.get(uid)
        if info is None:
            res_off, res_bytes = plan.ranks.resident_offset, plan.ranks.resident_bytes
            info = _PlanInfo(lower(plan, forwarded=True), tuple(plan.ranks.input_bytes),
                             tuple(plan.ranks.output_bytes),
                             tuple(int(x) for x in res_off), tuple(int(x) for x in res_bytes),
                             tuple(plan.queues.kind), uid)
            self._plans[uid] = info
        return info

    def _peer(self, a: int, b: int) -> None:
        if (a, b) not in self._peer_ok:
            from ._cuda import enable_peer_access

            enable_peer_access(a, b)
            self._peer_ok.add((a, b))

    # --- the call ------------------------------------------------------------------------------------
    def execute(self, plan: Plan, buffers: Mapping[int, Any], streams: Mapping[int, Any] | None = None,
                *, sync: Sync = "events") -> None:
        """Enqueue ``plan`` for the ranks in ``buffers`` (all of the plan's ranks, in this process; see
        :func:`call_args` for the forms both take)."""
        plan, buffers = call_args(plan, buffers)
        if self.closed:
            raise HocclError("this executor is closed; create a new one")
        if sync not in ("flags", "events"):
            raise HocclError(f"sync={sync!r}; choose 'flags' or 'events'")
        G = plan.num_ranks
        with self._lock:
            info = self._info(plan)  # refuses plans this executor cannot run, before looking at buffers
        if len(buffers) != G or any(r not in buffers for r in range(G)):
            raise BufferError(f"plan {plan.plan_id} is for {G} ranks; pass buffers for ranks 0..{G - 1} "
                              f"(got {sorted(buffers, key=repr)})")
        ranks = [_rank_buffers(plan, info, r, buffers[r]) for r in range(G)]
        by_rank = streams_by_rank(streams)
        user = tuple(as_stream(by_rank.get(r)) for r in range(G))
        with self._lock:
            if sync == "flags" and _capturing(user):
                # A copy stream joins a CUDA graph capture only through an event from a capturing stream;
                # flag waits would leave it outside the graph (run once, eagerly). Events order it here.
                sync = "events"
            key = (info.uid, sync, user,
                   tuple((b.input.ptr if b.input else 0, b.output.ptr if b.output else 0, b.device) for b in ranks))
            self._launches.get(key, lambda: _Built(self._build(plan, info, _apart(plan, ranks), user, sync))).run()

    def _build(self, plan: Plan, info: _PlanInfo, ranks: list[RankBuffers], user: tuple[int, ...],
               sync: Sync) -> list[Op]:
        """The launch list (hoccl_runtime.launch): copies, event records and waits, flag batches.

        Runtime-API copies, event records and waits need no current device (the CUDA programming
        guide: a copy may go to a stream of another device; a record needs event and stream on one
        device; a wait may cross devices), so a ``Device`` op goes only before the driver's batch
        memops and before work on the legacy default stream (handle 0 means "the current device's")."""
        prog = info.program
        moves = {q: [(ranks[c.dst_rank].output.ptr + c.dst_offset,
                      (ranks[c.src_rank].output if c.from_output else ranks[c.src_rank].input).ptr + c.src_offset,
                      c.nbytes) for c in cs] for q, cs in prog.copies.items()}
        touches = {q: set(prog.touches[q]) for q in prog.copies}
        if self.local_copies == "peer" and not prog.issue:  # (a multicast plan's own blocks stay same-GPU copies)
            self._own_blocks_through_peers(info, ranks, moves, touches)
        queues = sorted(q for q in prog.copies if moves[q])
        qdev = {q: ranks[prog.queue_gpu[q]].device for q in queues}
        local = {q for q in queues if info.queue_kind[q] == "dma_local"}
        qstream = {q: (user[prog.queue_gpu[q]] if q in local else self._stream(qdev[q], q)) for q in queues}
        for q in queues:
            for r in touches[q]:
                if ranks[r].device != qdev[q]:
                    self._peer(qdev[q], ranks[r].device)
        # edges between a caller's stream and a copy stream; local copies ride on the caller's stream
        edges = [(r, q) for q in queues if q not in local for r in sorted(touches[q])]
        ops: list[Op] = []
        if sync == "events":
            self._entry_events(ops, ranks, user, qdev, qstream, edges)
        else:
            self._flag_phase(ops, edges, lambda e: (ranks[e[0]].device, user[e[0]]),
                             lambda e: (qdev[e[1]], qstream[e[1]]))
        if prog.issue:  # a multicast plan: copies in an order that puts each after the one it reads from
            ops += self._forwarded_copies(info, moves, qdev, qstream)
        for q in queues if not prog.issue else ():
            ops += on(qdev[q], qstream[q])
            ops += [Memcpy(dst, src, n, qstream[q]) for dst, src, n in moves[q]]
        if sync == "events":
            self._exit_events(ops, ranks, user, qdev, qstream, edges)
        else:
            self._flag_phase(ops, edges, lambda e: (qdev[e[1]], qstream[e[1]]),
                             lambda e: (ranks[e[0]].device, user[e[0]]))
        return squeeze_devices(ops)

    def _forwarded_copies(self, info: _PlanInfo, moves: dict[int, list[tuple]], qdev: dict[int, int],
                          qstream: dict[int, int]) -> list[Op]:
        """A multicast plan's copies in the program's issue order, each copy that another reads from followed by
        an event record, and each copy that reads another's bytes preceded by a wait on that event (recorded
        before it in this list, so the streams cannot wait for each other)."""
        prog = info.program
        waited = set(prog.waits.values())
        ops: list[Op] = []
        for q, i in prog.issue:
            dst, src, n = moves[q][i]
            before = prog.waits.get((q, i))
            ops += on(qdev[q], qstream[q])
            if before is not None:
                ops.append(Wait(qstream[q], self._event("chunk", qdev[before[0]], (info.uid, *before))))
            ops.append(Memcpy(dst, src, n, qstream[q]))
            if (q, i) in waited:
                ops.append(Record(self._event("chunk", qdev[q], (info.uid, q, i)), qstream[q]))
        return ops

    @staticmethod
    def _own_blocks_through_peers(info: _PlanInfo, ranks: list[RankBuffers], moves: dict[int, list[tuple]],
                                  touches: dict[int, set[int]]) -> None:
        """local_copies="peer": each rank's own block leaves its local queue for its first DMA queue, through
        a peer's output (program.bounce_route), or for the next rank's first DMA queue (no route: a gather's
        root), which then touches the rank's buffers too (its caller's stream is ordered with that queue)."""
        prog, world = info.program, len(ranks)
        main = {r: dma[0] for r in range(world) if (dma := dma_queues(prog, info.queue_kind, r))}
        for r in range(world):
            own = own_copies(prog, r)
            if not own:
                continue
            inp, out = ranks[r].input, ranks[r].output
            route = bounce_route(prog, r, world, main.get(r))
            if route is not None:
                outputs = {b.peer: ranks[b.peer].output.ptr for b in route}
                before, after = bounce_moves(route, inp.ptr, out.ptr, outputs)
                moves[main[r]] = before + moves[main[r]] + after
            elif main.get((r + 1) % world) is not None:
                q = main[(r + 1) % world]
                moves[q] = moves[q] + [(out.ptr + c.dst_offset, inp.ptr + c.src_offset, c.nbytes) for c in own]
                touches[q].add(r)
            else:  # no copy engine queue to take it: it stays a same-GPU copy
                continue
            for q in prog.copies:
                if info.queue_kind[q] == "dma_local" and prog.queue_gpu[q] == r:
                    moves[q] = []

    # events: one record per producer, one wait per edge
    def _entry_events(self, ops, ranks, user, qdev, qstream, edges) -> None:
        for r in sorted({r for r, _ in edges}):
            ops += [*on(ranks[r].device, user[r]), Record(self._event("user", ranks[r].device, r), user[r])]
        for r, q in edges:
            ops.append(Wait(qstream[q], self._event("user", ranks[r].device, r)))

    def _exit_events(self, ops, ranks, user, qdev, qstream, edges) -> None:
        for q in sorted({q for _, q in edges}):
            ops.append(Record(self._event("copy", qdev[q], q), qstream[q]))
        for r, q in edges:
            ops += [*on(ranks[r].device, user[r]), Wait(user[r], self._event("copy", qdev[q], q))]

    # flags: a handshake per edge, batched per stream: all producers first, then all consumers
    def _flag_phase(self, ops, edges, producer_of, consumer_of) -> None:
        if self._flags is None:
            self._flags = FlagPool(self._flag_capacity)
        produce: dict[tuple[int, int], MemOps] = {}
        consume: dict[tuple[int, int], MemOps] = {}
        for edge in edges:
            # One flag per (producer stream, consumer stream), shared by every plan and call: both
            # streams see the signals in the same (call) order, and the handshake resets the flag, so
            # reuse is safe and the pool never runs out however many buffers and plans go through.
            pair = (producer_of(edge), consumer_of(edge))
            flag = self._pair_flags.get(pair)
            if flag is None:
                flag = self._pair_flags[pair] = self._flags.allocate()
            p_ops, c_ops = handshake(flag)
            produce.setdefault(producer_of(edge), MemOps()).extend(p_ops)
            consume.setdefault(consumer_of(edge), MemOps()).extend(c_ops)
        for side in (produce, consume):
            for (device, stream), batch in sorted(side.items(), key=lambda kv: kv[0]):
                ops += [Device(device), Memops(batch, stream)]

    # --- lifetime ------------------------------------------------------------------------------------
    def synchronize(self) -> None:
        for s in self._streams.values():
            s.synchronize()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.synchronize()
        finally:
            for (_, device, _), ev in self._events.items():
                with _cuda.on_device(device):
                    event_destroy(ev)
            self._events.clear()
            self._streams.clear()
            self._launches.clear()
            if self._flags is not None:
                self._flags.close()
                self._flags = None
            self._pair_flags.clear()

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _capturing(user: tuple[int, ...]) -> bool:
    """Whether any of these streams is capturing a CUDA graph (the legacy stream never is)."""
    return any(s != 0 and stream_is_capturing(s) for s in user)
