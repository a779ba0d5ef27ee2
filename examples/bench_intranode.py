"""Intra-node benchmark, one process driving 2 GPUs: HOCCL vs raw copy-engine copies in the same run.

    python examples/bench_intranode.py [--sizes 2MiB:1GiB] [--out DIR]

Checks every variant once per size on fresh random data (outputs poisoned), then times it with CUDA
events (median of repeats), measures host time per call, looks for kernels in a torch.profiler
trace, and tries CUDA graph capture. Prints a table last; writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cupy as cp  # noqa: E402

import hoccl_runtime as hr  # noqa: E402
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, parse_size  # noqa: E402
from hoccl_compiler.collective import layout  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402

G = 2


def plan_for(spec, chunk=1 << 30):
    return compile_plan(make_topology("h200x2", nodes=1), spec, CompileOptions(chunk_bytes=chunk, baselines=False))


class Setup:
    """Buffers (random inputs, poisoned outputs) and user streams for one plan."""

    def __init__(self, plan, rng):
        self.plan = plan
        self.lay = layout(plan.collective, G)
        self.streams = {}
        self.inputs, self.outputs, self.host_in = {}, {}, {}
        for r in range(G):
            with cp.cuda.Device(r):
                self.streams[r] = cp.cuda.Stream(non_blocking=True)
                self.host_in[r] = rng.integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
                self.inputs[r] = cp.asarray(self.host_in[r])
                self.outputs[r] = cp.full(plan.ranks.output_bytes[r], 0xA5, dtype=cp.uint8)
        self.bufs = {r: (self.inputs[r], self.outputs[r]) for r in range(G)}
        sync_all()  # uploads and poison run on the legacy stream, which our non-blocking streams do not wait for

    def check(self) -> bool:
        for r in range(G):
            got = cp.asnumpy(self.outputs[r])
            lay = self.lay
            for i in np.nonzero(lay.dst == r)[0]:
                want = self.host_in[lay.src[i]][lay.src_offset[i]:lay.src_offset[i] + lay.bytes[i]]
                if not np.array_equal(got[lay.dst_offset[i]:lay.dst_offset[i] + lay.bytes[i]], want):
                    return False
        return True


def sync_all():
    for r in range(G):
        cp.cuda.Device(r).synchronize()


def time_call(fn, streams, iters, reps=5):
    """Median seconds per call (CUDA events spanning both ranks' streams) and median host us per call."""
    s0, s1 = streams[0], streams[1]
    fn()
    sync_all()
    gpu, host = [], []
    for _ in range(reps):
        with cp.cuda.Device(0):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(s0)
        with cp.cuda.Device(1):
            s1.wait_event(start)
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        host.append((time.perf_counter() - t0) / iters * 1e6)
        with cp.cuda.Device(1):
            mid = cp.cuda.Event()
            mid.record(s1)
        with cp.cuda.Device(0):
            s0.wait_event(mid)
            end.record(s0)
        end.synchronize()
        gpu.append(cp.cuda.get_elapsed_time(start, end) / 1e3 / iters)
    return statistics.median(gpu), statistics.median(host)


def raw_copies(pairs, streams):
    """pairs: list of (src_dev, src_ptr, dst_dev, dst_ptr, nbytes); one cudaMemcpyPeerAsync each on the src stream."""
    rt = cp.cuda.runtime

    def fn():
        for sd, sp, dd, dp, n in pairs:
            rt.setDevice(sd)
            rt.memcpyPeerAsync(dp, dd, sp, sd, n, streams[sd].ptr)
    return fn


def profile_kernels(plan) -> dict:
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return {"skipped": "torch missing"}
    ins = [torch.randint(0, 255, (plan.ranks.input_bytes[r],), dtype=torch.uint8, device=f"cuda:{r}") for r in range(G)]
    outs = [torch.empty(plan.ranks.output_bytes[r], dtype=torch.uint8, device=f"cuda:{r}") for r in range(G)]
    streams = [torch.cuda.Stream(device=r) for r in range(G)]
    bufs = {r: (ins[r], outs[r]) for r in range(G)}
    hr.execute(plan, bufs, {r: streams[r] for r in range(G)})
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            hr.execute(plan, bufs, {r: streams[r] for r in range(G)})
        for r in range(G):
            streams[r].synchronize()
    kernels, memcpys = [], 0
    for ev in prof.events():
        if ev.device_type.name != "CUDA":
            continue
        name = ev.name.lower()
        if "memcpy" in name or "memset" in name:
            memcpys += 1
        else:
            kernels.append(ev.name)
    return {"kernels": sorted(set(kernels)), "kernel_count": len(kernels), "memcpy_count": memcpys}


def host_profile(plan, rng) -> list[str]:
    """cProfile of 300 calls: where the host time of a call goes."""
    import cProfile
    import io
    import pstats

    setup = Setup(plan, rng)
    for _ in range(10):
        hr.execute(plan, setup.bufs, setup.streams)
    sync_all()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        hr.execute(plan, setup.bufs, setup.streams)
    prof.disable()
    sync_all()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(12)
    return [line for line in text.getvalue().splitlines() if line.strip()][:30]


def graph_capture(plan, sync, rng) -> dict:
    """Capture one execute into a CUDA graph (rank 0's stream originates; rank 1's stream joins), replay 10x."""
    setup = Setup(plan, rng)
    s0, s1 = setup.streams[0], setup.streams[1]
    try:
        hr.execute(plan, setup.bufs, setup.streams, sync=sync)  # warm: create streams, flags, peer access
        sync_all()
        with cp.cuda.Device(0):
            s0.begin_capture()
            fork = cp.cuda.Event(disable_timing=True)
            fork.record(s0)
        with cp.cuda.Device(1):
            s1.wait_event(fork)
        hr.execute(plan, setup.bufs, setup.streams, sync=sync)
        with cp.cuda.Device(1):
            join = cp.cuda.Event(disable_timing=True)
            join.record(s1)
        with cp.cuda.Device(0):
            s0.wait_event(join)
            graph = s0.end_capture()
        ok = True
        for _ in range(10):
            for r in range(G):
                with cp.cuda.Device(r):
                    setup.outputs[r].fill(0xA5)
                    setup.host_in[r] = rng.integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
                    setup.inputs[r].set(setup.host_in[r])
            sync_all()
            with cp.cuda.Device(0):
                graph.launch(s0)
                s0.synchronize()
            sync_all()
            ok &= setup.check()
        return {"captured": True, "replays_correct": bool(ok)}
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        try:
            with cp.cuda.Device(0):
                s0.end_capture()
        except Exception:  # noqa: BLE001
            pass
        return {"captured": False, "error": f"{type(exc).__name__}: {exc}"[:300]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="2MiB:1GiB")
    p.add_argument("--step", type=int, default=4, help="size multiplier between points")
    p.add_argument("--out", default=os.environ.get("OUT", "results"))
    p.add_argument("--quick", action="store_true", help="allgather only, one size (for env-variable runs)")
    args = p.parse_args(argv)
    lo, hi = (parse_size(x) for x in args.sizes.split(":"))
    sizes = []
    s = lo
    while s <= hi:
        sizes.append(s)
        s *= args.step
    if sizes[-1] != hi:
        sizes.append(hi)
    if args.quick:
        sizes = [256 << 20]
    rng = np.random.default_rng()
    rows, checks = [], {}
    for size in sizes:
        iters = max(3, min(50, (2 << 30) // size))
        variants = {
            "sendrecv": plan_for(CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),))),
            "allgather": plan_for(CollectiveSpec(kind="allgather", size_bytes=size)),
            "alltoall": plan_for(CollectiveSpec(kind="alltoall", size_bytes=size)),
        }
        if args.quick:
            variants = {"allgather": variants["allgather"]}
        for name, plan in variants.items():
            for sync in ("flags", "events"):
                setup = Setup(plan, rng)
                hr.execute(plan, setup.bufs, setup.streams, sync=sync)
                sync_all()
                ok = setup.check()
                checks[f"{name}/{sync}/{size}"] = ok
                t, host = time_call(lambda p=plan, st=setup, sy=sync: hr.execute(p, st.bufs, st.streams, sync=sy),
                                    setup.streams, iters)
                rows.append(dict(op=name, impl=f"hoccl-{sync}", size=size, seconds=t, gbps=size / t / 1e9,
                                 host_us=host, correct=ok))
            del setup
        # raw copy-engine baselines on the same buffers' devices
        with cp.cuda.Device(0):
            a = cp.empty(size, cp.uint8)
            s0 = cp.cuda.Stream(non_blocking=True)
        with cp.cuda.Device(1):
            b = cp.empty(size, cp.uint8)
            s1 = cp.cuda.Stream(non_blocking=True)
        streams = {0: s0, 1: s1}
        half = size // 2
        t, host = time_call(raw_copies([(0, a.data.ptr, 1, b.data.ptr, size)], streams), streams, iters)
        rows.append(dict(op="sendrecv", impl="raw-memcpyPeer", size=size, seconds=t, gbps=size / t / 1e9,
                         host_us=host, correct=None))
        both = [(0, a.data.ptr, 1, b.data.ptr + half, half), (1, b.data.ptr, 0, a.data.ptr + half, half)]
        t, host = time_call(raw_copies(both, streams), streams, iters)
        for op in ("allgather", "alltoall"):
            rows.append(dict(op=op, impl="raw-bidir-memcpyPeer", size=size, seconds=t, gbps=size / t / 1e9,
                             host_us=host, correct=None))
        del a, b
        print(f"size {size >> 20} MiB done", flush=True)
    extra = {}
    if not args.quick:
        extra["host_profile"] = host_profile(plan_for(CollectiveSpec(kind="allgather", size_bytes=2 << 20)), rng)
        ag64 = plan_for(CollectiveSpec(kind="allgather", size_bytes=64 << 20))
        extra["profile_allgather_64MiB"] = profile_kernels(ag64)
        extra["graph_capture"] = graph_capture(plan_for(CollectiveSpec(kind="allgather", size_bytes=8 << 20)),
                                               "flags", rng)
    env = {k: os.environ.get(k) for k in ("CUDA_DEVICE_MAX_CONNECTIONS",)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = ("quick" if args.quick else "full") + ("-maxconn1" if os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") == "1"
                                                 else "")
    (out / f"intranode-{tag}.json").write_text(json.dumps(dict(
        date=time.strftime("%Y-%m-%d %H:%M"), gpu=cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        driver=cp.cuda.runtime.driverGetVersion(), env=env, rows=rows, checks=checks, extra=extra), indent=1))
    print(json.dumps(extra, indent=1))
    print(f"env {env}; all checks passed: {all(checks.values())}")
    print(f"{'op':10} {'impl':22} {'size':>9} {'GB/s':>8} {'host us':>8} ok")
    for r in rows:
        print(f"{r['op']:10} {r['impl']:22} {r['size'] >> 20:>6} MiB {r['gbps']:8.1f} {r['host_us']:8.1f} "
              f"{'' if r['correct'] is None else r['correct']}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
