"""Session 32: a probe, not a test (pytest does not collect it here). Two ranks of the network communicator on faked CUDA
(tests/support) run 8 AllGathers; before the fifth, every ring counter of each rank's executor and its flags are set
to JUMP, after a synchronize. With the proxy as a process (the default) the runs hang in 4 of 8 tries once the counts
pass 2**31 (JUMP=2147483700), never below (1000, 1e8, 2147483000: 0 of 8) nor with HOCCL_NET_PROXY=thread.
Explained: synchronize returns at a run's release with the proxy process, whose driver may still be finishing that run
(reading its done flags); a flag moved 2**31 or more past a count makes that count read as not reached (the cyclic
comparison), so the tail waits forever. A jump the runtime never makes. tests/runtime/test_net_template_cpu.py
crosses the wrap in hops of 2**30 instead (8 of 8 passed, and 4 of 4 with the thread proxy).
    PYTHONPATH=.:tests/support JUMP=2147483700 python3 -m pytest -q -p no:cacheprovider docs/results/2026-12-04-s32/wrap_probe.py
"""
import os
import fake_cuda
import numpy as np
from fake_cuda import dev
from hoccl_runtime.flags import as_int32

JUMP = int(os.environ.get("JUMP", "1000"))


def test_wrap(monkeypatch):
    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.net import NetCommunicator
    store = fake_cuda.Store()
    n = 150_000

    def body(comm, r):
        rng = np.random.default_rng(10 + r)
        inp, out = np.zeros(n, np.uint8), np.zeros(2 * n, np.uint8)
        rounds = []
        for k in range(8):
            if k == 4:
                comm.synchronize()
                ex = comm._executor
                counts = ex._counts
                for key in counts:
                    counts[key] = JUMP
                for key, (gate, done) in ex._gates.items():
                    if key in counts:
                        gate.write(as_int32(JUMP)); done.write(as_int32(JUMP))
                for s, flag in ex._ends.items():
                    flag.write(as_int32(JUMP))
            inp[:] = rng.integers(0, 256, n, dtype=np.uint8)
            out[:] = 0xA5
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
            rounds.append((inp.copy(), out.copy()))
        return rounds

    results = fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=10, chunk_bytes=64 << 10, lanes=2), body)
    assert not any(isinstance(v, Exception) for v in results.values()), results
