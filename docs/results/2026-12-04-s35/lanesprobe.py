"""Session 35 (the 2-core CPU VM): 150 one-way 1 MiB messages back and forth between two ranks (threads, fake CUDA,
each with its network proxy process and TCP between them), from HOCCL_NET_TRACE: per rank the driving loop's longest
poll sleep and longest turn per call, and a call's time from taken to its copies through (medians, the first 30
calls left out). The environment picks the transport's receive mode (HOCCL_TCP_RECEIVE).
    python lanesprobe.py LANES"""
import os, sys, csv, statistics
sys.path[:0] = ["/work/main", "/work/main/tests/support"]
import numpy as np
from _pytest.monkeypatch import MonkeyPatch
import fake_cuda
from fake_cuda import dev
lanes = int(sys.argv[1]); prefix = f"/tmp/lp{lanes}"
os.environ["HOCCL_NET_TRACE"] = prefix
mp = MonkeyPatch()
fake_cuda.install(mp, async_streams=True)
from hoccl_runtime.comm.net import NetCommunicator
store = fake_cuda.Store()
N = 1 << 20
def body(comm, r):
    buf = np.zeros(N, np.uint8)
    for i in range(150):
        if (i + r) % 2 == 0: comm.send(dev(buf, r), 1 - r, stream=7)
        else: comm.recv(dev(buf, r), 1 - r, stream=7)
        comm.synchronize()
    return True
print(fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=60, lanes=lanes), body))
for rank in (0, 1):
    rows = list(csv.DictReader(open(f"{prefix}.rank{rank}.csv")))[30:]
    for col in ("sleep_us", "turn_us"):
        v = sorted(float(x[col]) for x in rows)
        print(lanes, rank, col, "p50 %.0f p90 %.0f" % (v[len(v)//2], v[int(.9*len(v))]))
    d = sorted(float(x["copies_us"]) - float(x["taken_us"]) for x in rows)
    print(lanes, rank, "taken->copies p50 %.0f" % d[len(d)//2])
