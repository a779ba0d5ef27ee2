"""The pure parts of the torch integration: reduce ops, split sizes, local reductions, and how a batch of sends and
receives goes to a communicator (:func:`exchange`; no GPU, no process group).

Everything here takes and returns plain values or torch tensors on any device, so the CPU tests run it as it
runs on the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import BufferError, CollectiveError, UnsupportedOpError

__all__ = ["Reduction", "reduction", "split_bytes", "reduce_blocks", "check_tensor", "row_bytes", "exchange"]

# what HOCCL's own reductions do; the rest are refused with the way out
_SUPPORTED = ("SUM", "AVG", "PREMUL_SUM", "MIN", "MAX")


@dataclass(frozen=True)
class Reduction:
    """A torch ReduceOp read once: its name (``SUM``, ``AVG``, ``PREMUL_SUM``, ``MIN``, ``MAX``) and, for
    PREMUL_SUM, the factor every input is multiplied by before the sum."""

    name: str
    factor: float | None = None


def reduction(op: Any) -> Reduction:
    """The :class:`Reduction` of a ``dist.ReduceOp``, a ``ReduceOp.RedOpType`` (``ReduceOp.SUM``) or
    ``dist._make_nccl_premul_sum(f)``; an op HOCCL does not do raises :class:`UnsupportedOpError`."""
    import torch.distributed as dist

    factor = None
    kind = op
    if isinstance(op, dist.ReduceOp) and not isinstance(op, dist.ReduceOp.RedOpType):
        state = op.__getstate__()  # (RedOpType, factor or None): how torch pickles a ReduceOp
        if isinstance(state, tuple):
            kind, factor = state[0], state[1] if len(state) > 1 else None
        else:
            kind = op.op
    name = getattr(kind, "name", str(kind)).upper()
    if name not in _SUPPORTED:
        raise UnsupportedOpError(f"reduce op {name}: HOCCL reduces with {', '.join(_SUPPORTED)}; for {name} use an "
                                 "NCCL or gloo group (dist.new_group(backend='nccl'))")
    if name == "PREMUL_SUM":
        if isinstance(factor, (list, tuple)):
            factor = factor[0] if factor else None
        if hasattr(factor, "item"):  # a one-element tensor factor
            factor = factor.item()
        if not isinstance(factor, (int, float)):
            raise UnsupportedOpError(f"PREMUL_SUM with factor {factor!r}: give a number, "
                                     "dist._make_nccl_premul_sum(0.5)")
        factor = float(factor)
    return Reduction(name, factor)


def reduce_blocks(blocks: Any, red: Reduction, out: Any) -> None:
    """``out = reduce(blocks[0], ..., blocks[n-1])`` along dim 0 of ``blocks`` (shape ``(n, *out.shape)``), in
    fp32 for 16-bit floats (as NCCL accumulates bf16 in fp32), written into ``out``: the only SM work of a HOCCL
    reduction. A floating ``out`` of the blocks' dtype takes the sum straight (AVG and PREMUL_SUM then scale it in
    place); 16-bit blocks are summed into fp32 by the one kernel (no fp32 copy of the blocks), and scaled into
    ``out`` or copied there: two kernels."""
    import torch

    if red.name in ("MIN", "MAX"):
        res = blocks.amin(dim=0) if red.name == "MIN" else blocks.amax(dim=0)
        out.copy_(res)
        return
    if blocks.dtype == torch.bool:
        raise UnsupportedOpError(f"{red.name} of bool tensors: use MAX (logical or) or MIN (logical and)")
    if red.name == "AVG" and not (blocks.is_floating_point() or blocks.is_complex()):
        raise UnsupportedOpError(f"AVG of {blocks.dtype} tensors: NCCL allows AVG for floating types only; "
                                 "use SUM and divide")
    wide = blocks.dtype in (torch.bfloat16, torch.float16)
    if wide:
        res = blocks.sum(dim=0, dtype=torch.float32)  # accumulated in fp32 by the kernel: no fp32 copy of the blocks
    elif out.dtype == blocks.dtype and (blocks.is_floating_point() or blocks.is_complex()):
        res = torch.sum(blocks, dim=0, out=out)  # straight into out
    else:  # integers: torch sums them as int64 (wrapping to out's dtype on the copy, as NCCL's sums wrap)
        res = blocks.sum(dim=0)
    # the scaling writes out itself where the sum is floating (its one rounding to a 16-bit out, as the copy's was)
    into = out if res is not out and res.is_floating_point() else res
    if red.name == "PREMUL_SUM":
        torch.mul(res, red.factor, out=into)
    elif red.name == "AVG":
        torch.div(res, blocks.shape[0], out=into)
    else:
        into = res
    if into is not out:
        out.copy_(into)


def check_tensor(t: Any, what: str) -> None:
    """A tensor a HOCCL call can move: on a CUDA device and contiguous (the communicator checks which GPU)."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise BufferError(f"{what} is a {type(t).__name__}, not a torch tensor")
    if not t.is_cuda:  # (an attribute: no device object made)
        raise BufferError(f"{what} is on {t.device} ({tuple(t.shape)}, {t.dtype}); the hoccl backend moves GPU "
                          "memory: pass x.cuda(), or use a gloo group for CPU tensors")
    if not t.is_contiguous():
        raise BufferError(f"{what} is not contiguous (strides {t.stride()}); pass x.contiguous()")


