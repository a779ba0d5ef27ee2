"""One process per GPU (torchrun): the communicator with torch-like calls, for ranks of one node.

    comm = hoccl_runtime.init()                      # RANK / WORLD_SIZE / LOCAL_RANK + a store
    comm.all_gather_into_tensor(out, inp, stream=s)  # returns at once; `out` is ready for later work on s
    comm.close()

How a call works, for rank ``me`` (every step costs no SM, but one: a copy within one GPU, which the
CUDA driver runs as a kernel of its own; see step 3):

1. The plan for (collective, sizes) comes from a cache (compiled on first use, a few ms).
2. Buffer addresses are exchanged with each partner rank (unless the buffer is in a registered window:
   item 8) through a mailbox in host memory shared by the node's processes: my output's CUDA IPC handle
   (of its whole allocation) and the offset in it. The host waits for the partner's entry of the same
   call, up to ``timeout_s``: the CPU-side rendezvous of the paper's point-to-point executor. A partner
   that never arrives raises :class:`HocclTimeoutError` naming it; a partner that called another
   collective raises :class:`PlanError`. Opened IPC mappings are cached by handle (the least recently
   used of more than ``ipc_cache`` is closed).
3. Copies are pushed by their source GPU (``cudaMemcpyAsync``, a copy engine, into the peer's output
   through its IPC mapping). The first DMA queue of this rank runs on the caller's stream itself; local
   copies and any further DMA queues run on side streams ordered with it by CUDA events. A local copy
   (my own block of an out-of-place AllGather, All-to-All, scatter or gather) is a same-GPU copy, which
   the driver runs on SMs (measured, driver 580: hoccl_bench.smfree). None is made in place (input =
   my own block of the output: NCCL's in-place AllGather). With ``local_copies="peer"`` my own block
   goes through a peer GPU on copy engines instead (:func:`bounce_route`): read back from where my
   send put it (AllGather, broadcast), or pushed into a region of a peer's output that my send will
   overwrite and read back before that send (All-to-All, scatter); a block no send of mine carries
   (a gather's root) is copied by the next rank, from my input to my output over NVLink.
4. Streams of different processes are ordered with stream memory operations on flags in the shared
   host memory: per directed pair (u -> v), READY (v's stream says its output may be written) and DONE
   (u's stream says its copies into v landed), each a replay-safe handshake (wait for the reset value,
   write; the consumer waits for the value, resets it), batched so that a call costs two
   ``cuStreamBatchMemOp`` plus its copies::

       v's stream  ─[work]─ [READY=1 ...........................] [wait DONE==1, DONE=0] ─[work]─▶
       u's stream  ─[work]─ [wait READY==1, READY=0] ─[copy u -> v]─ [DONE=1] ─[work]─▶

   No host thread is in the loop once the call has returned, and a CUDA graph that captured a call
   replays it (every rank captures its part and launches its graph as often as the others).
   A call's CUDA work (the handshakes and copies for these buffers and streams) is cached; from the
   ``graph_after``-th call with the same buffers on, it is captured once into a CUDA graph and each
   call launches that graph: one driver call instead of one per copy, handshake and event (a
   ``cudaMemcpyAsync`` alone costs about 7 us of host time on the H200 machine, a graph launch of a
   whole call about as much). The call's trailing batch of stream memory operations (the DONE
   handshake, an eager slot's FULL or EMPTY write) is captured in the graph too; with
   ``graph_tail_direct`` (HOCCL_GRAPH_TAIL_DIRECT=1) the graph ends at the copies and that batch is
   launched after it. A micro-benchmark priced a memop node after a copy node at ~3 us per launch,
   but the host time of whole calls with the stream held was lower with the batch inside in 11 of 12
   comparisons on 2x H200 (2026-11-30, four hosts), so inside is the default.
5. A watchdog thread (it sleeps, and checks every 100 ms that the partner processes live) notices a
   partner that died while this rank's streams wait on it: it writes the flags the dead rank would
   have written so the streams drain instead of waiting forever, and every later call (and
   ``synchronize``) raises :class:`TransportError` naming the dead rank.
6. ``rate_gbps=`` (per call, or ``comm.rate_gbps`` for all) caps the rate of this rank's DMA queue:
   see :mod:`hoccl_runtime.pacing`. ``duration_s=`` (per call) spreads the call over that long instead:
   the rate is this rank's bytes to its peers over the duration (background traffic only has to
   finish inside the compute window beside it).
7. Small send/recv (up to ``eager_bytes``, 4 MiB unless HOCCL_EAGER_BYTES says otherwise, 0 with
   ``local_copies="peer"``; 0 turns it off) take an eager path instead: the sender's copy lands in one
   of ``EAGER_SLOTS`` staging slots that the receiver allocated for it once (exchanged through the store
   at the pair's first eager message), and the receiver's stream copies it out, with one flag per slot
   (FULL: the sender's stream waits for 0, copies, writes 1; the receiver's waits for 1, copies out, writes 0). Neither
   host waits for the other, no IPC handle moves per call, and on the GPUs the sender runs up to
   ``EAGER_SLOTS`` messages ahead: the rendezvous's two cross-GPU flag round trips per message
   (about 8 us each on the H200 pair, examples/handshake_latency.py) leave the critical path.
   It costs a second, local copy on the receiver. Sizes are checked through a small ring in the
   mailbox when the sender's entry is there in time (a mismatch raises PlanError on the receiver, at
   the call or at a later one or synchronize()).
   ``eager_collectives`` (HOCCL_EAGER_COLLECTIVES=1; off by default) puts small collectives on the
   same path. Off by default because, measured on the 2x H200, a collective that the user captured
   into a CUDA graph reuses one slot on every replay and waits a flag round trip per call (2 MiB
   AllGather 64 vs 116 GB/s), and a mismatched collective is then caught on one rank only.
8. Registered windows (:meth:`Communicator.register_window`, collective): a call whose buffer lies in one
   skips step 2's exchange. Its partners' buffers sit at the same offset of their windows (mapped once,
   at registration); the call writes its mailbox entry and does not wait for theirs, which it checks
   when they are there (a mismatch raises PlanError on both ranks; an entry already replaced by a later
   one, 4 calls on, goes unchecked). The host waits only where its slot still holds its own rendezvous
   entry that the partner has not read.
9. A communicator's calls run one after the other on the GPU whatever their streams (they share the
   flags of step 4 and the eager slots): a call on another stream than the previous one waits for the
   previous one's end event, as NCCL orders a communicator's calls.
10. Under CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron's setting) every stream of the process shares one hardware
   queue, where step 3's same-GPU copy (a kernel) waits behind compute issued before it; copy-engine copies
   and stream memory operations do not (measured: in-place AllGathers delivered 365 GB/s beside a GEMM loop
   issued before or after them, NCCL 17 GB/s or nothing). The first call that makes such a copy warns once
   (RuntimeWarning) with the in-place form and ``local_copies="peer"``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import warnings
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hoccl_compiler.schema import Plan

from . import _cuda, pacing  # no CUDA at import: each loads cupy / cuda-bindings when first used
from ._shm import SharedSegment
from ._splits import alltoallv_pieces
from ._store import announce_failure
from .errors import BufferError, HocclError, HocclTimeoutError, PlanError, TransportError
from .executor import _capturing, check_buffer
from .flags import MemOps
from .interop import DeviceBuffer, as_buffer, as_stream, window_buffer
from .ipc import IpcMappings
from .launch import (
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
from .mailbox import HANDLE, HANDLE_BYTES, SLOT, WINDOW
from .program import (
    Bounce,
    Copy,
    Program,
    bounce_moves,
    bounce_route,
    dma_queues,
    local_copies_setting,
    lower,
    own_copies,
)
from .settings import env_flag, env_float, env_int

__all__ = ["Communicator", "Window"]

MAX_QUEUES = 4          # DMA queues per GPU a plan may use with this communicator
_PAIR_BYTES = 2048      # mailbox region per directed rank pair
_SLOTS = 4              # mailbox slots per directed pair (a batch may hold 4 calls with one partner)
_HANDLE = HANDLE_BYTES  # cudaIpcMemHandle_t
_NOT_READY = 600        # cudaErrorNotReady
EAGER_SLOTS = 4         # staging slots per directed pair for eager send/recv
_SLOT_WORDS = SLOT.words  # a mailbox slot (hoccl_runtime.mailbox: its named fields)
# the fields the hot path reads and writes, as module constants (a global is cheaper to read than an attribute)
_SEQ, _DIGEST, _OUT_KIND, _OUT_OFFSET, _WINDOW_INDEX, _IN_KIND, _IN_OFFSET = (
    SLOT.seq, SLOT.digest, SLOT.out_kind, SLOT.out_offset, SLOT.window, SLOT.in_kind, SLOT.in_offset)
_OUT_HANDLE, _IN_HANDLE = 8 * SLOT.out_handle, 8 * SLOT.in_handle  # byte offsets of the handles in a slot
_RING = 8 + _SLOTS * _SLOT_WORDS  # mailbox word of a pair region where the eager size ring starts ([seq, digest] x 4)
assert 8 * (_RING + 2 * EAGER_SLOTS) <= _PAIR_BYTES


class _SharedHost:
    """Host memory shared by the node's processes and registered with CUDA: flags and mailboxes."""

    def __init__(self, store: Any, rank: int, world: int, timeout_s: float):
        self.world = world
        self.flag_count = (2 + EAGER_SLOTS) * world * world  # READY, DONE, and the eager slots' FULL
        flag_bytes = -(-4 * self.flag_count // 4096) * 4096
        mail_bytes = world * world * _PAIR_BYTES
        self.segment = seg = SharedSegment(store, rank == 0, flag_bytes + mail_bytes + 8 * world, key="shm-name",
                                            world=world, timeout_s=timeout_s)
        self.dev_ptr = seg.dev_ptr
        self.flags = np.frombuffer(seg.shm.buf, dtype=np.int32, count=self.flag_count)
        self.mail = np.frombuffer(seg.shm.buf, dtype=np.uint8, count=mail_bytes, offset=flag_bytes)
        # the hot path reads and writes the mailbox through memoryviews: Python ints, no NumPy scalars
        self.words, self.mail_bytes = memoryview(self.mail).cast("q"), memoryview(self.mail)
        self.pids = np.frombuffer(seg.shm.buf, dtype=np.int64, count=world, offset=flag_bytes + mail_bytes)
        self.pids[rank] = os.getpid()  # partners' watchdogs tell a dead process from a slow one
        try:
            seg.join(store, "attached", world, timeout_s)
        except BaseException:
            self.close()
            raise

    def flag_address(self, index: int) -> int:
        return self.dev_ptr + 4 * index

    def close(self) -> None:
        views = (self.words, self.mail_bytes)
        self.flags = self.mail = self.pids = None  # release NumPy views before closing the mapping
        self.segment.close(*views)


class _Flag:
    """A flag of the shared segment, in the shape MemOps expects."""

    __slots__ = ("address",)

    def __init__(self, address: int):
        self.address = address


class _Launch:
    """A cached call: ``run`` issues its work (one by one, or as a CUDA graph once promoted)."""

    __slots__ = ("run", "hits", "exe", "feedback")

    def __init__(self, run: Any, feedback: pacing.Feedback | None = None):
        self.run, self.hits, self.exe, self.feedback = run, 0, None, feedback


class Window:
    """A buffer registered on every rank of a communicator (:meth:`Communicator.register_window`): calls on
    buffers inside it skip the per-call address exchange. ``close()`` (every rank, like registering)
    waits for this rank's calls and unmaps the peers' windows; the communicator's ``close()`` does it too."""

    def __init__(self, comm: Communicator, index: int, ptr: int, nbytes: int, peers: dict[int, int],
                 handles: tuple[bytes, ...], tensor: Any = None):
        self.comm, self.index, self.ptr, self.nbytes = comm, index, ptr, nbytes
        self.peers = peers  # peer rank -> the local address of its window
        self.handles = handles
        # the registered object itself, held until the window closes: its memory cannot go back to an
        # allocator (and to other tensors) while the peers may still write into it
        self.tensor = tensor
        self.closed = False

    def close(self) -> None:
        self.comm._deregister(self)
        self.tensor = None

    def __enter__(self) -> Window:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.peers)} peers mapped"
        return f"Window({self.index}, rank {self.comm.rank}, {self.ptr:#x}, {self.nbytes} bytes, {state})"


