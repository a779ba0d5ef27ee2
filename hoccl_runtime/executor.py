"""Replaying single-node plans on copy engines, driven from one process (nccl-tests' ``-g`` mode).

Every copy of the plan is enqueued at call time on copy streams, one CUDA stream per plan queue,
with ``cudaMemcpyAsync`` (a copy engine; no kernel). The caller's streams and the copy streams are
ordered by signals that cost no SM either: stream memory operations on flags in host memory
(``sync="flags"``, the protocol the multi-process path uses) or CUDA events (``sync="events"``)::

    user stream r   ─[work]─▶ signal(r -> q) ······································ wait(q -> r) ─▶ [work]
    copy stream q              wait(r -> q) ─[copy][copy]...─ signal(q -> r) ─────────────▲

A copy stream waits for every rank whose buffers it touches (its input must be ready, the
destination's output free); each rank's stream waits for every copy stream that read or wrote its
buffers. The call returns at once; nothing on the host waits for the GPU.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hoccl_compiler.collective import layout
from hoccl_compiler.schema import Plan

from .errors import BufferError, HocclError
from .flags import FlagPool, MemOps, handshake
from .interop import DeviceBuffer, as_buffer, as_stream
from .program import Program, lower

__all__ = ["Executor", "RankBuffers", "Sync"]

Sync = Literal["flags", "events"]


@dataclass(frozen=True)
class RankBuffers:
    input: DeviceBuffer | None
    output: DeviceBuffer | None
    device: int


def _rank_buffers(plan: Plan, rank: int, value: Any) -> RankBuffers:
    """Accept (input, output), {"input": x, "output": y} or an object with .input/.output."""
    if isinstance(value, Mapping):
        inp, out = value.get("input"), value.get("output")
    elif isinstance(value, tuple | list) and len(value) == 2:
        inp, out = value
    elif hasattr(value, "output"):
        inp, out = getattr(value, "input", None), value.output
    else:
        raise BufferError(f"rank {rank}: give buffers as (input, output), {{'input': x, 'output': y}} or an object "
                          f"with .input and .output; got {type(value).__name__}")
    want_in, want_out = plan.ranks.input_bytes[rank], plan.ranks.output_bytes[rank]
    out_buf = as_buffer(out, f"rank {rank} output") if out is not None else None
    in_buf = as_buffer(inp, f"rank {rank} input") if inp is not None else None
    res_off, res_bytes = layout(plan.collective, plan.num_ranks).resident()
    if in_buf is None and want_in and plan.collective.in_place and res_bytes[rank] and out_buf is not None:
        in_buf = DeviceBuffer(out_buf.ptr + int(res_off[rank]), int(res_bytes[rank]), out_buf.device)
    for what, buf, want in (("input", in_buf, want_in), ("output", out_buf, want_out)):
        if want and buf is None:
            raise BufferError(f"rank {rank} needs a {want}-byte {what} buffer for plan {plan.plan_id} "
                              f"({plan.collective.describe()})")
        if buf is not None and buf.nbytes != want:
            raise BufferError(f"rank {rank} {what} has {buf.nbytes} bytes but plan {plan.plan_id} "
                              f"({plan.collective.describe()}) needs {want}; pass a buffer of that size or compile a "
                              "plan for yours")
    devices = {b.device for b in (in_buf, out_buf) if b is not None}
    if len(devices) > 1:
        raise BufferError(f"rank {rank}'s input and output are on different GPUs {sorted(devices)}; a rank is one GPU")
    return RankBuffers(in_buf, out_buf, devices.pop() if devices else -1)


class Executor:
    """Owns copy streams, events and flags per GPU; replays plans. Thread-safe; ``close()`` frees everything."""

    def __init__(self, *, flag_capacity: int = 4096):
        self._lock = threading.Lock()
        self._streams: dict[tuple[int, int], Any] = {}   # (device, plan queue id) -> cupy Stream
        self._events: dict[tuple[str, int, int], int] = {}
        self._flag_capacity = flag_capacity
        self._flags: FlagPool | None = None
        self._programs: dict[str, Program] = {}
        self._signals: dict[tuple, Any] = {}
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

    def _event(self, kind: str, device: int, key: int) -> int:
        k = (kind, device, key)
        ev = self._events.get(k)
        if ev is None:
            from ._cuda import cupy_runtime

            rt = cupy_runtime()
            rt.setDevice(device)
            ev = rt.eventCreateWithFlags(2)  # cudaEventDisableTiming
            self._events[k] = ev
        return ev

    def _program(self, plan: Plan) -> Program:
        prog = self._programs.get(plan.plan_id)
        if prog is None:
            prog = lower(plan)
            self._programs[plan.plan_id] = prog
        return prog

    def _peer(self, a: int, b: int) -> None:
        if (a, b) not in self._peer_ok:
            from ._cuda import enable_peer_access

            enable_peer_access(a, b)
            self._peer_ok.add((a, b))

    # --- the call ------------------------------------------------------------------------------------
    def execute(self, plan: Plan, buffers: Mapping[int, Any], streams: Mapping[int, Any] | None = None,
                *, sync: Sync = "flags") -> None:
        """Enqueue ``plan`` for the ranks in ``buffers`` (all of the plan's ranks, in this process)."""
        if self.closed:
            raise HocclError("this executor is closed; create a new one")
        G = plan.num_ranks
        if sorted(buffers) != list(range(G)):
            raise BufferError(f"plan {plan.plan_id} is for {G} ranks; pass buffers for ranks 0..{G - 1} "
                              f"(got {sorted(buffers)})")
        ranks = {r: _rank_buffers(plan, r, buffers[r]) for r in range(G)}
        user = {r: as_stream(streams.get(r) if streams is not None else None) for r in range(G)}
        with self._lock:
            prog = self._program(plan)
            self._issue(plan, prog, ranks, user, sync)

    def _issue(self, plan: Plan, prog: Program, ranks: dict[int, RankBuffers], user: dict[int, int],
               sync: Sync) -> None:
        from ._cuda import MEMCPY_DEFAULT, cupy_runtime

        rt = cupy_runtime()
        queues = sorted(prog.copies)
        qdev = {q: ranks[prog.queue_gpu[q]].device for q in queues}
        qstream = {q: self._stream(qdev[q], q) for q in queues}
        for q in queues:
            for r in prog.touches[q]:
                if ranks[r].device != qdev[q]:
                    self._peer(qdev[q], ranks[r].device)
        edges_in = [(r, q) for q in queues for r in sorted(prog.touches[q])]  # user r -> copy q
        if sync == "events":
            self._entry_events(rt, ranks, user, qdev, qstream, edges_in)
        else:
            self._entry_flags(rt, plan, ranks, user, qdev, qstream, edges_in)
        for q in queues:
            rt.setDevice(qdev[q])
            s = qstream[q]
            for c in prog.copies[q]:
                src = ranks[c.src_rank].input
                dst = ranks[c.dst_rank].output
                rt.memcpyAsync(dst.ptr + c.dst_offset, src.ptr + c.src_offset, c.nbytes, MEMCPY_DEFAULT, s)
        if sync == "events":
            self._exit_events(rt, ranks, user, qdev, qstream, edges_in)
        else:
            self._exit_flags(rt, plan, ranks, user, qdev, qstream, edges_in)

    # events: one record per producer, one wait per edge
    def _entry_events(self, rt, ranks, user, qdev, qstream, edges) -> None:
        for r in sorted({r for r, _ in edges}):
            rt.setDevice(ranks[r].device)
            rt.eventRecord(self._event("user", ranks[r].device, r), user[r])
        for r, q in edges:
            rt.setDevice(qdev[q])
            rt.streamWaitEvent(qstream[q], self._event("user", ranks[r].device, r), 0)

    def _exit_events(self, rt, ranks, user, qdev, qstream, edges) -> None:
        for q in sorted({q for _, q in edges}):
            rt.setDevice(qdev[q])
            rt.eventRecord(self._event("copy", qdev[q], q), qstream[q])
        for r, q in edges:
            rt.setDevice(ranks[r].device)
            rt.streamWaitEvent(user[r], self._event("copy", qdev[q], q), 0)

    # flags: a handshake per edge, batched per stream (the batches are built once per plan and streams)
    def _signal_batches(self, plan: Plan, phase: str, edges, producer_of, consumer_of) -> dict:
        key = (plan.plan_id, phase, tuple(edges), tuple(sorted(producer_of.items())),
               tuple(sorted(consumer_of.items())))
        cached = self._signals.get(key)
        if cached is not None:
            return cached
        if self._flags is None:
            self._flags = FlagPool(self._flag_capacity)
        produce: dict[Any, MemOps] = {}
        consume: dict[Any, MemOps] = {}
        for edge in edges:
            p_ops, c_ops = handshake(self._flags.allocate())
            produce.setdefault(producer_of[edge], MemOps()).extend(p_ops)
            consume.setdefault(consumer_of[edge], MemOps()).extend(c_ops)
        self._signals[key] = (produce, consume)
        return self._signals[key]

    def _run_batches(self, rt, produce: dict, consume: dict) -> None:
        for (device, stream), ops in sorted(produce.items()):
            rt.setDevice(device)
            ops.enqueue(stream)
        for (device, stream), ops in sorted(consume.items()):
            rt.setDevice(device)
            ops.enqueue(stream)

    def _entry_flags(self, rt, plan, ranks, user, qdev, qstream, edges) -> None:
        producer = {e: (ranks[e[0]].device, user[e[0]]) for e in edges}
        consumer = {e: (qdev[e[1]], qstream[e[1]]) for e in edges}
        self._run_batches(rt, *self._signal_batches(plan, "entry", edges, producer, consumer))

    def _exit_flags(self, rt, plan, ranks, user, qdev, qstream, edges) -> None:
        producer = {e: (qdev[e[1]], qstream[e[1]]) for e in edges}
        consumer = {e: (ranks[e[0]].device, user[e[0]]) for e in edges}
        self._run_batches(rt, *self._signal_batches(plan, "exit", edges, producer, consumer))

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
            from ._cuda import cupy_runtime

            rt = cupy_runtime()
            for (_, device, _), ev in self._events.items():
                rt.setDevice(device)
                rt.eventDestroy(ev)
            self._events.clear()
            self._streams.clear()
            self._signals.clear()
            if self._flags is not None:
                self._flags.close()
                self._flags = None

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
