"""The harness the benchmarks share: one ``Bench`` per process (the communicators, NCCL, streams, the
record of every figure), sizes and baseline names, the raw copy-engine calls and the host gauges."""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OPS = ("sendrecv", "allgather", "alltoall")
LOADS = ("gemm", "membound")  # contention: the loads timed beside the traffic


def _baselines(spec: str) -> list[str]:
    """``hoccl,raw,nccl,nccl-ctas=1,2,4,8,nccl-ce`` -> [..., "nccl-ctas=1", "nccl-ctas=2", ...]: bare numbers
    after a ``nccl-ctas=K`` item are more CTA budgets."""
    out: list[str] = []
    known = ("hoccl", "hoccl-graph", "hoccl-inplace", "hoccl-peer", "hoccl-window", "raw", "nccl", "nccl-ce")
    for token in (t.strip() for t in spec.split(",") if t.strip()):
        if token.isdigit() and out and out[-1].startswith("nccl-ctas="):
            out.append(f"nccl-ctas={token}")
        elif token in known or (token.startswith("nccl-ctas=") and token.split("=", 1)[1].isdigit()):
            out.append(token)
        else:
            raise SystemExit(f"hoccl-bench: unknown baseline {token!r}; choose among {', '.join(known)}, "
                             "nccl-ctas=K[,K...]")
    return out


