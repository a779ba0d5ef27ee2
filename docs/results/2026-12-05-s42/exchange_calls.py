"""Session 42: the caller's side of a 1F1B exchange call (1 MiB each way, batch_isend_irecv) through the network
communicator on the CPU VM, CUDA faked in host memory (tests/support/fake_cuda.py), two ranks in threads, the proxy
in a process: median us per call (rank 0 under cProfile, rank 1 not) and Python function calls per call, of
hoccl_runtime's and of the fake CUDA's (each fake driver call a few frames). Not a GPU figure: the fake's streams are
Python threads sharing the GIL with the callers. Run from the checkout's root with HOCCL_NET_ONE_STREAM=0 / 1:
    HOCCL_NET_ONE_STREAM=1 python3 docs/results/2026-12-05-s42/exchange_calls.py 400
Output: exchange_calls.txt."""
import cProfile, pstats, sys, time, io
sys.path.insert(0, "tests/support"); sys.path.insert(0, ".")
import numpy as np
import fake_cuda
from fake_cuda import dev

class MP:  # a minimal monkeypatch
    def __init__(self): self.undo = []
    def setattr(self, obj, name, value=None, raising=True):
        if isinstance(obj, str):
            mod, attr = obj.rsplit(".", 1); import importlib; o = importlib.import_module(mod); obj, name, value = o, attr, name
        self.undo.append((obj, name, getattr(obj, name, None))); setattr(obj, name, value)
    def setitem(self, d, k, v): d[k] = v
    def setenv(self, k, v): import os; os.environ[k] = v
    def delenv(self, k, raising=True): import os; os.environ.pop(k, None)
    def syspath_prepend(self, p): sys.path.insert(0, p)
fake_cuda.install(MP(), async_streams=True)
from hoccl_runtime.comm.net import NetCommunicator
store = fake_cuda.Store()
N = int(sys.argv[1]) if len(sys.argv) > 1 else 300
out = {}
def body(comm, r):
    a = np.ones(1 << 20, np.uint8) * r; b = np.zeros(1 << 20, np.uint8)
    da, db = dev(a, r), dev(b, r)
    for _ in range(20):
        comm.batch_isend_irecv([("send", da, 1 - r), ("recv", db, 1 - r)], stream=7)
    comm.synchronize()
    pr = cProfile.Profile() if r == 0 else None
    t = []
    for i in range(N):
        t0 = time.perf_counter()
        if pr: pr.enable()
        comm.batch_isend_irecv([("send", da, 1 - r), ("recv", db, 1 - r)], stream=7)
        if pr: pr.disable()
        t.append(time.perf_counter() - t0)
        if i % 4 == 3: comm.synchronize()
    comm.synchronize()
    out[r] = (np.median(t) * 1e6, pr)
fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=30, chunk_bytes=2 << 20, lanes=2), body)
print("median us per call (cProfile on for rank 0)", {r: round(v[0], 1) for r, v in out.items()})
st = pstats.Stats(out[0][1]); print("function calls per call:", st.total_calls / N)
s = io.StringIO(); pstats.Stats(out[0][1], stream=s).sort_stats("tottime").print_stats(25); print(s.getvalue()[:6000])
ours = sum(v[1] for k, v in st.stats.items() if "hoccl_runtime" in k[0])
fake = sum(v[1] for k, v in st.stats.items() if "fake_cuda" in k[0])
print("calls per call: hoccl_runtime", ours / N, "fake_cuda", fake / N)
