"""The communicator across nodes with several GPUs per node: the node's leader (local rank 0) runs the node's
part of every plan (hoccl_runtime.comm.net's proxy and executor), its local ranks hand it their calls through the
node's shared memory (below), and node-local send/recv goes over the intra-node Communicator's copy engines."""

from __future__ import annotations

import contextlib
import threading
import time
import types
import zlib
from collections import deque
from typing import Any

from .._cuda import ipc_export, on_device  # no CUDA at import: it loads cupy / cuda-bindings when first used
from ..errors import HocclError, HocclTimeoutError, PlanError, TransportError
from ..interop import DeviceBuffer, as_buffer, as_rank, as_stream
from ..ipc import IpcMappings
from ..mailbox import HANDLE, NONE, SLOT
from ..plans import CallKey, PlanCache
from .context import NodeContext
from .net import CallEvents, CallProxy, DoneOnce, _Calls, _compiled, _set_up, enqueue_call
from .netconf import job_secret, net_chunk_bytes, net_lanes
from .netconf import local_address as _local_address

__all__ = ["NodeNetCommunicator"]


# --- several GPUs per node ---------------------------------------------------------------------------------
# Node shared memory (created by the node's leader, local rank 0; registered with CUDA in every process):
# a header (error word and message) and one region per local rank: START and DONE flags (int32) that the rank's stream
# writes and waits on, the leader's ack and completed-call words, and a ring of _SLOTS mailbox slots
# (hoccl_runtime.mailbox, the Communicator's too) in which the rank publishes each call: seq, digest, device, its
# input's and output's offset, size and IPC handle, and event_handle (where the call sits in the rank's stream, see
# CallEvents).
_SLOTS = 4
_SLOT_WORDS = SLOT.words
_PARTS = (("in_kind", "in_offset", "in_bytes", "in_handle"), ("out_kind", "out_offset", "out_bytes", "out_handle"))
_REGION = 64 + _SLOTS * _SLOT_WORDS * 8   # bytes per local rank
_HEADER = 512  # the error word, then what the leader's error said (UTF-8, cut to fit)


class _NodeShared:
    def __init__(self, store: Any, node: int, local: int, ranks_here: int, timeout_s: float):
        from .._shm import SharedSegment

        self.segment = seg = SharedSegment(store, local == 0, _HEADER + ranks_here * _REGION, key=f"node{node}-shm",
                                            prefix="hoccl-n-")
        self.dev_ptr = seg.dev_ptr
        self.words = memoryview(seg.shm.buf).cast("q")
        self.bytes = memoryview(seg.shm.buf)
        self.i32 = memoryview(seg.shm.buf).cast("i")
        seg.join(store, f"node{node}-attached", ranks_here, timeout_s, who=f"node {node}: ")

    def region(self, local: int) -> int:
        return _HEADER + local * _REGION  # byte offset

    def flag(self, local: int, which: int) -> Any:
        """START (0) or DONE (1) of a local rank, in the shape MemOps expects (a device address)."""
        return types.SimpleNamespace(address=self.dev_ptr + self.region(local) + 4 * which)

    def flag_index(self, local: int, which: int) -> int:
        return (self.region(local) + 4 * which) // 4

    def fail(self, exc: BaseException) -> None:
        """Mark the node's communicator failed (the leader), keeping what went wrong for the other local ranks."""
        if not self.words[0]:
            text = f"{type(exc).__name__}: {exc}".encode(errors="replace")[:_HEADER - 9]
            self.bytes[8:8 + len(text) + 1] = text + b"\0"
            self.words[0] = 1

    def failure(self) -> str:
        """What the leader's error said ('' if the node has not failed)."""
        if not self.words[0]:
            return ""
        return bytes(self.bytes[8:_HEADER]).split(b"\0", 1)[0].decode(errors="replace")

    def close(self) -> None:
        self.segment.close(self.words, self.bytes, self.i32)


