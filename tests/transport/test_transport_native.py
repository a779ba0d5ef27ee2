"""The native lane engine (``HOCCL_TCP_ENGINE=native``, net/transport/_lanes.c): the TCP transport's tests that do not
look at the Python lanes' own threads run again on it (imported from test_transport_tcp, with the engine set for this
module), then what is its own: a hostile peer's frames checked before a byte lands, both engines on one wire, the
trace, and the setting's errors. Skipped where no C compiler builds the engine."""

from __future__ import annotations

import socket
import struct
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from test_transport_tcp import (  # noqa: F401 - collected here again, on the native engine
    HEADER,
    MAGIC,
    VERSION,
    drain,
    pair,
    raw_peer,
    regions,
    test_a_reset_connection_is_reported_as_the_peer_closing_it,
    test_across_processes,
    test_any_writes_land_whole_whatever_the_lanes_hold,
    test_bad_writes_and_poll_timeout,
    test_completions_before_a_failure_are_delivered_first,
    test_corrupt_frame_is_detected,
    test_idle_lanes_share_a_write_and_busy_lanes_take_whole_writes,
    test_ordered_writes_arrive_in_the_order_written_among_unordered_ones,
    test_peer_killed_mid_transfer_is_reported,
    test_peers_prove_they_hold_the_secret,
    test_writes_land_with_their_immediates,
)

from hoccl_runtime.errors import TransportError
from hoccl_runtime.net.transport import TcpTransport, native

EXIT_SCRIPT = Path(__file__).resolve().parents[1] / "support" / "native_exit.py"  # a process leaving or forking


@pytest.fixture(autouse=True, scope="module", params=["0", "300"], ids=["blocking", "spinning"])
def native_engine(request):
    """Every test of this module on the native engine (module scope: Hypothesis's tests take no per-test fixture),
    with its lanes' threads blocking at once and spinning 300 us before they block (HOCCL_TCP_SPIN_US)."""
    try:
        native.engine_library()
    except TransportError as exc:
        pytest.skip(f"the native engine does not build here: {exc}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOCCL_TCP_ENGINE", "native")
        mp.setenv("HOCCL_TCP_SPIN_US", request.param)
        yield request.param


def test_the_spin_setting_reaches_the_engine_and_a_bad_one_is_refused(native_engine, monkeypatch):
    """HOCCL_TCP_SPIN_US is read where a connection opens its lanes: the engine is told it in nanoseconds, and a
    value outside 0..1000000 is a TransportError naming the variable."""
    # The engine's library is one object for every connection, and both ends of a pair open their lanes at once, in
    # two threads: a wrapper installed per connection would wrap the other's and count its call twice (seen under
    # load on the CI machine, 2026-12-06). So one wrapper records (engine handle, what it was told), the lanes record
    # (connection, handle), and only this test's two connections count.
    told, handles, wrapped = [], [], []
    lock = threading.Lock()
    real = native.NativeLanes.__init__

    def spy(self, conn, regions):
        held = regions.held
        with lock:
            if not any(h is held for h, _ in wrapped):
                hl_spin = held.hl_spin
                wrapped.append((held, hl_spin))
                held.hl_spin = lambda handle, ns, hl_spin=hl_spin: (told.append((handle, ns)), hl_spin(handle, ns))[1]
        real(self, conn, regions)
        handles.append((conn, self.handle))

    monkeypatch.setattr(native.NativeLanes, "__init__", spy)
    try:
        c_tx, c_rx, tx, rx = pair(lanes=2)
    finally:
        for held, hl_spin in wrapped:  # before either closes: no later connection's call is counted
            held.hl_spin = hl_spin
    tx.close()
    rx.close()
    for c in (c_tx, c_rx):
        mine = [h for conn, h in handles if conn is c]
        assert len(mine) == 1 and [ns for h, ns in told if h == mine[0]] == [int(native_engine) * 1000], told
    monkeypatch.setenv("HOCCL_TCP_SPIN_US", "-1")
    with pytest.raises(TransportError, match="HOCCL_TCP_SPIN_US"):
        native.spin_us()


def test_the_connections_run_on_the_engine_with_no_python_lane_thread():
    c_tx, c_rx, tx, rx = pair(lanes=4)
    try:
        assert c_tx._engine is not None and c_rx._engine is not None
        assert c_tx._threads == [[], []] and c_rx._threads == [[], []]
    finally:
        tx.close()
        rx.close()


