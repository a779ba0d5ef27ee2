"""A network call from a kept launch list in one C call (HOCCL_NET_NATIVE_CALL, hoccl_runtime/net/kept.py), on a CPU
with CUDA faked in host memory (its driver calls reached through C function pointers), two ranks through the real TCP
transport and proxy process: the bytes when native runs and runs built in Python share the executor's counters, the
proxy process's death, and a C side that cannot be built."""

from __future__ import annotations

import time

import fake_cuda
import numpy as np
import pytest
from fake_cuda import dev

CHUNK = 64 << 10
builds = pytest.mark.skipif(not fake_cuda.native_call_builds(), reason="the native call path does not build here")


def _run(monkeypatch, body, timeout_s: float = 20) -> dict:
    monkeypatch.setenv("HOCCL_NET_ONE_STREAM", "2")
    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.net import NetCommunicator

    store = fake_cuda.Store()
    return fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=timeout_s, chunk_bytes=CHUNK,
                                                            lanes=2), body, timeout_s=90)


@builds
def test_native_and_python_runs_interleaved_move_the_right_bytes(monkeypatch):
    """Two sets of buffers in turn (each set's third and later runs are native), a fresh one every fourth step (built
    in Python: a key's first run), AllGathers of several chunks and sends both ways, fresh bytes into poisoned
    outputs every time: the native runs move the same counters on as the Python ones (a count out of step hangs a
    gate or lands stale bytes)."""
    n = 2 * CHUNK + 13

    def body(comm, r):
        rng = np.random.default_rng(10 + r)
        sets = [(np.zeros(n, np.uint8), np.zeros(2 * n, np.uint8), np.zeros(n, np.uint8)) for _ in range(2)]
        wrong = []
        for i in range(16):
            inp, out, buf = sets[i % 2] if i % 4 != 3 else (np.zeros(n, np.uint8), np.zeros(2 * n, np.uint8),
                                                             np.zeros(n, np.uint8))
            inp[:] = rng.integers(0, 256, n, dtype=np.uint8)
            out[:] = 0xA5
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
            mine = out[r * n:(r + 1) * n]
            if not np.array_equal(mine, inp):
                wrong.append(("allgather own block", i))
            src = i % 2  # sends both ways
            msg = np.random.default_rng(1000 + i).integers(0, 256, n, dtype=np.uint8)
            buf[:] = msg if r == src else 0xA5
            comm.send(dev(buf, r), 1 - r, stream=7) if r == src else comm.recv(dev(buf, r), src, stream=7)
            comm.synchronize()
            if not np.array_equal(buf, msg):
                wrong.append(("send", i))
            wrong.append(("gathered", i, out.copy(), inp.copy()))
        assert fake_cuda.drained(7)
        return wrong, comm._native.calls, comm._executor._templates.built

    results = _run(monkeypatch, body)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
    (w0, native0, built0), (w1, native1, built1) = results[0], results[1]
    assert [w for w in w0 + w1 if w[0] != "gathered"] == []
    for a, b in zip([w for w in w0 if w[0] == "gathered"], [w for w in w1 if w[0] == "gathered"], strict=True):
        want = np.concatenate([a[3], b[3]])
        assert np.array_equal(a[2], want) and np.array_equal(b[2], want), a[1]
    # per rank and set: AllGather and send (or receive) runs 3 .. 8 native (send and receive: one key per direction)
    assert native0 >= 12 and native1 >= 12 and built0 >= 8 and built1 >= 8, results
    assert fake_cuda._streams.errors == []


@builds
@pytest.mark.usefixtures("whole_rings")
def test_a_proxy_process_gone_fails_the_native_call_without_a_hang(monkeypatch):
    """The proxy process killed after native runs: the next native call cannot send its message, so it opens its
    run's gates and lets its copies run through, and raises naming the proxy process (from the call or, where the
    watcher saw the death first, from synchronize); the stream's later work runs; the peer's calls fail too."""
    from hoccl_runtime.errors import HocclTimeoutError, TransportError

    def body(comm, r):
        inp, out = np.full(3 * CHUNK, r + 1, np.uint8), np.zeros(6 * CHUNK, np.uint8)
        for _ in range(4):
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
        good = comm._native.calls == 2 and (out == np.repeat([1, 2], 3 * CHUNK)).all()
        time.sleep(0.2)
        if r == 0:
            comm._proxy._proc.kill()
            comm._proxy._proc.wait()
        t0 = time.monotonic()
        with pytest.raises((TransportError, HocclTimeoutError)) as err:
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
        return good, time.monotonic() - t0, str(err.value), fake_cuda.drained(7)

    results = _run(monkeypatch, body, timeout_s=5)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
        good, waited, _, drained = results[r]
        assert good and waited < 15 and drained, results
    assert "proxy process" in results[0][2], results[0]
    assert fake_cuda._streams.errors == []


