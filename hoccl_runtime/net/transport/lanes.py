"""How a TCP write is cut over a connection's lanes (:func:`lane_parts`), apart from the sockets so that the rule is
read, tested and tuned on its own (docs/architecture.md, "Transports"); and how a TCP setting is read
(:func:`setting`)."""

from __future__ import annotations

from ...errors import HocclError, TransportError
from ...settings import env_int

__all__ = ["lane_parts", "setting", "SPLIT_SLACK", "SPLITS"]

SPLIT_SLACK = 1.0                                 # default: a whole write may end up to 2x later than cut up
SPLITS = ("balance", "idle")


def lane_parts(queued: list[int], nbytes: int, min_part: int, split: str = "balance",
               slack: float = SPLIT_SLACK) -> list[tuple[int, int, int]]:
    """The parts ``[(lane, lo, hi), ...]`` of a write of ``nbytes``, given the bytes each lane has queued.

    "balance": the least-loaded lanes are filled to one level (water-filling; at most ``nbytes // min_part`` of
    them, each part at least ``min_part``); the write goes whole to the least-loaded lane instead when that lane
    would be through no later than ``1 + slack`` times that level (or the busiest lane's queue, if longer). So a
    write into idle lanes is shared by all, and one behind many queued chunks is not cut (each part costs a
    frame and two thread hand-offs). "idle": the lanes with nothing queued share it, else it goes whole to the
    least-loaded lane."""
    lanes = len(queued)
    cap = max(1, min(lanes, nbytes // min_part))
    least = min(range(lanes), key=queued.__getitem__)
    if split == "idle":
        idle = [lane for lane, q in enumerate(queued) if not q][:cap]
        if len(idle) < 2:
            return [(least, 0, nbytes)]
        step = -(-nbytes // len(idle))
        return [(lane, min(i * step, nbytes), min(i * step + step, nbytes)) for i, lane in enumerate(idle)]
    if cap < 2:
        return [(least, 0, nbytes)]
    order = sorted(range(lanes), key=queued.__getitem__)  # order[0] is ``least`` (both take the first minimum)
    k, level, below = 1, queued[least] + nbytes, queued[least]
    for m in range(2, cap + 1):
        below += queued[order[m - 1]]
        lv = (nbytes + below) / m
        if lv - queued[order[m - 1]] < min_part:  # that lane's part would be too small (or negative)
            break
        k, level = m, lv
    if k < 2 or queued[least] + nbytes <= (1 + slack) * max(queued[order[-1]], level):
        return [(least, 0, nbytes)]
    parts, lo = [], 0
    for i, lane in enumerate(order[:k]):
        hi = nbytes if i == k - 1 else lo + int(level - queued[lane])
        parts.append((lane, lo, hi))
        lo = hi
    return parts


def setting(value: int | None, env: str, default: int, least: int, most: int | None = None) -> int:
    """An argument if given, else the environment's setting (``env``), else ``default``; within least..most."""
    if value is None:
        try:
            return env_int(env, default, least, most)
        except HocclError as exc:
            raise TransportError(str(exc)) from None
    name = env.removeprefix("HOCCL_TCP_").lower()
    if isinstance(value, bool) or not isinstance(value, int):
        raise TransportError(f"{name}={value!r}: give a whole number of bytes")
    if value < least or (most is not None and value > most):
        raise TransportError(f"{name}={value}: give {least}..{most}" if most is not None else
                             f"{name}={value}: give at least {least}")
    return value
