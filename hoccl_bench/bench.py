"""``hoccl-bench``: HOCCL against raw copy-engine copies and NCCL, in one run (torchrun, one process per GPU).

    torchrun --nproc_per_node 2 -m hoccl_bench.bench sweep --out results/
    torchrun --nproc_per_node 2 -m hoccl_bench.bench contention --out results/
    torchrun --nproc_per_node 2 -m hoccl_bench.bench launch --out results/
    hoccl-bench-report results/ -o report.md

* ``sweep``: bandwidth by size (nccl-tests' definitions: send/recv bytes/t; AllGather and All-to-All
  algbw = total bytes/t, busbw = algbw (n-1)/n) for ``--baselines`` among ``hoccl``, ``hoccl-graph``
  (each call captured once into a CUDA graph and launched: no Python per call), ``hoccl-inplace``
  (AllGather with the input in the output's own block), ``hoccl-peer`` (a communicator with
  ``local_copies="peer"``: own blocks through the peer GPUs, no SM), ``hoccl-window`` (the buffers
  carved from one registered window per rank: no per-call address exchange), ``raw`` (one
  ``cudaMemcpyAsync`` per peer through CUDA IPC and the local part on a second stream, no
  synchronisation between ranks: the copy engines' limit),
  ``nccl``, ``nccl-ctas=K`` (a communicator with min = max CTAs = K) and ``nccl-ce`` (NCCL's
  copy-engine collectives: symmetric memory, CTA policy zero). HOCCL's output is checked once per
  size on fresh random data with a poisoned output. SMs per row come from a torch.profiler trace
  (the largest grid of any kernel the call launched; 0 when it launched none; the JSON names that
  kernel), after one empty trace (a process's first trace once recorded a kernel not of the call).
* ``contention``: a bf16 8192^3 GEMM loop and a memory-bound loop timed alone and beside back-to-back
  AllGathers of each communicator, in interleaved rounds (the order rotates every round); each window
  is preceded by untimed load with the same traffic (``--settle-iters``), so that it starts from that
  pairing's clock and power state rather than from the previous window's; slowdown = median time /
  median time alone, and "paired" = median over rounds of time / the same round's time alone
  (drift-resistant), with the bandwidth each communicator delivered inside the window, and HOCCL and
  raw copies paced at several rates (``--rates``). GPU power and SM clock sampled with nvidia-smi per
  variant.
* ``launch``: host microseconds inside one call, by size, for HOCCL and NCCL.

Each writes ``<command>.json`` (machine, GPU, driver, NCCL and torch versions, date, every figure)
into ``--out`` on rank 0 and prints a table last.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["main"]

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
    lo_b, hi_b = parse_size(lo), parse_size(hi or lo)
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

    def make_op(self, op: str, impl: str, size: int) -> tuple[Callable[[], None], Callable[[], bool] | None]:
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

    def _checker(self, op: str, inp: Any, out: Any, call: Callable[[], None]) -> Callable[[], bool]:
        """Fresh random input on every rank, poisoned output, one call, compare with what NCCL computes."""
        torch, dist = self.torch, self.dist

        def check() -> bool:
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
            ok = bool(torch.equal(out, want))
            return self.max_over_ranks(0.0 if ok else 1.0) == 0.0
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
def sweep(b: Bench, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows, unavailable, failures = [], {}, {}
    errors: dict[tuple[str, str, int], str] = {}
    ops = [o for o in args.collectives.split(",") if o]
    impls = _baselines(args.baselines)
    for size in _sizes(args.sizes):
        iters = batch_calls(size, args.iters)
        for op in ops:
            for impl in impls:
                if impl in unavailable or (impl in ("nccl-ce", "hoccl-peer") and op == "sendrecv") or \
                        (impl == "hoccl-inplace" and op != "allgather"):
                    continue  # NCCL's copy-engine mode covers collectives, not point-to-point
                try:
                    fn, check = b.make_op(op, impl, size)
                    ok = check() if check is not None else None
                    t, host = b.timed(fn, iters)
                    sms, kernel = b.sms(fn) if size == args.sm_size else (None, None)
                    free = b.sm_free(fn) if size == args.sm_size else None
                    failed = 0.0
                except Exception as exc:  # noqa: BLE001 - a baseline this torch/NCCL cannot run is reported
                    errors[(impl, op, size)] = f"{type(exc).__name__}: {exc}"[:300]
                    failed = 1.0
                if b.max_over_ranks(failed):  # every rank skips the point together
                    why = errors.get((impl, op, size), "failed on another rank")
                    failures[(impl, op)] = failures.get((impl, op), 0) + 1
                    b.say(f"  {impl} {op} {size} B failed: {why.splitlines()[0]}")
                    if failures[(impl, op)] >= 10:  # give up on a baseline that fails 10 sizes in a row
                        unavailable[impl] = why
                    with contextlib.suppress(Exception):  # the row's error is reported already
                        b.release()
                    b.torch.cuda.synchronize()
                    continue
                bw = size / t / 1e9
                busbw = bw * (b.world - 1) / b.world if op != "sendrecv" else bw
                gauge = b.max_over_ranks(cpu_gauge_us())  # the slowest rank's, as for the times
                rows.append(dict(op=op, impl=impl, size=size, calls=iters, seconds=t, gbps=bw, busbw=busbw,
                                 host_us=host, correct=ok, sms=sms, sm_kernel=kernel, sm_free=free, cpu_gauge_us=gauge,
                                 cpu=current_cpu()))
                failures.pop((impl, op), None)  # only consecutive failures count
                b.release()
                b.torch.cuda.empty_cache()
        b.say(f"size {size >> 20} MiB done")
    b.write(args.out, "sweep", {"rows": rows, "unavailable": unavailable,
                                "failed_points": [f"{i} {o} {n}: {e}" for (i, o, n), e in errors.items()]})
    b.say(f"{'op':10} {'impl':13} {'size':>9} {'GB/s':>7} {'busbw':>7} {'host us':>8} {'SMs':>4} {'SM-free':>7} ok"
          f"{'py us':>7}")
    for r in rows:
        sms = "" if r["sms"] is None else r["sms"]
        free = "" if r["sm_free"] is None else "yes" if r["sm_free"] else "no"
        ok = "" if r["correct"] is None else r["correct"]
        b.say(f"{r['op']:10} {r['impl']:13} {r['size'] >> 20:>5} MiB {r['gbps']:7.1f} {r['busbw']:7.1f} "
              f"{r['host_us']:8.1f} {sms:>4} {free:>7} {ok!s:>4} {r['cpu_gauge_us']:6.2f}")
    return rows


# --- launch ----------------------------------------------------------------------------------------------
def launch(b: Bench, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Host time per call with the GPU idle at the start of each batch (so no queue is full)."""
    rows = []
    for size in _sizes(args.sizes)[::2]:
        for op in [o for o in args.collectives.split(",") if o]:
            for impl in ("hoccl", "nccl"):
                fn, _ = b.make_op(op, impl, size)
                samples = []
                with b.torch.cuda.stream(b.stream):
                    fn()
                for _ in range(args.reps):
                    b.torch.cuda.synchronize()
                    b.dist.barrier()
                    t0 = time.perf_counter()
                    with b.torch.cuda.stream(b.stream):
                        for _ in range(4):
                            fn()
                    samples.append((time.perf_counter() - t0) / 4 * 1e6)
                host = b.max_over_ranks(statistics.median(samples))
                rows.append(dict(op=op, impl=impl, size=size, host_us=host, gbps=0.0))
    b.torch.cuda.synchronize()
    b.write(args.out, "launch", {"rows": rows, "kind": "launch"})
    b.say(f"{'op':10} {'impl':8} {'size':>9} {'host us/call (slowest rank)':>28}")
    for r in rows:
        b.say(f"{r['op']:10} {r['impl']:8} {r['size'] >> 20:>5} MiB {r['host_us']:10.1f}")
    return rows


