"""HOCCL_NET_ONE_STREAM=1 and 2: a network call's copies on its caller's stream itself (GpuNodeExecutor.one_stream),
with the DONE wait in their last batch (1) or with START a counter and no DONE wait (2), on a CPU with CUDA faked in
host memory, two ranks through the real TCP transport and proxy process: the bytes, the driver calls a call makes,
the order of its staging and landing copies, the fall-back to copy streams, and a failing prepare that leaves the
stream's flags in step."""

from __future__ import annotations

import threading
import time

import fake_cuda
import numpy as np
import pytest
from fake_cuda import dev

CHUNK = 64 << 10


def _run(monkeypatch, body, one_stream: str = "1", ring_bytes: int | None = None) -> dict:
    monkeypatch.setenv("HOCCL_NET_ONE_STREAM", one_stream)
    fake_cuda.install(monkeypatch, async_streams=True)
    monkeypatch.setattr(fake_cuda, "trace", [])
    from hoccl_runtime.comm.net import NetCommunicator

    store = fake_cuda.Store()
    extra = {} if ring_bytes is None else {"ring_bytes": ring_bytes}
    results = fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=20, chunk_bytes=CHUNK,
                                                               lanes=2, **extra), body)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
    assert fake_cuda._streams.errors == []
    return results


def _traced(call) -> list:
    """The fake CUDA calls this thread made inside ``call()``: (what, stream or event, ...)."""
    me = threading.current_thread().name
    with fake_cuda._lock:
        start = len(fake_cuda.trace)
    call()
    with fake_cuda._lock:
        return [t[:3] for t in fake_cuda.trace[start:] if t[3] == me]


def _exchanges(comm, r: int, sizes) -> tuple[list, list]:
    """1F1B's pair (an activation out, a gradient in) as one batch per size, fresh random bytes, poisoned receive
    buffers: (what each rank sent, what it received, each call's CUDA calls)."""
    rng = np.random.default_rng(10 + r)
    out, calls = [], []
    for n in sizes:
        sent, got = rng.integers(0, 256, n, dtype=np.uint8), np.full(n, 0xA5, np.uint8)
        calls.append(_traced(lambda sent=sent, got=got: comm.batch_isend_irecv(
            [("send", dev(sent, r), 1 - r), ("recv", dev(got, r), 1 - r)], stream=7)))
        out.append((sent, got, int(got.ctypes.data)))
    comm.synchronize()
    return out, calls


MODES = ["1", "2"]


@pytest.mark.parametrize("one_stream", ["1", "2", "0"])
def test_an_exchange_on_the_callers_stream_moves_the_bytes_in_fewer_driver_calls(monkeypatch, one_stream):
    """With HOCCL_NET_ONE_STREAM=1 a 1F1B exchange of one chunk each way is START, the staging copy's gate, the
    copy, its done count with the landing's gate, the landing copy, and its done count with the stream's end and the
    DONE wait: 6 driver calls, all on the caller's stream, no event (2: 5, START a count in the first batch and no
    DONE wait in the last). With 0: 12, on three streams after an event. A message of several chunks lands
    only after all of its staging copies were enqueued (one stream: the landings would otherwise hold the sends
    back). The bytes are the same either way."""
    sizes = (1, 3001, 4 * CHUNK - 5)

    def body(comm, r):
        return _exchanges(comm, r, sizes)

    results = _run(monkeypatch, body, one_stream)
    for r in (0, 1):
        for (sent, _, _), (_, got, _) in zip(results[r][0], results[1 - r][0], strict=True):
            assert np.array_equal(sent, got)
    for r in (0, 1):
        (_, _, landing_at), *_ = results[r][0]
        small = [what for what, *_ in results[r][1][0]]
        if one_stream == "1":
            assert small == ["memops", "memops", "copy", "memops", "copy", "memops"], small
        if one_stream == "2":  # START in the first batch, before the staging copy's gate wait
            assert small == ["memops", "copy", "memops", "copy", "memops"], small
            assert results[r][1][0][0][2] == 2
        if one_stream != "0":
            last = results[r][1][0][-1]  # landed and end; DONE's wait and reset too (1)
            assert last[0] == "memops" and last[2] == (4 if one_stream == "1" else 2), last
            for trace in results[r][1]:
                assert {s for what, s, _ in trace if what in ("copy", "memops")} == {7}, trace
                assert not any(what in ("record", "wait") for what, *_ in trace), trace
            big, (_, _, big_at) = results[r][1][2], results[r][0][2]
            landing = [what == "copy" and big_at <= dst < big_at + sizes[2] for what, _, dst in big]
            copies = [i for i, (what, *_) in enumerate(big) if what == "copy"]
            assert len(copies) == 8 and not any(landing[i] for i in copies[:4]) and all(landing[i] for i in copies[4:])
        else:
            # START, the event, two copies; the staging copy's done count in a batch of its own before the landing is
            # issued (net/order.py: the peer's landing needs it, and streams may share a hardware queue)
            assert small == ["memops", "record", "wait", "memops", "copy", "memops", "wait", "memops", "copy",
                             "memops", "memops", "memops"], small
            assert len({s for what, s, _ in results[r][1][0] if what == "copy"} - {7}) == 2


