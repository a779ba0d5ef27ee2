"""Registered windows: buffers carved from one registered allocation per rank, whose calls skip the per-call
address exchange (peers' buffers at the same offset of the same window)."""

from __future__ import annotations

from collections import deque
from typing import Any

from hoccl_compiler.schema import Plan

from .. import pacing  # no CUDA at import: each loads cupy / cuda-bindings when first used
from ..errors import BufferError, HocclError, PlanError
from ..interop import DeviceBuffer, as_buffer, window_buffer
from ..mailbox import WINDOW
from ._base import (
    _DIGEST,
    _HANDLE,
    _OUT_KIND,
    _OUT_OFFSET,
    _SEQ,
    _SLOT_WORDS,
    _SLOTS,
    _WINDOW_INDEX,
    _PlanState,
)


class Window:
    """A buffer registered on every rank of a communicator (:meth:`Communicator.register_window`): calls on
    buffers inside it skip the per-call address exchange. ``close()`` (every rank, like registering)
    waits for this rank's calls and unmaps the peers' windows; the communicator's ``close()`` does it too."""

    def __init__(self, comm: Any, index: int, ptr: int, nbytes: int, peers: dict[int, int],
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


class WindowCalls:
    """The Communicator's window calls (see the module docstring)."""

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
        self._watchdog.raise_if_failed()
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
