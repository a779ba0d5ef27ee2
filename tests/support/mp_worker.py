"""Run under torchrun (2+ processes) by tests/gpu/test_gpu_multiprocess.py and by hand:

    torchrun --nproc_per_node 2 tests/support/mp_worker.py OUT.json [--bench] [--own-store]

Checks every communicator call on fresh random data with poisoned outputs, then that a mismatched collective
and a dead peer give clear errors. One GPU per rank where the machine has them; with fewer GPUs than ranks every
rank shares GPU 0 (the 1-GPU machine: the copies between ranks are then same-GPU copies, so the SM-free
check, which needs copy engines between GPUs, is recorded as skipped). Each check runs on every rank; a failing
one does not stop the others (the ranks meet at a barrier after each). Each rank writes OUT.json.rankN:
{check: "ok" | "skipped: why" | what failed}; test_gpu_multiprocess.py asserts every check on every rank.
"""

from __future__ import annotations

import faulthandler
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402


def data(rank: int, call: int, n: int) -> np.ndarray:
    """Inputs every rank can regenerate: seeded by (rank, call)."""
    return np.random.default_rng([rank, call, 7]).integers(0, 256, n, dtype=np.uint8)


class Skip(Exception):  # noqa: N818 - a check that does not apply here
    pass


class W:
    """What every check gets: this rank, the communicator, a stream, and a call counter that every rank
    advances alike (the seed of each call's data)."""

    def __init__(self, cp, torch, dist, comm, rank: int, world: int, dev: int, shared: bool):
        self.cp, self.torch, self.dist, self.comm = cp, torch, dist, comm
        self.rank, self.world, self.dev, self.shared = rank, world, dev, shared
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.call = 0
        self.notes: list[str] = []

    def next(self) -> int:
        self.call += 1
        return self.call

    def check(self, name: str, got, want) -> None:
        got = got if isinstance(got, np.ndarray) else self.cp.asnumpy(got)
        if not np.array_equal(got, want):
            bad = np.flatnonzero(got != want) if got.shape == want.shape else []
            raise AssertionError(f"{name}: wrong bytes (first at {list(bad[:3])}, {len(bad)} in all)")

    def sync(self) -> None:
        self.cp.cuda.Device(self.dev).synchronize()

    def gathered(self, call: int, n: int) -> np.ndarray:
        return np.concatenate([data(r, call, n) for r in range(self.world)])

    def say(self, text: str) -> None:
        print(f"rank {self.rank}: {text}", flush=True)
        self.notes.append(text)


# --- the checks -----------------------------------------------------------------------------------------------
SIZES = (1, 7, 4099, (1 << 20) + 3, 64 << 20)


def check_all_gather(w: W) -> None:
    cp, comm = w.cp, w.comm
    for n in SIZES:
        call = w.next()
        inp, out = cp.asarray(data(w.rank, call, n)), cp.full(n * w.world, 0xA5, cp.uint8)
        w.sync()
        comm.all_gather_into_tensor(out, inp, stream=w.stream)
        w.stream.synchronize()
        w.check(f"allgather {n}", out, w.gathered(call, n))


def check_all_to_all(w: W) -> None:
    cp, comm, me = w.cp, w.comm, w.rank
    for n in SIZES:
        call = w.next()
        inp, out = cp.asarray(data(me, call, n * w.world)), cp.full(n * w.world, 0xA5, cp.uint8)
        w.sync()
        comm.all_to_all_single(out, inp, stream=w.stream)
        w.stream.synchronize()
        w.check(f"alltoall {n}", out, np.concatenate([data(r, call, n * w.world)[me * n:(me + 1) * n]
                                                      for r in range(w.world)]))


def check_broadcast(w: W) -> None:
    cp, comm, root = w.cp, w.comm, w.world - 1
    for n in SIZES:
        call = w.next()
        t = cp.asarray(data(w.rank, call, n)) if w.rank == root else cp.full(n, 0xA5, cp.uint8)
        w.sync()
        comm.broadcast(t, root, stream=w.stream)
        w.stream.synchronize()
        w.check(f"broadcast {n}", t, data(root, call, n))


