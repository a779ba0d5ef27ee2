"""The proxy's loop: queued calls run in order, each once its stream has reached it (its START flag), then its
DONE given. A thread of the training process (:class:`~hoccl_runtime.comm.net.NetCommunicator` with
``HOCCL_NET_PROXY=thread``, the node leaders of :class:`~hoccl_runtime.comm.nodenet.NodeNetCommunicator`) or of the
proxy process (:mod:`hoccl_runtime.net.proxyproc`)."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any

from .._timer import fine_sleeps, nap, slack_setting
from ..flags import reached

__all__ = ["CallProxy", "DoneOnce", "StartFlag", "Stopping"]


class Stopping(Exception):  # noqa: N818 - not an error: the proxy closes while a call waits for its stream
    """Raised by a call's ``reached()`` when the proxy is closing (the call is then released, not run on)."""


class DoneOnce:
    """A call's DONE, written once: early, by the executor's ``release`` (its copies are through while its last writes
    still leave), or else by the proxy's finish. A second write would let the stream's next wait pass before its call
    ran (DONE is a flag the stream waits for and resets, not a counter). ``flag`` None: a call whose stream waits for
    no DONE (:class:`StartFlag` with a count); ``written`` still says the call was released."""

    __slots__ = ("flag", "written")

    def __init__(self, flag: Any):
        self.flag, self.written = flag, False

    def __call__(self) -> None:
        if not self.written:
            self.written = True
            if self.flag is not None:
                self.flag.write(1)


class StartFlag:
    """A call's START as its proxy sees it. ``count`` None: a flag the stream sets to 1 and the proxy resets to 0 once
    seen (the stream then waits for DONE, so its next START cannot come before the reset). A count: a counter the
    stream moves on to ``count`` (HOCCL_NET_ONE_STREAM=2, whose streams wait for no DONE: the next call may set its
    START before the proxy looked at this one's, which a counter keeps and a flag would lose)."""

    __slots__ = ("flag", "count")

    def __init__(self, flag: Any, count: int | None = None):
        self.flag, self.count = flag, count

    def seen(self) -> bool:
        return self.flag.read() == 1 if self.count is None else reached(self.flag, self.count)

    def reset(self) -> None:
        if self.count is None:
            self.flag.write(0)


class CallProxy:
    """The proxy thread: runs queued calls in order, each once its START flag is set, then sets DONE.

    ``started(call)`` / ``reset_start(call)`` / ``finish(call)`` are the flag operations and ``run(call)`` does
    the work, so the ordering logic is testable without a GPU. Once a call failed, the later ones are not run but
    handed to ``skip(call)`` (to release what they hold) and their streams released as well.

    ``early=True``: a call runs as soon as it is taken, before its stream reaches it, as ``run(call, reached)``;
    ``reached()`` says whether the stream has (START seen, and then reset, once) and raises :class:`Stopping` when
    the proxy closes. The run must not let the stream go (DONE) before ``reached()`` said so; the proxy waits for
    it before ``finish`` in any case, so START is always reset before DONE (else the stream's next START could be
    lost). What this buys: a run's set-up (its plan notice, the wait for the other nodes, the gates of its first
    staging copies) is done while the stream still computes, so a send's first write leaves as soon as its staging
    copy is through."""

    def __init__(self, run: Any, started: Any, reset_start: Any, finish: Any, *, poll_s: float = 50e-6,
                 name: str = "hoccl-proxy", skip: Any = None, early: bool = False):
        self._run, self._started, self._reset, self._finish = run, started, reset_start, finish
        self._skip = skip  # what a call not run (an earlier one failed) needs done instead, if anything
        self._early = early
        self.poll_s = poll_s
        self._slack_ns = slack_setting()  # read here: a bad value raises in the caller's thread
        self._calls: queue.Queue = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Any) -> None:
        with self._lock:
            self._pending += 1
            self._idle.clear()
        self._calls.put(call)

    def _loop(self) -> None:
        with fine_sleeps(self._slack_ns):  # this thread's poll sleeps last about what they ask
            self._serve()

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            reached = self._reached(call)
            try:
                try:
                    if self._early and self.error is None:
                        self._run(call, reached)
                    else:
                        self._until(reached)
                        if self.error is None:
                            self._run(call)
                        elif self._skip is not None:
                            self._skip(call)
                except Stopping:
                    raise
                except BaseException as exc:  # noqa: BLE001 - kept, raised by the caller's next call
                    self.error = exc
                self._until(reached)  # START reset before DONE, whatever the run did
            except Stopping:
                self._abandon(call)
                return
            self._finish(call)  # releases the stream even after an error: nothing waits forever
            with self._lock:
                self._pending -= 1
                if not self._pending:
                    self._idle.set()

    def _reached(self, call: Any) -> Any:
        """``reached()`` of ``call``: whether its stream has reached it (START seen, reset the first time)."""
        seen = []

        def reached() -> bool:
            if seen:
                return True
            if self._stop:
                raise Stopping
            if not self._started(call):
                return False
            self._reset(call)
            seen.append(True)
            return True
        return reached

    def _until(self, reached: Any) -> None:
        while not reached():  # the stream has not reached the call yet
            nap(self.poll_s)

    def wait_idle(self, timeout_s: float) -> bool:
        return self._idle.wait(timeout_s)

    def wait_pending(self, most: int, timeout_s: float) -> bool:
        """Until at most ``most`` submitted calls are unfinished (sleeping, so without the GIL); False on timeout.

        Why: this thread is Python, so it runs only while the application's thread lets go of the GIL. A CUDA call
        that blocks holding it (seen on the 1x H200 in Adam's foreach step, with the launch queue full behind a
        network call's DONE wait) then stops the proxy, and so the GPU, for good. Bounding how many calls the
        application may issue ahead of the proxy bounds the GPU work queued behind an unfinished call."""
        deadline = time.monotonic() + timeout_s
        while self._pending > most and self.error is None:
            if time.monotonic() > deadline:
                return False
            nap(self.poll_s)
        return True

    def _abandon(self, call: Any) -> None:
        """A call that will never run (closing): release what it holds and its stream."""
        with contextlib.suppress(Exception):
            if self._skip is not None:
                self._skip(call)
            self._finish(call)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop; calls whose streams never reached them are released (skip, then their DONE), not left waiting."""
        self._stop = True
        self._calls.put(None)
        self._thread.join(timeout_s)
        while True:
            try:
                call = self._calls.get_nowait()
            except queue.Empty:
                return
            if call is not None:
                self._abandon(call)
