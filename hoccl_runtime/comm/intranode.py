"""The intra-node Communicator: its set-up, its calls and their order, synchronize and close. It holds the parts it
is made of, each an object that owns its state (the class docstring names them); :func:`plan_state` is what a rank
keeps of a plan, a function of its arguments."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import zlib
from collections.abc import Sequence
from typing import Any

from hoccl_compiler.schema import Plan

from .. import _cuda, pacing  # no CUDA at import: each loads cupy / cuda-bindings when first used
from .._cuda_streams import stream_is_capturing, stream_wait_event
from .._splits import alltoallv_pieces
from .._store import announce_failure
from ..aliasing import check_in_place, plan_in_place
from ..errors import HocclError, HocclTimeoutError, PlanError
from ..executor import check_buffers
from ..interop import as_buffer, as_rank, as_stream
from ..plans import CallKey
from ..program import (
    Bounce,
    Copy,
    bounce_route,
    dma_queues,
    local_copies_setting,
    lower,
    own_copies,
)
from ..settings import env_flag, env_float, env_int
from ._base import (
    _SLOTS,
    MAX_QUEUES,
    _PlanState,
    _SharedHost,
)
from .build import LaunchBuilder
from .context import NodeContext
from .eager import EagerSlots, eager_layout
from .rendezvous import Mailbox, PeerMappings, Rendezvous
from .watchdog import Watchdog
from .windows import Window, WindowTable


class _Setting:
    """A setting of one of the Communicator's parts, read and written as an attribute of the communicator."""

    def __init__(self, part: str, name: str):
        self.part, self.name = part, name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else getattr(getattr(obj, self.part), self.name)

    def __set__(self, obj: Any, value: Any) -> None:
        setattr(getattr(obj, self.part), self.name, value)


