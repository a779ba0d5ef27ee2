"""The intra-node communicator's constants and the small types its parts share: the shared host memory, a
flag of it, a cached launch, a plan's per-rank state, the eager path's layout."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from hoccl_compiler.schema import Plan

from .. import pacing  # no CUDA at import: each loads cupy / cuda-bindings when first used
from .._cuda_streams import EVENT_NOT_READY
from .._shm import SharedSegment
from ..mailbox import HANDLE_BYTES, SLOT
from ..program import (
    Bounce,
    Copy,
    Program,
)

MAX_QUEUES = 4          # DMA queues per GPU a plan may use with this communicator
_PAIR_BYTES = 2048      # mailbox region per directed rank pair
_SLOTS = 4              # mailbox slots per directed pair (a batch may hold 4 calls with one partner)
_HANDLE = HANDLE_BYTES  # cudaIpcMemHandle_t
_NOT_READY = EVENT_NOT_READY  # cudaErrorNotReady (the CUDA door's)
EAGER_SLOTS = 4         # staging slots per directed pair for eager send/recv
_SLOT_WORDS = SLOT.words  # a mailbox slot (hoccl_runtime.mailbox: its named fields)
# the fields the hot path reads and writes, as module constants (a global is cheaper to read than an attribute)
_SEQ, _DIGEST, _OUT_KIND, _OUT_OFFSET, _WINDOW_INDEX, _IN_KIND, _IN_OFFSET = (
    SLOT.seq, SLOT.digest, SLOT.out_kind, SLOT.out_offset, SLOT.window, SLOT.in_kind, SLOT.in_offset)
_OUT_HANDLE, _IN_HANDLE = 8 * SLOT.out_handle, 8 * SLOT.in_handle  # byte offsets of the handles in a slot
_RING = 8 + _SLOTS * _SLOT_WORDS  # mailbox word of a pair region where the eager size ring starts ([seq, digest] x 4)
assert 8 * (_RING + 2 * EAGER_SLOTS) <= _PAIR_BYTES
REFUSAL_BYTES = 512     # per rank: the collective calls it refused, and why (comm.watchdog: Watchdog._record)


class _SharedHost:
    """Host memory shared by the node's processes and registered with CUDA: flags and mailboxes."""

    def __init__(self, store: Any, rank: int, world: int, timeout_s: float):
        self.world = world
        self.flag_count = (2 + EAGER_SLOTS) * world * world  # READY, DONE, and the eager slots' FULL
        flag_bytes = -(-4 * self.flag_count // 4096) * 4096
        mail_bytes = world * world * _PAIR_BYTES
        self.segment = seg = SharedSegment(store, rank == 0, flag_bytes + mail_bytes + (8 + REFUSAL_BYTES) * world,
                                            key="shm-name", world=world, timeout_s=timeout_s)
        self.dev_ptr = seg.dev_ptr
        self.flags = np.frombuffer(seg.shm.buf, dtype=np.int32, count=self.flag_count)
        self.mail = np.frombuffer(seg.shm.buf, dtype=np.uint8, count=mail_bytes, offset=flag_bytes)
        # the hot path reads and writes the mailbox through memoryviews: Python ints, no NumPy scalars
        self.words, self.mail_bytes = memoryview(self.mail).cast("q"), memoryview(self.mail)
        self.pids = np.frombuffer(seg.shm.buf, dtype=np.int64, count=world, offset=flag_bytes + mail_bytes)
        self.pids[rank] = os.getpid()  # partners' watchdogs tell a dead process from a slow one
        self.refusals = np.frombuffer(seg.shm.buf, dtype=np.uint8, count=REFUSAL_BYTES * world,
                                      offset=flag_bytes + mail_bytes + 8 * world)
        try:
            seg.join(store, "attached", world, timeout_s)
        except BaseException:
            self.close()
            raise

    def flag_address(self, index: int) -> int:
        return self.dev_ptr + 4 * index

    def close(self) -> None:
        views = (self.words, self.mail_bytes)
        self.flags = self.mail = self.pids = self.refusals = None  # release NumPy views before closing the mapping
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
    # plan's local copies would move it (aliasing.plan_in_place); None: nowhere
    own_block: int | None = None
    bounce: tuple[Bounce, ...] = ()  # local_copies="peer": my own block through peers' outputs (bounce_route)
    helper: int | None = None  # local_copies="peer", no bounce route: the rank that copies my own block
    helped: int | None = None  # ... and the rank whose own block I copy (gets its input's handle)
    helped_copies: tuple[Copy, ...] = ()  # that rank's local copies (offsets in its input and output)
    # calls may take the registered-window path: not when some rank's own block is copied by a helper (its input
    # address moves with each call), the same on every rank
    windows: bool = True
    # where in my input my whole output may sit (a scatter's root given its own block of the input as its output:
    # aliasing.plan_in_place); None: nowhere
    own_output: int | None = None


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
