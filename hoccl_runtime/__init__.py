"""HOCCL runtime: replays compiled plans on DMA copy engines (no kernel, no SM).

    >>> import hoccl_runtime as hr
    >>> plan = hr.load_plan("schedules/allgather-h200x2-1GiB.json")
    >>> hr.execute(plan, {0: (in0, out0), 1: (in1, out1)}, streams={0: s0, 1: s1})

Single-node plans run from one process driving all of the plan's GPUs (``execute``, nccl-tests'
``-g`` mode) or from one process per GPU under torchrun (``init()`` returns a communicator with
torch-like calls); multi-node plans run one process per node with
:class:`hoccl_runtime.net.executor.GpuNodeExecutor` over a transport (TCP, or RDMA verbs). Importing it
needs no GPU: CUDA is loaded on first use. It reads the compiler's plan schema and little else of
the compiler.
"""

from __future__ import annotations

from typing import Any

from .errors import (
    BufferError,
    CudaError,
    HocclError,
    HocclTimeoutError,
    PlanError,
    StreamError,
    TransportError,
    UnsupportedPlanError,
)

__all__ = ["load_plan", "execute", "default_executor", "Executor", "init", "Communicator", "Window", "CommunicatorAPI",
           "HocclError", "PlanError", "CudaError",
           "BufferError", "StreamError", "HocclTimeoutError", "TransportError", "UnsupportedPlanError"]

_default = None


def load_plan(path):
    """Load and validate a plan file (the runtime's only input from the compiler)."""
    from .plans import load_plan as _load

    return _load(path)


def default_executor():
    global _default
    if _default is None or _default.closed:
        from .executor import Executor

        _default = Executor()
    return _default


def execute(plan, buffers, streams=None, *, sync="events") -> None:
    """Enqueue ``plan`` on copy engines for every rank in ``buffers`` ({rank: (input, output)}), ordered
    after the work already on ``streams`` ({rank: stream}; None: each device's legacy default stream) and
    before the work enqueued there next. Returns at once. ``sync="flags"`` orders the streams with
    stream memory operations on host flags (the cross-process protocol) instead of CUDA events. The
    default executor reads HOCCL_LOCAL_COPIES when first made ("peer": own blocks through a peer GPU,
    no same-GPU copy; ``Executor(local_copies=...)`` for one of each).

    A plan of several nodes runs one process per node (torchrun ``--nnodes N --nproc-per-node 1``), each giving
    the buffers of its node's ranks: the first call connects the nodes over TCP (through torch's store), and each
    call returns once this node's part is done (:mod:`hoccl_runtime.nodes`). ``plan`` may be the path of a plan
    file, and ``buffers`` a list of the (input, output) pairs in rank order."""
    from .executor import call_args

    plan, buffers = call_args(plan, buffers)
    if plan.topology.nodes > 1:
        from .nodes import execute_nodes

        execute_nodes(plan, buffers, streams)
        return
    default_executor().execute(plan, buffers, streams, sync=sync)


def __getattr__(name: str) -> Any:
    if name == "Executor":
        from .executor import Executor

        return Executor
    if name == "CommunicatorAPI":
        from .api import CommunicatorAPI

        return CommunicatorAPI
    if name == "init":
        from .bootstrap import init

        return init
    if name in ("Communicator", "Window"):
        from . import comm

        return getattr(comm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
