"""HOCCL_NET_POLL_US=0: the network proxy's loops never sleep while a call is in flight, they yield the CPU between
looks (hoccl_runtime._timer.nap): the pause itself, and the bytes of calls through the real proxy process and TCP
transport on a CPU with CUDA faked in host memory."""

from __future__ import annotations

import fake_cuda
import numpy as np
import pytest
from fake_cuda import dev

from hoccl_runtime import _timer
from hoccl_runtime.errors import HocclError
from hoccl_runtime.net.transport import base


def test_nap_yields_at_zero_and_sleeps_otherwise(monkeypatch):
    did = []
    monkeypatch.setattr(_timer.os, "sched_yield", lambda: did.append("yield"))
    monkeypatch.setattr(_timer.time, "sleep", lambda s: did.append(("sleep", s)))
    _timer.nap(0)
    _timer.nap(25e-6)
    assert did == ["yield", ("sleep", 25e-6)]


def test_a_pause_of_zero_spins_instead_of_waiting_on_the_engine(monkeypatch):
    """With one connection that can wait (the native engine's), a pause waits on it; at 0 it yields instead, so a
    spinning loop is never held by the engine's timed wait."""
    did = []

    class Conn:
        def wait(self, seconds):
            did.append(("wait", seconds))

    monkeypatch.setattr(_timer.os, "sched_yield", lambda: did.append("yield"))
    base.pause({1: Conn()}, 10e-6)
    base.pause({1: Conn()}, 0)
    assert did == [("wait", 10e-6), "yield"]


def test_a_negative_poll_setting_is_refused_naming_it(monkeypatch):
    from hoccl_runtime.settings import env_int

    monkeypatch.setenv("HOCCL_NET_POLL_US", "-1")
    with pytest.raises(HocclError, match="HOCCL_NET_POLL_US"):
        env_int("HOCCL_NET_POLL_US", 10, 0, 10_000)


@pytest.mark.parametrize("one_stream", ["2", "0"])
def test_calls_through_a_spinning_proxy_move_the_right_bytes(monkeypatch, one_stream):
    """AllGathers and sends both ways, fresh bytes into poisoned outputs, through proxy processes whose loops spin
    (HOCCL_NET_POLL_US=0), on the caller's stream and on copy streams."""
    monkeypatch.setenv("HOCCL_NET_POLL_US", "0")
    monkeypatch.setenv("HOCCL_NET_ONE_STREAM", one_stream)
    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.net import NetCommunicator

    n = 3 * (64 << 10) + 5

    def body(comm, r):
        rng = np.random.default_rng(20 + r)
        inp, out, buf = np.zeros(n, np.uint8), np.zeros(2 * n, np.uint8), np.zeros(n, np.uint8)
        seen = []
        for i in range(6):
            inp[:] = rng.integers(0, 256, n, dtype=np.uint8)
            out[:] = 0xA5
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
            seen.append((inp.copy(), out.copy()))
            src = i % 2
            msg = np.random.default_rng(500 + i).integers(0, 256, n, dtype=np.uint8)
            buf[:] = msg if r == src else 0xA5
            comm.send(dev(buf, r), 1 - r, stream=7) if r == src else comm.recv(dev(buf, r), src, stream=7)
            comm.synchronize()
            seen.append(bool(np.array_equal(buf, msg)))
        return seen

    store = fake_cuda.Store()
    results = fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=20, chunk_bytes=64 << 10,
                                                               lanes=2), body, timeout_s=90)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
    for i in range(0, 12, 2):
        (i0, o0), (i1, o1) = results[0][i], results[1][i]
        assert np.array_equal(o0, np.concatenate([i0, i1])) and np.array_equal(o1, o0), i
        assert results[0][i + 1] is True and results[1][i + 1] is True, i
    assert fake_cuda._streams.errors == []
