"""The network executors' wire protocol: what a node tells another in a write's 32-bit immediate.

* Data: ``(target GPU's local index << 24) | HALF (second half of the rings) | its receive position`` (23 bits;
  :class:`~hoccl_runtime.net.routes.Routes`). HALF says which half of the receive ring a reusable executor's run on
  alternate halves (HOCCL_NET_OVERLAP) writes: a write with immediate over RDMA completes at its receiver with the
  immediate alone, not where it landed, and a peer may already be one run ahead.
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

__all__ = ["CREDIT", "HALF", "POSITIONS", "RUN_DONE", "PLAN_HELLO", "LOCAL", "NATIVE", "SEND_FORWARD", "RDMA",
           "RECV_FORWARD", "data_imm"]

CREDIT = 1 << 31
HALF = 1 << 23           # a data write fills the second half of its receive ring
POSITIONS = HALF - 1     # the mask of a data write's receive position (a credit's send position takes 24 bits)
RUN_DONE = 0x7F000000    # a node's run n is through: 0x7f000000 | (n mod 2**24)
PLAN_HELLO = 0x7E000000  # first notice of every run of a reusable executor: the plan's id, 24 bits
LOCAL, NATIVE, SEND_FORWARD, RDMA, RECV_FORWARD = (int(r) for r in Role)  # the plan's roles, as plain ints


def data_imm(local: int, position: int, half: int) -> int:
    """The immediate of a data write: to local GPU ``local``'s receive position ``position``, in ring half ``half``
    (0 or 1; 0 without alternate halves)."""
    return (local << 24) | (HALF if half else 0) | position
