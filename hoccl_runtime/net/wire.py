"""The network executors' wire protocol: what a node tells another in a write's 32-bit immediate.

* Data: ``(target GPU's local index << 24) | its receive position`` (:class:`~hoccl_runtime.net.routes.Routes`).
* Credits: ``CREDIT | (sending GPU's local index << 24) | the send position they let go``.
* Plan notices: ``PLAN_HELLO | 24 bits of the plan id's CRC``, first of every run of a reusable executor.
* Run-done notices: ``RUN_DONE | (run number mod 2**24)``: the node's rings are free again. Sent at the end of
  every run of a reusable executor (its next run, and every other node's, waits for them before sending, and
  :meth:`~hoccl_runtime.net.host.HostNodeExecutor.leave` for the last); the end barrier of a single-run one.

Local GPU indices 126 and 127 are the notices' (``0x7E``, ``0x7F``): a node drives at most 126 GPUs. The roles
are the plan's transfer roles, in the plan format's order.
"""

from __future__ import annotations

from hoccl_compiler.schema import Role

__all__ = ["CREDIT", "RUN_DONE", "PLAN_HELLO", "LOCAL", "NATIVE", "SEND_FORWARD", "RDMA", "RECV_FORWARD"]

CREDIT = 1 << 31
RUN_DONE = 0x7F000000    # a node's run n is through: 0x7f000000 | (n mod 2**24)
PLAN_HELLO = 0x7E000000  # first notice of every run of a reusable executor: the plan's id, 24 bits
LOCAL, NATIVE, SEND_FORWARD, RDMA, RECV_FORWARD = (int(r) for r in Role)  # the plan's roles, as plain ints
