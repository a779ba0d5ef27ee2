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

    from hoccl_runtime import _cuda, init
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
        micro["streamIsCapturing"] = per_call_us(lambda: rt.streamIsCapturing(s.ptr))
        micro["getDevice"] = per_call_us(rt.getDevice)
        from hoccl_runtime.interop import as_buffer, as_stream

        tensor, tstream = torch.empty(1024, device=f"cuda:{rank}"), torch.cuda.Stream()
        micro["as_buffer (torch tensor)"] = per_call_us(lambda: as_buffer(tensor))
        micro["as_stream (torch stream)"] = per_call_us(lambda: as_stream(tstream))
        s.synchronize()
        cap = cp.cuda.Stream(non_blocking=True)
        rt.streamBeginCapture(cap.ptr, 1)
        ops.enqueue(cap.ptr)
        rt.memcpyAsync(other.data.ptr, buf.data.ptr, 4, 3, cap.ptr)
        ops.enqueue(cap.ptr)
        graph = rt.streamEndCapture(cap.ptr)
        exe = rt.graphInstantiate(graph)
        micro["graphLaunch (memops, copy, memops)"] = per_call_us(lambda: rt.graphLaunch(exe, s.ptr))
        s.synchronize()
        # the same graph launched 40 times while the stream waits on a host flag (launches pile up, as in
        # the held measurement below), and 40 memcpyAsync the same way
        hold = pool.allocate()
        for name, fn in (("graphLaunch (memops, copy, memops) x40 held", lambda: rt.graphLaunch(exe, s.ptr)),
                         ("memcpyAsync 4 B x40 held", lambda: rt.memcpyAsync(other.data.ptr, buf.data.ptr, 4, 3,
                                                                             s.ptr))):
            hold.write(0)
            MemOps().wait_eq(hold, 1).enqueue(s.ptr)
            t0 = time.perf_counter()
            for _ in range(40):
                fn()
            micro[name] = (time.perf_counter() - t0) / 40 * 1e6
            hold.write(1)
            s.synchronize()
        sig = pool.allocate()
        one = cp.ones(1, cp.int32)
        wait = MemOps().wait_eq(f, 0)
        write = MemOps().write(sig, 0)

        def data(c):
            rt.memcpyAsync(other.data.ptr, buf.data.ptr, 4, 3, c)

        def signal(c):  # a flag set by a 4-byte copy from GPU memory (a copy engine) instead of a stream write
            rt.memcpyAsync(sig.address, one.data.ptr, 4, 4, c)

        for name, body in (("copy", data), ("memops", lambda c: ops.enqueue(c)),
                           ("2 copies", lambda c: [rt.memcpyAsync(other.data.ptr + 64 * i, buf.data.ptr, 4, 3, c)
                                                   for i in range(2)]),
                           ("wait, copy", lambda c: (wait.enqueue(c), data(c))),
                           ("wait, copy, write", lambda c: (wait.enqueue(c), data(c), write.enqueue(c))),
                           ("wait, copy, signal copy", lambda c: (wait.enqueue(c), data(c), signal(c))),
                           ("copy, signal copy", lambda c: (data(c), signal(c)))):
            s.synchronize()
            rt.streamBeginCapture(cap.ptr, 1)
            body(cap.ptr)
            g = rt.streamEndCapture(cap.ptr)
            e = rt.graphInstantiate(g)
            micro[f"graphLaunch ({name})"] = per_call_us(lambda e=e: rt.graphLaunch(e, s.ptr))
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
    held = held_host_times(comm, calls, rank, s, dist, torch, (buf, ag_out, a2a_out))
    texts = []
    for name in ("sendrecv", "allgather"):
        dist.barrier()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            calls[name]()
        prof.disable()
        s.synchronize()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(14)
        texts.append(f"cProfile, 300 x {name}:\n" + "\n".join(
            line for line in text.getvalue().splitlines()[:40] if line.strip()))
    time.sleep(0.2 * rank)
    print(f"--- rank {rank}: micro costs (us per call) {micro}")
    print(f"--- rank {rank}: (host us per call, GB/s) at 2 MiB (200 back to back, median of 7; GPU-bound when "
          f"the host us equal the GPU's time per call): {host}")
    print(f"--- rank {rank}: host us per call with the stream held (median of {HELD_CALLS} x {HELD_REPS}):")
    for (impl, name), us in held.items():
        print(f"    {impl:17} {name:16} {us:6.1f}")
    print("\n".join(texts), flush=True)
    dist.barrier()
    comm.close()
    dist.destroy_process_group()
    return 0


HELD_CALLS, HELD_REPS = 40, 5


