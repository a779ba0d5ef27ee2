"""The per-call address exchange of the intra-node Communicator, as three parts it holds:

* :class:`Mailbox`: the per-pair slots in the node's shared host memory (one slot structure: hoccl_runtime.mailbox),
  the sequence numbers, the flow control (a rendezvous entry is read before its slot is reused) and the
  acknowledgements;
* :class:`PeerMappings`: the partners' allocations mapped here (IPC handles: hoccl_runtime.ipc), the least recently
  used closed beyond a limit, those of registered windows pinned;
* :class:`Rendezvous`: a call's exchange over the two, publish (my output's handle to each partner) and collect
  (theirs, mapped).

Each is built from what it reads (no communicator): tests build them on a bytearray."""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _cuda  # no CUDA at import: each loads cupy / cuda-bindings when first used
from .._cuda_memory import ipc_close_mem_handle, ipc_open_mem_handle
from ..errors import HocclTimeoutError, PlanError
from ..interop import DeviceBuffer
from ..ipc import IpcMappings
from ..mailbox import HANDLE, WINDOW
from ._base import (
    _DIGEST,
    _HANDLE,
    _IN_HANDLE,
    _IN_KIND,
    _IN_OFFSET,
    _OUT_HANDLE,
    _OUT_KIND,
    _OUT_OFFSET,
    _PAIR_BYTES,
    _SEQ,
    _SLOT_WORDS,
    _SLOTS,
    _WINDOW_INDEX,
    _PlanState,
)

if TYPE_CHECKING:
    from .watchdog import Watchdog
    from .windows import WindowTable

__all__ = ["Mailbox", "PeerMappings", "Rendezvous"]


