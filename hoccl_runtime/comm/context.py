"""The node context: what each of the three communicators starts from (the intra-node Communicator, the network
communicators with one and with several GPUs per node), checked and built once per communicator by
:meth:`NodeContext.make`: the rank's place (rank, world, node, local GPU), its GPU, the store and the timeout, the
machine topology of its plans, and a bounded read of a partner's store key."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._store import wait_for_key
from ..errors import HocclError

__all__ = ["NodeContext"]


@dataclass(frozen=True)
class NodeContext:
    rank: int
    world: int
    device: int
    store: Any
    timeout_s: float
    gpus_per_node: int  # ranks per node (the world for the intra-node communicator)

    @classmethod
    def make(cls, rank: int, world: int, device: int, store: Any, timeout_s: float,
             gpus_per_node: int | None = None) -> NodeContext:
        """The context of rank ``rank`` of ``world`` on GPU ``device`` (``gpus_per_node``: ranks per node; None: one
        node), its arguments checked: a bad one raises HocclError naming it, before anything is made."""
        per_node = world if gpus_per_node is None else gpus_per_node
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world:
            raise HocclError(f"rank {rank!r} is outside 0..{world - 1}")
        if per_node < 1 or world % per_node:
            raise HocclError(f"rank {rank} of {world} with {per_node} GPUs per node: the world must be whole nodes")
        try:
            index = -1 if isinstance(device, bool) else operator.index(device)
        except TypeError:
            index = -1
        if index < 0:
            raise HocclError(f"device={device!r}: give the index of a GPU this process sees (0, 1, ...)")
        if not timeout_s > 0:
            raise HocclError(f"timeout_s={timeout_s!r}: give a positive number of seconds")
        return cls(rank, world, index, store, float(timeout_s), per_node)

    @property
    def node(self) -> int:
        return self.rank // self.gpus_per_node

    @property
    def local(self) -> int:
        return self.rank % self.gpus_per_node

    @property
    def nodes(self) -> int:
        return self.world // self.gpus_per_node

    def topology(self, **options: Any) -> Any:
        """The topology of this machine's plans (hoccl_runtime.plans.machine_topology) for these nodes."""
        from ..plans import machine_topology

        return machine_topology(nodes=self.nodes, gpus_per_node=self.gpus_per_node, device=self.device, **options)

    def check_device(self) -> None:
        """CuPy and a GPU present, and this rank's among the GPUs the process sees: else the one-line error."""
        from .. import _cuda

        _cuda.cupy_runtime()  # CuPy and a GPU, or the one-line error saying what is missing
        n = _cuda.device_count()
        if self.device >= n:
            raise HocclError(f"rank {self.rank} asked for GPU {self.device} but this process sees {n} (GPUs "
                             f"0..{n - 1}): give device= one of those, or check CUDA_VISIBLE_DEVICES and "
                             "--nproc_per_node")

    def store_get(self, key: str, peer: int, what: str, watch: Callable[[], None] | None = None,
                  hint: str = "issuing the same calls") -> bytes:
        """Rank ``peer``'s value of ``key``, waited for up to the timeout (``watch`` raises a failure found
        meanwhile); HocclTimeoutError names the peer, what it did not do and ``hint``."""
        late = (f"rank {peer} did not {what} within {self.timeout_s:.0f} s (rank {self.rank} waits for it); is it "
                f"alive, {hint}?")
        return bytes(wait_for_key(self.store, key, self.world, self.timeout_s, f"rank {self.rank}: ",
                                  f"rank {peer}", watch=watch, late=late, poll_s=1e-3))
