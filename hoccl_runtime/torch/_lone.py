"""Sends and receives a hoccl group issues at once instead of deferring them (torch's pipelining's one-kind batches).

A hoccl group defers a lone ``isend``/``irecv`` to its next batch, collective or wait, so that ranks that send to each
other in the same order pair up in one call. Newer torch's pipelining (``schedules._batch_p2p``, torch 2.13 for one)
issues a batch of sends only, or of receives only, op by op through ``dist.isend``/``irecv`` instead of
``batch_isend_irecv`` (so that independent ops need not queue on one stream); deferred, 1F1B's first stage would
send its warm-up activation only at its next batch, a forward later (it waits on that send late), as
:mod:`hoccl_runtime.torch._batch` once fixed for ``batch_isend_irecv``. Inside such a batch (:data:`ISSUE_NOW`) the
group issues each op at once; the peer's matching batch (receives only, or sends only) does the same, so the calls
pair up. Mixed batches still go through ``batch_isend_irecv``.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any

from ..settings import env_flag

__all__ = ["ISSUE_NOW", "install_pipelining"]

ISSUE_NOW = threading.local()  # .on: this thread's sends and receives are issued at once, not deferred


def install_pipelining() -> None:
    """Wrap torch's ``schedules._batch_p2p`` (see the module docstring) once: a batch of one kind of op runs with
    :data:`ISSUE_NOW` on. Where torch has no ``_batch_p2p``, nothing is wrapped. Only once the application has
    imported torch's pipelining (about 2 s of imports a program that does not pipeline would pay): at
    ``import hoccl_runtime.torch``, when a hoccl group is made, and at a group's deferred send or receive."""
    schedules = sys.modules.get("torch.distributed.pipelining.schedules")
    if schedules is None:
        return
    original = getattr(schedules, "_batch_p2p", None)
    if original is None or getattr(original, "_hoccl_issues_now", False):
        return

    @functools.wraps(original)
    def _batch_p2p(p2p_ops: list, *args: Any, **kwargs: Any) -> Any:
        if len({op.op for op in p2p_ops}) != 1 or not env_flag("HOCCL_BATCH_ISSUE", True):
            return original(p2p_ops, *args, **kwargs)
        before = getattr(ISSUE_NOW, "on", False)
        ISSUE_NOW.on = True
        try:
            return original(p2p_ops, *args, **kwargs)
        finally:
            ISSUE_NOW.on = before

    _batch_p2p._hoccl_issues_now = True  # type: ignore[attr-defined]
    schedules._batch_p2p = _batch_p2p
