"""Which copies need SMs? (run on a GPU machine: ``python examples/sm_free_copies.py``)

A spinner kernel holds every SM (``hoccl_bench.smfree.SmProbe``: 2 blocks of 1024 threads per SM,
each spinning on %globaltimer for ``--spin-ms``); each copy variant is issued on another stream just after
it. A copy that a copy engine moves finishes long before the spinner ends; a copy that the driver does
with a kernel of its own waits until SMs come free. CUDA traces show both as a "memcpy", so a profiler
trace alone cannot say.

Then a bf16 8192^3 GEMM loop is timed alone and beside each variant copying in a loop (the slowdown and the
bytes copied per second beside it). Variants: the same-GPU copy with cudaMemcpyAsync and with
cuMemcpyBatchAsync (flags 0 and CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE, the hint NCCL's copy-engine
collectives set so that "intra-device copies offload to the CE" on CUDA 13.1+; also with location hints and
any source access order), cudaMemcpy2DAsync (rows, and a pitched destination), cudaMemcpyPeerAsync from
the GPU to itself, each also captured in a CUDA graph, and, with two GPUs, the copy to the peer GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="bytes per copy, MiB")
    ap.add_argument("--spin-ms", type=float, default=100.0)
    ap.add_argument("--rounds", type=int, default=7, help="GEMM windows per variant (median)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    import ctypes

    import cupy
    import torch

    from hoccl_bench.smfree import SmProbe


    rt = cupy.cuda.runtime
    ngpu = rt.getDeviceCount()
    cupy.cuda.Device(0).use()
    torch.cuda.set_device(0)
    nbytes = args.mib << 20
    src = cupy.empty(nbytes, dtype=cupy.uint8)
    dst = cupy.empty(nbytes, dtype=cupy.uint8)
    src[:] = cupy.random.randint(0, 256, nbytes, dtype=cupy.uint8)
    peer = None
    if ngpu > 1:
        with cupy.cuda.Device(1):
            peer = cupy.empty(nbytes, dtype=cupy.uint8)
        if rt.deviceCanAccessPeer(0, 1):
            rt.deviceEnablePeerAccess(1)
    lib = ctypes.CDLL("libcuda.so.1")
    batch = lib.cuMemcpyBatchAsync_v2
    batch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                              ctypes.c_void_p]
    batch.restype = ctypes.c_int

    def batch_copy(d: int, s: int, n: int, flags: int, order: int = 1, hint: int | None = None):
        dsts, srcs = (ctypes.c_uint64 * 1)(d), (ctypes.c_uint64 * 1)(s)
        sizes = (ctypes.c_size_t * 1)(n)
        loc = (0, 0) if hint is None else (1, hint)  # CUmemLocation: (CU_MEM_LOCATION_TYPE_DEVICE, ordinal)
        attrs = (ctypes.c_int * 6)(order, *loc, *loc, flags)  # srcAccessOrder, src and dst hints, flags
        idxs = (ctypes.c_size_t * 1)(0)

        def fn(stream: int) -> None:
            err = batch(dsts, srcs, sizes, 1, attrs, idxs, 1, stream)
            if err:
                raise RuntimeError(f"cuMemcpyBatchAsync: CUresult {err}")
        return fn

    def memcpy(d: int, s: int, n: int):
        return lambda stream: rt.memcpyAsync(d, s, n, 4, stream)

    def memcpy2d(d: int, s: int, n: int, width: int, dpitch: int):
        # n bytes as rows of `width` bytes; the destination's rows `dpitch` apart (pitch > width: not one run)
        return lambda stream: rt.memcpy2DAsync(d, dpitch, s, width, width, n // width, 3, stream)

    def graphed(fn):
        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            s.begin_capture()
            fn(s.ptr)
            g = s.end_capture()
        return lambda stream: g.launch(cupy.cuda.ExternalStream(stream))

    row = 1 << 20
    pitched = cupy.empty(nbytes // row * (row + 4096), dtype=cupy.uint8)
    variants = {
        "local memcpyAsync": memcpy(dst.data.ptr, src.data.ptr, nbytes),
        "local batch flags=0": batch_copy(dst.data.ptr, src.data.ptr, nbytes, 0),
        "local batch prefer-overlap": batch_copy(dst.data.ptr, src.data.ptr, nbytes, 1),
        "local batch prefer+hints+any": batch_copy(dst.data.ptr, src.data.ptr, nbytes, 1, order=3, hint=0),
        "local memcpy2DAsync rows": memcpy2d(dst.data.ptr, src.data.ptr, nbytes, row, row),
        "local memcpy2DAsync pitched": memcpy2d(pitched.data.ptr, src.data.ptr, nbytes, row, row + 4096),
        "local memcpyPeerAsync 0->0": lambda stream: rt.memcpyPeerAsync(dst.data.ptr, 0, src.data.ptr, 0, nbytes,
                                                                         stream),
    }
    for name in list(variants):
        try:
            variants[f"{name} (graph)"] = graphed(variants[name])
        except Exception as exc:  # noqa: BLE001 - reported
            print(f"{name} (graph): cannot capture ({type(exc).__name__}: {exc})")
    if peer is not None:
        variants["peer memcpyAsync"] = memcpy(peer.data.ptr, src.data.ptr, nbytes)
        variants["peer batch prefer-overlap"] = batch_copy(peer.data.ptr, src.data.ptr, nbytes, 1)
        variants["peer memcpyAsync (graph)"] = graphed(variants["peer memcpyAsync"])

    probe = SmProbe(0, hold_ms=args.spin_ms)
    side = cupy.cuda.Stream(non_blocking=True)
    results = {"driver": rt.driverGetVersion(), "bytes": nbytes, "spin_ms": args.spin_ms, "variants": {}}

    def alone_ms(fn) -> float:
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        times = []
        for _ in range(5):
            start.record(side)
            fn(side.ptr)
            end.record(side)
            end.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, end))
        return statistics.median(times)

    for name, fn in variants.items():
        fn(side.ptr)  # warm, and check it works
        side.synchronize()
        if name.endswith("pitched"):
            rows = pitched.reshape(-1, row + 4096)[:, :row].reshape(-1)
            assert bool((rows == src).all()), name
        elif name.startswith("local"):
            assert bool((dst == src).all()), name
            dst.fill(0)
        took = alone_ms(fn)
        end_ms, spin_ms = probe.run(lambda fn=fn: fn(side.ptr), side.ptr)
        verdict = "copy engine" if probe.free(end_ms, spin_ms) else "NEEDS SMs"
        results["variants"][name] = {"alone_ms": took, "gbps_alone": nbytes / took / 1e6,
                                     "done_at_ms": end_ms, "spinner_ms": spin_ms, "verdict": verdict}
        print(f"{name:34} alone {nbytes / took / 1e6:7.1f} GB/s; beside the spinner done at {end_ms:6.1f} ms "
              f"(spinner {spin_ms:6.1f}): {verdict}", flush=True)

    # the GEMM beside each variant copying back to back
    a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    c = torch.empty_like(a)
    comp = torch.cuda.Stream()
    for _ in range(20):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()

    def window(fn) -> tuple[float, float]:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cs, ce = cupy.cuda.Event(), cupy.cuda.Event()
        copies = 0
        if fn is not None:
            cs.record(side)
            for _ in range(int(120e-3 * 4e12 / nbytes) + 1):  # enough to outlast the window at 4 TB/s
                fn(side.ptr)
                copies += 1
            ce.record(side)
        with torch.cuda.stream(comp):
            start.record(comp)
            for _ in range(40):
                torch.matmul(a, b, out=c)
            end.record(comp)
        torch.cuda.synchronize()
        gbps = copies * nbytes / cupy.cuda.get_elapsed_time(cs, ce) / 1e6 if fn is not None else 0.0
        return start.elapsed_time(end), gbps

    rows = []
    names = ["alone", *variants]
    times: dict[str, list[float]] = {n: [] for n in names}
    rates: dict[str, list[float]] = {n: [] for n in names}
    for rnd in range(args.rounds):
        k = rnd % len(names)
        for name in names[k:] + names[:k]:
            ms, gbps = window(variants.get(name))
            times[name].append(ms)
            rates[name].append(gbps)
    base = statistics.median(times["alone"])
    print(f"\nGEMM (40 x 8192^3 bf16) alone {base:.1f} ms; beside copies of {args.mib} MiB back to back "
          f"(median of {args.rounds}):")
    for name in names:
        paired = statistics.median(t / a for t, a in zip(times[name], times["alone"], strict=True))
        rows.append({"variant": name, "gemm_ms": statistics.median(times[name]), "paired": paired,
                     "copy_gbps": statistics.median(rates[name])})
        verdict = results["variants"].get(name, {}).get("verdict", "")
        print(f"  {name:34} {100 * (paired - 1):+6.1f}%  copies {statistics.median(rates[name]):7.1f} GB/s  {verdict}")
    results["gemm"] = rows
    with open(os.path.join(args.out, "sm_free_copies.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
