"""Where the host time of a communicator call goes (torchrun, 2 ranks): micro costs, then cProfile.

    torchrun --nproc_per_node 2 examples/profile_host.py
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call_us(fn, n=2000):
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def main() -> int:
    import cupy as cp
    import torch
    import torch.distributed as dist

    from hoccl_runtime import _cuda
    from hoccl_runtime.comm import init
    from hoccl_runtime.flags import FlagPool, MemOps

    rank = int(os.environ["RANK"])
    cp.cuda.Device(rank).use()
    dist.init_process_group("nccl", device_id=torch.device(f"cuda:{rank}"))
    comm = init(timeout_s=20)
    s = cp.cuda.Stream(non_blocking=True)
    buf = cp.empty(2 << 20, cp.uint8)
    rt, cu = cp.cuda.runtime, _cuda.driver()
    micro = {}
    if rank == 0:
        other = cp.empty(2 << 20, cp.uint8)
        micro["memcpyAsync 4 B"] = per_call_us(lambda: rt.memcpyAsync(other.data.ptr, buf.data.ptr, 4, 4, s.ptr))
        s.synchronize()
        micro["memcpyAsync 4 B D2D kind"] = per_call_us(lambda: rt.memcpyAsync(other.data.ptr, buf.data.ptr, 4, 3,
                                                                               s.ptr))
        s.synchronize()
        import ctypes

        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuMemcpyAsync
        fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
        micro["cuMemcpyAsync ctypes"] = per_call_us(lambda: fn(other.data.ptr, buf.data.ptr, 4, s.ptr))
        fn2 = lib.cuMemcpyDtoDAsync_v2
        fn2.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
        s.synchronize()
        micro["cuMemcpyDtoDAsync ctypes"] = per_call_us(lambda: fn2(other.data.ptr, buf.data.ptr, 4, s.ptr))
        s.synchronize()
        pool = FlagPool(4)
        f = pool.allocate()
        ops = MemOps().write(f, 1).write(f, 0)
        try:  # one driver call for two copies: cuMemcpyBatchAsync (CUDA 12.8+; _v2 is CUDA 13's signature)
            batch = lib.cuMemcpyBatchAsync_v2
            u64x2 = ctypes.c_uint64 * 2
            dsts = u64x2(other.data.ptr, other.data.ptr + 64)
            srcs = u64x2(buf.data.ptr, buf.data.ptr + 64)
            sizes = (ctypes.c_size_t * 2)(4, 4)
            attrs = (ctypes.c_int * 6)(1, 0, 0, 0, 0, 0)  # srcAccessOrder STREAM, no location hints, flags 0
            idxs = (ctypes.c_size_t * 1)(0)
            batch.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p,
                                                      ctypes.c_size_t, ctypes.c_void_p]
            err = batch(dsts, srcs, sizes, 2, attrs, idxs, 1, s.ptr)
            if err:
                raise RuntimeError(f"CUresult {err}")
            micro["cuMemcpyBatchAsync x2 (ctypes)"] = per_call_us(lambda: batch(dsts, srcs, sizes, 2, attrs, idxs, 1,
                                                                               s.ptr))
        except (AttributeError, RuntimeError) as exc:
            micro["cuMemcpyBatchAsync x2 (ctypes)"] = f"unavailable: {exc}"
        s.synchronize()
        micro["batch memop x2 (ctypes)"] = per_call_us(lambda: ops.enqueue(s.ptr))
        slow = MemOps().write(f, 1).write(f, 0)
        slow._params = (None, _bindings_params(cu, slow.ops))  # force the cuda.bindings path
        micro["batch memop x2 (cuda.bindings)"] = per_call_us(lambda: slow.enqueue(s.ptr))
        micro["ipcGetMemHandle"] = per_call_us(lambda: rt.ipcGetMemHandle(buf.data.ptr), 500)
        micro["cuMemGetAddressRange (bindings)"] = per_call_us(lambda: cu.cuMemGetAddressRange(buf.data.ptr))
        ev = rt.eventCreateWithFlags(2)
        micro["eventRecord"] = per_call_us(lambda: rt.eventRecord(ev, s.ptr))
        s.synchronize()
    ag_out, a2a_out = cp.empty(4 << 20, cp.uint8), cp.empty(2 << 20, cp.uint8)
    calls = {
        "sendrecv": lambda: comm.send(buf, 1, stream=s) if rank == 0 else comm.recv(buf, 0, stream=s),
        "allgather": lambda: comm.all_gather_into_tensor(ag_out, buf, stream=s),
        "alltoall": lambda: comm.all_to_all_single(a2a_out, buf, stream=s),
    }
    host = {}
    for name, fn in calls.items():
        fn()
        s.synchronize()
        reps = []
        for _ in range(7):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            reps.append((time.perf_counter() - t0) / 200 * 1e6)
            s.synchronize()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        dist.barrier()
        start.record(s)
        for _ in range(200):
            fn()
        end.record(s)
        end.synchronize()
        nbytes = {"allgather": 4 << 20}.get(name, 2 << 20)  # nccl-tests' size: AllGather's whole output
        gbps = 200 * nbytes / (cp.cuda.get_elapsed_time(start, end) / 1e3) / 1e9
        host[name] = (round(statistics.median(reps), 1), round(gbps, 1))
    dist.barrier()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        calls["sendrecv"]()
    prof.disable()
    s.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
    time.sleep(0.2 * rank)
    print(f"--- rank {rank}: micro costs (us per call) {micro}")
    print(f"--- rank {rank}: (host us per call, GB/s) at 2 MiB (200 back to back, median of 7): {host}")
    print("\n".join(line for line in text.getvalue().splitlines()[:40] if line.strip()), flush=True)
    dist.barrier()
    comm.close()
    dist.destroy_process_group()
    return 0


def _bindings_params(cu, ops):
    params = []
    for _kind, address, value in ops:
        p = cu.CUstreamBatchMemOpParams()
        p.operation = cu.CUstreamBatchMemOpType.CU_STREAM_MEM_OP_WRITE_VALUE_32
        p.writeValue.address = address
        p.writeValue.value = value
        params.append(p)
    return params


if __name__ == "__main__":
    raise SystemExit(main())
