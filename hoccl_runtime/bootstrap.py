"""``hoccl_runtime.init()``: the communicator that fits this job (torchrun's environment, or the arguments), on a
store to bootstrap from. Above every communicator module: nothing below imports it (no import cycle)."""

from __future__ import annotations

import operator
import os
from typing import Any

from .errors import HocclError

__all__ = ["init", "bootstrap_store"]


def bootstrap_store(rank: int, world: int, timeout_s: float) -> Any:
    import datetime

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.PrefixStore("hoccl/", dist.distributed_c10d._get_default_store())
    addr = os.environ.get("MASTER_ADDR")
    port = os.environ.get("MASTER_PORT")
    if addr is None or port is None:
        raise HocclError("no store to bootstrap from: run under torchrun, call torch.distributed.init_process_group "
                         "first, or set MASTER_ADDR and MASTER_PORT")
    # MASTER_PORT + 1: MASTER_PORT itself belongs to a later init_process_group(init_method="env://")
    return dist.TCPStore(addr, int(port) + 1, world, rank == 0, timeout=datetime.timedelta(seconds=timeout_s))


def init(*, rank: int | None = None, world_size: int | None = None, device: int | None = None,
         store: Any = None, timeout_s: float = 60.0, gpus_per_node: int | None = None,
         dma_queues: int | None = None, local_copies: str | None = None) -> Any:
    """A communicator for this process's GPU, from torchrun's environment (or the arguments); whichever it is, it
    has the calls of :class:`hoccl_runtime.api.CommunicatorAPI`.

    All ranks on one node (LOCAL_WORLD_SIZE == WORLD_SIZE): the copy-engine :class:`~hoccl_runtime.comm.Communicator`.
    One GPU per node (LOCAL_WORLD_SIZE == 1, or ``gpus_per_node=1`` to make each GPU of a machine its
    own node): :class:`hoccl_runtime.comm.net.NetCommunicator` over the TCP transport. Several GPUs on
    each of several nodes: :class:`hoccl_runtime.comm.nodenet.NodeNetCommunicator` (local rank 0 of each
    node drives the node's part). ``dma_queues`` (intra-node; default HOCCL_DMA_QUEUES or 1): copy
    streams per GPU that the plans spread peers over. ``local_copies`` (intra-node; default
    HOCCL_LOCAL_COPIES or "sm"): who copies a rank's own block of an out-of-place call (see
    :class:`~hoccl_runtime.comm.Communicator`)."""
    rank = _whole("rank", rank, "RANK")
    world_size = _whole("world_size", world_size, "WORLD_SIZE")
    device = _whole("device", device, "LOCAL_RANK", rank)
    local = _whole("gpus_per_node", gpus_per_node, "LOCAL_WORLD_SIZE", world_size)
    if world_size < 1 or not 0 <= rank < world_size or device < 0:
        raise HocclError(f"rank {rank} of world size {world_size} on GPU {device}: the world size must be 1 or more, "
                         "the rank in 0..world size - 1 and the GPU (LOCAL_RANK) 0 or more")
    if local < 1 or world_size % local:
        raise HocclError(f"WORLD_SIZE={world_size} is not a whole number of nodes of {local} GPUs (LOCAL_WORLD_SIZE "
                         "or gpus_per_node, 1 or more); every node must run the same number of ranks")
    if local_copies is not None and local < world_size:
        raise HocclError(f"local_copies={local_copies!r}: only the intra-node communicator takes it (this job has "
                         f"{world_size // local} nodes)")
    if dma_queues is not None and local < world_size:
        raise HocclError(f"dma_queues={dma_queues}: only the intra-node communicator takes it (this job has "
                         f"{world_size // local} nodes of {local} GPUs); leave it out")
    try:
        import torch.distributed as dist
    except ImportError:
        raise HocclError("hoccl_runtime.init() needs torch (its store bootstraps the ranks: torch.distributed's "
                         "TCPStore, or the one you pass): pip install 'hoccl[gpu,torch]'") from None
    if store is None:
        store = bootstrap_store(rank, world_size, timeout_s)
    global _instances
    _instances += 1  # every rank creates its communicators in the same order: a fresh key space for each
    prefixed = dist.PrefixStore(f"comm{_instances}/", store)
    if local == 1 and world_size > 1:
        from .comm.net import NetCommunicator

        return NetCommunicator(rank, world_size, device, prefixed, timeout_s=timeout_s)
    if local < world_size:
        from .comm.nodenet import NodeNetCommunicator

        return NodeNetCommunicator(rank, world_size, device, prefixed, gpus_per_node=local, timeout_s=timeout_s)
    from .comm import Communicator

    return Communicator(rank, world_size, device, prefixed, timeout_s=timeout_s, dma_queues=dma_queues,
                        local_copies=local_copies)


_instances = 0


def _whole(arg: str, given: int | None, variable: str, default: int | None = None) -> int:
    """``given`` (the argument ``arg``), else the environment ``variable`` (torchrun's), else ``default``, as an
    integer: a HocclError naming what is missing or not a whole number, and how to give it."""
    if given is not None:
        try:
            if isinstance(given, bool):
                raise TypeError
            return operator.index(given)
        except TypeError:
            raise HocclError(f"{arg}={given!r}: give a whole number") from None
    text = os.environ.get(variable)
    if text is None:
        if default is None:
            raise HocclError(f"{variable} is not set: run under torchrun or pass rank= and world_size=")
        return default
    try:
        return int(text)
    except ValueError:
        raise HocclError(f"{variable}={text!r} is not a whole number (torchrun sets it; or pass {arg}=)") from None
