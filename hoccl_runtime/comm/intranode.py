"""The intra-node Communicator: its set-up, its calls and their state, synchronize and close. Of the parts it is
made of, the watchdog is an object it holds (``_watchdog``, owning the fault state and its thread); the
rendezvous, eager path, windows and launch building are still its base classes."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import zlib
from collections import deque
from collections.abc import Sequence
from typing import Any

from hoccl_compiler.schema import Plan

from .. import _cuda, pacing  # no CUDA at import: each loads cupy / cuda-bindings when first used
from .._cuda_memory import free, ipc_close_mem_handle
from .._cuda_streams import event_create, event_destroy, stream_is_capturing, stream_wait_event
from .._splits import alltoallv_pieces
from .._store import announce_failure
from ..errors import HocclError, HocclTimeoutError, PlanError
from ..executor import check_buffer
from ..interop import as_buffer, as_stream
from ..ipc import IpcMappings
from ..launch import (
    LaunchCache,
)
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
    _check_in_place,
    _Flag,
    _own_block,
    _pair_flag,
    _PlanState,
    _SharedHost,
)
from .build import LaunchBuilding
from .eager import EagerPath, eager_layout
from .rendezvous import Rendezvous
from .watchdog import Watchdog
from .windows import Window, WindowCalls


class Communicator(LaunchBuilding, EagerPath, Rendezvous, WindowCalls):
    """Collectives among the processes of one node, on copy engines. Thread-safe; close() frees all."""

    _one_queue = False  # CUDA_DEVICE_MAX_CONNECTIONS=1 and no warning yet (set by _mailbox_state)
    pairs_alone = True  # two ranks exchange without the others (hoccl_runtime.api)
    any_stream = True

    def __init__(self, rank: int, world: int, device: int, store: Any, *, timeout_s: float = 60.0,
                 ipc_cache: int = 64, dma_queues: int | None = None, local_copies: str | None = None):
        try:
            self._setup(rank, world, device, store, timeout_s=timeout_s, ipc_cache=ipc_cache, dma_queues=dma_queues,
                        local_copies=local_copies)
        except BaseException as exc:
            # the others hear of it through the store at once (raise_if_a_rank_failed) instead of waiting for
            # this rank until their timeout; what was made here is released (no /dev/shm segment, no thread)
            announce_failure(store, rank, exc)
            watchdog = getattr(self, "_watchdog", None)
            if watchdog is not None:
                watchdog.stop()
            shared = getattr(self, "_shared", None)
            if shared is not None:
                with contextlib.suppress(Exception):
                    shared.close()
            raise

    def _setup(self, rank: int, world: int, device: int, store: Any, *, timeout_s: float, ipc_cache: int,
               dma_queues: int | None, local_copies: str | None) -> None:
        import cupy

        from .._cuda import cupy_runtime

        if not 0 <= rank < world:
            raise HocclError(f"rank {rank} is outside 0..{world - 1}")
        if dma_queues is None:  # copy streams per GPU the plans spread peers over (several CEs on NVSwitch)
            dma_queues = env_int("HOCCL_DMA_QUEUES", 1, 1, MAX_QUEUES)
        if not 1 <= dma_queues <= MAX_QUEUES:
            raise HocclError(f"dma_queues={dma_queues} (or HOCCL_DMA_QUEUES): give 1..{MAX_QUEUES} copy queues per GPU")
        local_copies = local_copies_setting(local_copies)
        # who copies my own block of an out-of-place call (AllGather's own part, All-to-All's self block,
        # scatter's and gather's root part): "sm", this rank, where the CUDA driver runs a same-GPU copy as
        # a kernel on SMs; "peer", copy engines, through a peer GPU's output (bounce_route; no SM, more
        # NVLink traffic: on 2 GPUs an AllGather moves twice the bytes per direction, an All-to-All three times)
        self.local_copies = local_copies
        if ipc_cache < world:
            raise HocclError(f"ipc_cache={ipc_cache} must hold at least one mapping per rank ({world})")
        # settings (docs/settings.md) first: a bad one raises before anything is allocated
        # (0 by default with local_copies="peer": the eager receive's copy out of its slot is a same-GPU copy)
        self.eager_bytes = env_int("HOCCL_EAGER_BYTES", 0 if local_copies == "peer" else 4 << 20, 0)
        # collectives on the eager path too (opt-in: HOCCL_EAGER_COLLECTIVES=1; see the module docstring)
        self.eager_collectives = env_flag("HOCCL_EAGER_COLLECTIVES", False)
        # from the graph_after-th call with the same buffers on, launch the call as a CUDA graph (0: never)
        self.graph_after = env_int("HOCCL_GRAPH_AFTER", 2, 0)
        # a graph's trailing stream-memory-operation batch launched after it instead of inside it (off: whole
        # calls cost the host less with it inside, see the module docstring)
        self.graph_tail_direct = env_flag("HOCCL_GRAPH_TAIL_DIRECT", False)
        # the pacing clock's tick: one piece of a paced call per tick (pacing.py)
        self.pace_period_us = env_float("HOCCL_PACE_PERIOD_US", pacing.PERIOD_US)
        # paced calls time themselves and scale their sleeps toward their rate (pacing.Feedback). Off by
        # default: beside a load it can overshoot the cap (pacing.py)
        self.pace_feedback = env_flag("HOCCL_PACE_FEEDBACK", False)
        self.rank, self.world, self.device, self.timeout_s = rank, world, device, timeout_s
        self._lock = threading.Lock()
        self._closed = False
        cupy_runtime()  # CuPy and a GPU, or the one-line error saying what is missing
        if device >= _cuda.device_count():
            n = _cuda.device_count()
            raise HocclError(f"rank {rank} asked for GPU {device} but this process sees {n} (GPUs 0..{n - 1}): give "
                             "device= one of those, or check CUDA_VISIBLE_DEVICES and --nproc_per_node")
        self._cupy = cupy
        # side streams (extra DMA queues; the last slot for local copies), created when first needed: every
        # stream of a process takes one of CUDA_DEVICE_MAX_CONNECTIONS hardware queues, and streams that
        # share one wait for each other
        self._streams: dict[int, Any] = {}
        self._shared = _SharedHost(store, rank, world, timeout_s)
        self._store = store
        self._mailbox_state(rank, world)
        self.ipc_cache = ipc_cache
        # peers' allocations mapped here: the least recently used beyond ipc_cache closed after this rank's calls
        # drained and the launch lists that name it dropped (hoccl_runtime.ipc)
        self._opened = IpcMappings(ipc_cache, before_close=self._before_unmap)
        self._launches = LaunchCache(drop=self._drop_launch)
        self._capture: Any = None  # the private stream calls are captured on
        self._events: dict[Any, int] = {}
        self._pacer = None
        self._building: pacing.Feedback | None = None  # the paced call being built (_cached_paced)
        self.rate_gbps: float | None = None  # default rate cap of every call (None: full speed)
        self._watchdog = Watchdog(rank, world, self._shared, self._events)  # a part: the fault state and its thread
        from ..plans import machine_topology

        self.topology = machine_topology(nodes=1, gpus_per_node=world, device=device, dma_queues=dma_queues)

    def _mailbox_state(self, rank: int, world: int) -> None:
        """The per-call bookkeeping of the mailbox, the eager path and the windows, empty (also what the CPU
        harnesses of tests/ and examples/profile_python.py start from)."""
        self._stage_in: dict[int, int] = {}   # peer -> my staging for its eager messages (cudaMalloc)
        self._stage_out: dict[int, int] = {}  # peer -> its staging for mine, mapped here
        # eager receives whose sender's size entry was not there yet: (peer, seq, ring word, digest, call)
        self._unverified: list[tuple[int, int, int, int, Any]] = []  # ..., CollectiveSpec
        from ..plans import PlanCache

        # call key -> plan state: a plain dict on the hot path, bounded where _state adds to it (MoE sizes change
        # every step)
        self._plans: dict[tuple, _PlanState] = {}
        self._by_id: dict[str, _PlanState] = PlanCache()
        self._seq = [0] * world
        # registered windows (register_window): their peers' mappings stay open (not in the LRU above)
        self._windows: list[Window] = []
        self._window_count = 0
        self._pinned: dict[bytes, list[int]] = {}  # handle -> [local address, windows using it]
        # window calls whose partner's entry was not there yet: peer -> (seq, digest, window, offset, call)
        self._win_pending: dict[int, deque] = {}
        # window calls seen before: (call, stream, rate, input, output) -> what _window_call needs, or None (no window)
        self._window_calls: dict[tuple, tuple | None] = {}
        # per partner and mailbox slot: the sequence number of my rendezvous entry in it, 0 for a window entry
        # (which a partner may lose unchecked) or none; a rendezvous entry must be read before it is overwritten
        self._slot_rdv = [[0] * _SLOTS for _ in range(world)]
        self._rdv_open = [deque() for _ in range(world)]  # per partner: seqs of my rendezvous entries _collect
        # has not matched yet (their partner entries must not be acknowledged before they are read)
        self._region_out = [self._pair(rank, p) // 8 for p in range(world)]  # mailbox word index, me -> p
        self._region_in = [self._pair(p, rank) // 8 for p in range(world)]   # p -> me
        self._last_stream: int | None = None  # the caller stream of the last call issued outside a stream capture
        self._window_error: PlanError | None = None  # the first mismatch _check_windows found, raised after a launch
        # Megatron's setting: one hardware queue for every stream, where a same-GPU copy (a driver kernel)
        # waits behind compute issued before it (warned once, at the first call that makes one: _build)
        self._one_queue = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "").strip() == "1"

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
        buf = as_buffer(tensor, "tensor")
        self._run(CallKey.broadcast(buf.nbytes, root), None, buf, stream, rate_gbps, duration_s)

    def scatter(self, output: Any, input: Any = None, root: int = 0, stream: Any = None, *,
                rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        out = as_buffer(output, "output")
        self._run(CallKey.scatter(out.nbytes * self.world, root), input if self.rank == root else None, out, stream,
                  rate_gbps, duration_s)

    def gather(self, input: Any, output: Any = None, root: int = 0, stream: Any = None, *,
               rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        inp = as_buffer(input, "input")
        self._run(CallKey.gather(inp.nbytes * self.world, root), inp, output if self.rank == root else None, stream,
                  rate_gbps, duration_s)

    def send(self, tensor: Any, dst: int, stream: Any = None, *, rate_gbps: float | None = None,
             duration_s: float | None = None) -> None:
        buf = as_buffer(tensor, "tensor")
        self._check_peer(dst, "dst")
        self._run(CallKey.sendrecv(self.rank, dst, buf.nbytes), buf, None, stream, rate_gbps, duration_s)

    def recv(self, tensor: Any, src: int, stream: Any = None) -> None:
        buf = as_buffer(tensor, "tensor")
        self._check_peer(src, "src")
        self._run(CallKey.sendrecv(src, self.rank, buf.nbytes), None, buf, stream)

    def all_to_all_v(self, output: Any, input: Any, output_split_bytes: Sequence[int],
                     input_split_bytes: Sequence[int], stream: Any = None) -> None:
        """All-to-Allv (MoE token exchange): block j of ``input`` (``input_split_bytes[j]`` bytes, blocks back to
        back) goes to rank j and lands as block ``rank`` of its ``output`` (whose blocks are
        ``output_split_bytes``). Runs as one batch of pairwise copies on copy engines (each a one-pair plan,
        compiled once per size; see :mod:`hoccl_runtime._splits`) plus this rank's own block, a same-GPU copy."""
        pieces = alltoallv_pieces(self.rank, self.world, as_buffer(input, "input"), as_buffer(output, "output"),
                                  input_split_bytes, output_split_bytes)
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

    @staticmethod
    def _spec(key: tuple) -> Any:
        """The CollectiveSpec of a call key (:func:`hoccl_runtime.plans.call_spec`)."""
        from ..plans import call_spec

        return call_spec(key)

    def execute(self, plan: Plan, input: Any, output: Any, stream: Any = None, *,
                rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        """Run this rank's part of a compiled single-node plan (every partner rank calls it too)."""
        self._run(plan, input, output, stream, rate_gbps, duration_s)

    # --- the call ----------------------------------------------------------------------------------------
    def _check_peer(self, peer: int, what: str) -> None:
        if not 0 <= peer < self.world or peer == self.rank:
            raise HocclError(f"{what}={peer} must be another rank in 0..{self.world - 1} (this is rank {self.rank})")

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
        return plan_state(plan, self.rank, self.world, self.local_copies, self.eager_bytes if
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
            self._check_peer(peer, "dst" if kind == "send" else "src")
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
            if self._unverified:
                self._verify_eager()
            if s != self._last_stream:
                self._follow(s)
            if len(items) == 1:  # the common call, without the batch's lists
                what, input, output = items[0]
                if self._windows and self._window_call(what, input, output, s, rate, duration_s):
                    return
                state, inp, out = self._prepare(what, input, output)
                if duration_s is not None:  # this rank's paced bytes spread over the duration (none: full speed)
                    rate = state.paced_bytes / duration_s / 1e9 if state.paced_bytes else None
                    if rate is not None:
                        pacing.tick_us(rate, self.pace_period_us)
                if state.eager is not None:
                    self._eager_launch(state, inp, out, self._eager_enter(state), s, rate)
                else:
                    remote, helped_in = self._collect(state, self._publish(state, out, inp))
                    self._launch(state, inp, out, remote, helped_in, s, rate)
                self._raise_window_error()  # found while this call waited (_collect): raised once it is launched
                return
            prepared = [self._prepare(what, input, output) for what, input, output in items]
            # all sequence numbers and entries first ...
            entered = []
            for state, inp, out in prepared:
                if state.eager is not None:
                    entered.append(("eager", self._eager_enter(state)))
                elif self._windows and (where := self._in_window(state, inp, out)):
                    win, offset = where
                    remote = self._window_remote(state, win, offset)
                    self._window_entries(state, win.index, offset)
                    entered.append(("window", remote))
                else:
                    entered.append(("mailbox", self._publish(state, out, inp)))
            for (state, inp, out), (path, got) in zip(prepared, entered, strict=True):  # ... then every wait
                if path == "eager":
                    self._eager_launch(state, inp, out, got, s, rate)
                elif path == "window":
                    self._launch(state, inp, out, got, None, s, rate)
                else:
                    self._launch(state, inp, out, *self._collect(state, got), s, rate)
            if any(self._win_pending.values()):  # window entries, after the launches (_window_call)
                self._check_windows()
            self._raise_window_error()

    def _follow(self, s: int) -> None:
        """A call on another stream than the last one waits for the last one's end: a communicator's calls run
        one after the other on the GPUs whatever their streams, as NCCL's do (it orders them by events), since
        they share each pair's READY/DONE flags and eager slots. A call inside a stream capture is left alone
        (the user's graph orders its launches; a wait there on an event from outside would break the capture)."""
        if stream_is_capturing(s):
            return
        prev, self._last_stream = self._last_stream, s
        ev = self._events.get(("end", prev)) if prev is not None else None
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
        check_buffer(me, "input", inp, plan.ranks.input_bytes[me], plan, self.device)
        check_buffer(me, "output", out, plan.ranks.output_bytes[me], plan, self.device)
        if inp is not None and out is not None and inp.ptr < out.ptr + out.nbytes and out.ptr < inp.ptr + inp.nbytes \
                and input is not None:
            _check_in_place(me, inp, out, state.own_block, plan.collective.kind)
        return state, inp, out

    def _flag(self, phase: int, a: int, b: int) -> _Flag:
        """phase 0, READY[a][b]: b's buffers are ready for a's copies (b's stream writes, a's consumes);
        phase 1, DONE[a][b]: a's copies into b finished (a's stream writes, b's consumes)."""
        return _Flag(self._shared.flag_address(_pair_flag(self.world, phase, a, b)))

    def _side_stream(self, slot: int) -> int:
        s = self._streams.get(slot)
        if s is None:
            with self._cupy.cuda.Device(self.device):
                s = self._streams[slot] = self._cupy.cuda.Stream(non_blocking=True)
        return int(s.ptr)

    def _event(self, key: Any) -> int:
        ev = self._events.get(key)
        if ev is None:
            with _cuda.on_device(self.device):
                ev = self._events[key] = event_create()
        return ev

    def synchronize(self, timeout_s: float | None = None) -> None:
        """Wait (host) until this rank's part of every call issued so far is done on the GPU, raising
        HocclTimeoutError after ``timeout_s`` (default: the communicator's timeout)."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        self._watchdog.raise_if_failed()
        if self._unverified:
            self._verify_eager()
        while self._watchdog.pending():
            self._watchdog.raise_if_failed()
            if time.monotonic() > deadline:
                if self._win_pending:  # a window call that a partner mismatched says more than the timeout
                    self._check_windows()
                    self._raise_window_error()
                raise HocclTimeoutError(f"rank {self.rank}: copies still pending after {limit:.0f} s; a peer "
                                        "may have died or stopped issuing collectives")
            time.sleep(100e-6)
        self._watchdog.raise_if_failed()  # the watchdog may have drained the streams before this wait began
        if self._unverified:  # receives completed: their senders' size entries were written before the data
            self._verify_eager()
        if self._win_pending:  # window calls completed: their partners' entries were written before the data
            self._check_windows()
        self._raise_window_error()

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
                self._launches.clear()  # destroys the calls' graphs
                for w in self._windows:
                    w.closed, w.tensor = True, None
                self._windows, self._window_calls = [], {}
                self._opened.close_all()
                for base in [*self._stage_out.values(), *(p[0] for p in self._pinned.values())]:
                    with contextlib.suppress(Exception):  # closing anyway
                        ipc_close_mem_handle(base)
                for ptr in self._stage_in.values():  # peers' mappings keep the memory until they close them
                    with contextlib.suppress(Exception):
                        free(ptr)
                self._stage_in, self._stage_out = {}, {}
                for ev in self._events.values():
                    with contextlib.suppress(Exception):
                        event_destroy(ev)
            self._events.clear()
            self._pinned.clear()
            self._streams = {}
            self._capture = None
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
    state = _PlanState(plan, uid, prog, digest, tuple(sorted(partners)),
                       (int(res_off[me]), int(res_bytes[me])), eager, paced,
                       int(res_off[me]) if res_bytes[me] else _own_block(prog, me, int(plan.ranks.input_bytes[me])),
                       bounce, helper, helped, helped_copies, windows)
    return state
