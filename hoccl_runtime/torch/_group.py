"""The ``hoccl`` torch.distributed backend: a Python ``dist.ProcessGroup`` whose calls run on a HOCCL communicator.

    import hoccl_runtime.torch                      # registers the backend "hoccl" for CUDA tensors
    pp = dist.new_group(ranks, backend="hoccl")     # or dist.init_process_group("hoccl")
    dist.all_gather_into_tensor(out, inp, group=pp) # copy engines, no SM

Where a call runs::

    current stream ─[work]─(ready)─────────────────────────── [wait end] ─[work]─▶     (Work.wait())
    group's stream ────────[wait ready]─[HOCCL call]─(end)──────────────────────▶

Every call is enqueued on the group's own stream after an event from the caller's current stream, so work the
caller issues next overlaps it (as with NCCL's internal streams); ``Work.wait()`` is a GPU-side wait. The
tensors of a call are held by the group until the call's end event has completed, so freeing them early is safe.

What moves how:

* AllGather (tensor and list), All-to-All (single, with and without split sizes, and list), broadcast,
  scatter, gather, send/recv: on the communicator's copy engines (or its network path). The list forms and
  All-to-Allv are batches of pairwise transfers straight into the caller's tensors (no staging copy). A rank's
  own block of an out-of-place call is a same-GPU copy, which the CUDA driver runs on SMs (see the README);
  in-place AllGather has none.
* send/recv: ``dist.batch_isend_irecv`` issues its ops as one call (the communicator's ``batch_isend_irecv``: every
  address before any wait, so ranks that send to each other do not deadlock; :mod:`hoccl_runtime.torch._batch`).
  A lone ``isend``/``irecv`` is deferred into the next batch, issued at its Work's wait or the next collective.
* Reductions (all_reduce, reduce_scatter, reduce): ``reduce="nccl"`` hands them to an NCCL group made from
  the same store (the paper's choice; the default where every rank has its own GPU), ``reduce="hoccl"``
  moves the blocks with HOCCL and adds them with one local kernel on the receiving GPU (the default where
  ranks share a GPU: NCCL runs there only with a ``NCCL_HOSTID`` per node, and an error it raises then is passed
  on saying so). SUM, AVG, PREMUL_SUM, MIN and MAX.
* barrier: a one-word AllGather whose ``wait()`` blocks the host, as torch's barrier does.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..errors import GPU_NEEDS, BufferError, CollectiveError, HocclError, UnsupportedOpError
from ..settings import env_choice, env_int
from ._lone import ISSUE_NOW, install_pipelining
from ._ops import check_tensor, exchange, reduce_blocks, reduction, split_bytes
from ._streams import _Streams
from ._work import Completion, HocclWork

__all__ = ["ProcessGroupHoccl", "create_backend", "configure", "require_cuda", "REDUCE_MODES"]

REDUCE_MODES = ("auto", "nccl", "hoccl")

# defaults for groups made through dist.new_group / init_process_group, which take no HOCCL arguments
_options: dict[str, Any] = {}


def configure(*, reduce: str | None = None, device: int | None = None, gpus_per_node: int | None = None) -> None:
    """Defaults for the ``hoccl`` groups created from now on (``dist.new_group(backend="hoccl")`` takes no
    HOCCL arguments): ``reduce`` ("auto", "nccl" or "hoccl"; else HOCCL_REDUCE), ``device`` (the GPU; else
    ``torch.cuda.current_device()``), ``gpus_per_node`` (ranks per node, to make each GPU of one machine a
    "node" over TCP; else HOCCL_GPUS_PER_NODE, else the hosts the ranks run on)."""
    if reduce is not None and reduce not in REDUCE_MODES:
        raise HocclError(f"reduce={reduce!r}: give one of {', '.join(REDUCE_MODES)}")
    if gpus_per_node is not None and (isinstance(gpus_per_node, bool) or gpus_per_node < 1):
        raise HocclError(f"gpus_per_node={gpus_per_node!r}: give a positive number of ranks per node")
    _options.update({k: v for k, v in (("reduce", reduce), ("device", device), ("gpus_per_node", gpus_per_node))
                     if v is not None})


class _P2P:
    __slots__ = ("kind", "tensor", "peer", "done")

    def __init__(self, kind: str, tensor: Any, peer: int, done: Completion):
        self.kind, self.tensor, self.peer, self.done = kind, tensor, peer, done


def _one(tensors: Any, what: str) -> Any:
    if isinstance(tensors, torch.Tensor):
        return tensors
    if len(tensors) != 1:
        raise UnsupportedOpError(f"{what} with {len(tensors)} tensors per rank: the hoccl backend takes one "
                                 "(multi-device lists are not supported)")
    return tensors[0]


class ProcessGroupHoccl(dist.ProcessGroup):
    """A ``dist.ProcessGroup`` over a HOCCL communicator (see the module docstring). Made by torch through
    :func:`create_backend`, or directly: ``ProcessGroupHoccl(comm, rank, size, reduce="hoccl")``."""

    def __init__(self, comm: Any, rank: int, size: int, *, reduce: str = "hoccl", nccl: Any = None,
                 streams: Any = None, shares_gpu: bool = False):
        super().__init__(rank, size)
        if reduce not in ("nccl", "hoccl"):
            raise HocclError(f"reduce={reduce!r}: give 'nccl' or 'hoccl'")
        if reduce == "nccl" and nccl is None:
            raise HocclError("reduce='nccl' needs an NCCL backend to hand reductions to (nccl=)")
        self.comm = comm
        self.reduce_mode = reduce
        self.shares_gpu = shares_gpu
        self._nccl = nccl
        self._streams = streams if streams is not None else _Streams(comm.device)
        install_pipelining()  # where the application imported torch's pipelining (torch/_lone.py)
        self._lock = threading.RLock()
        self._pending: list[_P2P] = []
        self._barrier_buf: Any = None
        self._closed = False

    # --- torch's ProcessGroup surface ---------------------------------------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "hoccl"

    _name = "hoccl"

    @property
    def group_name(self) -> str:
        """The name torch gave the group (DeviceMesh and the functional collectives look groups up by it)."""
        return self._name

    @property
    def pg_name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"ProcessGroupHoccl(rank={self.rank()}, size={self.size()}, reduce={self.reduce_mode!r})"

    # torch asks a group for its backend per device: ``new_group`` under a default group bound to a device
    # (``init_process_group(..., device_id=)``, as torchtitan does) reads ``pg._get_backend(device_id)
    # .supports_splitting``, FSDP2's default allocation ``supports_tensor_alloc``. A Python ProcessGroup has no
    # registered backends, so torch's own lookup raises "No backend type associated with device type cuda": this
    # group is its own backend, for CUDA tensors.
    supports_splitting = False

    def _get_backend(self, device: Any) -> ProcessGroupHoccl:
        kind = getattr(device, "type", str(device).split(":")[0])
        if kind != "cuda":
            raise RuntimeError(f"No backend type associated with device type {kind}: the hoccl group serves CUDA "
                               "tensors; use a gloo group for CPU tensors")
        return self

    def supports_tensor_alloc(self, device: Any) -> bool:
        return False

    # --- the engine: every call goes through _issue ------------------------------------------------------
    def _issue(self, run: Any, tensors: Sequence[Any], outputs: Sequence[Any] = (), host_wait: bool = False,
               torch_ops: bool = False) -> HocclWork:
        """Run ``run(stream)`` on the group's stream after the caller's current work; a Work for its end.
        ``torch_ops``: ``run`` launches torch work of its own (kernels, temporaries), to go on that stream too."""
        with self._lock:
            self._check_open()
            self._flush()
            self._streams.follow()
            # a call of zero bytes here moves nothing and needs no plan, where ranks pair up (one node); across
            # nodes every call is a collective of every rank, so this rank takes part whatever its size
            if not self._zero_copy or any(t.numel() for t in tensors):
                if torch_ops:
                    with self._streams.torch_ops():
                        run(self._streams.handle)
                else:
                    run(self._streams.handle)
            held = list(tensors)  # one list for the stream's hold and the Work's: wait() empties both
            event = self._streams.end(held)
        return HocclWork(Completion(event, held, host_wait=host_wait), list(outputs))

    def _check_open(self) -> None:
        if self._closed:
            raise HocclError("this hoccl process group is shut down; create a new one")

    def _check(self, t: Any, what: str) -> None:
        check_tensor(t, what)

    # --- AllGather ------------------------------------------------------------------------------------------
    def _check_group_sized(self, call: str, big: Any, big_name: str, small: Any, small_name: str) -> None:
        """Both tensors usable, of one dtype, ``big`` holding the group's size times ``small``."""
        self._check(big, big_name)
        self._check(small, small_name)
        w = self.size()
        if big.dtype != small.dtype or big.numel() != small.numel() * w:
            raise BufferError(f"{call}: {big_name} has {big.numel()} {big.dtype} elements, the {small_name} "
                              f"{small.numel()} {small.dtype}; the {big_name} must hold {w} x the {small_name} "
                              f"({small.numel() * w}) of the same dtype")

    def _allgather_base(self, output: Any, input: Any, opts: Any = None) -> HocclWork:
        self._check_group_sized("all_gather_into_tensor", output, "output", input, "input")
        return self._issue(lambda s: self.comm.all_gather_into_tensor(output, input, stream=s), [output, input],
                           [output])

    all_gather_single = _allgather_base  # its name in newer torch

    def allgather(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> HocclWork:
        outs = _one(output_tensors, "all_gather") if not isinstance(output_tensors[0], torch.Tensor) \
            else output_tensors
        inp = _one(input_tensors, "all_gather")
        self._check(inp, "input")
        self._same_sizes(outs, inp, "all_gather output")
        me = self.rank()
        sends = [(j, inp) for j in range(self.size()) if j != me]
        recvs = [(j, outs[j]) for j in range(self.size()) if j != me]
        return self._pairwise(sends, recvs, [(inp, outs[me])], [*outs, inp], list(outs))

    # --- All-to-All -----------------------------------------------------------------------------------------
    def alltoall_base(self, output: Any, input: Any, output_split_sizes: Any, input_split_sizes: Any,
                      opts: Any = None) -> HocclWork:
        w = self.size()
        if output_split_sizes or input_split_sizes:
            return self._all_to_all_v(output, input, output_split_sizes, input_split_sizes)
        self._check_all_to_all(output, input)
        rows = input.shape[0] if input.dim() else 1
        if output.numel() != input.numel() or rows % w:
            raise BufferError(f"all_to_all_single: input shape {tuple(input.shape)} and output shape "
                              f"{tuple(output.shape)} must have as many elements, with a first dimension "
                              f"divisible by the group size {w} (or give split sizes)")
        return self._issue(lambda s: self.comm.all_to_all_single(output, input, stream=s), [output, input], [output])

    def _all_to_all_v(self, output: Any, input: Any, output_split_sizes: Any, input_split_sizes: Any) -> HocclWork:
        """All-to-Allv of torch's split sizes (rows). A rank whose tensors or sizes are wrong tells the others
        before it raises (they wait in the call for its sizes; see ``refuse_all_to_all_v``)."""
        w = self.size()
        try:
            self._check_all_to_all(output, input)
            ins = split_bytes(input_split_sizes, input, w, "input")
            outs = split_bytes(output_split_sizes, output, w, "output")
        except HocclError as exc:
            refuse = getattr(self.comm, "refuse_all_to_all_v", None)  # a network communicator's store exchange
            if refuse is not None:
                refuse(exc)
            raise
        return self._issue(lambda s: self.comm.all_to_all_v(output, input, outs, ins, stream=s), [output, input],
                           [output])

    def _check_all_to_all(self, output: Any, input: Any) -> None:
        self._check(output, "output")
        self._check(input, "input")
        if output.dtype != input.dtype:
            raise BufferError(f"all_to_all_single: output is {output.dtype}, input {input.dtype}; give one dtype")

    all_to_all_single = alltoall_base

    def alltoall(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> HocclWork:
        w, me = self.size(), self.rank()
        if len(output_tensors) != w or len(input_tensors) != w:
            raise CollectiveError(f"all_to_all: {len(input_tensors)} inputs and {len(output_tensors)} outputs for a "
                                  f"group of {w}: give one tensor per rank in each list")
        for j in range(w):
            self._check(output_tensors[j], f"output_tensor_list[{j}]")
            self._check(input_tensors[j], f"input_tensor_list[{j}]")
        if output_tensors[me].nbytes != input_tensors[me].nbytes:
            raise BufferError(f"all_to_all: rank {me} sends itself {input_tensors[me].nbytes} bytes but its output "
                              f"block holds {output_tensors[me].nbytes}")
        sends = [(j, input_tensors[j]) for j in range(w) if j != me]
        recvs = [(j, output_tensors[j]) for j in range(w) if j != me]
        return self._pairwise(sends, recvs, [(input_tensors[me], output_tensors[me])],
                              [*output_tensors, *input_tensors], list(output_tensors))

    # --- rooted collectives -------------------------------------------------------------------------------
    def _root(self, root: int, what: str) -> int:
        if not 0 <= root < self.size():
            raise CollectiveError(f"{what}: root {root} is outside this group's ranks 0..{self.size() - 1}")
        return root

    def broadcast(self, tensors: Any, opts: Any = None) -> HocclWork:
        t = _one(tensors, "broadcast")
        self._check(t, "tensor")
        root = self._root(opts.rootRank if opts is not None else 0, "broadcast")
        return self._issue(lambda s: self.comm.broadcast(t, root, stream=s), [t], [t])

    def scatter(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> HocclWork:
        out = _one(output_tensors, "scatter")
        self._check(out, "output")
        root, me = self._root(opts.rootRank if opts is not None else 0, "scatter"), self.rank()
        if me != root:
            return self._pairwise([], [(root, out)], [], [out], [out])
        ins = input_tensors[0] if input_tensors and not isinstance(input_tensors[0], torch.Tensor) else input_tensors
        self._same_sizes(ins, out, "scatter input")
        sends = [(j, ins[j]) for j in range(self.size()) if j != me]
        return self._pairwise(sends, [], [(ins[me], out)], [out, *ins], [out])

    def gather(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> HocclWork:
        inp = _one(input_tensors, "gather")
        self._check(inp, "input")
        root, me = self._root(opts.rootRank if opts is not None else 0, "gather"), self.rank()
        if me != root:
            return self._pairwise([(root, inp)], [], [], [inp], [])
        outs = output_tensors[0] if output_tensors and not isinstance(output_tensors[0], torch.Tensor) \
            else output_tensors
        self._same_sizes(outs, inp, "gather output")
        recvs = [(j, outs[j]) for j in range(self.size()) if j != me]
        return self._pairwise([], recvs, [(inp, outs[me])], [inp, *outs], list(outs))

    def _same_sizes(self, tensors: Any, like: Any, what: str) -> None:
        if len(tensors) != self.size():
            raise CollectiveError(f"{what} list has {len(tensors)} tensors for a group of {self.size()}: give one "
                                  "per rank")
        for j, t in enumerate(tensors):
            self._check(t, f"{what}[{j}]")
            if t.nbytes != like.nbytes or t.dtype != like.dtype:
                raise BufferError(f"{what}[{j}] is {tuple(t.shape)} {t.dtype} but the tensor it pairs with is "
                                  f"{tuple(like.shape)} {like.dtype}: give tensors of one size and dtype")

    def _pairwise(self, sends: list, recvs: list, local: list, tensors: list, outputs: list) -> HocclWork:
        """A collective's sends [(peer, tensor)], receives [(peer, tensor)] and same-GPU copies [(src, dst)] as
        one call (every rank of the group makes it)."""
        packed = not self._zero_copy

        def run(stream: Any) -> None:
            self._collective_exchange(sends, recvs, stream)
            for src, dst in local:
                if src.data_ptr() != dst.data_ptr():
                    dst.copy_(src)  # a same-GPU copy (the driver runs it on SMs)
        return self._issue(run, tensors, outputs, torch_ops=bool(local) or packed)

    @property
    def _zero_copy(self) -> bool:
        """Whether two ranks exchange without the others, straight into the caller's tensors (one node:
        ``pairs_alone``); across nodes a collective's transfers run as one All-to-Allv plan instead."""
        return getattr(self.comm, "pairs_alone", False)

    def _collective_exchange(self, sends: list, recvs: list, stream: Any) -> None:
        """The transfers of a collective call: a batch of pairwise copies where the communicator has batches,
        else one All-to-Allv of the sends packed by destination into a temporary, unpacked by source after
        (same-GPU copies: the network path's cost is the network's)."""
        if self._zero_copy:
            exchange(self.comm, self.rank(), sends, recvs, stream)
            return
        w = self.size()
        in_bytes, out_bytes = [0] * w, [0] * w
        by_dst = dict(sends)
        by_src = dict(recvs)
        for p, t in sends:
            in_bytes[p] += t.nbytes
        for p, t in recvs:
            out_bytes[p] += t.nbytes
        dev = self._device()
        packed_in = torch.cat([by_dst[p].reshape(-1).view(torch.uint8) for p in range(w) if p in by_dst]) if sends \
            else torch.empty(0, dtype=torch.uint8, device=dev)
        packed_out = torch.empty(sum(out_bytes), dtype=torch.uint8, device=dev)
        # every rank takes part, also one with nothing to move (the matrix is exchanged among all)
        self.comm.all_to_all_v(packed_out, packed_in, out_bytes, in_bytes, stream=stream)
        at = 0
        for p in range(w):
            if p in by_src:
                t = by_src[p]
                t.reshape(-1).view(torch.uint8).copy_(packed_out[at:at + t.nbytes])
                at += t.nbytes

    def _device(self) -> Any:
        return torch.device("cuda", self.comm.device)

    # --- point to point: deferred into batches ------------------------------------------------------------
    def send(self, tensors: Any, dst: int, tag: int = 0) -> HocclWork:
        return self._defer("send", _one(tensors, "send"), dst)

    def recv(self, tensors: Any, src: int, tag: int = 0) -> HocclWork:
        return self._defer("recv", _one(tensors, "recv"), src)

    def recv_anysource(self, tensors: Any, tag: int = 0) -> HocclWork:
        raise UnsupportedOpError("recv from any source: HOCCL pairs every transfer before it runs; name the "
                                 "sender (dist.recv(tensor, src=...))")

    def _checked_p2p(self, kind: str, t: Any, peer: int) -> None:
        self._check(t, f"{kind} tensor")
        if not 0 <= peer < self.size() or peer == self.rank():
            raise CollectiveError(f"{kind} with rank {peer}: give another rank of this group, 0..{self.size() - 1} "
                                  f"(this is rank {self.rank()})")

    def _batch_now(self, ops: list) -> list[HocclWork]:
        """Sends and receives [(kind, tensor, peer)] issued now in one batch with any deferred ones (every rank makes
        the same calls as before): a Work per op, all ending with the batch (torch/_batch.py)."""
        for op in ops:
            self._checked_p2p(*op)
        with self._lock:
            self._check_open()
            event, held = self._flush(ops)
        done = Completion(event, held)  # wait() ends the stream's hold
        return [HocclWork(done, [t] if k == "recv" else []) for k, t, _ in ops]

    def _defer(self, kind: str, t: Any, peer: int) -> HocclWork:
        if getattr(ISSUE_NOW, "on", False):  # a batch of one kind of op from torch's pipelining (torch/_lone.py)
            return self._batch_now([(kind, t, peer)])[0]
        install_pipelining()  # pipelining imported since: its next one-kind batches are issued at once
        self._checked_p2p(kind, t, peer)
        with self._lock:
            done = Completion(None, [t], issue=self._flush_now)
            self._streams.follow()  # the group's stream will run the batch after the caller's work so far
            self._pending.append(_P2P(kind, t, peer, done))
        return HocclWork(done, [t] if kind == "recv" else [])

    def _flush_now(self) -> None:
        with self._lock:
            self._flush()

    def _flush(self, more: Sequence = ()) -> tuple:
        """Issue the deferred sends and receives, and ``more`` [(kind, tensor, peer)] after the caller's work so far,
        as one batch (caller holds the lock); (its end event, the tensors the stream holds), or (None, [])."""
        ops, self._pending = self._pending, []
        every = [(op.kind, op.tensor, op.peer) for op in ops] + list(more)
        if not every:
            return None, []
        if more:
            self._streams.follow()  # (each deferred op's follow was made when it was deferred)
        try:
            exchange(self.comm, self.rank(), [(p, t) for k, t, p in every if k == "send"],
                      [(p, t) for k, t, p in every if k == "recv"], self._streams.handle)
            held = [t for _, t, _ in every]  # the stream's hold, shared with the Works of ``more``
            event = self._streams.end(held)
        except Exception as exc:
            for op in ops:
                op.done.error = exc
            raise
        for op in ops:
            op.done.event, op.done.issue = event, None
        return event, held

    def _start_coalescing(self, device: Any = None) -> None:
        """torch's coalescing manager: sends and receives are deferred anyway, issued at ``_end_coalescing``."""

    def _end_coalescing(self, device: Any = None) -> HocclWork:
        with self._lock:
            last = self._pending[-1].done if self._pending else Completion()
            self._flush()
        return HocclWork(last)

    # --- barrier ----------------------------------------------------------------------------------------------
    def barrier(self, opts: Any = None) -> HocclWork:
        if self._barrier_buf is None:
            self._barrier_buf = torch.zeros(self.size(), dtype=torch.int32, device=f"cuda:{self.comm.device}")
        buf = self._barrier_buf
        me = self.rank()
        return self._issue(lambda s: self.comm.all_gather_into_tensor(buf, buf[me:me + 1], stream=s), [buf],
                           host_wait=True)

    # --- reductions -----------------------------------------------------------------------------------------
    def _reduce_scatter_base(self, output: Any, input: Any, opts: Any = None) -> HocclWork:
        self._check_group_sized("reduce_scatter_tensor", input, "input", output, "output")
        w = self.size()
        red = _reduction_of(opts)
        if self.reduce_mode == "nccl":
            return self._nccl._reduce_scatter_base(output, input, _opts(opts, dist.ReduceScatterOptions))

        def run(stream: Any) -> None:
            blocks = torch.empty_like(input)
            self.comm.all_to_all_single(blocks, input, stream=stream)
            reduce_blocks(blocks.view(w, *output.shape), red, output)
        return self._issue(run, [output, input], [output], torch_ops=True)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter(self, output_tensors: Any, input_tensors: Any, opts: Any = None) -> HocclWork:
        out = _one(output_tensors, "reduce_scatter")
        ins = input_tensors[0] if input_tensors and not isinstance(input_tensors[0], torch.Tensor) else input_tensors
        self._check(out, "output")
        self._same_sizes(ins, out, "reduce_scatter input")
        if self.reduce_mode == "nccl":
            return self._nccl.reduce_scatter([out], [list(ins)], _opts(opts, dist.ReduceScatterOptions))
        red = _reduction_of(opts)
        me, w = self.rank(), self.size()

        def run(stream: Any) -> None:
            blocks = torch.empty((w, *out.shape), dtype=out.dtype, device=out.device)
            self._collective_exchange([(j, ins[j]) for j in range(w) if j != me],
                                      [(j, blocks[j]) for j in range(w) if j != me], stream)
            blocks[me].copy_(ins[me])
            reduce_blocks(blocks, red, out)
        return self._issue(run, [out, *ins], [out], torch_ops=True)

    def allreduce(self, tensors: Any, opts: Any = None) -> HocclWork:
        t = _one(tensors, "all_reduce")
        self._check(t, "tensor")
        if self.reduce_mode == "nccl":
            return self._nccl.allreduce([t], _opts(opts, dist.AllreduceOptions))
        red = _reduction_of(opts)
        w, me = self.size(), self.rank()

        def run(stream: Any) -> None:
            flat = t.view(-1)
            n = flat.numel()
            part = -(-n // w)  # each rank reduces one part, then every part is gathered in place
            padded = flat if n == part * w else torch.cat([flat, flat.new_zeros(part * w - n)])
            blocks = torch.empty_like(padded)
            self.comm.all_to_all_single(blocks, padded, stream=stream)
            reduce_blocks(blocks.view(w, part), red, padded[me * part:(me + 1) * part])
            self.comm.all_gather_into_tensor(padded, padded[me * part:(me + 1) * part], stream=stream)
            if padded is not flat:
                flat.copy_(padded[:n])
        return self._issue(run, [t], [t], torch_ops=True)

    def allreduce_coalesced(self, tensors: Any, opts: Any = None) -> HocclWork:
        work = None
        for t in tensors:
            work = self.allreduce([t], opts)
        return work if work is not None else HocclWork(Completion())

    def reduce(self, tensors: Any, opts: Any = None) -> HocclWork:
        t = _one(tensors, "reduce")
        self._check(t, "tensor")
        if self.reduce_mode == "nccl":
            return self._nccl.reduce([t], _opts(opts, dist.ReduceOptions))
        red = _reduction_of(opts)
        root, me, w = self._root(opts.rootRank if opts is not None else 0, "reduce"), self.rank(), self.size()
        if me != root:
            return self._pairwise([(root, t)], [], [], [t], [])

        def run(stream: Any) -> None:
            blocks = torch.empty((w, *t.shape), dtype=t.dtype, device=t.device)
            self._collective_exchange([], [(j, blocks[j]) for j in range(w) if j != me], stream)
            blocks[me].copy_(t)
            reduce_blocks(blocks, red, t)
        return self._issue(run, [t], [t], torch_ops=True)

    # --- lifetime -----------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Close the communicator, then shut down the NCCL backend that the group reduces with, where it has one (torch
        calls it from destroy_process_group, as it calls an NCCL group's own ``shutdown``: one left to its destructor
        warns that destroy_process_group() was not called)."""
        self._close("shutdown")

    def abort(self) -> None:
        """As :meth:`shutdown`, the NCCL backend aborted instead (its pending work dropped, not waited for)."""
        self._close("abort")

    def _close(self, how: str) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                with contextlib.suppress(Exception):
                    self._flush()
                self.comm.close()
            finally:  # whatever the communicator's close raised
                end = getattr(self._nccl, how, None) if self._nccl is not None else None
                if end is not None:
                    with contextlib.suppress(Exception):  # closing anyway; a peer gone is the communicator's error
                        end()


def _opts(opts: Any, kind: Any) -> Any:
    """The options to hand the NCCL backend: the caller's, else torch's defaults (its bindings take no None)."""
    return kind() if opts is None else opts


def _reduction_of(opts: Any) -> Any:
    """The Reduction a call's options ask for (SUM where torch passes none)."""
    return reduction(opts.reduceOp if opts is not None else dist.ReduceOp.SUM)


# --- creation through torch ---------------------------------------------------------------------------------
def _node_key(global_rank: int) -> str:
    per_node = _options.get("gpus_per_node") or env_int("HOCCL_GPUS_PER_NODE", 0, 0)
    if per_node:
        return f"node{global_rank // per_node}"
    return f"{socket.gethostname()}/{os.environ.get('GROUP_RANK', '0')}"


def _gpu_id(device: int) -> str:
    props = torch.cuda.get_device_properties(device)
    return str(getattr(props, "uuid", f"{socket.gethostname()}:{device}"))




def require_cuda(what: str) -> None:
    """Raise one line saying what is needed where this torch cannot reach a CUDA GPU (a CPU-only build, no driver,
    no GPU): torch's own errors there are an AssertionError or an AttributeError from deep inside."""
    if not torch.cuda.is_available():
        build = f"torch {torch.__version__}, built for CUDA {torch.version.cuda}" if torch.version.cuda else \
            f"torch {torch.__version__}, a CPU-only build"
        raise HocclError(f"{what} needs a CUDA GPU, and this process has none ({build}, "
                         f"{torch.cuda.device_count()} GPUs visible): it needs {GPU_NEEDS}")


def create_backend(opts: Any, backend_options: Any = None) -> ProcessGroupHoccl:
    """torch's creator for the ``hoccl`` backend (``dist.Backend.register_backend(..., extended_api=True)``:
    ``opts`` carries the group's store, rank, size, timeout, name and global ranks): a communicator for the
    group's ranks, the intra-node one where they share a node, a network one otherwise."""
    pg = _create(opts.store, opts.group_rank, opts.group_size, opts.timeout, list(opts.global_ranks_in_group))
    pg._name = str(opts.group_id)
    return pg


def _create(store: Any, group_rank: int, group_size: int, timeout: timedelta, global_ranks: list[int]
            ) -> ProcessGroupHoccl:
    from ..comm import Communicator
    from ..comm.net import NetCommunicator
    from ..comm.nodenet import NodeNetCommunicator

    require_cuda("the hoccl backend (dist.new_group(backend='hoccl'))")
    if group_size < 2:
        raise HocclError(f"a hoccl group needs at least 2 ranks (this one has {group_size}); a group of one has "
                         "nothing to move: use the tensors as they are, or a gloo group")
    device = _options.get("device")
    device = torch.cuda.current_device() if device is None else int(device)
    timeout_s = timeout.total_seconds() if timeout is not None else 600.0
    if global_ranks:  # empty for the default group
        global_rank = global_ranks[group_rank]
    else:
        global_rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", group_rank))
    # who shares a node and a GPU with whom: every member says, through the group's store
    store.set(f"hoccl-member/{group_rank}", f"{_node_key(global_rank)}|{_gpu_id(device)}")
    members = [store.get(f"hoccl-member/{r}").decode().split("|") for r in range(group_size)]
    nodes = [m[0] for m in members]
    shares_gpu = len({m[1] for m in members}) < group_size
    mode = _options.get("reduce") or env_choice("HOCCL_REDUCE", "auto", REDUCE_MODES)
    if mode == "auto":  # NCCL runs ranks that share a GPU only where each has its own NCCL_HOSTID
        mode = "hoccl" if shares_gpu else "nccl"
    order = list(dict.fromkeys(nodes))
    per_node = nodes.count(nodes[0])
    contiguous = nodes == [n for n in order for _ in range(per_node)]
    comm_store = dist.PrefixStore("comm/", store)
    if len(order) == 1:
        comm = Communicator(group_rank, group_size, device, comm_store, timeout_s=timeout_s)
    elif not contiguous or any(nodes.count(n) != per_node for n in order):
        raise HocclError(f"this group's ranks lie on nodes {nodes}: a hoccl group across nodes needs the same number "
                         "of ranks on every node, numbered node by node")
    elif per_node == 1:
        comm = NetCommunicator(group_rank, group_size, device, comm_store, timeout_s=timeout_s)
    else:
        comm = NodeNetCommunicator(group_rank, group_size, device, comm_store, gpus_per_node=per_node,
                                   timeout_s=timeout_s)
    nccl = None
    if mode == "nccl":
        from torch.distributed.distributed_c10d import ProcessGroupNCCL

        opts = ProcessGroupNCCL.Options()
        opts._timeout = timeout
        nccl = ProcessGroupNCCL(dist.PrefixStore("nccl/", store), group_rank, group_size, opts)
        if shares_gpu:
            nccl = _SharedGpuNccl(nccl)
    return ProcessGroupHoccl(comm, group_rank, group_size, reduce=mode, nccl=nccl, shares_gpu=shares_gpu)


class _SharedGpuNccl:
    """The NCCL backend of a group whose ranks share a GPU: NCCL answers for itself (it runs there when every rank
    has its own ``NCCL_HOSTID``, over its network transport); an error it raises is passed on with how to make it
    run, or how to do without it."""

    _HINT = ("ranks of this hoccl group share a GPU, and NCCL runs two ranks on one GPU only as two hosts: give each "
             "node its own NCCL_HOSTID (with NCCL_NET=Socket NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1, as "
             "scripts/tcp-nodes.sh does), or reduce with HOCCL (hoccl_runtime.torch.configure(reduce='hoccl'), "
             "HOCCL_REDUCE=hoccl)")

    def __init__(self, nccl: Any):
        self._nccl = nccl

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._nccl, name)
        if not callable(call):
            return call

        def passed_on(*args: Any, **kwargs: Any) -> Any:
            try:
                return call(*args, **kwargs)
            except RuntimeError as exc:  # DistBackendError is one
                raise HocclError(f"NCCL ({name}) refused: {exc}; {self._HINT}") from exc
        return passed_on
