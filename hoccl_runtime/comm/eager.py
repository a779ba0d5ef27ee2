"""The eager path of small send/recv (and, opt-in, collectives): pieces staged in per-pair slots of peer
memory mapped once, so neither side waits for the other on the host. :class:`EagerSlots` is the Communicator's
part that owns it; :func:`eager_layout` and :func:`eager_ops` are functions of their arguments."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hoccl_compiler.schema import Plan

from .. import _cuda  # no CUDA at import: each loads cupy / cuda-bindings when first used
from .._cuda_memory import free, ipc_close_mem_handle, ipc_get_mem_handle, ipc_open_mem_handle, malloc
from ..errors import HocclError, PlanError
from ..flags import MemOps
from ..interop import DeviceBuffer
from ..launch import (
    Memcpy,
    Memops,
    Op,
)
from ..program import (
    Program,
)
from ._base import (
    _HANDLE,
    _RING,
    EAGER_SLOTS,
    _EagerLayout,
    _Flag,
    _PlanState,
    _slot_flag_index,
)

if TYPE_CHECKING:
    from .build import BuildContext, LaunchBuilder
    from .rendezvous import Mailbox

__all__ = ["EagerSlots", "eager_layout", "eager_ops"]


class EagerSlots:
    """The part of the Communicator that owns the eager path's state: per partner my staging for its messages
    (``stage_in``, allocated here) and its staging for mine (``stage_out``, mapped here), both set up at the pair's
    first eager message, and the receives whose sender's size entry was not there yet (``unverified``). It numbers
    its calls in the :class:`~.rendezvous.Mailbox` (an eager call writes no slot: its size entries go in the pair
    region's ring) and reads the partners' staging handles through ``store_get(key, peer, what)``."""

    def __init__(self, rank: int, world: int, device: int, store: Any, shared: Any, mailbox: Mailbox,
                 slot_bytes: int, store_get: Callable[[str, int, str], bytes]):
        self.rank, self.world, self.device, self.store, self.shared = rank, world, device, store, shared
        self.mailbox, self.slot_bytes, self.store_get = mailbox, slot_bytes, store_get
        self.stage_in: dict[int, int] = {}   # peer -> my staging for its eager messages (cudaMalloc)
        self.stage_out: dict[int, int] = {}  # peer -> its staging for mine, mapped here
        # eager receives whose sender's size entry was not there yet: (peer, seq, ring word, digest, call)
        self.unverified: list[tuple[int, int, int, int, Any]] = []

    def enter(self, state: _PlanState) -> dict[int, int]:
        """The call's sequence number with each partner and so its staging slot ({partner: slot}); writes
        my size entries into the receivers' rings and checks the senders' entries in mine."""
        e, me, mb = state.eager, self.rank, self.mailbox
        words = mb.words
        what = state.plan.collective  # described only in an error
        slots = {}
        for p in state.partners:
            if p not in self.stage_out:
                self.setup(p)
            seq = mb.next_eager(p)
            slots[p] = seq % EAGER_SLOTS
            if p in e.sends:
                ring = mb.pair(me, p) // 8 + _RING + 2 * slots[p]
                words[ring + 1] = state.digest
                words[ring] = seq
            if p in e.recvs:
                ring = mb.pair(p, me) // 8 + _RING + 2 * slots[p]
                if not self.check_ring(p, seq, ring, state.digest, what):
                    self.unverified.append((p, seq, ring, state.digest, what))
        return slots

    def launch(self, launcher: LaunchBuilder, state: _PlanState, inp: DeviceBuffer | None,
               out: DeviceBuffer | None, slots: dict[int, int], s: int, rate: float | None) -> None:
        """My pieces for each peer go to my slot in its staging, the peers' pieces for me are copied out of
        mine; no host waits."""
        e = state.eager
        key = ("eager", state.uid, s, inp.ptr if inp else 0, out.ptr if out else 0,
               tuple(slots.items()), rate and (rate, launcher.pace_period_us))
        launcher.run(key, lambda stream, r, ctx: eager_ops(self.context(ctx), e, inp, out, slots, stream, r), s, rate)

    def context(self, ctx: BuildContext) -> BuildContext:
        """``ctx`` with what :func:`eager_ops` reads of this part: the slot flags, the slot size, the staging."""
        return dataclasses.replace(ctx, slot_flag=self.slot_flag, slot_bytes=self.slot_bytes, stage_in=self.stage_in,
                                   stage_out=self.stage_out)

    def slot_flag(self, a: int, b: int, j: int) -> _Flag:
        """FULL of eager slot j for messages a -> b."""
        return _Flag(self.shared.flag_address(_slot_flag_index(self.world, a, b, j)))

    def setup(self, peer: int) -> None:
        """Once per pair, at its first eager message (either direction): allocate my staging for the
        peer's messages and publish its IPC handle, then map the peer's staging for mine. Both sides
        publish before they wait, so two ranks that first send to each other do not deadlock."""
        with _cuda.on_device(self.device):
            if peer not in self.stage_in:
                ptr = self.stage_in[peer] = malloc(EAGER_SLOTS * self.slot_bytes)
                self.store.set(f"eager/{peer}->{self.rank}", ipc_get_mem_handle(ptr) +
                               self.slot_bytes.to_bytes(8, "little"))
            got = self.store_get(f"eager/{self.rank}->{peer}", peer, "set up its eager staging")
            handle, theirs = got[:_HANDLE], int.from_bytes(got[_HANDLE:_HANDLE + 8], "little")
            if theirs != self.slot_bytes:
                raise HocclError(f"rank {peer} stages eager messages of up to {theirs} bytes, rank {self.rank} of "
                                 f"{self.slot_bytes}: set HOCCL_EAGER_BYTES alike on every rank")
            self.stage_out[peer] = ipc_open_mem_handle(handle)

    def check_ring(self, peer: int, seq: int, ring: int, digest: int, what: Any) -> bool:
        """True when the sender's size entry for ``seq`` was read (or was overwritten by a later one:
        it can no longer be checked); raises PlanError if it names another size."""
        words = self.mailbox.words
        first = words[ring]
        if first < seq:
            return False
        theirs = words[ring + 1]
        if first == seq and words[ring] == seq and theirs != digest:
            raise PlanError(f"rank {peer} sent rank {self.rank} another size or collective than the "
                            f"{what.describe()} rank {self.rank} receives (call {seq} between them): every rank must "
                            "issue the same calls with matching sizes, in the same order")
        return True

    def verify(self) -> None:
        """Check the deferred receives whose size entries are there now; a mismatch is raised once."""
        pending, self.unverified = self.unverified, []
        for i, entry in enumerate(pending):
            try:
                if not self.check_ring(*entry):
                    self.unverified.append(entry)
            except PlanError:
                self.unverified += pending[i + 1:]
                raise

    def close(self) -> None:
        """The staging released: the peers' mappings closed, mine freed (the peers' mappings keep it until they
        close them). The caller makes the device current."""
        for base in self.stage_out.values():
            with contextlib.suppress(Exception):  # closing anyway
                ipc_close_mem_handle(base)
        for ptr in self.stage_in.values():
            with contextlib.suppress(Exception):
                free(ptr)
        self.stage_in, self.stage_out = {}, {}


def eager_layout(plan: Plan, prog: Program, me: int, eager_bytes: int) -> _EagerLayout | None:
    """Rank ``me``'s eager layout of a plan whose bytes per directed pair fit a staging slot of ``eager_bytes``
    (None where some pair's do not): its local copies, and per partner where its pieces sit in the slot."""
    local, sends, recvs = [], {}, {}
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
    if not fill or max(fill.values()) > eager_bytes:
        return None
    return _EagerLayout(tuple(local), {p: tuple(v) for p, v in sends.items()},
                        {p: tuple(v) for p, v in recvs.items()})


def eager_ops(ctx: Any, e: _EagerLayout, inp: DeviceBuffer | None, out: DeviceBuffer | None, slots: dict[int, int],
              s: int, rate: float | None = None) -> list[Op]:
    """An eager call's launch list for rank ``ctx.rank`` (a :class:`~hoccl_runtime.comm.build.BuildContext`:
    its slot flags, slot size and staging addresses), from the call's eager layout and the slot each partner's
    message uses, all on the caller's stream ``s``: local copies, [wait my slots empty] my pieces into the peers'
    slots [mark them full; wait for theirs in mine] copies out of mine [mark mine empty]. Nothing is issued."""
    me, size = ctx.rank, ctx.slot_bytes
    ops: list[Op] = [Memcpy(out.ptr + d, inp.ptr + src, n, s) for d, src, n in e.local
                        if out.ptr + d != inp.ptr + src]  # in place: already there
    empty, signal, release = MemOps(), MemOps(), MemOps()
    sends: list[Op] = []
    for p, pieces in e.sends.items():
        flag = ctx.slot_flag(me, p, slots[p])
        empty.wait_eq(flag, 0)
        signal.write(flag, 1)
        base = ctx.stage_out[p] + slots[p] * size
        sends += [Memcpy(base + at, inp.ptr + src, n, s) for at, src, n in pieces]
    for p in e.recvs:
        flag = ctx.slot_flag(p, me, slots[p])
        signal.wait_eq(flag, 1)
        release.write(flag, 0)
    if empty.ops:
        ops.append(Memops(empty, s))
    ops += ctx.paced(sends, rate, s) if rate and sends else sends
    ops.append(Memops(signal, s))
    for p, pieces in e.recvs.items():
        base = ctx.stage_in[p] + slots[p] * size
        ops += [Memcpy(out.ptr + d, base + at, n, s) for d, at, n in pieces]
    if release.ops:
        ops.append(Memops(release, s))
    return ops
