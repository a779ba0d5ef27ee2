"""Timer slack: how much later than asked the kernel may wake a sleeping thread (Linux, one value per thread).

The threads that drive network calls poll with sleeps of 20-50 us. Under the kernel's default slack of 50 us a
50 us sleep lasted 75-125 us, and a call waits through several; with a 1 us slack a 64 KiB send/recv over TCP
took 0.83 and 0.92 of the time through the executor, and 0.73-0.85 through the torch backend, on the 1x H200
(docs/results/2026-12-01-s19/slack*.txt). :func:`fine_sleeps` sets the slack of the calling thread for a block
(``HOCCL_TIMER_SLACK_NS``, 0: leave it) and puts the old value back after. :func:`nap` is those loops' sleep, or
with 0 (``HOCCL_NET_POLL_US=0``) a yield of the CPU instead: the loop spins, so its CPU never goes idle and a wake
never waits for one (on 1x H100 hosts the network proxy loop's longest 10 us pause per call lasted 57-144 us at the
median and 124-1,136 us at the 90th percentile inside training, 2026-12-06).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .settings import env_int

__all__ = ["fine_sleeps", "nap", "slack_setting"]

PR_SET_TIMERSLACK, PR_GET_TIMERSLACK = 29, 30
_libc: ctypes.CDLL | None | bool = None


def _prctl() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        _libc = False
        if sys.platform.startswith("linux"):
            try:
                _libc = ctypes.CDLL(None, use_errno=True)
                _libc.prctl  # noqa: B018 - raises AttributeError where there is none
            except (OSError, AttributeError):
                _libc = False
    return _libc or None


def slack_setting() -> int:
    """``HOCCL_TIMER_SLACK_NS`` (default 1000; 0: leave the kernel's), checked."""
    return env_int("HOCCL_TIMER_SLACK_NS", 1000, 0, 50_000_000)


@contextmanager
def fine_sleeps(ns: int | None = None) -> Iterator[None]:
    """The calling thread's timer slack at ``ns`` nanoseconds (default: :func:`slack_setting`) for the block."""
    if ns is None:
        ns = slack_setting()
    libc = _prctl() if ns else None
    before = libc.prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) if libc is not None else -1
    if before <= 0 or before == ns or libc.prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0) != 0:
        yield
        return
    try:
        yield
    finally:
        libc.prctl(PR_SET_TIMERSLACK, before, 0, 0, 0)


def nap(seconds: float) -> None:
    """A poll loop's pause of ``seconds``; 0 or less: no sleep, the CPU yielded (``sched_yield``, which lets the GIL go
    too), so the loop keeps its CPU and looks again at once."""
    if seconds > 0:
        time.sleep(seconds)
    else:
        os.sched_yield()
