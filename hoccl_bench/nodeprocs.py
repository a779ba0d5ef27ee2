"""Running "nodes" as processes of one machine: one spawned process per node, their listening addresses
exchanged through the parent (what torchrun's store does between real nodes). Used by the inter-node
benchmark (examples/bench_internode.py) and the host-executor tests; handy to try a plan across
"nodes" on one machine.

    def body(node, exchange, plan_json):          # module-level: it is pickled into the child
        transport = ...; addresses = exchange(transport.listen()); ...; return result
    results = run_node_processes(body, nodes=2, args=(plan_json,))   # {node: result}

A node that raises makes the call raise at once, with that node's traceback; every process is joined
or killed before the call returns; no step waits longer than ``timeout_s``.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
import traceback
from collections.abc import Callable
from typing import Any

from hoccl_runtime.errors import HocclTimeoutError, TransportError

__all__ = ["run_node_processes"]


def _node_main(body: Callable, node: int, args: tuple, up: Any, box: Any, timeout_s: float) -> None:
    def exchange(address: str) -> dict[int, str]:
        up.put(("address", node, address))
        return box.get(timeout=timeout_s)

    try:
        up.put(("result", node, body(node, exchange, *args)))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        up.put(("error", node, traceback.format_exc()))


def run_node_processes(body: Callable, nodes: int, args: tuple = (), timeout_s: float = 300.0) -> dict[int, Any]:
    """``body(node, exchange, *args)`` in one spawned process per node; returns {node: its result}."""
    ctx = mp.get_context("spawn")
    up = ctx.Queue()
    boxes = [ctx.Queue() for _ in range(nodes)]
    procs = [ctx.Process(target=_node_main, args=(body, n, args, up, boxes[n], timeout_s), daemon=True)
             for n in range(nodes)]
    for p in procs:
        p.start()
    addresses: dict[int, str] = {}
    results: dict[int, Any] = {}
    try:
        deadline = time.monotonic() + timeout_s
        while len(results) < nodes:
            try:
                kind, node, value = up.get(timeout=1.0)
            except queue.Empty:
                gone = [n for n, p in enumerate(procs) if not p.is_alive() and n not in results]
                if gone and up.empty():
                    raise TransportError(f"node process(es) {gone} exited without a result (exit codes "
                                         f"{[procs[n].exitcode for n in gone]})") from None
                if time.monotonic() > deadline:
                    raise HocclTimeoutError(f"nodes {sorted(set(range(nodes)) - set(results))} gave no result "
                                            f"within {timeout_s:g} s") from None
                continue
            if kind == "error":
                raise TransportError(f"node {node} failed:\n{value}")
            if kind == "address":
                addresses[node] = value
                if len(addresses) == nodes:
                    for b in boxes:
                        b.put(dict(addresses))
            else:
                results[node] = value
        return results
    finally:
        done = len(results) == nodes  # every node returned: let them exit; else they are stopped
        for p in procs:
            p.join(30 if done else 0.5)
            if p.is_alive():
                p.kill()
                p.join(5)
