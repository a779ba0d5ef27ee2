"""Compiler benchmark: schedule quality at 8/16/64/256/1024 GPUs, 1024-GPU scale, single-node compile time.

    python examples/bench_compiler.py                  # full run (about 10 minutes on 2 cores)
    python examples/bench_compiler.py --gpus 8,16,64   # the quality tables at these sizes only
    python examples/bench_compiler.py --quick          # 16 GPUs only, no scale runs (what the tests run)

Prints markdown tables (docs/benchmarks.md holds a recorded run). Ratios are times over the port model's lower
bound (hoccl_compiler.cost): the plan's stages in the port model alone (the decomposition: target <= 1.05), and
the plan, everything at once and naive rounds under the cost model v2 (chunk starts, serial queues, pipeline
fill and drain, convergence, the call's start and the network transfers' host work), and the same with the host's
costs at 0 (the device side alone).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from workloads import zipf_matrix  # noqa: E402

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402


def workloads(G: int):
    yield "allgather 1 GiB", CollectiveSpec(kind="allgather", size_bytes=(1 << 30) // G * G)
    yield "alltoall 1 GiB", CollectiveSpec(kind="alltoall", size_bytes=(1 << 30) // G * G)
    mat = zipf_matrix(G, mean_pair_bytes=(1 << 30) // G, seed=G)
    yield "alltoallv Zipf(1.1)", CollectiveSpec(kind="alltoallv", matrix=tuple(map(tuple, mat.tolist())))
    yield "sendrecv i->i+1 256 MiB", CollectiveSpec(kind="sendrecv", size_bytes=256 << 20)


# the host's part of v2 (the calls, the staging, the network transfers' protocol work), for the device-side table
HOST_COSTS = dict(call_us=0.0, net_call_us=0.0, net_flow_us=0.0, net_node_flow_us=0.0, stage_sync_us=0.0,
                  net_staging_gbps=0.0)


def topology(G: int, device_only: bool = False, preset: str = "paper-h800"):
    topo = make_topology(preset, nodes=G // 8)
    if device_only:
        topo = topo.model_copy(update={"costs": topo.costs.model_copy(update=HOST_COSTS)})
    return topo


# with the host's costs at 0 nothing pays for a stage, so a skewed peel is kept whole: above 256 GPUs its
# thousands of maximum matchings take hours on 2 cores (the default cuts its tail and never finds them)
DEVICE_ONLY_ZIPF_MAX_GPUS = 256


def quality(gpu_counts: list[int], device_only: bool = False) -> list[dict]:
    rows = []
    for G in gpu_counts:
        topo = topology(G, device_only)
        for name, spec in workloads(G):
            if device_only and "Zipf" in name and G > DEVICE_ONLY_ZIPF_MAX_GPUS:
                rows.append(dict(gpus=G, workload=name, skipped="not run: the whole peel (see the script)"))
                continue
            start = time.perf_counter()
            plan = compile_plan(topo, spec)
            seconds = time.perf_counter() - start
            rep = plan.report
            rows.append(dict(gpus=G, workload=name, stages=len(plan.stages), ratio=rep.ratio,
                             ports=rep.breakdown_s["ports"] / rep.lower_bound_s, chunk=plan.options.chunk_bytes,
                             at_once=rep.baselines.everything_at_once_s / rep.lower_bound_s,
                             naive=float("nan") if rep.baselines.naive_rounds_s is None else
                             rep.baselines.naive_rounds_s / rep.lower_bound_s, seconds=seconds,
                             predicted_ms=rep.predicted_time_s * 1e3))
            print(f"  {G:5d} GPUs  {name:24s} ports {rows[-1]['ports']:.4f} v2 {rep.ratio:.3f}  ({seconds:.1f} s)",
                  file=sys.stderr, flush=True)
    return rows


PEAK = r"""
def peak_mb():  # VmHWM: this process's own peak (ru_maxrss keeps the parent's from before exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
"""
SCALE_CHILD = PEAK + r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, save_plan
from hoccl_compiler.ir import CompileOptions
nodes, out = int(sys.argv[2]), sys.argv[3]
start = time.perf_counter()
plan = compile_plan(make_topology("paper-h800", nodes=nodes), CollectiveSpec(kind="alltoall", size_bytes=1 << 30),
                    CompileOptions(baselines=sys.argv[4] == "1"))
compiled = time.perf_counter() - start
save_plan(plan, out)  # compact: the default for plans this large
written = time.perf_counter() - start
save_plan(plan, out + ".gz")
save_plan(plan, out + ".full.gz", encoding="full")
print(json.dumps(dict(compile_s=compiled, compile_write_s=written, stages=len(plan.stages), ratio=plan.report.ratio,
                      json_mb=os.path.getsize(out) / 1e6, gz_mb=os.path.getsize(out + ".gz") / 1e6,
                      full_gz_mb=os.path.getsize(out + ".full.gz") / 1e6,
                      peak_mb=peak_mb())))
"""


