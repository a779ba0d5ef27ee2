"""Registered windows: buffers carved from one registered allocation per rank, whose calls skip the per-call
address exchange (peers' buffers at the same offset of the same window). :class:`WindowTable` is the part of the
Communicator that owns them: the windows, their mappings' pins, the window calls' entries still to be checked
and the first mismatch found; it writes and reads the mailbox through the :class:`~.rendezvous.Mailbox` part."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ..errors import BufferError, HocclError, PlanError
from ..interop import DeviceBuffer, window_buffer
from ..mailbox import WINDOW
from ._base import (
    _DIGEST,
    _HANDLE,
    _OUT_KIND,
    _OUT_OFFSET,
    _SEQ,
    _WINDOW_INDEX,
    _PlanState,
)

__all__ = ["Window", "WindowTable"]


class Window:
    """A buffer registered on every rank of a communicator (:meth:`Communicator.register_window`): calls on
    buffers inside it skip the per-call address exchange. ``close()`` (every rank, like registering)
    waits for this rank's calls and unmaps the peers' windows; the communicator's ``close()`` does it too."""

    def __init__(self, table: Any, index: int, ptr: int, nbytes: int, peers: dict[int, int],
                 handles: tuple[bytes, ...], tensor: Any = None):
        self.table, self.index, self.ptr, self.nbytes = table, index, ptr, nbytes
        self.peers = peers  # peer rank -> the local address of its window
        self.handles = handles
        # the registered object itself, held until the window closes: its memory cannot go back to an
        # allocator (and to other tensors) while the peers may still write into it
        self.tensor = tensor
        self.closed = False

    def close(self) -> None:
        self.table.deregister(self)
        self.tensor = None

    def __enter__(self) -> Window:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{len(self.peers)} peers mapped"
        return f"Window({self.index}, rank {self.table.rank}, {self.ptr:#x}, {self.nbytes} bytes, {state})"