def batch_calls(size: int, iters: int = 0) -> int:
    """Calls per timed batch of a sweep row: ``iters`` if given, else about 1 GiB per batch, 10 to 512 calls.

    A batch starts after a barrier, and a call that synchronises the ranks (HOCCL's, NCCL's; not the raw copies)
    waits at the batch's first call for the rank that left the barrier last: that start-up skew is paid once per
    batch, so it weighs 1/calls on the per-call figure. At least 10 calls (3 left it on a third of the 1 GiB
    rows); with 40 calls of 2 MiB a send/recv took 23.5 us per message in the sweep against 12.7 in
    profile_host's 200 back to back in the same run (2026-11-30). examples/calibrate_cost.py estimates it."""
    return iters or max(10, min(512, (1 << 30) // size))


def _sizes(spec: str) -> list[int]:
    from hoccl_compiler import parse_size

    lo, _, hi = spec.partition(":")
    try:
        lo_b, hi_b = parse_size(lo), parse_size(hi or lo)
    except ValueError as exc:
        raise SystemExit(f"hoccl-bench: --sizes {spec!r}: {exc}; give LOW:HIGH, e.g. 2MiB:1GiB") from None
    if lo_b <= 0 or hi_b < lo_b:
        raise SystemExit(f"hoccl-bench: --sizes {spec!r}: give LOW:HIGH with 0 < LOW <= HIGH, e.g. 2MiB:1GiB")
    out, s = [], lo_b
    while s <= hi_b:
        out.append(s)
        s *= 2
    return out


def _loads(spec: str) -> list[str]:
    names = [n.strip() for n in spec.split(",") if n.strip()]
    bad = [n for n in names if n not in LOADS]
    if bad or not names:
        raise SystemExit(f"hoccl-bench: --loads {spec!r}: give some of {', '.join(LOADS)}, comma-separated")
    return names


def cpu_gauge_us() -> float:
    """How fast this process runs plain Python now: microseconds for a fixed dict walk (median of 7 x 50). A
    call's host time is mostly Python and driver calls, so the gauge tells a slow host (or core) from a slow
    call when host times differ between runs."""
    table = {i: i for i in range(64)}

    def walk() -> int:
        total = 0
        for i in range(64):
            total += table[i]
        return total

    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(50):
            walk()
        times.append((time.perf_counter() - t0) / 50 * 1e6)
    return statistics.median(times)


def current_cpu() -> int | None:
    """The CPU this process last ran on (Linux), else None."""
    try:
        return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def ipc_export(t: Any) -> tuple[bytes, int]:
    """(CUDA IPC handle of the allocation holding tensor ``t``, ``t``'s offset in it)."""
    from hoccl_runtime._cuda import ipc_export

    return ipc_export(t.data_ptr(), "a benchmark buffer")


def raw_plan(op: str, rank: int, world: int, out_addrs: list[int], inp: int,
             out_bytes: int) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """(remote copies, local copies) as (dst, src, bytes) of one raw collective: ``out_addrs`` holds every
    rank's output address as this process sees it."""
    if op == "sendrecv":
        return ([(out_addrs[1], inp, out_bytes)] if rank == 0 else []), []
    n = out_bytes // world
    plan = [(out_addrs[p] + rank * n, inp + (p * n if op == "alltoall" else 0), n) for p in range(world) if p != rank]
    local = (out_addrs[rank] + rank * n, inp + (rank * n if op == "alltoall" else 0), n)
    return plan, [local] if local[0] != local[1] else []  # in place: the own block is already there


def raw_call(plan: list[tuple[int, int, int]], local: list[tuple[int, int, int]], stream: int, side: int,
             pacer: Any = None, rate: float | None = None, period_us: float | None = None,
             learn: bool = False, gate: str = "clock") -> Callable[[], None]:
    """The raw baseline's call: ``plan``'s copies on ``stream`` (paced at ``rate`` GB/s when a rate is given:
    see _paced_raw for ``gate``, and pacing feedback if ``learn``) and ``local``'s on ``side``, joined by
    events."""
    import cupy

    rt = cupy.cuda.runtime
    fork, join = rt.eventCreateWithFlags(2), rt.eventCreateWithFlags(2)
    remote = _paced_raw(plan, stream, pacer, rate, period_us, learn, gate) if rate is not None else None

    def fn() -> None:
        if local:
            rt.eventRecord(fork, stream)
            rt.streamWaitEvent(side, fork, 0)
            for dst, src, nbytes in local:
                rt.memcpyAsync(dst, src, nbytes, 4, side)
            rt.eventRecord(join, side)
        if remote is not None:
            remote()
        else:
            for dst, src, nbytes in plan:
                rt.memcpyAsync(dst, src, nbytes, 4, stream)
        if local:
            rt.streamWaitEvent(stream, join, 0)
    return fn


def _paced_raw(plan: list[tuple[int, int, int]], s: int, pacer: Any, rate: float,
               period_us: float | None, learn: bool = False, gate: str = "clock") -> Callable[[], None]:
    """Raw copies paced as the communicator paces (Communicator._paced): piece k on tick k, the next
    tick piece k's bytes at ``rate`` later, the call's end on the tick after its last piece, the sleeps
    scaled by the calls' own Feedback (learning when ``learn``, as with the communicator's pace_feedback).
    Two controls for what the pacing itself costs the load, apart from the bytes: ``gate="ticks"``, the
    same clock stream and waits with no copies; ``gate="host"``, the same pieces issued by this thread at
    the rate (sleeping to each piece's due time: no clock stream, no waits on the GPU)."""
    import cupy

    from hoccl_runtime.pacing import PERIOD_US, Feedback, pieces, tick_us

    if gate not in ("clock", "ticks", "host"):
        raise ValueError(f"gate={gate!r}: clock, ticks or host")
    rt = cupy.cuda.runtime
    tick = tick_us(rate, PERIOD_US if period_us is None else period_us)
    cut = [(dst + off, src + off, n) for dst, src, size in plan for off, n in pieces(size, rate, tick)]
    if gate == "host":
        due_s = [n / (rate * 1e9) for _, _, n in cut]

        def by_host() -> None:
            due = time.perf_counter()
            for (dst, src, n), dt in zip(cut, due_s, strict=True):
                rt.memcpyAsync(dst, src, n, 4, s)
                due += dt
                if (wait := due - time.perf_counter()) > 0:
                    time.sleep(wait)
        return by_host
    copies = gate == "clock"
    events = [rt.eventCreateWithFlags(2) for _ in range(len(cut) + 1)]
    sleeps = [pacer.sleep_us(n / (rate * 1e3)) for _, _, n in cut]
    feedback = Feedback(pacer)
    feedback.target_us = sum(n for _, _, n in cut) / (rate * 1e3)

    def fn() -> None:
        mark = feedback.begin(s) if learn else None
        rt.eventRecord(events[0], s)
        rt.streamWaitEvent(pacer.handle, events[0], 0)
        for k, (dst, src, n) in enumerate(cut):
            if copies:
                rt.memcpyAsync(dst, src, n, 4, s)
            feedback.sleep(pacer.handle, sleeps[k])
            rt.eventRecord(events[k + 1], pacer.handle)
            rt.streamWaitEvent(s, events[k + 1], 0)
        if mark is not None:
            feedback.end(mark, s)
    return fn


class Bench:
    """Process group, communicator, streams and the baselines' handles for this rank."""

    def __init__(self, timeout_s: float = 120.0, what: str = "hoccl-bench"):
        if "RANK" not in os.environ:
            raise SystemExit("hoccl-bench runs under torchrun: torchrun --nproc_per_node 2 -m hoccl_bench.bench ...")
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            raise SystemExit("hoccl-bench needs torch (its NCCL baselines and process group): "
                             "pip install 'hoccl[gpu,torch]'") from None

        import hoccl_runtime as hr
        from hoccl_runtime.errors import HocclError
        from hoccl_runtime.torch import require_cuda

        try:  # one line, not torch's AttributeError (_cuda_setDevice), where this torch has no CUDA GPU
            require_cuda(what)
        except HocclError as exc:
            raise SystemExit(f"hoccl-bench: {exc}") from None
        self.torch, self.dist = torch, dist
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.dev = int(os.environ.get("LOCAL_RANK", self.rank))
        torch.cuda.set_device(self.dev)
        dist.init_process_group("nccl", device_id=torch.device(f"cuda:{self.dev}"))
        self.comm = hr.init(timeout_s=timeout_s)
        self._timeout_s = timeout_s
        self._peer_comm: Any = None  # local_copies="peer", made at the first hoccl-peer row (every rank alike)
        self.stream = torch.cuda.Stream()
        self.groups: dict[str, Any] = {}
        self._symm: Any = None
        self._side: Any = None
        self._graphs: list[tuple[int, int]] = []  # (graph, executable) of hoccl-graph rows, alive to the end
        self._windows: list[Any] = []  # hoccl-window rows' windows, closed after each row (release)
        self._probe: Any = None  # hoccl_bench.smfree.SmProbe, made at the first SM-free check (False: none)
        self._traced = False  # whether this process has made a profiler trace yet (sms)
        # contention, per variant: calls queued beside the load, grown until they outlast it
        self.calls_per_window: dict[str, int] = {}

    # --- helpers ---------------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        if self.rank == 0:
            print(text, flush=True)

    def max_over_ranks(self, value: float) -> float:
        t = self.torch.tensor([value], dtype=self.torch.float64, device="cuda")
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return float(t.item())

    def timed(self, fn: Callable[[], None], iters: int, reps: int = 5) -> tuple[float, float]:
        """(seconds per call: median over reps of the slowest rank, host us per call: median)."""
        torch = self.torch
        with torch.cuda.stream(self.stream):  # never the legacy stream: NCCL's copy-engine mode refuses it
            fn()
        torch.cuda.synchronize()
        gpu, host = [], []
        for _ in range(reps):
            self.dist.barrier()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(self.stream)
            t0 = time.perf_counter()
            with torch.cuda.stream(self.stream):
                for _ in range(iters):
                    fn()
            host.append((time.perf_counter() - t0) / iters * 1e6)
            end.record(self.stream)
            end.synchronize()
            gpu.append(self.max_over_ranks(start.elapsed_time(end) / 1e3 / iters))
        return statistics.median(gpu), statistics.median(host)

    def nccl_group(self, name: str) -> Any:
        """The process group behind an NCCL baseline name (created once; raises if this torch cannot)."""
        if name in self.groups:
            return self.groups[name]
        dist = self.dist
        if name == "nccl":
            group = dist.group.WORLD
        elif name.startswith("nccl-ctas="):
            k = int(name.split("=", 1)[1])
            opts = dist.ProcessGroupNCCL.Options()
            opts.config.min_ctas = k
            opts.config.max_ctas = k
            group = dist.new_group(backend="nccl", pg_options=opts)
        elif name == "nccl-ce":
            opts = dist.ProcessGroupNCCL.Options()
            opts.config.cta_policy = 2  # NCCL_CTA_POLICY_ZERO: copy-engine collectives where possible
            group = dist.new_group(backend="nccl", pg_options=opts)
        else:
            raise ValueError(f"unknown baseline {name!r}")
        self.groups[name] = group
        return group

    def symmetric(self, n: int, group: Any, slot: int) -> Any:
        """n bytes of NCCL symmetric memory registered with ``group`` (for nccl-ce): views of one window
        of 2 x 1 GiB allocated and registered once (slot 0: inputs, slot 1: outputs)."""
        import torch.distributed._symmetric_memory as symm

        if n > 1 << 30:
            raise ValueError("nccl-ce buffers are views of a 2 GiB window: sizes up to 1 GiB")
        if self._symm is None:
            symm.set_backend("NCCL")
            self._symm = symm.empty(2 << 30, dtype=self.torch.uint8, device=f"cuda:{self.dev}")
            symm.rendezvous(self._symm, group=group)
        return self._symm[slot << 30:(slot << 30) + n]

    # --- one operation, one implementation -------------------------------------------------------------
    @property
    def peer_comm(self) -> Any:
        """A second communicator whose own blocks go through the peer GPUs (local_copies="peer")."""
        if self._peer_comm is None:
            import hoccl_runtime as hr

            self._peer_comm = hr.init(timeout_s=self._timeout_s, local_copies="peer")
        return self._peer_comm

    def release(self) -> None:
        """After a row: close its windows (every rank at the same point: a collective call)."""
        if not self._windows:  # (rows without windows go on as before)
            return
        self.torch.cuda.synchronize()
        while self._windows:
            self._windows.pop().close()

    def close(self) -> None:
        self.comm.close()
        if self._peer_comm is not None:
            self._peer_comm.close()

    def make_op(self, op: str, impl: str, size: int) -> tuple[Callable[[], None], Callable[[], int] | None]:
        """(the call, a checker or None) moving ``size`` bytes (nccl-tests' size: the total per rank)."""
        dist, comm, r, w = self.dist, self.comm, self.rank, self.world
        n = size // w  # AllGather: each rank's part
        if op == "sendrecv":
            inp, out = self._buffers(impl, size, size)
        elif op == "allgather":
            inp, out = self._buffers(impl, n, n * w)
        else:
            inp, out = self._buffers(impl, n * w, n * w)
        s = self.stream
        if impl == "hoccl-inplace":  # NCCL's in-place AllGather: no same-GPU copy (hoccl_bench.smfree)
            if op != "allgather":
                raise ValueError("hoccl-inplace is an AllGather variant")
            inp = out[r * n:(r + 1) * n]
            fn = lambda: comm.all_gather_into_tensor(out, inp, stream=s)  # noqa: E731
            return fn, self._checker(op, inp, out, fn)
        if impl == "hoccl-window":
            inp, out = self._window_buffers(op, inp, out)
        if impl in ("hoccl", "hoccl-graph", "hoccl-peer", "hoccl-window"):
            if impl == "hoccl-peer":
                if op == "sendrecv":
                    raise ValueError("hoccl-peer is an AllGather / All-to-All variant (send/recv copies no own block)")
                comm = self.peer_comm
            calls = {
                "sendrecv": lambda: comm.send(inp, 1, stream=s) if r == 0 else
                comm.recv(out, 0, stream=s) if r == 1 else None,
                "allgather": lambda: comm.all_gather_into_tensor(out, inp, stream=s),
                "alltoall": lambda: comm.all_to_all_single(out, inp, stream=s),
            }
            fn = self._graph(calls[op]) if impl == "hoccl-graph" else calls[op]
            return fn, self._checker(op, inp, out, fn)
        if impl == "raw":
            return self._raw(op, inp, out), None
        group = self.nccl_group(impl)
        calls = {
            "sendrecv": lambda: dist.send(inp, 1, group=group) if r == 0 else
            dist.recv(out, 0, group=group) if r == 1 else None,
            "allgather": lambda: dist.all_gather_into_tensor(out, inp, group=group),
            "alltoall": lambda: dist.all_to_all_single(out, inp, group=group),
        }
        return calls[op], None

    def _graph(self, call: Callable[[], None]) -> Callable[[], None]:
        """``call`` captured once into a CUDA graph on the benchmark stream (every rank captures its part at
        the same time: the mailbox exchange happens during capture); the returned function launches it.
        What a training step captured in a graph pays per collective: no Python, one graph launch."""
        import cupy

        rt, s = cupy.cuda.runtime, self.stream.cuda_stream
        call()  # plan, mappings, events and streams exist before the capture
        self.torch.cuda.synchronize()
        rt.streamBeginCapture(s, 1)  # thread-local capture mode
        try:
            call()
        finally:
            graph = rt.streamEndCapture(s)
        exe = rt.graphInstantiate(graph)
        self._graphs.append((graph, exe))
        return lambda: rt.graphLaunch(exe, s)

    def _window_buffers(self, op: str, inp: Any, out: Any) -> tuple[Any, Any]:
        """``inp`` and ``out`` moved into one window per rank: the buffer a peer writes to (the output; the
        sender's input for send/recv) at offset 0 of every rank's window, the other one after it."""
        torch = self.torch
        win = torch.empty(inp.numel() + out.numel(), dtype=torch.uint8, device=inp.device)
        self._windows.append(self.comm.register_window(win))
        if op == "sendrecv" and self.rank == 0:  # the receiver's buffer at the sender's offset
            new_inp, new_out = win[:inp.numel()], win[inp.numel():]
        else:
            new_out, new_inp = win[:out.numel()], win[out.numel():]
        new_inp.copy_(inp)
        return new_inp, new_out

    def _buffers(self, impl: str, n_in: int, n_out: int) -> tuple[Any, Any]:
        torch = self.torch
        if impl == "nccl-ce":
            group = self.nccl_group(impl)
            return self.symmetric(n_in, group, 0), self.symmetric(n_out, group, 1)
        dev = f"cuda:{self.dev}"
        return (torch.randint(0, 256, (n_in,), dtype=torch.uint8, device=dev),
                torch.empty(n_out, dtype=torch.uint8, device=dev))

    def _checker(self, op: str, inp: Any, out: Any, call: Callable[[], None]) -> Callable[[], int]:
        """Fresh random input on every rank, poisoned output, one call, compare with what NCCL computes: the output
        bytes that differ (nccl-tests' #wrong, the most of any rank)."""
        torch, dist = self.torch, self.dist

        def check() -> int:
            fresh = torch.randint(0, 256, inp.shape, dtype=torch.uint8, device=inp.device)
            out.fill_(0xA5)
            inp.copy_(fresh)  # after the poison: an in-place input lies inside the output
            torch.cuda.synchronize()
            with torch.cuda.stream(self.stream):
                call()
            self.stream.synchronize()
            want = torch.empty_like(out)
            if op == "allgather":
                dist.all_gather_into_tensor(want, fresh)
            elif op == "alltoall":
                dist.all_to_all_single(want, inp)
            else:
                if self.rank == 0:
                    dist.send(inp, 1)
                elif self.rank == 1:
                    dist.recv(want, 0)
                if self.rank != 1:
                    want = out  # nothing arrives on the sender
            torch.cuda.synchronize()
            wrong = int((out != want).sum().item())
            return int(self.max_over_ranks(float(wrong)))
        return check

    def peer_addresses(self, t: Any) -> list[int]:
        """Every rank's address of ``t``'s counterpart, opened through CUDA IPC (for the raw baseline)."""
        import cupy

        rt = cupy.cuda.runtime
        every: list[Any] = [None] * self.world
        self.dist.all_gather_object(every, ipc_export(t))
        addrs = []
        for peer, (handle, offset) in enumerate(every):
            if peer == self.rank:
                addrs.append(t.data_ptr())
            else:
                addrs.append(int(rt.ipcOpenMemHandle(handle)) + offset)
        return addrs

    def _raw(self, op: str, inp: Any, out: Any, pacer: Any = None, rate: float | None = None,
             period_us: float | None = None, gate: str = "clock") -> Callable[[], None]:
        """One cudaMemcpyAsync per peer into its output, and the local part on a second stream (as HOCCL
        runs it), joined by events: the copy engines' limit for the collective's bytes, no handshakes."""
        plan, local = raw_plan(op, self.rank, self.world, self.peer_addresses(out), inp.data_ptr(), out.numel())
        period = self.comm.pace_period_us if period_us is None else period_us
        return raw_call(plan, local, self.stream.cuda_stream, self._raw_side_stream(), pacer, rate, period,
                        self.comm.pace_feedback, gate)

    def _raw_side_stream(self) -> int:
        if self._side is None:
            self._side = self.torch.cuda.Stream()
        return self._side.cuda_stream

    def sms(self, fn: Callable[[], None]) -> tuple[int, str]:
        """SMs a call occupies: the largest kernel grid in a torch.profiler trace of 3 calls (0: no kernel),
        over the ranks, and the name of this rank's largest kernel ("" if none)."""
        from torch.profiler import ProfilerActivity, profile

        torch = self.torch
        torch.cuda.synchronize()
        if not self._traced:  # the process's first trace recorded a kernel of grid 8192 that was not the
            # call's (2x H200, 2026-11-30: the same row traced again showed none); an empty trace first
            with profile(activities=[ProfilerActivity.CUDA]):
                torch.cuda.synchronize()
            self._traced = True
        with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.cuda.stream(self.stream):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"trace{self.rank}.json"
            prof.export_chrome_trace(str(path))
            trace = json.loads(path.read_text())
        kernels = [(ev.get("args", {}).get("grid", [0])[0], ev.get("name", "")) for ev in trace.get("traceEvents", [])
                   if ev.get("cat") == "kernel"]
        grid, name = max(kernels, default=(0, ""))
        return int(self.max_over_ranks(float(grid))), name

    def sm_free(self, fn: Callable[[], None]) -> bool | None:
        """Whether a call needed no SM on any rank: its work ends before a kernel holding every SM does
        (hoccl_bench.smfree; a trace misses the driver's same-GPU copy kernels). None: no probe here."""
        if self._probe is None:
            try:
                from hoccl_bench.smfree import SmProbe

                self._probe = SmProbe(self.dev)
            except Exception as exc:  # noqa: BLE001 - e.g. no NVRTC: reported, the sweep goes on
                self.say(f"  SM probe unavailable: {type(exc).__name__}: {str(exc)[:120]}")
                self._probe = False
        if self._probe is False:
            return None
        self.torch.cuda.synchronize()
        self.dist.barrier()
        with self.torch.cuda.stream(self.stream):
            free = self._probe.sm_free(fn, self.stream.cuda_stream)
        return self.max_over_ranks(0.0 if free else 1.0) == 0.0

    def header(self) -> dict[str, Any]:
        torch = self.torch
        import cupy

        return {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": socket.gethostname(),
                "gpu": torch.cuda.get_device_name(self.dev), "gpus": self.world,
                "driver": cupy.cuda.runtime.driverGetVersion(), "torch": torch.__version__,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "env": {k: os.environ.get(k) for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_NVLS_ENABLE")}}

    def write(self, out: str, name: str, data: dict[str, Any]) -> None:
        if self.rank == 0:
            folder = Path(out)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}.json").write_text(json.dumps({**self.header(), **data}, indent=1))


# --- sweep -----------------------------------------------------------------------------------------------

class PowerLog:
    """nvidia-smi samples (time, GPU, watts, SM MHz, clock event reasons) in a background process; averaged
    per window. ``power_cap`` of a window is the share of its samples in which the driver held the clocks
    down for power (the SW power cap bit, 0x4, of ``clocks_event_reasons.active``; None where this
    nvidia-smi has no such field)."""

    FIELDS = "index,power.draw,clocks.sm"
    REASONS = "clocks_event_reasons.active"
    POWER_CAP = 0x4

    def __init__(self) -> None:
        self.samples: list[tuple[float, int, float, float, int | None]] = []
        fields = self.FIELDS
        try:  # older drivers call it clocks_throttle_reasons; without either the log has no reasons
            probe = subprocess.run(["nvidia-smi", f"--query-gpu={fields},{self.REASONS}",
                                    "--format=csv,noheader,nounits", "-i", "0"],
                                   capture_output=True, text=True, timeout=20)
            if probe.returncode == 0:
                fields += "," + self.REASONS
            self.proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                                          "-lms", "50"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except (OSError, subprocess.TimeoutExpired):
            self.proc = None
            return
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.add(time.time(), line)

    def add(self, t: float, line: str) -> None:
        """One line of nvidia-smi's CSV output, sampled at ``t``; lines that do not parse are skipped."""
        parts = [p.strip() for p in line.split(",")]
        try:
            reasons = int(parts[3], 16) if len(parts) > 3 else None
            self.samples.append((t, int(parts[0]), float(parts[1]), float(parts[2]), reasons))
        except (ValueError, IndexError):
            return

    def window(self, t0: float, t1: float, gpu: int) -> dict[str, float | None]:
        got = [(w, c, r) for t, g, w, c, r in list(self.samples) if t0 <= t <= t1 and g == gpu]
        if not got:
            return {"watts": None, "sm_mhz": None, "power_cap": None}
        known = [r for _, _, r in got if r is not None]
        return {"watts": statistics.mean(w for w, _, _ in got), "sm_mhz": statistics.mean(c for _, c, _ in got),
                "power_cap": (sum(1 for r in known if r & self.POWER_CAP) / len(known)) if known else None}

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=5)
