"""Session 68: hr.execute handed bad arguments (sizes, ranks, pair shapes, host memory, streams of other types,
plans of other types, buffers that share bytes) with CUDA faked in host memory (tests/support/fake_cuda.py); prints
each case's outcome, "!!!" before any exception that is not a HocclError.  python fuzz_execute.py (from the repo)"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "support"))
import fake_cuda  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

fake_cuda.install(pytest.MonkeyPatch())
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.ir import CompileOptions
from hoccl_runtime.interop import DeviceBuffer
from hoccl_runtime.executor import Executor
from hoccl_runtime.errors import HocclError
import hoccl_runtime as hr

plans = {k: compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind=k, size_bytes=4096), CompileOptions(baselines=False))
         for k in ("allgather", "alltoall", "broadcast")}
keep = []
def buf(n, dev):
    a = np.zeros(max(n,1), np.uint8); keep.append(a); return DeviceBuffer(a.ctypes.data, n, dev)
def good(plan):
    return {r: (buf(plan.ranks.input_bytes[r], r), buf(plan.ranks.output_bytes[r], r)) for r in range(2)}
cases = []
for kind, plan in plans.items():
    g = good(plan)
    cases += [
        (kind, "ok", lambda p=plan, g=g: hr.execute(p, g, {0: 7, 1: 8})),
        (kind, "small in", lambda p=plan: hr.execute(p, {0: (buf(p.ranks.input_bytes[0]-1, 0), buf(p.ranks.output_bytes[0], 0)), 1: good(p)[1]}, {0: 7, 1: 8})),
        (kind, "big out", lambda p=plan: hr.execute(p, {0: (buf(p.ranks.input_bytes[0], 0), buf(p.ranks.output_bytes[0]+512, 0)), 1: good(p)[1]}, {0: 7, 1: 8})),
        (kind, "missing rank", lambda p=plan: hr.execute(p, {0: good(p)[0]}, {0: 7})),
        (kind, "extra rank", lambda p=plan: hr.execute(p, {**good(p), 5: good(p)[0]}, {0: 7, 1: 8, 5: 9})),
        (kind, "rank -1", lambda p=plan: hr.execute(p, {0: good(p)[0], -1: good(p)[1]}, {0: 7, -1: 8})),
        (kind, "str rank", lambda p=plan: hr.execute(p, {"0": good(p)[0], 1: good(p)[1]}, {0: 7, 1: 8})),
        (kind, "None pair", lambda p=plan: hr.execute(p, {0: None, 1: None}, {0: 7, 1: 8})),
        (kind, "one-tuple", lambda p=plan: hr.execute(p, {0: (good(p)[0][0],), 1: good(p)[1]}, {0: 7, 1: 8})),
        (kind, "3-tuple", lambda p=plan: hr.execute(p, {0: good(p)[0] + (1,), 1: good(p)[1]}, {0: 7, 1: 8})),
        (kind, "int buffer", lambda p=plan: hr.execute(p, {0: (5, 6), 1: good(p)[1]}, {0: 7, 1: 8})),
        (kind, "host numpy", lambda p=plan: hr.execute(p, {0: (np.zeros(p.ranks.input_bytes[0], np.uint8), np.zeros(p.ranks.output_bytes[0], np.uint8)), 1: good(p)[1]}, {0: 7, 1: 8})),
        (kind, "wrong device", lambda p=plan: hr.execute(p, {0: (buf(p.ranks.input_bytes[0], 1), buf(p.ranks.output_bytes[0], 1)), 1: good(p)[1]}, {0: 7, 1: 8})),
        (kind, "streams missing", lambda p=plan: hr.execute(p, good(p), {0: 7})),
        (kind, "streams str", lambda p=plan: hr.execute(p, good(p), "x")),
        (kind, "streams list", lambda p=plan: hr.execute(p, good(p), [7, 8])),
        (kind, "stream str", lambda p=plan: hr.execute(p, good(p), {0: "s", 1: 8})),
        (kind, "buffers list", lambda p=plan: hr.execute(p, [good(p)[0], good(p)[1]], {0: 7, 1: 8})),
        (kind, "plan str", lambda p=plan: hr.execute("nope.json", good(p), {0: 7, 1: 8})),
        (kind, "plan dict", lambda p=plan: hr.execute({"a": 1}, good(p), {0: 7, 1: 8})),
        (kind, "plan None", lambda p=plan: hr.execute(None, good(p), {0: 7, 1: 8})),
        (kind, "overlap in/out", lambda p=plan: (lambda g: hr.execute(p, {0: (g[0][0], DeviceBuffer(g[0][0].ptr, p.ranks.output_bytes[0], 0)), 1: g[1]}, {0: 7, 1: 8}))(good(p))),
    ]
for kind, name, fn in cases:
    try:
        fn(); print(f"{kind:10s} {name:16s} OK")
    except HocclError as e:
        print(f"{kind:10s} {name:16s} {type(e).__name__}: {str(e)[:230]}")
    except Exception as e:
        print(f"{kind:10s} {name:16s} !!! {type(e).__name__}: {str(e)[:230]}")
