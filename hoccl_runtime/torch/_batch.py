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

A batch whose ops all go through one hoccl group, with plain tensors, is issued by the group as one call
(:func:`issue_whole`) instead of torch's ``isend``/``irecv`` one op at a time and the group deferring each: the same
checks and the same Works, one stream hand-off (``follow``) per batch instead of one per op, and no Python layers of
torch's per op. Inside a training step every host microsecond of a call reaches the step (the pipeline over TCP
nodes on one GPU is host-bound, docs/results/training-history.md); a batch that does not qualify goes through torch
as before.
"""

from __future__ import annotations

import functools
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
from torch.overrides import has_torch_function

from ..settings import env_flag
from ._group import ProcessGroupHoccl
from ._lone import install_pipelining

__all__ = ["install"]


def install() -> None:
    """Wrap ``torch.distributed.batch_isend_irecv`` once per process (idempotent)."""
    original = c10d.batch_isend_irecv
    if getattr(original, "_hoccl_issues_batch", False):
        return

    @functools.wraps(original)
    def batch_isend_irecv(p2p_op_list: list) -> list:
        if not env_flag("HOCCL_BATCH_ISSUE", True):
            return original(p2p_op_list)
        check = getattr(c10d, "_check_p2p_op_list", None)  # torch's own checks and errors, whichever way it goes
        if check is not None:
            check(p2p_op_list)
        group = whole_batch_group(p2p_op_list)
        if group is not None:
            return issue_whole(group, p2p_op_list)
        works = original(p2p_op_list)
        issue_batches(p2p_op_list)
        return works

    batch_isend_irecv._hoccl_issues_batch = True  # type: ignore[attr-defined]
    c10d.batch_isend_irecv = batch_isend_irecv
    dist.batch_isend_irecv = batch_isend_irecv
    install_pipelining()


def issue_batches(p2p_op_list: list) -> None:
    """Issue the deferred batch of every hoccl group among ``p2p_op_list``'s ops (a group without one: nothing)."""
    seen: set[int] = set()
    for op in p2p_op_list:
        group: Any = op.group if op.group is not None else c10d._get_default_group()
        if isinstance(group, ProcessGroupHoccl) and id(group) not in seen:
            seen.add(id(group))
            group._flush_now()


def whole_batch_group(p2p_op_list: list) -> Any:
    """The hoccl group that can issue ``p2p_op_list`` as one call, or None (torch issues it op by op): every op an
    ``isend``/``irecv`` of one ``ProcessGroupHoccl`` (torch checked they share a group), with its peer's group rank,
    and every tensor a plain one (a tensor subclass, or a complex one, goes through torch's handling)."""
    if not p2p_op_list:
        return None
    first = p2p_op_list[0].group
    group: Any = first if first is not None else c10d._get_default_group()
    if not isinstance(group, ProcessGroupHoccl):
        return None
    for op in p2p_op_list:
        t = op.tensor
        if op.group is not first or op.op not in (c10d.isend, c10d.irecv) or getattr(op, "group_peer", None) is None \
                or has_torch_function((t,)) or t.is_complex():
            return None
    return group


def issue_whole(group: Any, p2p_op_list: list) -> list:
    """``p2p_op_list`` as one batch call of ``group``, issued now: a Work per op, all ending with the batch (as
    NCCL's coalesced batch: each op's Work completes when the batch does)."""
    ops = [("send" if op.op is c10d.isend else "recv", op.tensor, op.group_peer) for op in p2p_op_list]
    return group._batch_now(ops)
