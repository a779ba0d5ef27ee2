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


def check_fake_gpu_runs(plans: list, nodes: int, rng, *, timeout_s: float = 10, **options) -> None:
    """``plans`` run in turn by GpuNodeExecutors on the fake CUDA (installed by the test; each node a process of its
    own to it), inputs from ``rng`` (a NumPy Generator) and outputs poisoned: no node fails and every output is the
    plan's replay. ``options``: the executors' keywords (slots, ...)."""
    import fake_cuda
    import numpy as np
    from fake_cuda import dev

    from hoccl_compiler import replay

    G, L = plans[0].num_ranks, plans[0].topology.gpus_per_node
    data = [{r: (rng.integers(0, 256, p.ranks.input_bytes[r], dtype=np.uint8),
                 np.full(p.ranks.output_bytes[r], 0xA5, np.uint8)) for r in range(G)} for p in plans]
    errors = node_executors(plans, nodes, lambda n: [{r: (dev(i, 0), dev(o, 0)) for r, (i, o) in d.items()
                                                      if r // L == n} for d in data], timeout_s=timeout_s,
                            setup=lambda: setattr(fake_cuda._current, "process", threading.get_ident()), **options)
    assert not errors, str(errors)[:1500]
    for p, d in zip(plans, data, strict=True):
        want = replay(p, [d[r][0] for r in range(G)]).outputs
        for r in range(G):
            assert np.array_equal(d[r][1], want[r]), (p.collective.kind, r)
