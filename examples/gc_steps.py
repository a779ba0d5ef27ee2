"""Python's cyclic garbage collector in the training examples: as Python runs it, or torchtitan's way.

``--gc-every N`` (torchtitan's ``GarbageCollection``, its ``gc_freq``): the collector is turned off for the run
after one full collection, and a generation-1 collection runs after every N steps (every variant's steps counted
together), between steps, never inside a timed one. ``--gc-every 0`` (the default) leaves the collector as Python
runs it. Either way the collections Python runs by itself are timed through ``gc.callbacks``, so a run says how
much of its time they took and how long the longest was (session 35 saw full collections of 100-185 ms inside
training processes). The setting is process-wide, so every variant of an invocation runs under the same one.
"""

from __future__ import annotations

import argparse
import gc
import time

__all__ = ["Collector", "add_option"]


def _refusal(every: int) -> str | None:
    return None if every >= 0 else f"--gc-every {every}: give 0 (Python's own collector) or a number of steps >= 1"


def _steps(text: str) -> int:
    every = int(text)
    if _refusal(every):
        raise argparse.ArgumentTypeError(_refusal(every))
    return every


def add_option(parser: argparse.ArgumentParser) -> None:
    """The training examples' ``--gc-every N`` (``args.gc_every``), a negative N refused naming it."""
    parser.add_argument("--gc-every", type=_steps, default=0, metavar="N",
                        help="Python's collector off, a gen-1 collection after every N steps between steps "
                        "(torchtitan's gc_freq; examples/gc_steps.py); 0: the collector as Python runs it")


class Collector:
    """Counts a run's steps and collections; ``every`` > 0: the collector off, a gen-1 collection per ``every``
    steps. Use as a context manager: on exit the collector is as it was found."""

    def __init__(self, every: int = 0):
        if _refusal(every):
            raise ValueError(_refusal(every))
        self.every = every
        self.steps = 0
        self.auto_ms: list[float] = []  # the collections Python ran by itself
        self.manual_ms: list[float] = []  # the gen-1 collections between steps
        self._began: float | None = None
        self._manual = False  # inside step_done's own collection
        self._was_enabled = gc.isenabled()

    def __enter__(self) -> Collector:
        if self.every:
            gc.collect()
            gc.disable()
        gc.callbacks.append(self._phase)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self._phase)
        if self._was_enabled:
            gc.enable()

    def _phase(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        elif self._began is not None:
            ms = (time.perf_counter() - self._began) * 1e3
            self._began = None
            if not self._manual:
                self.auto_ms.append(ms)

    def step_done(self) -> None:
        """Call after each step, outside its timed window: runs the gen-1 collection when one is due."""
        self.steps += 1
        if self.every and self.steps % self.every == 0:
            self._manual = True
            t0 = time.perf_counter()
            try:
                gc.collect(1)
            finally:
                self._manual = False
            self.manual_ms.append((time.perf_counter() - t0) * 1e3)

    def summary(self) -> dict:
        """The figures a run reports: the mode, and count, total and longest of both kinds of collection."""
        def part(ms: list[float]) -> dict:
            return {"count": len(ms), "total_ms": sum(ms), "max_ms": max(ms, default=0.0)}
        return {"gc_every": self.every, "steps": self.steps, "automatic": part(self.auto_ms),
                "between_steps": part(self.manual_ms)}

    def line(self) -> str:
        """One line for the run's report."""
        s = self.summary()
        a, m = s["automatic"], s["between_steps"]
        mode = f"off, a gen-1 collection every {self.every} steps" if self.every else "as Python runs it"
        out = (f"Python's collector: {mode}; {a['count']} collections of its own, {a['total_ms']:.1f} ms in all, "
               f"longest {a['max_ms']:.1f} ms")
        if self.every:
            out += f"; {m['count']} between steps, {m['total_ms']:.1f} ms in all, longest {m['max_ms']:.1f} ms"
        return out
