"""Registered windows (Communicator.register_window) on a CPU: end to end with CUDA faked in host memory
(tests/support/fake_cuda.py), and the mailbox bookkeeping of window calls on its own (entries without a wait,
flow control, acknowledgements, mismatches), with ranks as threads or stepped by hand."""

from __future__ import annotations

import random
import threading
import time
import types

import fake_cuda
import numpy as np
import pytest
from fake_cuda import dev  # arrays as device buffers, kept alive until the test's fake streams drained

from hoccl_compiler import CollectiveSpec
from hoccl_runtime.comm import Communicator, _EagerLayout
from hoccl_runtime.comm.eager import EagerSlots
from hoccl_runtime.comm.rendezvous import Mailbox, PeerMappings, Rendezvous
from hoccl_runtime.comm.watchdog import Watchdog
from hoccl_runtime.comm.windows import WindowTable
from hoccl_runtime.errors import BufferError, HocclTimeoutError, PlanError


def data(rank: int, call: int, n: int) -> np.ndarray:
    return np.random.default_rng([rank, call, 5]).integers(0, 256, n, dtype=np.uint8)


def ranks(monkeypatch, world, body, **options):
    fake_cuda.install(monkeypatch)
    store = fake_cuda.Store()
    results = fake_cuda.run_ranks(world, lambda r: Communicator(r, world, r, store, timeout_s=20, **options), body)
    return results


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("local_copies", ["sm", "peer"])
def test_collectives_on_a_window_skip_the_address_exchange(monkeypatch, world, local_copies):
    """Every collective on buffers carved out of one registered window per rank, twice (the second time
    from cached launch lists and graphs): right bytes, and no IPC handle exported after registration
    (except a gather in peer mode, whose own-block helper needs its input per call). Then the window
    is closed: the same buffers take the mailbox path again, still right."""
    monkeypatch.setenv("HOCCL_EAGER_BYTES", "0")  # send/recv by rendezvous, so on the window too
    n = 1001
    size = 64 << 10

    def body(comm, r):
        space = np.zeros(size, np.uint8)
        win = comm.register_window(dev(space, r))
        exports = []
        real_export = comm._mappings.export
        comm._mappings.export = lambda buf, what="output": (exports.append(what), real_export(buf, what))[1]
        bad = []

        def view(offset, count):
            return space[offset:offset + count]

        for rep in range(3):
            if rep == 2:
                win.close()
                exports.clear()
            call = 10 * rep
            inp, out = view(0, n), view(8192, n * world)
            inp[:] = data(r, call, n)
            out[:] = 0xA5
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            if not np.array_equal(out, np.concatenate([data(p, call, n) for p in range(world)])):
                bad.append(f"all_gather {rep}")
            inp, out = view(0, n * world), view(8192, n * world)
            inp[:] = data(r, call + 1, n * world)
            out[:] = 0xA5
            comm.all_to_all_single(dev(out, r), dev(inp, r), stream=7)
            if not np.array_equal(out, np.concatenate([data(p, call + 1, n * world)[r * n:(r + 1) * n]
                                                       for p in range(world)])):
                bad.append(f"all_to_all {rep}")
            t = view(16384, n)
            t[:] = data(world - 1, call + 2, n) if r == world - 1 else 0xA5
            comm.broadcast(dev(t, r), world - 1, stream=7)
            if not np.array_equal(t, data(world - 1, call + 2, n)):
                bad.append(f"broadcast {rep}")
            src, out = view(0, n * world), view(24576, n)
            src[:] = data(0, call + 3, n * world)
            out[:] = 0xA5
            comm.scatter(dev(out, r), dev(src, r) if r == 0 else None, root=0, stream=7)
            if not np.array_equal(out, data(0, call + 3, n * world)[r * n:(r + 1) * n]):
                bad.append(f"scatter {rep}")
            inp, out = view(32768, n), view(32768, n * world)  # the root's output where the others' inputs are
            if r:
                inp[:] = data(r, call + 4, n)
            else:
                out[:] = 0xA5
                out[:n] = data(0, call + 4, n)
                inp = out[:n]
            comm.gather(dev(inp, r), dev(out, r) if r == 0 else None, root=0, stream=7)
            if r == 0 and not np.array_equal(out, np.concatenate([data(p, call + 4, n) for p in range(world)])):
                bad.append(f"gather {rep}")
            if r < 2:  # rank 0 sends from offset 40960 of its window into offset 40960 of rank 1's
                t = view(40960, n)
                t[:] = data(0, call + 5, n) if r == 0 else 0xA5
                comm.send(dev(t, r), 1, stream=7) if r == 0 else comm.recv(dev(t, r), 0, stream=7)
                if r == 1 and not np.array_equal(t, data(0, call + 5, n)):
                    bad.append(f"send/recv {rep}")
            comm.synchronize()
            if rep < 2:  # gather in peer mode: its root's own block is copied by a helper, on the mailbox path
                want = ["output", "input"] if local_copies == "peer" and r == 0 else []
                if exports != want:
                    bad.append(f"exports {rep}: {exports}")
                exports.clear()
        if exports.count("output") < 4:  # closed: the mailbox path again, one export per rendezvous call
            bad.append(f"after close: {exports}")
        comm._mappings.export = real_export
        return bad, repr(win)

    results = ranks(monkeypatch, world, body, local_copies=local_copies)
    for r in range(world):
        assert not isinstance(results.get(r), Exception), f"rank {r}: {results.get(r)!r}"
        bad, text = results[r]
        assert bad == [] and "closed" in text, (r, results[r])