@pytest.mark.parametrize("field", ["region", "offset", "bytes", "overflow", "sequence", "lane", "version"])
def test_a_hostile_frame_is_refused_before_its_payload_lands(field):
    """A peer that passed the handshake (it holds the secret) sends a frame aimed outside what this side registered
    (64 bytes in region 0), or out of sequence, or for another lane or protocol: the connection fails naming why,
    and no byte of the payload lands anywhere."""
    rx, raw, conn = raw_peer()
    target = rx._regions[0].view
    try:
        region, off, n, seq, lane, version = 0, 0, 8, 0, 0, VERSION
        if field == "region":
            region = 3
        elif field == "offset":
            off = 60
        elif field == "bytes":
            n = 65
        elif field == "overflow":
            off, n = 8, 2**64 - 4  # off + n wraps round to 4: must not pass as 4 bytes
        elif field == "sequence":
            seq = 1
        elif field == "lane":
            lane = 1
        else:
            version = VERSION + 1
        head = HEADER.pack(MAGIC, version, lane, seq, 0, 0, 1, region, off, n, 7, 0, n)
        raw.sendall(head + struct.pack("<I", zlib.crc32(head)) + b"\xff" * 8)
        want = {"region": "region 3 .*no such region", "offset": "bytes 60..68 is outside .*64 bytes",
                "bytes": "bytes 0..65 is outside", "overflow": "is outside what this side registered",
                "sequence": "frame 1 arrived where 0 was due", "lane": "not a HOCCL frame .*lane 1",
                "version": f"not a HOCCL frame .*version {VERSION + 1}"}[field]
        start = time.monotonic()
        with pytest.raises(TransportError, match=want):
            while time.monotonic() - start < 10:
                conn.poll(timeout_s=1)
        assert not target.any()
    finally:
        raw.close()
        rx.close()


@pytest.mark.parametrize("how", ["mid-frame", "closed"])
def test_a_peer_gone_mid_frame_or_between_frames_is_reported(how):
    rx, raw, conn = raw_peer()
    try:
        head = HEADER.pack(MAGIC, VERSION, 0, 0, 0, 0, 1, 0, 0, 4, 0, 0, 4)
        raw.sendall(head + struct.pack("<I", zlib.crc32(head)) + (b"ab" if how == "mid-frame" else b"abcd"))
        raw.close()
        want = "closed the connection mid-write" if how == "mid-frame" else "the peer closed the connection"
        got = []
        start = time.monotonic()
        with pytest.raises(TransportError, match=want):
            while time.monotonic() - start < 10:
                got += conn.poll(timeout_s=1)
        assert [(c.kind, c.nbytes) for c in got] == ([] if how == "mid-frame" else [("received", 4)])
    finally:
        rx.close()


@pytest.mark.parametrize("sender,receiver", [("native", "thread"), ("thread", "native")])
def test_both_engines_speak_the_same_frames(sender, receiver):
    c_tx, c_rx, tx, rx = pair(lanes=3, engine=sender, receiver={"engine": receiver})
    try:
        assert [c._engine is not None for c in (c_tx, c_rx)] == [sender == "native", receiver == "native"]
        src, dst, local, remote = regions(tx, rx, 5 << 20)
        ids = [c_tx.write(local, 0, 5 << 20, remote.id, 0, imm=1), c_tx.write(local, 0, 0, remote.id, 0, imm=2,
                                                                              ordered=True)]
        assert sorted(c.write_id for c in drain(c_tx, "sent", 2)) == ids
        assert sorted(c.imm for c in drain(c_rx, "received", 2)) == [1, 2]
        assert np.array_equal(src, dst)
    finally:
        tx.close()
        rx.close()


def _gate_events(conn, want, timeout_s=20):
    """The "received" completions of ``want`` writes, each with the flags' values seen when it came out of poll."""
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < want:
        got += [c for c in conn.poll(timeout_s=max(0.01, deadline - time.monotonic())) if c.kind == "received"]
    return got


