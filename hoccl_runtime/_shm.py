"""Host memory shared by a node's processes and registered with CUDA (the communicators' flags and mailboxes live
in it)."""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import sys
import time
import uuid
from typing import Any

from ._store import raise_if_a_rank_failed, wait_for_key
from .errors import HocclTimeoutError

__all__ = ["SharedSegment", "attach"]


class SharedSegment:
    """Host memory shared by a group of processes on one node and registered with CUDA (portable,
    mapped), so that their streams can write and wait on flags in it. The owner creates it and puts its
    name in the store under ``key``; the others attach by that name. After ``join`` every member has
    attached and the owner has unlinked the name (a crash leaves nothing in /dev/shm; the mapping lives
    until the last process unmaps it)."""

    def __init__(self, store: Any, owner: bool, size: int, *, key: str, prefix: str = "hoccl-", world: int = 1,
                 timeout_s: float = 60.0):
        from multiprocessing import shared_memory

        from ._cuda import host_register

        size = -(-size // 4096) * 4096
        if owner:
            self.shm = shared_memory.SharedMemory(create=True, size=size, name=f"{prefix}{uuid.uuid4().hex[:16]}")
            _CREATED.add(self.shm.name)
            self.shm.buf[:size] = bytes(size)
            store.set(key, self.shm.name)
        else:
            name = wait_for_key(store, key, world, timeout_s, what="the shared host memory's name")
            self.shm = attach(shared_memory, name.decode() if isinstance(name, bytes) else name)
        self.owner, self.size = owner, size
        self.linked = owner  # the owner unlinks the name once everyone attached (join), or on failure (close)
        self.ptr = ctypes.addressof(ctypes.c_char.from_buffer(self.shm.buf))
        self.dev_ptr = host_register(self.ptr, size)
        self.registered = True

    def join(self, store: Any, count_key: str, members: int, timeout_s: float, who: str = "") -> None:
        """Wait until all ``members`` attached (up to ``timeout_s``); then the owner unlinks the name."""
        store.add(count_key, 1)
        deadline = time.monotonic() + timeout_s
        polls = 0
        while int(store.add(count_key, 0)) < members:
            polls += 1
            if polls % 20 == 0:  # every ~20 ms: a rank that failed at start is reported at once
                raise_if_a_rank_failed(store, members, who)
            if time.monotonic() > deadline:
                raise HocclTimeoutError(f"{who}only {int(store.add(count_key, 0))} of {members} ranks attached to "
                                        f"the shared host memory within {timeout_s:.0f} s")
            time.sleep(0.001)
        if self.owner:
            self.shm.unlink()
            self.linked = False

    def close(self, *views: memoryview) -> None:
        """Unregister, release ``views`` of the memory (drop NumPy views first), unmap."""
        if self.registered:
            from ._cuda import host_unregister

            self.registered = False
            with contextlib.suppress(Exception):  # closing anyway
                host_unregister(self.ptr)
        for view in views:
            with contextlib.suppress(builtins.BufferError):  # a slice still alive: freed with it
                view.release()
        with contextlib.suppress(builtins.BufferError):  # a view still exported elsewhere: unmapped at exit
            self.shm.close()
        if self.linked:  # set up failed before every rank attached: nothing may stay in /dev/shm
            self.linked = False
            with contextlib.suppress(FileNotFoundError):
                self.shm.unlink()


_CREATED: set[str] = set()  # shared segments this process created (ranks as threads of one process, in tests)


def attach(shared_memory: Any, name: str) -> Any:
    """Attach to the owner's segment without handing it to this process's resource tracker: before
    Python 3.13 attaching registers the name too, and the tracker of a member that exits unlinks it
    (while others may still be attaching) or warns of a "leaked shared_memory object" it cannot find
    once the owner has unlinked it (seen at every torchrun exit, 2026-11-30)."""
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    from multiprocessing import resource_tracker

    shm = shared_memory.SharedMemory(name=name)
    if name not in _CREATED:  # the creator in this process keeps its registration (its unlink removes it)
        resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001 - the tracker's own key
    return shm
