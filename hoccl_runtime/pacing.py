"""Pacing: a rate cap for background collectives, with no kernel and no host thread.

Background traffic only has to finish inside the compute window, and copy engines running at full
rate cost the compute beside them HBM bandwidth and power. A paced call splits its copies into
pieces and gates each piece on a tick of a *clock stream*: a CUDA stream of host functions that
sleep (libc ``usleep``, called by CUDA's own callback thread: no Python, no GIL)::

    clock  ─wait(start)─[sleep T]─tick1─[sleep T]─tick2─ ...
    copies ─piece0──────────wait(tick1)─piece1──wait(tick2)─piece2 ...

Piece k starts no earlier than k*T after the first, and the call ends no earlier than tick n for n
pieces, so back-to-back calls keep the cap too and a call spread over a duration takes that long; a
piece that takes longer than T delays the next (the cap never speeds anything up). T is 250 us by
default (the communicator's ``pace_period_us``, HOCCL_PACE_PERIOD_US), longer for rates under
about 4.2 GB/s at 250 us (pieces stay at least 1 MiB: :func:`tick_us`). Everything is enqueued at
call time like any other call. ``usleep`` overshoots by the thread's timer slack (about 50 us on
Linux); the first paced call measures the overshoot and asks for that much less.

What pacing buys a load beside it is only the bytes it holds back: the clock stream and its waits cost
the compute nothing of their own; the copies at the rate cost what they cost.

Handshakes, the clock's start after the call's and the host function's dispatch still add time per call, so
a paced call delivers somewhat less than its rate. Every kind of paced call (one launch-cache entry) can keep
a :class:`Feedback`: its calls are timed with events, and the sleeps of later calls are scaled so that a call
lasts its bytes at the rate, learning from calls already finished (never waiting for one). It is off unless
the communicator's ``pace_feedback`` (HOCCL_PACE_FEEDBACK=1) is on, because beside a load the lengths it
learns from are not the ones inside the load's window and it can overshoot the cap; a cap that is exceeded is
worse than one that falls short. The measurements behind these choices: docs/architecture.md, "Pacing".

``usleep`` takes an ``unsigned int``; CUDA passes a host function one ``void *``: the sleep length
travels in that pointer, which the x86-64 and AArch64 calling conventions pass in the same register
as a first integer argument. Other architectures are refused with a clear error.
"""

from __future__ import annotations

import collections
import ctypes
import platform
import statistics
from typing import Any

from .errors import CudaError, HocclError

__all__ = ["Feedback", "Pacer", "PERIOD_US", "pieces", "tick_us"]

PERIOD_US = 250          # one tick of the clock stream
MIN_PIECE = 1 << 20      # a copy engine streams pieces under 1 MiB badly (measured 202 GB/s at 1 MiB)
MAX_TICK_US = 600e6      # usleep's argument is 32-bit: ticks of at most 10 minutes


def tick_us(rate_gbps: float, period_us: float = PERIOD_US) -> float:
    """The clock stream's tick for a rate: ``period_us``, or longer where a 1 MiB piece per period would
    exceed the rate (below about 4.2 GB/s at 250 us; e.g. a large collective spread over a long
    compute window)."""
    if not rate_gbps > 0:
        raise HocclError(f"rate_gbps={rate_gbps!r}: give a positive rate in GB/s (or None for full speed)")
    if not period_us > 0:
        raise HocclError(f"pacing period {period_us!r} us: give a positive number of microseconds")
    tick = max(period_us, MIN_PIECE / (rate_gbps * 1e3))
    if tick > MAX_TICK_US:
        raise HocclError(f"a rate of {rate_gbps:.3g} GB/s needs a tick of {tick / 1e6:.0f} s between 1 MiB pieces; "
                         f"pacing spreads a call over at most {MAX_TICK_US / 1e6:.0f} s per MiB: ask for a shorter "
                         "duration or a higher rate")
    return tick


def pieces(nbytes: int, rate_gbps: float, period_us: float | None = None) -> list[tuple[int, int]]:
    """(offset, bytes) pieces of a transfer of ``nbytes`` paced at ``rate_gbps`` with one piece per period
    (by default :func:`tick_us`)."""
    period_us = tick_us(rate_gbps) if period_us is None else period_us
    piece = max(MIN_PIECE, int(rate_gbps * 1e9 * period_us * 1e-6))
    return [(off, min(piece, nbytes - off)) for off in range(0, nbytes, piece)]