def test_an_armed_landing_gate_opens_before_its_completion_and_only_for_its_write():
    """A gate armed for (immediate, region, offset, size) is stored the moment the write's last part is in place,
    before its "received" completion is out; a write that differs in any of the four, or the same write again, or
    one after the gates were disarmed, leaves its flag alone; a thread-engine connection cannot arm."""
    c_tx, c_rx, tx, rx = pair(lanes=4, min_part=1 << 20)
    flags = np.zeros(8, np.int32)
    addr = lambda i: int(flags.ctypes.data) + 4 * i  # noqa: E731
    try:
        src, dst, local, remote = regions(tx, rx, 8 << 20)
        size = 4 << 20  # cut over the lanes: the gate waits for every part
        assert c_rx.arm([(7, remote.id, 0, size, addr(0), 11), (8, remote.id, size, 4096, addr(1), -5),
                         (9, remote.id, size, 4096, addr(2), 3), (10, remote.id, size, 4096, addr(3), 4),
                         (12, remote.id + 1, 0, 16, addr(4), 6)])
        c_tx.write(local, 0, size, remote.id, 0, imm=7)
        got = _gate_events(c_rx, 1)
        assert [c.imm for c in got] == [7] and flags[0] == 11  # stored before the completion was out
        assert np.array_equal(src[:size], dst[:size])
        c_tx.write(local, size, 4096, remote.id, size, imm=8)   # the armed write: a negative count stored as is
        c_tx.write(local, size, 4096, remote.id, 0, imm=9)      # another offset
        c_tx.write(local, size, 2048, remote.id, size, imm=10)  # another size
        c_tx.write(local, 0, 16, remote.id, 0, imm=12)          # another region
        _gate_events(c_rx, 4)
        assert flags[1:5].tolist() == [-5, 0, 0, 0]
        flags[0] = 0
        c_tx.write(local, 0, size, remote.id, 0, imm=7)         # the same write again: opened once only
        _gate_events(c_rx, 1)
        assert flags[0] == 0 and c_rx._engine.gates_opened == 2
        assert c_rx.arm([(7, remote.id, 0, 64, addr(5), 1)]) and c_rx.arm([])  # replaced, then none
        c_tx.write(local, 0, 64, remote.id, 0, imm=7)
        _gate_events(c_rx, 1)
        assert flags[5] == 0
    finally:
        tx.close()
        rx.close()
    c_tx, c_rx, tx, rx = pair(lanes=1, engine="thread")
    try:
        assert not c_rx.arm([(7, 0, 0, 64, addr(6), 1)])
    finally:
        tx.close()
        rx.close()


def test_a_write_posted_ahead_leaves_once_its_flag_shows_and_holds_no_lane():
    """``write(after=(flag, count))`` holds the write off its lanes until the int32 flag reaches the count (cyclic, as
    the GPU's wait): a write posted after it on the one lane leaves first; the count reached (from below, across the
    wrap) lets it go; a cancelled one never leaves; one still waiting at close is waited for up to the drain."""
    c_tx, c_rx, tx, rx = pair(lanes=1)
    flags = np.zeros(4, np.int32)
    addr = lambda i: int(flags.ctypes.data) + 4 * i  # noqa: E731
    try:
        assert c_tx.writes_after
        src, dst, local, remote = regions(tx, rx, 1 << 20)
        flags[0] = 2**31 - 2
        c_tx.write(local, 0, 1 << 20, remote.id, 0, imm=1, after=(addr(0), -2**31 + 1))  # two past the wrap
        c_tx.write(local, 0, 0, remote.id, 0, imm=2)
        assert [c.imm for c in drain(c_rx, "received", 1)] == [2]
        time.sleep(0.1)
        assert c_rx.poll() == []
        flags[0] = 2**31 - 1  # one short
        time.sleep(0.1)
        assert c_rx.poll() == []
        flags[0] = -2**31 + 1
        assert [c.imm for c in drain(c_rx, "received", 1)] == [1] and np.array_equal(src, dst)
        with pytest.raises(TransportError, match="unordered"):  # an ordered write cannot wait: later ones would pass
            c_tx.write(local, 0, 64, remote.id, 0, imm=3, ordered=True, after=(addr(1), 5))
        c_tx.write(local, 0, 64, remote.id, 0, imm=3, after=(addr(1), 5))
        c_tx.cancel_after()
        flags[1] = 5
        c_tx.write(local, 0, 0, remote.id, 0, imm=4)
        assert [c.imm for c in drain(c_rx, "received", 1)] == [4]
        time.sleep(0.1)
        assert c_rx.poll() == []
        c_tx.write(local, 0, 64, remote.id, 0, imm=5, after=(addr(2), 1))
        threading.Timer(0.2, lambda: flags.__setitem__(2, 1)).start()
        c_tx.close(drain_timeout_s=5)  # waits for the flag, then the frame leaves
        assert [c.imm for c in drain(c_rx, "received", 1)] == [5]
    finally:
        tx.close()
        rx.close()
    c_tx, c_rx, tx, rx = pair(lanes=1, engine="thread")
    try:
        src, dst, local, remote = regions(tx, rx, 64)
        assert not c_tx.writes_after
        with pytest.raises(TransportError, match="native TCP engine"):
            c_tx.write(local, 0, 64, remote.id, 0, imm=1, after=(addr(3), 1))
        c_tx.write(local, 0, 64, remote.id, 0, imm=2)  # refused before anything was counted: the next one goes
        assert [c.imm for c in drain(c_rx, "received", 1)] == [2] and np.array_equal(src, dst)
    finally:
        tx.close()
        rx.close()


