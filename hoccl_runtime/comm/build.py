"""Launch lists of a call: built from the plan's copies and the cross-process handshakes, cached per (call,
buffers, stream), compiled into bound calls (hoccl_runtime.launch), promoted to a CUDA graph when repeated, and
paced where a rate is asked. :class:`LaunchBuilder` is the Communicator's part that owns it; :func:`build_launch`
is a function of its arguments."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import _cuda, pacing  # no CUDA at import: each loads cupy / cuda-bindings when first used
from .._cuda_streams import (
    begin_capture,
    end_capture,
    event_create,
    event_destroy,
    graph_destroy,
    graph_exec_destroy,
    graph_instantiate,
    stream_is_capturing,
)
from ..errors import PlanError
from ..executor import _capturing
from ..flags import MemOps
from ..interop import DeviceBuffer
from ..launch import (
    Call,
    Device,
    GraphLaunch,
    LaunchCache,
    Memcpy,
    Memops,
    Op,
    Record,
    Restore,
    Wait,
    compile_launch,
    replay,
    squeeze_devices,
)
from ..program import (
    bounce_moves,
    dma_queues,
)
from ._base import (
    MAX_QUEUES,
    _Flag,
    _Launch,
    _pair_flag,
    _PlanState,
)

__all__ = ["BuildContext", "Built", "LaunchBuilder", "build_launch", "paced_ops"]


@dataclass(frozen=True)
class BuildContext:
    """What :func:`build_launch` needs of a communicator: its rank, and where its handshake flags, events and side
    streams are (each a lookup that makes the object on first use) and how its copies are paced."""

    rank: int
    flag: Callable[[int, int, int], Any]       # (phase, a, b) -> the READY/DONE flag (flags.Flag-like: .address)
    event: Callable[[Any], int]                # key -> CUDA event
    side_stream: Callable[[int], int]          # slot -> a side stream (DMA queue index, or MAX_QUEUES for local)
    paced: Callable[[list[Op], float, int], list[Op]]  # (copies, rate GB/s, user stream) -> paced ops
    # the eager path (hoccl_runtime.comm.eager.eager_ops)
    slot_flag: Callable[[int, int, int], Any] | None = None  # (a, b, slot) -> FULL of slot for messages a -> b
    slot_bytes: int = 0                        # one staging slot
    stage_in: Mapping[int, int] = field(default_factory=dict)   # peer -> my staging for its messages
    stage_out: Mapping[int, int] = field(default_factory=dict)  # peer -> its staging for mine, mapped here


@dataclass(frozen=True)
class Built:
    ops: list[Op]
    local_side: bool  # own-block copies within the GPU on a side stream (a driver kernel: the caller may warn)


class LaunchBuilder:
    """The part of the Communicator that turns a call into CUDA work and owns what that takes: the launch lists
    cached per (call, buffers, stream) (``launches``), their CUDA graphs and the private stream they are captured
    on, the side streams (``streams``), the events (``events``: the dict the watchdog reads, never rebound), the
    pacing clock, and the handshake flags' addresses in the node's shared memory (``shared.flag_address``). The
    settings are read once, by the owner: ``graph_after``, ``graph_tail_direct``, ``pace_period_us``,
    ``pace_feedback``. A build function is ``build(stream, rate, ctx)``: the launch list over ``ctx``, the
    :class:`BuildContext` of that launch (with its own pacing feedback where it is paced)."""

    def __init__(self, rank: int, world: int, device: int, shared: Any, *, graph_after: int = 2,
                 graph_tail_direct: bool = False, pace_period_us: float = pacing.PERIOD_US,
                 pace_feedback: bool = False, one_queue: bool = False):
        self.rank, self.world, self.device, self.shared = rank, world, device, shared
        self.graph_after, self.graph_tail_direct = graph_after, graph_tail_direct
        self.pace_period_us, self.pace_feedback = pace_period_us, pace_feedback
        # Megatron's setting (CUDA_DEVICE_MAX_CONNECTIONS=1): a same-GPU copy (a driver kernel) waits behind
        # compute issued before it: warned once, at the first call that makes one (build)
        self.one_queue = one_queue
        self.launches = LaunchCache(drop=self._drop)
        self.events: dict[Any, int] = {}
        # side streams (extra DMA queues; the last slot for local copies), created when first needed: every
        # stream of a process takes one of CUDA_DEVICE_MAX_CONNECTIONS hardware queues, and streams that
        # share one wait for each other
        self.streams: dict[int, Any] = {}
        self.capture: Any = None  # the private stream calls are captured on
        self.pacer: pacing.Pacer | None = None

    # --- what a launch list is built over ----------------------------------------------------------------------
    def flag(self, phase: int, a: int, b: int) -> _Flag:
        """phase 0, READY[a][b]: b's buffers are ready for a's copies (b's stream writes, a's consumes);
        phase 1, DONE[a][b]: a's copies into b finished (a's stream writes, b's consumes)."""
        return _Flag(self.shared.flag_address(_pair_flag(self.world, phase, a, b)))

    def side_stream(self, slot: int) -> int:
        s = self.streams.get(slot)
        if s is None:
            s = self.streams[slot] = _new_stream(self.device)
        return int(s.ptr)

    def event(self, key: Any) -> int:
        ev = self.events.get(key)
        if ev is None:
            with _cuda.on_device(self.device):
                ev = self.events[key] = event_create()
        return ev

    def pacer_for_calls(self) -> pacing.Pacer:
        if self.pacer is None:
            self.pacer = pacing.Pacer(self.device)
        return self.pacer

    def context(self, feedback: pacing.Feedback | None = None) -> BuildContext:
        """The context a launch list is built in; ``feedback``: the pacing feedback of the paced launch being made
        (None: a list paced on its own gets its own)."""
        return BuildContext(rank=self.rank, flag=self.flag, event=self.event, side_stream=self.side_stream,
                            paced=lambda copies, rate, user: paced_ops(self, copies, rate, user, feedback))

    # --- launching ---------------------------------------------------------------------------------------------
    def key(self, state: _PlanState, inp: DeviceBuffer | None, out: DeviceBuffer | None,
            remote: dict[int, int], helped_in: int | None, s: int, rate: float | None) -> tuple:
        """What a call's cached launch list depends on (the launch cache's key)."""
        return (state.uid, s, inp.ptr if inp else 0, out.ptr if out else 0,
                tuple(remote.items()) if len(remote) < 2 else tuple(sorted(remote.items())), helped_in,
                rate and (rate, self.pace_period_us))

    def launch(self, state: _PlanState, inp: DeviceBuffer | None, out: DeviceBuffer | None,
               remote: dict[int, int], helped_in: int | None, s: int, rate: float | None,
               key: tuple | None = None) -> None:
        """Run a call of ``state``'s plan on the caller's stream ``s`` (``key``: its launch key, when known)."""
        if key is None:
            key = self.key(state, inp, out, remote, helped_in, s, rate)
        self.run(key, lambda stream, r, ctx: self.build(ctx, state, inp, out, remote, stream, r, helped_in), s, rate)

    def run(self, key: tuple, build: Callable[[int, float | None, BuildContext], list[Op]], s: int,
            rate: float | None) -> None:
        """Run the call's work for ``key``: ``build`` gives its launch list, compiled on first use; at the
        ``graph_after``-th use of an unpaced call it is captured into a CUDA graph."""
        if rate:
            self._run_paced(key, build, s, rate)
            return
        entry = self.launches.hit(key)
        if entry is None:
            entry = self.launches.get(key, lambda: _Launch(compile_launch(self.launch_list(
                build(s, rate, self.context()), s))))
        entry.hits += 1
        if entry.hits == self.graph_after:
            self._promote(entry, lambda stream: build(stream, None, self.context()), s)
        entry.run()

    def _run_paced(self, key: tuple, build: Any, s: int, rate: float) -> None:
        """A paced call: never a graph; its sleeps follow its entry's Feedback scale, which with
        ``pace_feedback`` on learns from the calls' lengths (timed outside stream capture only)."""
        def make() -> _Launch:
            feedback = pacing.Feedback(self.pacer_for_calls())  # the launch's sleeps are linked to it
            return _Launch(compile_launch(self.launch_list(build(s, rate, self.context(feedback)), s)), feedback)

        entry = self.launches.get(key, make)
        entry.hits += 1
        mark = entry.feedback.begin(s) if self.pace_feedback and not _capturing((s,)) else None
        entry.run()
        if mark is not None:
            entry.feedback.end(mark, s)

    def _promote(self, entry: _Launch, build: Any, s: int) -> None:
        """Capture the call's work once into a CUDA graph (on a private stream: the caller's may be the
        legacy default stream, which cannot capture) and make ``entry`` launch it on ``s``. While the
        caller's own stream is being captured (the user building a graph), the call still issues its
        work one by one, so that it is captured into the user's graph."""
        if stream_is_capturing(s):
            return
        with _cuda.on_device(self.device):
            if self.capture is None:
                self.capture = _new_stream(self.device)
            cap = int(self.capture.ptr)
            ops = build(cap)
            tail: list[Op] = []
            while self.graph_tail_direct and len(ops) > 1 and type(ops[-1]) is Memops:
                tail.insert(0, Memops(ops.pop().batch, s))
            begin_capture(cap)
            try:
                replay(ops)
            finally:
                graph = end_capture(cap)
            try:
                exe = graph_instantiate(graph)
            finally:
                graph_destroy(graph)
        entry.exe = exe
        ops = self.launch_list([GraphLaunch(exe, s), *tail], s)
        eager, launch = entry.run, compile_launch(ops)
        raw = _cuda.cupy_runtime()  # the raw calls, bound once: these closures are launch ops' (launch.Op.bind)
        capturing = raw.streamIsCapturing

        def run() -> None:
            if capturing(s):
                eager()
            else:
                launch()
        entry.run = run
        if [type(op) for op in ops] == [Device, GraphLaunch, Record, Restore]:
            # the common call, in one closure: the hot path of every repeated call (its Python part cost
            # 0.4 us less on the CPU VM than the general one, examples/profile_python.py)
            device, ev = ops[0].device, ops[2].event
            graph_launch, record, get_device = raw.graphLaunch, raw.eventRecord, raw.getDevice

            def run_graph() -> None:
                if capturing(s):
                    eager()
                elif get_device() == device:
                    graph_launch(exe, s)
                    record(ev, s)
                else:
                    launch()
            entry.run = run_graph

    def _drop(self, entry: _Launch) -> None:
        if entry.feedback is not None:
            with contextlib.suppress(Exception):  # closing anyway
                entry.feedback.close()
        if entry.exe is not None:
            with contextlib.suppress(Exception):  # closing anyway; a launch in flight is freed when it ends
                graph_exec_destroy(entry.exe)
            entry.exe = None

    def launch_list(self, ops: list[Op], user: int) -> list[Op]:
        """The call's CUDA work, then the end-of-call event that synchronize() and close() look at (recorded
        by the caller, not captured in a call's graph: an event last recorded by a capture reads as done to
        cudaEventQuery, so synchronize() would return while the graph's copies run). A repeated call is
        captured into a graph from its ``graph_after``-th use on (:meth:`_promote`); this list is what the
        first calls issue, and what the graph is captured from."""
        return squeeze_devices([Device(self.device), *ops, Record(self.event(("end", user)), user)])

    def build(self, ctx: BuildContext, state: _PlanState, inp: DeviceBuffer | None, out: DeviceBuffer | None,
              remote: dict[int, int], user: int, rate: float | None = None, helped_in: int | None = None) -> list[Op]:
        """My launch list: :func:`build_launch` in ``ctx``; the first one that copies its own block within the GPU
        under CUDA_DEVICE_MAX_CONNECTIONS=1 warns."""
        built = build_launch(ctx, state, inp, out, remote, user, rate, helped_in)
        if built.local_side and self.one_queue:
            self.one_queue = False
            plan, me = state.plan, self.rank
            n = plan.ranks.input_bytes[me]
            in_place = (f"pass the output's own block as the input (in place: input = output[{me * n}:{(me + 1) * n}] "
                        "in bytes) or " if plan.collective.kind == "allgather" else "")
            warnings.warn(
                f"rank {me}: this {plan.collective.describe()} copies its own block within GPU {self.device}, which "
                "the CUDA driver does with a kernel; under CUDA_DEVICE_MAX_CONNECTIONS=1 that kernel waits behind "
                "compute issued before it on any stream, so the call cannot overlap that compute. For traffic that "
                f"overlaps compute, {in_place}use hoccl_runtime.init(local_copies='peer') (HOCCL_LOCAL_COPIES=peer); "
                "docs/architecture.md has the measurements", RuntimeWarning, stacklevel=4)
        return built.ops

    def close(self) -> None:
        """The launch lists and their graphs dropped, the events destroyed, the streams let go. The caller makes
        the device current."""
        self.launches.clear()
        for ev in self.events.values():
            with contextlib.suppress(Exception):
                event_destroy(ev)
        self.events.clear()
        self.streams = {}
        self.capture = None


