"""Plans from outside the process are verified before their first run, and known by their content.

A plan file is data a user (or anyone who could write the file) hands the runtime, and lowering turns its
offsets into device addresses: a flow moved by 1 GiB would make copy engines write outside the caller's
buffers. So every plan the runtime did not compile itself goes through :func:`hoccl_compiler.verify.verify_plan`
(the byte layout of its collective, the stage rules, the chunk orders) before it runs; with the buffers checked
against the plan's per-rank sizes at every call, every copy then stays inside them. The verdict is cached by a
hash of the plan's content, not by the ``plan_id`` it claims (an id is only a field of the file), and the
runtime's caches key external plans by that hash too. Plans the runtime compiles itself are verified by the
compiler's own last pass.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

from .errors import HocclError, PlanError

__all__ = ["plan_uid", "trusted", "verified"]

_MEMO: OrderedDict[int, tuple[Any, str]] = OrderedDict()  # id(plan) -> (the plan, its content hash)
_MEMO_SIZE = 16
_VERIFIED: OrderedDict[str, None] = OrderedDict()  # content hashes of plans that passed
_VERIFIED_SIZE = 1024


def plan_uid(plan: Any) -> str:
    """``sha256:`` and a hash of the plan's whole content (its JSON), worked out once per plan object."""
    key = id(plan)
    hit = _MEMO.get(key)
    if hit is not None and hit[0] is plan:
        _MEMO.move_to_end(key)
        return hit[1]
    uid = "sha256:" + hashlib.sha256(plan.model_dump_json().encode()).hexdigest()
    _MEMO[key] = (plan, uid)
    while len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)
    return uid


def verified(plan: Any) -> None:
    """The door every executor runs a plan through: nothing for a plan this process compiled
    (:func:`hoccl_runtime.plans.compiled_here`), else :func:`trusted` (verified once per content)."""
    from .plans import compiled_here

    if not compiled_here(plan):
        trusted(plan)


def trusted(plan: Any) -> str:
    """Verify ``plan`` unless a plan of the same content passed before; its content hash. A plan that fails
    raises :class:`PlanError` saying so (the runtime never runs it)."""
    uid = plan_uid(plan)
    if uid in _VERIFIED:
        _VERIFIED.move_to_end(uid)
        return uid
    from .plans import verify

    try:
        verify(plan)
    except HocclError as exc:
        raise PlanError(f"plan {plan.plan_id} fails verification, so the runtime will not run it (it was changed "
                        f"after compiling, or is corrupt): {exc}; recompile it with hoccl-compile") from None
    except (ValueError, IndexError, KeyError, TypeError, OverflowError) as exc:
        raise PlanError(f"plan {plan.plan_id} fails verification ({type(exc).__name__}: {exc}), so the runtime "
                        "will not run it: recompile it with hoccl-compile") from None
    _VERIFIED[uid] = None
    while len(_VERIFIED) > _VERIFIED_SIZE:
        _VERIFIED.popitem(last=False)
    return uid
