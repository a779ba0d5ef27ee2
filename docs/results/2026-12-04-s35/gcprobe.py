"""Session 35 (the 2-core CPU VM): the network proxy processes' garbage collections in a run of AllGathers over
fake CUDA (two ranks as threads, each with its proxy process and TCP between them), from HOCCL_NET_TRACE's gc file:
count, longest and total per generation.
    python gcprobe.py PREFIX CALLS"""
import os, sys, csv
sys.path[:0] = ["/work/main", "/work/main/tests/support"]
import numpy as np
from _pytest.monkeypatch import MonkeyPatch
import fake_cuda
from fake_cuda import dev
prefix = sys.argv[1]
os.environ["HOCCL_NET_TRACE"] = prefix
mp = MonkeyPatch()
fake_cuda.install(mp, async_streams=True)
from hoccl_runtime.comm.net import NetCommunicator
store = fake_cuda.Store()
def body(comm, r):
    for i in range(int(sys.argv[2])):
        n = 4096 * (1 + i % 40)  # 40 sizes: 40 plans
        inp, out = np.full(n, r, np.uint8), np.zeros(2 * n, np.uint8)
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        if i % 20 == 0: comm.synchronize()
    comm.synchronize()
    return True
print(fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=60, chunk_bytes=64 << 10, lanes=2), body))
for rank in (0, 1):
    g = list(csv.DictReader(open(f"{prefix}.rank{rank}.gc.csv")))
    for gen in "012":
        t = [float(x["us"]) for x in g if x["generation"] == gen and x["us"]]
        print(rank, "gen", gen, len(t), "max %.2f ms" % (max(t) / 1e3 if t else 0), "sum %.1f ms" % (sum(t) / 1e3))