def test_the_trace_has_the_engines_sends_and_receives_on_the_hosts_clock():
    c_tx, c_rx, tx, rx = pair(lanes=2)
    tx.trace, rx.trace = [], []
    try:
        src, dst, local, remote = regions(tx, rx, 4 << 20)
        before = time.perf_counter()
        c_tx.write(local, 0, 4 << 20, remote.id, 0, imm=3)
        drain(c_tx, "sent", 1)
        drain(c_rx, "received", 1)
        after = time.perf_counter()
        sends = [r for r in tx.trace if r[0] == "send"]
        recvs = [r for r in rx.trace if r[0] == "recv"]
        assert sum(r[4] for r in sends) == sum(r[4] for r in recvs) == 4 << 20
        assert all(before <= r[5] <= r[6] <= after for r in sends + recvs)
        assert [r[0] for r in tx.trace][:1] == ["post"]
    finally:
        tx.close()
        rx.close()


def test_the_engine_setting_and_its_errors(monkeypatch, tmp_path):
    monkeypatch.setenv("HOCCL_TCP_ENGINE", "c")
    with pytest.raises(TransportError, match="HOCCL_TCP_ENGINE.*thread, native, auto"):
        TcpTransport()
    with pytest.raises(TransportError, match="engine='c'"):
        TcpTransport(engine="c")
    monkeypatch.setenv("HOCCL_TCP_ENGINE", "native")
    monkeypatch.setenv("HOCCL_TCP_RECEIVE", "poll")
    with pytest.raises(TransportError, match="HOCCL_TCP_RECEIVE=poll is for the Python lanes"):
        TcpTransport()
    assert TcpTransport(engine="auto")._native is None  # auto with polled receives: the Python lanes


