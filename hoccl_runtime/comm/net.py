"""The communicator across nodes with one GPU per node (torchrun ``--nnodes N --nproc_per_node 1``, or
``hoccl_runtime.init(gpus_per_node=1)`` to make every GPU of one machine its own "node").

The torch-like calls of the intra-node communicator (all_gather_into_tensor, all_to_all_single,
broadcast, scatter, gather, send, recv), each returning at once. What happens:

* The caller's stream gets two stream memory operations per call and nothing else: ``START = 1`` where
  the call sits in the stream, and ``wait DONE == 1; DONE = 0`` after it. No kernel. Each stream the calls
  come on has its own START/DONE pair.
* The call's copies are enqueued at once, in the caller's thread, on the executor's copy streams: after an
  event recorded where the call sits in the caller's stream, each staging and landing copy gated by a
  counter flag (:meth:`~hoccl_runtime.net.executor.GpuNodeExecutor.prepare`).
* A proxy (a process of its own, or a thread of this one) takes the calls in order and drives this node's part
  of each with a reusable :class:`~hoccl_runtime.net.executor.GpuNodeExecutor` (opening the copies' gates as slots
  free and chunks arrive, the TCP transport, connections and rings set up once) without any CUDA call, from the
  moment it takes the call (the copies wait for the caller's stream on the GPU); once the stream has reached the
  call (``START == 1``, then reset) and the call's copies are through, it writes ``DONE = 1``, which lets the
  stream go on. The flags live in pinned host memory that the GPU reads
  and writes. (A proxy that issued copies itself could sit in the driver behind the application's blocking
  CUDA call, e.g. ``tensor.cpu()`` waiting for this very call: seen on the H200.)
* A call that fails in the proxy (a peer died, another collective on a peer node: ``TransportError`` or
  ``PlanError``) still releases the stream (the data is then wrong), and the error is raised by the
  next call, ``synchronize()`` or ``close()``.

Chunks: 2 MiB (``chunk_bytes=``, HOCCL_NET_CHUNK_BYTES); connections: 8 lanes (``lanes=``, HOCCL_NET_LANES); staging: a
pinned ring of up to 256 MiB per direction and executor (``ring_bytes=``: at most 64 chunks in flight, 128 MiB of
2 MiB chunks; with 4 chunks of 8 MiB the GPU path ran at 0.64-0.74 of the transport's own rate on the 2x H200 host,
see docs/results/history.md); the listening address:
``HOCCL_SOCKET_ADDR``, else the interface that routes to torchrun's MASTER_ADDR, else loopback.
Addresses are exchanged through the store; every run starts with a plan notice, so ranks in
different collectives raise ``PlanError``.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from typing import Any

from .._cuda import cuda_errors, on_device  # no CUDA at import: it loads cupy / cuda-bindings when first used
from ..errors import CollectiveError, HocclError, HocclTimeoutError, PlanError
from ..executor import check_buffers
from ..interop import DeviceBuffer, as_buffer, as_rank, as_stream, window_buffer
from ..net.callproxy import CallProxy, DoneOnce, StartFlag
from ..plans import CallKey, PlanCache
from .calls import CallEvents, counted_start, enqueue_call, enqueue_counted, enqueue_on_stream
from .context import NodeContext
from .netconf import job_secret, net_chunk_bytes, net_lanes, net_poll_us
from .netconf import local_address as _local_address

__all__ = ["NetCommunicator", "CallProxy", "CallEvents", "NetWindow", "enqueue_call", "job_secret"]


MAX_STREAMS = 16  # streams one NetCommunicator's calls may come on (a START/DONE pair each)


def _compiled(cache: dict, topology: Any, key: CallKey, chunk_bytes: int) -> Any:
    """The plan for a call named by its CallKey (the CollectiveSpec is
    built only on a cache miss, off the per-call path)."""
    plan = cache.get(key)
    if plan is None:
        from ..plans import compile_call

        plan = cache[key] = compile_call(topology, key, chunk_bytes, multicast=True)  # the proxy compiles the same
    return plan


class NetWindow:
    """What ``register_window`` returns across nodes: the same calls as on the intra-node communicator's
    :class:`~hoccl_runtime.comm.Window` (``close``, a context manager), holding the tensor until closed.
    Calls between nodes stage through the transport's rings registered once, so a window changes
    nothing in them."""

    def __init__(self, tensor: Any, nbytes: int):
        self.tensor, self.nbytes, self.closed = tensor, nbytes, False

    def close(self) -> None:
        self.closed, self.tensor = True, None

    def __enter__(self) -> NetWindow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Calls:
    """The torch-like calls, the plan cache and the per-call buffer checks of the network communicators."""

    rank: int
    world: int
    device: int
    timeout_s: float
    topology: Any
    chunk_bytes: int
    _plans: dict
    _stream: int | None

    closed: bool

    def close(self) -> None:
        """Wait for the calls issued so far (within the timeout), then free everything; again: nothing."""
        if self.closed:
            return
        self.closed = True
        try:
            self._finish_calls()
        finally:
            self._free()

    def _finish_calls(self) -> None:  # pragma: no cover - every communicator defines it
        raise NotImplementedError

    def _free(self) -> None:  # pragma: no cover - every communicator defines it
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- torch-like calls (hoccl_runtime.api.CommunicatorAPI) ------------------------------------------------
    pairs_alone = False  # every call is a collective of every rank (each run says hello to every node)
    _a2av_calls = 0  # All-to-Allv calls so far: the store keys of their split rows
    any_stream = False  # one stream (NodeNetCommunicator); NetCommunicator takes any
    windows_help = False  # calls stage through the transport's rings: a registered window changes nothing (NetWindow)

    _ahead = 0  # calls a proxy may have unfinished before the next waits (HOCCL_NET_AHEAD; 0: no bound)

    def _bound_ahead(self, proxy: CallProxy) -> None:
        """Wait (without the GIL) until at most ``_ahead`` of ``proxy``'s calls are unfinished (see
        :meth:`CallProxy.wait_pending`: a Python proxy runs only while the application's thread lets go of the GIL),
        then raise what the communicator failed with meanwhile, if anything."""
        if self._ahead and not proxy.wait_pending(self._ahead, self.timeout_s):
            raise HocclTimeoutError(f"rank {self.rank}: {self._ahead} earlier network calls still unfinished after "
                                    f"{self.timeout_s:.0f} s (HOCCL_NET_AHEAD); has every rank issued them?")
        self._raise()

    _told: BaseException | None = None  # the failure raised to the caller once already

    def _fail(self, error: BaseException) -> None:
        """Raise ``error``, this communicator's failure: as it came the first time, then as an earlier call's, of the
        same type. Once a call has failed the proxy runs no more of them (they are skipped, so that no stream waits
        forever), so every later call and ``synchronize`` raise it, as an NCCL communicator stays in its error."""
        if self._told is None:
            self._told = error
            raise error
        message = (f"rank {self.rank}: this communicator failed in an earlier call and runs no more calls "
                   f"({type(error).__name__}: {error}); close it and create a new one")
        try:
            again = type(error)(message)
        except Exception:  # noqa: BLE001 - an error type that takes other arguments
            again = HocclError(message)
        raise again from error

    def _no_pacing(self, call: str, rate_gbps: float | None, duration_s: float | None) -> None:
        if rate_gbps is not None or duration_s is not None:
            from ..api import unsupported

            raise unsupported(type(self).__name__, f"{call}(rate_gbps=/duration_s=)",
                              "pacing caps a node's copy-engine queue; across nodes the network sets the pace: "
                              "leave it out")

    def register_window(self, tensor: Any) -> NetWindow:
        """Accepted as on the intra-node communicator, so code written for one node runs across nodes: the
        buffer is checked and held; calls on it run as any others (see :class:`NetWindow`)."""
        return NetWindow(tensor, window_buffer(tensor, self.rank, self.device).nbytes)

    def all_gather_into_tensor(self, output: Any, input: Any, stream: Any = None, *, rate_gbps: float | None = None,
                               duration_s: float | None = None) -> None:
        self._no_pacing("all_gather_into_tensor", rate_gbps, duration_s)
        out = as_buffer(output, "output")
        self._call(CallKey.allgather(out.nbytes), input, output, stream)

    def all_to_all_single(self, output: Any, input: Any, stream: Any = None, *, rate_gbps: float | None = None,
                          duration_s: float | None = None) -> None:
        self._no_pacing("all_to_all_single", rate_gbps, duration_s)
        out = as_buffer(output, "output")
        self._call(CallKey.alltoall(out.nbytes), input, output, stream)

    def broadcast(self, tensor: Any, root: int, stream: Any = None, *, rate_gbps: float | None = None,
                  duration_s: float | None = None) -> None:
        self._no_pacing("broadcast", rate_gbps, duration_s)
        buf = as_buffer(tensor, "tensor")
        root = as_rank(root, self.world, "root")
        self._call(CallKey.broadcast(buf.nbytes, root), tensor, tensor, stream)

    def scatter(self, output: Any, input: Any = None, root: int = 0, stream: Any = None, *,
                rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        self._no_pacing("scatter", rate_gbps, duration_s)
        out = as_buffer(output, "output")
        root = as_rank(root, self.world, "root")
        self._call(CallKey.scatter(out.nbytes * self.world, root), input if self.rank == root else None, output,
                   stream)

    def gather(self, input: Any, output: Any = None, root: int = 0, stream: Any = None, *,
               rate_gbps: float | None = None, duration_s: float | None = None) -> None:
        self._no_pacing("gather", rate_gbps, duration_s)
        inp = as_buffer(input, "input")
        root = as_rank(root, self.world, "root")
        self._call(CallKey.gather(inp.nbytes * self.world, root), input, output if self.rank == root else None,
                   stream)

    def send(self, tensor: Any, dst: int, stream: Any = None, *, rate_gbps: float | None = None,
             duration_s: float | None = None) -> None:
        self._no_pacing("send", rate_gbps, duration_s)
        buf = as_buffer(tensor, "tensor")
        dst = as_rank(dst, self.world, "dst", self.rank)
        self._call(CallKey.sendrecv(self.rank, dst, buf.nbytes), tensor, None, stream)

    def recv(self, tensor: Any, src: int, stream: Any = None) -> None:
        buf = as_buffer(tensor, "tensor")
        src = as_rank(src, self.world, "src", self.rank)
        self._call(CallKey.sendrecv(src, self.rank, buf.nbytes), None, tensor, stream)

    def batch_isend_irecv(self, ops: list[tuple[str, Any, int]], stream: Any = None) -> None:
        """Pipeline-stage exchanges, as on the intra-node communicator: ("send", tensor, dst) and ("recv", tensor,
        src) ops, run one after the other in the (src, dst) order every rank uses, so ranks that send to each other
        never wait on each other."""
        calls = []
        for op in ops:
            if len(op) != 3 or op[0] not in ("send", "recv"):
                raise HocclError(f"batch op {op!r}: use ('send', tensor, dst) or ('recv', tensor, src)")
            kind, tensor, peer = op
            peer = as_rank(peer, self.world, "dst" if kind == "send" else "src", self.rank)
            calls.append(((self.rank, peer) if kind == "send" else (peer, self.rank), kind, tensor, peer))
        for _, kind, tensor, peer in sorted(calls, key=lambda c: c[0]):
            if kind == "send":
                self.send(tensor, peer, stream)
            else:
                self.recv(tensor, peer, stream)

    def execute(self, plan: Any, input: Any, output: Any, stream: Any = None, *, rate_gbps: float | None = None,
                duration_s: float | None = None) -> None:
        from ..api import unsupported

        raise unsupported(type(self).__name__, "execute(plan)", "run a multi-node plan file with hoccl_runtime."
                          "execute(plan, buffers) in one process per node (each giving its node's buffers), or "
                          "hoccl-run PLAN under torchrun; or call the collectives, which compile their own")

    def all_to_all_v(self, output: Any, input: Any, output_split_bytes: Any, input_split_bytes: Any,
                     stream: Any = None) -> None:
        """All-to-Allv: block j of ``input`` (``input_split_bytes[j]`` bytes, back to back) goes to rank j, landing
        as block ``rank`` of its ``output`` (blocks ``output_split_bytes``). A collective call (every rank, in the
        same order, as every call of these communicators is): the ranks' rows of the traffic matrix are exchanged
        through the store (a host round trip), then one All-to-Allv plan of that matrix runs, cached by it."""
        from .._splits import alltoallv_pieces
        from .._store import wait_for_key

        me, w = self.rank, self.world
        try:  # the sizes against the buffers: a rank that refuses tells the others at once (they would wait for it)
            alltoallv_pieces(me, w, as_buffer(input, "input"), as_buffer(output, "output"), input_split_bytes,
                             output_split_bytes)
            mine = ",".join(str(int(b)) for b in input_split_bytes) + "|" + \
                ",".join(str(int(b)) for b in output_split_bytes)
        except (HocclError, TypeError, ValueError) as exc:
            self.refuse_all_to_all_v(exc)
            raise
        self._a2av_calls += 1
        k = self._a2av_calls
        self._store.set(f"a2av/{k}/{me}", mine)
        rows = []
        for r in range(w):
            text = wait_for_key(self._store, f"a2av/{k}/{r}", w, self.timeout_s, f"rank {me}: ",
                                f"rank {r}'s split sizes of All-to-Allv call {k}", watch=self._raise,
                                poll_s=0.005).decode() if r != me else mine
            if text.startswith("!"):
                raise CollectiveError(f"rank {me}: rank {r} refused All-to-Allv call {k} ({text[1:]}); this call "
                                      "moves nothing on any rank: fix the split sizes there")
            sends, receives = text.split("|")
            rows.append((tuple(int(b) for b in sends.split(",")), [int(b) for b in receives.split(",")]))
        with contextlib.suppress(Exception):  # every rank read call k - 2's rows before it wrote call k - 1's
            self._store.delete_key(f"a2av/{k - 2}/{me}")
        for r in range(w):  # every rank checks every rank's receives, so all refuse a mismatch together
            column = [rows[q][0][r] for q in range(w)]
            if column != rows[r][1]:
                raise PlanError(f"rank {me}: rank {r} expects {rows[r][1]} bytes from ranks 0..{w - 1} "
                                f"(its output_split_bytes) but they send it {column}: each rank's output splits must "
                                f"be the column of the others' input splits; All-to-Allv call {k} moves nothing")
        rows = [row[0] for row in rows]
        if any(any(row) for row in rows):
            self._call(CallKey.alltoallv(tuple(rows)), input, output, stream)

    def refuse_all_to_all_v(self, exc: BaseException) -> None:
        """Refuse this rank's next All-to-Allv call for ``exc`` (its sizes are wrong here, found by this
        communicator or by a layer above, such as torch's split sizes): the other ranks, waiting in that call for
        this rank's row, raise a :class:`CollectiveError` naming this rank and ``exc`` at once. The caller raises
        ``exc`` itself; the call counts as made, so the next calls of every rank stay paired."""
        self._a2av_calls += 1
        with contextlib.suppress(Exception):  # a store that is gone: the others time out naming this rank
            self._store.set(f"a2av/{self._a2av_calls}/{self.rank}", "!" + f"{type(exc).__name__}: {exc}"[:1000])

    def _buffers(self, plan: Any, input: Any, output: Any, stream: Any) -> tuple[Any, Any, int]:
        """(input, output, stream) of this rank for ``plan``: absent parts as empty buffers, an in-place
        input as the resident slice of the output, and the one stream these calls may use."""
        r = self.rank
        none = DeviceBuffer(0, 0, self.device)  # a part this rank does not have (e.g. a sender's output)
        inp = as_buffer(input, "input") if input is not None and plan.ranks.input_bytes[r] else none
        out = as_buffer(output, "output") if output is not None and plan.ranks.output_bytes[r] else none
        if plan.collective.in_place and inp.nbytes:  # the rank's input is the resident part of its output
            offset, nbytes = plan.ranks.resident_offset, plan.ranks.resident_bytes
            inp = out.slice(int(offset[r]), int(nbytes[r]))
        # here, before the call is issued (or the node's leader told of it): the other ranks' calls pair up as before
        if inp.nbytes != plan.ranks.input_bytes[r] or out.nbytes != plan.ranks.output_bytes[r]:
            check_buffers(r, inp if input is not None else None, out if output is not None else None, plan)
        s = as_stream(stream)
        self._check_stream(s)
        return inp, out, s

    def _check_stream(self, s: int) -> None:
        """Calls of the several-GPUs-per-node communicator go on one stream (its START/DONE flags in the node's
        shared memory are one pair per rank)."""
        if self._stream is None:
            self._stream = s
        elif s != self._stream:
            raise HocclError(f"this network communicator's calls go on one stream (the first call used "
                             f"{self._stream:#x}, this one {s:#x}): its START/DONE flags order calls by that "
                             "stream; order other streams with events, or create another communicator")

    def _plan(self, key: CallKey) -> Any:
        return _compiled(self._plans, self.topology, key, self.chunk_bytes)


def _set_up(comm: Any, setup: Any, rank: int, store: Any) -> None:
    """Run a network communicator's set-up; if it fails, tell the other ranks through the store at once and
    release what was made (listening socket, proxy thread, flags)."""
    from .._store import announce_failure

    try:
        setup()
    except BaseException as exc:
        announce_failure(store, rank, exc)
        for name in ("_proxy", "transport", "_flags", "_events", "_intra", "_shared", "_rings", "_arena"):
            part = getattr(comm, name, None)
            if part is not None:
                with contextlib.suppress(Exception):
                    part.close()
        raise


class NetCommunicator(_Calls):
    """Collectives among ranks on different nodes, one GPU per node (see the module docstring)."""

    any_stream = True  # a START/DONE pair per stream

    def __init__(self, rank: int, world: int, device: int, store: Any, *, timeout_s: float = 60.0,
                 chunk_bytes: int | None = None, lanes: int | None = None, host: str | None = None,
                 ring_bytes: int = 256 << 20):
        _set_up(self, lambda: self._setup(rank, world, device, store, timeout_s, chunk_bytes, net_lanes(lanes), host,
                                          ring_bytes), rank, store)

    def _setup(self, rank: int, world: int, device: int, store: Any, timeout_s: float, chunk_bytes: int, lanes: int,
               host: str | None, ring_bytes: int) -> None:
        from ..flags import FlagPool
        from ..net.transport.tcp import TcpTransport

        ctx = self.context = NodeContext.make(rank, world, device, store, timeout_s, gpus_per_node=1)
        if world < 2:
            raise HocclError("a network communicator needs at least 2 ranks")
        self.rank, self.world, self.device, self.timeout_s = rank, world, ctx.device, ctx.timeout_s
        self.chunk_bytes, self.ring_bytes = net_chunk_bytes(chunk_bytes), ring_bytes
        from ..net.host import overlap_setting

        self.overlap = overlap_setting()  # read now: the executors are made at the first call, maybe elsewhere
        self.topology = ctx.topology(forwarding="none")
        self._store = store
        self._lock = threading.Lock()
        self._plans: dict[tuple, Any] = PlanCache()
        self._executor = None
        self._stream: int | None = None
        self.closed = False
        import cupy

        from ..settings import env_choice, env_int

        self._arena = None
        self.proxy_kind = env_choice("HOCCL_NET_PROXY", "process", ("process", "thread"))
        self._pairs: dict[int, tuple] = {}  # stream -> its (START, DONE) flags
        self._events = CallEvents(device)
        self._secret = job_secret(store, rank)
        self._exchange = env_int("HOCCL_NET_EXCHANGE", 1, 0, 1) == 1  # see batch_isend_irecv
        self._one_stream = env_int("HOCCL_NET_ONE_STREAM", 2, 0, 2)  # see enqueue_on_stream; 2: no DONE wait
        self._counted: dict[int, list] = {}  # stream -> [its START counter flag, the batch that moves it on, count]
        self._native = None  # the proxy process's calls from kept lists in one C call (net/kept.py)
        if self.proxy_kind == "process":
            self._start_proxy_process(device, store, lanes, host)
            return
        with cupy.cuda.Device(device):
            self._flags = FlagPool(3 * MAX_STREAMS)
        self.transport = TcpTransport(host=host or _local_address(), lanes=lanes, session=f"hoccl-net-{world}",
                                      name=f"node{rank}", secret=self._secret)
        self._addresses = self._exchange_addresses(store, self.transport.listen())
        self._ahead = env_int("HOCCL_NET_AHEAD", 2, 0)  # see CallProxy.wait_pending
        # a call is (prepared run, (START, DONE) of its stream); the proxy takes them in the order they were made
        # (None: a call whose preparation failed, raised in the caller's thread; only its stream is released)
        # runs begin before their stream reaches them (CallProxy's early): DONE once that and the copies are through
        self._proxy = CallProxy(lambda call, reached: call[0] is not None and self._executor.run(
                                    prepared=call[0], release=call[2], stream_reached=reached),
                                lambda call: call[1].seen(), lambda call: call[1].reset(),
                                lambda call: call[2](), name=f"hoccl-proxy-{rank}",
                                skip=lambda call: call[0] is not None and self._executor.release(call[0]), early=True)

    def _exchange_addresses(self, store: Any, mine: str) -> dict[int, str]:
        from .._store import exchange_addresses

        return exchange_addresses(store, "net-addr", self.rank, self.world, mine, self.world, self.timeout_s,
                                  f"rank {self.rank}: ", lambda r: f"rank {r}'s address")

    def _start_proxy_process(self, device: int, store: Any, lanes: int, host: str | None) -> None:
        """The proxy as a process of its own (hoccl_runtime.net.proxyproc): it owns the TCP transport and drives the
        calls; the rings and flags are shared memory registered with CUDA here."""
        import cupy

        from ..net.arena import LocalRegions, SharedArena
        from ..net.gpu import flag_count, ring_slots
        from ..net.kept import native_calls
        from ..net.proxyproc import ProcessProxy
        from ..settings import env_int

        # every flag now (a page: the streams' START/DONE, the executor's gates, the proxy's counters); the rings
        # (2 x ring_bytes, pinned) at the first call, as the thread's executor makes them: a group that never
        # communicates pins no ring
        slots = ring_slots(self.chunk_bytes, self.ring_bytes)
        self._arena = SharedArena(4 * (flag_count(1, slots) + 3 * MAX_STREAMS + 3) + 4096)
        with cupy.cuda.Device(device):
            self._arena.register_with_cuda()
        self._rings = None
        self._flags = self._arena.flag_pool(3 * MAX_STREAMS)
        self.transport = LocalRegions()
        self._proxy = ProcessProxy(self._arena, name=f"rank {self.rank}", timeout_s=self.timeout_s)
        address = self._proxy.request(("setup", {
            "rank": self.rank, "host": host or _local_address(), "lanes": lanes, "session": f"hoccl-net-{self.world}",
            "name": f"node{self.rank}", "secret": self._secret, "topology": self.topology.model_dump(),
            "chunk_bytes": self.chunk_bytes, "timeout_s": self.timeout_s,
            "poll_us": net_poll_us(), "trace": _trace_prefix(self.rank)}),
            self.timeout_s)
        self._addresses = self._exchange_addresses(store, address)
        self._proxy.send(("addresses", self._addresses))
        self._native = native_calls(self._proxy, self._arena, self.rank)
        self._ahead = env_int("HOCCL_NET_AHEAD", 0, 0)  # the proxy process never waits for this process's GIL

    def batch_isend_irecv(self, ops: list[tuple[str, Any, int]], stream: Any = None) -> None:
        """As :meth:`_Calls.batch_isend_irecv`; on 2 ranks a batch of one send and one receive (what 1F1B pipelining
        fuses: an activation out, a gradient in) is one call that moves both messages (an All-to-Allv whose input is
        the sent tensor and whose output the received one), unless HOCCL_NET_EXCHANGE=0. The other rank must batch
        its pair the same way (torch.distributed.pipelining's schedules do); a rank that issues them as two calls
        where its peer made one gets a PlanError naming both collectives."""
        kinds = sorted(op[0] for op in ops) if len(ops) == 2 and all(len(op) == 3 for op in ops) else None
        if kinds != ["recv", "send"] or self.world != 2 or not self._exchange:
            super().batch_isend_irecv(ops, stream)
            return
        (_, sent, to), (_, got, frm) = sorted(ops, key=lambda op: op[0] != "send")
        peer = 1 - self.rank
        if to != peer or frm != peer:
            raise HocclError(f"batch ops {[(k, p) for k, _, p in ops]}: on 2 ranks the peer is rank {peer}")
        sent_buf, got_buf = as_buffer(sent, "send tensor"), as_buffer(got, "recv tensor")
        out_bytes, in_bytes = sent_buf.nbytes, got_buf.nbytes
        if not out_bytes or not in_bytes:  # an empty message: the pair as two calls, as without the exchange
            super().batch_isend_irecv(ops, stream)
            return
        rows = [[0, 0], [0, 0]]
        rows[self.rank][peer], rows[peer][self.rank] = out_bytes, in_bytes
        self._call(CallKey("alltoallv", matrix=(tuple(rows[0]), tuple(rows[1]))), sent_buf, got_buf, stream)

    def _check_stream(self, s: int) -> None:
        """Any stream: each has its own START/DONE pair (calls still run in the order they were made, on every
        rank, as NCCL's do whatever their streams)."""
        if s not in self._pairs:
            if len(self._pairs) >= MAX_STREAMS:
                raise HocclError(f"this network communicator's calls came on {MAX_STREAMS} streams already; use "
                                 "fewer streams (each takes three flags: START, DONE and a START counter), or another "
                                 "communicator")
            self._pairs[s] = (self._flags.allocate(), self._flags.allocate())
            self._counted[s] = counted_start(self._flags.allocate())

    def _call(self, key: CallKey, input: Any, output: Any, stream: Any) -> None:
        if self.closed:
            raise HocclError("this communicator is closed; create a new one")
        plan = self._plan(key)
        r = self.rank
        inp, out, s = self._buffers(plan, input, output, stream)
        self._bound_ahead(self._proxy)  # and an earlier call's error raised here
        with self._lock, cuda_errors(lambda: f"rank {r}: {key}"):  # CuPy's own CUDA errors name the call
            if self._executor is None:
                self._connect(plan, {r: (inp, out)}, key)
            with on_device(self.device):
                # every copy of the call is enqueued here, in the caller's thread, after an event where the call sits
                # in its stream (or on that stream itself: HOCCL_NET_ONE_STREAM); the proxy only opens their gates (no
                # CUDA call there, see GpuNodeExecutor)
                mode = self._one_stream if self._one_stream and self._executor.one_stream(plan) else 0
                if mode == 2:  # START a counter, the copies on the stream, no DONE wait
                    counted = self._counted[s]
                    if self._native is not None and self._native.call(self._executor, plan, {r: (inp, out)}, s,
                                                                      counted, key):
                        return  # from its kept list, in one C call
                    enqueue_counted(s, counted, lambda start, deferred: self._executor.prepare(
                        plan, {r: (inp, out)}, stream=s, start=start, deferred=deferred),
                        self._submitter(key, (counted[0], None)), self._executor.launch_deferred)
                    return
                pair = self._pairs[s]
                if mode == 1:  # START, the copies on the stream, the DONE wait in their last batch
                    enqueue_on_stream(s, *pair, lambda finish: self._executor.prepare(
                        plan, {r: (inp, out)}, stream=s, finish=finish), self._submitter(key, pair))
                else:
                    enqueue_call(s, *pair, self._events, lambda event: self._executor.prepare(
                        plan, {r: (inp, out)}, after=(event,)), self._submitter(key, pair))

    def _submitter(self, key: CallKey, pair: tuple) -> Any:
        """``submit(prepared, x)`` of a call to the proxy with (START, DONE) of its stream. DONE None: the stream
        waits for none and ``x`` is START's count, a counter (callproxy.StartFlag, enqueue_counted); else ``x`` is
        ignored (enqueue_call and enqueue_on_stream pass their error there)."""
        if self._arena is not None:  # the proxy process
            return lambda prepared, count: self._proxy.submit((key, prepared, pair, count if pair[1] is None else None))
        return lambda prepared, count: self._proxy.submit(
            (prepared, StartFlag(pair[0], count if pair[1] is None else None), DoneOnce(pair[1])))

    def _connect(self, plan: Any, buffers: dict, key: CallKey) -> None:
        from ..net.executor import GpuNodeExecutor

        if self._arena is None:
            ex = GpuNodeExecutor(plan, self.rank, buffers, self.transport, timeout_s=self.timeout_s, reuse=True,
                                 ring_bytes=self.ring_bytes, overlap=self.overlap)
            ex.connect(self._addresses)
            self._executor = ex
            return
        from ..net.arena import SharedArena, arena_bytes
        from ..net.gpu import ring_slots

        slots = ring_slots(self.chunk_bytes, self.ring_bytes)
        self._rings = SharedArena(arena_bytes(1, slots, self.chunk_bytes))
        try:
            with on_device(self.device):
                self._rings.register_with_cuda()
            ex = GpuNodeExecutor(plan, self.rank, buffers, self.transport, timeout_s=self.timeout_s, reuse=True,
                                 ring_bytes=self.ring_bytes, arena=self._rings, flag_arena=self._arena,
                                 overlap=self.overlap)
            # the proxy process maps the same rings (their memfd passed over the socket) at the offsets carved here
            rings = {k: (address - self._rings.base, ex.slots * ex.chunk) for k, address in ex._ring_at.items()}
            self._proxy.send_arena(("driver", key, ex.slots, rings, ex.halves), self._rings)
        except BaseException:
            self._rings.close()  # the next call makes them again: no pinned memory left behind
            self._rings = None
            raise
        self._executor = ex

    def _raise(self) -> None:
        if self._proxy.error is not None:
            self._fail(self._proxy.error)

    def synchronize(self, timeout_s: float | None = None) -> None:
        """Wait until the proxy has run every call issued so far (their GPU copies included)."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        if not self._proxy.wait_idle(limit):
            raise HocclTimeoutError(f"rank {self.rank}: network calls still pending after {limit:.0f} s; has every "
                                    "rank's stream reached its calls?")
        self._raise()

    def _finish_calls(self) -> None:
        self._proxy.wait_idle(self.timeout_s)

    def _free(self) -> None:
        self._proxy.close()
        if self._executor is not None:
            self._executor.close()
        self.transport.close()
        self._flags.close()
        self._events.close()
        for arena in (self._rings if self._arena is not None else None, self._arena):
            if arena is not None:
                arena.close()


_TRACED: dict[tuple, itertools.count] = {}  # (prefix, rank) -> the proxy processes started with that trace


def _trace_prefix(rank: int) -> str | None:
    """HOCCL_NET_TRACE for rank ``rank``'s next proxy process: PREFIX for its first, PREFIX.gN for the N-th after it
    (the groups of one run, e.g. a training example's settings variants, each get files of their own)."""
    from ..settings import env_text

    prefix = env_text("HOCCL_NET_TRACE")
    if not prefix:
        return None
    n = next(_TRACED.setdefault((prefix, rank), itertools.count()))
    return prefix if n == 0 else f"{prefix}.g{n}"