def held_host_times(comm, calls, rank, s, dist, torch, cupy_buffers):
    """Host us per call while the GPU cannot run ahead: each rank's stream waits on a host flag while
    HELD_CALLS calls are enqueued (no launch queue fills, no GPU time is counted), then the flag is
    set. Per call timed alone, median over every call of every repeat: what a call costs the host, the
    rendezvous with the partner included. Beside it the same calls with torch tensors, and NCCL's."""
    import cupy as cp

    from hoccl_runtime.flags import FlagPool, MemOps

    pool = FlagPool(2)
    go = pool.allocate()
    ts = torch.cuda.Stream()
    t_in = torch.randint(0, 256, (2 << 20,), dtype=torch.uint8, device="cuda")
    t_ag, t_a2a = torch.empty(4 << 20, dtype=torch.uint8, device="cuda"), torch.empty(2 << 20, dtype=torch.uint8,
                                                                                      device="cuda")
    peer = 1 - rank
    impls = {
        # CuPy arrays, each graph's trailing memop batch captured inside it (the default) or launched after it
        "hoccl-tailin": (s.ptr, calls),
        "hoccl-taildirect": (s.ptr, calls),
        "hoccl-torch": (ts.cuda_stream, {
            "sendrecv": lambda: comm.send(t_in, 1, stream=ts) if rank == 0 else comm.recv(t_in, 0, stream=ts),
            "allgather": lambda: comm.all_gather_into_tensor(t_ag, t_in, stream=ts),
            "alltoall": lambda: comm.all_to_all_single(t_a2a, t_in, stream=ts)}),
        # the same, each buffer a registered window: no per-call address exchange, no wait for the partner
        "hoccl-window": (ts.cuda_stream, {
            "sendrecv": lambda: comm.send(t_in, 1, stream=ts) if rank == 0 else comm.recv(t_in, 0, stream=ts),
            "allgather": lambda: comm.all_gather_into_tensor(t_ag, t_in, stream=ts),
            "alltoall": lambda: comm.all_to_all_single(t_a2a, t_in, stream=ts)}),
        "hoccl-window-cupy": (s.ptr, calls),  # the CuPy calls, their buffers registered as windows
        "nccl": (ts.cuda_stream, {
            "sendrecv": lambda: dist.send(t_in, peer) if rank == 0 else dist.recv(t_in, peer),
            "allgather": lambda: dist.all_gather_into_tensor(t_ag, t_in),
            "alltoall": lambda: dist.all_to_all_single(t_a2a, t_in)}),
    }
    out = {}
    for impl, (stream, fns) in impls.items():
        if comm.graph_tail_direct != (impl == "hoccl-taildirect"):
            cp.cuda.runtime.deviceSynchronize()
            comm._launches.clear()  # graphs are captured again, with or without their trailing batch
            comm.graph_tail_direct = impl == "hoccl-taildirect"
        windows = [comm.register_window(t) for t in {"hoccl-window": (t_in, t_ag, t_a2a),
                                                     "hoccl-window-cupy": cupy_buffers}.get(impl, ())]
        for name, fn in fns.items():
            with torch.cuda.stream(ts):
                fn()
                fn()
            torch.cuda.synchronize()
            samples = []
            for _ in range(HELD_REPS):
                dist.barrier()  # before the hold: NCCL's barrier must not queue behind it
                go.write(0)
                MemOps().wait_eq(go, 1).enqueue(stream)
                with torch.cuda.stream(ts):
                    for _ in range(HELD_CALLS):
                        t0 = time.perf_counter()
                        fn()
                        samples.append((time.perf_counter() - t0) * 1e6)
                go.write(1)
                cp.cuda.runtime.deviceSynchronize()
            out[(impl, name)] = statistics.median(samples)
            if impl.startswith("hoccl-window") and name == "allgather":  # where a window call's host time goes
                for part, us in _split(comm, fn, go, stream, dist).items():
                    out[("split" + impl[len("hoccl-window"):], part)] = us
        for w in windows:
            w.close()
    pool.close()
    return out


def _split(comm, fn, go, stream, dist):
    """Median host us per held call spent in each part of a window call: the whole call, the buffer and
    stream conversions, the mailbox entries and checks, and the cached launch (comm._cached: the graph
    launch and the end event). The wrappers cost time too (about 1 us each on the H200 hosts): compare the
    parts with each other, and the whole call with the unwrapped one."""
    import cupy as cp

    from hoccl_runtime import comm as comm_module
    from hoccl_runtime.flags import MemOps

    spent: dict[str, list[float]] = {}

    def timer(name, real):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                spent.setdefault(name, []).append((time.perf_counter() - t0) * 1e6)
        return timed

    patched = {"as_buffer": comm_module.as_buffer, "as_stream": comm_module.as_stream}
    for name, real in patched.items():
        setattr(comm_module, name, timer(name, real))
    for name in ("_cached", "_window_entries", "_window_call", "_check_windows", "_wait"):
        setattr(comm, name, timer(name, getattr(comm, name)))
    call = timer("whole call", fn)
    try:
        dist.barrier()
        go.write(0)
        MemOps().wait_eq(go, 1).enqueue(stream)
        for _ in range(HELD_CALLS):
            call()
        go.write(1)
        cp.cuda.runtime.deviceSynchronize()
    finally:
        for name, real in patched.items():
            setattr(comm_module, name, real)
        for name in ("_cached", "_window_entries", "_window_call", "_check_windows", "_wait"):
            delattr(comm, name)
    per_call = len(spent["whole call"])
    return {name: sum(v) / per_call for name, v in spent.items()}  # mean us per call of each part


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
