"""A network run's launch list issued again with new counts (hoccl_runtime.net.template): on a CPU with CUDA faked in
host memory, two ranks through the real TCP transport and proxy process, calls on the same buffers with fresh data
every time and other plans between them on the same ring slots; the counts' wrap on its own."""

from __future__ import annotations

import fake_cuda
import numpy as np
import pytest
from fake_cuda import dev

from hoccl_runtime.net import template
from hoccl_runtime.net.template import CYCLE, moved


def test_counts_move_on_cyclically_and_never_reach_zero():
    assert moved(5, 3) == 8
    assert moved(CYCLE, 1) == 1 and moved(CYCLE - 1, 2) == 1
    assert moved(1, -1) == CYCLE
    assert all(moved(v, by) != 0 for v in (1, 2, CYCLE - 1, CYCLE) for by in (-3, -1, 0, 1, 2, CYCLE - 1))


@pytest.mark.parametrize("native", ["off", pytest.param("on", marks=pytest.mark.skipif(
    not fake_cuda.native_call_builds(), reason="the native call path does not build here"))])
def test_calls_on_the_same_buffers_reissue_their_launch_list_and_move_the_right_bytes(monkeypatch, native):
    """(on: the reissued runs are each one C call, HOCCL_NET_NATIVE_CALL, net/kept.py)"""
    monkeypatch.setenv("HOCCL_NET_NATIVE_CALL", native)
    issued = []
    real = template.RunTemplate.issue
    monkeypatch.setattr(template.RunTemplate, "issue", lambda self, *a: (issued.append(1), real(self, *a))[1])
    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.net import NetCommunicator

    store = fake_cuda.Store()
    n = 150_000  # three 64 KiB chunks through 4-slot rings: slot uses wrap within and across calls

    def body(comm, r):
        rng = np.random.default_rng(10 + r)
        inp, out = np.zeros(n, np.uint8), np.zeros(2 * n, np.uint8)
        p2p = np.zeros(n + 1000, np.uint8)
        rounds = []
        for k in range(8):
            inp[:] = rng.integers(0, 256, n, dtype=np.uint8)
            out[:] = 0xA5
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            if r == 0:  # another plan between (other sizes, the same ring slots)
                p2p[:] = rng.integers(0, 256, p2p.size, dtype=np.uint8)
                comm.send(dev(p2p, r), 1, stream=7)
            else:
                p2p[:] = 0xA5
                comm.recv(dev(p2p, r), 0, stream=7)
            comm.synchronize()
            rounds.append((inp.copy(), out.copy(), p2p.copy()))
        return rounds, comm._native.calls if comm._native is not None else 0

    results = fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=20, chunk_bytes=64 << 10,
                                                               lanes=2), body)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
    for k in range(8):
        (i0, o0, p0), (i1, o1, p1) = results[0][0][k], results[1][0][k]
        want = np.concatenate([i0, i1])
        assert np.array_equal(o0, want) and np.array_equal(o1, want), k
        assert np.array_equal(p0, p1), k
    reissued = len(issued) + results[0][1] + results[1][1]  # from kept lists: in Python, or in C
    assert reissued >= 2 * 2 * 6 and (len(issued) == 0) == (native == "on"), (len(issued), results[0][1])


def test_keys_seen_once_stay_bounded():
    """A new tensor every call (FSDP's fresh buffers): each key is recorded, and the oldest leave past the limit."""
    from hoccl_runtime.net.template import Templates

    kept = Templates(limit=4)

    class Run:
        plan = object()

    for k in range(100):
        assert kept.issue((k,), Run(), {}, {}, None) == (False, None)  # a key's first run keeps nothing
    assert len(kept._cache) == 4 and kept.built == 100 and kept.reissued == 0
    assert kept.issue((99,), Run(), {"c": 1}, {}, None) == (False, {"c": 1})  # its second run: kept


@pytest.mark.usefixtures("whole_rings")
def test_runs_cross_the_counters_wrap(monkeypatch):
    """Every ring counter is moved on by hand, in hops of 2**30 (a count less than 2**31 behind a flag reads as reached,
    so the tail of the run before a hop, which the proxy process may still be driving, sees its own counts reached),
    to just below 2**32 - 1: the next calls' counts wrap to 1, kept lists and all, and move the right bytes."""
    from hoccl_runtime.flags import as_int32

    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.net import NetCommunicator

    store = fake_cuda.Store()
    n = 150_000
    hops = {1: 1 << 30, 2: 2 << 30, 3: 3 << 30, 4: CYCLE - 2}

    def body(comm, r):
        rng = np.random.default_rng(20 + r)
        inp, out = np.zeros(n, np.uint8), np.zeros(2 * n, np.uint8)
        rounds = []
        for k in range(9):
            if k in hops:
                comm.synchronize()
                ex = comm._executor
                for key in ex._counts:
                    ex._counts[key] = hops[k]
                flags = [f for key, pair in ex._gates.items() if key in ex._counts for f in pair]
                for flag in flags + list(ex._ends.values()):
                    flag.write(as_int32(hops[k]))
            inp[:] = rng.integers(0, 256, n, dtype=np.uint8)
            out[:] = 0xA5
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
            rounds.append((inp.copy(), out.copy()))
        return rounds, max(comm._executor._counts.values())

    results = fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=20, chunk_bytes=64 << 10,
                                                               lanes=2), body)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
        assert results[r][1] < 100, results[r][1]  # every counter wrapped past 2**32 - 1 to small counts again
    for k in range(9):
        (i0, o0), (i1, o1) = results[0][0][k], results[1][0][k]
        want = np.concatenate([i0, i1])
        assert np.array_equal(o0, want) and np.array_equal(o1, want), k