def test_register_window_checks_its_buffers(monkeypatch):
    """Sizes that differ between ranks raise on every rank, naming them; a window that overlaps another,
    one on another GPU, an empty one are refused; the communicator's close() closes its windows."""
    def body(comm, r):
        got = []
        a = np.zeros(4096, np.uint8)
        with pytest.raises(BufferError, match="rank 0: 4096, rank 1: 2048 bytes"):
            comm.register_window(dev(a if r == 0 else a[:2048], r))
        win = comm.register_window(dev(a, r))
        with pytest.raises(BufferError, match="overlaps window 1"):
            comm.register_window(dev(a[100:200], r))
        with pytest.raises(BufferError, match="on GPU 5"):
            comm.register_window(dev(a, 5))
        with pytest.raises(BufferError, match="0 bytes"):
            comm.register_window(dev(a[:0], r))
        got.append(win.index)
        comm.close()
        got.append(win.closed)
        win.close()  # closing again is harmless
        return got

    results = ranks(monkeypatch, 2, body)
    assert results == {0: [1, True], 1: [1, True]}, results


def test_a_rank_that_cannot_share_its_window_stops_the_others_at_once(monkeypatch):
    """Rank 1's buffer cannot be exported (as memory of a cudaMallocAsync pool): it raises, and rank 0
    raises too, naming rank 1 and the reason, well within the communicator's timeout. A window holds the
    object it registered until it is closed."""
    def body(comm, r):
        a = np.zeros(4096, np.uint8)
        if r == 1:
            def refuse(buf, what="output"):
                raise BufferError(f"rank 1's {what} cannot be shared with other processes (test)")
            comm._mappings.export = refuse
        t0 = time.monotonic()
        with pytest.raises(BufferError) as info:
            comm.register_window(dev(a, r))
        comm._mappings.__dict__.pop("export", None)  # rank 1 exports again
        held = dev(a, r)
        win = comm.register_window(held)
        kept = win.tensor is held
        win.close()
        return str(info.value), time.monotonic() - t0, kept, win.tensor

    results = ranks(monkeypatch, 2, body)
    assert "rank 1 could not register window 0: rank 1's window cannot be shared" in results[0][0], results
    assert "cannot be shared with other processes (test)" in results[1][0]
    assert all(results[r][1] < 10 and results[r][2] and results[r][3] is None for r in range(2)), results


# --- the mailbox bookkeeping alone: ranks share one mailbox, no CUDA ------------------------------------------
def mailbox(world: int) -> memoryview:
    from hoccl_runtime.comm import _PAIR_BYTES

    return memoryview(bytearray(world * world * _PAIR_BYTES)).cast("q")


class MailboxRank:
    """One rank's mailbox, window table, address exchange and eager part: the Communicator's own parts, built
    without it (no CUDA: no call here maps or exports anything)."""

    def __init__(self, rank: int, world: int, words: memoryview, timeout_s: float):
        self.rank = rank
        shared = types.SimpleNamespace(words=words, mail_bytes=memoryview(words).cast("B"),
                                       pids=np.zeros(world, np.int64))
        self.watchdog = Watchdog(rank, world, shared, {}, start=False)  # the fault part, without its thread
        self.mailbox = Mailbox(rank, world, shared, timeout_s, self.watchdog)
        mappings = PeerMappings(rank, 0, world)
        self.windows = WindowTable(rank, world, 0, None, self.mailbox, mappings, None)
        self.rdv = Rendezvous(self.mailbox, mappings, self.windows, "sm")
        self.eager = EagerSlots(rank, world, 0, None, shared, self.mailbox, 1 << 20, None)
        self.eager.stage_out = dict.fromkeys(range(world), 0)  # eager staging "mapped" already


