"""The communicator across nodes with one GPU per node (torchrun ``--nnodes N --nproc_per_node 1``, or
``hoccl_runtime.init(gpus_per_node=1)`` to make every GPU of one machine its own "node").

The torch-like calls of the intra-node communicator (all_gather_into_tensor, all_to_all_single,
broadcast, scatter, gather, send, recv), each returning at once. What happens:

* The caller's stream gets two stream memory operations per call and nothing else: ``START = 1`` where
  the call sits in the stream, and ``wait DONE == 1; DONE = 0`` after it. No kernel.
* A proxy thread of this process takes the calls in order. For each it waits (sleeping, not holding the
  GIL) until the stream has reached the call (``START == 1``), resets it, runs this node's part of the
  plan with a reusable :class:`~hoccl_runtime.netexec.GpuNodeExecutor` (copy-engine staging through
  pinned rings, the TCP transport, connections and rings set up once), then writes ``DONE = 1``, which
  lets the stream go on. The flags live in pinned host memory that the GPU reads and writes.
* A call that fails in the proxy (a peer died, another collective on a peer node: ``TransportError`` or
  ``PlanError``) still releases the stream (the data is then wrong), and the error is raised by the
  next call, ``synchronize()`` or ``close()``.

Chunks: 8 MiB (``chunk_bytes=``); connections: 8 lanes (``lanes=``); the listening address:
``HOCCL_SOCKET_ADDR``, else the interface that routes to torchrun's MASTER_ADDR, else loopback.
Addresses are exchanged through the store; every run starts with a plan notice, so ranks in
different collectives raise ``PlanError``.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any

from hoccl_compiler.collective import CollectiveSpec

from .errors import HocclError, HocclTimeoutError
from .interop import DeviceBuffer, as_buffer, as_stream

__all__ = ["NetCommunicator", "CallProxy"]


def _local_address() -> str:
    """The address other nodes reach this one at: HOCCL_SOCKET_ADDR if set, else the address of the
    interface that routes to MASTER_ADDR (torchrun's), else loopback (every "node" on this machine)."""
    import os
    import socket

    if os.environ.get("HOCCL_SOCKET_ADDR"):
        return os.environ["HOCCL_SOCKET_ADDR"]
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    if master in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # no packet is sent
            probe.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class CallProxy:
    """The proxy thread: runs queued calls in order, each once its START flag is set, then sets DONE.

    ``started()`` / ``reset_start()`` / ``finish()`` are the flag operations and ``run(call)`` does the
    work, so the ordering logic is testable without a GPU."""

    def __init__(self, run: Any, started: Any, reset_start: Any, finish: Any, *, poll_s: float = 50e-6,
                 name: str = "hoccl-proxy"):
        self._run, self._started, self._reset, self._finish = run, started, reset_start, finish
        self.poll_s = poll_s
        self._calls: queue.Queue = queue.Queue()
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        self._lock = threading.Lock()
        self.error: BaseException | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, call: Any) -> None:
        with self._lock:
            self._pending += 1
            self._idle.clear()
        self._calls.put(call)

    def _loop(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            while not self._started():  # the stream has not reached the call yet
                if self._stop:
                    return
                time.sleep(self.poll_s)
            self._reset()
            try:
                if self.error is None:
                    self._run(call)
            except BaseException as exc:  # noqa: BLE001 - kept, raised by the caller's next call
                self.error = exc
            finally:
                self._finish()  # releases the stream even after an error: nothing waits forever
                with self._lock:
                    self._pending -= 1
                    if not self._pending:
                        self._idle.set()

    def wait_idle(self, timeout_s: float) -> bool:
        return self._idle.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        self._stop = True
        self._calls.put(None)
        self._thread.join(timeout_s)


class NetCommunicator:
    """Collectives among ranks on different nodes, one GPU per node (see the module docstring)."""

    def __init__(self, rank: int, world: int, device: int, store: Any, *, timeout_s: float = 60.0,
                 chunk_bytes: int = 8 << 20, lanes: int = 8, host: str | None = None):
        from hoccl_compiler.topology import make_topology

        from .flags import FlagPool
        from .transport.tcp import TcpTransport

        if not 0 <= rank < world:
            raise HocclError(f"rank {rank} is outside 0..{world - 1}")
        if world < 2:
            raise HocclError("a network communicator needs at least 2 ranks")
        self.rank, self.world, self.device, self.timeout_s = rank, world, device, timeout_s
        self.chunk_bytes = chunk_bytes
        self.topology = make_topology("h200x2", nodes=world, gpus_per_node=1, forwarding="none")
        self._store = store
        self._lock = threading.Lock()
        self._plans: dict[tuple, Any] = {}
        self._executor = None
        self._stream: int | None = None
        self.closed = False
        import cupy

        with cupy.cuda.Device(device):
            self._flags = FlagPool(2)
        self._start, self._done = self._flags.allocate(), self._flags.allocate()
        self.transport = TcpTransport(host=host or _local_address(), lanes=lanes, session=f"hoccl-net-{world}",
                                      name=f"node{rank}")
        store.set(f"net-addr{rank}", self.transport.listen())
        self._addresses = {r: store.get(f"net-addr{r}").decode() for r in range(world)}
        self._proxy = CallProxy(self._work, lambda: self._start.read() == 1, lambda: self._start.write(0),
                                lambda: self._done.write(1), name=f"hoccl-proxy-{rank}")

    # --- torch-like calls ------------------------------------------------------------------------------
    def all_gather_into_tensor(self, output: Any, input: Any, stream: Any = None) -> None:
        out = as_buffer(output, "output")
        self._call(CollectiveSpec(kind="allgather", size_bytes=out.nbytes), input, output, stream)

    def all_to_all_single(self, output: Any, input: Any, stream: Any = None) -> None:
        out = as_buffer(output, "output")
        self._call(CollectiveSpec(kind="alltoall", size_bytes=out.nbytes), input, output, stream)

    def broadcast(self, tensor: Any, root: int, stream: Any = None) -> None:
        buf = as_buffer(tensor, "tensor")
        self._call(CollectiveSpec(kind="broadcast", size_bytes=buf.nbytes, root=root, in_place=True), tensor, tensor,
                   stream)

    def scatter(self, output: Any, input: Any = None, root: int = 0, stream: Any = None) -> None:
        out = as_buffer(output, "output")
        self._call(CollectiveSpec(kind="scatter", size_bytes=out.nbytes * self.world, root=root),
                   input if self.rank == root else None, output, stream)

    def gather(self, input: Any, output: Any = None, root: int = 0, stream: Any = None) -> None:
        inp = as_buffer(input, "input")
        self._call(CollectiveSpec(kind="gather", size_bytes=inp.nbytes * self.world, root=root), input,
                   output if self.rank == root else None, stream)

    def send(self, tensor: Any, dst: int, stream: Any = None) -> None:
        buf = as_buffer(tensor, "tensor")
        self._call(CollectiveSpec(kind="sendrecv", pairs=((self.rank, dst, buf.nbytes),)), tensor, None, stream)

    def recv(self, tensor: Any, src: int, stream: Any = None) -> None:
        buf = as_buffer(tensor, "tensor")
        self._call(CollectiveSpec(kind="sendrecv", pairs=((src, self.rank, buf.nbytes),)), None, tensor, stream)

    # --- the call ----------------------------------------------------------------------------------------
    def _plan(self, spec: CollectiveSpec) -> Any:
        key = spec.model_dump_json()
        plan = self._plans.get(key)
        if plan is None:
            from hoccl_compiler.ir import CompileOptions
            from hoccl_compiler.pipeline import compile_plan

            plan = self._plans[key] = compile_plan(self.topology, spec, CompileOptions(
                chunk_bytes=self.chunk_bytes, baselines=False))
        return plan

    def _call(self, spec: CollectiveSpec, input: Any, output: Any, stream: Any) -> None:
        from .flags import MemOps

        if self.closed:
            raise HocclError("this communicator is closed; create a new one")
        self._raise()
        plan = self._plan(spec)
        r = self.rank
        none = DeviceBuffer(0, 0, self.device)  # a part this rank does not have (e.g. a sender's output)
        inp = as_buffer(input, "input") if input is not None and plan.ranks.input_bytes[r] else none
        out = as_buffer(output, "output") if output is not None and plan.ranks.output_bytes[r] else none
        if plan.collective.in_place and inp.nbytes:  # the rank's input is the resident part of its output
            from hoccl_compiler.collective import layout

            offset, nbytes = layout(plan.collective, self.world).resident()
            inp = out.slice(int(offset[r]), int(nbytes[r]))
        s = as_stream(stream)
        if self._stream is None:
            self._stream = s
        elif s != self._stream:
            raise HocclError(f"this network communicator's calls go on one stream (the first call used "
                             f"{self._stream:#x}, this one {s:#x}): its START/DONE flags order calls by that "
                             "stream; order other streams with events, or create another communicator")
        with self._lock:
            if self._executor is None:
                self._connect(plan, {r: (inp, out)})
            from ._cuda import cupy_runtime

            self._proxy.submit((plan, {r: (inp, out)}))  # it waits for START: the order does not matter
            rt = cupy_runtime()
            prev = rt.getDevice()
            rt.setDevice(self.device)
            try:
                MemOps().write(self._start, 1).enqueue(s)
                MemOps().wait_eq(self._done, 1).write(self._done, 0).enqueue(s)
            finally:
                rt.setDevice(prev)

    def _connect(self, plan: Any, buffers: dict) -> None:
        from .netexec import GpuNodeExecutor

        ex = GpuNodeExecutor(plan, self.rank, buffers, self.transport, timeout_s=self.timeout_s, reuse=True)
        ex.connect(self._addresses)
        self._executor = ex

    def _work(self, call: tuple) -> None:
        plan, buffers = call
        self._executor.run(plan, buffers)

    def _raise(self) -> None:
        if self._proxy.error is not None:
            raise self._proxy.error

    def synchronize(self, timeout_s: float | None = None) -> None:
        """Wait until the proxy has run every call issued so far (their GPU copies included)."""
        limit = self.timeout_s if timeout_s is None else timeout_s
        if not self._proxy.wait_idle(limit):
            raise HocclTimeoutError(f"rank {self.rank}: network calls still pending after {limit:.0f} s; has every "
                                    "rank's stream reached its calls?")
        self._raise()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._proxy.wait_idle(self.timeout_s)
        finally:
            self._proxy.close()
            if self._executor is not None:
                self._executor.close()
            self.transport.close()
            self._flags.close()

    def __enter__(self) -> NetCommunicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
