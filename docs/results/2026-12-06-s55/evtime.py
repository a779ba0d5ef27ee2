"""Session 55: each FSDP AllGather's time on the GPU, HOCCL's and NCCL's, inside training. Wraps the AllGather object
FSDP2 calls on its all-gather stream (hoccl_runtime.torch._fsdp.HocclAllGather, torch's DefaultAllGather) with a
CUDA event recorded on that stream before the call and one after it (FSDP unshards synchronously by default, so for
NCCL too the second event follows the collective's end on that stream). At exit: per variant and AllGather size, the
GPU time from the stream reaching the call to its end, and from the end of the call before (of that variant) to
this one's start, p10 / p50 / p90 us; written to EVTIME_OUT.rankN.txt.
Usage (under torchrun / scripts/tcp-nodes.sh): evtime.py SCRIPT [ARGS...]."""
import atexit
import functools
import os
import runpy
import sys
from collections import defaultdict

import torch
from torch.distributed.fsdp._fully_shard import _fsdp_collectives as coll

from hoccl_runtime.torch._fsdp import HocclAllGather

marks: list = []  # (variant, bytes, start event, end event)


def wrapped(cls, variant):
    fn = cls.__call__

    @functools.wraps(fn)
    def call(self, output_tensor, input_tensor, *a, **k):
        s = torch.cuda.current_stream()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record(s)
        out = fn(self, output_tensor, input_tensor, *a, **k)
        e1.record(s)
        marks.append((variant, output_tensor.numel() * output_tensor.element_size(), e0, e1))
        return out
    cls.__call__ = call


wrapped(HocclAllGather, "hoccl")
wrapped(coll.DefaultAllGather, "nccl")


def report() -> None:
    torch.cuda.synchronize()
    rows = defaultdict(lambda: ([], []))
    last: dict = {}
    for v, n, e0, e1 in marks:
        rows[(v, n)][0].append(e0.elapsed_time(e1) * 1e3)
        if v in last:
            rows[(v, n)][1].append(last[v].elapsed_time(e0) * 1e3)
        last[v] = e1

    def q(x):
        x = sorted(x)
        return " ".join(f"{x[int(p * (len(x) - 1))]:7.0f}" for p in (.1, .5, .9)) if x else "-"
    lines = ["variant  bytes      calls   on the GPU p10/p50/p90 us    since the call before p10/p50/p90 us"]
    for (v, n), (d, g) in sorted(rows.items()):
        lines.append(f"{v:7s} {n:10d} {len(d):6d}   {q(d)}    {q(g)}")
    rank = os.environ.get("RANK", "0")
    with open(f"{os.environ.get('EVTIME_OUT', '/tmp/evtime')}.rank{rank}.txt", "w") as f:
        f.write("\n".join(lines) + "\n")


atexit.register(report)
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
