"""Session 53 (run 4): session 52's hosttime.py, with the network communicator's own steps inside the AllGather call
timed too: NetCommunicator.all_gather_into_tensor, its _bound_ahead (the wait for at most HOCCL_NET_AHEAD unfinished
calls), _plan and _buffers, GpuNodeExecutor.prepare and launch_deferred, ProcessProxy.submit. Session 52's text:
the training thread's host time inside FSDP2's per-module steps and inside the AllGather call, HOCCL's
and NCCL's, in one invocation of a training example (variants interleave). Wraps, by timing on the host
(perf_counter): FSDPParamGroup.pre_forward / post_forward / pre_backward / post_backward, the AllGather's
allocate() and __call__ (HOCCL's HocclAllGather, torch's DefaultAllGather for NCCL), and inside the param groups'
steps FSDP's foreach_all_gather (copy-in and the call) and foreach_all_gather_copy_out (the copy-out, which run 2's
sampler saw hold HOCCL's steps), attributed to the variant whose param group is stepping. At exit,
HOSTTIME_OUT.rankN.txt: per variant and wrapped function, calls, median and mean us. Usage (under torchrun /
scripts/tcp-nodes.sh): hosttime.py SCRIPT [ARGS...]."""
import atexit
import functools
import os
import runpy
import statistics
import sys
import time
from collections import defaultdict

from torch.distributed.fsdp._fully_shard import _fsdp_collectives as coll
from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pgm

from hoccl_runtime.torch._fsdp import HocclAllGather

times: dict = defaultdict(list)
stepping = ["-"]  # the variant whose FSDP param group is in one of its steps (the training thread's, one at a time)


def variant_of_group(group) -> str:
    return "hoccl" if isinstance(getattr(group, "_all_gather_comm", None), HocclAllGather) else "nccl"


def wrap(cls, name, variant):
    fn = getattr(cls, name)

    @functools.wraps(fn)
    def timed(self, *a, **k):
        v = variant(self)
        was, stepping[0] = stepping[0], v
        t = time.perf_counter()
        try:
            return fn(self, *a, **k)
        finally:
            times[(v, f"{cls.__name__}.{name}")].append(time.perf_counter() - t)
            stepping[0] = was
    setattr(cls, name, timed)


def wrap_function(module, name):
    fn = getattr(module, name)

    @functools.wraps(fn)
    def timed(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            times[(stepping[0], name)].append(time.perf_counter() - t)
    setattr(module, name, timed)


for n in ("pre_forward", "post_forward", "pre_backward", "post_backward"):
    wrap(pgm.FSDPParamGroup, n, variant_of_group)
for n in ("allocate", "__call__"):
    wrap(HocclAllGather, n, lambda self: "hoccl")
    wrap(coll.DefaultAllGather, n, lambda self: "nccl")
for n in ("foreach_all_gather", "foreach_all_gather_copy_out"):  # as the param group's module imported them
    wrap_function(pgm, n)

from hoccl_runtime.comm.net import NetCommunicator  # noqa: E402
from hoccl_runtime.net.gpu import GpuNodeExecutor  # noqa: E402
from hoccl_runtime.net.proxyproc import ProcessProxy  # noqa: E402

for cls, names in ((NetCommunicator, ("all_gather_into_tensor", "_bound_ahead", "_plan", "_buffers")),
                   (GpuNodeExecutor, ("prepare", "launch_deferred")), (ProcessProxy, ("submit",))):
    for n in names:
        wrap(cls, n, lambda self: "hoccl")


def report():
    rank = os.environ.get("RANK", "0")
    with open(f"{os.environ.get('HOSTTIME_OUT', '/tmp/hosttime')}.rank{rank}.txt", "w") as f:
        f.write(f"{'variant':8s} {'function':40s} {'calls':>7s} {'median us':>10s} {'mean us':>9s}\n")
        for (v, name), t in sorted(times.items()):
            f.write(f"{v:8s} {name:40s} {len(t):7d} {statistics.median(t) * 1e6:10.1f} "
                    f"{statistics.fmean(t) * 1e6:9.1f}\n")


atexit.register(report)
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