def check_scatter_gather(w: W) -> None:
    cp, comm, me = w.cp, w.comm, w.rank
    for n in SIZES:
        call = w.next()
        src = cp.asarray(data(0, call, n * w.world)) if me == 0 else None
        out = cp.full(n, 0xA5, cp.uint8)
        w.sync()
        comm.scatter(out, src, root=0, stream=w.stream)
        w.stream.synchronize()
        w.check(f"scatter {n}", out, data(0, call, n * w.world)[me * n:(me + 1) * n])
        call = w.next()
        inp = cp.asarray(data(me, call, n))
        out = cp.full(n * w.world, 0xA5, cp.uint8) if me == 0 else None
        w.sync()
        comm.gather(inp, out, root=0, stream=w.stream)
        w.stream.synchronize()
        if me == 0:
            w.check(f"gather {n}", out, w.gathered(call, n))


def _ring(w: W) -> tuple[int, int]:
    return (w.rank + 1) % w.world, (w.rank - 1) % w.world


def check_send_recv(w: W) -> None:
    cp, comm = w.cp, w.comm
    nxt, prv = _ring(w)
    for n in SIZES:
        call = w.next()
        inp, out = cp.asarray(data(w.rank, call, n)), cp.full(n, 0xA5, cp.uint8)
        w.sync()
        if w.rank % 2 == 0:
            comm.send(inp, nxt, stream=w.stream)
            comm.recv(out, prv, stream=w.stream)
        else:
            comm.recv(out, prv, stream=w.stream)
            comm.send(inp, nxt, stream=w.stream)
        w.stream.synchronize()
        w.check(f"sendrecv {n}", out, data(prv, call, n))


def check_batch_isend_irecv(w: W) -> None:
    """Every rank lists its send first, and nothing deadlocks."""
    cp, comm = w.cp, w.comm
    nxt, prv = _ring(w)
    for n in (5, 3 << 20):
        call = w.next()
        inp, out = cp.asarray(data(w.rank, call, n)), cp.full(n, 0xA5, cp.uint8)
        w.sync()
        comm.batch_isend_irecv([("send", inp, nxt), ("recv", out, prv)], stream=w.stream)
        w.stream.synchronize()
        w.check(f"batch_isend_irecv {n}", out, data(prv, call, n))