# --- contention ------------------------------------------------------------------------------------------
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


@dataclasses.dataclass(frozen=True)
class ProcRun:
    """A contention variant whose traffic comes from the copier process: its variant name there."""
    copier: ProcCopier
    name: str


class ProcCopier:
    """The raw AllGather's copies issued from a child process with its own CUDA context, back to back
    (or paced) between :meth:`run` and :meth:`stop`: whether the same bytes cost the load beside them
    less when they come from another context than from the load's own (the design notes measured
    GEMM +3% from another process against +12% from the same one, at full rate)."""

    def __init__(self, b: Bench, inp: Any, out: Any, variants: dict[str, float | None], period_us: float,
                 timeout_s: float = 120.0):
        import multiprocessing as mp

        outs: list[Any] = [None] * b.world
        b.dist.all_gather_object(outs, ipc_export(out))
        self.timeout_s = timeout_s
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_copier_child, daemon=True, name=f"hoccl-bench-copier-{b.rank}",
                                args=(child, b.dev, b.rank, b.world, outs, ipc_export(inp), out.numel(), variants,
                                      period_us))
        self.proc.start()
        child.close()
        self._reply("ready")

    def _reply(self, what: str) -> Any:
        if not self.conn.poll(self.timeout_s):
            self.close()
            raise RuntimeError(f"the copier process sent no '{what}' within {self.timeout_s:g} s")
        got = self.conn.recv()
        if isinstance(got, tuple) and got and got[0] == "error":
            raise RuntimeError(f"copier process: {got[1]}")
        return got

    def run(self, name: str) -> None:
        self.conn.send(("run", name))
        self._reply("running")

    def stop(self) -> tuple[int, float]:
        """(calls finished, seconds from the first call's start to the last call's end)."""
        self.conn.send(("stop",))
        return self._reply("stopped")

    def close(self) -> None:
        if self.proc.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(("close",))
            self.proc.join(10)
            if self.proc.is_alive():
                self.proc.terminate()


