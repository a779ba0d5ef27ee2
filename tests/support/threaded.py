"""Running a test's "nodes" or "ranks" as threads of the test process."""

from __future__ import annotations

import threading
from collections.abc import Callable


def in_threads(count: int, fn: Callable[[int], object], timeout_s: float = 60) -> dict[int, object]:
    """``fn(i)`` for i in 0..count-1, each in its own thread, joined (each up to ``timeout_s``); returns
    {i: what fn returned, or the exception it raised}. A thread still running leaves no entry."""
    results: dict[int, object] = {}

    def run(i: int) -> None:
        try:
            results[i] = fn(i)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    return results


def failures(results: dict[int, object]) -> list[tuple[int, Exception]]:
    return [(i, r) for i, r in sorted(results.items()) if isinstance(r, Exception)]
