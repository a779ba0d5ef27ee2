"""The bootstrap store's side of every communicator: waiting for a key while watching for ranks that failed at
start, and saying that this rank failed (so the others raise at once instead of at their timeout)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from .errors import HocclError, HocclTimeoutError, TransportError

__all__ = ["announce_failure", "raise_if_a_rank_failed", "wait_for_key", "exchange_addresses"]


def announce_failure(store: Any, rank: int, exc: BaseException) -> None:
    """Tell the other ranks, through the store, that this rank failed while setting up (they raise at once
    instead of waiting for it until their timeout)."""
    with contextlib.suppress(Exception):  # the store itself may be what failed
        store.set(f"failed/{rank}", f"{type(exc).__name__}: {exc}"[:2000])
        store.add("failed-count", 1)


def raise_if_a_rank_failed(store: Any, world: int, who: str = "") -> None:
    """Raise :class:`HocclError` naming a rank that announced a failure (one store round trip when none did)."""
    if int(store.add("failed-count", 0)) == 0:
        return
    for r in range(world):
        if store.check([f"failed/{r}"]):
            why = store.get(f"failed/{r}")
            why = why.decode(errors="replace") if isinstance(why, bytes) else str(why)
            raise HocclError(f"{who}rank {r} failed while setting up the communicator ({why}); fix it there, then "
                             "start every rank again")


def wait_for_key(store: Any, key: str, world: int, timeout_s: float, who: str = "", what: str = "", *,
                 watch: Callable[[], None] | None = None, late: str | None = None, poll_s: float = 0.05) -> Any:
    """``store.get(key)`` once the key is there. Meanwhile, every ``poll_s``: ``watch()`` (default: raise if a rank
    announced a failure at start), and past ``timeout_s`` a :class:`HocclTimeoutError` (``late``: its message; by
    default "<who><what> did not appear"). A store that fails itself raises :class:`TransportError`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if store.check([key]):
                return store.get(key)
        except Exception as exc:  # noqa: BLE001 - a store that lost its server
            raise TransportError(f"{who}the bootstrap store failed while waiting for {what or key} ({exc})") from None
        if watch is None:
            raise_if_a_rank_failed(store, world, who)
        else:
            watch()
        if time.monotonic() > deadline:
            raise HocclTimeoutError(late or f"{who}{what or key} did not appear within {timeout_s:.0f} s: has every "
                                    "rank started?")
        time.sleep(poll_s)


def exchange_addresses(store: Any, key: str, me: int, count: int, mine: str, world: int, timeout_s: float, who: str,
                       what: Callable[[int], str]) -> dict[int, str]:
    """Publish ``mine`` under ``key + str(me)`` and wait for those of ``0 .. count - 1`` (the listening addresses of
    a job's nodes or ranks, as every network path exchanges them): {index: address}. ``world``: the ranks that may
    announce a failure meanwhile; ``what(index)`` names the one waited for in a timeout."""
    store.set(f"{key}{me}", mine)
    return {n: wait_for_key(store, f"{key}{n}", world, timeout_s, who, what(n)).decode() for n in range(count)}