def _copier_child(conn: Any, device: int, rank: int, world: int, outs: list[tuple[bytes, int]],
                  inp: tuple[bytes, int], out_bytes: int, variants: dict[str, float | None], period_us: float) -> None:
    """ProcCopier's process: opens the buffers, then runs the named variant's calls until told to stop,
    at most four calls ahead of the GPU."""
    try:
        import collections

        import cupy

        from hoccl_runtime.pacing import Pacer

        cupy.cuda.Device(device).use()
        rt = cupy.cuda.runtime
        addrs = [int(rt.ipcOpenMemHandle(h)) + off for h, off in outs]
        src = int(rt.ipcOpenMemHandle(inp[0])) + inp[1]
        plan, local = raw_plan("allgather", rank, world, addrs, src, out_bytes)
        stream, side = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
        pacer = Pacer(device) if any(r is not None for r in variants.values()) else None
        calls = {name: raw_call(plan, local, stream.ptr, side.ptr, pacer, rate, period_us)
                 for name, rate in variants.items()}
        conn.send("ready")
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    while True:
        msg = conn.recv()
        if msg[0] == "close":
            return
        fn, done, inflight = calls[msg[1]], 0, collections.deque()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record(stream)
        fn()
        inflight.append(cupy.cuda.Event())
        inflight[-1].record(stream)
        conn.send("running")
        while not conn.poll():
            fn()
            inflight.append(cupy.cuda.Event())
            inflight[-1].record(stream)
            if len(inflight) > 4:
                inflight.popleft().synchronize()
                done += 1
        conn.recv()  # stop
        end.record(stream)
        end.synchronize()
        conn.send((done + len(inflight), cupy.cuda.get_elapsed_time(start, end) / 1e3))


