"""Inter-node path on GPUs, "nodes" joined by the TCP transport on one host (2-GPU machine).

    python examples/bench_internode.py [--check-only] [--lanes 8] [--rounds 3] [--out DIR]
                                       [--splits balance,idle --split-rounds 2]
                                       [--curves allgather,alltoall --curve-gpus 2]

Each node is a process driving its GPUs with GpuNodeExecutor: 2 nodes x 1 GPU (node n on GPU n) and
2 nodes x 2 GPUs (on 4 GPUs one each; on 2 GPUs 4 ranks on 2 GPUs, a node's local rank i on GPU i),
which exercises the forwarding copies; with 8 GPUs also 2 nodes x 4. Checks AllGather, All-to-All,
skewed All-to-Allv and send/recv against the reference replay (random inputs, poisoned outputs),
then times 1-GPU-per-node send/recv 2 MiB..1 GiB beside, in the same run, one device->host copy of
the same size, the TCP transport alone and plain sockets (examples/bench_tcp.py, same connections),
and the same schedule on host buffers; and the host CPU time per call and per chunk; each size under every TCP
lane rule of ``--splits`` (interleaved, ``--split-rounds`` rounds; the first is the table's); then 1 GiB under
several transport settings, each round against that round's plain sockets (``--no-variants`` skips
it). ``--curves``: AllGather / All-to-All 2 MiB..1 GiB on 2 nodes of ``--curve-gpus`` GPUs (on 4
GPUs, 2 x 2 on separate GPUs). Prints a table last; writes internode.json to --out.
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
sys.path.insert(0, str(ROOT / "examples"))

from variants import settings  # noqa: E402  (a run's HOCCL_* settings, restored after)

from hoccl_bench.nodeprocs import run_node_processes  # noqa: E402
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402
from hoccl_runtime.net.executor import ring_slots  # noqa: E402


def inputs_for(plan, r):
    return np.random.default_rng([r, 11]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)


def node_body(node, exchange, plan_json, lanes, slots, reps, host, variant=""):
    """One node. ``host``: the same schedule on host buffers (HostNodeExecutor): the network alone.
    ``variant`` (diagnostics, wrong results): "no-d2h" skips the sender's staging copies, "no-h2d" the
    receiver's landing copies, "no-copies" both (on host buffers too: the protocol and transport alone)."""
    from hoccl_compiler.codec import plan_from_json
    from hoccl_runtime.net.executor import GpuNodeExecutor, HostNodeExecutor

    if not host:
        import cupy as cp

    plan = plan_from_json(plan_json)
    L = plan.topology.gpus_per_node
    bufs = {}
    for r in range(node * L, (node + 1) * L):
        if host:
            bufs[r] = (inputs_for(plan, r), np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8))
            continue
        # one GPU per rank when there are enough (4 GPUs: 2 nodes x 2 on separate GPUs), else the node's
        # local rank i on GPU i (2 GPUs: 4 ranks on 2 GPUs), and node n on GPU n for 1 GPU per node; on one GPU
        # every rank shares it (correctness only: its copies between ranks are same-GPU copies)
        gpus = cp.cuda.runtime.getDeviceCount()
        with cp.cuda.Device((r if gpus >= plan.num_ranks else (r % L if L > 1 else node)) % gpus):
            bufs[r] = (cp.asarray(inputs_for(plan, r)), cp.full(plan.ranks.output_bytes[r], 0xA5, cp.uint8))
    cls = HostNodeExecutor if host else GpuNodeExecutor
    if host and variant == "no-copies":  # the host executor's protocol without its copies (diagnostics)
        cls = type("NoCopies", (HostNodeExecutor,), {"_stage_out": lambda self, *a: None,
                                                     "_land": lambda self, *a: None})
    elif variant in ("no-d2h", "no-h2d", "no-copies"):
        # the copies are enqueued up front, gated (GpuNodeExecutor.prepare): the skipped ones are left out there,
        # their gates and done counters stay, so the protocol runs unchanged
        skipped = {"no-d2h": {"send"}, "no-h2d": {"recv"}, "no-copies": {"send", "recv"}}[variant]

        class NoCopy:  # the CUDA runtime, less its copies
            def __init__(self, rt):
                self.rt = rt

            def __getattr__(self, name):
                return (lambda *a: None) if name == "memcpyAsync" else getattr(self.rt, name)

        def gated(self, side, kind, *a):
            if kind not in skipped:
                return GpuNodeExecutor._gated(self, side, kind, *a)
            real, self._rt = self._rt, NoCopy(self._rt)
            try:
                return GpuNodeExecutor._gated(self, side, kind, *a)
            finally:
                self._rt = real

        cls = type("Skipping", (GpuNodeExecutor,), {"_gated": gated})
    transport = cls.make_transport(plan, node, lanes=lanes, open=True)  # one host's benchmark
    ex = cls(plan, node, bufs, transport, slots=slots, timeout_s=60)
    ex.connect(exchange(transport.listen()))
    ex.run()
    outs = {r: (bufs[r][1] if host else cp.asnumpy(bufs[r][1])).tobytes() for r in bufs}
    times, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        ex.run()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    ex.close()  # leaves the other nodes (a reusable executor's last run), frees what it holds
    transport.close()
    return {"outputs": outs if reps == 0 else {}, "seconds": times, "cpu": cpu}