class Pacer:
    """The clock stream of one GPU and the host function that sleeps on it."""

    def __init__(self, device: int):
        if platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"):
            raise HocclError(f"pacing needs x86-64 or AArch64 (usleep as a CUDA host function); this is "
                             f"{platform.machine()}: call without rate_gbps")
        import cupy

        self.device = device
        libc = ctypes.CDLL(None)
        self._usleep = ctypes.cast(libc.usleep, ctypes.c_void_p).value
        lib = ctypes.CDLL("libcuda.so.1")
        self._launch = lib.cuLaunchHostFunc
        self._launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self._launch.restype = ctypes.c_int
        with cupy.cuda.Device(device):
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self.overshoot_us: float | None = None

    def sleep(self, stream: int, microseconds: int) -> None:
        """Enqueue a host-function sleep on ``stream`` (the clock stream's handle)."""
        err = self._launch(stream, self._usleep, max(0, int(microseconds)))
        if err:
            raise CudaError(f"cuLaunchHostFunc failed with CUresult {err}")

    def calibrate(self, rounds: int = 12, request_us: int = PERIOD_US) -> float:
        """Measure how much longer than asked a sleep on the clock stream takes (once per pacer)."""
        import cupy

        if self.overshoot_us is None:
            with cupy.cuda.Device(self.device):
                times = []
                for _ in range(3):
                    start, end = cupy.cuda.Event(), cupy.cuda.Event()
                    start.record(self.stream)
                    for _ in range(rounds):
                        self.sleep(self.stream.ptr, request_us)
                    end.record(self.stream)
                    end.synchronize()
                    times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / rounds)
            self.overshoot_us = max(0.0, statistics.median(times) - request_us)
        return self.overshoot_us

    def sleep_us(self, period_us: float) -> int:
        """What to ask usleep for so that one tick lasts ``period_us``."""
        return max(0, round(period_us - self.calibrate()))

    @property
    def handle(self) -> int:
        return int(self.stream.ptr)

    def describe(self) -> dict[str, Any]:
        return {"period_us": PERIOD_US, "overshoot_us": self.overshoot_us}


class Feedback:
    """Keeps back-to-back paced calls of one kind at their rate: each call's sleeps are its pieces' times
    at the rate times :attr:`scale`, and the scale follows the calls' measured lengths.

    ``begin``/``end`` record a pair of events around a call on its stream; at the next ``begin`` the
    pairs that have finished (without waiting for any) give the median length of a call, and the scale
    moves by ``GAIN`` times the relative error (at most ``MAX_STEP`` per update) within ``[MIN_SCALE,
    MAX_SCALE]``: a call never sleeps less than a quarter of its nominal time, however late a partner
    was. ``target_us`` is what one call should last (its paced bytes at the rate)."""

    # a gain under 1: measured on 2x H200 (2026-11-30), a call's length moved ~2.3x as much as its sleeps
    GAIN, MAX_STEP, MIN_SCALE, MAX_SCALE = 0.35, 0.15, 0.25, 1.5
    RING = 64  # calls in flight measured at most; later ones run unmeasured until some finish

    def __init__(self, pacer: Any):
        self.pacer, self.scale, self.target_us = pacer, 1.0, 0.0
        self._busy: collections.deque = collections.deque()
        self._free: list[tuple[Any, Any]] = []
        self.measured = 0  # calls measured so far

    def sleep(self, stream: int, microseconds: float) -> None:
        """The pacer's sleep, scaled: the launch list calls this, so a new scale reaches cached calls."""
        self.pacer.sleep(stream, round(microseconds * self.scale))

    def begin(self, stream: int) -> tuple[Any, Any] | None:
        """Learn from finished calls, then record a call's start on ``stream`` (None: not measured)."""
        from ._cuda_streams import event_record

        self.harvest()
        if len(self._busy) >= self.RING:
            return None
        pair = self._free.pop() if self._free else self._new_pair()
        event_record(pair[0], stream)
        return pair

    def _new_pair(self) -> tuple[Any, Any]:
        """Two timing events on the pacer's GPU (the caller's current device may be another)."""
        from ._cuda import on_device
        from ._cuda_streams import event_create

        device = getattr(self.pacer, "device", None)
        if device is None:
            return event_create(timing=True), event_create(timing=True)
        with on_device(device):
            return event_create(timing=True), event_create(timing=True)

    def end(self, pair: tuple[Any, Any], stream: int) -> None:
        from ._cuda_streams import event_record

        event_record(pair[1], stream)
        self._busy.append(pair)

    def harvest(self) -> None:
        from ._cuda_streams import event_elapsed_ms, event_query

        took = []
        while self._busy and event_query(self._busy[0][1]) == 0:
            pair = self._busy.popleft()
            took.append(event_elapsed_ms(*pair) * 1e3)
            self._free.append(pair)
        took = [t for t in took if t > 0]
        if took:
            self.update(statistics.median(took))
            self.measured += len(took)

    def update(self, took_us: float) -> None:
        """One call lasted ``took_us``: move the scale toward the one that makes it last ``target_us``
        (a call's length is about a fixed cost plus scale times its sleeps)."""
        if self.target_us <= 0:
            return
        step = self.GAIN * (took_us - self.target_us) / self.target_us
        step = max(-self.MAX_STEP, min(self.MAX_STEP, step))
        self.scale = min(self.MAX_SCALE, max(self.MIN_SCALE, self.scale - step))

    def close(self) -> None:
        """Destroy the events (their calls must have finished or been abandoned)."""
        from ._cuda_streams import event_destroy

        for pair in [*self._busy, *self._free]:
            for ev in pair:
                event_destroy(ev)
        self._busy.clear()
        self._free.clear()