def check_pacing(w: W) -> None:
    """A rate cap and a duration give the same bytes; a 32 MiB AllGather spread over 40 ms takes at least most
    of that (the cap never speeds anything up); back-to-back paced calls with pace_feedback keep their rate
    within a factor of 1.5 where each rank has its own GPU (a band of 0.8..1.15 failed 1 run in 6 on 2x H200,
    2026-11-30: 32.5, 38.7, 47.0, 48.3 GB/s for 40); an eager send spread over 5 ms arrives whole."""
    cp, comm = w.cp, w.comm
    n = 32 << 20
    for how in ({"rate_gbps": 50.0}, {"duration_s": 0.04}):
        call = w.next()
        inp, out = cp.asarray(data(w.rank, call, n)), cp.full(n * w.world, 0xA5, cp.uint8)
        w.sync()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(w.stream)
        comm.all_gather_into_tensor(out, inp, stream=w.stream, **how)
        end.record(w.stream)
        end.synchronize()
        w.check(f"paced allgather {how}", out, w.gathered(call, n))
        took_s = cp.cuda.get_elapsed_time(start, end) / 1e3
        floor_s = how.get("duration_s") or n * (w.world - 1) / (how["rate_gbps"] * 1e9)
        assert took_s >= 0.7 * floor_s, f"paced allgather {how} took {took_s * 1e3:.1f} ms, under its " \
                                        f"{floor_s * 1e3:.1f} ms"
    call = w.next()
    comm.pace_feedback = True  # opt-in (HOCCL_PACE_FEEDBACK=1)
    try:
        n, rate, rates = 16 << 20, 40.0, []
        inp, out = cp.asarray(data(w.rank, call, n)), cp.empty(n * w.world, cp.uint8)
        for _ in range(4):
            w.sync()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            for k in range(20):
                comm.all_gather_into_tensor(out, inp, stream=w.stream, rate_gbps=rate)
                if k == 0:  # timed from the end of the first call: the ranks' start skew is not the pacing's
                    start.record(w.stream)
            end.record(w.stream)
            end.synchronize()
            # a rank's paced bytes: its sends, and with local_copies="peer" also its own block, read back
            paced = n * w.world if comm.local_copies == "peer" else n * (w.world - 1)
            rates.append(19 * paced / (cp.cuda.get_elapsed_time(start, end) / 1e3) / 1e9)
    finally:
        comm.pace_feedback = False
    w.check(f"paced allgathers back to back {n}", out, w.gathered(call, n))
    w.say(f"paced at {rate:g} GB/s, batches delivered {[round(r, 1) for r in rates]} GB/s")
    # the rate band only where each rank has its GPU: two processes time-slicing one GPU delivered a steady tenth
    # of the rate on the 1x H200 (session 14: 3.9-4.0 GB/s for 40), a figure of the context switches, not the pacer
    assert w.shared or rate / 1.5 <= rates[-1] <= 1.5 * rate, \
        f"back-to-back AllGathers paced at {rate:g} GB/s delivered {', '.join(f'{r:.1f}' for r in rates)} GB/s " \
        "per batch"
    call = w.next()
    nxt, prv = _ring(w)
    n = (3 << 20) + 7
    inp, out = cp.asarray(data(w.rank, call, n)), cp.full(n, 0xA5, cp.uint8)
    w.sync()
    if w.rank % 2 == 0:
        comm.send(inp, nxt, stream=w.stream, duration_s=0.005)
        comm.recv(out, prv, stream=w.stream)
    else:
        comm.recv(out, prv, stream=w.stream)
        comm.send(inp, nxt, stream=w.stream, duration_s=0.005)
    w.stream.synchronize()
    w.check(f"paced sendrecv {n}", out, data(prv, call, n))


def check_synchronize_waits_for_graphs(w: W) -> None:
    """synchronize() waits for calls launched as graphs (their end event is recorded inside the graph)."""
    cp, world = w.cp, w.world
    big_in, big_out = cp.empty(256 << 20, cp.uint8), cp.empty((256 << 20) * world, cp.uint8)
    for _ in range(4):  # from the second call on, one graph launch per call
        w.comm.all_gather_into_tensor(big_out, big_in, stream=w.stream)
    w.comm.synchronize()
    assert w.stream.done, "synchronize() returned while the stream still ran the graphs' copies"


def check_create_close_cycles(w: W) -> None:
    """100 create/close cycles leak no file descriptors and no shared memory."""
    import glob

    from hoccl_runtime import init

    cp = w.cp
    small_in, small_out = cp.ones(64, cp.uint8), cp.zeros(64 * w.world, cp.uint8)
    fds0, shm0 = len(os.listdir("/proc/self/fd")), len(glob.glob("/dev/shm/hoccl-*"))
    for _ in range(100):
        c = init(timeout_s=20, device=w.dev)
        c.all_gather_into_tensor(small_out, small_in, stream=w.stream)
        w.stream.synchronize()
        c.close()
    fds1, shm1 = len(os.listdir("/proc/self/fd")), len(glob.glob("/dev/shm/hoccl-*"))
    assert fds1 <= fds0 + 2 and shm1 <= shm0, f"100 init/close cycles leaked {fds1 - fds0} fds, " \
                                              f"{shm1 - shm0} shm segments"
    assert bool((small_out == 1).all()), "allgather in the create/close cycles was wrong"


def check_torch_bf16(w: W) -> None:
    """A torch tensor in bf16 on the legacy default stream, against torch.distributed's own all_gather."""
    torch, dist = w.torch, w.dist
    x = torch.randn(1000, device=f"cuda:{w.dev}").to(torch.bfloat16)
    y = torch.empty(1000 * w.world, device=f"cuda:{w.dev}", dtype=torch.bfloat16)
    w.comm.all_gather_into_tensor(y, x)
    torch.cuda.synchronize(w.dev)
    host = x.cpu() if w.shared else x  # gloo where the ranks share a GPU (NCCL refuses that)
    gathered = [torch.empty_like(host) for _ in range(w.world)]
    dist.all_gather(gathered, host)
    assert torch.equal(y.cpu(), torch.cat(gathered).cpu()), "torch bf16 allgather differs from torch.distributed's"


