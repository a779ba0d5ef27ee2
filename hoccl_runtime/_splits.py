"""All-to-Allv in pieces: the pairwise sends and receives of one rank, from its own split sizes.

A rank knows its row of the traffic matrix (what it sends: its input splits) and its column (what it
receives: its output splits), not the rest, so an All-to-Allv runs as one batch of pairwise transfers, each
a one-pair plan that both of its ends compile alike, as NCCL runs ``ncclAllToAllv`` as grouped send/recv.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import CollectiveError
from .interop import DeviceBuffer

__all__ = ["AllToAllvPieces", "alltoallv_pieces"]


class AllToAllvPieces:
    """One rank's part: ``sends`` [(dst, input slice)], ``recvs`` [(src, output slice)] (zero-byte pieces left
    out), and ``local`` (input slice, output slice) for its own block, or None."""

    __slots__ = ("sends", "recvs", "local")

    def __init__(self, sends: list, recvs: list, local: tuple[DeviceBuffer, DeviceBuffer] | None) -> None:
        self.sends, self.recvs, self.local = sends, recvs, local


def _offsets(splits: Sequence[int], total: int, world: int, what: str) -> list[int]:
    if len(splits) != world:
        raise CollectiveError(f"{what} has {len(splits)} entries for {world} ranks: give one byte count per rank")
    if any(int(s) < 0 for s in splits):
        raise CollectiveError(f"{what} {list(splits)} has a negative entry")
    if sum(splits) != total:
        raise CollectiveError(f"{what} {list(splits)} add up to {sum(splits)} bytes but the buffer holds {total}: "
                              "they must add up to its size")
    at, out = 0, []
    for s in splits:
        out.append(at)
        at += int(s)
    return out


def alltoallv_pieces(rank: int, world: int, inp: DeviceBuffer, out: DeviceBuffer, input_split_bytes: Sequence[int],
                     output_split_bytes: Sequence[int]) -> AllToAllvPieces:
    """Block j of ``inp`` (``input_split_bytes[j]`` bytes, blocks back to back) goes to rank j; block i of ``out``
    comes from rank i. A rank's own block must be the same size on both sides."""
    ins = _offsets(input_split_bytes, inp.nbytes, world, "input_split_bytes")
    outs = _offsets(output_split_bytes, out.nbytes, world, "output_split_bytes")
    if input_split_bytes[rank] != output_split_bytes[rank]:
        raise CollectiveError(f"rank {rank} sends itself {input_split_bytes[rank]} bytes (input_split_bytes) but "
                              f"expects {output_split_bytes[rank]} (output_split_bytes): they must match")
    sends = [(j, inp.slice(ins[j], int(n))) for j, n in enumerate(input_split_bytes) if n and j != rank]
    recvs = [(j, out.slice(outs[j], int(n))) for j, n in enumerate(output_split_bytes) if n and j != rank]
    n = int(input_split_bytes[rank])
    local = (inp.slice(ins[rank], n), out.slice(outs[rank], n)) if n else None
    return AllToAllvPieces(sends, recvs, local)
