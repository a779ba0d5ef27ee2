"""Session 69: the communicators' calls with bad arguments, CUDA faked in host memory (tests/support/fake_cuda.py),
ranks as threads, the real TCP transport and proxies. Each case is made by every rank (scatter and gather: with a
root whose buffer alone is wrong), then every rank makes a good AllGather. Printed: what each rank raised, and where
the good call after it failed, that too (NEXT; the case list stops there for that rank). A case made wrong on one
rank alone leaves the others in a call it skipped.
Run from the checkout's root: python3 docs/results/2026-12-07-s69/fuzz_comm_args.py {net,intra,nodenet}
Output: fuzz_comm_args.txt."""
import importlib
import os
import sys
import time

sys.path.insert(0, "tests/support")
sys.path.insert(0, ".")
import fake_cuda  # noqa: E402
import numpy as np  # noqa: E402
from fake_cuda import dev  # noqa: E402


class MP:  # the monkeypatch fake_cuda.install takes
    def setattr(self, obj, name, value=None, raising=True):
        if isinstance(obj, str):
            mod, attr = obj.rsplit(".", 1)
            obj, name, value = importlib.import_module(mod), attr, name
        setattr(obj, name, value)

    def setitem(self, d, k, v):
        d[k] = v

    def setenv(self, k, v):
        os.environ[k] = v

    def delenv(self, k, raising=True):
        os.environ.pop(k, None)

    def syspath_prepend(self, p):
        sys.path.insert(0, p)


KIND = sys.argv[1] if len(sys.argv) > 1 else "net"
fake_cuda.install(MP(), async_streams=KIND != "intra")
store = fake_cuda.Store()
U = np.uint8
W = 4 if KIND == "nodenet" else 2
if KIND == "net":
    from hoccl_runtime.comm.net import NetCommunicator

    def make(r):
        return NetCommunicator(r, W, r, store, timeout_s=10, chunk_bytes=64 << 10, lanes=2)
elif KIND == "nodenet":
    from hoccl_runtime.comm.nodenet import NodeNetCommunicator

    def make(r):
        return NodeNetCommunicator(r, W, r % 2, store, gpus_per_node=2, timeout_s=10, chunk_bytes=16 << 10, lanes=2)
else:
    from hoccl_runtime.comm import Communicator

    def make(r):
        return Communicator(r, W, r, store, timeout_s=10)


def gpu(r):
    return r % 2 if KIND == "nodenet" else r


CASES = {
    "allgather, output too small": lambda c, r: c.all_gather_into_tensor(
        dev(np.zeros(1000, U), gpu(r)), dev(np.ones(1024, U), gpu(r)), stream=7),
    "allgather, output too big": lambda c, r: c.all_gather_into_tensor(
        dev(np.zeros(W * 4096, U), gpu(r)), dev(np.ones(1024, U), gpu(r)), stream=7),
    "alltoall, size not a multiple": lambda c, r: c.all_to_all_single(
        dev(np.zeros(W * 500 + 1, U), gpu(r)), dev(np.ones(W * 500 + 1, U), gpu(r)), stream=7),
    "alltoall, input and output differ": lambda c, r: c.all_to_all_single(
        dev(np.zeros(2048, U), gpu(r)), dev(np.ones(1024, U), gpu(r)), stream=7),
    "broadcast, root out of range": lambda c, r: c.broadcast(dev(np.zeros(1024, U), gpu(r)), W + 3, stream=7),
    "broadcast, root -1": lambda c, r: c.broadcast(dev(np.zeros(1024, U), gpu(r)), -1, stream=7),
    "broadcast, root 1.0": lambda c, r: c.broadcast(dev(np.zeros(1024, U), gpu(r)), 1.0, stream=7),
    "broadcast, root True": lambda c, r: c.broadcast(dev(np.zeros(1024, U), gpu(r)), True, stream=7),
    "send to itself": lambda c, r: c.send(dev(np.zeros(1024, U), gpu(r)), r, stream=7),
    "send to rank 7": lambda c, r: c.send(dev(np.zeros(1024, U), gpu(r)), 7, stream=7),
    "recv from -1": lambda c, r: c.recv(dev(np.zeros(1024, U), gpu(r)), -1, stream=7),
    "batch, op 'sned'": lambda c, r: c.batch_isend_irecv([("sned", dev(np.zeros(10, U), gpu(r)), 1 - r % 2)],
                                                         stream=7),
    "stream 'x'": lambda c, r: c.all_gather_into_tensor(
        dev(np.zeros(W * 1024, U), gpu(r)), dev(np.ones(1024, U), gpu(r)), stream="x"),
    "input [1, 2]": lambda c, r: c.all_gather_into_tensor(dev(np.zeros(W * 1024, U), gpu(r)), [1, 2], stream=7),
    "all_to_all_v, a negative split": lambda c, r: c.all_to_all_v(
        dev(np.zeros(10 * W, U), gpu(r)), dev(np.ones(10 * W, U), gpu(r)), [10] * W, [15, -5] + [10] * (W - 2),
        stream=7),
    "scatter, the root's input too small (root alone)": lambda c, r: c.scatter(
        dev(np.zeros(1000, U), gpu(r)), dev(np.ones(1024, U), gpu(r)) if r == 0 else None, 0, stream=7),
}


def body(comm, r):
    res = {}
    for name, call in CASES.items():
        t0 = time.monotonic()
        try:
            call(comm, r)
            comm.synchronize()
            res[name] = "ran"
        except Exception as exc:  # noqa: BLE001 - printed
            res[name] = f"{type(exc).__name__}: {str(exc)[:170]} [{time.monotonic() - t0:.1f} s]"
        try:
            a, b = np.full(256, r + 3, U), np.zeros(256 * W, U)
            comm.all_gather_into_tensor(dev(b, gpu(r)), dev(a, gpu(r)), stream=7)
            comm.synchronize()
            assert np.unique(b).tolist() == list(range(3, 3 + W)), np.unique(b)
        except Exception as exc:  # noqa: BLE001 - printed
            res[name] += f"\n      NEXT: {type(exc).__name__}: {str(exc)[:170]}"
            return res
    return res


out = fake_cuda.run_ranks(W, make, body)
print(f"== {KIND}: {W} ranks")
for r in sorted(out):
    print(f"rank {r}")
    for k, v in out[r].items() if isinstance(out[r], dict) else [("(rank)", repr(out[r]))]:
        print(f"  {k}: {v}")
