"""Buffers that share memory: the overlaps a plan allows (a rank's input inside its own output, in place) and a
refusal that names every other one, before any copy is issued.

Overlapping buffers would be read while they are written: an All-to-All given one buffer as input and output, or
two ranks' outputs on the same bytes, ends with wrong outputs and no error. So every runtime path that takes a
caller's buffers (:class:`~hoccl_runtime.executor.Executor`, the network node executor, the communicators) checks
them here, and lets only these overlaps through:

* inputs with inputs (both only read);
* a rank's input as the block of its own output where the plan keeps it: an in-place plan's resident block, or
  where an out-of-place plan's own copies move the whole input by one offset and nothing else writes
  (:func:`plan_in_place`; NCCL's and torch's in-place AllGather, ``input = output[rank * n:(rank + 1) * n]``);
* a rank's output as the block of its own input that its own copies fill it from, where nothing else reads that
  block or writes the output (:func:`plan_in_place`; a scatter's root).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import BufferError
from .plans import per_plan

__all__ = ["check_aliasing", "check_in_place", "plan_in_place"]


def _one_shift(pieces: list[tuple[int, int, int]], total: int) -> int | None:
    """The one shift of ``pieces`` (start, bytes, shift) that tile [0, ``total``) by a single shift; else None."""
    local = sorted(pieces)
    if not total or not local or len({shift for _, _, shift in local}) != 1:
        return None
    at = 0
    for start, n, _ in local:
        if start != at:
            return None
        at += n
    return local[0][2] if at == total else None


def _hits(starts: np.ndarray, sizes: np.ndarray, lo: int, n: int) -> bool:
    """Whether any range [start, start + size) meets [lo, lo + n)."""
    return bool(((starts < lo + n) & (lo < starts + sizes)).any())


_MEMO: dict = {}  # id(plan) -> (plan, {rank: its answer}): an in-place call asks on every launch it builds
_LOCK = threading.Lock()


def plan_in_place(plan: Any, rank: int) -> tuple[int | None, int | None]:
    """(own block, own output) of ``rank`` in ``plan``, from its flows: the offset in the rank's output where its
    whole input may sit, and the offset in its input where its whole output may sit; None where the plan allows
    no such overlap. Worked out once per plan object and rank."""
    with _LOCK:
        answers = per_plan(_MEMO, plan, lambda _: {}, keep=64)
    if rank not in answers:
        answers[rank] = _in_place(plan, rank)
    return answers[rank]


def _in_place(plan: Any, rank: int) -> tuple[int | None, int | None]:
    ranks = plan.ranks
    if plan.collective.in_place:
        return (int(ranks.resident_offset[rank]) if ranks.resident_bytes[rank] else None), None
    f = plan.flows
    src, dst = np.asarray(f.src, np.int64), np.asarray(f.dst, np.int64)
    size = np.asarray(f.bytes, np.int64)
    s_off, d_off = np.asarray(f.src_offset, np.int64), np.asarray(f.dst_offset, np.int64)
    via = np.asarray(f.via, np.int64) if getattr(f, "via", None) is not None else np.full(src.size, -1)
    mine = (src == rank) & (dst == rank) & (via < 0)
    local = [(int(a), int(n), int(b - a)) for a, b, n in zip(s_off[mine], d_off[mine], size[mine], strict=True)]
    into = (dst == rank) & ~mine  # everything else that writes this rank's output
    # what reads this rank's output (a multicast flow forwarding from where another flow wrote it)
    from_out = (via >= 0) & (dst[np.maximum(via, 0)] == rank)
    own_in = own_out = None
    n_in, n_out = int(ranks.input_bytes[rank]), int(ranks.output_bytes[rank])
    shift = _one_shift(local, n_in)
    if shift is not None and not _hits(d_off[into], size[into], shift, n_in):
        own_in = shift
    back = _one_shift([(b + s, n, -s) for b, n, s in local], n_out)  # the output filled from the input by one shift
    if back is not None and not into.any() and not from_out.any():
        read = (src == rank) & ~mine & (via < 0)  # other ranks' reads of this rank's input
        if not _hits(s_off[read], size[read], back, n_out):
            own_out = back
    return own_in, own_out


def check_in_place(me: int, inp: Any, out: Any, own: int | None, kind: str, own_output: int | None = None) -> None:
    """An input that overlaps its output must be exactly the output's own block: where an out-of-place plan
    may run in place (:func:`plan_in_place`), or where an in-place plan keeps it (its resident block); or the output
    exactly the input's own block (a scatter's root)."""
    if own is not None and inp.ptr - out.ptr == own:
        return
    if own_output is not None and out.ptr - inp.ptr == own_output:
        return
    where = (f"in place, pass the output's bytes [{own}, {own + inp.nbytes}) as the input (for allgather: "
             "output[rank * n:(rank + 1) * n]), or separate buffers" if own is not None else
             f"{kind} has no in-place form with this input: pass separate buffers")
    raise BufferError(f"rank {me}: the input [{inp.ptr:#x}, +{inp.nbytes}) overlaps the output [{out.ptr:#x}, "
                      f"+{out.nbytes}) at offset {inp.ptr - out.ptr}; {where}")


def check_aliasing(plan: Any, buffers: Mapping[int, tuple[Any, Any]]) -> None:
    """Refuse ``buffers`` ({rank: (input, output)}, DeviceBuffers or None) where two of them share bytes in a way
    ``plan`` does not allow (the module docstring), naming both and the fix."""
    spans = []
    for r, pair in buffers.items():
        for part, b in zip(("input", "output"), pair, strict=True):
            if b is not None and b.nbytes:
                spans.append((b.ptr, b.ptr + b.nbytes, r, part, b))
    spans.sort(key=lambda s: (s[0], s[1]))
    live: list[tuple] = []
    for s in spans:
        live = [a for a in live if a[1] > s[0]]
        for a in live:
            _allowed(plan, a, s, buffers)
        live.append(s)


def _allowed(plan: Any, a: tuple, b: tuple, buffers: Mapping[int, tuple[Any, Any]]) -> None:
    (_, _, ra, pa, ba), (_, _, rb, pb, bb) = a, b
    if pa == pb == "input":
        return
    if ra == rb:
        own, own_output = plan_in_place(plan, ra)
        inp, out = buffers[ra]
        check_in_place(ra, inp, out, own, plan.collective.kind, own_output)
        return
    raise BufferError(f"rank {ra}'s {pa} [{ba.ptr:#x}, +{ba.nbytes}) and rank {rb}'s {pb} [{bb.ptr:#x}, "
                      f"+{bb.nbytes}) share bytes; give each rank buffers of its own (only a rank's input may sit "
                      "in its own output, in place)")
