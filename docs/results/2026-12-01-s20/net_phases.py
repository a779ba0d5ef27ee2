"""Where a network call's time goes (session 20): the network communicator through the torch backend, each rank its
own "node" over TCP, both on GPU 0, back-to-back AllGather / broadcast / send-recv of 64 KiB, with the proxy's node
executor timed phase by phase (methods wrapped here; the runtime is unchanged): the run's start (the proxy saw START),
the plan notices of every node (``_hello``), the first data write posted, the data that arrived, the barrier at the
end (``_barrier``), and the wait for the copy streams' end counters. Medians over 40 calls, microseconds from the
run's start; plus the gap from one run's end to the next one's start (the proxy waiting for the stream's START).

    HOCCL_GPUS_PER_NODE=1 torchrun --nproc_per_node 2 docs/results/2026-12-01-s20/net_phases.py
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

EVENTS: list[tuple[str, float]] = []


def _wrap(cls, name, before=None, after=None):
    orig = getattr(cls, name)

    def wrapped(self, *a, **k):
        if before:
            EVENTS.append((before, time.perf_counter()))
        try:
            return orig(self, *a, **k)
        finally:
            if after:
                EVENTS.append((after, time.perf_counter()))

    setattr(cls, name, wrapped)


def instrument():
    from hoccl_runtime.net import executor as ex

    _wrap(ex.GpuNodeExecutor, "run", "run", "run_end")
    _wrap(ex.HostNodeExecutor, "_hello", None, "hello_end")
    _wrap(ex.HostNodeExecutor, "_drive", None, "drive_end")
    _wrap(ex.HostNodeExecutor, "_barrier", "barrier", "barrier_end")
    orig_post = ex.HostNodeExecutor._post_ready

    def post(self):
        n = len(self._inflight)
        out = orig_post(self)
        if len(self._inflight) > n:
            EVENTS.append(("write", time.perf_counter()))
        return out

    ex.HostNodeExecutor._post_ready = post
    orig_comp = ex.HostNodeExecutor._on_completion

    def comp(self, node, c):
        if c.kind == "received" and not (c.imm & (1 << 31)) and (c.imm & 0x7E000000) not in (0x7E000000,):
            EVENTS.append(("arrived", time.perf_counter()))
        elif c.kind == "sent" and c.nbytes:
            EVENTS.append(("sent", time.perf_counter()))
        return orig_comp(self, node, c)

    ex.HostNodeExecutor._on_completion = comp
    orig_send = ex.HostNodeExecutor._send_ready

    def send_ready(self):
        n = dict(self._run.next)
        out = orig_send(self)
        if self._run.next != n:
            EVENTS.append(("gate", time.perf_counter()))
        return out

    ex.HostNodeExecutor._send_ready = send_ready


def phases(events):
    runs, cur, prev_end = [], None, None
    for name, t in events:
        if name == "run":
            cur = {"t0": t, "gap": (t - prev_end) if prev_end else None}
        elif cur is not None:
            cur.setdefault(name, t - cur["t0"])
            if name == "run_end":
                prev_end = t
                runs.append(cur)
                cur = None
    return runs


def main() -> int:
    import torch
    import torch.distributed as dist

    import hoccl_runtime.torch as ht

    instrument()
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
        "sendrecv": lambda: dist.send(x, 1, group=group) if rank == 0 else dist.recv(out[:size], 0, group=group),
    }
    lines = []
    for op, call in calls.items():
        for _ in range(10):
            call()
        torch.cuda.synchronize()
        dist.barrier()
        time.sleep(0.2)
        EVENTS.clear()
        t0 = time.perf_counter()
        for _ in range(40):
            call()
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) / 40
        time.sleep(0.1)
        runs = phases(list(EVENTS))[1:]
        keys = ["hello_end", "gate", "write", "sent", "arrived", "drive_end", "barrier", "barrier_end", "run_end",
                "gap"]
        med = {k: statistics.median([r[k] for r in runs if r.get(k) is not None]) * 1e6
               for k in keys if any(r.get(k) is not None for r in runs)}
        lines.append(f"rank {rank} {op:>9}: {wall * 1e6:.0f} us per call; " +
                     ", ".join(f"{k} {v:.0f}" for k, v in med.items()))
        dist.barrier()
    for r in range(2):
        if r == rank:
            print("\n".join(lines), flush=True)
        dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
