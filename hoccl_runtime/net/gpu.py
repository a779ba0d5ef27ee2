"""The network executor on GPUs: :class:`GpuNodeExecutor` runs :class:`~hoccl_runtime.net.host.HostNodeExecutor`'s
protocol with every copy on a copy engine, enqueued up front and gated by counter flags in pinned host memory, so
the driving thread makes no CUDA call (see the class)."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hoccl_compiler.schema import Plan

from .._cuda import cuda_errors, enable_peer_access, set_device  # no CUDA at import (the driving half runs without it)
from .._cuda_memory import free, malloc
from .._cuda_streams import stream_synchronize
from ..aliasing import check_aliasing
from ..errors import TransportError
from ..executor import check_buffers
from ..flags import Flag, FlagPool, MemOps, reached
from ..interop import as_buffer
from ..launch import Device, Memcpy, Memops, Op, Wait, replay, squeeze_devices
from ..plans import per_plan
from .chained import Chained
from .gated import MAX_SLOTS, RING_BYTES, GatedNodeExecutor, PreparedRun, flag_count, open_gates, ring_slots
from .order import NEVER, LaunchOrder
from .routes import net_chunk_of
from .template import START, Counters, moved
from .transport.base import Region, Transport
from .wire import LOCAL, NATIVE, RDMA

__all__ = ["GpuNodeExecutor", "GatedNodeExecutor", "open_gates", "PreparedRun", "RING_BYTES", "MAX_SLOTS", "ring_slots"]




def _apart(plan: Plan, bound: dict) -> dict:
    """``bound`` ({rank: (input, output, GPU)}), once no two of its buffers share bytes in a way the plan does not
    allow (:func:`hoccl_runtime.aliasing.check_aliasing`)."""
    check_aliasing(plan, {r: (ib, ob) for r, (ib, ob, _) in bound.items()})
    return bound


class GpuNodeExecutor(GatedNodeExecutor):
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

    def __init__(self, plan: Plan, node: int, buffers: Mapping[int, tuple], transport: Transport, *,
                 slots: int | None = None, timeout_s: float = 30.0, reuse: bool = False,
                 ring_bytes: int = RING_BYTES, staging: str = "auto", arena: Any = None, flag_arena: Any = None,
                 overlap: bool | None = None):
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
            slots = ring_slots(net_chunk_of(plan), ring_bytes)
        topo = plan.topology
        L = topo.gpus_per_node
        ranks = list(range(node * L, (node + 1) * L))
        cupy_runtime()  # CuPy and a GPU, or the one-line error saying what is missing
        self._peers: set[tuple[int, int]] = set()
        self.plan, self.node, self.ranks = plan, node, ranks  # what _check_buffers needs before the base class runs
        given = self._check_buffers(plan, buffers)
        self._given, self._dev = buffers, {r: b[2] for r, b in given.items()}  # what run() runs without arguments
        self._current: PreparedRun | None = None
        self._host: list[int] = []
        # arena / flag_arena: host memory shared with a proxy process (hoccl_runtime.net.arena.SharedArena) that
        # the rings and placeholders / the flags are carved from; None: pinned allocations of this process
        self._arena = arena
        placeholders = {r: (self._pinned(1), self._pinned(1)) for r in ranks}  # the base class's host views
        self._streams: dict[tuple, int] = {}
        self._keep_alive: list = []
        # per local rank and slot: go/staged (its send ring) and arrived/landed (its receive ring); per stream: end
        n_flags = flag_count(L, slots)
        self._flags = FlagPool(n_flags) if flag_arena is None else flag_arena.flag_pool(n_flags)
        self._gates = {(kind, r, j): (self._flags.allocate(), self._flags.allocate())
                       for kind in ("send", "recv") for r in ranks for j in range(slots)}
        self._ends: dict[int, Flag] = {}
        self._last_end: dict[int, tuple[Flag, int]] = {}  # stream -> the end count of the last run prepared on it
        self._counts = Counters()  # the last count of every gate and end flag (an array C may move on: net/kept.py)
        self._events: dict[tuple, int] = {}  # multicast plans: (GPU, stage, transfer, chunk) -> event (net/chained.py)
        self._bounds_checked: dict[int, tuple] = {}  # id -> (plan, None): plans whose transfers were checked in bounds
        self._one_stream: dict[int, tuple[Plan, bool]] = {}  # id -> (plan, whether it may run on one stream)
        self._orders: dict[int, tuple[Plan, LaunchOrder]] = {}  # id -> (plan, its chunk copies' levels)
        self.prepared_runs = 0  # runs prepared (issued): their parity picks a ring half (HOCCL_NET_OVERLAP)
        from ..settings import env_int
        from .template import Templates

        # runs' launch lists kept and issued again with new counts (net/template.py)
        self._templates = Templates() if env_int("HOCCL_NET_LAUNCH_CACHE", 1, 0, 1) else None
        super().__init__(plan, node, placeholders, transport, slots=slots, timeout_s=timeout_s, reuse=reuse,
                         overlap=overlap,
                         _check_sizes=False)

    def _check_buffers(self, plan: Plan, buffers: Mapping[int, tuple]) -> dict:
        """{rank: (input, output, GPU)} of a run's buffers: sizes, one GPU per rank, peer access between them."""
        bound = {}
        for r in self.ranks:
            if r not in buffers:
                raise TransportError(f"node {self.node}: no buffers for rank {r} (this node drives ranks "
                                     f"{self.ranks})")
            inp, out = buffers[r]
            ib, ob = as_buffer(inp, f"rank {r} input"), as_buffer(out, f"rank {r} output")
            check_buffers(r, ib, ob, plan)
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
        if self._arena is not None:
            return self._arena.array(max(1, nbytes))
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
        device = self._dev[rank]
        set_device(device)
        size = -(-max(1, nbytes) // (2 << 20)) * (2 << 20)  # whole 2 MiB pages: the dma-buf range is whole pages
        ptr = malloc(size)
        self._device_rings.append((device, ptr))
        self._ring_at[(kind, rank)] = ptr
        return ptr, self.transport.register_device(ptr, nbytes, device)

    def _stream(self, key: tuple, device: int) -> int:
        """The copy stream of ``key``: ("d2h", ū) and ("h2d", v̄) per staging ring (each carries one transfer
        per stage, so no ring's copies queue behind another's), ("d2d", GPU) for the copies within the node, and
        ("d2d", "recv", GPU) for a multicast plan's copies on the GPU's dma_recv queue."""
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
        n = moved(self._counts.get(key, 0), 1)
        self._counts[key] = n
        return n

    # --- the copies, enqueued up front ------------------------------------------------------------------------
    def prepare(self, plan: Plan | None = None, buffers: Mapping[int, tuple] | None = None, *,
                after: Sequence[int] = (), stream: int | None = None, finish: MemOps | None = None,
                start: tuple[Flag, int] | None = None, deferred: list | None = None) -> PreparedRun:
        """Enqueue every copy of one run of ``plan`` on ``buffers`` (default: the executor's) and return what
        :meth:`run` needs to drive it. Runs are driven in the order they were prepared; preparing may go ahead
        of driving (the network communicators prepare at call time, their proxy drives). ``after``: CUDA events
        (raw handles) that every copy of the run waits for on the GPU.

        ``stream`` (a raw handle, where :meth:`one_stream` allows): every copy goes on that stream after what it
        holds (no event, no copy stream), staging copies before landing ones, ``finish`` (e.g. the caller's DONE
        wait) in the batch that writes the end count, and ``start`` (flag, count: the caller's START counter) first
        in the first batch (HOCCL_NET_ONE_STREAM, comm/calls.py): a 1F1B exchange's copies are 5 driver calls, not
        8 on two copy streams. ``deferred`` (a list): a run from a kept list is filled in and its launch appended
        there, for :meth:`launch_deferred` once the caller has told the proxy (a run built anew launches here)."""
        plan = self.plan if plan is None else plan
        if plan is not self.plan or buffers is not None:
            self._only_with_reuse()
        self._fits(plan)
        self._checked_bounds(plan)
        if start is not None and stream is None:
            raise TransportError("prepare(start=...): a START count goes on the caller's stream; give stream= too")
        if stream is not None and not self.one_stream(plan):
            raise TransportError(f"plan {plan.plan_id}: its copies cannot all go on the caller's stream (more than "
                                 "one stage, multicast, or a transfer of more chunks than a ring has slots); "
                                 "prepare it without stream=")
        bound = self._check_buffers(plan, self._given if buffers is None else buffers)
        run = PreparedRun(plan, self.next_parity())
        kept = self._templates
        on = after if stream is None else (("on", stream, finish is None, start is None),)  # no event
        key = (*kept.key(plan, on, bound), run.parity) if kept is not None else None
        try:
            issued, before = kept.issue(key, run, self._counts, self._last_end, lambda: self._enqueuing(plan),
                                        start, deferred) if kept is not None else (False, None)
            # checked where a launch is built: a kept list is keyed by these buffers (hoccl_runtime.aliasing)
            ops = None if issued else self._enqueue(run, _apart(plan, bound), after, stream, finish, start)
        except BaseException:
            self.release(run)  # what was enqueued before the error must not wait forever
            raise
        self.prepared_runs += 1  # issued from a kept list (before is None then) or built
        if before is not None:
            counter_of = {flag.address: gate for gate, pair in self._gates.items() for flag in pair}
            counter_of.update({flag.address: ("end", s) for s, flag in self._ends.items()})
            if start is not None:
                counter_of[start[0].address] = START  # the caller's count, given anew every run
            with contextlib.suppress(Exception):  # the run is issued: a list that cannot be kept is built anew
                kept.keep(key, run, ops, before, counter_of, self._counts)
        return run

    def kept_list(self, plan: Plan, buffers: Mapping[int, tuple], stream: int) -> Any:
        """The kept launch list (a RunTemplate, net/template.py) that ``prepare(plan, buffers, stream=stream,
        start=...)`` would issue now, after the same checks; None where it has none (it builds one). net/kept.py
        issues it in one C call."""
        kept = self._templates
        if kept is None or not self.one_stream(plan):
            return None
        self._only_with_reuse()
        self._fits(plan)
        self._checked_bounds(plan)
        return kept.kept((*kept.key(plan, (("on", stream, True, False),), self._check_buffers(plan, buffers)),
                          self.next_parity()), plan)

    def next_parity(self) -> int:
        """The ring half the next prepared run uses: alternate runs with HOCCL_NET_OVERLAP, else 0."""
        return self.prepared_runs & 1 if self.halves else 0

    def streams_end_at(self, ends) -> None:
        """(stream, end count) pairs: where each stream's last issued run ends, for the native kept call
        (:mod:`.kept`), which launches a kept list outside :meth:`prepare`."""
        for s, end in ends:
            self._last_end[s] = end

    def count_reissued(self) -> None:
        """A kept list issued again by the native kept call: counted as :meth:`prepare` counts its runs (the next
        run's parity, the templates' reissues)."""
        self.prepared_runs += 1
        self._templates.reissued += 1

    def _checked_bounds(self, plan: Plan) -> None:
        """Every transfer of ``plan`` inside its buffers (:func:`~hoccl_runtime.program.check_bounds`), once per
        plan object (a few recent ones remembered)."""
        from .._trust import verified
        from ..program import check_bounds

        def check(p: Plan) -> None:
            verified(p)  # the one door (as the host executor's): verify_plan unless this process compiled it
            check_bounds(p)
        per_plan(self._bounds_checked, plan, check)

    def launch_deferred(self, run: PreparedRun, deferred: list) -> None:
        """Issue what :meth:`prepare` left in ``deferred`` for ``run`` (CUDA's errors word the plan). A launch that
        fails leaves the run's gates shut: its driver, told of it already, then finds its copies never coming and
        fails the communicator at its timeout on this node and the other (an error on both, not wrong bytes on the
        other node that open gates would have sent it), and opens every gate then, so no stream waits for ever. Its
        streams' last end counts go back to the runs before (which were launched), for :meth:`close` to wait on."""
        try:
            with self._enqueuing(run.plan):
                for launch in deferred:
                    launch()
        except BaseException:
            stream_of = {id(flag): s for s, flag in self._ends.items()}
            for flag, c in run.ends:
                self._last_end[stream_of[id(flag)]] = (flag, moved(c, -1))  # the count before c
            raise

    def one_stream(self, plan: Plan) -> bool:
        """Whether a run of ``plan`` may go on its caller's stream alone (:meth:`prepare`'s ``stream``): one stage,
        not multicast, and no network transfer of more chunks than a ring has slots. Then a staging copy waits only
        for a slot that earlier runs hold, never for one this run's own landings (queued behind it on the one
        stream) would free on the far side; and the staging copies go first, so neither side's landings hold its
        sends back."""
        def fits(p: Plan) -> bool:
            tr = p.stages[0].transfers if len(p.stages) == 1 else None
            return tr is not None and not (p.options.multicast and any(v >= 0 for v in p.flows.via)) and all(
                -(-n // self.chunk) <= self.span for n, role in zip(tr.bytes, tr.role, strict=True) if role == RDMA)
        return per_plan(self._one_stream, plan, fits)

    def _enqueue(self, run: PreparedRun, bound: dict, after: Sequence[int], on: int | None = None,
                 finish: MemOps | None = None, start: tuple[Flag, int] | None = None) -> list[Op]:
        """Issue the run's launch list (:meth:`launch_ops`) once, and return it: CUDA's own errors leave as a
        CudaError."""
        ops = self.launch_ops(run, bound, after, on, finish, start)
        with self._enqueuing(run.plan):
            replay(ops)
        return ops

    def _enqueuing(self, plan: Plan) -> cuda_errors:
        """The context a run's copies are enqueued in (built or from a kept list): CUDA's own errors name the plan."""
        return cuda_errors(lambda: f"node {self.node}: enqueuing the copies of plan {plan.plan_id}")

    def launch_ops(self, run: PreparedRun, bound: dict, after: Sequence[int], on: int | None = None,
                   finish: MemOps | None = None, start: tuple[Flag, int] | None = None) -> list[Op]:
        """The CUDA work of one run as a launch list (:mod:`hoccl_runtime.launch`, as the one-node paths build
        theirs), ``run``'s gates filled in as it is built: per copy stream, the waits for the ``after`` events, then
        the copies within the node, the staging copies (each after its slot's ``go`` count, writing ``staged``) and
        the landing copies (after ``arrived``, writing ``landed``), and last the stream's end count. The memory
        operations between two copies of a stream go in one batch (a chunk's done count and the next chunk's gate
        wait, in that order: a batch runs in order). The gate counts grow with every run, so a list is built per
        run, not cached. ``on`` / ``finish`` / ``start``: see :meth:`prepare`'s ``stream``.

        The chunk copies go in the list by level (:class:`~hoccl_runtime.net.order.LaunchOrder`), so that streams
        sharing a hardware queue cannot deadlock, and a done count waits in its stream's batch only until a copy
        that may need it is issued (then it goes in a batch of its own). On the caller's stream alone (``on``), the
        staging copies of each stage go before its landing copies, done counts riding with the next copy."""
        plan, mine = run.plan, set(self.ranks)
        fl = plan.flows
        ops: list[Op] = []
        used: dict[int, int] = {}  # stream -> its GPU
        pending: dict[int, MemOps] = {}  # stream -> its memory operations since its last copy, not yet in ops
        need: dict[int, int] = {}  # stream -> the lowest level that may wait for the done count in its batch
        if start is not None:  # the caller's START count, first on its stream
            pending[on] = MemOps().write(*start)

        def stream(key: tuple, device: int) -> int:
            s = self._stream(key, device) if on is None else on
            if s not in used:
                ops.append(Device(device))  # the driver's memops need the stream's device current (squeezed below)
                if on is None:  # the run's first copy on this stream: after the callers
                    ops.extend(Wait(s, event) for event in after)
                used[s] = device
            return s

        def memops(s: int) -> MemOps:
            batch = pending.get(s)
            if batch is None:
                batch = pending[s] = MemOps()
            return batch

        def copy(dst: int, src: int, nbytes: int, s: int) -> None:
            batch = pending.pop(s, None)
            need.pop(s, None)
            ops.append(Device(used[s]))
            if batch is not None:
                ops.append(Memops(batch, s))
            ops.append(Memcpy(dst, src, nbytes, s))

        def chunk_copy(s: int, chained: Chained, tr: Any, t: int, k: int, to: int, frm: int) -> None:
            off = tr.offset[t]
            chained.copy_chunk(ops, tr, t, k, s, lambda begin, nb: copy(to + begin - off, frm + begin - off, nb, s))

        def whole_copy(s: int, to: int, frm: int, n: int) -> None:
            copy(to, frm, n, s)

        def gated(s: int, kind: str, gpu: int, tr: Any, t: int, k: int, base: int, ring: int, data: int,
                  around: Any, needed: int) -> None:  # a staging ("send") or landing ("recv") copy, its done count
            where = (lambda slot, begin: (ring + slot, data + begin)) if kind == "send" else \
                (lambda slot, begin: (data + begin, ring + slot))
            flag, c = self._gated(run.send if kind == "send" else run.recv, kind, gpu, s, tr, t, k, base, memops,
                                  copy, where, around, half)
            memops(s).write(flag, c)  # in its stream's batch until a copy that may need it is issued
            need[s] = min(need.get(s, NEVER), needed if on is None else NEVER)

        routes = self._routes(plan)
        via = fl.via if plan.options.multicast else None
        levels = per_plan(self._orders, plan, lambda p: LaunchOrder(p, self.chunk, self.span, via))
        qkind = plan.queues.kind
        half = run.parity * self.span  # the run's first slot (parity 0 without HOCCL_NET_OVERLAP: next_parity)
        # every chunk copy this node issues: (order key, level, its stream's key and GPU, issue, issue's arguments)
        units: list[tuple] = []
        for stage in plan.stages:
            tr, si = stage.transfers, stage.index
            sending, receiving = set(), set()
            # a multicast plan: what a forwarded copy reads is written by its ``after`` transfer's copies, each
            # chunk followed by an event that the reader's stream waits for (issued before it: by its level)
            chained = Chained(self, stage, via, plan.options) if via is not None else None
            for t in chained.order if chained is not None else range(len(tr.flow)):
                f, role, n = tr.flow[t], tr.role[t], tr.bytes[t]
                holder, g = (fl.dst[via[f]], via[f]) if via is not None and via[f] >= 0 else (fl.src[f], -1)
                if role in (LOCAL, NATIVE) and tr.src[t] in mine:
                    src, dst = bound[holder], bound[fl.dst[f]]
                    to = dst[1].ptr + fl.dst_offset[f] + tr.offset[t]
                    frm = (src[0].ptr + fl.src_offset[f] if g < 0 else src[1].ptr + fl.dst_offset[g]) + tr.offset[t]
                    # a multicast plan's copies dealt to the GPU's dma_recv queue (beside its DMA queue) go on a
                    # copy stream of their own, as the plan's cost has them
                    key = ("d2d", "recv") if qkind[tr.queue[t]] == "dma_recv" else ("d2d",), src[2]
                    if chained is not None and chained.per_chunk(t):
                        for k in range(levels.chunks(si, t)):
                            units.append(((si, 0, len(units)), levels.copy(si, t, k), key, chunk_copy,
                                          (chained, tr, t, k, to, frm)))
                    # a rank's own block given in place (its input inside its output, as FSDP's AllGather does)
                    # is there already: no copy, so no same-GPU copy on SMs (as the intra-node path, bounce_moves)
                    elif n and (to != frm or dst[2] != src[2]):
                        units.append(((si, 0, len(units)), levels.copy(si, t), key, whole_copy, (to, frm, n)))
                    continue
                if role != RDMA:
                    continue
                if tr.src[t] in mine:  # ū's send ring: staging copies u -> slot, each once its slot is free (go)
                    ubar = tr.src[t]
                    self._one_per_ring(sending, ubar, stage, "sends")
                    ring = self._ring_at[("send", ubar)]
                    data = bound[holder][0].ptr + fl.src_offset[f] if g < 0 else bound[holder][1].ptr + fl.dst_offset[g]
                    base, around = routes.send_base(si, t), chained and chained.around(ops, t, "send")
                    key = ("d2h", ubar), bound[holder][2]
                    for k in range(levels.chunks(si, t)):
                        units.append(((si, 0, len(units)), levels.send(si, t, k), key, gated,
                                      ("send", ubar, tr, t, k, base, ring, data, around, levels.send_need(si, t, k))))
                if tr.dst[t] in mine:  # v̄'s receive ring: landing copies slot -> v, each once its chunk arrived
                    vbar, v = tr.dst[t], fl.dst[f]
                    self._one_per_ring(receiving, vbar, stage, "receives")
                    ring, data = self._ring_at[("recv", vbar)], bound[v][1].ptr + fl.dst_offset[f]
                    base, around = routes.ring_base(si, t), chained and chained.around(ops, t, "recv")
                    key = ("h2d", vbar), bound[v][2]
                    for k in range(levels.chunks(si, t)):  # on one stream: after the stage's staging copies
                        units.append(((si, 1, len(units)), levels.land(si, t, k), key, gated,
                                      ("recv", vbar, tr, t, k, base, ring, data, around, levels.land_need(si, t, k))))
        units.sort(key=(lambda u: u[0]) if on is not None else (lambda u: (u[1], u[0][2])))
        for _, level, key, issue, args in units:
            # a done count this copy may need goes first, in a batch of its own; one on this copy's own stream rides
            # in front of its gate wait (the same place in the queue, one driver call fewer)
            own = on if on is not None else self._stream(*key)
            for s in [s for s, lowest in need.items() if lowest <= level and s != own]:
                need.pop(s)
                ops += [Device(used[s]), Memops(pending.pop(s), s)]
            issue(stream(*key), *args)
        if start is not None and on not in used:  # no copy on it: START still goes first, with the end count
            used[on] = next(iter(bound.values()))[2]
        for s, device in used.items():  # each stream says when it is through with the run
            flag = self._ends.get(s)
            if flag is None:
                flag = self._ends[s] = self._flags.allocate()
            c = self._count(("end", s))
            batch = memops(s).write(flag, c)
            ops += [Device(device), Memops(batch if finish is None else batch.extend(finish), s)]
            run.ends.append((flag, c))
            self._last_end[s] = (flag, c)
        return squeeze_devices(ops)

    def _gated(self, side: dict, kind: str, ring: int, s: int, tr: Any, t: int, k: int, base: int, memops: Any,
               copy: Any, where: Any, around: Any = None, half: int = 0) -> tuple[Flag, int]:
        """Transfer ``t``'s chunk ``k`` through ``ring``'s slots on stream ``s`` (the transfer's first chunk at ring
        position ``base``, :class:`Routes`), the copy (``where(slot offset, chunk start)`` gives its (destination,
        source)) after its slot's gate count: ``memops(s)`` is the stream's batch of memory operations being
        gathered, ``copy(dst, src, nbytes, s)`` puts it and the copy in the list. ``around(k, s)`` (a multicast
        plan): a context that puts chunk k's event wait before its copy and its event record after it. Returns the
        done flag and the count to write once the copy is through."""
        start, nb = self._chunk_range(tr, t, k)
        j = half + (base + k) % self.span
        gate, done = self._gates[(kind, ring, j)]
        c = self._count((kind, ring, j))
        memops(s).wait_geq(gate, c)
        with around(k, s) if around else contextlib.nullcontext():
            if nb:
                copy(*where(j * self.chunk, start), nb, s)
        side.setdefault((ring, j), deque()).append((gate, done, c, nb))
        return done, c

    def _one_per_ring(self, seen: set, ring: int, stage: Any, what: str) -> None:
        if ring in seen:
            raise TransportError(f"plan stage {stage.index}: GPU {ring} {what} two network transfers in one stage; "
                                 "a stage holds at most one per GPU and direction (the plan is not a valid HOCCL "
                                 "schedule: hoccl-inspect --verify)")
        seen.add(ring)

    def run(self, plan: Plan | None = None, buffers: Mapping[int, tuple] | None = None, *,
            after: Sequence[int] = (), prepared: PreparedRun | None = None, release: Any = None,
            stream_reached: Any = None) -> None:
        """Drive one run to completion: ``prepared`` (from :meth:`prepare`, possibly in another thread), else
        this plan and buffers prepared here first. Makes no CUDA call when given ``prepared``."""
        if prepared is None:
            prepared = self.prepare(plan, buffers, after=after)
        super().run(prepared=prepared, release=release, stream_reached=stream_reached)

    def close(self) -> None:
        """Wait (up to the timeout) for the copies of every run prepared, then free the rings and flags. Copies
        still pending then (a caller's stream that never reached its call) keep their memory: it is left
        allocated, with a warning, rather than freed under them."""
        import warnings

        from .._cuda import host_free

        self.leave()
        deadline = time.monotonic() + self.timeout_s
        while not all(reached(flag, c) for flag, c in self._last_end.values()):
            if time.monotonic() > deadline:
                warnings.warn(f"node {self.node}: copies of a network call are still pending at close (its caller's "
                              "stream never reached it?); its staging memory is left allocated", stacklevel=2)
                return
            time.sleep(1e-3)
        for (*_, device), s in self._streams.items():
            set_device(device)
            stream_synchronize(s)
        self._flags.close()
        self.send_ring = self.recv_ring = self.inputs = self.outputs = {}
        for ptr in self._host:
            host_free(ptr)
        self._host.clear()
        for device, ptr in self._device_rings:
            set_device(device)
            free(ptr)
        self._device_rings.clear()
        from .._cuda_streams import event_destroy

        for (device, *_), ev in self._events.items():
            set_device(device)
            event_destroy(ev)
        self._events.clear()
        self._keep_alive.clear()