def mailbox_comm(rank: int, world: int, words: memoryview, timeout_s: float) -> MailboxRank:
    return MailboxRank(rank, world, words, timeout_s)


SPEC = CollectiveSpec(kind="allgather", size_bytes=4096)
WINDOW = types.SimpleNamespace(index=0, nbytes=1 << 20, peers=dict.fromkeys(range(4), 1 << 30))


def state(rank: int, world: int, digest: int = 7, eager: bool = False) -> types.SimpleNamespace:
    others = tuple(p for p in range(world) if p != rank)
    layout = _EagerLayout((), {p: ((0, 0, 1),) for p in others}, {p: ((0, 0, 1),) for p in others})
    return types.SimpleNamespace(plan=types.SimpleNamespace(ranks=types.SimpleNamespace(output_bytes=[4096] * world),
                                                            collective=SPEC),
                                 partners=others, digest=digest, helped=None, eager=layout if eager else None,
                                 windows=True)


def enter(c: MailboxRank, st: types.SimpleNamespace, offset: int) -> dict[int, int]:
    """A window call's mailbox part, as Communicator._window_call makes it (entries, [the launch], the checks):
    {partner: its output's address}."""
    remote = c.windows.remote(st, WINDOW, offset)
    c.windows.entries(st, WINDOW.index, offset)
    c.windows.check()
    c.windows.raise_error()
    return remote


def test_window_calls_never_wait_and_are_checked_later():
    """Window calls write their entries and go on, even 6 calls ahead of a partner that has not started
    (its checks of the 2 entries overwritten by then are lost, as an eager size entry can be); the
    partner then checks the others, and a mismatched offset raises there."""
    words = mailbox(2)
    a, b = mailbox_comm(0, 2, words, 0.2), mailbox_comm(1, 2, words, 0.2)
    sa, sb = state(0, 2), state(1, 2)
    for _ in range(6):  # no partner yet: nothing waits
        assert enter(a, sa, 64) == {1: (1 << 30) + 64}
    assert [e[0] for e in a.windows.pending[1]] == [1, 2, 3, 4, 5, 6]
    for _ in range(6):
        enter(b, sb, 64)
    assert not b.windows.pending[0]  # 1, 2 replaced by 5, 6 (unchecked), 3-6 checked
    a.windows.check()
    assert not a.windows.pending[1]
    enter(a, sa, 64)
    with pytest.raises(PlanError, match="rank 0's buffer is at offset 64 of window 0, rank 1's at offset 128"):
        enter(b, sb, 128)


def test_a_rendezvous_entry_is_not_overwritten_before_it_is_read():
    """A window call may replace the rank's own unread window entries, never its unread rendezvous entry:
    4 calls after a mailbox call the partner has not read, the next entry waits for it (here: times out)."""
    words = mailbox(2)
    a = mailbox_comm(0, 2, words, 0.2)
    sa = state(0, 2)
    a.rdv.publish(sa, None)  # call 1: a rendezvous entry, unread
    for _ in range(3):
        enter(a, sa, 0)  # calls 2-4
    with pytest.raises(HocclTimeoutError, match="rank 1 did not acknowledge"):
        enter(a, sa, 0)  # call 5 would replace call 1's entry


def test_a_window_call_against_a_mailbox_call_raises_on_both_ranks():
    words = mailbox(2)
    a, b = mailbox_comm(0, 2, words, 0.2), mailbox_comm(1, 2, words, 0.2)
    enter(a, state(0, 2), 0)
    sb = state(1, 2)
    with pytest.raises(PlanError, match="rank 0 passed a buffer at offset 0 of registered window 0"):
        b.rdv.collect(sb, b.rdv.publish(sb, None))
    a.windows.check()  # (a mismatch is kept until the call is launched, then raised)
    with pytest.raises(PlanError, match="rank 1 did not pass a buffer of a registered window in call 1"):
        a.windows.raise_error()


def test_another_collective_on_a_window_raises():
    words = mailbox(2)
    a, b = mailbox_comm(0, 2, words, 0.2), mailbox_comm(1, 2, words, 0.2)
    enter(a, state(0, 2, digest=7), 0)
    with pytest.raises(PlanError, match="rank 0 is in another collective than rank 1"):
        enter(b, state(1, 2, digest=8), 0)


