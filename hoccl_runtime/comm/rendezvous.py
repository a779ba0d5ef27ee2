"""The per-call address exchange through the mailbox in shared host memory (one slot structure:
hoccl_runtime.mailbox) and the IPC mappings of the partners' buffers (hoccl_runtime.ipc)."""

from __future__ import annotations

import contextlib
import time

from .. import _cuda  # no CUDA at import: each loads cupy / cuda-bindings when first used
from .._cuda_memory import ipc_close_mem_handle, ipc_open_mem_handle
from ..errors import HocclTimeoutError, PlanError
from ..interop import DeviceBuffer
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


class Rendezvous:
    """The Communicator's mailbox protocol (see the module docstring)."""

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
        with _cuda.on_device(self.device):
            return ipc_open_mem_handle(handle)

    def _unmap(self, base: int) -> None:
        with _cuda.on_device(self.device), contextlib.suppress(Exception):  # the peer may have freed it
            ipc_close_mem_handle(base)

    def _wait(self, ready, peer: int, what: str) -> None:
        if ready():
            return
        deadline = time.monotonic() + self.timeout_s
        spins = 0
        while not ready():
            spins += 1
            if spins > 2000:
                self._watchdog.raise_if_failed()
                if spins % 1000 == 0 and self._watchdog.dead_peer() == peer:
                    self._watchdog.fail(peer)
                    raise self._watchdog.failure
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"rank {peer} did not {what} within {self.timeout_s:.0f} s (rank "
                                            f"{self.rank} is waiting for it); is it alive and issuing the same "
                                            "collectives?")
                time.sleep(50e-6)