def slowest_median(results, reps):
    """The median over repeats of the slowest node's seconds (a transfer ends when its last node does)."""
    return statistics.median(max(results[n]["seconds"][i] for n in results) for i in range(reps))


def time_curves(kinds, gpus_per_node, lanes, chunk, sizes=(2 << 20, 8 << 20, 32 << 20, 128 << 20, 512 << 20, 1 << 30),
                host=False):
    """AllGather / All-to-All on 2 nodes of ``gpus_per_node`` GPUs by total size: rows with algbw (total
    bytes / time, median of the slowest node). ``host``: the same schedule on host buffers (a CPU check)."""
    rows = []
    for kind in kinds:
        if kind not in ("allgather", "alltoall"):
            raise SystemExit(f"--curves {kind!r}: choose from allgather, alltoall")
        topo = make_topology("h200x2", nodes=2, gpus_per_node=gpus_per_node)
        G = topo.num_gpus
        for size in sizes:
            total = size // G * G  # every rank's share the same
            plan = compile_plan(topo, CollectiveSpec(kind=kind, size_bytes=total),
                                CompileOptions(chunk_bytes=min(chunk, total // G), baselines=False,
                                               multicast=False))  # the network executors run unicast plans
            reps = 5 if size <= (128 << 20) else 3
            res = run_nodes(plan, lanes=lanes, slots=ring_slots(plan.options.chunk_bytes), reps=reps, host=host)
            t = slowest_median(res, reps)
            rows.append(dict(op=kind, impl="hoccl-host-tcp" if host else "hoccl-gpu-tcp", size=total, seconds=t,
                             gbps=total / t / 1e9, nodes=2, gpus_per_node=gpus_per_node, lanes=lanes,
                             cpu_us_per_call=statistics.median(res[0]["cpu"]) * 1e6))
            print(f"{kind} {total >> 20} MiB done", flush=True)
    return rows


def run_nodes(plan, lanes=8, slots=4, reps=0, host=False, variant="", env=None):
    """Every node's process; ``env``: settings the node processes' transports read (set for this run only)."""
    with settings(env or {}):
        return run_node_processes(node_body, plan.topology.nodes,
                                  (plan.model_dump_json(), lanes, slots, reps, host, variant), timeout_s=300)


def check(plan) -> bool:
    results = run_nodes(plan, lanes=2, slots=2)
    got = {r: np.frombuffer(b, np.uint8) for res in results.values() for r, b in res["outputs"].items()}
    want = replay(plan, [inputs_for(plan, r) for r in range(plan.num_ranks)]).outputs
    return all(np.array_equal(got[r], want[r]) for r in range(plan.num_ranks))


def d2h_alone(size, reps):
    """A device->host copy of `size` into pinned memory (one copy engine)."""
    import cupy as cp

    from hoccl_runtime._cuda import host_free, host_mapped_alloc

    with cp.cuda.Device(0):
        src = cp.empty(size, cp.uint8)
        ptr = host_mapped_alloc(size)
        s = cp.cuda.Stream(non_blocking=True)
        d2h = []
        for _ in range(reps):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(s)
            cp.cuda.runtime.memcpyAsync(ptr, src.data.ptr, size, 4, s.ptr)
            end.record(s)
            end.synchronize()
            d2h.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        host_free(ptr)
    return statistics.median(d2h)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--check-only", action="store_true")
    p.add_argument("--lanes", type=int, default=8)
    p.add_argument("--chunk", default="8MiB")
    p.add_argument("--variants", action=argparse.BooleanOptionalAction, default=True,
                   help="also time 1 GiB with other transport settings and chunk sizes")
    p.add_argument("--rounds", type=int, default=3, help="rounds of the variants (interleaved)")
    p.add_argument("--curves", default="", help="also time these collectives 2 MiB..1 GiB (allgather,alltoall) "
                   "on 2 nodes of --curve-gpus GPUs each")
    p.add_argument("--curve-gpus", type=int, default=1, help="GPUs per node of the --curves runs")
    p.add_argument("--splits", default="balance,idle", help="TCP lane rules (HOCCL_TCP_SPLIT) the size curve "
                   "compares, interleaved; the first is the table's")
    p.add_argument("--split-rounds", type=int, default=2, help="rounds of the lane rules per size")
    p.add_argument("--out", default=os.environ.get("OUT", "results"))
    args = p.parse_args(argv)
    splits = [x for x in args.splits.split(",") if x]
    from hoccl_compiler import parse_size

    checks = {}
    import cupy as cp

    gpus = cp.cuda.runtime.getDeviceCount()
    configs = [(2, 1), (2, 2)] + ([(2, gpus // 2)] if gpus >= 8 else [])  # 8 GPUs: 2 nodes x 4 as well
    for nodes, gpn in configs:
        topo = make_topology("h200x2", nodes=nodes, gpus_per_node=gpn)
        G = nodes * gpn
        specs = {
            "allgather": CollectiveSpec(kind="allgather", size_bytes=G * 1_000_003),
            "alltoall": CollectiveSpec(kind="alltoall", size_bytes=G * 777_777),
            "alltoallv": CollectiveSpec(kind="alltoallv", matrix=tuple(
                tuple(0 if i == j else (i * 7 + j * 3 + 1) * 99_991 for j in range(G)) for i in range(G))),
            "sendrecv": CollectiveSpec(kind="sendrecv", pairs=((0, G - 1, 3_000_001), (G - 1, 0, 17))),
        }
        for name, spec in specs.items():
            plan = compile_plan(topo, spec, CompileOptions(chunk_bytes=256 << 10, baselines=False))
            checks[f"{nodes}x{gpn} {name}"] = ok = check(plan)
            print(f"{nodes} nodes x {gpn} GPUs {name}: {'OK' if ok else 'WRONG'}", flush=True)
    if args.check_only:
        print("INTERNODE " + ("ALL OK" if all(checks.values()) else "FAILED"))
        return 0 if all(checks.values()) else 1
    rows = []
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    chunk = parse_size(args.chunk)
    for size in (2 << 20, 8 << 20, 32 << 20, 128 << 20, 512 << 20, 1 << 30):
        plan = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),)),
                            CompileOptions(chunk_bytes=min(chunk, size), baselines=False))
        reps = 5 if size <= (128 << 20) else 3
        slots = ring_slots(plan.options.chunk_bytes)  # the GPU executor's default ring (256 MiB)
        by_split = {}
        for _ in range(args.split_rounds):  # the lane rules interleaved, each round every rule once
            for split in splits:
                res = run_nodes(plan, lanes=args.lanes, slots=slots, reps=reps, env={"HOCCL_TCP_SPLIT": split})
                by_split.setdefault(split, []).append(slowest_median(res, reps))
        t = statistics.median(by_split[splits[0]])
        cpu = statistics.median(res[0]["cpu"])
        n_chunks = -(-size // min(chunk, size))
        copy = d2h_alone(size, 3)
        net = run_nodes(plan, lanes=args.lanes, slots=slots, reps=reps, host=True)
        t_net = slowest_median(net, reps)
        # the network alone, same run, same connections: plain sockets, and the TCP transport host -> host
        sys.path.insert(0, str(ROOT / "examples"))
        import bench_tcp

        t_raw, t_transport = bench_tcp.raw(args.lanes, size), bench_tcp.hoccl(args.lanes, size)
        rows.append(dict(op="sendrecv", impl="hoccl-gpu-tcp", size=size, seconds=t, gbps=size / t / 1e9,
                         d2h_seconds=copy, host_path_seconds=t_net, raw_socket_seconds=t_raw,
                         transport_seconds=t_transport, of_raw_sockets=t_raw / t, cpu_us_per_call=cpu * 1e6,
                         cpu_us_per_chunk=cpu * 1e6 / n_chunks, chunks=n_chunks, lanes=args.lanes,
                         split=splits[0], by_split={k: statistics.median(v) for k, v in by_split.items()},
                         by_split_rounds=by_split))
        print(f"size {size >> 20} MiB: GPU->GPU {t * 1e3:.2f} ms, transport {t_transport * 1e3:.2f} ms, by lane rule "
              + ", ".join(f"{k} {statistics.median(v) * 1e3:.2f} ms" for k, v in by_split.items()), flush=True)
    kinds = [k for k in args.curves.split(",") if k]
    curves = time_curves(kinds, args.curve_gpus, args.lanes, chunk) if kinds else []
    variants = []
    if args.variants:  # 1 GiB: what the GPU path loses against plain sockets, and to which setting
        import bench_tcp

        size = 1 << 30
        # rounds interleave the settings (the shared host drifts); each round times plain sockets first and
        # every setting against that round's sockets; medians over rounds
        configs = (("default", 8 << 20, "", {}),
                   ("never split a chunk", 8 << 20, "", {"HOCCL_TCP_MIN_PART": str(8 << 20)}),
                   ("lanes: idle share (old rule)", 8 << 20, "", {"HOCCL_TCP_SPLIT": "idle"}),
                   ("lanes: balance, slack 0.25", 8 << 20, "", {"HOCCL_TCP_SPLIT_SLACK": "0.25"}),
                   ("fixed 8 MiB socket buffers", 8 << 20, "", {"HOCCL_TCP_SOCKET_BUFFER": str(8 << 20)}),
                   ("16 MiB chunks", 16 << 20, "", {}),
                   ("no staging copies", 8 << 20, "no-copies", {}))
        got: dict[str, list] = {c[0]: [] for c in configs}
        for _ in range(args.rounds):
            t_raw = bench_tcp.raw(args.lanes, size)
            for label, chunk, what, env in configs:
                plan = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),)),
                                    CompileOptions(chunk_bytes=chunk, baselines=False))
                res = run_nodes(plan, lanes=args.lanes, slots=ring_slots(chunk), reps=3, variant=what, env=env)
                t = slowest_median(res, 3)
                got[label].append((t, t_raw, statistics.median(res[0]["cpu"])))
                print(f"  {label}: {t * 1e3:.2f} ms, sockets {t_raw * 1e3:.2f} ms", flush=True)
            print("variants: round done", flush=True)
        for label, chunk, what, env in configs:
            samples = got[label]
            variants.append(dict(setting=label, chunk=chunk, slots=ring_slots(chunk), lanes=args.lanes,
                                 variant=what, env=env, gpu_seconds=statistics.median(s[0] for s in samples),
                                 raw_socket_seconds=statistics.median(s[1] for s in samples),
                                 of_raw_sockets=statistics.median(s[1] / s[0] for s in samples),
                                 per_round=[s[1] / s[0] for s in samples],
                                 cpu_us_per_call=statistics.median(s[2] for s in samples) * 1e6))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "internode.json").write_text(json.dumps(dict(variants=variants,
        kind="internode", date=time.strftime("%Y-%m-%d %H:%M"),
        gpu=cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), driver=cp.cuda.runtime.driverGetVersion(),
        checks=checks, rows=rows + curves), indent=1))
    print(f"checks: {'ALL OK' if all(checks.values()) else checks}")
    print(f"{'size':>9} {'GB/s':>7} {'GPU->GPU ms':>12} {'D2H ms':>8} {'transport ms':>13} {'sockets ms':>11} "
          f"{'of sockets':>11} {'cpu us/call':>12} {'cpu us/chunk':>13}")
    for r in rows:
        print(f"{r['size'] >> 20:>5} MiB {r['gbps']:7.2f} {r['seconds'] * 1e3:12.2f} {r['d2h_seconds'] * 1e3:8.2f} "
              f"{r['transport_seconds'] * 1e3:13.2f} {r['raw_socket_seconds'] * 1e3:11.2f} {r['of_raw_sockets']:11.2f} "
              f"{r['cpu_us_per_call']:12.0f} {r['cpu_us_per_chunk']:13.1f}")
    if len(splits) > 1:
        print("GPU->GPU ms by TCP lane rule (HOCCL_TCP_SPLIT; median of the rounds, then every round):")
        for r in rows:
            cells = "  ".join(f"{k} {v * 1e3:8.2f} ({' '.join(f'{x * 1e3:.2f}' for x in r['by_split_rounds'][k])})"
                              for k, v in r["by_split"].items())
            print(f"{r['size'] >> 20:>5} MiB  {cells}")
    if curves:
        print(f"2 nodes x {args.curve_gpus} GPUs ({args.lanes} lanes per connection), algbw = total bytes / time:")
        for r in curves:
            print(f"{r['op']:>9} {r['size'] >> 20:>5} MiB {r['gbps']:7.2f} GB/s {r['seconds'] * 1e3:9.2f} ms "
                  f"cpu {r['cpu_us_per_call'] / 1e3:8.1f} ms/call")
    if variants:
        print(f"1 GiB GPU->GPU by setting ({args.lanes} lanes), each round against that round's plain sockets:")
        print(f"{'setting':>28} {'GPU->GPU ms':>12} {'sockets ms':>11} {'of sockets':>11} {'per round':>22} "
              f"{'cpu ms/call':>12}")
        for v in variants:
            rounds = " ".join(f"{x:.2f}" for x in v["per_round"])
            print(f"{v['setting']:>28} {v['gpu_seconds'] * 1e3:12.2f} {v['raw_socket_seconds'] * 1e3:11.2f} "
                  f"{v['of_raw_sockets']:11.2f} {rounds:>22} {v['cpu_us_per_call'] / 1e3:12.1f}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