@pytest.mark.parametrize("seed", range(6))
def test_mixed_calls_in_threads_never_deadlock_and_check_every_entry(seed):
    """Three ranks issue the same random sequence of window calls, mailbox (rendezvous) calls, eager calls
    and batches of a mailbox and a window call, at their own random pace: nothing deadlocks or raises,
    every window entry is checked in the end, and every pair ends at the same sequence number."""
    world, calls = 3, 60
    rng = random.Random(seed)
    kinds = [rng.choice(["window", "mailbox", "eager", "batch"]) for _ in range(calls)]
    words = mailbox(world)
    comms = [mailbox_comm(r, world, words, 10.0) for r in range(world)]
    errors: list = []

    def run(r: int) -> None:
        c, pace = comms[r], random.Random(seed * 10 + r)
        plain, eager = state(r, world), state(r, world, digest=9, eager=True)
        try:
            for kind in kinds:
                if pace.random() < 0.3:
                    time.sleep(pace.random() * 2e-3)
                if kind == "window":
                    enter(c, plain, 0)
                elif kind == "mailbox":
                    c.rdv.collect(plain, c.rdv.publish(plain, None))
                elif kind == "eager":
                    c.eager.enter(eager)
                else:
                    got = c.rdv.publish(plain, None)
                    enter(c, plain, 0)
                    c.rdv.collect(plain, got)
            deadline = time.monotonic() + 10
            while (any(c.windows.pending.values()) or c.eager.unverified) and time.monotonic() < deadline:
                c.windows.check()  # (as synchronize() does)
                c.eager.verify()
                time.sleep(1e-3)
            c.windows.raise_error()
        except Exception as exc:  # noqa: BLE001 - handed to the test
            errors.append((r, exc))

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    for c in comms:
        assert not any(c.windows.pending.values()), (c.rank, c.windows.pending)
        assert not any(c.eager.unverified), c.eager.unverified
    per_call = {"window": 1, "mailbox": 1, "eager": 1, "batch": 2}
    assert all(c.mailbox.seq[p] == sum(per_call[k] for k in kinds) for c in comms for p in range(world) if p != c.rank)


@pytest.mark.parametrize("world", [2, 4])
def test_batched_send_recv_on_windows_with_a_parity_layout(monkeypatch, world):
    """Pipeline stages on windows: a send's buffer and its receiver's sit at the same offset, so even ranks
    send from offset A and receive at offset B, odd ranks the other way round; a batch of a send to the next
    rank and a receive from the previous one moves the right bytes, twice (cached), without any export."""
    monkeypatch.setenv("HOCCL_EAGER_BYTES", "0")
    n, a_off, b_off = 3001, 0, 8192

    def body(comm, r):
        space = np.zeros(16384, np.uint8)
        comm.register_window(dev(space, r))
        exports = []
        comm._mappings.export = lambda buf, what="output": exports.append(what)
        send_at, recv_at = (a_off, b_off) if r % 2 == 0 else (b_off, a_off)
        nxt, prv = (r + 1) % world, (r - 1) % world
        bad = []
        for call in range(2):
            space[send_at:send_at + n] = data(r, call, n)
            space[recv_at:recv_at + n] = 0xA5
            comm.batch_isend_irecv([("send", dev(space[send_at:send_at + n], r), nxt),
                                    ("recv", dev(space[recv_at:recv_at + n], r), prv)], stream=7)
            comm.synchronize()
            if not np.array_equal(space[recv_at:recv_at + n], data(prv, call, n)):
                bad.append(call)
        return bad, exports

    results = ranks(monkeypatch, world, body)
    assert all(results[r] == ([], []) for r in range(world)), results


def test_buffers_at_different_offsets_raise_on_both_ranks(monkeypatch):
    """Rank 0 passes its window's bytes at offset 0, rank 1 at offset 256: the calls still pair up on the
    GPUs (the bytes land inside the windows, at the offsets the other rank assumed), and both ranks raise
    PlanError naming both offsets, at the latest in synchronize()."""
    def body(comm, r):
        space = np.zeros(4096, np.uint8)
        comm.register_window(dev(space, r))
        at = 256 * r
        inp = np.ones(64, np.uint8)
        with pytest.raises(PlanError, match="offset 0 of window 0.*offset 256 of window 0|offset 256 of window 0.*"
                                            "offset 0 of window 0"):
            comm.all_gather_into_tensor(dev(space[at:at + 128], r), dev(inp, r), stream=7)
            comm.synchronize()
        return True

    results = ranks(monkeypatch, 2, body)
    assert results == {0: True, 1: True}, results