def _traced(w: W) -> tuple[dict, object, object, object, int]:
    torch, comm, rank, world, n = w.torch, w.comm, w.rank, w.world, 1 << 20
    tin = torch.ones(n * world, dtype=torch.uint8, device=f"cuda:{w.dev}")
    tout = torch.empty(n * world, dtype=torch.uint8, device=f"cuda:{w.dev}")
    ts = torch.cuda.Stream(device=w.dev)
    calls = {
        "all_gather": lambda: comm.all_gather_into_tensor(tout, tin[:n], stream=ts),
        "all_to_all": lambda: comm.all_to_all_single(tout, tin, stream=ts),
        "broadcast": lambda: comm.broadcast(tout[:n], world - 1, stream=ts),
        "scatter": lambda: comm.scatter(tout[:n], tin if rank == 0 else None, root=0, stream=ts),
        "gather": lambda: comm.gather(tin[:n], tout if rank == 0 else None, root=0, stream=ts),
        "send/recv": lambda: comm.send(tin[:n], (rank + 1) % world, stream=ts) if rank % 2 == 0 else
        comm.recv(tout[:n], (rank - 1) % world, stream=ts),
    }
    return calls, tin, tout, ts, n


def check_no_kernel_trace(w: W) -> None:
    """A profiler trace of every collective of this communicator shows copies and no kernel."""
    from torch.profiler import ProfilerActivity, profile

    calls, _, _, ts, _ = _traced(w)
    bad = []
    for name, fn in calls.items():
        if name == "send/recv" and w.world % 2:
            continue
        fn()  # warm: plan and mappings outside the trace
        ts.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            ts.synchronize()
        kernels = [e.name for e in prof.events() if e.device_type.name == "CUDA"
                   and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
        copies = [e.name for e in prof.events() if e.device_type.name == "CUDA" and "memcpy" in e.name.lower()]
        if kernels:
            bad.append(f"{name} launched kernels {sorted(set(kernels))}")
        w.say(f"{name}: {len(copies)} copies, {len(kernels)} kernels in the trace")
    assert not bad, "; ".join(bad)


def check_sm_free(w: W) -> None:
    """Each call beside a kernel that holds every SM (hoccl_bench.smfree). A same-GPU copy is a kernel of the
    CUDA driver, so only calls without one must pass: in-place AllGather, broadcast, send/recv above the eager
    size (and with local_copies="peer" the out-of-place collectives too); the others are printed."""
    if w.shared:
        raise Skip("the ranks share a GPU: their copies are same-GPU copies, which run on SMs")
    from hoccl_bench.smfree import SmProbe

    torch, comm, rank = w.torch, w.comm, w.rank
    calls, _, tout, ts, n = _traced(w)
    probe = SmProbe(w.dev, hold_ms=100.0)
    by_peer = comm.local_copies == "peer"  # own blocks through a peer GPU on copy engines: no SM either
    big = torch.ones(2 * comm.eager_bytes + 4096, dtype=torch.uint8, device=f"cuda:{w.dev}")
    peer = rank + 1 if rank % 2 == 0 else rank - 1
    probed = {
        "all_gather in place": (lambda: comm.all_gather_into_tensor(tout, tout[rank * n:(rank + 1) * n], stream=ts),
                                True),
        "broadcast": (calls["broadcast"], True),
        "send/recv rendezvous": ((lambda: comm.send(big, peer, stream=ts) if rank % 2 == 0 else
                                  comm.recv(big, peer, stream=ts)), True),
        "all_gather": (calls["all_gather"], by_peer),
        "all_to_all": (calls["all_to_all"], by_peer),
        "scatter": (calls["scatter"], by_peer),
        "gather": (calls["gather"], by_peer),
        # small: eager (its receive copies out of a slot within the GPU), but rendezvous in peer mode
        "send/recv small": (calls["send/recv"], comm.eager_bytes == 0),
    }
    bad = []
    for name, (fn, must) in probed.items():
        if name.startswith("send/recv") and w.world % 2:
            continue
        fn()  # warm
        ts.synchronize()
        w.dist.barrier()
        done_ms, held_ms = probe.run(fn, ts.cuda_stream)
        free = probe.free(done_ms, held_ms)
        if must and not free:
            bad.append(f"{name} needed SMs (done at {done_ms:.1f} ms, SMs held {held_ms:.1f} ms)")
        w.say(f"{name}: {'SM-free' if free else 'needs SMs'} (done at {done_ms:.1f} ms of {held_ms:.1f} ms spun)")
        ts.synchronize()
    assert not bad, "; ".join(bad)


def check_two_streams(w: W) -> None:
    """Calls on two streams, issued back to back without any sync between them: the communicator orders them."""
    cp = w.cp
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    n = (8 << 20) + 5
    bufs, want = [], []
    for _ in range(6):
        call = w.next()
        bufs.append((cp.full(n * w.world, 0xA5, cp.uint8), cp.asarray(data(w.rank, call, n))))
        want.append(w.gathered(call, n))
    w.sync()
    w.dist.barrier()
    for k, (out, inp) in enumerate(bufs):
        w.comm.all_gather_into_tensor(out, inp, stream=(s1, s2)[k % 2])
    s1.synchronize()
    s2.synchronize()
    for k, ((out, _), expect) in enumerate(zip(bufs, want, strict=True)):
        w.check(f"allgather {k} on alternating streams", out, expect)


def check_windows(w: W) -> None:
    """Registered windows: buffers carved out of one torch allocation per rank (a sub-range of the caching
    allocator's segment), registered once; every call on them skips the per-call address exchange. Also: a window
    call does not wait for its partners on the host, a CUDA graph of a window call replays with fresh data, and
    after the window closes the call takes the mailbox path again."""
    torch, comm, rank, world, dev = w.torch, w.comm, w.rank, w.world, w.dev
    space = torch.empty(96 << 20, dtype=torch.uint8, device=f"cuda:{dev}")
    win = comm.register_window(space)
    ts = torch.cuda.Stream(device=dev)

    def at(offset, count, fill=None, src=None):
        view = space[offset:offset + count]
        if src is not None:
            view.copy_(torch.from_numpy(src).to(view.device))
        elif fill is not None:
            view.fill_(fill)
        return view

    def got(view):
        return view.cpu().numpy()

    for n in (7, 4099, (1 << 20) + 3, (5 << 20) + 1):
        call = w.next()
        torch.cuda.synchronize(dev)
        inp, out = at(0, n, src=data(rank, call, n)), at(32 << 20, n * world, 0xA5)
        torch.cuda.synchronize(dev)
        comm.all_gather_into_tensor(out, inp, stream=ts)
        ts.synchronize()
        w.check(f"window allgather {n}", got(out), w.gathered(call, n))
        call = w.next()
        inp, out = at(0, n * world, src=data(rank, call, n * world)), at(32 << 20, n * world, 0xA5)
        torch.cuda.synchronize(dev)
        comm.all_to_all_single(out, inp, stream=ts)
        ts.synchronize()
        w.check(f"window alltoall {n}", got(out), np.concatenate([data(r, call, n * world)[rank * n:(rank + 1) * n]
                                                                  for r in range(world)]))
        call = w.next()
        root = call % world
        t = at(64 << 20, n, src=data(root, call, n)) if rank == root else at(64 << 20, n, 0xA5)
        torch.cuda.synchronize(dev)
        comm.broadcast(t, root, stream=ts)
        ts.synchronize()
        w.check(f"window broadcast {n}", got(t), data(root, call, n))
        call = w.next()
        src = at(0, n * world, src=data(0, call, n * world)) if rank == 0 else None
        out = at(32 << 20, n, 0xA5)
        torch.cuda.synchronize(dev)
        comm.scatter(out, src, root=0, stream=ts)
        ts.synchronize()
        w.check(f"window scatter {n}", got(out), data(0, call, n * world)[rank * n:(rank + 1) * n])
        call = w.next()
        inp = at(32 << 20, n, src=data(rank, call, n)) if rank else None  # the root's output where they sit
        out = at(32 << 20, n * world, 0xA5) if rank == 0 else None
        if rank == 0:
            out[:n].copy_(torch.from_numpy(data(0, call, n)).to(out.device))
            inp = out[:n]
        torch.cuda.synchronize(dev)
        comm.gather(inp, out, root=0, stream=ts)
        ts.synchronize()
        if rank == 0:
            w.check(f"window gather {n}", got(out), w.gathered(call, n))
        if world % 2 == 0:  # send/recv in pairs, sender's and receiver's buffers at the same offset
            call = w.next()
            peer = rank + 1 if rank % 2 == 0 else rank - 1
            buf = at(64 << 20, n, src=data(min(rank, peer), call, n)) if rank % 2 == 0 else at(64 << 20, n, 0xA5)
            torch.cuda.synchronize(dev)
            comm.send(buf, peer, stream=ts) if rank % 2 == 0 else comm.recv(buf, peer, stream=ts)
            ts.synchronize()
            w.check(f"window send/recv {n}", got(buf), data(min(rank, peer), call, n))
    # pipeline stages on the window: a send's buffer and its receiver's at the same offset, so even ranks send
    # from A and receive at B, odd ranks the other way round; one batch of a send forward and a receive back
    if world % 2 == 0:
        for n in (4099, (5 << 20) + 1):
            call = w.next()
            send_at, recv_at = (0, 32 << 20) if rank % 2 == 0 else (32 << 20, 0)
            nxt, prv = _ring(w)
            out, inp = at(recv_at, n, 0xA5), at(send_at, n, src=data(rank, call, n))
            torch.cuda.synchronize(dev)
            comm.batch_isend_irecv([("send", inp, nxt), ("recv", out, prv)], stream=ts)
            ts.synchronize()
            w.check(f"window batch_isend_irecv {n}", got(out), data(prv, call, n))
    # a window call does not wait for its partners on the host: the last rank comes 0.5 s late
    n = 1 << 20
    inp, out = at(0, n, 1), at(32 << 20, n * world, 0xA5)
    torch.cuda.synchronize(dev)
    w.dist.barrier()
    if rank == world - 1:
        time.sleep(0.5)
    t0 = time.perf_counter()
    for _ in range(3):
        comm.all_gather_into_tensor(out, inp, stream=ts)
    issued_ms = (time.perf_counter() - t0) * 1e3
    ts.synchronize()
    w.say(f"3 window AllGathers issued in {issued_ms:.2f} ms (rank {world - 1} 0.5 s late)")
    assert rank == world - 1 or issued_ms <= 250, f"3 window calls took {issued_ms:.0f} ms on the host: they " \
                                                  "waited for the late rank"
    w.check("window allgather, late rank", got(out), np.ones(n * world, np.uint8))
    # captured into a CUDA graph on window buffers, replayed with fresh data
    n = (3 << 20) + 1
    inp, out = at(0, n), at(32 << 20, n * world)
    comm.all_gather_into_tensor(out, inp, stream=ts)
    ts.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=ts):
        comm.all_gather_into_tensor(out, inp, stream=ts)
    for replay in range(5):
        call = w.next()
        inp.copy_(torch.from_numpy(data(rank, call, n)).to(inp.device))
        out.fill_(0xA5)
        torch.cuda.synchronize(dev)
        w.dist.barrier()
        graph.replay()
        torch.cuda.synchronize(dev)
        w.check(f"window graph replay {replay}", got(out), w.gathered(call, n))
    del graph
    win.close()
    call = w.next()
    n = 4099
    inp, out = at(0, n, src=data(rank, call, n)), at(32 << 20, n * world, 0xA5)
    torch.cuda.synchronize(dev)
    comm.all_gather_into_tensor(out, inp, stream=ts)  # closed: the mailbox path again
    ts.synchronize()
    w.check("allgather after the window closed", got(out), w.gathered(call, n))