@pytest.mark.parametrize("one_stream", MODES)
def test_a_call_the_rings_cannot_hold_at_once_keeps_its_copy_streams(monkeypatch, one_stream):
    """A message of more chunks than a ring has slots (4 slots here) would, on one stream, wait for slots that only
    the far side's landings free, queued behind its own: such a call keeps the copy streams (and its event), and
    still moves its bytes; a small one on the same communicator goes on the caller's stream."""
    sizes = (6 * CHUNK + 11, 100)

    def body(comm, r):
        return _exchanges(comm, r, sizes)

    results = _run(monkeypatch, body, one_stream, ring_bytes=4 * CHUNK)
    for r in (0, 1):
        for (sent, _, _), (_, got, _) in zip(results[r][0], results[1 - r][0], strict=True):
            assert np.array_equal(sent, got)
        big, small = results[r][1]
        assert any(what == "record" for what, *_ in big) and {s for what, s, _ in big if what == "copy"} - {7}
        assert [what for what, *_ in small] == ["memops"] * (one_stream == "1") + ["memops", "copy", "memops", "copy",
                                                                                "memops"]


@pytest.mark.parametrize("one_stream", MODES)
def test_allgather_send_and_recv_on_the_callers_stream_with_reissued_launch_lists(monkeypatch, one_stream):
    """AllGather (its own block copied within the GPU first), send and receive, each repeated on the same buffers
    with fresh bytes (the third and later runs reissue the list kept at the second, DONE wait included) and poisoned
    outputs; the stream's START and DONE are back at 0 after the last call (2: its START counter at the calls'
    number, START and DONE never used). With 2 the reissued runs are each one C call (HOCCL_NET_NATIVE_CALL's
    default, net/kept.py), the fake driver's calls made from there."""
    from hoccl_runtime.net import template

    issued = []
    real = template.RunTemplate.issue
    monkeypatch.setattr(template.RunTemplate, "issue", lambda self, *a: (issued.append(1), real(self, *a))[1])
    n = 3 * CHUNK + 7

    def body(comm, r):
        rng = np.random.default_rng(r)
        inp, out = np.zeros(n, np.uint8), np.zeros(2 * n, np.uint8)
        buf = np.zeros(n, np.uint8)
        good = []
        for _ in range(4):
            inp[:] = rng.integers(0, 256, n, dtype=np.uint8)
            out[:] = 0xA5
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
            good.append((inp.copy(), out.copy()))
            msg = np.random.default_rng(99).integers(0, 256, n, dtype=np.uint8)
            buf[:] = msg if r == 0 else 0xA5
            comm.send(dev(buf, r), 1, stream=7) if r == 0 else comm.recv(dev(buf, r), 0, stream=7)
            comm.synchronize()
            good.append(bool(np.array_equal(buf, msg)))
        assert fake_cuda.drained(7)
        start, done = (f.read() for f in next(iter(comm._pairs.values())))
        native = comm._native.calls if comm._native is not None else 0
        return good, (start, done, next(iter(comm._counted.values()))[0].read()), \
            (comm._executor._templates.reissued, native)

    fake_cuda.native_calls.clear()
    results = _run(monkeypatch, body, one_stream)
    for i in range(0, 8, 2):
        (i0, o0), (i1, o1) = results[0][0][i], results[1][0][i]
        assert np.array_equal(o0, np.concatenate([i0, i1])) and np.array_equal(o1, o0)
        assert results[1][0][i + 1] is True
    assert all(results[r][1] == (0, 0, 0 if one_stream == "1" else 8) for r in (0, 1)), results
    # per rank, runs 3 and 4 of the AllGather and of the send or receive came from kept lists: in C with 2
    native = 4 if one_stream == "2" and fake_cuda.native_call_builds() else 0
    assert all(results[r][2] == (4, native) for r in (0, 1)), results
    assert len(issued) == 2 * (4 - native) and (len(fake_cuda.native_calls) > 0) == (native > 0)