class WindowTable:
    """Rank ``rank``'s registered windows (see the module docstring), over its ``mailbox`` (a
    :class:`~.rendezvous.Mailbox`) and ``mappings`` (a :class:`~.rendezvous.PeerMappings`). ``store_get(key, peer,
    what)`` reads a partner's registration from the store; ``drain()`` waits for this rank's calls and drops the
    launch lists that name a window's mappings before they close; ``lock`` is the owner's call lock."""

    def __init__(self, rank: int, world: int, device: int, store: Any, mailbox: Any, mappings: Any,
                 store_get: Callable[[str, int, str], bytes], lock: threading.Lock | None = None,
                 drain: Callable[[], None] | None = None):
        self.rank, self.world, self.device, self.store = rank, world, device, store
        self.mailbox, self.mappings, self.store_get = mailbox, mappings, store_get
        self.lock = lock or threading.Lock()
        self.drain: Callable[[], None] = drain or (lambda: None)
        self.windows: list[Window] = []
        self.count = 0
        # window calls whose partner's entry was not there yet: peer -> (seq, digest, window, offset, call)
        self.pending: dict[int, deque] = {}
        # window calls seen before: (call, stream, rate, input, output) -> what the call path needs, or None
        self.calls: dict[tuple, tuple | None] = {}
        self.error: PlanError | None = None  # the first mismatch check() found, raised after a launch
        self.closed = False
        mailbox.while_waiting = self.check
        mailbox.first_unread = self.first_unread

    def register(self, tensor: Any) -> Window:
        """Register ``tensor`` on every rank (the collective call behind Communicator.register_window)."""
        buf = window_buffer(tensor, self.rank, self.device)
        if not buf.nbytes:
            raise BufferError(f"rank {self.rank}'s window has 0 bytes: register a buffer with bytes in it")
        for w in self.windows:
            if buf.ptr < w.ptr + w.nbytes and w.ptr < buf.ptr + buf.nbytes:
                raise BufferError(f"rank {self.rank}'s window at {buf.ptr:#x} ({buf.nbytes} bytes) overlaps window "
                                  f"{w.index} at {w.ptr:#x} ({w.nbytes} bytes): close that one first")
        with self.lock:
            k = self.count
            self.count += 1
            # each rank's value: b"+" and its handle, offset and size, or b"!" and why it could not share its buffer
            try:
                handle, offset = self.mappings.export(buf, "window")
            except HocclError as exc:  # the others hear of it at once instead of waiting for their timeout
                self.store.set(f"window/{k}/{self.rank}", b"!" + str(exc).encode())
                raise
            self.store.set(f"window/{k}/{self.rank}", b"+" + handle + offset.to_bytes(8, "little") +
                           buf.nbytes.to_bytes(8, "little"))
            got = {p: self.store_get(f"window/{k}/{p}", p, f"register window {k}")
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
                    peers[p] = self.mappings.pin(handles[p]) + int.from_bytes(v[_HANDLE:_HANDLE + 8], "little")
            except Exception:
                for p in peers:
                    self.mappings.unpin(handles[p])
                raise
            win = Window(self, k, buf.ptr, buf.nbytes, peers, tuple(handles.values()), tensor)
            self.windows.append(win)
            self.calls.clear()
        return win

    def deregister(self, win: Window) -> None:
        with self.lock:
            if win.closed:
                return
            win.closed = True
            if self.closed:  # close() released every mapping
                return
            self.windows.remove(win)
            self.calls.clear()
            self.drain()  # my copies through the peers' mappings have landed, the launch lists naming them gone
            for handle in win.handles:
                self.mappings.unpin(handle)

    def close(self) -> None:
        """Every window closed (the owner releases the mappings)."""
        self.closed = True
        for w in self.windows:
            w.closed, w.tensor = True, None
        self.windows, self.calls = [], {}

    def by_index(self, index: int) -> Window | None:
        return next((w for w in self.windows if w.index == index), None)

    def find(self, state: _PlanState, inp: DeviceBuffer | None, out: DeviceBuffer | None) -> tuple[Window, int] | None:
        """(window, offset) of the call's buffer (its output, or its input on a rank without an output) when it
        lies in a registered window and the plan may take that path; else None. (A scan of the few windows:
        a repeated single call finds its answer in ``calls``.)"""
        buf = out if out is not None else inp
        if buf is None or not state.windows:
            return None
        return next(((w, buf.ptr - w.ptr) for w in self.windows
                     if w.ptr <= buf.ptr and buf.ptr + buf.nbytes <= w.ptr + w.nbytes), None)

    def remote(self, state: _PlanState, win: Window, offset: int) -> dict[int, int]:
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

    def entries(self, state: _PlanState, index: int, offset: int) -> None:
        """A call on window ``index``: write my entry for each partner without waiting for theirs (they are
        checked when there, after the launch: :meth:`check`); wait only where the slot still holds my
        rendezvous entry of 4 calls before, which the partner has not read (it carries an address)."""
        mb = self.mailbox
        words, seqs, pending = mb.words, mb.seq, self.pending
        digest, what = state.digest, state.plan.collective
        for p in state.partners:
            seq = seqs[p] + 1
            slot = mb.claim(p, seq, rendezvous=False)
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

    def any_pending(self) -> bool:
        return any(self.pending.values())

    def first_unread(self, p: int) -> int | None:
        """The sequence number of p's first window entry still to be checked (None: none)."""
        queue = self.pending.get(p)
        return queue[0][0] if queue else None

    def check(self, before: tuple[int, int] | None = None) -> None:
        """Check the partners' entries for my window calls that are there now, in order, and acknowledge
        them; ``before=(p, seq)``: p's entries before seq must all be there (p has written seq). A mismatch is
        kept (the first one) and raised by :meth:`raise_error` once this rank's call is launched: a rank that
        raised before its launch would leave its partners' streams waiting for it."""
        words = self.mailbox.words
        for p, pending in self.pending.items():
            if not pending:
                continue
            checked = False
            while pending:
                seq, digest, index, offset, what = pending[0]
                slot = self.mailbox.slot_in(p, seq)
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
                    self.mismatch(PlanError(
                        f"rank {p} did not pass a buffer of a registered window in call {seq} between them, where "
                        f"rank {self.rank}'s {what.describe()} used window {index} at offset {offset}: pass buffers "
                        "of the same window at the same offset on every rank, or unregistered buffers on every rank"))
                elif theirs != digest:
                    self.mismatch(PlanError(
                        f"rank {p} is in another collective than rank {self.rank} ({what.describe()}, call {seq} "
                        "between them): every rank must issue the same collectives in the same order"))
                elif where != index or at != offset:
                    self.mismatch(PlanError(
                        f"rank {p}'s buffer is at offset {at} of window {where}, rank {self.rank}'s at offset "
                        f"{offset} of window {index} ({what.describe()}, call {seq} between them): peers write to a "
                        "buffer at the same offset of the same window on every rank"))
            if checked:
                self.mailbox.ack(p)

    def mismatch(self, error: PlanError) -> None:
        if self.error is None:
            self.error = error

    def raise_error(self) -> None:
        error, self.error = self.error, None
        if error is not None:
            raise error