def check_async_pool_refused(w: W) -> None:
    """Memory from a cudaMallocAsync pool is not IPC-capable: both ranks' calls are refused by name (BufferError),
    and the next call, on ordinary memory, runs (a refused call takes no sequence number)."""
    from hoccl_runtime.errors import BufferError

    cp, n = w.cp, 4099
    call = w.next()
    pool = cp.cuda.MemoryAsyncPool()
    pooled = cp.ndarray(n * w.world, cp.uint8, pool.malloc(n * w.world))
    inp, out = cp.asarray(data(w.rank, call, n)), cp.full(n * w.world, 0xA5, cp.uint8)
    try:
        w.comm.all_gather_into_tensor(pooled, inp, stream=w.stream)
        w.stream.synchronize()
        raise AssertionError("an output from a cudaMallocAsync pool was not refused")
    except BufferError as exc:
        assert "cudaMalloc" in str(exc) and f"rank {w.rank}'s output" in str(exc), \
            f"the refusal of async-pool memory does not name it and the fix: {exc}"
        w.say(f"async-pool memory refused: {str(exc)[:100]}")
    w.comm.all_gather_into_tensor(out, inp, stream=w.stream)
    w.stream.synchronize()
    w.check("allgather after a refused one", out, w.gathered(call, n))