@pytest.mark.parametrize("how", ["auto", "on"])
def test_a_native_side_that_cannot_be_built_says_so(monkeypatch, tmp_path, how):
    """No C compiler: ``auto`` warns once, naming the setting, and the calls take the Python path; ``on`` refuses
    to make the communicator, naming it."""
    from hoccl_runtime.errors import HocclError
    from hoccl_runtime.net import kept

    monkeypatch.setattr(kept, "_built", {})
    monkeypatch.setattr(kept, "_warned", [])
    monkeypatch.setenv("HOCCL_CACHE_DIR", str(tmp_path))  # nothing built there
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("HOCCL_NET_NATIVE_CALL", how)

    def body(comm, r):
        inp, out = np.full(100, r, np.uint8), np.zeros(200, np.uint8)
        for _ in range(3):
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        comm.synchronize()
        return comm._native, out.tolist() == [0] * 100 + [1] * 100

    if how == "auto":
        with pytest.warns(RuntimeWarning, match="HOCCL_NET_NATIVE_CALL=off"):
            results = _run(monkeypatch, body)
        assert results[0] == (None, True) and results[1] == (None, True), results
    else:
        results = _run(monkeypatch, body)
        for r in (0, 1):
            assert isinstance(results[r], HocclError) and "HOCCL_NET_NATIVE_CALL" in str(results[r]), results


@builds
@pytest.mark.usefixtures("whole_rings")
def test_a_list_let_go_is_not_issued_natively_again(monkeypatch):
    """Kept lists leave their cache (least recently used beyond its limit): a list let go is never issued from this
    side's memo of checked calls again (the proxy process is told to forget its form with the next form it learns),
    and calls on its buffers go on right, natively once kept again."""
    def body(comm, r):
        rng = np.random.default_rng(r)
        a_in, a_out = np.zeros(CHUNK + 5, np.uint8), np.zeros(2 * CHUNK + 10, np.uint8)
        comm.all_gather_into_tensor(dev(a_out, r), dev(a_in, r), stream=7)
        comm._executor._templates._cache.limit = 3
        wrong, forms = [], []
        for i in range(12):
            fresh = i in (4, 5, 6, 7)  # four new buffers in a row: a's list leaves the cache of 3
            inp, out = (np.zeros(CHUNK + 5, np.uint8), np.zeros(2 * CHUNK + 10, np.uint8)) if fresh else (a_in, a_out)
            inp[:] = rng.integers(0, 256, inp.size, dtype=np.uint8)
            out[:] = 0xA5
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
            if not np.array_equal(out[r * inp.size:(r + 1) * inp.size], inp):
                wrong.append(i)
            forms.append([k.alive for _, k in comm._native._checked.values()])
        return wrong, forms, comm._native.calls

    results = _run(monkeypatch, body)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
        wrong, forms, calls = results[r]
        assert wrong == [] and calls >= 4, results[r]
        assert forms[3] == [True] and forms[7][0] is False and forms[-1][-1] is True, forms  # let go, then kept anew


@builds
@pytest.mark.usefixtures("whole_rings")
def test_the_proxy_rebuilds_the_run_python_would_have_issued(monkeypatch):
    """For a kept list, the run the proxy process rebuilds from a native call's counter moves (fill_run by counter
    position, as KeptForms does) holds the same gates, done flags, counts and bytes per ring slot, and the same end
    counts, as the run RunTemplate.issue makes from the same counters (the Python path, by counter key), also after the
    counters moved on through other lists' runs."""
    from hoccl_runtime.net.gated import PreparedRun
    from hoccl_runtime.net.template import fill_run

    def body(comm, r):
        n = 3 * CHUNK + 1
        a = (np.zeros(n, np.uint8), np.zeros(2 * n, np.uint8))
        b = (np.zeros(2 * n, np.uint8), np.zeros(4 * n, np.uint8))
        for inp, out in (a, b, a, a, b, b, a):  # both lists kept and issued natively, the counters moving between
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        comm.synchronize()
        ex, compared = comm._executor, 0
        for _, k in comm._native._checked.values():
            t = k.template
            counts = dict(ex._counts.items())
            by = tuple(counts.get(key, 0) - was for key, was in t.before.items())
            python = PreparedRun(t.plan)
            t.issue(python, counts, start=(comm._counted[7][0], 1), deferred=[])  # not launched
            native = fill_run(PreparedRun(t.plan), k.sends, k.recvs, k.ends, by)  # by position, as the proxy

            def gates(side):
                return {w: [(g.address, d.address, c, nb) for g, d, c, nb in q] for w, q in side.items()}
            assert gates(native.send) == gates(python.send) and gates(native.recv) == gates(python.recv)
            assert [(f.address, c) for f, c in native.ends] == [(f.address, c) for f, c in python.ends]
            assert any(by), by  # the counters did move since the list was made
            compared += 1
        return compared

    results = _run(monkeypatch, body)
    assert results == {0: 2, 1: 2}, results


def test_the_proxy_refuses_a_run_of_a_list_it_was_never_told():
    """A native run's message naming a list whose form never came (a protocol error) is a clear error in the proxy
    process (which then exits, its watcher on the training side releasing the calls), not a KeyError; a form told and
    then forgotten is refused the same."""
    import struct

    from hoccl_runtime.errors import HocclError
    from hoccl_runtime.flags import FlagPool
    from hoccl_runtime.net.kept import HEAD, KIND, KeptForms

    forms = KeptForms(FlagPool(4, device=False))
    message = HEAD.pack(KIND, 7, 0, 1) + struct.pack("<2q", 1, 0)
    with pytest.raises(HocclError, match="kept list 7.*HOCCL_NET_NATIVE_CALL=off"):
        forms.key_of(message)
    forms.learn(("template", 7, "key", [], [], [], [], 0))
    assert forms.key_of(message) == "key"
    forms.learn(("template", 8, "other", [], [], [], [7], 0))  # 7 forgotten with the next form
    with pytest.raises(HocclError, match="kept list 7"):
        forms.key_of(message)