@dataclass(frozen=True)
class _PlanState:
    plan: Plan
    uid: str  # what the caches key it by: the compiler's plan id for this communicator's own plans, the content
    # hash for a plan from outside (hoccl_runtime._trust: a file's claimed id proves nothing)
    program: Program
    digest: int
    partners: tuple[int, ...]
    resident: tuple[int, int]  # in place: (offset, bytes) of this rank's input inside its output
    eager: _EagerLayout | None = None  # small enough for the staging slots: the eager path
    paced_bytes: int = 0  # what a rate cap paces on this rank: its sends to peers (the main DMA queue's copies)
    # where in my output my input may overlap it: an in-place plan's resident block, or where an out-of-place
    # plan's local copies would move it (_own_block); None: nowhere
    own_block: int | None = None
    bounce: tuple[Bounce, ...] = ()  # local_copies="peer": my own block through peers' outputs (bounce_route)
    helper: int | None = None  # local_copies="peer", no bounce route: the rank that copies my own block
    helped: int | None = None  # ... and the rank whose own block I copy (gets its input's handle)
    helped_copies: tuple[Copy, ...] = ()  # that rank's local copies (offsets in its input and output)
    # calls may take the registered-window path: not when some rank's own block is copied by a helper (its input
    # address moves with each call), the same on every rank
    windows: bool = True


@dataclass(frozen=True)
class _EagerLayout:
    """A plan's copies for one rank on the eager path, as offsets: each peer's pieces packed in order
    into one staging slot (sender and receiver enumerate the same copies in the same order)."""

    local: tuple[tuple[int, int, int], ...]                     # (dst offset, src offset, bytes) in my buffers
    sends: dict[int, tuple[tuple[int, int, int], ...]]          # peer -> (stage offset, src offset, bytes)
    recvs: dict[int, tuple[tuple[int, int, int], ...]]          # peer -> (dst offset, stage offset, bytes)


def _pair_flag(world: int, phase: int, a: int, b: int) -> int:
    """Index in the shared flags of READY[a][b] (phase 0) or DONE[a][b] (phase 1) (Communicator._flag)."""
    return (phase * world + a) * world + b


def _slot_flag_index(world: int, a: int, b: int, j: int) -> int:
    """Index in the shared flags of FULL of eager slot j for messages a -> b (after READY and DONE)."""
    return 2 * world * world + (a * world + b) * EAGER_SLOTS + j


def _own_block(prog: Program, me: int, input_bytes: int) -> int | None:
    """Where in its output rank ``me``'s whole input may already sit, so that the call runs in place (NCCL's
    and torch's in-place AllGather: input = output[rank * n:(rank + 1) * n]): the offset by which the
    rank's local copies move its input, when they move all of it by one offset and no other rank's copy
    writes into that block; else None. In place, those local copies have nothing to do and are dropped:
    a same-GPU copy is a kernel of the CUDA driver on SMs (examples/sm_free_copies.py)."""
    local = sorted((c.src_offset, c.nbytes, c.dst_offset - c.src_offset) for c in own_copies(prog, me))
    if not input_bytes or not local or len({shift for _, _, shift in local}) != 1:
        return None
    at = 0
    for src, n, _ in local:  # one block: the copies tile [0, input_bytes) of the input
        if src != at:
            return None
        at += n
    shift = local[0][2]
    if at != input_bytes:
        return None
    for cs in prog.copies.values():
        for c in cs:
            overlaps = c.dst_offset < shift + input_bytes and shift < c.dst_offset + c.nbytes
            if c.dst_rank == me != c.src_rank and overlaps:
                return None
    return shift


def _check_in_place(me: int, inp: DeviceBuffer, out: DeviceBuffer, own: int | None, kind: str) -> None:
    """An input that overlaps its output must be exactly the output's own block: where an out-of-place plan
    may run in place (:func:`_own_block`), or where an in-place plan keeps it (its resident block)."""
    if own is not None and inp.ptr - out.ptr == own:
        return
    where = (f"in place, pass the output's bytes [{own}, {own + inp.nbytes}) as the input (for allgather: "
             "output[rank * n:(rank + 1) * n]), or separate buffers" if own is not None else
             f"{kind} has no in-place form with this input: pass separate buffers")
    raise BufferError(f"rank {me}: the input [{inp.ptr:#x}, +{inp.nbytes}) overlaps the output [{out.ptr:#x}, "
                      f"+{out.nbytes}) at offset {inp.ptr - out.ptr}; {where}")