PATTERN_CHILD = PEAK + r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from hoccl_compiler import CollectiveSpec, make_topology, save_plan
from hoccl_compiler.pattern import compile_pattern, verify_pattern
from hoccl_compiler.report import bounds
nodes, kind, out = int(sys.argv[2]), sys.argv[3], sys.argv[4]
start = time.perf_counter()
topo = make_topology("paper-h800", nodes=nodes)
pattern = compile_pattern(topo, CollectiveSpec(kind=kind, size_bytes=(1 << 30) // topo.num_gpus * topo.num_gpus))
verify_pattern(pattern)
save_plan(pattern, out)
print(json.dumps(dict(seconds=time.perf_counter() - start, stages=pattern.num_stages, kb=os.path.getsize(out) / 1e3,
                      ratio=pattern.report.ratio,
                      ports=pattern.report.breakdown_s["ports"] / pattern.report.lower_bound_s,
                      traffic=pattern.report.lower_bound_s / bounds(pattern)["lower_bound_s"],
                      multicast=pattern.options.multicast, peak_mb=peak_mb())))
"""


def pattern_scale(nodes: int, kind: str) -> dict:
    """Compile, verify and write a pattern plan of a uniform collective in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", PATTERN_CHILD, str(ROOT), str(nodes), kind,
                              os.path.join(tmp, "p.json.gz")], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


LOAD_CHILD = PEAK + r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from hoccl_compiler import load_plan
start = time.perf_counter()
plan = load_plan(sys.argv[2])
print(json.dumps(dict(load_s=time.perf_counter() - start, peak_mb=peak_mb())))
"""


def scale(nodes: int, baselines: bool) -> dict:
    """Compile and write the uniform All-to-All on ``nodes`` x 8 GPUs in a fresh process, then load its compact
    ``.json.gz`` in another (``load_s`` in that process, ``load_wall_s`` the process's wall time, imports included)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([sys.executable, "-c", SCALE_CHILD, str(ROOT), str(nodes), os.path.join(tmp, "p.json"),
                              "1" if baselines else "0"], capture_output=True, text=True, check=True)
        start = time.perf_counter()
        loaded = subprocess.run([sys.executable, "-c", LOAD_CHILD, str(ROOT), os.path.join(tmp, "p.json.gz")],
                                capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
    load = json.loads(loaded.stdout)
    return {**json.loads(out.stdout), "load_s": load["load_s"], "load_wall_s": wall, "load_peak_mb": load["peak_mb"]}


CLI_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from hoccl_compiler.cli import compile_main, inspect_main
raise SystemExit((compile_main if sys.argv[2] == "compile" else inspect_main)(sys.argv[3:]))
"""


def cli_wall(nodes: int) -> tuple[float, float]:
    """Wall seconds of ``hoccl-compile alltoall --topology paper-h800 --nodes N --size 1GiB --pattern off -o F`` and
    of ``hoccl-inspect F``, each a fresh process as a user runs them (the CLI drops NumPy's hugepage advice; the
    library calls above keep NumPy's default, which a user's process decides)."""
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "p.json")
        for argv in (["compile", "alltoall", "--topology", "paper-h800", "--nodes", str(nodes), "--size", "1GiB",
                      "--pattern", "off", "-o", plan, "-q"], ["inspect", plan]):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", CLI_CHILD, str(ROOT), *argv], capture_output=True, text=True,
                           check=True)
            walls.append(time.perf_counter() - start)
    return walls[0], walls[1]


def single_node_ms(repeats: int = 20) -> float:
    topo = make_topology("paper-h800", nodes=1)
    spec = CollectiveSpec(kind="alltoall", size_bytes=256 << 20)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compile_plan(topo, spec)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def on_demand_ms(repeats: int = 15) -> tuple[float, str]:
    """The runtime's on-demand compile (hoccl_runtime.plans.compile_call: one chunk per transfer, no baselines, no
    byte replay) on one 8-GPU node: the worst median over collectives and sizes 8 KiB .. 1 GiB, and where."""
    from hoccl_runtime.plans import CallKey, compile_call

    topo = make_topology("dgx-h100", nodes=1)
    worst = (0.0, "")
    for kind in ("allgather", "alltoall", "broadcast", "scatter", "gather"):
        for size in (8 << 10, 1 << 20, 64 << 20, 1 << 30):
            key = CallKey(kind, size) if kind in ("allgather", "alltoall") else CallKey(kind, size, root=3)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                compile_call(topo, key, 1 << 40)
                times.append(time.perf_counter() - start)
            med = sorted(times)[len(times) // 2] * 1e3
            worst = max(worst, (med, f"{kind} {size} B"))
    return worst


def multicast_bounds(node_counts: tuple[int, ...] = (1, 2, 4, 16), preset: str = "paper-h800") -> list[dict]:
    """AllGather and Broadcast of 1 GiB on ``preset``, unicast and multicast (the default): each plan's traffic
    bound over the collective's own (cost.collective_bound), the multicast plan's RDMA bytes over the (N - 1) x S
    it needs, and its v2 prediction with the host's costs at 0 (the device side) over the collective bound, with the
    network chunk as hoccl-compile chooses it (``net_chunk_bytes="auto"``) and with one chunk."""
    from hoccl_compiler.cost import collective_bound
    from hoccl_compiler.report import summary

    rows = []
    for kind in ("allgather", "broadcast"):
        for nodes in node_counts:
            topo = make_topology(preset, nodes=nodes)
            spec = CollectiveSpec(kind=kind, size_bytes=1 << 30)
            row = dict(kind=kind, nodes=nodes, preset=preset)
            for mc in (False, True):
                t = topology(topo.num_gpus, device_only=True, preset=preset) if mc else topo
                start = time.perf_counter()
                plan = compile_plan(t, spec, CompileOptions(baselines=False, multicast=mc,
                                                            net_chunk_bytes="auto" if mc else None))
                rep = plan.report
                bound = collective_bound(kind, spec.size_bytes, t, rep.lower_bound_s)
                row["multicast" if mc else "unicast"] = rep.lower_bound_s / bound
                if mc:
                    rdma = summary(plan)["bytes_by_domain"]["rdma"]
                    row["rdma"] = None if nodes == 1 else rdma / ((nodes - 1) * (1 << 30))
                    row["device_v2"] = rep.predicted_time_s / bound
                    row["seconds"] = time.perf_counter() - start
                    row["net_chunk"] = plan.options.net_chunk_bytes
                    one = plan if plan.options.net_chunk_bytes is None else \
                        compile_plan(t, spec, CompileOptions(baselines=False))
                    row["device_v2_one"] = one.report.predicted_time_s / bound
            rows.append(row)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="16 GPUs only, no 1024-GPU run")
    p.add_argument("--gpus", default="8,16,64,256,1024",
                   help="GPU counts of the quality tables, multiples of 8 (default: %(default)s; the skewed-stages "
                        "table stops at 256)")
    args = p.parse_args(argv)
    try:
        gpus = [int(g) for g in args.gpus.split(",") if g]
        if not gpus or any(g < 8 or g % 8 for g in gpus):
            raise ValueError
    except ValueError:
        p.error(f"--gpus {args.gpus!r}: give GPU counts that are multiples of 8 (8 GPUs a node), e.g. 8,16,64")
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; "
          f"date {time.strftime('%Y-%m-%d')}")
    counts = [16] if args.quick else gpus
    print("\nmulticast: AllGather and Broadcast of 1 GiB on paper-h800 and dgx-h100, each plan's traffic bound over "
          "the collective's own (target <= 1.05), the multicast plan's RDMA bytes over (N - 1) x S (target <= 1.05) "
          "and its device-side v2 prediction over the collective bound (target <= 1.15), with the network chunk "
          "hoccl-compile chooses (--net-chunk auto: '-' one chunk) and with one chunk:\n")
    print("| topology | collective | nodes x 8 | unicast: traffic / collective bound | multicast: traffic / collective "
          "bound | multicast: RDMA / ((N - 1) S) | multicast: v2 device side / collective bound | network chunk "
          "| the same, one chunk | compile s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for preset in ("paper-h800", "dgx-h100"):
        for r in multicast_bounds((1, 2) if args.quick else (1, 2, 4, 8, 16), preset):
            rdma = "-" if r["rdma"] is None else f"{r['rdma']:.2f}"
            net = "-" if r["net_chunk"] is None else f"{r['net_chunk'] >> 10} KiB"
            print(f"| {preset} | {r['kind']} | {r['nodes']} | {r['unicast']:.2f} | {r['multicast']:.2f} | {rdma} | "
                  f"{r['device_v2']:.3f} | {net} | {r['device_v2_one']:.3f} | {r['seconds']:.2f} |")
    for device_only in (False, True):
        rows = quality(counts, device_only)
        if device_only:
            print("\nthe same under v2 with the host's costs at 0 (calls, staging, network transfers: the device "
                  "side alone):")
        print("\n| GPUs | workload | stages | chunk | stages in the port model / bound | v2: plan / bound "
              "| v2: everything at once / bound | v2: naive rounds / bound | compile s |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if "skipped" in r:
                print(f"| {r['gpus']} | {r['workload']} | {r['skipped']} | | | | | | |")
                continue
            print(f"| {r['gpus']} | {r['workload']} | {r['stages']} | {r['chunk'] >> 10} KiB | {r['ports']:.4f} | "
                  f"{r['ratio']:.3f} | {r['at_once']:.3f} | {r['naive']:.3f} | {r['seconds']:.2f} |")
    print("\nstages for skewed traffic (--max-extra-time; auto: the cut with the least v2 time), "
          "Zipf(1.1) All-to-Allv:\n")
    print("| GPUs | max extra time | stages | port model / bound | v2 / bound | compile s |")
    print("|---:|---:|---:|---:|---:|---:|")
    exact = []  # the time-optimal peel's plans (max extra time 0): the decomposition's own quality
    for G in [g for g in counts if 16 <= g <= 256]:  # one node has no RDMA stages; 1024 takes too long 4 times
        topo = topology(G)
        mat = zipf_matrix(G, mean_pair_bytes=(1 << 30) // G, seed=G)
        spec = CollectiveSpec(kind="alltoallv", matrix=tuple(map(tuple, mat.tolist())))
        for extra in (0.0, 0.01, 0.05, None):
            start = time.perf_counter()
            plan = compile_plan(topo, spec, CompileOptions(max_extra_time=extra, baselines=False))
            rep = plan.report
            if extra == 0.0:
                exact.append(rep.breakdown_s["ports"] / rep.lower_bound_s)
            print(f"| {G} | {'auto' if extra is None else f'{extra:g}'} | {len(plan.stages)} | "
                  f"{rep.breakdown_s['ports'] / rep.lower_bound_s:.4f} | {rep.ratio:.3f} | "
                  f"{time.perf_counter() - start:.2f} |")
    print(f"\nsingle node (8 GPUs) alltoall compile, median of 20: {single_node_ms():.1f} ms")
    worst_ms, where = on_demand_ms()
    print(f"runtime's on-demand compile (8 GPUs, no byte replay), worst median over 5 collectives x 8 KiB..1 GiB: "
          f"{worst_ms:.2f} ms ({where})")
    if not args.quick:
        s = scale(128, baselines=True)
        print(f"\n1024 GPUs (128 x 8) uniform alltoall 1 GiB: compile {s['compile_s']:.1f} s, compile + write "
              f"{s['compile_write_s']:.1f} s, peak RSS {s['peak_mb']:.0f} MiB, {s['stages']} stages, ratio "
              f"{s['ratio']:.4f}, compact plan {s['json_mb']:.1f} MB (.json) / {s['gz_mb']:.1f} MB (.json.gz); full "
              f"encoding {s['full_gz_mb']:.1f} MB (.json.gz); load_plan of the .json.gz {s['load_s']:.2f} s "
              f"({s['load_wall_s']:.2f} s for the process, peak RSS {s['load_peak_mb']:.0f} MiB)")
        compile_wall, inspect_wall = cli_wall(128)
        print(f"the same through the CLIs (targets 12 s and 3 s): hoccl-compile ... --pattern off -o plan.json "
              f"{compile_wall:.1f} s wall, hoccl-inspect plan.json {inspect_wall:.1f} s wall")
        print("\npattern plans (hoccl_compiler.pattern), uniform collectives of 1 GiB per rank, compile + verify + "
              "write (.json.gz) in a fresh process:\n")
        print("| GPUs | collective | stages | seconds | peak RSS MiB | file KB | port model / bound | v2 / bound | "
              "traffic bound / collective bound |")
        print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for nodes in (512, 2048):
            for kind in ("alltoall", "allgather"):
                r = pattern_scale(nodes, kind)
                print(f"| {nodes * 8} | {kind}{' (multicast)' if r['multicast'] else ''} | {r['stages']} | "
                      f"{r['seconds']:.2f} | {r['peak_mb']:.0f} | {r['kb']:.0f} | {r['ports']:.4f} | "
                      f"{r['ratio']:.1f} | {r['traffic']:.2f} |")
    worst = max([r["ports"] for r in rows if "Zipf" not in r["workload"] and "skipped" not in r] + exact)
    print(f"\nworst stages in the port model / bound (uniform workloads, and Zipf with max extra time 0): {worst:.4f} "
          "(target <= 1.05)")
    return 0 if worst <= 1.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