@pytest.mark.parametrize("one_stream", MODES)
def test_a_prepare_that_fails_on_one_stream_keeps_the_pair_in_step(monkeypatch, one_stream):
    """A CUDA error while a one-stream call's copies are enqueued is the caller's CudaError naming the call; the
    DONE wait the failed list never reached is enqueued anyway (2: the proxy takes the call's START count and
    releases nothing), so the next call runs and moves the right bytes."""
    from hoccl_runtime.errors import CudaError

    class CUDARuntimeError(RuntimeError):  # CuPy's class name, as cuda_error recognises it
        pass

    def body(comm, r):
        inp, out = np.full(64, r, np.uint8), np.zeros(128, np.uint8)
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        comm.synchronize()
        real = comm._executor.prepare
        seen = []

        def failing(*a, **k):
            seen.append(k.get("stream"))
            raise CUDARuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")

        comm._executor.prepare = failing
        with pytest.raises(CudaError, match=rf"rank {r}: allgather 128: a CUDA call failed: cudaErrorIllegalAddress"):
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        comm._executor.prepare = real
        out[:] = 0xA5
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        comm.synchronize()
        return seen == [7] and out.tolist() == [0] * 64 + [1] * 64

    assert _run(monkeypatch, body, one_stream) == {0: True, 1: True}


def test_a_counted_start_is_seen_across_the_counters_wrap_and_never_reset():
    """callproxy.StartFlag: a flag START is seen at 1 and reset to 0; a counted one is seen once the counter reached
    its count (cyclically, as the GPU's GEQ wait: a later call's count also passes an earlier call) and is left as it
    is, so a next call's START written before the proxy looked is not lost. DoneOnce without a flag writes nothing."""
    from hoccl_runtime.flags import FlagPool, as_int32
    from hoccl_runtime.net.callproxy import DoneOnce, StartFlag

    pool = FlagPool(2, device=False)
    flag, counter = pool.allocate(), pool.allocate()
    plain = StartFlag(flag)
    assert not plain.seen()
    flag.write(1)
    assert plain.seen()
    plain.reset()
    assert flag.read() == 0
    for count in (0xFFFFFFFE, 0xFFFFFFFF, 1, 2):  # across the wrap (counts skip 0)
        mark = StartFlag(counter, count)
        counter.write(as_int32(count - 1 if count > 1 else 0xFFFFFFFF))
        assert not mark.seen(), count
        counter.write(as_int32(count))
        assert mark.seen()
        mark.reset()
        assert counter.read() == as_int32(count)  # left as it is
        counter.write(as_int32(count % 0xFFFFFFFF + 1))  # the next call's START, before the proxy looked
        assert mark.seen()
    done = DoneOnce(None)
    done()
    assert done.written and flag.read() == 0


def test_the_watchers_drain_takes_counted_and_flag_starts():
    """ProcessProxy._drain (the proxy process is gone): the calls it had not taken are released in order once their
    streams reach them: a flag START is reset and its DONE written, a counted START (HOCCL_NET_ONE_STREAM=2) is seen
    at its count and left as it is, with no DONE to write; the count of finished calls moves on past both. A call
    whose stream never reaches it stops the drain at its timeout."""
    import collections

    from hoccl_runtime.flags import FlagPool
    from hoccl_runtime.net.proxyproc import ProcessProxy

    pool = FlagPool(6, device=False)
    start, done, counter, taken, finished, _ = (pool.allocate() for _ in range(6))
    px = ProcessProxy.__new__(ProcessProxy)
    px._lock, px._draining, px._closing, px.timeout_s = threading.Lock(), False, False, 0.2
    px._taken, px._done, px._submitted = taken, finished, 3
    px._pending = collections.deque([(1, None, (start, done), None), (2, None, (counter, None), 5),
                                     (3, None, (counter, None), 6)])
    start.write(1)    # call 1's stream is there
    counter.write(5)  # call 2's too; call 3's (count 6) never comes
    t0 = time.monotonic()
    px._drain()
    assert 0.2 <= time.monotonic() - t0 < 5
    assert (start.read(), done.read(), counter.read(), finished.read()) == (0, 1, 5, 2)
    assert [item[0] for item in px._pending] == [3] and not px._draining
    counter.write(6)  # its stream comes after all: a later drain releases it
    px._drain()
    assert finished.read() == 3 and not px._pending


@pytest.mark.parametrize("native", ["off", pytest.param("on", marks=pytest.mark.skipif(
    not fake_cuda.native_call_builds(), reason="the native call path does not build here"))])