def _new_stream(device: int) -> Any:
    """A non-blocking CuPy stream on ``device`` (held by its owner: the stream lives as long as the object)."""
    import cupy

    with cupy.cuda.Device(device):
        return cupy.cuda.Stream(non_blocking=True)


def paced_ops(launcher: LaunchBuilder, copies: list[Op], rate: float, user: int,
              feedback: pacing.Feedback | None = None) -> list[Op]:
    """The copies cut into pieces; piece k waits for tick k of the clock stream, tick k + 1 comes piece k's bytes
    at ``rate`` after tick k, and the call ends no earlier than the tick after its last piece (see pacing.py).
    The sleeps follow ``feedback`` (that of the paced launch being made; None: a Feedback of its own)."""
    pacer = launcher.pacer_for_calls()
    feedback = feedback if feedback is not None else pacing.Feedback(pacer)
    clock = pacer.handle
    tick = pacing.tick_us(rate, launcher.pace_period_us)
    cut = [Memcpy(c.dst + off, c.src + off, n, c.stream)
           for c in copies for off, n in pacing.pieces(c.nbytes, rate, tick)]
    feedback.target_us += sum(piece.nbytes for piece in cut) / (rate * 1e3)
    event = launcher.event
    ops: list[Op] = [Record(event(("tick", 0)), user), Wait(clock, event(("tick", 0)))]
    for k, piece in enumerate(cut):
        ops.append(piece)
        ops += [Call(feedback.sleep, (clock, pacer.sleep_us(piece.nbytes / (rate * 1e3)))),
                Record(event(("tick", k + 1)), clock), Wait(user, event(("tick", k + 1)))]
    return ops


