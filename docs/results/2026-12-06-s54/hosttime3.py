"""Session 54 (run 1): session 53's hosttime2.py with the three big parts of a HOCCL AllGather call split further,
to tell Python from system and driver calls inside a training step. Besides hosttime2's rows: inside
``GpuNodeExecutor.prepare`` its checks (``_fits``, ``_checked_bounds``, ``_check_buffers``), the kept list's key and
issue (``Templates.key`` / ``Templates.issue``); inside ``ProcessProxy.submit`` ``_trim``, ``encode`` and
``ProcessProxy.send`` (pickling and the write), and in that the socket write alone (``Connection.send_bytes``);
inside ``launch_deferred`` each kept launch list, by how many driver calls it makes ("launch list (N ops: M memcpy,
K memops)"), so that a driver call's own cost inside the step reads off. Same output as hosttime2.py:
HOSTTIME_OUT.rankN.txt, per variant and wrapped function, calls, median and mean us.
Run 3 adds NativeCalls.call (a kept call in one C call, HOCCL_NET_NATIVE_CALL) and its checks (kept_list).
Usage (under torchrun / scripts/tcp-nodes.sh): hosttime3.py SCRIPT [ARGS...]."""
import atexit
import functools
import os
import runpy
import statistics
import sys
import time
from collections import defaultdict
from multiprocessing.connection import Connection

from torch.distributed.fsdp._fully_shard import _fsdp_collectives as coll
from torch.distributed.fsdp._fully_shard import _fsdp_param_group as pgm

import hoccl_runtime.net.proxyproc as proxyproc
import hoccl_runtime.net.template as template
from hoccl_runtime.comm.net import NetCommunicator
from hoccl_runtime.launch import Device, Memcpy, Memops, Restore
from hoccl_runtime.net.gpu import GpuNodeExecutor
from hoccl_runtime.net.host import HostNodeExecutor
from hoccl_runtime.net.kept import NativeCalls
from hoccl_runtime.net.proxyproc import ProcessProxy
from hoccl_runtime.torch._fsdp import HocclAllGather

times: dict = defaultdict(list)
stepping = ["-"]  # the variant whose FSDP param group is in one of its steps (the training thread's, one at a time)


def variant_of_group(group) -> str:
    return "hoccl" if isinstance(getattr(group, "_all_gather_comm", None), HocclAllGather) else "nccl"


def timed_call(fn, label, variant=None):
    @functools.wraps(fn)
    def timed(*a, **k):
        v = variant(a[0]) if variant else stepping[0]
        was, stepping[0] = stepping[0], v
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            times[(v, label)].append(time.perf_counter() - t)
            stepping[0] = was
    return timed


def wrap(cls, name, variant=None, label=None):
    raw = next(c.__dict__[name] for c in cls.__mro__ if name in c.__dict__)  # inherited ones too
    static = isinstance(raw, staticmethod)
    fn = raw.__func__ if static else raw
    t = timed_call(fn, label or f"{cls.__name__}.{name}", None if static else variant)
    setattr(cls, name, staticmethod(t) if static else t)


for n in ("pre_forward", "post_forward", "pre_backward", "post_backward"):
    wrap(pgm.FSDPParamGroup, n, variant_of_group)
for n in ("allocate", "__call__"):
    wrap(HocclAllGather, n, lambda self: "hoccl")
    wrap(coll.DefaultAllGather, n, lambda self: "nccl")
for n in ("foreach_all_gather", "foreach_all_gather_copy_out"):  # as the param group's module imported them
    setattr(pgm, n, timed_call(getattr(pgm, n), n))

hoccl = lambda self: "hoccl"  # noqa: E731
for cls, names in ((NetCommunicator, ("all_gather_into_tensor", "_bound_ahead", "_plan", "_buffers")),
                   (GpuNodeExecutor, ("prepare", "launch_deferred", "_check_buffers", "_checked_bounds")),
                   (HostNodeExecutor, ("_fits",)), (ProcessProxy, ("submit", "_trim", "send")),
                   (template.Templates, ("key", "issue")), (template.RunTemplate, ("issue",)),
                   (NativeCalls, ("call",)), (GpuNodeExecutor, ("kept_list",))):
    for n in names:
        wrap(cls, n, hoccl)
wrap(Connection, "send_bytes", hoccl, "Connection.send_bytes")
proxyproc.encode = timed_call(proxyproc.encode, "proxyproc.encode")

_compile = template.compile_launch


def counted_compile(ops):
    kinds = [type(op) for op in ops if type(op) not in (Device, Restore)]
    label = (f"launch list ({len(kinds)} ops: {kinds.count(Memcpy)} memcpy, {kinds.count(Memops)} memops, "
             f"{len(kinds) - kinds.count(Memcpy) - kinds.count(Memops)} other)")
    return timed_call(_compile(ops), label)


template.compile_launch = counted_compile


def report():
    rank = os.environ.get("RANK", "0")
    with open(f"{os.environ.get('HOSTTIME_OUT', '/tmp/hosttime')}.rank{rank}.txt", "w") as f:
        f.write(f"{'variant':8s} {'function':52s} {'calls':>7s} {'median us':>10s} {'mean us':>9s}\n")
        for (v, name), t in sorted(times.items()):
            f.write(f"{v:8s} {name:52s} {len(t):7d} {statistics.median(t) * 1e6:10.1f} "
                    f"{statistics.fmean(t) * 1e6:9.1f}\n")


atexit.register(report)
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