def check_mismatch(w: W) -> None:
    """A mismatched collective: both sides say so."""
    from hoccl_runtime.errors import PlanError

    cp = w.cp
    try:
        if w.rank == 0:
            w.comm.all_gather_into_tensor(cp.empty(8 * w.world, cp.uint8), cp.empty(8, cp.uint8), stream=w.stream)
        else:
            w.comm.all_to_all_single(cp.empty(8 * w.world, cp.uint8), cp.empty(8 * w.world, cp.uint8),
                                     stream=w.stream)
    except PlanError as exc:
        w.say(f"mismatch detected: {str(exc)[:80]}")
        return
    raise AssertionError("mismatched collectives were not detected")


def check_graph_capture(w: W) -> None:
    """CUDA graph capture across processes: every rank captures its part, then replays 20x with fresh data."""
    cp, n = w.cp, (3 << 20) + 1
    inp, out = cp.empty(n, cp.uint8), cp.empty(n * w.world, cp.uint8)
    w.comm.all_gather_into_tensor(out, inp, stream=w.stream)  # warm: plan, mappings, events outside the capture
    w.stream.synchronize()
    w.stream.begin_capture()
    w.comm.all_gather_into_tensor(out, inp, stream=w.stream)
    graph = w.stream.end_capture()
    for replay in range(20):
        call = w.next()
        inp.set(data(w.rank, call, n))
        out.fill(0xA5)
        w.sync()
        w.dist.barrier()
        graph.launch(w.stream)
        w.stream.synchronize()
        w.check(f"graph replay {replay}", out, w.gathered(call, n))