class Communicator:
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
            stop = getattr(self, "_stop", None)
            if stop is not None:
                stop.set()
            shared = getattr(self, "_shared", None)
            if shared is not None:
                with contextlib.suppress(Exception):
                    shared.close()
            raise

    def _setup(self, rank: int, world: int, device: int, store: Any, *, timeout_s: float, ipc_cache: int,
               dma_queues: int | None, local_copies: str | None) -> None:
        import cupy

        from ._cuda import cupy_runtime

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
        # default: back to back alone it held 40 GB/s of 40, but beside a GEMM or a memory-bound loop
        # (2x H200, 2026-11-30) calls asked for 100 GB/s delivered 108 and 134, over the cap
        self.pace_feedback = env_flag("HOCCL_PACE_FEEDBACK", False)
        self.rank, self.world, self.device, self.timeout_s = rank, world, device, timeout_s
        self._lock = threading.Lock()
        self._closed = False
        rt = cupy_runtime()
        if device >= rt.getDeviceCount():
            n = rt.getDeviceCount()
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
        self._failure: HocclError | None = None
        self.watch_interval_s = 0.1
        self._stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch, name=f"hoccl-watchdog-{rank}", daemon=True)
        self._watchdog.start()
        from .plans import machine_topology

        self.topology = machine_topology(nodes=1, gpus_per_node=world, device=device, dma_queues=dma_queues)

    def _mailbox_state(self, rank: int, world: int) -> None:
        """The per-call bookkeeping of the mailbox, the eager path and the windows, empty (also what the CPU
        harnesses of tests/ and examples/profile_python.py start from)."""
        self._stage_in: dict[int, int] = {}   # peer -> my staging for its eager messages (cudaMalloc)
        self._stage_out: dict[int, int] = {}  # peer -> its staging for mine, mapped here
        # eager receives whose sender's size entry was not there yet: (peer, seq, ring word, digest, call)
        self._unverified: list[tuple[int, int, int, int, Any]] = []  # ..., CollectiveSpec
        from .plans import PlanCache

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
    # Each call names its collective by a small tuple; the CollectiveSpec (pydantic) is built only on a
    # cache miss, to keep it off the per-call path.
    def all_gather_into_tensor(self, output: Any, input: Any, stream: Any = None, *,
                               rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        out = as_buffer(output, "output")
        self._run(("allgather", out.nbytes), input, out, stream, rate_gbps, duration_s)

    def all_to_all_single(self, output: Any, input: Any, stream: Any = None, *,
                          rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        out = as_buffer(output, "output")
        self._run(("alltoall", out.nbytes), input, out, stream, rate_gbps, duration_s)

    def broadcast(self, tensor: Any, root: int, stream: Any = None, *, rate_gbps: float | None = None,
                  duration_s: float | None = None) -> None:
        buf = as_buffer(tensor, "tensor")
        self._run(("broadcast", buf.nbytes, root), None, buf, stream, rate_gbps, duration_s)

    def scatter(self, output: Any, input: Any = None, root: int = 0, stream: Any = None, *,
                rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        out = as_buffer(output, "output")
        self._run(("scatter", out.nbytes * self.world, root), input if self.rank == root else None, out, stream,
                  rate_gbps, duration_s)

    def gather(self, input: Any, output: Any = None, root: int = 0, stream: Any = None, *,
               rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        inp = as_buffer(input, "input")
        self._run(("gather", inp.nbytes * self.world, root), inp, output if self.rank == root else None, stream,
                  rate_gbps, duration_s)

    def send(self, tensor: Any, dst: int, stream: Any = None, *, rate_gbps: float | None = None,
             duration_s: float | None = None) -> None:
        buf = as_buffer(tensor, "tensor")
        self._check_peer(dst, "dst")
        self._run(("sendrecv", self.rank, dst, buf.nbytes), buf, None, stream, rate_gbps, duration_s)

    def recv(self, tensor: Any, src: int, stream: Any = None) -> None:
        buf = as_buffer(tensor, "tensor")
        self._check_peer(src, "src")
        self._run(("sendrecv", src, self.rank, buf.nbytes), None, buf, stream)

    def all_to_all_v(self, output: Any, input: Any, output_split_bytes: Sequence[int],
                     input_split_bytes: Sequence[int], stream: Any = None) -> None:
        """All-to-Allv (MoE token exchange): block j of ``input`` (``input_split_bytes[j]`` bytes, blocks back to
        back) goes to rank j and lands as block ``rank`` of its ``output`` (whose blocks are
        ``output_split_bytes``). Runs as one batch of pairwise copies on copy engines (each a one-pair plan,
        compiled once per size; see :mod:`hoccl_runtime._splits`) plus this rank's own block, a same-GPU copy."""
        pieces = alltoallv_pieces(self.rank, self.world, as_buffer(input, "input"), as_buffer(output, "output"),
                                  input_split_bytes, output_split_bytes)
        items = [(("sendrecv", self.rank, j, b.nbytes), b, None) for j, b in pieces.sends]
        items += [(("sendrecv", j, self.rank, b.nbytes), None, b) for j, b in pieces.recvs]
        items.sort(key=lambda it: it[0][1:])  # both ends of a pair publish in the same order
        if items:
            try:
                self._run_many(items, stream)
            except Exception as exc:
                raise _cuda.cuda_error(exc, f"rank {self.rank}: all_to_all_v") from exc
        if pieces.local is not None:
            src, dst = pieces.local
            with _cuda.on_device(self.device):
                _cuda.copy_async(dst.ptr, src.ptr, dst.nbytes, as_stream(stream))

    @staticmethod
    def _spec(key: tuple) -> Any:
        """The CollectiveSpec of a call key (:func:`hoccl_runtime.plans.call_spec`)."""
        from .plans import call_spec

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
            from ._trust import trusted

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
            from .plans import PLAN_CACHE_SIZE, compile_call

            # one chunk per transfer: intra-node copies need no pipelining, and fewer calls mean less host time
            state = self._make_state(compile_call(self.topology, what, 1 << 40))
            if len(self._plans) >= PLAN_CACHE_SIZE:  # forget the oldest (compiled again, ~1 ms, if it returns)
                del self._plans[next(iter(self._plans))]
            self._plans[what] = state
        return state

    def _make_state(self, plan: Plan, uid: str | None = None) -> _PlanState:
        prog = lower(plan)
        if any(plan.queues.kind[q] == "dma" and plan.queues.index[q] >= MAX_QUEUES for q in prog.copies):
            raise PlanError(f"plan {plan.plan_id} uses more than {MAX_QUEUES} DMA queues per GPU")
        fl, me, w = plan.flows, self.rank, self.world
        partners = {d for s, d in zip(fl.src, fl.dst, strict=True) if s == me and d != me} | \
                   {s for s, d in zip(fl.src, fl.dst, strict=True) if d == me and s != me}
        from .plans import resident

        res_off, res_bytes = resident(plan)
        eager = self._eager_layout(plan, prog)
        helper = helped = None
        windows = True
        bounce: tuple[Bounce, ...] = ()
        helped_copies: tuple[Copy, ...] = ()
        kinds = plan.queues.kind
        main = {r: (dma[0] if (dma := dma_queues(prog, kinds, r)) else None) for r in range(w)}  # first DMA queues
        if self.local_copies == "peer" and eager is None and w > 1:  # (an eager call's own block stays here)
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
        digest = zlib.crc32(f"{uid}/{self.local_copies}".encode())
        state = _PlanState(plan, uid, prog, digest, tuple(sorted(partners)),
                           (int(res_off[me]), int(res_bytes[me])), eager, paced,
                           int(res_off[me]) if res_bytes[me] else _own_block(prog, me, int(plan.ranks.input_bytes[me])),
                           bounce, helper, helped, helped_copies, windows)
        return state

    def _eager_layout(self, plan: Plan, prog: Program) -> _EagerLayout | None:
        """Send/recv (and, with ``eager_collectives``, any plan) whose bytes per directed pair fit a slot."""
        if plan.collective.kind != "sendrecv" and not self.eager_collectives:
            return None
        me, local, sends, recvs = self.rank, [], {}, {}
        fill: dict[tuple[int, int], int] = {}
        for q in sorted(prog.copies):
            for c in prog.copies[q]:
                if c.src_rank == c.dst_rank == me:
                    local.append((c.dst_offset, c.src_offset, c.nbytes))
                elif me in (c.src_rank, c.dst_rank):
                    at = fill.get((c.src_rank, c.dst_rank), 0)
                    fill[(c.src_rank, c.dst_rank)] = at + c.nbytes
                    if c.src_rank == me:
                        sends.setdefault(c.dst_rank, []).append((at, c.src_offset, c.nbytes))
                    else:
                        recvs.setdefault(c.src_rank, []).append((c.dst_offset, at, c.nbytes))
        if not fill or max(fill.values()) > self.eager_bytes:
            return None
        return _EagerLayout(tuple(local), {p: tuple(v) for p, v in sends.items()},
                            {p: tuple(v) for p, v in recvs.items()})

    def _run(self, what: tuple | Plan, input: Any, output: Any, stream: Any, rate_gbps: float | None = None,
             duration_s: float | None = None) -> None:
        try:  # free when nothing is raised: CuPy's own CUDA errors leave as CudaError naming the call
            self._run_many([(what, input, output)], stream, rate_gbps, duration_s)
        except Exception as exc:
            raise _cuda.cuda_error(exc, f"rank {self.rank}: {what[0] if isinstance(what, tuple) else 'execute'}") \
                from exc

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
                items.append((("sendrecv", self.rank, peer, buf.nbytes), buf, None))
            else:
                items.append((("sendrecv", peer, self.rank, buf.nbytes), None, buf))
        # both ends of a pair must publish in the same order: sort by (src, dst, bytes)
        items.sort(key=lambda it: it[0][1:])
        per_peer: dict[int, int] = {}
        for key, _, _ in items:
            peer = key[2] if key[1] == self.rank else key[1]
            per_peer[peer] = per_peer.get(peer, 0) + 1
            if per_peer[peer] > _SLOTS:
                raise HocclError(f"batch has more than {_SLOTS} ops with rank {peer}; split it into several batches")
        try:
            self._run_many(items, stream)
        except Exception as exc:
            raise _cuda.cuda_error(exc, f"rank {self.rank}: batch_isend_irecv") from exc

    def _run_many(self, items: list[tuple[Any, Any, Any]], stream: Any, rate_gbps: float | None = None,
                  duration_s: float | None = None) -> None:
        if self._closed:
            raise HocclError("this communicator is closed; create a new one with hoccl_runtime.init()")
        self._raise_if_failed()
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
        rt = _cuda.cupy_runtime()
        if rt.streamIsCapturing(s):
            return
        prev, self._last_stream = self._last_stream, s
        ev = self._events.get(("end", prev)) if prev is not None else None
        if ev is not None:
            with contextlib.suppress(Exception):  # last recorded inside a capture: that graph is the user's to order
                rt.streamWaitEvent(s, ev, 0)

    def _launch(self, state: _PlanState, inp: DeviceBuffer | None, out: DeviceBuffer | None,
                remote: dict[int, int], helped_in: int | None, s: int, rate: float | None) -> None:
        key = self._launch_key(state, inp, out, remote, helped_in, s, rate)
        self._cached(key, lambda stream, r: self._build(state, inp, out, remote, stream, r, helped_in), s, rate)

    def _launch_key(self, state: _PlanState, inp: DeviceBuffer | None, out: DeviceBuffer | None,
                    remote: dict[int, int], helped_in: int | None, s: int, rate: float | None) -> tuple:
        """What a call's cached launch list depends on (the launch cache's key)."""
        return (state.uid, s, inp.ptr if inp else 0, out.ptr if out else 0,
                tuple(remote.items()) if len(remote) < 2 else tuple(sorted(remote.items())), helped_in,
                rate and (rate, self.pace_period_us))

    def _cached(self, key: tuple, build: Any, s: int, rate: float | None) -> None:
        """Run the call's work for ``key``: ``build(stream, rate)`` gives its launch list, compiled on first
        use; at the ``graph_after``-th use of an unpaced call it is captured into a CUDA graph."""
        if rate:
            self._cached_paced(key, build, s, rate)
            return
        entry = self._launches.hit(key)
        if entry is None:
            entry = self._launches.get(key, lambda: _Launch(compile_launch(self._launch_list(build(s, rate), s))))
        entry.hits += 1
        if entry.hits == self.graph_after:
            self._promote(entry, lambda stream: build(stream, None), s)
        entry.run()

    def _cached_paced(self, key: tuple, build: Any, s: int, rate: float) -> None:
        """A paced call: never a graph; its sleeps follow its entry's Feedback scale, which with
        ``pace_feedback`` on learns from the calls' lengths (timed outside stream capture only)."""
        def make() -> _Launch:
            self._building = pacing.Feedback(self._pacer_for_calls())  # _paced links the sleeps to it
            try:
                return _Launch(compile_launch(self._launch_list(build(s, rate), s)), self._building)
            finally:
                self._building = None

        entry = self._launches.get(key, make)
        entry.hits += 1
        mark = entry.feedback.begin(s) if self.pace_feedback and not _capturing((s,)) else None
        entry.run()
        if mark is not None:
            entry.feedback.end(mark, s)

    def _pacer_for_calls(self) -> pacing.Pacer:
        if self._pacer is None:
            self._pacer = pacing.Pacer(self.device)
        return self._pacer

    # --- the eager path (module docstring, item 7) ----------------------------------------------------------
    def _eager_enter(self, state: _PlanState) -> dict[int, int]:
        """The call's sequence number with each partner and so its staging slot ({partner: slot}); writes
        my size entries into the receivers' rings and checks the senders' entries in mine. Acknowledges
        each partner's mailbox entries up to this call (an eager call has none, earlier ones were all
        read in order), so rendezvous calls that follow are not held up by the mailbox's flow control."""
        e, me, words = state.eager, self.rank, self._shared.words
        what = state.plan.collective  # described only in an error
        slots = {}
        for p in state.partners:
            if p not in self._stage_out:
                self._eager_setup(p)
            seq = self._seq[p] = self._seq[p] + 1
            if self._win_pending.get(p) or self._rdv_open[p]:  # not past an entry of p's still to be read
                self._ack(p)
            else:
                words[self._region_in[p]] = seq
            slots[p] = seq % EAGER_SLOTS
            if p in e.sends:
                ring = self._pair(me, p) // 8 + _RING + 2 * slots[p]
                words[ring + 1] = state.digest
                words[ring] = seq
            if p in e.recvs:
                ring = self._pair(p, me) // 8 + _RING + 2 * slots[p]
                if not self._check_ring(p, seq, ring, state.digest, what):
                    self._unverified.append((p, seq, ring, state.digest, what))
        return slots

    def _eager_launch(self, state: _PlanState, inp: DeviceBuffer | None, out: DeviceBuffer | None,
                      slots: dict[int, int], s: int, rate: float | None) -> None:
        """My pieces for each peer go to my slot in its staging, the peers' pieces for me are copied out of
        mine; no host waits."""
        e = state.eager
        key = ("eager", state.uid, s, inp.ptr if inp else 0, out.ptr if out else 0,
               tuple(slots.items()), rate and (rate, self.pace_period_us))
        self._cached(key, lambda stream, r: self._eager_ops(e, inp, out, slots, stream, r), s, rate)

    def _eager_ops(self, e: _EagerLayout, inp: DeviceBuffer | None, out: DeviceBuffer | None,
                   slots: dict[int, int], s: int, rate: float | None = None) -> list[Op]:
        """All on the caller's stream: local copies, [wait my slots empty] my pieces into the peers' slots
        [mark them full; wait for theirs in mine] copies out of mine [mark mine empty]."""
        me, size = self.rank, self.eager_bytes
        ops: list[Op] = [Memcpy(out.ptr + d, inp.ptr + src, n, s) for d, src, n in e.local
                            if out.ptr + d != inp.ptr + src]  # in place: already there
        empty, signal, release = MemOps(), MemOps(), MemOps()
        sends: list[Op] = []
        for p, pieces in e.sends.items():
            flag = self._slot_flag(me, p, slots[p])
            empty.wait_eq(flag, 0)
            signal.write(flag, 1)
            base = self._stage_out[p] + slots[p] * size
            sends += [Memcpy(base + at, inp.ptr + src, n, s) for at, src, n in pieces]
        for p in e.recvs:
            flag = self._slot_flag(p, me, slots[p])
            signal.wait_eq(flag, 1)
            release.write(flag, 0)
        if empty.ops:
            ops.append(Memops(empty, s))
        ops += self._paced(sends, rate, s) if rate and sends else sends
        ops.append(Memops(signal, s))
        for p, pieces in e.recvs.items():
            base = self._stage_in[p] + slots[p] * size
            ops += [Memcpy(out.ptr + d, base + at, n, s) for d, at, n in pieces]
        if release.ops:
            ops.append(Memops(release, s))
        return ops

    def _slot_flag(self, a: int, b: int, j: int) -> _Flag:
        """FULL of eager slot j for messages a -> b."""
        return _Flag(self._shared.flag_address(_slot_flag_index(self.world, a, b, j)))

    def _eager_setup(self, peer: int) -> None:
        """Once per pair, at its first eager message (either direction): allocate my staging for the
        peer's messages and publish its IPC handle, then map the peer's staging for mine. Both sides
        publish before they wait, so two ranks that first send to each other do not deadlock."""
        with _cuda.on_device(self.device) as rt:
            if peer not in self._stage_in:
                ptr = self._stage_in[peer] = int(rt.malloc(EAGER_SLOTS * self.eager_bytes))
                self._store.set(f"eager/{peer}->{self.rank}", bytes(rt.ipcGetMemHandle(ptr)) +
                                self.eager_bytes.to_bytes(8, "little"))
            got = self._store_get(f"eager/{self.rank}->{peer}", peer)
            handle, theirs = got[:_HANDLE], int.from_bytes(got[_HANDLE:_HANDLE + 8], "little")
            if theirs != self.eager_bytes:
                raise HocclError(f"rank {peer} stages eager messages of up to {theirs} bytes, rank {self.rank} of "
                                 f"{self.eager_bytes}: set HOCCL_EAGER_BYTES alike on every rank")
            self._stage_out[peer] = int(rt.ipcOpenMemHandle(handle))

    def _store_get(self, key: str, peer: int, what: str = "set up its eager staging") -> bytes:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                if self._store.check([key]):
                    return bytes(self._store.get(key))
            except Exception as exc:  # noqa: BLE001 - a store that lost its server
                raise TransportError(f"rank {self.rank}: the bootstrap store failed while waiting for rank {peer} "
                                     f"({exc})") from None
            self._raise_if_failed()
            if time.monotonic() > deadline:
                raise HocclTimeoutError(f"rank {peer} did not {what} within {self.timeout_s:.0f} s (rank {self.rank} "
                                        "waits for it); is it alive, issuing the same calls, and set up alike "
                                        "(HOCCL_EAGER_BYTES, HOCCL_LOCAL_COPIES)?")
            time.sleep(1e-3)

    def _check_ring(self, peer: int, seq: int, ring: int, digest: int, what: Any) -> bool:
        """True when the sender's size entry for ``seq`` was read (or was overwritten by a later one:
        it can no longer be checked); raises PlanError if it names another size."""
        words = self._shared.words
        first = words[ring]
        if first < seq:
            return False
        theirs = words[ring + 1]
        if first == seq and words[ring] == seq and theirs != digest:
            raise PlanError(f"rank {peer} sent rank {self.rank} another size or collective than the "
                            f"{what.describe()} rank {self.rank} receives (call {seq} between them): every rank must "
                            "issue the same calls with matching sizes, in the same order")
        return True

    def _verify_eager(self) -> None:
        """Check the deferred receives whose size entries are there now; a mismatch is raised once."""
        pending, self._unverified = self._unverified, []
        for i, entry in enumerate(pending):
            try:
                if not self._check_ring(*entry):
                    self._unverified.append(entry)
            except PlanError:
                self._unverified += pending[i + 1:]
                raise

    def _promote(self, entry: _Launch, build: Any, s: int) -> None:
        """Capture the call's work once into a CUDA graph (on a private stream: the caller's may be the
        legacy default stream, which cannot capture) and make ``entry`` launch it on ``s``. While the
        caller's own stream is being captured (the user building a graph), the call still issues its
        work one by one, so that it is captured into the user's graph."""
        rt = _cuda.cupy_runtime()
        if rt.streamIsCapturing(s):
            return
        with _cuda.on_device(self.device):
            if self._capture is None:
                self._capture = self._cupy.cuda.Stream(non_blocking=True)
            cap = int(self._capture.ptr)
            ops = build(cap)
            tail: list[Op] = []
            while self.graph_tail_direct and len(ops) > 1 and type(ops[-1]) is Memops:
                tail.insert(0, Memops(ops.pop().batch, s))
            rt.streamBeginCapture(cap, 1)  # cudaStreamCaptureModeThreadLocal
            try:
                replay(ops)
            finally:
                graph = rt.streamEndCapture(cap)
            try:
                exe = rt.graphInstantiate(graph)
            finally:
                rt.graphDestroy(graph)
        entry.exe = exe
        ops = self._launch_list([GraphLaunch(exe, s), *tail], s)
        eager, launch = entry.run, compile_launch(ops)
        capturing = rt.streamIsCapturing

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
            graph_launch, record, get_device = rt.graphLaunch, rt.eventRecord, rt.getDevice

            def run_graph() -> None:
                if capturing(s):
                    eager()
                elif get_device() == device:
                    graph_launch(exe, s)
                    record(ev, s)
                else:
                    launch()
            entry.run = run_graph

    def _drop_launch(self, entry: _Launch) -> None:
        if entry.feedback is not None:
            with contextlib.suppress(Exception):  # closing anyway
                entry.feedback.close()
        if entry.exe is not None:
            from ._cuda import cupy_runtime

            with contextlib.suppress(Exception):  # closing anyway; a launch in flight is freed when it ends
                cupy_runtime().graphExecDestroy(entry.exe)
            entry.exe = None

    def _launch_list(self, ops: list[Op], user: int) -> list[Op]:
        """The call's CUDA work, then the end-of-call event that synchronize() and close() look at (recorded
        by the caller, not captured in a call's graph: an event last recorded by a capture reads as done to
        cudaEventQuery, and synchronize() returned while the graph's copies ran, 2x H200, 2026-11-30).
        (Capturing the list into a CUDA graph, one cudaGraphLaunch per call, was measured slower on the
        2x H200: 28 vs 21 us of host time for a 2 MiB send, so calls replay the list itself.)"""
        return squeeze_devices([Device(self.device), *ops, Record(self._event(("end", user)), user)])

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

    # mailbox: per directed pair (a -> b) a region of the shared memory; a writes its slots, b writes the ack
    def _pair(self, a: int, b: int) -> int:
        return (a * self.world + b) * _PAIR_BYTES

    def _publish(self, state: _PlanState, out: DeviceBuffer | None,
                 inp: DeviceBuffer | None = None) -> dict[int, int]:
        """Write my output's IPC handle + offset to each partner's mailbox slot (and my input's to the rank
        that copies my own block, local_copies="peer"); returns {partner: seq}."""
        if not state.partners:
            return {}
        if out is not None and out.nbytes:
            handle, offset = self._export(out)
            kind = HANDLE
        else:
            handle, offset, kind = b"", 0, 0
        # mailbox words (int64): a pair region holds the ack at word 0 and _SLOTS slots (hoccl_runtime.mailbox)
        # from word 8 on
        words, mail = self._shared.words, self._shared.mail_bytes
        peer_local = self.local_copies == "peer"
        seqs = {}
        for p in state.partners:
            seq = self._seq[p] + 1
            slot = self._claim_slot(p, seq, rendezvous=True)
            words[slot + _DIGEST] = state.digest
            words[slot + _OUT_OFFSET] = offset
            words[slot + _OUT_KIND] = kind
            if kind:
                mail[8 * slot + _OUT_HANDLE:8 * slot + _OUT_HANDLE + _HANDLE] = handle
            if peer_local:  # (otherwise the input fields stay 0)
                words[slot + _IN_KIND] = 0
                if p == state.helper and inp is not None and inp.nbytes:
                    in_handle, words[slot + _IN_OFFSET] = self._export(inp, "input")
                    mail[8 * slot + _IN_HANDLE:8 * slot + _IN_HANDLE + _HANDLE] = in_handle
                    words[slot + _IN_KIND] = HANDLE
            words[slot + _SEQ] = seq  # last: the partner reads the payload after seeing seq
            self._seq[p] = seq
            self._rdv_open[p].append(seq)
            seqs[p] = seq
        return seqs

    def _claim_slot(self, p: int, seq: int, rendezvous: bool) -> int:
        """The mailbox word of my slot for call ``seq`` with p, emptied for a new entry (written 0, so a partner
        reading the old one sees it go: _check_windows). The slot's old entry may go unread if it was a window
        entry; my rendezvous entry there (an address) must have been read first: wait for p's acknowledgement."""
        words, region, kinds = self._shared.words, self._region_out[p], self._slot_rdv[p]
        old = kinds[seq % _SLOTS]
        if old and words[region] < old:
            self._wait(lambda q=old: self._check_windows() or words[region] >= q, p, "acknowledge")
        kinds[seq % _SLOTS] = seq if rendezvous else 0
        slot = region + 8 + (seq % _SLOTS) * _SLOT_WORDS
        words[slot] = 0
        return slot

    def _collect(self, state: _PlanState, seqs: dict[int, int]) -> tuple[dict[int, int], int | None]:
        """Wait for each partner's entry of the same call and map its output: ({partner: output address},
        the input address of the rank whose own block I copy, or None)."""
        words, mail = self._shared.words, self._shared.mail_bytes
        remote: dict[int, int] = {}
        helped_in = None
        for p, seq in seqs.items():
            region = self._region_in[p]
            slot = region + 8 + (seq % _SLOTS) * _SLOT_WORDS
            if words[slot] < seq:  # (checking window entries meanwhile: p may wait for my acknowledgement)
                self._wait((lambda s=slot, q=seq: self._check_windows() or words[s] >= q)
                           if any(self._win_pending.values()) else (lambda s=slot, q=seq: words[s] >= q), p, "arrive")
            self._rdv_open[p].popleft()
            if self._win_pending.get(p):
                self._check_windows(before=(p, seq))
            if words[slot] == seq and words[slot + _OUT_KIND] == WINDOW:  # p's buffer is in a window, mine not
                index, at = words[slot + _WINDOW_INDEX], words[slot + _OUT_OFFSET]
                error = PlanError(f"rank {p} passed a buffer at offset {at} of registered window {index} (call {seq} "
                                  f"between them) and rank {self.rank}'s buffer for its "
                                  f"{state.plan.collective.describe()} is in no window: pass buffers of the same "
                                  "window at the same offset on every rank, or unregistered buffers on every rank")
                win = next((w for w in self._windows if w.index == index), None)
                need = state.plan.ranks.output_bytes[p]
                if win is None or at + need > win.nbytes or words[slot + _DIGEST] != state.digest:
                    raise error
                # p's call runs on regardless (it does not wait for me): mine runs too, into p's buffer as p
                # passed it, and both raise once launched, rather than leave p's stream waiting for mine
                self._window_mismatch(error)
                words[region] = seq
                if need:
                    remote[p] = win.peers[p] + at
                continue
            if words[slot] != seq or words[slot + _DIGEST] != state.digest:
                raise PlanError(f"rank {p} is in another collective than rank {self.rank} "
                                f"({state.plan.collective.describe()}, call {seq} between them): every rank must "
                                "issue the same collectives in the same order")
            if p == state.helped and words[slot + _IN_KIND]:  # local_copies="peer": its input, for its block
                at = 8 * slot + _IN_HANDLE
                helped_in = self._open(bytes(mail[at:at + _HANDLE])) + words[slot + _IN_OFFSET]
            if words[slot + _OUT_KIND]:
                offset = words[slot + _OUT_OFFSET]
                handle = bytes(mail[8 * slot + _OUT_HANDLE:8 * slot + _OUT_HANDLE + _HANDLE])
                words[region] = seq  # ack: the slot may be reused
                remote[p] = self._open(handle) + offset
            else:
                words[region] = seq
        return remote, helped_in

    # --- registered windows -------------------------------------------------------------------------------
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
        self._raise_if_failed()
        buf = window_buffer(tensor, self.rank, self.device)
        if not buf.nbytes:
            raise BufferError(f"rank {self.rank}'s window has 0 bytes: register a buffer with bytes in it")
        for w in self._windows:
            if buf.ptr < w.ptr + w.nbytes and w.ptr < buf.ptr + buf.nbytes:
                raise BufferError(f"rank {self.rank}'s window at {buf.ptr:#x} ({buf.nbytes} bytes) overlaps window "
                                  f"{w.index} at {w.ptr:#x} ({w.nbytes} bytes): close that one first")
        with self._lock:
            k = self._window_count
            self._window_count += 1
            # each rank's value: b"+" and its handle, offset and size, or b"!" and why it could not share its buffer
            try:
                handle, offset = self._export(buf, "window")
            except HocclError as exc:  # the others hear of it at once instead of waiting for their timeout
                self._store.set(f"window/{k}/{self.rank}", b"!" + str(exc).encode())
                raise
            self._store.set(f"window/{k}/{self.rank}", b"+" + handle + offset.to_bytes(8, "little") +
                            buf.nbytes.to_bytes(8, "little"))
            got = {p: self._store_get(f"window/{k}/{p}", p, f"register window {k}")
                   for p in range(self.world) if p != self.rank}
            for p, v in got.items():
                if v[:1] != b"+":
                    raise BufferError(f"rank {p} could not register window {k}: {v[1:].decode(errors='replace')}")
            got = {p: v[1:] for p, v in got.items()}
            sizes = {p: int.from_bytes(v[_HANDLE + 8:_HANDLE + 16], "little") for p, v in got.items()}
            if any(n != buf.nbytes for n in sizes.values()):
                sizes[self.rank] = buf.nbytes
                raise BufferError(f"register_window {k}: ranks registered different sizes "
                                  f"({', '.join(f'rank {p}: {n}' for p, n in sorted(sizes.items()))} bytes); every "
                                  "rank registers a buffer of the same size")
            handles = {p: v[:_HANDLE] for p, v in got.items()}
            peers = {}
            try:
                for p, v in got.items():
                    peers[p] = self._pin(handles[p]) + int.from_bytes(v[_HANDLE:_HANDLE + 8], "little")
            except Exception:
                for p in peers:
                    self._unpin(handles[p])
                raise
            win = Window(self, k, buf.ptr, buf.nbytes, peers, tuple(handles.values()), tensor)
            self._windows.append(win)
            self._window_calls.clear()
        return win

    def _pin(self, handle: bytes) -> int:
        pinned = self._pinned.get(handle)
        if pinned is not None:
            pinned[1] += 1
            return pinned[0]
        base = self._opened.take(handle)  # mapped already by a call: the window keeps it
        if base is None:
            base = self._map(handle)
        self._pinned[handle] = [base, 1]
        return base

    def _unpin(self, handle: bytes) -> None:
        pinned = self._pinned[handle]
        pinned[1] -= 1
        if not pinned[1]:
            del self._pinned[handle]
            self._unmap(pinned[0])

    def _deregister(self, win: Window) -> None:
        with self._lock:
            if win.closed:
                return
            win.closed = True
            if self._closed:  # close() released every mapping
                return
            self._windows.remove(win)
            self._window_calls.clear()
            self.synchronize()  # my copies through the peers' mappings have landed
            self._launches.clear()  # launch lists name the mappings
            for handle in win.handles:
                self._unpin(handle)

    def _in_window(self, state: _PlanState, inp: DeviceBuffer | None, out: DeviceBuffer | None
                   ) -> tuple[Window, int] | None:
        """(window, offset) of the call's buffer (its output, or its input on a rank without an output) when it
        lies in a registered window and the plan may take that path; else None. (A scan of the few windows:
        a repeated single call finds its answer in _window_calls.)"""
        buf = out if out is not None else inp
        if buf is None or not state.windows:
            return None
        return next(((w, buf.ptr - w.ptr) for w in self._windows
                     if w.ptr <= buf.ptr and buf.ptr + buf.nbytes <= w.ptr + w.nbytes), None)

    def _window_call(self, what: tuple | Plan, input: Any, output: Any, s: int, rate: float | None,
                     duration_s: float | None = None) -> bool:
        """Run a call whose buffer lies in a registered window (True), or say it does not (False). The checks
        of its buffers, its window and offset and its partners' addresses are worked out at its first call
        and kept for the same call on the same buffers and stream; each call writes its mailbox entries."""
        inp = as_buffer(input, "input") if input is not None else None
        out = as_buffer(output, "output") if output is not None else None
        pace = rate and (rate, self.pace_period_us)
        # (pointers and sizes, not the buffers: hashing ints costs a third of hashing two dataclasses; a pointer
        # names its GPU, and a buffer on another GPU fails its first call's checks, so it is never kept)
        key = (self._state(what).uid if isinstance(what, Plan) else what, s, pace, inp and inp.ptr, inp and inp.nbytes,
               out and out.ptr, out and out.nbytes)
        known = self._window_calls.get(key, self)
        if known is self:  # first time: all the usual checks
            state, inp, out = self._prepare(what, inp, out)
            where = state.eager is None and self._in_window(state, inp, out)
            if where:
                remote = self._window_remote(state, *where)
                launch = self._launch_key(state, inp, out, remote, None, s, rate)
                known = (state, inp, out, where[0].index, where[1], remote, launch)
            else:
                known = None
            if len(self._window_calls) > 4096:
                self._window_calls.clear()
            self._window_calls[key] = known
        if known is None:
            return False
        state, inp, out, index, offset, remote, launch = known
        if duration_s is not None:  # this rank's paced bytes spread over the duration (none: full speed)
            rate = state.paced_bytes / duration_s / 1e9 if state.paced_bytes else None
            if rate is not None:
                pacing.tick_us(rate, self.pace_period_us)  # refused before the partners hear of the call
            launch = self._launch_key(state, inp, out, remote, None, s, rate)
        self._window_entries(state, index, offset)
        self._cached(launch, lambda stream, r: self._build(state, inp, out, remote, stream, r, None), s, rate)
        # the partners' entries are checked after the launch: a mismatch raises here or later on each rank, and
        # both ranks' streams still run their calls through (a rank that raised first would leave the other's
        # stream waiting for it)
        self._check_windows()
        self._raise_window_error()
        return True

    def _window_remote(self, state: _PlanState, win: Window, offset: int) -> dict[int, int]:
        """The partners' outputs for a call at ``offset`` of ``win``: at that offset of their windows."""
        plan = state.plan
        remote = {}
        for p in state.partners:
            need = plan.ranks.output_bytes[p]
            if need:
                if offset + need > win.nbytes:
                    raise BufferError(f"rank {self.rank}'s buffer is at offset {offset} of window {win.index} "
                                      f"({win.nbytes} bytes), so rank {p}'s output of {need} bytes for this "
                                      f"{plan.collective.describe()} would end past the end of rank {p}'s window: "
                                      "every rank's buffer must lie in its window at the same offset")
                remote[p] = win.peers[p] + offset
        return remote

    def _window_entries(self, state: _PlanState, index: int, offset: int) -> None:
        """A call on window ``index``: write my entry for each partner without waiting for theirs (they are
        checked when there, after the launch: _check_windows); wait only where the slot still holds my
        rendezvous entry of 4 calls before, which the partner has not read (it carries an address)."""
        words, seqs, pending = self._shared.words, self._seq, self._win_pending
        digest, what = state.digest, state.plan.collective
        for p in state.partners:
            seq = seqs[p] + 1
            slot = self._claim_slot(p, seq, rendezvous=False)
            words[slot + _DIGEST] = digest
            words[slot + _OUT_OFFSET] = offset
            words[slot + _OUT_KIND] = WINDOW
            words[slot + _WINDOW_INDEX] = index
            words[slot + _SEQ] = seq
            seqs[p] = seq
            queue = pending.get(p)
            if queue is None:
                queue = pending[p] = deque()
            queue.append((seq, digest, index, offset, what))

    def _check_windows(self, before: tuple[int, int] | None = None) -> None:
        """Check the partners' entries for my window calls that are there now, in order, and acknowledge
        them; ``before=(p, seq)``: p's entries before seq must all be there (p has written seq). A mismatch is
        kept (the first one) and raised by _raise_window_error once this rank's call is launched: a rank that
        raised before its launch would leave its partners' streams waiting for it."""
        words = self._shared.words
        for p, pending in self._win_pending.items():
            if not pending:
                continue
            region, checked = self._region_in[p], False
            while pending:
                seq, digest, index, offset, what = pending[0]
                slot = region + 8 + (seq % _SLOTS) * _SLOT_WORDS
                got = words[slot]
                if got < seq and not (before and before[0] == p and seq < before[1]):
                    break
                pending.popleft()
                checked = True
                # p writes a slot as 0, the fields, then its sequence number: an entry that changed while it was
                # read, or that a later one of p's replaced (p is 4 calls ahead), can no longer be checked
                flag, theirs = words[slot + _OUT_KIND], words[slot + _DIGEST]
                at, where = words[slot + _OUT_OFFSET], words[slot + _WINDOW_INDEX]
                if got == 0 or got > seq or words[slot] != got:
                    continue
                if got != seq or flag != WINDOW:
                    self._window_mismatch(PlanError(
                        f"rank {p} did not pass a buffer of a registered window in call {seq} between them, where "
                        f"rank {self.rank}'s {what.describe()} used window {index} at offset {offset}: pass buffers "
                        "of the same window at the same offset on every rank, or unregistered buffers on every rank"))
                elif theirs != digest:
                    self._window_mismatch(PlanError(
                        f"rank {p} is in another collective than rank {self.rank} ({what.describe()}, call {seq} "
                        "between them): every rank must issue the same collectives in the same order"))
                elif where != index or at != offset:
                    self._window_mismatch(PlanError(
                        f"rank {p}'s buffer is at offset {at} of window {where}, rank {self.rank}'s at offset "
                        f"{offset} of window {index} ({what.describe()}, call {seq} between them): peers write to a "
                        "buffer at the same offset of the same window on every rank"))
            if checked:
                self._ack(p)

    def _window_mismatch(self, error: PlanError) -> None:
        if self._window_error is None:
            self._window_error = error

    def _raise_window_error(self) -> None:
        error, self._window_error = self._window_error, None
        if error is not None:
            raise error

    def _ack(self, p: int) -> None:
        """Acknowledge p's mailbox entries up to the first one still to be read (a window call's entry not
        checked yet, or a rendezvous entry that _collect has not reached)."""
        upto = self._rdv_open[p][0] - 1 if self._rdv_open[p] else self._seq[p]
        pending = self._win_pending.get(p)
        if pending:
            upto = min(upto, pending[0][0] - 1)
        words, at = self._shared.words, self._region_in[p]
        if upto > words[at]:
            words[at] = upto

    def _export(self, buf: DeviceBuffer, what: str = "output") -> tuple[bytes, int]:
        """(IPC handle of buf's whole allocation, buf's offset in it), asked of the driver on every call."""
        return _cuda.ipc_export(buf.ptr, f"rank {self.rank}'s {what}")

    def _open(self, handle: bytes) -> int:
        """The local address of a peer allocation. The least recently used of more than ``ipc_cache``
        mappings is closed (after this rank's copies drained), so freed peer memory is not held forever."""
        pinned = self._pinned.get(handle)
        if pinned is not None:  # a registered window's allocation, mapped already
            return pinned[0]
        return self._opened.open(handle, self.device)

    def _before_unmap(self) -> None:
        """Before a mapping closes (the cache is full): this rank's calls drained, and the launch lists, which
        may name the mapping that goes, dropped."""
        self.synchronize()
        self._launches.clear()

    def _map(self, handle: bytes) -> int:
        """Map a peer's allocation (its IPC handle) into my GPU's address space: its local base address."""
        with _cuda.on_device(self.device) as rt:
            return int(rt.ipcOpenMemHandle(handle))

    def _unmap(self, base: int) -> None:
        with _cuda.on_device(self.device) as rt, contextlib.suppress(Exception):  # the peer may have freed it
            rt.ipcCloseMemHandle(base)

    def _wait(self, ready, peer: int, what: str) -> None:
        if ready():
            return
        deadline = time.monotonic() + self.timeout_s
        spins = 0
        while not ready():
            spins += 1
            if spins > 2000:
                self._raise_if_failed()
                if spins % 1000 == 0 and self._dead_peer() == peer:
                    self._fail(peer)
                    raise self._failure
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"rank {peer} did not {what} within {self.timeout_s:.0f} s (rank "
                                            f"{self.rank} is waiting for it); is it alive and issuing the same "
                                            "collectives?")
                time.sleep(50e-6)

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
            with _cuda.on_device(self.device) as rt:
                ev = self._events[key] = rt.eventCreateWithFlags(2)  # cudaEventDisableTiming
        return ev

    def _build(self, state: _PlanState, inp: DeviceBuffer | None, out: DeviceBuffer | None,
               remote: dict[int, int], user: int, rate: float | None = None,
               helped_in: int | None = None) -> list[Op]:
        """My launch list (see the module docstring). The caller's stream U carries the cross-process
        handshakes and my first DMA queue's copies; other queues (local copies, extra DMA queues) run on
        side streams ordered with U by events, so the common call costs 3 CUDA calls::

            U:  [signal READY to senders; wait READY of receivers] -> copies -> [signal DONE; wait DONE]

        With local_copies="peer" my own block goes through my receivers' outputs (``state.bounce``), or, where
        no send of mine carries it, is copied by ``state.helper`` (a sender to me like any other); and I copy
        ``state.helped``'s, from its input at ``helped_in`` into its output, after my sends."""
        plan, prog, me = state.plan, state.program, self.rank
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
            entry.wait_eq(self._flag(0, r, me), 0).write(self._flag(0, r, me), 1)
        for r in receivers:    # r's output may be written by my copies
            entry.wait_eq(self._flag(0, me, r), 1).write(self._flag(0, me, r), 0)
        for r in receivers:
            exit_.wait_eq(self._flag(1, me, r), 0).write(self._flag(1, me, r), 1)
        for r in senders:
            exit_.wait_eq(self._flag(1, r, me), 1).write(self._flag(1, r, me), 0)

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
        if local and self._one_queue:
            self._one_queue = False
            n = plan.ranks.input_bytes[me]
            in_place = (f"pass the output's own block as the input (in place: input = output[{me * n}:{(me + 1) * n}] "
                        "in bytes) or " if plan.collective.kind == "allgather" else "")
            warnings.warn(
                f"rank {me}: this {plan.collective.describe()} copies its own block within GPU {self.device}, which "
                "the CUDA driver does with a kernel; under CUDA_DEVICE_MAX_CONNECTIONS=1 that kernel waits behind "
                "compute issued before it on any stream, so the call cannot overlap that compute. For traffic that "
                f"overlaps compute, {in_place}use hoccl_runtime.init(local_copies='peer') (HOCCL_LOCAL_COPIES=peer); "
                "docs/architecture.md has the measurements", RuntimeWarning, stacklevel=2)
        if local:  # local copies need no peer: they start before the handshake
            ops.append(Record(self._event(("pre", user)), user))
        if entry.ops:
            ops.append(Memops(entry, user))
        if len(side) > len(local):
            ops.append(Record(self._event(("post", user)), user))
        for q in side:
            stream = self._side_stream(qindex[q] if kinds[q] == "dma" else MAX_QUEUES)
            ops.append(Wait(stream, self._event(("pre" if q in local else "post", user))))
            ops += copies(q, stream)
            ops.append(Record(self._event(("side", q)), stream))
        sends = before + (copies(main, user) if main is not None else []) + after + helped
        if sends and rate is None:
            ops += sends
        elif sends:
            ops += self._paced(sends, rate, user)
        ops += [Wait(user, self._event(("side", q))) for q in side]
        if exit_.ops:  # last: a graph of the call ends at its copies, and this batch follows it (_promote)
            ops.append(Memops(exit_, user))
        return ops

    # --- lifetime and faults -------------------------------------------------------------------------------
    def _pending(self) -> list[int]:
        """Events that mark the end of this rank's calls (one per caller stream), not yet reached. An event
        last recorded inside a stream capture (a call the user captured into a graph) says
        cudaErrorCapturedEvent, not "not ready": the graph's launches are the user's to wait for."""
        from ._cuda import cupy_runtime

        rt = cupy_runtime()
        busy = []
        for key, ev in list(self._events.items()):
            if key[0] in ("end", "side") and rt.eventQuery(ev) == _NOT_READY:
                busy.append(ev)
        return busy

    def _paced(self, copies: list[Op], rate: float, user: int) -> list[Op]:
        """The copies cut into pieces; piece k waits for tick k of the clock stream, tick k + 1 comes piece
        k's bytes at ``rate`` after tick k, and the call ends no earlier than the tick after its last
        piece (see pacing.py)."""
        pacer = self._pacer_for_calls()
        # the Feedback of the launch being made (_cached_paced); a list built on its own gets its own
        feedback = self._building if self._building is not None else pacing.Feedback(pacer)
        clock = pacer.handle
        tick = pacing.tick_us(rate, self.pace_period_us)
        cut = [Memcpy(c.dst + off, c.src + off, n, c.stream)
               for c in copies for off, n in pacing.pieces(c.nbytes, rate, tick)]
        feedback.target_us += sum(piece.nbytes for piece in cut) / (rate * 1e3)
        ops: list[Op] = [Record(self._event(("tick", 0)), user), Wait(clock, self._event(("tick", 0)))]
        for k, piece in enumerate(cut):
            ops.append(piece)
            ops += [Call(feedback.sleep, (clock, pacer.sleep_us(piece.nbytes / (rate * 1e3)))),
                    Record(self._event(("tick", k + 1)), clock), Wait(user, self._event(("tick", k + 1)))]
        return ops

    def synchronize(self, timeout_s: float | None = None) -> None:
        """Wait (host) until this rank's part of every call issued so far is done on the GPU, raising
        HocclTimeoutError after ``timeout_s`` (default: the communicator's timeout)."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        self._raise_if_failed()
        if self._unverified:
            self._verify_eager()
        while self._pending():
            self._raise_if_failed()
            if time.monotonic() > deadline:
                if self._win_pending:  # a window call that a partner mismatched says more than the timeout
                    self._check_windows()
                    self._raise_window_error()
                raise HocclTimeoutError(f"rank {self.rank}: copies still pending after {limit:.0f} s; a peer "
                                        "may have died or stopped issuing collectives")
            time.sleep(100e-6)
        self._raise_if_failed()  # the watchdog may have drained the streams before this wait began
        if self._unverified:  # receives completed: their senders' size entries were written before the data
            self._verify_eager()
        if self._win_pending:  # window calls completed: their partners' entries were written before the data
            self._check_windows()
        self._raise_window_error()

    def _dead_peer(self) -> int | None:
        pids = self._shared.pids
        for r in range(self.world):
            if r != self.rank and pids[r] > 0:
                try:
                    os.kill(int(pids[r]), 0)
                except ProcessLookupError:
                    return r
                except PermissionError:
                    pass
        return None

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def _watch(self) -> None:
        """The watchdog thread: sleeps, and every ``watch_interval_s`` checks that partner processes live.
        When one died while this rank's GPU work waits on it, the flags it would have written are
        written here so this rank's streams drain (a stream waiting on a dead process would otherwise
        wait forever), and every later call raises TransportError naming the dead rank."""
        while not self._stop.wait(self.watch_interval_s):
            dead = self._dead_peer()
            if dead is not None and self._pending():  # a partner that left after its work is no fault
                self._fail(dead)
                return

    def _fail(self, dead: int) -> None:
        if self._failure is None:
            self._failure = TransportError(
                f"rank {dead} (pid {int(self._shared.pids[dead])}) exited while rank {self.rank} was "
                "communicating with it; this communicator is unusable: close it and create a new one")
        self._drain(dead)

    def _drain(self, dead: int, limit_s: float = 5.0) -> None:
        flags, me, w = self._shared.flags, self.rank, self.world
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline and self._events and self._pending():
            flags[_pair_flag(w, 0, me, dead)] = 1    # "dead's buffers are ready"
            flags[_pair_flag(w, 1, dead, me)] = 1    # "dead's copies into me are done"
            flags[_pair_flag(w, 0, dead, me)] = 0    # "dead consumed my READY"
            flags[_pair_flag(w, 1, me, dead)] = 0    # "dead consumed my DONE"
            for j in range(EAGER_SLOTS):             # eager slots: "dead's message is there", "dead emptied mine"
                flags[_slot_flag_index(w, dead, me, j)] = 1
                flags[_slot_flag_index(w, me, dead, j)] = 0
            time.sleep(1e-3)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        try:
            if self._failure is None:
                self.synchronize()
        finally:
            self._watchdog.join(timeout=10)  # a drain in progress ends within 5 s
            with _cuda.on_device(self.device) as rt:
                self._launches.clear()  # destroys the calls' graphs
                for w in self._windows:
                    w.closed, w.tensor = True, None
                self._windows, self._window_calls = [], {}
                self._opened.close_all()
                for base in [*self._stage_out.values(), *(p[0] for p in self._pinned.values())]:
                    with contextlib.suppress(Exception):  # closing anyway
                        rt.ipcCloseMemHandle(base)
                for ptr in self._stage_in.values():  # peers' mappings keep the memory until they close them
                    with contextlib.suppress(Exception):
                        rt.free(ptr)
                self._stage_in, self._stage_out = {}, {}
                for ev in self._events.values():
                    with contextlib.suppress(Exception):
                        rt.eventDestroy(ev)
            self._events.clear()
            self._pinned.clear()
            self._streams = {}
            self._capture = None
            self._shared.close()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