def build_launch(ctx: BuildContext, state: _PlanState, inp: DeviceBuffer | None, out: DeviceBuffer | None,
                 remote: dict[int, int], user: int, rate: float | None = None, helped_in: int | None = None) -> Built:
    """Rank ``ctx.rank``'s launch list for a call of ``state``'s plan, from the call's buffers (``remote``: the
    peers' output addresses mapped here) on the caller's stream ``user``: a function of its arguments alone (the
    context names the flags, events and streams to use; nothing is issued, so tests call it directly).

    The caller's stream U carries the cross-process handshakes and my first DMA queue's copies; other queues
    (local copies, extra DMA queues) run on side streams ordered with U by events, so the common call costs 3
    CUDA calls::

        U:  [signal READY to senders; wait READY of receivers] -> copies -> [signal DONE; wait DONE]

    With local_copies="peer" my own block goes through my receivers' outputs (``state.bounce``), or, where
    no send of mine carries it, is copied by ``state.helper`` (a sender to me like any other); and I copy
    ``state.helped``'s, from its input at ``helped_in`` into its output, after my sends."""
    plan, prog, me = state.plan, state.program, ctx.rank
    kinds, qindex, qgpu = plan.queues.kind, plan.queues.index, plan.queues.gpu
    mine = sorted(q for q in prog.copies if qgpu[q] == me)
    dma = dma_queues(prog, plan.queues.kind, me)
    main = dma[0] if dma else None
    senders = {prog.queue_gpu[q] for q in prog.copies if qgpu[q] != me and me in prog.touches[q]}
    receivers = {c.dst_rank for q in dma for c in prog.copies[q] if c.dst_rank != me}
    senders, receivers = sorted(senders | {state.helper} - {None}), sorted(receivers | {state.helped} - {None})
    helped: list[Op] = []
    if state.helped is not None:  # the helped rank's own block, its input to its output, both mapped here
        if helped_in is None:
            raise PlanError(f"rank {state.helped} sent no input address for its own block (rank {me} copies it "
                            "with local_copies='peer'): set HOCCL_LOCAL_COPIES alike on every rank")
        base = remote[state.helped]
        helped = [Memcpy(base + c.dst_offset, helped_in + c.src_offset, c.nbytes, user)
                  for c in state.helped_copies if base + c.dst_offset != helped_in + c.src_offset]
    entry, exit_ = MemOps(), MemOps()
    for r in senders:      # my output may be written: tell r (signals first, then waits: no deadlock)
        entry.wait_eq(ctx.flag(0, r, me), 0).write(ctx.flag(0, r, me), 1)
    for r in receivers:    # r's output may be written by my copies
        entry.wait_eq(ctx.flag(0, me, r), 1).write(ctx.flag(0, me, r), 0)
    for r in receivers:
        exit_.wait_eq(ctx.flag(1, me, r), 0).write(ctx.flag(1, me, r), 1)
    for r in senders:
        exit_.wait_eq(ctx.flag(1, r, me), 1).write(ctx.flag(1, r, me), 0)

    def copies(q: int, stream: int) -> list[Op]:  # an in-place call's own block is already in place
        moves = [((out.ptr if c.dst_rank == me else remote[c.dst_rank]) + c.dst_offset, inp.ptr + c.src_offset,
                  c.nbytes) for c in prog.copies[q]]
        return [Memcpy(dst, src, n, stream) for dst, src, n in moves if dst != src]

    # my own block through peers' outputs: pushed into regions my sends overwrite and pulled back before
    # them, or pulled back from where my sends put it after them (bounce_route); none in place
    before: list[Op] = []
    after: list[Op] = []
    if state.bounce:
        pre, post = bounce_moves(state.bounce, inp.ptr, out.ptr, remote)
        before = [Memcpy(dst, src, n, user) for dst, src, n in pre]
        after = [Memcpy(dst, src, n, user) for dst, src, n in post]
    # local queues with copies to make: none when they go through peers, nor in place
    by_peer = state.helper is not None or bool(state.bounce)
    side = [q for q in mine if q != main and (kinds[q] != "dma_local" or (not by_peer and copies(q, 0)))]
    ops: list[Op] = []
    local = [q for q in side if kinds[q] == "dma_local"]
    if local:  # local copies need no peer: they start before the handshake
        ops.append(Record(ctx.event(("pre", user)), user))
    if entry.ops:
        ops.append(Memops(entry, user))
    if len(side) > len(local):
        ops.append(Record(ctx.event(("post", user)), user))
    for q in side:
        stream = ctx.side_stream(qindex[q] if kinds[q] == "dma" else MAX_QUEUES)
        ops.append(Wait(stream, ctx.event(("pre" if q in local else "post", user))))
        ops += copies(q, stream)
        ops.append(Record(ctx.event(("side", q)), stream))
    sends = before + (copies(main, user) if main is not None else []) + after + helped
    if sends and rate is None:
        ops += sends
    elif sends:
        ops += ctx.paced(sends, rate, user)
    ops += [Wait(user, ctx.event(("side", q))) for q in side]
    if exit_.ops:  # last: a graph of the call ends at its copies, and this batch follows it (_promote)
        ops.append(Memops(exit_, user))
    return Built(ops, bool(local))