def row_bytes(t: Any) -> int:
    """Bytes of one dim-0 row of ``t`` (the unit of torch's split sizes); a 0-d tensor is one row."""
    n = t.element_size()
    for d in t.shape[1:]:
        n *= d
    return n


def split_bytes(splits: Sequence[int] | None, t: Any, world: int, what: str) -> tuple[int, ...]:
    """Byte sizes of the ``world`` blocks of ``t`` along dim 0: from torch's split sizes (rows), or even blocks
    where ``splits`` is empty or None. A list of the wrong length, negative entries or a sum other than
    ``t.shape[0]`` raise :class:`CollectiveError` naming the values."""
    per_row = row_bytes(t)
    rows = t.shape[0] if t.dim() else 1
    if not splits:
        if rows % world:
            raise CollectiveError(f"{what} has {rows} rows, not a multiple of the group size {world}: give "
                                  f"{what}_split_sizes, or pad it to {-(-rows // world) * world} rows")
        return tuple([rows // world * per_row] * world)
    splits = [int(s) for s in splits]
    if len(splits) != world:
        raise CollectiveError(f"{what}_split_sizes has {len(splits)} entries for a group of {world} ranks: give "
                              "one per rank")
    if any(s < 0 for s in splits):
        raise CollectiveError(f"{what}_split_sizes {splits} has a negative entry")
    if sum(splits) != rows:
        raise CollectiveError(f"{what}_split_sizes {splits} add up to {sum(splits)} but {what} has {rows} rows "
                              f"(shape {tuple(t.shape)}): they must add up to its first dimension")
    return tuple(s * per_row for s in splits)


def exchange(comm: Any, me: int, sends: list, recvs: list, stream: Any) -> None:
    """Sends [(peer, tensor)] and receives [(peer, tensor)] as one batch on ``stream`` (the communicator's
    ``batch_isend_irecv``: on one node every address before any wait, in rounds of at most 4 ops per peer;
    across nodes one call after another in the (src, dst) order every rank uses), so no two ranks wait on each
    other."""
    ops = [("send", t, p) for p, t in sends if t.numel()] + [("recv", t, p) for p, t in recvs if t.numel()]
    if not ops:
        return
    if getattr(comm, "pairs_alone", False):
        per_peer: dict[int, list] = {}
        for op in ops:
            per_peer.setdefault(op[2], []).append(op)
        # the communicator takes at most 4 ops per peer in a batch: cut longer lists into rounds, alike on both ends
        # (each end sorts a peer's ops by (src, dst, bytes) the same way)
        rounds: list[list] = []
        for peer_ops in per_peer.values():
            peer_ops.sort(key=lambda op: ((me, op[2]) if op[0] == "send" else (op[2], me), op[1].nbytes))
            for i in range(0, len(peer_ops), 4):
                while len(rounds) <= i // 4:
                    rounds.append([])
                rounds[i // 4].extend(peer_ops[i:i + 4])
        for batch in rounds:
            comm.batch_isend_irecv(batch, stream=stream)
        return
    comm.batch_isend_irecv(ops, stream=stream)  # across nodes: one after the other in the (src, dst) order
