"""FSDP2 on copy engines: ``use_for_fsdp(model)`` gives every FSDP module HOCCL's AllGather (and reduce-scatter).

    fully_shard(block) for each block; fully_shard(model)
    hoccl_runtime.torch.use_for_fsdp(model)      # the training loop is unchanged

FSDP2 (torch >= 2.6: ``FSDPModule.set_custom_all_gather``) calls ``allocate()`` for each all-gather output
and copies the local shard into its own slice itself, so the AllGather that follows is in place: HOCCL makes
no same-GPU copy and uses no SM. The call runs on FSDP's all-gather stream directly (no extra stream or
event); with ``async_op`` it returns a :class:`~hoccl_runtime.torch.HocclWork`, whose ``wait()`` is a GPU-side
event wait.

``allocate()`` hands out memory of a registered window (:meth:`Communicator.register_window`, collective, made at
``use_for_fsdp``; on one node: between nodes, where calls stage through the transport's rings and a window changes
nothing, torch's allocator gives the outputs): the AllGather then skips the per-call address exchange and never
waits for a peer on the host. Blocks are given out first-fit from the window's start and come back when FSDP drops
the tensor (its storage's deleter), so every rank, running the same FSDP program, gets the same offsets (the window
calls check it: another offset raises PlanError on both ranks). A block is reused by later work on the stream that
allocates it, as torch's caching allocator does (FSDP orders its all-gather streams with events for that). An output
that does not fit the window comes from torch's allocator instead and takes the per-call exchange.

Reduce-scatter: with the group's ``reduce="hoccl"`` the gradients move on copy engines and one local kernel
adds them (:meth:`ProcessGroupHoccl._reduce_scatter_base`), on a second hoccl group by default, so that they and
the AllGathers do not queue behind each other on one group; with ``reduce="nccl"`` FSDP keeps its own
reduce-scatter on its own group (NCCL).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from ..errors import HocclError
from ._streams import EventPool
from ._work import Completion, HocclWork

__all__ = ["use_for_fsdp", "HocclAllGather", "HocclReduceScatter", "WindowPool"]

_ALIGN = 512  # bytes: every block starts at a multiple (torch's allocator aligns to 512 too)


class _Block:
    """Owner of one window block: freed when the last tensor on it dies (its storage's DLPack deleter)."""

    __slots__ = ("pool", "offset", "nbytes", "__weakref__")

    def __init__(self, pool: WindowPool, offset: int, nbytes: int):
        self.pool, self.offset, self.nbytes = pool, offset, nbytes

    def __del__(self) -> None:
        pool = self.pool
        if pool is not None:
            pool._release(self.offset, self.nbytes)


class WindowPool:
    """Deterministic first-fit blocks of one registered window (see the module docstring)."""

    def __init__(self, comm: Any, nbytes: int, device: int):
        self.nbytes = -(-int(nbytes) // _ALIGN) * _ALIGN
        self.device = device
        self.space = torch.empty(self.nbytes, dtype=torch.uint8, device=f"cuda:{device}")
        self.window = comm.register_window(self.space)  # collective: every rank, same size
        self._free: list[tuple[int, int]] = [(0, self.nbytes)]  # (offset, bytes), sorted, coalesced
        self._lock = threading.Lock()
        self.misses = 0  # outputs that did not fit (taken from torch's allocator)
        self.peak = 0
        self._used = 0

    def allocate(self, numel: int, dtype: torch.dtype) -> torch.Tensor | None:
        """A 1-D tensor of ``numel`` ``dtype`` elements in the window, or None where none fits."""
        want = max(_ALIGN, -(-numel * dtype.itemsize // _ALIGN) * _ALIGN)
        with self._lock:
            for i, (at, n) in enumerate(self._free):
                if n >= want:
                    self._free[i:i + 1] = [(at + want, n - want)] if n > want else []
                    self._used += want
                    self.peak = max(self.peak, self._used)
                    break
            else:
                self.misses += 1
                return None
        return _tensor_on(self.space.data_ptr() + at, want, self.device, _Block(self, at, want))[
            :numel * dtype.itemsize].view(dtype)

    def _release(self, offset: int, nbytes: int) -> None:
        with self._lock:
            self._used -= nbytes
            free = self._free
            i = 0
            while i < len(free) and free[i][0] < offset:
                i += 1
            free.insert(i, (offset, nbytes))
            # coalesce with the neighbours
            if i + 1 < len(free) and free[i][0] + free[i][1] == free[i + 1][0]:
                free[i] = (free[i][0], free[i][1] + free[i + 1][1])
                del free[i + 1]
            if i > 0 and free[i - 1][0] + free[i - 1][1] == free[i][0]:
                free[i - 1] = (free[i - 1][0], free[i - 1][1] + free[i][1])
                del free[i]

    def close(self) -> None:
        self.window.close()


def _tensor_on(ptr: int, nbytes: int, device: int, owner: Any) -> torch.Tensor:
    """A uint8 torch tensor over ``nbytes`` at ``ptr`` whose storage holds ``owner`` until it dies (through
    CuPy's unowned memory and DLPack)."""
    import cupy

    mem = cupy.cuda.UnownedMemory(ptr, nbytes, owner, device)
    arr = cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0))
    try:  # stream=-1: no synchronization (the array has no pending work; an event on CuPy's legacy stream
        # would order the caller's stream behind the default stream's compute)
        capsule = arr.__dlpack__(stream=-1)
    except (TypeError, ValueError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            capsule = arr.toDlpack()
    return torch.utils.dlpack.from_dlpack(capsule)


def _fsdp_modules(model: torch.nn.Module) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    mods = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not mods:
        raise HocclError(f"{type(model).__name__} has no FSDP module: call fully_shard() on its blocks and on it "
                         "before use_for_fsdp()")
    return mods


def _groups_and_sizes(mods: Sequence[Any]) -> tuple[list[Any], int]:
    """Every FSDP module's shard group, and the largest all-gather output of one module in bytes."""
    groups, largest = [], 0
    for m in mods:
        for pg in _param_groups(m._get_fsdp_state()):
            groups.append(pg.mesh_info.shard_process_group)
            w = pg.mesh_info.shard_mesh_size
            total = 0
            for fp in pg.fsdp_params:
                shape = fp.sharded_param.shape  # the DTensor's global shape
                rows = shape[0] if len(shape) else 1
                rest = 1
                for d in shape[1:]:
                    rest *= d
                # the all-gather dtype: mixed precision's param_dtype (set at FSDP's lazy init, so read from the
                # policy before the first forward), else the parameter's own
                policy = getattr(pg, "mp_policy", None)
                dtype = getattr(fp, "param_dtype", None) or getattr(policy, "param_dtype", None) or \
                    fp.sharded_param.dtype
                total += -(-rows // w) * w * rest * dtype.itemsize
            largest = max(largest, total)
    return groups, largest


def _current_raw_stream(device: int) -> int:
    """The current stream's raw handle, without making a torch Stream object (a few us less per call)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream


def _param_groups(state: Any) -> list[Any]:
    """An FSDP state's parameter groups: one (``_fsdp_param_group``, torch <= 2.11) or a list (newer torch)."""
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is not None:
        return list(groups)
    one = getattr(state, "_fsdp_param_group", None)
    return [one] if one is not None else []


class HocclAllGather:
    """FSDP2's ``AllGather`` (``torch.distributed.fsdp._fully_shard._fsdp_api``) on a hoccl group's communicator:
    on FSDP's all-gather stream itself where the communicator takes any stream (one node; one GPU per node), else
    on the group's stream (several GPUs per node: those calls go on one stream)."""

    def __init__(self, group: Any, pool: WindowPool | None = None):
        self.group, self.comm, self.pool = group, group.comm, pool
        self.direct = bool(getattr(self.comm, "any_stream", False))
        self._warned = False
        self._events = EventPool()  # the direct path's end events, reused (torch/_streams.py)

    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        numel = 1
        for d in size:
            numel *= int(d)
        if self.pool is not None:
            t = self.pool.allocate(numel, dtype)
            if t is not None:
                return t.view(*size) if len(size) != 1 else t
            if not self._warned:
                self._warned = True
                warnings.warn(f"an FSDP all-gather output of {numel} {dtype} elements does not fit the HOCCL window "
                              f"({self.pool.nbytes} bytes): it takes the per-call address exchange; give "
                              "use_for_fsdp(window_bytes=...) a larger window", RuntimeWarning, stacklevel=2)
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any,
                 async_op: bool = False) -> Any:
        if group is not None and group.size() != self.comm.world:
            raise HocclError(f"FSDP's all-gather group has {group.size()} ranks but the HOCCL communicator "
                             f"{self.comm.world}: pass use_for_fsdp(group=) the hoccl group of the shard dimension")
        if not self.direct:
            work = self.group._allgather_base(output_tensor, input_tensor)
            if async_op:
                return work
            work.wait()
            return None
        stream = _current_raw_stream(self.comm.device)  # FSDP's all-gather stream
        self.comm.all_gather_into_tensor(output_tensor, input_tensor, stream=stream)
        if not async_op:
            return None
        event = self._events.record()  # on FSDP's all-gather stream, the current one (reused events)
        return HocclWork(Completion(event, [output_tensor, input_tensor]), [output_tensor])


class HocclReduceScatter:
    """FSDP2's ``ReduceScatter`` on a hoccl process group with ``reduce="hoccl"``: the gradient blocks move
    on copy engines, one local kernel reduces them."""

    def __init__(self, group: Any):
        self.group = group

    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: Any, op: Any,
                 async_op: bool = False) -> Any:
        opts = dist.ReduceScatterOptions()
        opts.reduceOp = op
        work = self.group._reduce_scatter_base(output_tensor, input_tensor, opts)
        if async_op:
            return work
        work.wait()
        return None


def use_for_fsdp(model: torch.nn.Module, group: Any = None, *, window_bytes: int | None = None,
                 reduce: str | None = None, reduce_group: Any = None) -> Any:
    """Give every FSDP2 module of ``model`` HOCCL's AllGather (in place, on copy engines, window memory) and,
    where the group reduces with HOCCL, its reduce-scatter. Collective: every rank calls it alike.

    ``group``: a hoccl process group over FSDP's shard ranks (default: the default group if it is hoccl's,
    else ``dist.new_group(backend="hoccl")`` over the world). ``window_bytes``: the registered window that
    ``allocate()`` carves (default: 4x the largest module's all-gather output on a communicator whose calls gain from
    windows, one node's; none across nodes, where torch's allocator gives the outputs; 0: no window).
    ``reduce``: "hoccl" or "nccl" (default: the group's). ``reduce_group``: with ``reduce="hoccl"``, the hoccl group
    of the same ranks that the reduce-scatters run on. A group runs its calls one after another, so on one group a
    reduce-scatter and the next AllGather wait for each other, as NCCL's do on one communicator; on two groups (two
    communicators, two proxies) they move at once. Default: a second hoccl group made here, once per group
    (collective, like ``dist.new_group``: one group per shard group of FSDP's device mesh, HSDP's included; it reduces
    with HOCCL, on the group's GPU, with its timeout), kept alive with ``group``. Where FSDP's mesh does not cover
    the world (a slice of a larger mesh, as with pipelining) ranks cannot make it alike, and ``group`` itself is
    used: pass ``reduce_group=`` one made per shard group with ``dist.new_group(ranks, backend="hoccl")``.
    ``reduce_group=group``: both kinds of call on the one group. Returns the group."""
    from ._group import ProcessGroupHoccl

    mods = _fsdp_modules(model)
    shard_groups, largest = _groups_and_sizes(mods)
    if group is None:
        default = dist.distributed_c10d._get_default_group()
        group = default if isinstance(default, ProcessGroupHoccl) else dist.new_group(backend="hoccl")
    _require_hoccl_group(group, "group")
    for g in shard_groups:
        if g.size() != group.size() or dist.get_process_group_ranks(g) != _ranks(group):
            raise HocclError(f"an FSDP module shards over ranks {dist.get_process_group_ranks(g)} but the hoccl group "
                             f"holds {_ranks(group)}: pass use_for_fsdp(group=) a hoccl group of the same ranks "
                             "(for HSDP, one per shard dimension group)")
    reduce = group.reduce_mode if reduce is None else reduce
    if reduce not in ("hoccl", "nccl"):
        raise HocclError(f"reduce={reduce!r}: give 'hoccl' or 'nccl'")
    _check_reduce_group(reduce_group, group, reduce)
    if reduce == "hoccl" and reduce_group is None:
        reduce_group = _own_reduce_group(group, _shard_rows(mods))
    helps = getattr(group.comm, "windows_help", True)  # across nodes: 61.6 against torch's 12.9 us a call (docs)
    size = (4 * largest if helps else 0) if window_bytes is None else int(window_bytes)
    pool = WindowPool(group.comm, size, group.comm.device) if size > 0 else None
    gather = HocclAllGather(group, pool)
    scatter = HocclReduceScatter(reduce_group) if reduce == "hoccl" else None  # reduce_group set above
    for m in mods:
        m.set_custom_all_gather(gather)
        if scatter is not None:
            m.set_custom_reduce_scatter(scatter)
    group._fsdp_pool = pool  # kept alive with the group
    group._fsdp_reduce_group = reduce_group
    return group


def _shard_rows(mods: Sequence[Any]) -> list[list[int]] | None:
    """Every shard group of the FSDP modules' device mesh, as lists of global ranks (one per shard group, in the
    mesh's order: what ``DeviceMesh`` itself makes groups of), or None where the modules' meshes differ."""
    rows = None
    for m in mods:
        for pg in _param_groups(m._get_fsdp_state()):
            info = pg.mesh_info
            t, d = info.mesh.mesh, info.shard_mesh_dim
            mine = t.transpose(d, -1).reshape(-1, t.size(d)).tolist()
            if rows is not None and mine != rows:
                return None
            rows = mine
    return rows


def _own_reduce_group(group: Any, rows: list[list[int]] | None) -> Any:
    """The reduce-scatters' own hoccl group of ``group``'s ranks (use_for_fsdp's default), made once per group with
    HOCCL reducing, on ``group``'s GPU and timeout; or ``group`` itself where that cannot be made safely.

    ``dist.new_group`` is collective over the world: every rank makes every group, in the same order. So a group is
    made for every shard group of the FSDP mesh (``rows``; HSDP: one per replica), which every rank knows alike only
    where the mesh covers the whole world, each rank once. A mesh sliced from a larger one (pipeline x FSDP) holds
    only this rank's slice, which differs between ranks: there ``group`` is kept (pass ``reduce_group=``)."""
    from datetime import timedelta

    from . import _group

    if not dist.is_initialized() or rows is None or _ranks(group) not in rows:
        return group
    if sorted(r for row in rows for r in row) != list(range(dist.get_world_size())):
        return group
    made = getattr(group, "_fsdp_own_reduce_group", None)
    if made is not None:  # a second model on the same group: the same second group (not one more proxy a call)
        return made
    me = dist.get_rank()
    held = dict(_group._options)
    _group._options.update(reduce="hoccl", device=group.comm.device)
    try:
        for row in rows:  # every rank, every shard group, in the mesh's order; a rank keeps its own
            g = dist.new_group(ranks=row, backend="hoccl", timeout=timedelta(seconds=group.comm.timeout_s))
            made = g if me in row else made
    finally:
        _group._options.clear()
        _group._options.update(held)
    group._fsdp_own_reduce_group = made
    return made


def _require_hoccl_group(group: Any, arg: str) -> None:
    """Raise HocclError unless ``group`` (use_for_fsdp's argument ``arg``) is a hoccl process group."""
    from ._group import ProcessGroupHoccl

    if not isinstance(group, ProcessGroupHoccl):
        raise HocclError(f"use_for_fsdp({arg}=...) takes a hoccl process group (dist.new_group(backend='hoccl')), "
                         f"not {type(group).__name__}")


def _check_reduce_group(reduce_group: Any, group: Any, reduce: str) -> None:
    """Raise HocclError unless ``reduce_group`` is None or a hoccl group of ``group``'s ranks, with reduce="hoccl"."""
    if reduce_group is None:
        return
    if reduce != "hoccl":
        raise HocclError(f"use_for_fsdp(reduce_group=...) is for HOCCL's reduce-scatter; with reduce={reduce!r} FSDP "
                         "reduces on its own group: drop reduce_group or pass reduce='hoccl'")
    _require_hoccl_group(reduce_group, "reduce_group")
    if _ranks(reduce_group) != _ranks(group):
        raise HocclError(f"use_for_fsdp(reduce_group=...) holds ranks {_ranks(reduce_group)} but the AllGather's group "
                         f"{_ranks(group)}: make it over the same ranks")


def _ranks(group: Any) -> list[int]:
    try:
        return dist.get_process_group_ranks(group)
    except Exception:  # noqa: BLE001 - a group torch did not register (made directly)
        return list(range(group.size()))
