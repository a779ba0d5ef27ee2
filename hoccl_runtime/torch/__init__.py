"""HOCCL inside PyTorch training: FSDP2 hooks, the ``hoccl`` torch.distributed backend, pipelining.

    import hoccl_runtime.torch as ht              # registers the backend "hoccl" (CUDA tensors)
    ht.use_for_fsdp(model)                        # FSDP2's AllGathers on copy engines, in place, no SM
    pp = dist.new_group(backend="hoccl")          # a process group whose collectives and P2P are HOCCL's
    stage = PipelineStage(submod, i, n, device, group=pp)

What runs without SMs and what falls back is in docs/training.md. Needs torch (``pip install hoccl[torch]``)
and a GPU; importing it needs neither a GPU nor a process group.
"""

from __future__ import annotations

import torch.distributed as dist

from . import _batch
from ._fsdp import HocclAllGather, HocclReduceScatter, WindowPool, use_for_fsdp
from ._group import REDUCE_MODES, ProcessGroupHoccl, configure, create_backend, require_cuda
from ._ops import Reduction, reduction
from ._work import HocclWork

__all__ = ["use_for_fsdp", "HocclAllGather", "HocclReduceScatter", "WindowPool", "ProcessGroupHoccl",
           "create_backend", "configure", "require_cuda", "REDUCE_MODES", "HocclWork", "Reduction", "reduction",
           "BACKEND"]

BACKEND = "hoccl"

if BACKEND.upper() not in dist.Backend._plugins:  # importing twice (or after a user's own registration) is fine
    dist.Backend.register_backend(BACKEND, create_backend, extended_api=True, devices=["cuda"])
_batch.install()  # dist.batch_isend_irecv issues a hoccl group's batch when it returns (torch/_batch.py)