class Communicator:
    """Collectives among the processes of one node, on copy engines. Thread-safe; close() frees all.

    It is made of parts it holds, each owning its state (docs/architecture.md, the runtime's table of parts):
    ``_mailbox`` (the per-pair slots and sequence numbers), ``_mappings`` (the partners' allocations mapped
    here), ``_windows`` (registered windows), ``_rendezvous`` (a call's address exchange over the three),
    ``_eager`` (the eager path's staging), ``_launcher`` (launch lists, graphs, streams, events, pacing) and
    ``_watchdog`` (faults). The communicator itself keeps the calls' plans and the order of its calls."""

    pairs_alone = True  # two ranks exchange without the others (hoccl_runtime.api)
    any_stream = True
    windows_help = True  # a call on registered windows skips the per-call address exchange (hoccl_runtime.torch)
    # settings read from the environment at set-up (docs/settings.md), kept by the parts they steer
    eager_bytes = _Setting("_eager", "slot_bytes")           # HOCCL_EAGER_BYTES: the eager path's slot (0: off)
    graph_after = _Setting("_launcher", "graph_after")       # HOCCL_GRAPH_AFTER
    graph_tail_direct = _Setting("_launcher", "graph_tail_direct")  # HOCCL_GRAPH_TAIL_DIRECT
    pace_period_us = _Setting("_launcher", "pace_period_us")  # HOCCL_PACE_PERIOD_US
    pace_feedback = _Setting("_launcher", "pace_feedback")    # HOCCL_PACE_FEEDBACK

    def __init__(self, rank: int, world: int, device: int, store: Any, *, timeout_s: float = 60.0,
                 ipc_cache: int = 64, dma_queues: int | None = None, local_copies: str | None = None,
                 shared: Any = None):
        """``shared``: the node's shared host memory already made (tests and examples/profile_python.py give one
        in process memory, with CUDA faked); None: made here, with the device checked."""
        try:
            self._setup(NodeContext.make(rank, world, device, store, timeout_s), ipc_cache, dma_queues,
                        local_copies, shared)
        except BaseException as exc:
            # the others hear of it through the store at once (raise_if_a_rank_failed) instead of waiting for
            # this rank until their timeout; what was made here is released (no /dev/shm segment, no thread)
            announce_failure(store, rank, exc)
            watchdog = getattr(self, "_watchdog", None)
            if watchdog is not None:
                watchdog.stop()
            if shared is None and getattr(self, "_shared", None) is not None:
                with contextlib.suppress(Exception):
                    self._shared.close()
            raise

    def _setup(self, ctx: NodeContext, ipc_cache: int, dma_queues: int | None, local_copies: str | None,
               shared: Any) -> None:
        rank, world = ctx.rank, ctx.world
        if dma_queues is None:  # copy streams per GPU the plans spread peers over (several CEs on NVSwitch)
            dma_queues = env_int("HOCCL_DMA_QUEUES", 1, 1, MAX_QUEUES)
        if not 1 <= dma_queues <= MAX_QUEUES:
            raise HocclError(f"dma_queues={dma_queues} (or HOCCL_DMA_QUEUES): give 1..{MAX_QUEUES} copy queues per GPU")
        # who copies my own block of an out-of-place call (AllGather's own part, All-to-All's self block,
        # scatter's and gather's root part): "sm", this rank, where the CUDA driver runs a same-GPU copy as
        # a kernel on SMs; "peer", copy engines, through a peer GPU's output (bounce_route; no SM, more
        # NVLink traffic: on 2 GPUs an AllGather moves twice the bytes per direction, an All-to-All three times)
        self.local_copies = local_copies = local_copies_setting(local_copies)
        if ipc_cache < world:
            raise HocclError(f"ipc_cache={ipc_cache} must hold at least one mapping per rank ({world})")
        # settings (docs/settings.md) first: a bad one raises before anything is allocated
        # (0 by default with local_copies="peer": the eager receive's copy out of its slot is a same-GPU copy)
        eager_bytes = env_int("HOCCL_EAGER_BYTES", 0 if local_copies == "peer" else 4 << 20, 0)
        # collectives on the eager path too (opt-in: HOCCL_EAGER_COLLECTIVES=1; see the module docstring)
        self.eager_collectives = env_flag("HOCCL_EAGER_COLLECTIVES", False)
        # a broadcast of at least this many bytes (a multiple of the world, 3 ranks or more) is a scatter and an
        # in-place AllGather: the root sends 2 (G - 1) / G of it, not G - 1 times it (0: always one plan)
        self.broadcast_split_bytes = env_int("HOCCL_BROADCAST_SPLIT_BYTES", 4 << 20, 0)
        launcher_settings = dict(
            # from the graph_after-th call with the same buffers on, launch the call as a CUDA graph (0: never)
            graph_after=env_int("HOCCL_GRAPH_AFTER", 2, 0),
            # a graph's trailing stream-memory-operation batch launched after it instead of inside it (off: whole
            # calls cost the host less with it inside, see the module docstring)
            graph_tail_direct=env_flag("HOCCL_GRAPH_TAIL_DIRECT", False),
            # the pacing clock's tick: one piece of a paced call per tick (pacing.py)
            pace_period_us=env_float("HOCCL_PACE_PERIOD_US", pacing.PERIOD_US),
            # paced calls time themselves and scale their sleeps toward their rate (pacing.Feedback). Off by
            # default: beside a load it can overshoot the cap (pacing.py)
            pace_feedback=env_flag("HOCCL_PACE_FEEDBACK", False),
            # Megatron's setting: one hardware queue for every stream (warned once: LaunchBuilder.build)
            one_queue=os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "").strip() == "1")
        self.context = ctx
        self.rank, self.world, self.device, self.timeout_s = rank, world, ctx.device, ctx.timeout_s
        self._lock = threading.Lock()
        self._closed = False
        if shared is None:
            ctx.check_device()
            shared = _SharedHost(ctx.store, rank, world, ctx.timeout_s)
        self._shared = shared
        self.ipc_cache = ipc_cache
        self.rate_gbps: float | None = None  # default rate cap of every call (None: full speed)
        # the parts (each owns its state; the class docstring names them)
        self._launcher = launcher = LaunchBuilder(rank, world, ctx.device, shared, **launcher_settings)
        self._watchdog = Watchdog(rank, world, shared, launcher.events)  # reads the launcher's end-of-call events
        self._mailbox = Mailbox(rank, world, shared, ctx.timeout_s, self._watchdog)

        def store_get(key: str, peer: int, what: str) -> bytes:
            return ctx.store_get(key, peer, what, self._watchdog.raise_if_failed,
                                 "issuing the same calls, and set up alike (HOCCL_EAGER_BYTES, HOCCL_LOCAL_COPIES)")

        # peers' allocations mapped here: the least recently used beyond ipc_cache closed after this rank's calls
        # drained and the launch lists that name it dropped (hoccl_runtime.ipc)
        self._mappings = PeerMappings(rank, ctx.device, ipc_cache, before_close=self._drain)
        self._windows = WindowTable(rank, world, ctx.device, ctx.store, self._mailbox, self._mappings, store_get,
                                    self._lock, drain=self._drain)
        self._rendezvous = Rendezvous(self._mailbox, self._mappings, self._windows, local_copies)
        self._eager = EagerSlots(rank, world, ctx.device, ctx.store, shared, self._mailbox, eager_bytes, store_get)
        from ..plans import PlanCache

        # call key -> plan state: a plain dict on the hot path, bounded where _state adds to it (MoE sizes change
        # every step)
        self._plans: dict[tuple, _PlanState] = {}
        self._by_id: dict[str, _PlanState] = PlanCache()
        self._last_stream: int | None = None  # the caller stream of the last call issued outside a stream capture
        self.topology = ctx.topology(dma_queues=dma_queues)

    # --- torch-like calls ------------------------------------------------------------------------------
    # Each call names its collective by a CallKey (plans.py); the CollectiveSpec (pydantic) is built only on a
    # cache miss, to keep it off the per-call path.
    def all_gather_into_tensor(self, output: Any, input: Any, stream: Any = None, *,
                               rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        out = as_buffer(output, "output")
        self._run(CallKey.allgather(out.nbytes), input, out, stream, rate_gbps, duration_s)

    def all_to_all_single(self, output: Any, input: Any, stream: Any = None, *,
                          rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        out = as_buffer(output, "output")
        self._run(CallKey.alltoall(out.nbytes), input, out, stream, rate_gbps, duration_s)

    def broadcast(self, tensor: Any, root: int, stream: Any = None, *, rate_gbps: float | None = None,
                  duration_s: float | None = None) -> None:
        """``tensor`` of ``root`` into every rank's ``tensor``. From ``broadcast_split_bytes`` on
        (HOCCL_BROADCAST_SPLIT_BYTES, 4 MiB), where the size is a multiple of the world and the world 3 or more, and
        unpaced: a scatter of the tensor's blocks from the root into each rank's own block, then an in-place
        AllGather of the blocks (van de Geijn's broadcast). The root's copy engines then move 2 (G - 1) / G of the
        tensor instead of G - 1 times it, and no GPU sends more than that; the ranks' own blocks stay where they are
        (no same-GPU copy). A chain through the GPUs (the compiler's multicast plan, which ``hoccl_runtime.execute``
        runs) would send each byte once per GPU, but its copies wait on copies of other processes chunk by chunk,
        which this communicator's calls do not do."""
        buf = as_buffer(tensor, "tensor")
        root = as_rank(root, self.world, "root")
        part, rest = divmod(buf.nbytes, self.world)
        if (self.world > 2 and not rest and 0 < self.broadcast_split_bytes <= buf.nbytes and rate_gbps is None
                and duration_s is None and self.rate_gbps is None):
            mine = buf.slice(self.rank * part, part)
            self.scatter(mine, buf if self.rank == root else None, root, stream)
            self.all_gather_into_tensor(buf, mine, stream)
            return
        self._run(CallKey.broadcast(buf.nbytes, root), None, buf, stream, rate_gbps, duration_s)

    def scatter(self, output: Any, input: Any = None, root: int = 0, stream: Any = None, *,
                rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        out = as_buffer(output, "output")
        root = as_rank(root, self.world, "root")
        self._run(CallKey.scatter(out.nbytes * self.world, root), input if self.rank == root else None, out, stream,
                  rate_gbps, duration_s)

    def gather(self, input: Any, output: Any = None, root: int = 0, stream: Any = None, *,
               rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        inp = as_buffer(input, "input")
        root = as_rank(root, self.world, "root")
        self._run(CallKey.gather(inp.nbytes * self.world, root), inp, output if self.rank == root else None, stream,
                  rate_gbps, duration_s)

    def send(self, tensor: Any, dst: int, stream: Any = None, *, rate_gbps: float | None = None,
             duration_s: float | None = None) -> None:
        buf = as_buffer(tensor, "tensor")
        dst = as_rank(dst, self.world, "dst", self.rank)
        self._run(CallKey.sendrecv(self.rank, dst, buf.nbytes), buf, None, stream, rate_gbps, duration_s)

    def recv(self, tensor: Any, src: int, stream: Any = None) -> None:
        buf = as_buffer(tensor, "tensor")
        src = as_rank(src, self.world, "src", self.rank)
        self._run(CallKey.sendrecv(src, self.rank, buf.nbytes), None, buf, stream)

    def all_to_all_v(self, output: Any, input: Any, output_split_bytes: Sequence[int],
                     input_split_bytes: Sequence[int], stream: Any = None) -> None:
        """All-to-Allv (MoE token exchange): block j of ``input`` (``input_split_bytes[j]`` bytes, blocks back to
        back) goes to rank j and lands as block ``rank`` of its ``output`` (whose blocks are
        ``output_split_bytes``). Runs as one batch of pairwise copies on copy engines (each a one-pair plan,
        compiled once per size; see :mod:`hoccl_runtime._splits`) plus this rank's own block, a same-GPU copy."""
        try:
            pieces = alltoallv_pieces(self.rank, self.world, as_buffer(input, "input"), as_buffer(output, "output"),
                                      input_split_bytes, output_split_bytes)
        except HocclError as exc:  # the partners that expect a block of this rank would wait for it
            self.refuse_all_to_all_v(exc)
            raise
        self._watchdog.make(self._watchdog.next_call())  # raises where a partner refused this call (or failed)
        items = [(CallKey.sendrecv(self.rank, j, b.nbytes), b, None) for j, b in pieces.sends]
        items += [(CallKey.sendrecv(j, self.rank, b.nbytes), None, b) for j, b in pieces.recvs]
        items.sort(key=lambda it: (it[0].src, it[0].dst, it[0].size))  # both ends of a pair publish in the same order
        if items:
            with _cuda.cuda_errors(lambda: f"rank {self.rank}: all_to_all_v"):
                self._run_many(items, stream)
        if pieces.local is not None:
            src, dst = pieces.local
            with _cuda.on_device(self.device):
                _cuda.copy_async(dst.ptr, src.ptr, dst.nbytes, as_stream(stream))

    def refuse_all_to_all_v(self, exc: BaseException) -> None:
        """Refuse this rank's next All-to-Allv call for ``exc`` (its sizes are wrong here; found by this
        communicator or by a layer above, such as torch's split sizes), through the node's shared memory. A
        partner that comes to the call after this skips it too, raising a CollectiveError naming this rank and
        ``exc``; the communicators stay usable (as when every rank refuses). A partner that made the call
        already waits on the GPU for blocks this rank does not send: its watchdog releases those waits within
        0.1 s and fails its communicator naming this rank and ``exc`` (raised at its next call or
        ``synchronize()``; the refused call's output holds no valid data); every rank's communicator is then
        unusable, as after a partner's death. The network communicators exchange the sizes first and stay
        usable."""
        if not self._closed:
            self._watchdog.refuse(self._watchdog.next_call(), f"{type(exc).__name__}: {exc}")

    @staticmethod
    def _spec(key: tuple) -> Any:
        """The CollectiveSpec of a call key (:func:`hoccl_runtime.plans.call_spec`)."""
        from ..plans import call_spec

        return call_spec(key)

    def execute(self, plan: Plan, input: Any, output: Any, stream: Any = None, *,
                rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        """Run this rank's part of a compiled single-node plan (every partner rank calls it too)."""
        self._run(plan, input, output, stream, rate_gbps, duration_s)

    def _state(self, what: tuple | Plan) -> _PlanState:
        if isinstance(what, Plan):  # a plan from outside: verified before its first run, known by its content
            from .._trust import trusted

            if what.num_ranks != self.world:
                raise PlanError(f"plan {what.plan_id} was compiled for {what.num_ranks} ranks but the "
                                f"communicator has {self.world}; recompile it with --gpus-per-node {self.world}")
            uid = trusted(what)
            state = self._by_id.get(uid)
            if state is None:
                state = self._by_id[uid] = self._make_state(what, uid)
            return state
        state = self._plans.get(what)
        if state is None:
            from ..plans import PLAN_CACHE_SIZE, compile_call

            # one chunk per transfer: intra-node copies need no pipelining, and fewer calls mean less host time
            state = self._make_state(compile_call(self.topology, what, 1 << 40))
            if len(self._plans) >= PLAN_CACHE_SIZE:  # forget the oldest (compiled again, ~1 ms, if it returns)
                del self._plans[next(iter(self._plans))]
            self._plans[what] = state
        return state

    def _make_state(self, plan: Plan, uid: str | None = None) -> _PlanState:
        return plan_state(plan, self.rank, self.world, self.local_copies, self._eager.slot_bytes if
                          (plan.collective.kind == "sendrecv" or self.eager_collectives) else None, uid)

    def _run(self, what: tuple | Plan, input: Any, output: Any, stream: Any, rate_gbps: float | None = None,
             duration_s: float | None = None) -> None:
        # free when nothing is raised: CuPy's own CUDA errors leave as CudaError naming the call
        with _cuda.cuda_errors(lambda: f"rank {self.rank}: {what[0] if isinstance(what, tuple) else 'execute'}"):
            self._run_many([(what, input, output)], stream, rate_gbps, duration_s)

    def batch_isend_irecv(self, ops: list[tuple[str, Any, int]], stream: Any = None) -> None:
        """Pipeline-stage exchanges in one call: ``ops`` is a list of ("send", tensor, dst) and
        ("recv", tensor, src). All addresses are exchanged before any wait, so the order of ops does
        not matter (no host deadlock between ranks that send to each other); at most 4 ops per peer."""
        items = []
        for op in ops:
            if len(op) != 3 or op[0] not in ("send", "recv"):
                raise HocclError(f"batch op {op!r}: use ('send', tensor, dst) or ('recv', tensor, src)")
            kind, tensor, peer = op
            buf = as_buffer(tensor, f"{kind} tensor")
            peer = as_rank(peer, self.world, "dst" if kind == "send" else "src", self.rank)
            if kind == "send":
                items.append((CallKey.sendrecv(self.rank, peer, buf.nbytes), buf, None))
            else:
                items.append((CallKey.sendrecv(peer, self.rank, buf.nbytes), None, buf))
        # both ends of a pair must publish in the same order: sort by (src, dst, bytes)
        items.sort(key=lambda it: (it[0].src, it[0].dst, it[0].size))
        per_peer: dict[int, int] = {}
        for key, _, _ in items:
            peer = key.dst if key.src == self.rank else key.src
            per_peer[peer] = per_peer.get(peer, 0) + 1
            if per_peer[peer] > _SLOTS:
                raise HocclError(f"batch has more than {_SLOTS} ops with rank {peer}; split it into several batches")
        with _cuda.cuda_errors(lambda: f"rank {self.rank}: batch_isend_irecv"):
            self._run_many(items, stream)

    def _run_many(self, items: list[tuple[Any, Any, Any]], stream: Any, rate_gbps: float | None = None,
                  duration_s: float | None = None) -> None:
        if self._closed:
            raise HocclError("this communicator is closed; create a new one with hoccl_runtime.init()")
        self._watchdog.raise_if_failed()
        s = as_stream(stream)
        rate = self.rate_gbps if rate_gbps is None else rate_gbps
        if (rate is not None or duration_s is not None) and self.topology.dma_queues > 1:
            # pacing gates the caller's stream, which carries the first DMA queue only
            raise HocclError(f"rate_gbps / duration_s with dma_queues={self.topology.dma_queues}: pacing "
                             "caps one copy queue per GPU; use a communicator with dma_queues=1 for paced calls")
        if rate is not None:
            pacing.tick_us(rate, self.pace_period_us)  # refuse a rate pacing cannot keep before a partner hears of it
        if duration_s is not None:
            if rate_gbps is not None:
                raise HocclError(f"rate_gbps={rate_gbps!r} and duration_s={duration_s!r}: give one of them")
            if not duration_s > 0:
                raise HocclError(f"duration_s={duration_s!r}: give a positive number of seconds, or None")
        with self._lock:
            if self._eager.unverified:
                self._eager.verify()
            if s != self._last_stream:
                self._follow(s)
            if len(items) == 1:  # the common call, without the batch's lists
                what, input, output = items[0]
                if self._windows.windows and self._window_call(what, input, output, s, rate, duration_s):
                    return
                state, inp, out = self._prepare(what, input, output)
                if duration_s is not None:  # this rank's paced bytes spread over the duration (none: full speed)
                    rate = state.paced_bytes / duration_s / 1e9 if state.paced_bytes else None
                    if rate is not None:
                        pacing.tick_us(rate, self.pace_period_us)
                if state.eager is not None:
                    self._eager.launch(self._launcher, state, inp, out, self._eager.enter(state), s, rate)
                else:
                    rdv = self._rendezvous
                    remote, helped_in = rdv.collect(state, rdv.publish(state, out, inp))
                    self._launcher.launch(state, inp, out, remote, helped_in, s, rate)
                self._windows.raise_error()  # found while this call waited (collect): raised once it is launched
                return
            prepared = [self._prepare(what, input, output) for what, input, output in items]
            # all sequence numbers and entries first ...
            entered = []
            windows, rdv, launcher = self._windows, self._rendezvous, self._launcher
            for state, inp, out in prepared:
                if state.eager is not None:
                    entered.append(("eager", self._eager.enter(state)))
                elif windows.windows and (where := windows.find(state, inp, out)):
                    win, offset = where
                    remote = windows.remote(state, win, offset)
                    windows.entries(state, win.index, offset)
                    entered.append(("window", remote))
                else:
                    entered.append(("mailbox", rdv.publish(state, out, inp)))
            for (state, inp, out), (path, got) in zip(prepared, entered, strict=True):  # ... then every wait
                if path == "eager":
                    self._eager.launch(launcher, state, inp, out, got, s, rate)
                elif path == "window":
                    launcher.launch(state, inp, out, got, None, s, rate)
                else:
                    launcher.launch(state, inp, out, *rdv.collect(state, got), s, rate)
            if windows.any_pending():  # window entries, after the launches (_window_call)
                windows.check()
            windows.raise_error()

    def register_window(self, tensor: Any) -> Window:
        """Register ``tensor`` (CuPy array, torch tensor, any CUDA buffer) as a window: a collective call,
        every rank registers a buffer of the same size, in the same order. Each rank maps its peers' windows
        once, here. A later call whose buffer (its output; a rank without one: its input) lies in a window
        then skips the per-call address exchange and the wait for the partners' entries: a peer's buffer is
        taken to sit at the same offset of the same window as this rank's, as with NCCL's symmetric windows
        (for send/recv: the receiver's buffer at the offset of the sender's; stages that send and receive use
        two offsets by rank parity). The host does not wait for a partner (only where a mailbox slot still
        holds its own unread rendezvous entry); each call leaves an entry that the partner checks when it gets
        there (another collective, size, window or offset raises PlanError, at that call or a later one or
        ``synchronize()``; an entry replaced by a later one before its check, 4 calls on, goes unchecked).
        Small send/recv keep the eager path. The window holds ``tensor`` (so its memory cannot be freed and
        reused while peers may write into it) until ``Window.close()`` (on every rank) or ``close()``, which
        also release the mappings. A rank whose buffer cannot be shared (e.g. from a ``cudaMallocAsync`` pool)
        raises BufferError, and so do the others at once."""
        if self._closed:
            raise HocclError("this communicator is closed; create a new one with hoccl_runtime.init()")
        self._watchdog.raise_if_failed()
        return self._windows.register(tensor)

    def _drain(self) -> None:
        """Before a mapping closes: this rank's calls drained, and the launch lists, which may name it, dropped."""
        self.synchronize()
        self._launcher.launches.clear()

    def _window_call(self, what: tuple | Plan, input: Any, output: Any, s: int, rate: float | None,
                     duration_s: float | None = None) -> bool:
        """Run a call whose buffer lies in a registered window (True), or say it does not (False). The checks
        of its buffers, its window and offset and its partners' addresses are worked out at its first call
        and kept for the same call on the same buffers and stream; each call writes its mailbox entries."""
        windows, launcher = self._windows, self._launcher
        inp = as_buffer(input, "input") if input is not None else None
        out = as_buffer(output, "output") if output is not None else None
        pace = rate and (rate, launcher.pace_period_us)
        # (pointers and sizes, not the buffers: hashing ints costs a third of hashing two dataclasses; a pointer
        # names its GPU, and a buffer on another GPU fails its first call's checks, so it is never kept)
        key = (self._state(what).uid if isinstance(what, Plan) else what, s, pace, inp and inp.ptr, inp and inp.nbytes,
               out and out.ptr, out and out.nbytes)
        known = windows.calls.get(key, self)
        if known is self:  # first time: all the usual checks
            state, inp, out = self._prepare(what, inp, out)
            where = state.eager is None and windows.find(state, inp, out)
            if where:
                remote = windows.remote(state, *where)
                launch = launcher.key(state, inp, out, remote, None, s, rate)
                known = (state, inp, out, where[0].index, where[1], remote, launch)
            else:
                known = None
            if len(windows.calls) > 4096:
                windows.calls.clear()
            windows.calls[key] = known
        if known is None:
            return False
        state, inp, out, index, offset, remote, launch = known
        if duration_s is not None:  # this rank's paced bytes spread over the duration (none: full speed)
            rate = state.paced_bytes / duration_s / 1e9 if state.paced_bytes else None
            if rate is not None:
                pacing.tick_us(rate, launcher.pace_period_us)  # refused before the partners hear of the call
            launch = launcher.key(state, inp, out, remote, None, s, rate)
        windows.entries(state, index, offset)
        launcher.launch(state, inp, out, remote, None, s, rate, key=launch)
        # the partners' entries are checked after the launch: a mismatch raises here or later on each rank, and
        # both ranks' streams still run their calls through (a rank that raised first would leave the other's
        # stream waiting for it)
        windows.check()
        windows.raise_error()
        return True

    def _follow(self, s: int) -> None:
        """A call on another stream than the last one waits for the last one's end: a communicator's calls run
        one after the other on the GPUs whatever their streams, as NCCL's do (it orders them by events), since
        they share each pair's READY/DONE flags and eager slots. A call inside a stream capture is left alone
        (the user's graph orders its launches; a wait there on an event from outside would break the capture)."""
        if stream_is_capturing(s):
            return
        prev, self._last_stream = self._last_stream, s
        ev = self._launcher.events.get(("end", prev)) if prev is not None else None
        if ev is not None:
            with contextlib.suppress(Exception):  # last recorded inside a capture: that graph is the user's to order
                stream_wait_event(s, ev)

    def _prepare(self, what: tuple | Plan, input: Any, output: Any) -> tuple[_PlanState, Any, Any]:
        state = self._state(what)
        plan, me = state.plan, self.rank
        inp = as_buffer(input, "input") if input is not None else None
        out = as_buffer(output, "output") if output is not None else None
        if inp is None and state.resident[1] and out is not None:
            inp = out.slice(*state.resident)
        if inp is not None and not plan.ranks.input_bytes[me]:
            inp = None  # e.g. scatter's input on a non-root rank: not part of the plan
        if out is not None and not plan.ranks.output_bytes[me]:
            out = None
        check_buffers(me, inp, out, plan, self.device)
        if inp is not None and out is not None and inp.ptr < out.ptr + out.nbytes and out.ptr < inp.ptr + inp.nbytes \
                and input is not None:
            check_in_place(me, inp, out, state.own_block, plan.collective.kind, state.own_output)
        return state, inp, out

    def synchronize(self, timeout_s: float | None = None) -> None:
        """Wait (host) until this rank's part of every call issued so far is done on the GPU, raising
        HocclTimeoutError after ``timeout_s`` (default: the communicator's timeout)."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        self._watchdog.raise_if_failed()
        if self._eager.unverified:
            self._eager.verify()
        while self._watchdog.pending():
            self._watchdog.raise_if_failed()
            if time.monotonic() > deadline:
                if self._windows.pending:  # a window call that a partner mismatched says more than the timeout
                    self._windows.check()
                    self._windows.raise_error()
                raise HocclTimeoutError(f"rank {self.rank}: copies still pending after {limit:.0f} s; a peer "
                                        "may have died or stopped issuing collectives")
            time.sleep(100e-6)
        self._watchdog.raise_if_failed()  # the watchdog may have drained the streams before this wait began
        if self._eager.unverified:  # receives completed: their senders' size entries were written before the data
            self._eager.verify()
        if self._windows.pending:  # window calls completed: their partners' entries were written before the data
            self._windows.check()
        self._windows.raise_error()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._watchdog.stop()
        try:
            if self._watchdog.failure is None:
                self.synchronize()
        finally:
            self._watchdog.join(10)  # a drain in progress ends within 5 s
            with _cuda.on_device(self.device):
                self._launcher.close()  # destroys the calls' graphs and the events
                self._windows.close()
                self._mappings.close_all()
                self._eager.close()
            self._shared.close()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def plan_state(plan: Plan, rank: int, world: int, local_copies: str, eager_bytes: int | None,
               uid: str | None = None) -> _PlanState:
    """What rank ``rank`` of ``world`` keeps of a plan for its calls (a function of its arguments: the lowering,
    the partners, the eager layout where the plan's pieces per pair fit ``eager_bytes`` (None: no eager path),
    the own-block route with ``local_copies="peer"``, the digest ranks compare)."""
    prog = lower(plan)
    if any(plan.queues.kind[q] == "dma" and plan.queues.index[q] >= MAX_QUEUES for q in prog.copies):
        raise PlanError(f"plan {plan.plan_id} uses more than {MAX_QUEUES} DMA queues per GPU")
    fl, me, w = plan.flows, rank, world
    partners = {d for s, d in zip(fl.src, fl.dst, strict=True) if s == me and d != me} | \
               {s for s, d in zip(fl.src, fl.dst, strict=True) if d == me and s != me}
    res_off, res_bytes = plan.ranks.resident_offset, plan.ranks.resident_bytes
    eager = eager_layout(plan, prog, me, eager_bytes) if eager_bytes is not None else None
    helper = helped = None
    windows = True
    bounce: tuple[Bounce, ...] = ()
    helped_copies: tuple[Copy, ...] = ()
    kinds = plan.queues.kind
    main = {r: (dma[0] if (dma := dma_queues(prog, kinds, r)) else None) for r in range(w)}  # first DMA queues
    if local_copies == "peer" and eager is None and w > 1:  # (an eager call's own block stays here)
        # each rank's own block: its route through peers, or None where it needs a helper (a gather's root)
        routes = {r: bounce_route(prog, r, w, main[r]) if own_copies(prog, r) else () for r in range(w)}
        bounce = routes[me] or ()
        if routes[me] is None:  # the next rank copies it
            helper = (me + 1) % w
        prev = (me - 1) % w
        if routes[prev] is None:
            helped, helped_copies = prev, own_copies(prog, prev)
        partners |= {r for r in (helper, helped) if r is not None}
        windows = all(route is not None for route in routes.values())
    if eager is not None:
        paced = sum(n for pieces in eager.sends.values() for _, _, n in pieces)
    else:
        paced = sum(c.nbytes for c in prog.copies[main[me]]) if main[me] is not None else 0
        # the bounces and the helped copies run on my stream too
        paced += sum(b.nbytes * (2 if b.temp else 1) for b in bounce) + sum(c.nbytes for c in helped_copies)
    # the digest names the plan and who copies own blocks: ranks set up differently raise PlanError
    uid = plan.plan_id if uid is None else uid  # this communicator's own plans: the compiler's id
    digest = zlib.crc32(f"{uid}/{local_copies}".encode())
    own_block, own_output = plan_in_place(plan, me)
    state = _PlanState(plan, uid, prog, digest, tuple(sorted(partners)),
                       (int(res_off[me]), int(res_bytes[me])), eager, paced, own_block,
                       bounce, helper, helped, helped_copies, windows, own_output)
    return state