class Mailbox:
    """The mailbox of rank ``rank``: per directed pair (a -> b) a region of ``shared``'s words (``shared.words``,
    int64; ``shared.mail_bytes``, the same bytes), a writing its slots, b the acknowledgement at the region's word
    0. It owns the sequence numbers of each pair's calls (``seq``), which slots hold a rendezvous entry still to be
    read (``slot_rdv``) and which of mine :class:`Rendezvous` has not matched (``rdv_open``). Waits poll
    ``while_waiting`` (the window table's checks: a partner may be waiting for my acknowledgement) and give up
    after ``timeout_s``, or at once when ``watchdog`` finds the partner dead."""

    def __init__(self, rank: int, world: int, shared: Any, timeout_s: float, watchdog: Watchdog):
        self.rank, self.world, self.timeout_s, self.watchdog = rank, world, timeout_s, watchdog
        self.words, self.mail = shared.words, shared.mail_bytes
        self.seq = [0] * world
        # per partner and slot: the sequence number of my rendezvous entry in it, 0 for a window entry (which a
        # partner may lose unchecked) or none; a rendezvous entry must be read before it is overwritten
        self.slot_rdv = [[0] * _SLOTS for _ in range(world)]
        self.rdv_open: list[deque] = [deque() for _ in range(world)]  # per partner: my entries not matched yet
        self.region_out = [self.pair(rank, p) // 8 for p in range(world)]  # mailbox word index, me -> p
        self.region_in = [self.pair(p, rank) // 8 for p in range(world)]   # p -> me
        self.while_waiting: Callable[[], None] = lambda: None
        self.first_unread: Callable[[int], int | None] = lambda p: None  # p's first entry still to be checked

    def pair(self, a: int, b: int) -> int:
        """The byte offset of pair a -> b's region."""
        return (a * self.world + b) * _PAIR_BYTES

    def slot_in(self, p: int, seq: int) -> int:
        """The word index of p's slot for call ``seq`` with me."""
        return self.region_in[p] + 8 + (seq % _SLOTS) * _SLOT_WORDS

    def claim(self, p: int, seq: int, rendezvous: bool) -> int:
        """The word of my slot for call ``seq`` with p, emptied for a new entry (written 0, so a partner reading
        the old one sees it go). The slot's old entry may go unread if it was a window entry; my rendezvous entry
        there (an address) must have been read first: wait for p's acknowledgement."""
        words, region, kinds = self.words, self.region_out[p], self.slot_rdv[p]
        old = kinds[seq % _SLOTS]
        if old and words[region] < old:
            check = self.while_waiting
            self.wait(lambda q=old: check() or words[region] >= q, p, "acknowledge")
        kinds[seq % _SLOTS] = seq if rendezvous else 0
        slot = region + 8 + (seq % _SLOTS) * _SLOT_WORDS
        words[slot] = 0
        return slot

    def ack(self, p: int) -> None:
        """Acknowledge p's entries up to the first one still to be read (a window call's entry not checked yet,
        or a rendezvous entry that :meth:`Rendezvous.collect` has not reached)."""
        upto = self.rdv_open[p][0] - 1 if self.rdv_open[p] else self.seq[p]
        pending = self.first_unread(p)
        if pending is not None:
            upto = min(upto, pending - 1)
        at = self.region_in[p]
        if upto > self.words[at]:
            self.words[at] = upto

    def next_eager(self, p: int) -> int:
        """The next call with p, an eager one (no entry): its sequence number; p's entries are acknowledged up to
        it (none of this call, earlier ones all read in order), so rendezvous calls that follow are not held up
        by the flow control."""
        seq = self.seq[p] = self.seq[p] + 1
        if self.rdv_open[p] or self.first_unread(p) is not None:  # not past an entry of p's still to be read
            self.ack(p)
        else:
            self.words[self.region_in[p]] = seq
        return seq

    def wait(self, ready: Callable[[], Any], peer: int, what: str) -> None:
        """Poll ``ready`` until true; HocclTimeoutError naming ``peer`` after ``timeout_s``, its failure at once
        if the watchdog finds it dead."""
        if ready():
            return
        deadline = time.monotonic() + self.timeout_s
        spins = 0
        watchdog = self.watchdog
        while not ready():
            spins += 1
            if spins > 2000:
                watchdog.raise_if_failed()
                if spins % 1000 == 0 and watchdog.dead_peer() == peer:
                    watchdog.fail(peer)
                    raise watchdog.failure
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"rank {peer} did not {what} within {self.timeout_s:.0f} s (rank "
                                            f"{self.rank} is waiting for it); is it alive and issuing the same "
                                            "collectives?")
                time.sleep(50e-6)


class PeerMappings:
    """The partners' allocations mapped into GPU ``device``'s address space, by IPC handle: those a call names
    (an LRU of ``limit``; ``before_close`` runs before one closes: the caller's copies through it drained, the
    launch lists that name it dropped) and those of registered windows (pinned, counted, outside the LRU)."""

    def __init__(self, rank: int, device: int, limit: int, before_close: Callable[[], None] | None = None):
        self.rank, self.device = rank, device
        self.lru = IpcMappings(limit, before_close=before_close)
        self.pinned: dict[bytes, list[int]] = {}  # handle -> [local address, windows using it]

    def export(self, buf: DeviceBuffer, what: str = "output") -> tuple[bytes, int]:
        """(IPC handle of buf's whole allocation, buf's offset in it), asked of the driver on every call."""
        return _cuda.ipc_export(buf.ptr, f"rank {self.rank}'s {what}")

    def open(self, handle: bytes) -> int:
        """The local address of a peer allocation (a window's, mapped already, or one of the LRU)."""
        pinned = self.pinned.get(handle)
        if pinned is not None:
            return pinned[0]
        return self.lru.open(handle, self.device)

    def pin(self, handle: bytes) -> int:
        pinned = self.pinned.get(handle)
        if pinned is not None:
            pinned[1] += 1
            return pinned[0]
        base = self.lru.take(handle)  # mapped already by a call: the window keeps it
        if base is None:
            with _cuda.on_device(self.device):
                base = ipc_open_mem_handle(handle)
        self.pinned[handle] = [base, 1]
        return base

    def unpin(self, handle: bytes) -> None:
        pinned = self.pinned[handle]
        pinned[1] -= 1
        if not pinned[1]:
            del self.pinned[handle]
            with _cuda.on_device(self.device), contextlib.suppress(Exception):  # the peer may have freed it
                ipc_close_mem_handle(pinned[0])

    def close_all(self) -> None:
        self.lru.close_all()
        for base, _ in self.pinned.values():
            with contextlib.suppress(Exception):  # closing anyway
                ipc_close_mem_handle(base)
        self.pinned.clear()


class Rendezvous:
    """A call's address exchange: :meth:`publish` writes my output's IPC handle and offset into each partner's
    slot (and my input's for the rank that copies my own block, ``local_copies="peer"``), :meth:`collect` waits
    for each partner's entry of the same call and maps its output. Entries of window calls (``windows``) share
    the slots; a partner's window entry where I publish an address is a mismatch both ranks raise."""

    def __init__(self, mailbox: Mailbox, mappings: PeerMappings, windows: WindowTable, local_copies: str):
        self.mailbox, self.mappings, self.windows, self.local_copies = mailbox, mappings, windows, local_copies

    def publish(self, state: _PlanState, out: DeviceBuffer | None, inp: DeviceBuffer | None = None) -> dict[int, int]:
        """My entries of a call for its partners: {partner: seq}."""
        if not state.partners:
            return {}
        mb = self.mailbox
        if out is not None and out.nbytes:
            handle, offset = self.mappings.export(out)
            kind = HANDLE
        else:
            handle, offset, kind = b"", 0, 0
        words, mail = mb.words, mb.mail
        peer_local = self.local_copies == "peer"
        seqs = {}
        for p in state.partners:
            seq = mb.seq[p] + 1
            slot = mb.claim(p, seq, rendezvous=True)
            words[slot + _DIGEST] = state.digest
            words[slot + _OUT_OFFSET] = offset
            words[slot + _OUT_KIND] = kind
            if kind:
                mail[8 * slot + _OUT_HANDLE:8 * slot + _OUT_HANDLE + _HANDLE] = handle
            if peer_local:  # (otherwise the input fields stay 0)
                words[slot + _IN_KIND] = 0
                if p == state.helper and inp is not None and inp.nbytes:
                    in_handle, words[slot + _IN_OFFSET] = self.mappings.export(inp, "input")
                    mail[8 * slot + _IN_HANDLE:8 * slot + _IN_HANDLE + _HANDLE] = in_handle
                    words[slot + _IN_KIND] = HANDLE
            words[slot + _SEQ] = seq  # last: the partner reads the payload after seeing seq
            mb.seq[p] = seq
            mb.rdv_open[p].append(seq)
            seqs[p] = seq
        return seqs

    def collect(self, state: _PlanState, seqs: dict[int, int]) -> tuple[dict[int, int], int | None]:
        """Wait for each partner's entry of the same call and map its output: ({partner: output address},
        the input address of the rank whose own block I copy, or None)."""
        mb, windows = self.mailbox, self.windows
        words, mail = mb.words, mb.mail
        remote: dict[int, int] = {}
        helped_in = None
        for p, seq in seqs.items():
            region = mb.region_in[p]
            slot = mb.slot_in(p, seq)
            if words[slot] < seq:  # (checking window entries meanwhile: p may wait for my acknowledgement)
                mb.wait((lambda s=slot, q=seq: windows.check() or words[s] >= q)
                        if windows.any_pending() else (lambda s=slot, q=seq: words[s] >= q), p, "arrive")
            mb.rdv_open[p].popleft()
            if windows.pending.get(p):
                windows.check(before=(p, seq))
            if words[slot] == seq and words[slot + _OUT_KIND] == WINDOW:  # p's buffer is in a window, mine not
                index, at = words[slot + _WINDOW_INDEX], words[slot + _OUT_OFFSET]
                error = PlanError(f"rank {p} passed a buffer at offset {at} of registered window {index} (call {seq} "
                                  f"between them) and rank {mb.rank}'s buffer for its "
                                  f"{state.plan.collective.describe()} is in no window: pass buffers of the same "
                                  "window at the same offset on every rank, or unregistered buffers on every rank")
                win = windows.by_index(index)
                need = state.plan.ranks.output_bytes[p]
                if win is None or at + need > win.nbytes or words[slot + _DIGEST] != state.digest:
                    raise error
                # p's call runs on regardless (it does not wait for me): mine runs too, into p's buffer as p
                # passed it, and both raise once launched, rather than leave p's stream waiting for mine
                windows.mismatch(error)
                words[region] = seq
                if need:
                    remote[p] = win.peers[p] + at
                continue
            if words[slot] != seq or words[slot + _DIGEST] != state.digest:
                raise PlanError(f"rank {p} is in another collective than rank {mb.rank} "
                                f"({state.plan.collective.describe()}, call {seq} between them): every rank must "
                                "issue the same collectives in the same order")
            if p == state.helped and words[slot + _IN_KIND]:  # local_copies="peer": its input, for its block
                at = 8 * slot + _IN_HANDLE
                helped_in = self.mappings.open(bytes(mail[at:at + _HANDLE])) + words[slot + _IN_OFFSET]
            if words[slot + _OUT_KIND]:
                offset = words[slot + _OUT_OFFSET]
                handle = bytes(mail[8 * slot + _OUT_HANDLE:8 * slot + _OUT_HANDLE + _HANDLE])
                words[region] = seq  # ack: the slot may be reused
                remote[p] = self.mappings.open(handle) + offset
            else:
                words[region] = seq
        return remote, helped_in