class _Prefixed:
    """A store whose keys carry a prefix (works with torch's stores and the test's)."""

    def __init__(self, store: Any, prefix: str):
        self._store, self._prefix = store, prefix

    def set(self, key: str, value: Any) -> None:
        self._store.set(self._prefix + key, value)

    def get(self, key: str) -> Any:
        return self._store.get(self._prefix + key)

    def add(self, key: str, n: int) -> int:
        return self._store.add(self._prefix + key, n)

    def check(self, keys: list[str]) -> bool:
        return self._store.check([self._prefix + k for k in keys])


class NodeNetCommunicator(_Calls):
    """Collectives across nodes with several GPUs per node (torchrun --nnodes N --nproc_per_node L): local
    rank 0 of each node drives the node's collectives (every rank takes part in each: all_gather_into_tensor,
    all_to_all_single, broadcast, scatter, gather); send/recv go pair by pair (see below and
    docs/architecture.md)."""

    def __init__(self, rank: int, world: int, device: int, store: Any, *, gpus_per_node: int,
                 timeout_s: float = 60.0, chunk_bytes: int | None = None, lanes: int | None = None,
                 host: str | None = None, ring_bytes: int = 256 << 20):
        _set_up(self, lambda: self._setup(rank, world, device, store, gpus_per_node, timeout_s, chunk_bytes,
                                          net_lanes(lanes), host, ring_bytes), rank, store)

    def _setup(self, rank: int, world: int, device: int, store: Any, gpus_per_node: int, timeout_s: float,
               chunk_bytes: int, lanes: int, host: str | None, ring_bytes: int) -> None:
        from ..net.transport.tcp import TcpTransport
        from ..plans import machine_topology

        ctx = self.context = NodeContext.make(rank, world, device, store, timeout_s, gpus_per_node=gpus_per_node)
        L = ctx.gpus_per_node
        self.rank, self.world, self.device, self.timeout_s = rank, world, ctx.device, ctx.timeout_s
        self.L, self.node, self.local, self.nodes = L, ctx.node, ctx.local, ctx.nodes
        self.chunk_bytes, self.ring_bytes = net_chunk_bytes(chunk_bytes), ring_bytes
        self.topology = ctx.topology(forwarding="symmetric" if L % 2 == 0 else "none")
        self._plans: dict = PlanCache()
        self._stream = None
        self._lock = threading.Lock()
        self._seq = 0
        self.closed = False
        self._shared = _NodeShared(store, self.node, self.local, L, timeout_s)
        self._executor = None
        self._store, self._host, self._lanes = store, host, lanes
        # the node's copy-engine communicator for send/recv within the node: made now, by every local rank
        # together (its shared memory waits for all of them)
        from .intranode import Communicator

        self._intra: Any = Communicator(self.local, L, device, _Prefixed(store, f"intra{self.node}/"),
                                        timeout_s=timeout_s) if L > 1 else None
        self._pair_topology = machine_topology(nodes=2, gpus_per_node=1, device=device, forwarding="none")
        self._pair_plans: dict = PlanCache()
        self._pair_exec: dict[int, Any] = {}          # peer -> its pair's executor (owns its transport)
        self._p2p_proxy: CallProxy | None = None
        self._p2p_flags: tuple = ()
        # the leader: its local ranks' buffers, mapped; one closes only once its last call completed (calls are
        # prepared ahead of their run, so a mapping may still be in use)
        self._opened = IpcMappings(64, may_close=lambda last: last <= self._shared.words[self._shared.region(0) // 8
                                                                                         + 2])
        self._events = CallEvents(device, interprocess=True)  # the leader's copies wait for them (any process)
        self._recorded: deque[tuple[int, int]] = deque()      # (seq, event) of calls not yet completed
        self._opened_events: dict[bytes, int] = {}            # the leader: other ranks' events, opened once
        self._p2p_events = CallEvents(device)
        self._proxy: CallProxy | None = None
        self._secret = job_secret(store, rank)
        from ..settings import env_int

        self._ahead = env_int("HOCCL_NET_AHEAD", 2, 0)  # calls a proxy may have unfinished (CallProxy.wait_pending)
        if self.local == 0:
            self.transport = TcpTransport(host=host or _local_address(), lanes=lanes,
                                          session=f"hoccl-node-net-{world}-{L}", name=f"node{self.node}",
                                          secret=self._secret)
            from .._store import exchange_addresses

            self._addresses = exchange_addresses(store, "leader-addr", self.node, self.nodes, self.transport.listen(),
                                                 world, timeout_s, f"rank {rank}: ",
                                                 lambda n: f"node {n}'s leader address")
            i32, sh, w = self._shared.i32, self._shared, self._shared.words
            # a call is (prepared run, seq, error of its preparation); the proxy takes them in order, each once every
            # local rank's stream reached it (or the node failed: then nothing waits for streams that may never come)
            self._proxy = CallProxy(
                self._drive, lambda _: w[0] != 0 or all(i32[sh.flag_index(i, 0)] == 1 for i in range(L)),
                lambda _: [i32.__setitem__(sh.flag_index(i, 0), 0) for i in range(L)],
                self._release_node, name=f"hoccl-leader-{rank}",
                skip=lambda call: call[0] is not None and self._executor.release(call[0]))

    # --- the call -------------------------------------------------------------------------------------
    # send/recv do not go through the leader (independent pairs give it no order all nodes agree on):
    # within the node they use the copy-engine Communicator of the node's ranks; across nodes each pair
    # of ranks has its own connection and reusable executor (a 2 x 1 "topology", no forwarding), driven
    # by this rank's own proxy in the order the rank issues its calls (both ends issue theirs in the
    # same order, as with NCCL).
    def send(self, tensor: Any, dst: int, stream: Any = None, *, rate_gbps: float | None = None,
             duration_s: float | None = None) -> None:
        self._no_pacing("send", rate_gbps, duration_s)
        self._p2p(tensor, None, dst, stream)

    def recv(self, tensor: Any, src: int, stream: Any = None) -> None:
        self._p2p(None, tensor, src, stream)

    def _p2p(self, input: Any, output: Any, peer: int, stream: Any) -> None:
        peer = as_rank(peer, self.world, "dst" if input is not None else "src", self.rank)
        self._raise()
        if peer // self.L == self.node:  # same node: copy engines through the node's communicator
            intra = self._intra
            if input is not None:
                intra.send(input, peer % self.L, stream=stream)
            else:
                intra.recv(output, peer % self.L, stream=stream)
            return

        buf = as_buffer(input if input is not None else output, "tensor")
        me = 0 if self.rank < peer else 1  # this rank's index in the pair's 2 x 1 topology
        src = me if input is not None else 1 - me
        plan = _compiled(self._pair_plans, self._pair_topology, CallKey.sendrecv(src, 1 - src, buf.nbytes),
                         self.chunk_bytes)
        none = DeviceBuffer(0, 0, self.device)
        bufs = {me: (buf, none) if input is not None else (none, buf)}
        s = as_stream(stream)
        with self._lock:
            proxy = self._pair_proxy()
            self._bound_ahead(proxy)
            ex = self._pair_executor(peer, plan, bufs)  # connected on first use, here in the caller's thread
            with on_device(self.device):  # as NetCommunicator._call (see enqueue_call for the order)
                enqueue_call(s, *self._p2p_flags, self._p2p_events,
                             lambda event: ex.prepare(plan, bufs, after=(event,)),
                             lambda prepared, _: proxy.submit((ex, prepared, DoneOnce(self._p2p_flags[1]))))

    def _pair_proxy(self) -> CallProxy:
        if self._p2p_proxy is None:
            import cupy

            from ..flags import FlagPool

            with cupy.cuda.Device(self.device):
                self._p2p_pool = FlagPool(2)
            start, done = self._p2p_pool.allocate(), self._p2p_pool.allocate()
            self._p2p_flags = (start, done)
            self._p2p_proxy = CallProxy(lambda call: call[1] is not None and call[0].run(
                                            prepared=call[1], release=call[2]),  # DONE once the copies are through
                                        lambda _: start.read() == 1, lambda _: start.write(0), lambda call: call[2](),
                                        name=f"hoccl-p2p-{self.rank}",
                                        skip=lambda call: call[1] is not None and call[0].release(call[1]))
        return self._p2p_proxy

    def _pair_executor(self, peer: int, plan: Any, bufs: dict) -> Any:
        """The executor of this rank's pair with ``peer`` (connected on first use)."""
        ex = self._pair_exec.get(peer)
        if ex is None:
            from ..net.executor import GpuNodeExecutor
            from ..net.transport.tcp import TcpTransport

            me = 0 if self.rank < peer else 1
            lo, hi = sorted((self.rank, peer))
            transport = TcpTransport(host=self._host or _local_address(), lanes=self._lanes,
                                     session=f"hoccl-p2p-{lo}-{hi}", name=f"node{me}", secret=self._secret)
            self._store.set(f"p2p-{lo}-{hi}-{self.rank}", transport.listen())
            addresses = {0: self._store.get(f"p2p-{lo}-{hi}-{lo}").decode(),
                         1: self._store.get(f"p2p-{lo}-{hi}-{hi}").decode()}
            ex = GpuNodeExecutor(plan, me, bufs, transport, timeout_s=self.timeout_s, reuse=True,
                                 ring_bytes=self.ring_bytes, overlap=False)  # HOCCL_NET_OVERLAP: comm/net.py only
            ex.connect(addresses)
            self._pair_exec[peer] = ex
        return ex

    def _call(self, key: CallKey, input: Any, output: Any, stream: Any) -> None:
        from .._cuda import cuda_errors

        with cuda_errors(lambda: f"rank {self.rank}: {key}"):  # CuPy's own CUDA errors name the call
            self._issue(key, input, output, stream)

    def _issue(self, key: CallKey, input: Any, output: Any, stream: Any) -> None:
        from ..flags import MemOps

        if self.closed:
            raise HocclError("this communicator is closed; create a new one")
        self._raise()
        plan = self._plan(key)
        inp, out, s = self._buffers(plan, input, output, stream)
        # the leader maps the others' buffers (its own it has); exported before the call takes a number, so
        # memory that cannot be shared raises here and leaves no half-written entry behind
        exports = [ipc_export(buf.ptr, f"rank {self.rank}'s {what}") if buf.nbytes and self.local else None
                   for what, buf in (("input", inp), ("output", out))]
        with self._lock:
            self._seq += 1
            seq = self._seq
            sh, w = self._shared, self._shared.words
            base = sh.region(self.local) // 8
            while self._recorded and w[base + 2] >= self._recorded[0][0]:  # the leader ran those calls
                self._events.give_back(self._recorded.popleft()[1])
            if self.local == 0:
                self._lead(plan, seq, (inp, out), s)
                return
            ack = base + 1
            self._wait(lambda: w[ack] >= seq - _SLOTS, lambda: f"rank {self.rank}: the node's leader did not read this "
                       f"rank's earlier calls within {self.timeout_s:.0f} s")
            slot = base + 8 + (seq % _SLOTS) * _SLOT_WORDS
            with on_device(self.device):  # START, then the event the leader's copies wait for (see enqueue_call)
                MemOps().write(sh.flag(self.local, 0), 1).enqueue(s)
                event = self._events.record(s)
            self._recorded.append((seq, event))
            sh.bytes[SLOT.span(slot, "event_handle")] = self._events.handle(event)
            w[slot + SLOT.digest] = zlib.crc32(plan.plan_id.encode())
            w[slot + SLOT.device] = self.device
            for (kind, offset, nbytes, handle_at), buf, export in zip(_PARTS, (inp, out), exports, strict=True):
                w[slot + getattr(SLOT, nbytes)] = buf.nbytes
                w[slot + getattr(SLOT, kind)] = HANDLE if export is not None else NONE
                if export is not None:
                    handle, w[slot + getattr(SLOT, offset)] = export
                    sh.bytes[SLOT.span(slot, handle_at)] = handle
            w[slot + SLOT.seq] = seq  # last: the leader reads the entry after seeing seq
            with on_device(self.device):
                MemOps().wait_eq(sh.flag(self.local, 1), 1).write(sh.flag(self.local, 1), 0).enqueue(s)

    def _lead(self, plan: Any, seq: int, own: tuple, s: int) -> None:
        """The leader's call, in its caller's thread: collect every local rank's entry of the call, map their
        buffers, and enqueue all the node's copies of it (gated; after an event of each local rank's stream, each
        recorded past that stream's START: see :func:`~hoccl_runtime.comm.net.enqueue_call`). Its proxy then only
        drives the network and opens gates: no CUDA call there (see NetCommunicator._call)."""
        sh = self._shared
        self._bound_ahead(self._proxy)

        def prepare(event: int) -> Any:  # the leader's own event: free again once the waits on it are enqueued
            buffers, events = self._collect(plan, seq)
            buffers[self.rank] = own
            events.insert(0, event)
            if self._executor is None:
                from ..net.executor import GpuNodeExecutor

                ex = GpuNodeExecutor(plan, self.node, buffers, self.transport, timeout_s=self.timeout_s, reuse=True,
                                     ring_bytes=self.ring_bytes, overlap=False)
                try:
                    ex.connect(self._addresses)
                except (HocclTimeoutError, TransportError) as exc:
                    ex.close()
                    raise type(exc)(f"rank {self.rank} (node {self.node}'s leader), connecting to the other nodes' "
                                    f"leaders at its first call: {exc}; did every node's local rank 0 issue "
                                    "it?") from exc
                self._executor = ex
            return self._executor.prepare(plan, buffers, after=events)

        def submit(prepared: Any, error: BaseException | None) -> None:
            # the local ranks that published this call have streams waiting for its DONE: a failed call goes to the
            # proxy too, which releases them after the calls before it (their DONEs stay in order)
            if error is not None:
                sh.fail(error)
            self._proxy.submit((prepared, seq, error))

        with on_device(self.device):
            enqueue_call(s, sh.flag(0, 0), sh.flag(0, 1), self._events, prepare, submit)

    def _wait(self, ready: Any, timed_out: Any) -> None:
        """Until ``ready()``, raising what the node's failure word holds meanwhile, and HocclTimeoutError with the
        message ``timed_out()`` gives once the communicator's timeout passed."""
        deadline = time.monotonic() + self.timeout_s
        while not ready():
            self._raise()
            if time.monotonic() > deadline:
                raise HocclTimeoutError(timed_out())
            time.sleep(50e-6)

    def _collect(self, plan: Any, seq: int) -> tuple[dict, list]:
        """The leader: every other local rank's buffers ({rank: (input, output)}, opened from their IPC handles)
        and stream events for call ``seq``, once each has published it."""
        from .._cuda_memory import ipc_open_event_handle

        sh, w = self._shared, self._shared.words
        digest = zlib.crc32(plan.plan_id.encode())
        buffers, events = {}, []
        for i in range(1, self.L):
            base = sh.region(i) // 8
            slot = base + 8 + (seq % _SLOTS) * _SLOT_WORDS
            self._wait(lambda s=slot: w[s] >= seq, lambda i=i: (
                f"rank {self.rank} (node {self.node}'s leader): local rank {i} did not issue call {seq} "
                f"({plan.collective.describe()}) within {self.timeout_s:.0f} s; every rank of the node must issue the "
                "same collectives in the same order (is it stuck, or dead?)"))
            if w[slot] != seq or w[slot + SLOT.digest] != digest:
                raise PlanError(f"node {self.node}: local rank {i} is in another collective than its leader (call "
                                f"{seq}, {plan.collective.describe()}): every rank must issue the same collectives")
            handle = bytes(sh.bytes[SLOT.span(slot, "event_handle")])
            if handle not in self._opened_events:
                self._opened_events[handle] = ipc_open_event_handle(handle)
            events.append(self._opened_events[handle])
            device, parts = w[slot + SLOT.device], []
            for kind, offset, nbytes, handle_at in _PARTS:
                n = w[slot + getattr(SLOT, nbytes)]
                if not n or w[slot + getattr(SLOT, kind)] != HANDLE:
                    parts.append(DeviceBuffer(0, 0, device))
                    continue
                handle = bytes(sh.bytes[SLOT.span(slot, handle_at)])
                mapped = self._opened.open(handle, device, tag=seq)  # in the context of the GPU that owns it
                parts.append(DeviceBuffer(mapped + w[slot + getattr(SLOT, offset)], n, device))
            buffers[self.node * self.L + i] = tuple(parts)
            w[base + 1] = seq  # ack: the slot may be reused
        return buffers, events

    def _drive(self, call: tuple) -> None:
        """The leader's proxy: drive a prepared call (no CUDA call), or fail with the error its preparation met."""
        prepared, _, error = call
        try:
            if prepared is None:
                raise error
            self._executor.run(prepared=prepared)
        except BaseException as exc:
            self._shared.fail(exc)  # the other local ranks' next call raises; their streams are released
            raise

    def _release_node(self, call: tuple) -> None:
        """The leader, after a call (run or failed): every local rank's DONE, then the call's number as completed,
        which synchronize() waits for; in that order, so a rank that returns from synchronize() (and may close
        its shared memory) has no stream left waiting for a DONE still to come."""
        sh, w = self._shared, self._shared.words
        for i in range(self.L):
            sh.i32[sh.flag_index(i, 1)] = 1
        for i in range(self.L):
            w[sh.region(i) // 8 + 2] = call[1]

    def _raise(self) -> None:
        if self._p2p_proxy is not None and self._p2p_proxy.error is not None:
            self._fail(self._p2p_proxy.error)
        if self._proxy is not None and self._proxy.error is not None:
            self._shared.fail(self._proxy.error)  # tell the other local ranks
            self._fail(self._proxy.error)
        if self._shared.words[0]:
            raise HocclError(f"rank {self.rank}: the node's leader (rank {self.node * self.L}) failed a network call "
                             f"({self._shared.failure()}); this communicator is unusable: close it and create a new "
                             "one")

    def synchronize(self, timeout_s: float | None = None) -> None:
        limit = self.timeout_s if timeout_s is None else timeout_s
        if self._p2p_proxy is not None and not self._p2p_proxy.wait_idle(limit):
            raise HocclTimeoutError(f"rank {self.rank}: send/recv calls still pending after {limit:.0f} s")
        if self._intra is not None:
            self._intra.synchronize(limit)
        w, mine = self._shared.words, self._shared.region(self.local) // 8 + 2
        deadline = time.monotonic() + limit
        while w[mine] < self._seq:
            self._raise()
            if time.monotonic() > deadline:
                raise HocclTimeoutError(f"rank {self.rank}: network calls still pending after {limit:.0f} s (call "
                                        f"{w[mine] + 1} of {self._seq}); has every rank issued them, in the same "
                                        "order, and reached them in its stream?")
            time.sleep(100e-6)
        self._raise()

    def _finish_calls(self) -> None:
        with contextlib.suppress(HocclError):
            self.synchronize()

    def _free(self) -> None:
        if self._p2p_proxy is not None:
            self._p2p_proxy.close()
            for ex in self._pair_exec.values():
                ex.close()
                ex.transport.close()
            self._p2p_pool.close()
        if self._intra is not None:
            self._intra.close()
        if self._proxy is not None:
            self._proxy.close()
            if self._executor is not None:
                self._executor.close()
            self.transport.close()
            from .._cuda_streams import event_destroy

            self._opened.close_all()
            for event in self._opened_events.values():
                with contextlib.suppress(Exception):
                    event_destroy(event)
            self._opened_events.clear()
        self._events.close()
        self._p2p_events.close()
        self._shared.close()

