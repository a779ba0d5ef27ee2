"""The network executors, one process per node (the names this module always had; each part lives in its own file):

* :mod:`~hoccl_runtime.net.wire`: the immediates nodes exchange (data, credits, notices);
* :mod:`~hoccl_runtime.net.routes`: where every network chunk goes, the same on every node;
* :mod:`~hoccl_runtime.net.host`: :class:`HostNodeExecutor`, the protocol on host buffers (the reference);
* :mod:`~hoccl_runtime.net.gpu`: :class:`GpuNodeExecutor`, the same with copy engines and gated copies.
"""

from __future__ import annotations

from .gpu import MAX_SLOTS, RING_BYTES, GpuNodeExecutor, PreparedRun, ring_slots
from .host import HostNodeExecutor
from .routes import Routes
from .wire import CREDIT, PLAN_HELLO, RUN_DONE

__all__ = ["HostNodeExecutor", "GpuNodeExecutor", "PreparedRun", "RING_BYTES", "MAX_SLOTS", "ring_slots", "Routes",
           "CREDIT", "PLAN_HELLO", "RUN_DONE"]
