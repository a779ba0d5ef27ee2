"""Other processes' GPU allocations mapped into this one (``cudaIpcOpenMemHandle``), by IPC handle: the cache that
the intra-node :class:`~hoccl_runtime.comm.Communicator` (its partners' buffers) and the node leader of
:class:`~hoccl_runtime.comm.nodenet.NodeNetCommunicator` (its local ranks' buffers) both keep.

Mapping costs tens of microseconds and a mapping holds the peer's memory alive, so mappings are kept, the least
recently used closed beyond ``limit``. Closing one that queued copies still use would fault on the GPU, so each
owner says when one may go: ``before_close()`` runs first (the Communicator waits for its calls and drops the
launch lists that name the mapping), and ``may_close(tag)`` is asked of each candidate (the node leader tags a
mapping with the last call that used it and lets it go once that call completed; a mapping not allowed to close
stays, and the cache grows past ``limit`` until one is).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator

from . import _cuda
from ._cuda_memory import ipc_close_mem_handle, ipc_open_mem_handle

__all__ = ["IpcMappings"]


class IpcMappings:
    def __init__(self, limit: int = 64, *, before_close: Callable[[], None] | None = None,
                 may_close: Callable[[int], bool] | None = None):
        self.limit = limit
        self._before_close, self._may_close = before_close, may_close
        self._maps: OrderedDict[bytes, list] = OrderedDict()  # handle -> [local address, GPU, tag]

    def open(self, handle: bytes, device: int, tag: int = 0) -> int:
        """The local address of the allocation ``handle`` names, mapped in ``device``'s context (now the most
        recently used; ``tag`` kept for ``may_close``)."""
        entry = self._maps.get(handle)
        if entry is not None:
            self._maps.move_to_end(handle)
            entry[2] = tag
            return entry[0]
        if len(self._maps) >= self.limit:
            self._trim()
        with _cuda.on_device(device):
            base = ipc_open_mem_handle(handle)
        self._maps[handle] = [base, device, tag]
        return base

    def _trim(self) -> None:
        if self._before_close is not None:
            self._before_close()
        for handle in list(self._maps):  # least recently used first
            if len(self._maps) < self.limit:
                return
            base, device, tag = self._maps[handle]
            if self._may_close is None or self._may_close(tag):
                del self._maps[handle]
                _close(base, device)

    def take(self, handle: bytes) -> int | None:
        """Hand a mapping over to its caller (who closes it): its address, or None if it is not mapped here."""
        entry = self._maps.pop(handle, None)
        return None if entry is None else entry[0]

    def close_all(self) -> None:
        maps, self._maps = self._maps, OrderedDict()
        for base, device, _ in maps.values():
            _close(base, device)

    def addresses(self) -> Iterator[int]:
        return (entry[0] for entry in self._maps.values())

    def __len__(self) -> int:
        return len(self._maps)

    def __contains__(self, handle: bytes) -> bool:
        return handle in self._maps


def _close(base: int, device: int) -> None:
    with _cuda.on_device(device), contextlib.suppress(Exception):  # the peer may have freed it; closing anyway
        ipc_close_mem_handle(base)
