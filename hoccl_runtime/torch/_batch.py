"""``dist.batch_isend_irecv`` issues a hoccl group's batch when it returns, as it does NCCL's.

torch coalesces a batch (``_start_coalescing`` ... ``_end_coalescing``) only for a group whose type is exactly
``ProcessGroup`` with a backend that ``supports_coalescing``; a Python process group such as ``ProcessGroupHoccl``
gets its sends and receives one by one, with nothing that marks the batch's end. The group defers them (every
address before any wait, so ranks that send to each other pair up) and, without a mark, issued the batch only at
the first wait on one of its Works. torch.distributed.pipelining waits on a lone send late: 1F1B's first stage
fires its first activation (``send_work = _batch_p2p(fwd_sends)``) and waits on it only after its next forward,
so the next stage's first forward waited for the first stage's host to enqueue a whole forward before the
activation even left. :func:`install` wraps ``torch.distributed.batch_isend_irecv`` so that, once torch has handed
the ops to the group, the hoccl groups among them issue their batch there and then; other groups are untouched.
``HOCCL_BATCH_ISSUE=0`` keeps the old behaviour (the batch issued at its first wait).
"""

from __future__ import annotations

import functools
from typing import Any

import torch.distributed as dist

from ..settings import env_flag

__all__ = ["install"]


def install() -> None:
    """Wrap ``torch.distributed.batch_isend_irecv`` once per process (idempotent)."""
    from torch.distributed import distributed_c10d as c10d

    original = c10d.batch_isend_irecv
    if getattr(original, "_hoccl_issues_batch", False):
        return

    @functools.wraps(original)
    def batch_isend_irecv(p2p_op_list: list) -> list:
        works = original(p2p_op_list)
        if env_flag("HOCCL_BATCH_ISSUE", True):
            issue_batches(p2p_op_list)
        return works

    batch_isend_irecv._hoccl_issues_batch = True  # type: ignore[attr-defined]
    c10d.batch_isend_irecv = batch_isend_irecv
    dist.batch_isend_irecv = batch_isend_irecv


def issue_batches(p2p_op_list: list) -> None:
    """Issue the deferred batch of every hoccl group among ``p2p_op_list``'s ops (a group without one: nothing)."""
    from ._group import ProcessGroupHoccl

    seen: set[int] = set()
    for op in p2p_op_list:
        group: Any = op.group if op.group is not None else dist.distributed_c10d._get_default_group()
        if isinstance(group, ProcessGroupHoccl) and id(group) not in seen:
            seen.add(id(group))
            group._flush_now()