@pytest.mark.usefixtures("whole_rings")
def test_a_kept_list_that_fails_to_launch_after_the_proxy_was_told_fails_both_ranks_without_a_hang(monkeypatch,
                                                                                                   native):
    """HOCCL_NET_ONE_STREAM=2 tells the proxy of a run from a kept launch list before launching it. A launch that
    fails then (a CUDA error) is the caller's CudaError; its run's gates stay shut, so its proxy fails the call at
    the communicator's timeout and the other rank's call fails too: an error on both ranks, not wrong bytes sent to
    the other one, and no stream or proxy left waiting. The same where the call is one C call (HOCCL_NET_NATIVE_CALL,
    net/kept.py) whose second driver call fails: its error names that call."""
    from hoccl_runtime.errors import CudaError, HocclError
    from hoccl_runtime.net import template

    class CUDARuntimeError(RuntimeError):  # CuPy's class name, as cuda_error recognises it
        pass

    real = template.RunTemplate.issue
    fail = threading.local()  # .now: this rank's next launch from a kept list fails

    def issue(self, run, counts, start=None, deferred=None):
        real(self, run, counts, start, deferred)
        if deferred and getattr(fail, "now", False):
            fail.now = False
            deferred[:] = [lambda: (_ for _ in ()).throw(CUDARuntimeError("cudaErrorLaunchFailure: unspecified"))]

    monkeypatch.setattr(template.RunTemplate, "issue", issue)
    monkeypatch.setenv("HOCCL_NET_ONE_STREAM", "2")
    monkeypatch.setenv("HOCCL_NET_NATIVE_CALL", native)
    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.net import NetCommunicator

    def body(comm, r):
        inp, out = np.full(4096, r + 1, np.uint8), np.zeros(8192, np.uint8)
        for _ in range(3):  # the third run comes from the kept list
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
        good = out.tolist() == [1] * 4096 + [2] * 4096
        assert (comm._native is not None) == (native == "on")
        fail.now = r == 0
        if fail.now and native == "on":
            fake_cuda.fail_native_calls(0, 700)  # the first driver call goes, the second fails (LAUNCH_FAILED)
        out[:] = 0xA5
        t0 = time.monotonic()
        raised = None
        try:
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            comm.synchronize()
        except HocclError as exc:
            raised = exc
        waited = time.monotonic() - t0
        return good, type(raised).__name__, str(raised), waited, fake_cuda.drained(7)

    store = fake_cuda.Store()
    results = fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=3, chunk_bytes=CHUNK,
                                                               lanes=2), body, timeout_s=60)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
        good, kind, message, waited, drained = results[r]
        assert good and kind != "NoneType" and waited < 20 and drained, (r, results[r])
    assert results[0][1] == CudaError.__name__, results[0]
    assert ("cudaErrorLaunchFailure" if native == "off" else "node 0: enqueuing the copies of plan") in results[0][2]
    if native == "on":
        assert "cuMemcpyAsync failed" in results[0][2] or "cuStreamBatchMemOp failed" in results[0][2], results[0]


@pytest.mark.parametrize("fails", ["none", "prepare", "submit", "launch"])
def test_enqueue_counted_tells_launches_and_keeps_start_in_step(monkeypatch, fails):
    """comm.calls.enqueue_counted with stand-ins: the count moves on every call (1, 2, ...); a deferred launch comes
    after the proxy was told; START is written on its own where the list may not have written it (a failed prepare
    or launch); a proxy that cannot be told (gone) still gets the deferred launch run (its gates are open), so its
    end counts are written; every failure is raised."""
    from hoccl_runtime.comm import calls

    events, written = [], []

    class Batch:  # the START batch: records its writes
        def set_value(self, i, value):
            self.value = value
            return self

        def enqueue(self, stream):
            written.append((stream, self.value))

    counted = ["counter", Batch(), 0]

    def prepare(start, deferred):
        events.append(("prepare", start))
        if fails == "prepare":
            raise RuntimeError("prepare failed")
        deferred.append("launch me")
        return "run"

    def submit(prepared, n):
        events.append(("submit", prepared, n))
        if fails == "submit":
            raise RuntimeError("the proxy is gone")

    def launch(prepared, deferred):
        events.append(("launch", prepared, list(deferred)))
        if fails == "launch":
            raise RuntimeError("launch failed")

    for n in (1, 2):
        events.clear()
        if fails == "none":
            calls.enqueue_counted(7, counted, prepare, submit, launch)
        else:
            with pytest.raises(RuntimeError, match="failed|gone"):
                calls.enqueue_counted(7, counted, prepare, submit, launch)
        assert events[0] == ("prepare", ("counter", n))
        if fails == "prepare":
            assert events[1:] == [("submit", None, n)]
        else:
            assert events[1:] == [("submit", "run", n), ("launch", "run", ["launch me"])]
    assert written == ([] if fails in ("none", "submit") else [(7, 1), (7, 2)])
