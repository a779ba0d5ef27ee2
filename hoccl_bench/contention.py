"""``hoccl-bench contention``: a GEMM and a memory-bound loop timed alone and beside each communicator's traffic, in
interleaved rounds, with power and clocks sampled (hoccl_bench.bench has the whole description)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from .common import Bench, PowerLog, _loads, ipc_export, raw_call, raw_plan


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
            wrong = check() if check is not None else 0
            if wrong:
                raise RuntimeError(f"wrong result: {wrong} output bytes differ from NCCL's")
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
        wrong = check()
        if wrong:
            raise RuntimeError(f"hoccl-peer: wrong result: {wrong} output bytes differ from NCCL's")
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


