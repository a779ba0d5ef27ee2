"""Where a pipeline step's host time goes, HOCCL against NCCL: point-to-point host cost and latency, then the
pipeline example's steps with its communication calls timed. Two torchrun nodes of one rank
(``scripts/tcp-nodes.sh``, so NCCL runs over its sockets beside HOCCL's TCP network communicator)::

    bash scripts/tcp-nodes.sh examples/profile_pipeline.py --size small --steps 20 --repeats 3

Part 1, per group and size, rank 0 sending to rank 1 through ``dist.batch_isend_irecv`` (what
torch.distributed.pipelining calls):
- ``issue us``: host time of one send (or receive) call and its ``wait()``, ``--calls`` back to back, before the
  GPU is synchronized (the host's cost of a call, as long as nothing blocks it);
- ``one-way us``: half a round trip (rank 0 sends, rank 1 receives and sends back the same size), each round
  synchronized on the host: the latency of a dependency through the group.

Part 2, ``examples/train_pipeline.py``'s variants (interleaved rounds), per rank and step: wall ms, the main
thread's CPU ms (``time.thread_time``: a rank whose CPU time is near its wall time is bound by its host), and the
host ms spent inside the communication calls (``batch_isend_irecv``) and inside the waits on them, and in Python's
garbage collector (all of it, and the part inside the calls; ``--gc-off`` disables it for the timed steps). Inputs are the
example's own random tokens; nothing is checked here but that the losses of HOCCL and NCCL agree.
``--host-delay-us N`` runs one variant (``--delay-comm``, NCCL by default) a second time in each round, each of its
``batch_isend_irecv`` calls after N us of busy host work: the row ``nccl+Nus`` against ``nccl`` shows how much a
call's host cost moves the step (on 2026-12-04 300 us a call moved pipeline small's step 2.0-2.2 ms at 5 calls).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_pipeline  # noqa: E402
from gpt import SIZES, Config  # noqa: E402


class Timed:
    """Host time and count of calls to one function, replaced in its module by a timing wrapper."""

    def __init__(self, module, name: str):
        self.module, self.name, self.seconds, self.calls = module, name, 0.0, 0
        self.inner = getattr(module, name)
        self.delay_s = 0.0  # a busy wait before each call (--host-delay-us): host work of that length, GIL held
        self.depth = 0  # calls of it under way (GcClock counts the collections that run inside them)

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            self.depth += 1
            while time.perf_counter() - t0 < self.delay_s:
                pass
            try:
                return self.inner(*args, **kwargs)
            finally:
                self.depth -= 1
                self.seconds += time.perf_counter() - t0
                self.calls += 1

        setattr(module, name, wrapper)

    def take(self) -> tuple[float, int]:
        got = (self.seconds, self.calls)
        self.seconds, self.calls = 0.0, 0
        return got


class GcClock:
    """Host time in Python's garbage collector (gc.callbacks), all of it and the part inside ``within``'s calls."""

    def __init__(self, within: Timed):
        self.within, self.seconds, self.inside, self._t0, self._in = within, 0.0, 0.0, 0.0, False
        gc.callbacks.append(self._phase)

    def _phase(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0, self._in = time.perf_counter(), self.within.depth > 0
        else:
            dt = time.perf_counter() - self._t0
            self.seconds += dt
            self.inside += dt if self._in else 0.0

    def take(self) -> tuple[float, float]:
        got = (self.seconds, self.inside)
        self.seconds = self.inside = 0.0
        return got


def send_each(bufs: list, rank: int, group) -> None:
    """Rank 0 sends each buffer to rank 1 (which receives it), one ``batch_isend_irecv`` and its wait per buffer."""
    for b in bufs:
        op = dist.P2POp(dist.isend if rank == 0 else dist.irecv, b, 1 - rank, group)
        for w in dist.batch_isend_irecv([op]):
            w.wait()


def breakdown(group, rank: int, device: torch.device, calls: int, reuse: bool = False) -> list[tuple[str, float]]:
    """Host us per call spent in each layer of a HOCCL send/recv through the group (timing wrappers, not a
    profiler: their own cost is about a microsecond each); ``reuse``: every call on one tensor, as a training
    step's activations come back at the same addresses, else a new tensor each call."""
    timers = layer_timers()
    bufs = [torch.randn((1 << 20) // 4, device=device)] * calls if reuse else \
        [torch.randn((1 << 20) // 4, device=device) for _ in range(calls)]
    torch.cuda.synchronize(device)
    for t in timers:
        t.take()
    t0 = time.perf_counter()
    send_each(bufs, rank, group)
    total = time.perf_counter() - t0
    rows = [("whole call (batch_isend_irecv + wait)", total / calls * 1e6)] + read_timers(timers, calls)
    torch.cuda.synchronize(device)
    dist.barrier()
    return rows


def read_timers(timers: list, calls: int) -> list[tuple[str, float]]:
    """Each timer's host us per call, and the timers taken out again."""
    rows = [(f"{getattr(t.module, '__name__', t.module)}.{t.name}", t.take()[0] / max(calls, 1) * 1e6) for t in timers]
    for t in timers:
        setattr(t.module, t.name, t.inner)
    return rows


def layer_timers() -> list:
    """Timing wrappers on each layer of a HOCCL call through the group."""
    from hoccl_runtime.comm import calls as calls_mod
    from hoccl_runtime.comm import net as net_mod
    from hoccl_runtime.comm.net import NetCommunicator
    from hoccl_runtime.net.gpu import GpuNodeExecutor
    from hoccl_runtime.net.proxyproc import ProcessProxy
    from hoccl_runtime.torch import _group, _work

    return [Timed(dist, "batch_isend_irecv"), Timed(_group.ProcessGroupHoccl, "_defer"),
              Timed(_work.HocclWork, "__init__"), Timed(_group._Streams, "follow"),
              Timed(_group.ProcessGroupHoccl, "_flush"), Timed(_group._Streams, "end"),
              Timed(NetCommunicator, "_call"), Timed(NetCommunicator, "_buffers"),
              Timed(net_mod, "enqueue_call"), Timed(calls_mod.CallEvents, "record"),
              Timed(GpuNodeExecutor, "prepare"), Timed(GpuNodeExecutor, "launch_ops"),
              Timed(ProcessProxy, "submit"), Timed(_work, "wait_on_current_stream"),
              Timed(_work.HocclWork, "wait")]


def p2p_table(groups: dict, rank: int, device: torch.device, calls: int, rounds: int,
              profile: str = "") -> list[tuple]:
    rows = []
    if profile and "hoccl" in groups:  # cProfile of the HOCCL calls alone, before the timed rounds
        import cProfile
        import pstats

        bufs = [torch.randn((1 << 20) // 4, device=device) for _ in range(4 * calls)]
        torch.cuda.synchronize(device)
        prof = cProfile.Profile()
        send_each(bufs[:8], rank, groups["hoccl"])  # the first calls connect and compile: not profiled
        torch.cuda.synchronize(device)
        dist.barrier()
        prof.enable()
        send_each(bufs[8:], rank, groups["hoccl"])
        prof.disable()
        torch.cuda.synchronize(device)
        with open(f"{profile}.rank{rank}.txt", "w") as f:
            stats = pstats.Stats(prof, stream=f)
            stats.sort_stats("tottime").print_stats(45)
            stats.sort_stats("cumulative").print_stats(60)
        dist.barrier()
    for nbytes in (64 << 10, 1 << 20):
        for name, group in groups.items():
            issue, oneway = [], []
            for _ in range(rounds):
                bufs = [torch.randn(nbytes // 4, device=device) for _ in range(calls)]
                torch.cuda.synchronize(device)
                t0 = time.perf_counter()
                send_each(bufs, rank, group)
                issue.append((time.perf_counter() - t0) / calls * 1e6)
                torch.cuda.synchronize(device)
                dist.barrier()
                x = bufs[0]
                t0 = time.perf_counter()
                for _ in range(calls):
                    order = (dist.isend, dist.irecv) if rank == 0 else (dist.irecv, dist.isend)
                    for fn in order:
                        for w in dist.batch_isend_irecv([dist.P2POp(fn, x, 1 - rank, group)]):
                            w.wait()
                    torch.cuda.synchronize(device)
                oneway.append((time.perf_counter() - t0) / calls / 2 * 1e6)
                dist.barrier()
            rows.append((name, nbytes, statistics.median(issue), statistics.median(oneway)))
    return rows


def main(argv: list[str] | None = None) -> int:
    import hoccl_runtime.torch as ht

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="small", choices=sorted(SIZES))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--calls", type=int, default=32, help="calls per timing of part 1")
    p.add_argument("--comm", default="hoccl,nccl,none")
    p.add_argument("--no-p2p", action="store_true", help="skip part 1")
    p.add_argument("--no-pipeline", action="store_true", help="skip part 2")
    p.add_argument("--gc-off", action="store_true", help="in part 2, Python's garbage collector disabled during the "
                   "timed steps (collected before each variant's steps)")
    p.add_argument("--layers", action="store_true", help="in part 2, host us per step in each layer of the HOCCL "
                   "calls (the last rank's)")
    p.add_argument("--reuse", action="store_true", help="--breakdown: every call on one tensor (default: a new "
                   "tensor each call)")
    p.add_argument("--breakdown", action="store_true", help="first, host us per call in each layer of a HOCCL "
                   "send (rank 0) and receive (rank 1) of 1 MiB")
    p.add_argument("--host-delay-us", type=float, default=0.0, help="in part 2, add this much host work (a busy "
                   "wait) to each batch_isend_irecv of the --delay-comm variant: how much a call's host cost moves the "
                   "step")
    p.add_argument("--delay-comm", default="nccl", help="the variant --host-delay-us slows")
    p.add_argument("--cprofile", default="", help="also profile 1 MiB HOCCL calls with cProfile, into "
                   "CPROFILE.rankN.txt")
    args = p.parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != 2:
        raise SystemExit("profile_pipeline.py runs 2 ranks (scripts/tcp-nodes.sh)")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("gloo")
    comms = [c for c in args.comm.split(",") if c]
    groups = {}
    if "hoccl" in comms:
        ht.configure(device=0)
        groups["hoccl"] = dist.new_group(backend="hoccl")
    if "nccl" in comms:
        groups["nccl"] = dist.new_group(backend="nccl")
    if args.breakdown and "hoccl" in groups:
        for _ in range(2):  # the first round connects and compiles
            rows = breakdown(groups["hoccl"], rank, device, args.calls, args.reuse)
        if rank == 0:
            for name, us in rows:
                print(f"layer {name:<52}{us:>9.1f} us", flush=True)
    if not args.no_p2p:
        rows = p2p_table(groups, rank, device, args.calls, 5, args.cprofile)
        if rank == 0:
            print(f"{'group':<7}{'bytes':>9}{'issue us':>10}{'one-way us':>12}")
            for name, nbytes, issue, oneway in rows:
                print(f"{name:<7}{nbytes:>9}{issue:>10.1f}{oneway:>12.1f}", flush=True)
    if args.no_pipeline:
        dist.barrier()
        dist.destroy_process_group()
        return 0
    base = SIZES[args.size]
    targs = train_pipeline.parse(["--size", args.size, "--steps", "1", "--comm", ",".join(comms)])
    c = Config(layers=base.layers, dim=base.dim, heads=base.heads, seq=base.seq, vocab=base.vocab)
    variants = [train_pipeline.Variant(v, groups.get(v), targs, c, device, rank, world) for v in comms]
    from torch.distributed.pipelining import schedules

    issue = Timed(schedules.dist, "batch_isend_irecv")
    waits = Timed(schedules, "_wait_batch_p2p")
    collector = GcClock(issue)
    for v in variants:  # warm-up: the first steps set up connections and infer shapes
        v.train(2, device)
    # each round: every variant, then (--host-delay-us) the delayed one again with its calls slowed
    runs = [(v, v.name, 0.0) for v in variants] + [
        (v, f"{v.name}+{args.host_delay_us:g}us", args.host_delay_us * 1e-6)
        for v in variants if args.host_delay_us > 0 and v.name == args.delay_comm]
    stats: dict[str, list] = {name: [] for _, name, _ in runs}
    layers: dict[str, list] = {}
    for _ in range(args.repeats):
        for v, name, delay_s in runs:
            timers = layer_timers() if args.layers and name == "hoccl" else []
            issue.delay_s = delay_s
            if args.gc_off:  # the collector's passes out of the timed steps (both variants alike)
                gc.collect()
                gc.disable()
            for _ in range(args.steps):
                issue.take(), waits.take(), collector.take()
                t0, c0 = time.perf_counter(), time.thread_time()
                v.train(1, device)
                wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
                (ti, ni), (tw, _), (gs, gi) = issue.take(), waits.take(), collector.take()
                stats[name].append((wall, cpu, ti, tw, ni, gs, gi))
            gc.enable()
            if timers:  # host us per pipeline step in each layer of the HOCCL calls
                for layer, us in read_timers(timers, args.steps):
                    layers.setdefault(layer, []).append(us)
    mine = {name: [statistics.median(col) for col in zip(*rows, strict=True)] for name, rows in stats.items()}
    gathered = [None] * world
    dist.all_gather_object(gathered, mine)
    if rank == world - 1:
        print(f"{'comm':<7}{'rank':>5}{'step ms':>9}{'CPU ms':>8}{'in calls ms':>13}{'in waits ms':>13}{'calls':>7}"
              f"{'GC ms':>7}{'GC in calls ms':>16}")
        for name in stats:
            for r, got in enumerate(gathered):
                wall, cpu, ti, tw, ni, gs, gi = got[name]
                print(f"{name:<7} {r:>4}{wall * 1e3:>9.2f}{cpu * 1e3:>8.2f}{ti * 1e3:>13.2f}{tw * 1e3:>13.2f}{ni:>7.0f}"
                      f"{gs * 1e3:>7.2f}{gi * 1e3:>16.2f}")
        ex = getattr(getattr(groups.get("hoccl"), "comm", None), "_executor", None)
        kept = getattr(ex, "_templates", None)
        if kept is not None:  # hoccl_runtime/net/template.py: runs issued from a kept launch list
            print(f"hoccl launch lists (rank {rank}): {kept.reissued} runs reissued, {kept.built} built")
        for name, per_round in layers.items():
            print(f"step layer {name:<52}{statistics.median(per_round):>9.1f} us a step (rank {rank})")
        losses = {v.name: v.losses for v in variants if v.name != "none"}
        if len(losses) == 2 and args.host_delay_us > 0:
            print("losses not compared: --host-delay-us trains the delayed variant's model further")
        elif len(losses) == 2:
            a, b = losses.values()
            apart = max((abs(x - y) for x, y in zip(a, b, strict=False)), default=0.0)
            print(f"losses equal: {a == b}" + ("" if a == b else f" (at most {apart:.2g} apart over {len(a)} steps)"))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
