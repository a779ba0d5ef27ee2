"""``hr.execute`` for a plan of several nodes: one process per node, each giving its own GPUs' buffers.

Under torchrun (``--nnodes N --nproc-per-node 1``, or ``scripts/tcp-nodes.sh``), every node's process calls
``hr.execute(plan, {rank: (input, output)} for the node's ranks)``. The first call of a plan connects the nodes: a
TCP transport per node (the job's secret from the store, the listening addresses exchanged through it, as the
network communicators do) and a reusable :class:`~hoccl_runtime.net.gpu.GpuNodeExecutor`, kept for the plan's
later calls. Each call enqueues the node's copies after the work already on ``streams`` and drives the network
part in the calling thread: it returns once this node's part is done (its outputs complete, whatever stream reads
them). Every node must execute the same plans in the same order, as with any collective.

The store: ``torch.distributed``'s default store once a process group is up, else a TCPStore at MASTER_ADDR and
MASTER_PORT + 1 (:func:`hoccl_runtime.bootstrap.bootstrap_store`), the world being WORLD_SIZE processes with RANK
this one's.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from collections.abc import Mapping
from typing import Any

from .errors import BufferError, HocclError

__all__ = ["execute_nodes", "close_nodes"]

_RUNS: dict[tuple[str, int], Any] = {}  # (plan content hash, node) -> (executor, transport)
_LOCK = threading.Lock()
_STORE: list = []


def _store(world: int, rank: int, timeout_s: float) -> Any:
    if not _STORE:
        from .bootstrap import bootstrap_store

        _STORE.append(bootstrap_store(rank, world, timeout_s))
    return _STORE[0]


def _node_of(plan: Any, buffers: Mapping[int, Any]) -> int:
    topo = plan.topology
    L, N = topo.gpus_per_node, topo.nodes
    ranks = sorted(buffers)
    node = ranks[0] // L if ranks and isinstance(ranks[0], int) else -1
    if ranks != list(range(node * L, node * L + L)) or not 0 <= node < N:
        raise BufferError(f"plan {plan.plan_id} is for {N} nodes of {L} GPUs, run one process per node: give the "
                          f"buffers of one node's {L} ranks (node n: ranks n*{L} .. n*{L}+{L - 1}); got ranks {ranks}")
    return node


def execute_nodes(plan: Any, buffers: Mapping[int, Any], streams: Mapping[int, Any] | None = None, *,
                  timeout_s: float = 60.0) -> None:
    """Run this node's part of ``plan`` (see the module docstring)."""
    from .executor import streams_by_rank
    from .interop import as_stream

    by_rank = streams_by_rank(streams)  # refused before anything connects
    node = _node_of(plan, buffers)
    N = plan.topology.nodes
    try:
        world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    except (KeyError, ValueError):
        raise HocclError(f"plan {plan.plan_id} is for {N} nodes: run one process per node under torchrun (--nnodes "
                         f"{N} --nproc-per-node 1, or scripts/tcp-nodes.sh), which sets WORLD_SIZE and RANK") from None
    if world != N:
        raise HocclError(f"plan {plan.plan_id} is for {N} nodes but this job has WORLD_SIZE={world} processes: run "
                         "one process per node of the plan")
    from ._trust import plan_uid

    key = (plan_uid(plan), node)
    with _LOCK:
        run = _RUNS.get(key)
        if run is None:
            run = _RUNS[key] = _connect(plan, node, buffers, _store(world, rank, timeout_s), key[0], timeout_s)
        executor = run[0]
        events = []
        from ._cuda_streams import event_create, event_destroy, event_record

        for r in sorted(buffers):  # the copies wait for the work already on each rank's stream
            s = as_stream(by_rank.get(r))
            event = event_create()
            event_record(event, s)
            events.append(event)
        try:
            executor.run(plan, buffers, after=events)
        finally:
            for event in events:
                with contextlib.suppress(Exception):
                    event_destroy(event)


def _connect(plan: Any, node: int, buffers: Mapping[int, Any], store: Any, uid: str, timeout_s: float) -> tuple:
    import torch.distributed as dist

    from ._store import exchange_addresses
    from .comm.netconf import job_secret
    from .comm.netconf import local_address as _local_address
    from .net.gpu import GpuNodeExecutor

    N = plan.topology.nodes
    prefixed = dist.PrefixStore(f"execute/{uid[7:31]}/", store)
    secret = job_secret(prefixed, node)
    transport = GpuNodeExecutor.make_transport(plan, node, "tcp", secret=secret, host=_local_address(), lanes=8)
    try:
        addresses = exchange_addresses(prefixed, "addr", node, N, transport.listen(), N, timeout_s, f"node {node}: ",
                                       lambda n: f"node {n}'s address for plan {plan.plan_id}")
        executor = GpuNodeExecutor(plan, node, buffers, transport, timeout_s=timeout_s, reuse=True, overlap=False)
        executor.connect(addresses)
    except BaseException:
        transport.close()
        raise
    return executor, transport


def close_nodes() -> None:
    """Leave every node executor's peers and close its transport (at exit, or for a test)."""
    with _LOCK:
        runs = list(_RUNS.values())
        _RUNS.clear()
    for executor, transport in runs:
        with contextlib.suppress(Exception):
            executor.close()
        with contextlib.suppress(Exception):
            transport.close()


atexit.register(close_nodes)