def bench(w: W) -> None:
    """--bench: GB/s and host us per call (printed, not checked)."""
    cp, comm, rank, world = w.cp, w.comm, w.rank, w.world
    rows = []
    for size in (2 << 20, 64 << 20, 1 << 30):
        out, inp, a2a_in, buf = (cp.empty(size, cp.uint8), cp.empty(size // world, cp.uint8),
                                 cp.empty(size, cp.uint8), cp.empty(size, cp.uint8))
        ops = {
            "allgather": lambda o=out, i=inp: comm.all_gather_into_tensor(o, i, stream=w.stream),
            "alltoall": lambda o=out, i=a2a_in: comm.all_to_all_single(o, i, stream=w.stream),
            "sendrecv": lambda b=buf: (comm.send(b, 1, stream=w.stream) if rank == 0 else
                                       comm.recv(b, 0, stream=w.stream) if rank == 1 else None),
        }
        for name, fn in ops.items():
            fn()
            w.stream.synchronize()
            iters = max(3, min(50, (2 << 30) // size))
            times, host = [], []
            for _ in range(5):
                w.dist.barrier()
                start, end = cp.cuda.Event(), cp.cuda.Event()
                start.record(w.stream)
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn()
                host.append((time.perf_counter() - t0) / iters * 1e6)
                end.record(w.stream)
                end.synchronize()
                times.append(cp.cuda.get_elapsed_time(start, end) / 1e3 / iters)
            rows.append((name, size, size / statistics.median(times) / 1e9, statistics.median(host)))
    if rank == 0:
        print("op         size        GB/s   host us (per rank, one process per GPU)")
        for name, size, gbps, host in rows:
            print(f"{name:10} {size >> 20:6} MiB {gbps:8.1f} {host:8.1f}")


CHECKS = {name[6:]: fn for name, fn in globals().items() if name.startswith("check_")}
LAST = "dead_peer"  # after the others: the last rank leaves


def dead_peer(w: W) -> None:
    """A dead peer, host side: the last rank leaves; the others' next call must say so at once, naming it."""
    from hoccl_runtime.errors import HocclTimeoutError, TransportError

    cp = w.cp
    time.sleep(1.0)
    w.comm.timeout_s = 20
    t0 = time.monotonic()
    try:
        w.comm.all_gather_into_tensor(cp.empty(16 * w.world, cp.uint8), cp.empty(16, cp.uint8), stream=w.stream)
    except (HocclTimeoutError, TransportError) as exc:
        waited = time.monotonic() - t0
        w.say(f"dead peer detected after {waited:.2f} s: {str(exc)[:70]}")
        assert waited <= 5 and f"rank {w.world - 1}" in str(exc), f"dead peer reported after {waited:.1f} s as {exc}"
        return
    raise AssertionError("a dead peer was not detected")


def _outcome(fn, w: W) -> str:
    try:
        fn(w)
        w.torch.cuda.synchronize(w.dev)
        return "ok"
    except Skip as why:
        return f"skipped: {why}"
    except Exception as exc:  # noqa: BLE001 - recorded; the next check runs
        where = traceback.extract_tb(exc.__traceback__)[-2:]
        traceback.print_exc()
        return f"{type(exc).__name__}: {exc} (at " + " <- ".join(
            f"{Path(f.filename).name}:{f.lineno}" for f in reversed(where)) + ")"


def main() -> int:
    import cupy as cp
    import torch
    import torch.distributed as dist

    from hoccl_runtime import init

    out_path = Path(next(a for a in sys.argv[1:] if not a.startswith("--")))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    shared = torch.cuda.device_count() < world
    dev = 0 if shared else int(os.environ.get("LOCAL_RANK", rank))
    cp.cuda.Device(dev).use()
    torch.cuda.set_device(dev)
    backend = "gloo" if shared else "nccl"  # NCCL refuses two ranks on one GPU
    if "--own-store" in sys.argv:  # the communicator makes its own store; torch.distributed comes up after
        comm = init(timeout_s=20, device=dev)
        dist.init_process_group(backend, **({} if shared else {"device_id": torch.device(f"cuda:{dev}")}))
    else:  # the usual case: torch.distributed is up, its store is reused
        dist.init_process_group(backend, **({} if shared else {"device_id": torch.device(f"cuda:{dev}")}))
        comm = init(timeout_s=20, device=dev)
    w = W(cp, torch, dist, comm, rank, world, dev, shared)
    results = {}
    mine = out_path.with_name(f"{out_path.name}.rank{rank}")
    for name, fn in CHECKS.items():
        faulthandler.dump_traceback_later(150)  # a check that hangs leaves every thread's stack in the log
        results[name] = _outcome(fn, w)
        faulthandler.cancel_dump_traceback_later()
        print(f"rank {rank}: {name}: {results[name][:200]}", flush=True)
        dist.barrier()  # the ranks stay in step whatever failed
    if "--bench" in sys.argv:
        bench(w)
    mine.write_text(json.dumps({"results": results, "notes": w.notes, "shared_gpu": shared}, indent=1))
    dist.barrier()
    if rank == world - 1:  # the dead peer: it leaves, the others check that they hear of it
        results[LAST] = "skipped: this rank is the one that leaves"
        mine.write_text(json.dumps({"results": results, "notes": w.notes, "shared_gpu": shared}, indent=1))
        os._exit(0)
    results[LAST] = _outcome(dead_peer, w)
    comm.close()
    mine.write_text(json.dumps({"results": results, "notes": w.notes, "shared_gpu": shared}, indent=1))
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main())