def test_a_buffer_across_the_window_end_and_execute_on_a_window(monkeypatch):
    """A buffer that runs past its window's end is not in the window (the mailbox path, exported per call);
    comm.execute of a compiled plan on buffers inside a window takes the window path (nothing exported)."""
    from hoccl_compiler import compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions

    n = 1000
    plan = compile_plan(make_topology("h200x2", nodes=1), CollectiveSpec(kind="allgather", size_bytes=2 * n),
                        CompileOptions(chunk_bytes=1 << 30, baselines=False))

    def body(comm, r):
        space = np.zeros(8192, np.uint8)
        comm.register_window(dev(space[:4096], r))
        exports = []
        real = comm._mappings.export
        comm._mappings.export = lambda buf, what="output": (exports.append(what), real(buf, what))[1]
        bad = []
        inp = np.full(n, r + 1, np.uint8)
        out = space[4000:4000 + 2 * n]  # from inside the window to past its end
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        comm.synchronize()
        if out.tolist() != [1] * n + [2] * n or exports != ["output"]:
            bad.append(("across", exports))
        exports.clear()
        out = space[:2 * n]
        comm.execute(plan, dev(inp, r), dev(out, r), stream=7)
        comm.synchronize()
        if out.tolist() != [1] * n + [2] * n or exports:
            bad.append(("execute", exports))
        return bad

    results = ranks(monkeypatch, 2, body)
    assert results == {0: [], 1: []}, results


def test_a_window_buffer_against_one_outside_the_window_raises_on_both_ranks(monkeypatch):
    """Rank 0's output lies in its window, rank 1's runs past the end of its own: rank 1 takes the mailbox
    path and finds rank 0's window entry. Both calls run through on the GPUs (rank 1's copies go where rank 0
    said its buffer is) and both ranks raise PlanError: rank 1 once its call is launched, rank 0 at its
    check, at the latest in synchronize()."""
    def body(comm, r):
        space = np.zeros(4096, np.uint8)
        comm.register_window(dev(space[:2048], r))
        at = 1024 if r == 0 else 2000  # rank 1: bytes 2000..2128, across its window's end at 2048
        inp = np.full(64, r + 1, np.uint8)
        with pytest.raises(PlanError, match="rank 0 passed a buffer at offset 1024 of registered window 0|"
                                            "rank 1 did not pass a buffer of a registered window"):
            comm.all_gather_into_tensor(dev(space[at:at + 128], r), dev(inp, r), stream=7)
            comm.synchronize()
        return space[1024 + 64:1024 + 128].tolist() if r == 0 else None

    results = ranks(monkeypatch, 2, body)
    assert results == {0: [2] * 64, 1: None}, results


def test_paced_calls_on_a_window(monkeypatch):
    """rate_gbps= and duration_s= on window buffers take the window path like unpaced calls (on every rank
    alike, whether or not it paces): the right bytes, nothing exported, the sender's pieces paced."""
    from hoccl_runtime import pacing

    monkeypatch.setenv("HOCCL_EAGER_BYTES", "0")
    ticks: dict[int, list[float]] = {0: [], 1: []}
    monkeypatch.setattr(pacing, "Pacer", lambda device: types.SimpleNamespace(
        handle=555, sleep=lambda stream, us: None, sleep_us=lambda period: ticks[device].append(period) or 0))
    n = (2 << 20) + 3

    def body(comm, r):
        space = np.zeros(n, np.uint8)
        comm.register_window(dev(space, r))
        exports = []
        comm._mappings.export = lambda buf, what="output": exports.append(what)
        ok = True
        for call, how in ((1, {"rate_gbps": 1e-3}), (2, {"duration_s": 2.0})):
            space[:] = data(0, call, n) if r == 0 else 0xA5
            if r == 0:
                comm.send(dev(space, r), 1, stream=7, **how)
            else:
                comm.recv(dev(space, r), 0, stream=7)
            comm.synchronize()
            ok = ok and np.array_equal(space, data(0, call, n))
        return ok, exports

    results = ranks(monkeypatch, 2, body)
    assert results == {0: (True, []), 1: (True, [])}, results
    assert ticks[1] == [] and sum(ticks[0][:3]) == pytest.approx(n) and sum(ticks[0][3:]) == pytest.approx(2e6)