def contention(b: Bench, args: argparse.Namespace) -> list[dict[str, Any]]:
    torch = b.torch
    dev = f"cuda:{b.dev}"
    compute = torch.cuda.Stream()
    g = torch.Generator(device=dev).manual_seed(b.rank)
    a_mat = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
    b_mat = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16, generator=g)
    c_mat = torch.empty(8192, 8192, device=dev, dtype=torch.bfloat16)
    x = torch.randn(256 << 20, device=dev, dtype=torch.bfloat16, generator=g)  # 512 MiB each
    y = torch.randn(256 << 20, device=dev, dtype=torch.bfloat16, generator=g)
    z = torch.empty_like(x)
    loads = {
        "gemm": (lambda: torch.matmul(a_mat, b_mat, out=c_mat), args.gemm_iters),
        "membound": (lambda: torch.add(x, y, out=z), args.mem_iters),
    }
    loads = {name: loads[name] for name in _loads(args.loads)}
    size = args.size
    if args.pace_feedback:
        b.comm.pace_feedback = True
    variants: dict[str, tuple[Callable[[], None], int]] = {}
    from hoccl_runtime.pacing import Pacer

    pacer = Pacer(b.dev)
    from hoccl_runtime.flags import FlagPool

    b.go_pool = FlagPool(1)
    b.go_flag = b.go_pool.allocate()
    for impl in ("hoccl", "raw", "nccl", "nccl-ce"):
        try:
            fn, check = b.make_op("allgather", impl, size)
            if check is not None and not check():
                raise RuntimeError("wrong result")
            variants[impl] = (fn, size * (b.world - 1) // b.world)  # bytes this rank sends per call
        except Exception as exc:  # noqa: BLE001 - reported
            b.say(f"  {impl}: unavailable ({type(exc).__name__}: {str(exc)[:150]})")
    inp = torch.randint(0, 256, (size // b.world,), dtype=torch.uint8, device=dev)
    out = torch.empty(size, dtype=torch.uint8, device=dev)
    sent = size * (b.world - 1) // b.world
    if args.in_place or args.controls:  # input = the output's own block: no same-GPU copy, a driver kernel on SMs
        out_ip = torch.empty(size, dtype=torch.uint8, device=dev)
        own = out_ip[b.rank * (size // b.world):(b.rank + 1) * (size // b.world)]
        own.copy_(inp)
    if args.in_place:
        variants["hoccl-inplace"] = (lambda: b.comm.all_gather_into_tensor(out_ip, own, stream=b.stream), sent)
        variants["raw-inplace"] = (b._raw("allgather", own, out_ip), sent)
    if args.peer:  # own blocks through the peer GPUs: out of place, and no SM either
        peer_fn, check = b.make_op("allgather", "hoccl-peer", size)
        if not check():
            raise RuntimeError("hoccl-peer: wrong result")
        variants["hoccl-peer"] = (peer_fn, sent)

    def paced(rate: float, period: float) -> None:  # one call with another pacing tick, then the default again
        default, b.comm.pace_period_us = b.comm.pace_period_us, period
        try:
            b.comm.all_gather_into_tensor(out, inp, stream=b.stream, rate_gbps=rate)
        finally:
            b.comm.pace_period_us = default

    periods = [float(p) for p in args.period_us.split(",") if p and float(p) != b.comm.pace_period_us]
    for rate in [float(r) for r in args.rates.split(",") if r]:
        variants[f"hoccl@{rate:g}"] = (lambda r=rate: b.comm.all_gather_into_tensor(out, inp, stream=b.stream,
                                                                                  rate_gbps=r), sent)
        variants[f"raw@{rate:g}"] = (b._raw("allgather", inp, out, pacer, rate), sent)
        if args.peer:
            variants[f"hoccl-peer@{rate:g}"] = (lambda r=rate: b.peer_comm.all_gather_into_tensor(
                out, inp, stream=b.stream, rate_gbps=r), sent)
        if args.in_place:
            variants[f"hoccl-inplace@{rate:g}"] = (lambda r=rate: b.comm.all_gather_into_tensor(
                out_ip, own, stream=b.stream, rate_gbps=r), sent)
            variants[f"raw-inplace@{rate:g}"] = (b._raw("allgather", own, out_ip, pacer, rate), sent)
        if args.controls:  # what pacing costs apart from the bytes: its clock alone; copies paced by the host
            variants[f"ticks@{rate:g}"] = (b._raw("allgather", own, out_ip, pacer, rate, gate="ticks"), 0)
            variants[f"raw-inplace-host@{rate:g}"] = (b._raw("allgather", own, out_ip, pacer, rate, gate="host"),
                                                      sent)
        for period in periods:  # longer ticks: longer idle gaps between pieces at the same rate
            variants[f"hoccl@{rate:g}/{period:g}us"] = (lambda r=rate, p=period: paced(r, p), sent)
            variants[f"raw@{rate:g}/{period:g}us"] = (b._raw("allgather", inp, out, pacer, rate, period), sent)
    copier = None
    if args.copier_process:
        named: dict[str, float | None] = {"raw-proc": None, **{f"raw-proc@{float(r):g}": float(r)
                                                                for r in args.rates.split(",") if r}}
        try:
            copier = ProcCopier(b, inp, out, named, b.comm.pace_period_us)
            variants.update({name: (ProcRun(copier, name), sent) for name in named})
        except Exception as exc:  # noqa: BLE001 - reported, the rest still runs
            b.say(f"  raw-proc: unavailable ({type(exc).__name__}: {str(exc)[:150]})")
    power = PowerLog()
    samples: dict[tuple[str, str], list[dict[str, float]]] = {}
    for load, (work, iters) in loads.items():
        # warm for --warmup-s seconds: cuBLAS heuristics, and clocks and power settle (in one run of 2026-11-30
        # an "alone" GEMM round took 16% less than the median of the others)
        t_end = time.monotonic() + args.warmup_s
        with torch.cuda.stream(compute):
            while time.monotonic() < t_end:
                for _ in range(iters):
                    work()
                compute.synchronize()
        names = ["alone", *variants]
        settle = iters if args.settle_iters is None else args.settle_iters
        for rnd in range(args.rounds):
            # rotated every round: a GPU's clock follows its power of the last ~100 ms, so a fixed order
            # would give each variant its predecessor's state (seen on the power-capped GEMM, 2026-11-30)
            k = rnd % len(names)
            for name in names[k:] + names[:k]:
                for _ in range(8):  # a window whose traffic stopped before it ended is measured again
                    sample, dry = _one_window(b, compute, work, iters, variants.get(name), power, settle, name,
                                              args.traffic_first)
                    if not dry:
                        break
                samples.setdefault((load, name), []).append(sample)
            b.say(f"{load} round {rnd + 1}/{args.rounds} done")
    power.close()
    if copier is not None:
        copier.close()
    rows = contention_rows(samples)
    b.write(args.out, "contention", {"rows": rows, "kind": "contention", "allgather_bytes": size,
                                     "pacer": pacer.describe(), "traffic_first": args.traffic_first})
    b.say(f"{'load':9} {'beside':12} {'slowdown':>9} {'paired':>8} {'min..max':>13} {'delivered GB/s':>15} "
          f"{'W':>5} {'MHz':>5} {'capped':>6}")
    for r in rows:
        w = f"{r['watts']:5.0f}" if r["watts"] else "    -"
        m = f"{r['sm_mhz']:5.0f}" if r["sm_mhz"] else "    -"
        c = f"{100 * r['power_cap']:5.0f}%" if r["power_cap"] is not None else "     -"
        b.say(f"{r['load']:9} {r['comm']:12} {100 * (r['slowdown'] - 1):+8.1f}% {100 * (r['paired'] - 1):+7.1f}% "
              f"{100 * (r['spread'][0] - 1):+5.1f}..{100 * (r['spread'][1] - 1):+5.1f}% {r['delivered_gbps']:15.1f} "
              f"{w} {m} {c}")
    return rows


def contention_rows(samples: dict[tuple[str, str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows of the contention table from per-round samples ({(load, variant): [one dict per round]}, the
    "alone" variant among them, rounds in the same order for every variant). ``slowdown``: the median
    time over the median time alone; ``paired``: the median over rounds of time / that round's time
    alone, which cancels clock and power drift slower than a round (a power-capped GEMM's clock moves
    by several percent between rounds)."""
    rows = []
    for (load, name), got in samples.items():
        alone_rounds = [s["seconds"] for s in samples[(load, "alone")]]
        alone = statistics.median(alone_rounds)
        t = statistics.median(s["seconds"] for s in got)
        paired = statistics.median(s["seconds"] / a for s, a in zip(got, alone_rounds, strict=False))
        spread = (min(s["seconds"] for s in got) / alone, max(s["seconds"] for s in got) / alone)
        gbps = statistics.median(s["gbps"] for s in got)
        watts = [s["watts"] for s in got if s.get("watts") is not None]
        mhz = [s["sm_mhz"] for s in got if s.get("sm_mhz") is not None]
        cap = [s["power_cap"] for s in got if s.get("power_cap") is not None]
        rows.append(dict(load=load, comm=name, seconds=t, slowdown=t / alone, paired=paired, spread=spread,
                         delivered_gbps=gbps, watts=statistics.median(watts) if watts else None,
                         sm_mhz=statistics.median(mhz) if mhz else None,
                         power_cap=statistics.mean(cap) if cap else None))
    return rows


def _one_window(b: Bench, compute: Any, work: Callable[[], None], iters: int,
                variant: tuple[Callable[[], None], int] | None, power: PowerLog, settle: int = 0,
                name: str = "", traffic_first: bool = False) -> tuple[dict[str, float], bool]:
    """Time ``iters`` of ``work`` on ``compute`` while ``variant`` (a call, bytes it sends) runs back to
    back on the communication stream, after ``settle`` untimed iterations with the traffic already
    running; the bytes count is of calls that finished inside the timed window. Returns the sample and
    whether the traffic ran dry before the window ended on any rank (then the count of calls for
    ``name`` has grown, and the window should be measured again). The load is enqueued first, held on a
    host flag; ``traffic_first``: the traffic is enqueued (and runs) first and the load after it, as a
    training step issues a background collective before the compute it overlaps (which decides what
    overlaps when all streams share one hardware queue, CUDA_DEVICE_MAX_CONNECTIONS=1)."""
    from hoccl_runtime.flags import MemOps

    torch = b.torch
    torch.cuda.synchronize()
    b.dist.barrier()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    marks = []
    go = b.go_flag
    t0 = time.time()
    released = torch.cuda.Event(enable_timing=True)
    other = variant is not None and isinstance(variant[0], ProcRun)
    calls = b.calls_per_window.setdefault(name, 40)

    def enqueue_load() -> None:
        # held by a stream wait on a host flag, so host time spent enqueueing the communication (which may
        # block) never shows up as load time; it starts when the flag is set
        MemOps().wait_eq(go, 1).write(go, 0).enqueue(compute.cuda_stream)
        released.record(compute)
        with torch.cuda.stream(compute):
            for _ in range(settle):
                work()
            start.record(compute)
            for _ in range(iters):
                work()
        end.record(compute)

    def enqueue_traffic(issued: threading.Event | None = None) -> None:  # ``issued`` set after two calls
        if variant is not None and not other:
            with torch.cuda.stream(b.stream):
                for i in range(calls):
                    variant[0]()
                    ev = torch.cuda.Event(enable_timing=True)
                    ev.record(b.stream)
                    marks.append(ev)
                    if issued is not None and i == 1:
                        issued.set()

    if traffic_first and variant is not None and not other:
        # a thread issues the traffic (the host blocks once the GPU's queue is full, so it cannot all be
        # issued in advance); the load is issued once the first two calls are, and behind them
        issued, failure = threading.Event(), []

        def feed() -> None:
            try:
                torch.cuda.set_device(b.dev)
                enqueue_traffic(issued)
            except BaseException as exc:  # noqa: BLE001 - raised in the caller below
                failure.append(exc)
            finally:
                issued.set()

        feeder = threading.Thread(target=feed, name="hoccl-bench-traffic", daemon=True)
        feeder.start()
        issued.wait()
        enqueue_load()
        go.write(1)
        feeder.join(b._timeout_s)
        if feeder.is_alive() or failure:
            raise RuntimeError(f"{name}: the traffic thread failed or hung") from (failure[0] if failure else None)
    elif traffic_first:
        if other:
            variant[0].copier.run(variant[0].name)
        enqueue_load()
        go.write(1)
    else:
        enqueue_load()
        b.stream.wait_event(released)
        if other:  # traffic from the copier process: running before the load is released
            variant[0].copier.run(variant[0].name)
        go.write(1)
        enqueue_traffic()
    torch.cuda.synchronize()
    t1 = time.time()
    window = start.elapsed_time(end) / 1e3
    if other:  # the copier's own count: calls over the time it ran (settle and window inside it)
        finished, lasted_s = variant[0].copier.stop()
        return {"seconds": window, "gbps": finished * variant[1] / lasted_s / 1e9, **power.window(t0, t1, b.dev)}, False
    done = sum(1 for ev in marks if 0 < start.elapsed_time(ev) / 1e3 <= window)
    # every rank must issue as many collectives: they agree on the largest shortfall of any rank
    dry = False
    if variant is not None:
        needed, lasted = released.elapsed_time(end), released.elapsed_time(marks[-1])
        worst = b.max_over_ranks(needed / max(lasted, 1e-3) if lasted < needed else 0.0)
        if worst > 0:  # enough calls to outlast the settle and the window, with a margin
            dry = True
            # (at most 4x per try: traffic that cannot overlap the load, e.g. queued behind it, never lasts)
            b.calls_per_window[name] = int(calls * min(1.3 * worst, 4.0)) + 1
    delivered = done * variant[1] / window / 1e9 if variant is not None else 0.0
    return {"seconds": window, "gbps": delivered, **power.window(t0, t1, b.dev)}, dry


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hoccl-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("sweep", "contention", "launch"))
    p.add_argument("--out", default=os.environ.get("OUT", "results"), help="folder for <command>.json")
    p.add_argument("--sizes", default="2MiB:1GiB", help="LOW:HIGH, powers of two between (default 2MiB:1GiB)")
    p.add_argument("--collectives", default=",".join(OPS))
    p.add_argument("--baselines",
                   default="hoccl,hoccl-graph,hoccl-inplace,hoccl-peer,hoccl-window,raw,nccl,nccl-ctas=1,2,4,8,nccl-ce")
    p.add_argument("--iters", type=int, default=0,
                   help="sweep: calls per timed batch (default: about 1 GiB per batch, 10 to 512 calls)")
    p.add_argument("--sm-size", type=int, default=64 << 20, help="size at which SMs are counted by trace")
    p.add_argument("--size", type=int, default=256 << 20, help="contention: AllGather bytes per call")
    p.add_argument("--rates", default="100,200,300", help="contention: paced rates in GB/s")
    p.add_argument("--period-us", default="", help="contention: also pace every rate with these clock ticks (us; "
                   "the default tick is 250 us): e.g. 4000 for longer idle gaps between larger pieces")
    p.add_argument("--in-place", action="store_true",
                   help="contention: also hoccl-inplace and raw-inplace (input = the output's own block: no "
                   "same-GPU copy), at full rate and at each rate")
    p.add_argument("--controls", action="store_true",
                   help="contention: also ticks@R (the pacing clock stream and its waits, no copies) and "
                   "raw-inplace-host@R (in-place copies in the same pieces, issued at the rate by a sleeping host "
                   "thread: no clock): what pacing costs the load apart from the bytes it moves")
    p.add_argument("--peer", action="store_true",
                   help="contention: also hoccl-peer and hoccl-peer@R: out-of-place AllGathers whose own block goes "
                   "through the peer GPU (local_copies=\"peer\"; no SM)")
    p.add_argument("--pace-feedback", action="store_true",
                   help="contention: paced calls (HOCCL's and raw) learn their sleeps (HOCCL_PACE_FEEDBACK=1)")
    p.add_argument("--copier-process", action="store_true",
                   help="contention: also raw-proc, raw-proc@R: the raw copies issued from a process of its own "
                   "(another CUDA context; measured 2026-11-30: far worse for the load, +15..25%% GEMM at 55 GB/s)")
    p.add_argument("--loads", default="gemm,membound", help="contention: loads to run beside (gemm, membound)")
    p.add_argument("--traffic-first", action="store_true",
                   help="contention: enqueue the traffic before the load (as a step issues a background collective "
                   "before the compute it overlaps) instead of the load first, held until both are enqueued")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--warmup-s", type=float, default=2.0, help="contention: seconds of load before the rounds")
    p.add_argument("--reps", type=int, default=15, help="launch: batches per point")
    p.add_argument("--gemm-iters", type=int, default=60, help="contention: GEMMs per timed window (~100 ms)")
    p.add_argument("--mem-iters", type=int, default=200, help="contention: memory-bound adds per timed window")
    p.add_argument("--settle-iters", type=int, default=None,
                   help="contention: untimed iterations before each window, traffic running (default: as many)")
    args = p.parse_args(argv)
    _baselines(args.baselines), _sizes(args.sizes), _loads(args.loads)  # refuse bad arguments before starting anything
    if args.iters < 0:
        raise SystemExit(f"hoccl-bench: --iters {args.iters}: give a positive number of calls (or 0: by size)")
    b = Bench(what=f"hoccl-bench {args.command}")
    t0 = time.time()
    try:
        {"sweep": sweep, "contention": contention, "launch": launch}[args.command](b, args)
    finally:
        b.say(f"hoccl-bench {args.command}: {time.time() - t0:.0f} s")
        b.close()
        b.dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
