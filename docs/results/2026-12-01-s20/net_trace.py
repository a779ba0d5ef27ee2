"""A timeline of a few network calls across both processes (session 20): as net_phases.py, with the TCP lanes'
threads timed too (wrapping the transport's module-level helpers; the runtime is unchanged), absolute
CLOCK_MONOTONIC times so both ranks' events merge. Events: the proxy's run start/end, hello end, data write posted,
send thread packing a frame (then sendall), its "sent" completion made, receive thread's header and payload
receives ended, its "received" completion made, the driving thread seeing data arrive, barrier start/end.
Each rank writes its events to OUT/trace-RANK.json; rank 1 prints calls 20..22 of AllGather and broadcast merged.

    HOCCL_GPUS_PER_NODE=1 OUT=... torchrun --nproc_per_node 2 docs/results/2026-12-01-s20/net_trace.py
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from net_phases import EVENTS, instrument  # noqa: E402


def trace_transport():
    from hoccl_runtime.net.transport import tcp

    orig_recv = tcp._recv_exact

    def recv_exact(sock, view):
        out = orig_recv(sock, view)
        EVENTS.append((f"recv{len(view)}:{threading.current_thread().name[-6:]}", time.perf_counter()))
        return out

    tcp._recv_exact = recv_exact
    header = tcp.HEADER

    class Header:
        size = header.size

        @staticmethod
        def pack(*a):
            EVENTS.append((f"pack{a[9]}:{threading.current_thread().name[-6:]}", time.perf_counter()))
            return header.pack(*a)

        @staticmethod
        def unpack_from(*a):
            return header.unpack_from(*a)

    tcp.HEADER = Header
    orig_c = tcp.Completion

    def completion(kind, *a):
        EVENTS.append((f"c-{kind}{a[-1]}", time.perf_counter()))
        return orig_c(kind, *a)

    tcp.Completion = completion


def main() -> int:
    import torch
    import torch.distributed as dist

    import hoccl_runtime.torch as ht

    instrument()
    trace_transport()
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(0)
    dist.init_process_group("gloo")
    ht.configure(device=0, reduce="hoccl")
    group = dist.new_group(backend="hoccl")
    size = 64 << 10
    x = torch.randint(0, 255, (size,), dtype=torch.uint8, device="cuda")
    out = torch.empty(2 * size, dtype=torch.uint8, device="cuda")
    calls = {
        "allgather": lambda: dist.all_gather_into_tensor(out, x, group=group),
        "broadcast": lambda: dist.broadcast(x, 0, group=group),
    }
    result = {}
    for op, call in calls.items():
        for _ in range(10):
            call()
        torch.cuda.synchronize()
        dist.barrier()
        time.sleep(0.2)
        EVENTS.clear()
        for _ in range(40):
            call()
        torch.cuda.synchronize()
        time.sleep(0.1)
        result[op] = list(EVENTS)
        dist.barrier()
    out_dir = Path(os.environ.get("OUT", "/tmp"))
    (out_dir / f"trace-{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    if rank == 1:
        other = json.loads((out_dir / "trace-0.json").read_text())
        for op in calls:
            ev = [(t, 0, n) for n, t in other[op]] + [(t, 1, n) for n, t in result[op]]
            ev.sort()
            runs = [t for t, r, n in ev if n == "run" and r == 0]
            lo, hi = runs[20], runs[23]
            t0 = lo
            print(f"--- {op}: calls 20..22, microseconds from rank 0's run 20 start")
            for t, r, n in ev:
                if lo - 300e-6 <= t < hi:
                    print(f"{(t - t0) * 1e6:9.0f}  rank {r}  {'    ' * r}{n}")
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
