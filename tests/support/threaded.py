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


def node_executors(plans: list, nodes: int, buffers_of: Callable[[int], list], *, setup: Callable | None = None,
                   secret: bytes = b"test-job", **options) -> list[tuple[int, Exception]]:
    """Every node of ``plans``' topology a GpuNodeExecutor in a thread of its own, joined by TCP over loopback,
    running the plans one after another over the same connections (``buffers_of(node)``: per plan, that node's
    {rank: (input, output)}; ``setup()`` first in each thread); returns the nodes' failures."""
    from hoccl_runtime.net.executor import GpuNodeExecutor

    transports = [GpuNodeExecutor.make_transport(plans[0], n, lanes=2, secret=secret) for n in range(nodes)]
    addresses = {n: t.listen() for n, t in enumerate(transports)}

    def node(n: int) -> None:
        if setup is not None:
            setup()
        mine = buffers_of(n)
        ex = GpuNodeExecutor(plans[0], n, mine[0], transports[n], reuse=True, **options)
        ex.connect(addresses)
        for plan, b in zip(plans, mine, strict=True):
            ex.run(plan, b)
        ex.close()

    errors = failures(in_threads(nodes, node))
    for t in transports:
        t.close()
    return errors