def test_without_a_compiler_native_says_how_and_auto_uses_the_python_lanes(monkeypatch, tmp_path):
    """A fresh cache and no compiler: native raises naming the fix; auto quietly uses the Python lanes."""
    monkeypatch.setattr(native, "_built", {})
    monkeypatch.setenv("HOCCL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(native.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(TransportError, match="building the native TCP engine failed.*HOCCL_TCP_ENGINE=thread"):
        TcpTransport(engine="native")
    assert TcpTransport(engine="auto")._native is None
    with pytest.raises(TransportError, match="HOCCL_TCP_ENGINE=thread"):  # the failure is kept, not retried per use
        TcpTransport(engine="native")


def test_a_closed_connection_refuses_writes_and_its_threads_are_gone():
    c_tx, c_rx, tx, rx = pair(lanes=2)
    local = tx.register(np.zeros(16, np.uint8))
    c_tx.close()
    with pytest.raises(TransportError, match="closed"):
        c_tx.write(local, 0, 4, 0, 0)
    assert c_tx._engine.handle is None
    c_rx.close()
    tx.close()
    rx.close()


def test_closing_lets_the_queued_writes_leave_first():
    c_tx, c_rx, tx, rx = pair(lanes=2)
    try:
        src, dst, local, remote = regions(tx, rx, 16 << 20)
        for i in range(16):
            c_tx.write(local, i << 20, 1 << 20, remote.id, i << 20, imm=i)
        c_tx.close()  # the 16 writes are queued on the engine's senders: they leave before the lanes shut
        assert sorted(c.imm for c in drain(c_rx, "received", 16)) == list(range(16))
        assert np.array_equal(src, dst)
    finally:
        tx.close()
        rx.close()


def test_queues_grow_past_their_first_size_and_keep_their_order():
    """3,000 writes posted on one lane at once (its queue starts at 64 parts) and received before anyone polls (the
    connection's events start at 1,024): every one arrives, in the order written, and every "sent" comes."""
    c_tx, c_rx, tx, rx = pair(lanes=1)
    try:
        src, dst, local, remote = regions(tx, rx, 4096)
        for i in range(3000):
            c_tx.write(local, i % 4096, 1, remote.id, i % 4096, imm=i)
        time.sleep(0.5)  # the receiver's events pile up unpolled meanwhile
        assert [c.imm for c in drain(c_rx, "received", 3000)] == list(range(3000))
        assert len(drain(c_tx, "sent", 3000)) == 3000 and np.array_equal(src[:3000], dst[:3000])
    finally:
        tx.close()
        rx.close()


def test_a_socket_closed_under_the_engine_is_a_clear_error():
    c_tx, c_rx, tx, rx = pair(lanes=1)
    try:
        c_rx.lanes[0].shutdown(socket.SHUT_RDWR)
        start = time.monotonic()
        with pytest.raises(TransportError, match="peer closed|closed the connection"):
            while time.monotonic() - start < 10:
                c_rx.poll(timeout_s=1)
    finally:
        tx.close()
        rx.close()


def test_a_connections_wait_ends_at_its_next_completion_and_pause_uses_it(monkeypatch):
    """The driving loop's pause (HOCCL_NET_WAKE, default on): on the engine a wait returns once a write came in,
    not after its timeout; ``pause`` waits on a lone connection that can, else sleeps."""
    from hoccl_runtime.net.transport.base import pause

    c_tx, c_rx, tx, rx = pair(lanes=2)
    try:
        src, dst, local, remote = regions(tx, rx, 1 << 20)
        c_tx.write(local, 0, 1 << 20, remote.id, 0, imm=4)
        start = time.monotonic()
        pause({1: c_rx}, 5.0)
        assert time.monotonic() - start < 2.5
        assert [c.imm for c in c_rx.poll(timeout_s=0) if c.kind == "received"] == [4]
        start = time.monotonic()
        c_rx.wait(0.3)  # nothing more comes: the whole timeout
        assert time.monotonic() - start >= 0.25
    finally:
        tx.close()
        rx.close()
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    pause({1: object(), 2: object()}, 0.01)  # two peers: a sleep (a wait on one would miss the other)
    assert slept == [0.01]


def test_a_process_that_exits_with_connections_open_ends_their_threads_first():
    """A process that never closes its transports, with 512 MiB of writes still queued on the engine's senders,
    exits at once and cleanly (native.py ends the open connections' threads at exit, before the interpreter frees
    the arrays they write into; that hazard itself did not show here without the hook)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(EXIT_SCRIPT), "leave"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "leaving" in done.stdout


def test_a_forked_child_leaves_its_parents_connection_alone():
    """A child forked from a process with an open native connection (a data loader's worker, say) that closes it and
    exits through the interpreter's exit handlers neither cuts the parent's connection nor touches its threads."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(EXIT_SCRIPT), "fork"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "parent ok" in done.stdout, done.stderr[-2000:]


def test_a_library_others_can_write_is_not_loaded(monkeypatch, tmp_path):
    """The engine is loaded only from a folder and a file that are this user's alone: a cached library in a folder
    others may write to (another user could have planted it) is passed over and the engine built elsewhere."""
    import os

    shared, own = tmp_path / "shared", tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o777)
    planted = native._build(native.SOURCE.read_bytes()).name  # the name the library goes by
    (shared / planted).write_bytes(b"not a library")
    monkeypatch.setenv("HOCCL_CACHE_DIR", str(shared))
    monkeypatch.setattr(native.tempfile, "gettempdir", lambda: str(own))
    path = native._build(native.SOURCE.read_bytes())
    assert path.parent == own / f"hoccl-{os.getuid()}" and path.read_bytes()[:4] == b"\x7fELF"
    assert native._ours(path) and native._ours(path.parent)
