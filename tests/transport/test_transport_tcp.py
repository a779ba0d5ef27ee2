"""TCP transport over loopback: data, notifications, several lanes, and every failure mode, bounded in time."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import re
import socket
import struct
import threading
import time
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hoccl_runtime.errors import HocclTimeoutError, TransportError
from hoccl_runtime.net.transport import TcpTransport
from hoccl_runtime.net.transport.base import Completions
from hoccl_runtime.net.transport.tcp import CHALLENGE, HEADER, HELLO, MAGIC, VERSION, lane_parts


@pytest.fixture(autouse=True, scope="module")
def python_lanes():
    """This module tests the Python lanes (HOCCL_TCP_ENGINE=thread); test_transport_native.py runs its tests that do
    not look at their threads again on the native engine (module scope: Hypothesis's tests take no per-test
    fixture)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOCCL_TCP_ENGINE", "thread")
        yield


def pair(lanes=4, session="s", receiver=None, **settings):
    """(sender connection, receiver connection, sender transport, receiver transport); ``receiver``: settings of the
    receiving side's own (those of ``settings`` it overrides)."""
    rx = TcpTransport(lanes=lanes, session=session, **{**settings, **(receiver or {})})
    address = rx.listen()
    tx = TcpTransport(lanes=lanes, session=session, **settings)
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("conn", rx.accept(timeout_s=10)))
    t.start()
    c_tx = tx.connect(address, timeout_s=10)
    t.join(10)
    return c_tx, box["conn"], tx, rx


def drain(conn, kind, count, timeout_s=20):
    got = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        got += [c for c in conn.poll(timeout_s=max(0.01, deadline - time.monotonic())) if c.kind == kind]
    return got


def regions(tx, rx, nbytes):
    """(random source, zeroed destination, the source's region, the destination's region)."""
    src = np.random.default_rng().integers(0, 256, nbytes, dtype=np.uint8)
    dst = np.zeros(nbytes, dtype=np.uint8)
    return src, dst, tx.register(src), rx.register(dst)


def test_writes_land_with_their_immediates():
    c_tx, c_rx, tx, rx = pair(lanes=4)
    try:
        src, dst, local, remote = regions(tx, rx, 24 << 20)
        w1 = c_tx.write(local, 0, 16 << 20, remote.id, 0, imm=11)           # split over the 4 lanes
        w2 = c_tx.write(local, 16 << 20, 8 << 20, remote.id, 16 << 20, imm=22)
        w3 = c_tx.write(local, 5, 3, remote.id, 5, imm=33)                  # tiny, one lane
        sent = drain(c_tx, "sent", 3)
        received = drain(c_rx, "received", 3)
        assert {c.write_id for c in sent} == {w1, w2, w3}
        assert sorted((c.imm, c.offset, c.nbytes) for c in received) == \
            [(11, 0, 16 << 20), (22, 16 << 20, 8 << 20), (33, 5, 3)]
        assert np.array_equal(src, dst)
    finally:
        tx.close()
        rx.close()


MiB = 1 << 20


def test_ordered_writes_arrive_in_the_order_written_among_unordered_ones():
    """Ordered writes (the executors' plan notices) keep their order at the receiver whatever the other writes do:
    200 zero-byte ordered writes, each right after an unordered one (bulk or tiny), on 8 lanes; the unordered ones
    still go over every lane."""
    c_tx, c_rx, tx, rx = pair(lanes=8)
    try:
        src, dst, local, remote = regions(tx, rx, 4 << 20)
        rng = np.random.default_rng(5)
        for i in range(200):
            n = int(rng.choice([0, 100, 1 << 20, 3 << 20]))
            c_tx.write(local, 0, n, remote.id, 0, imm=1_000_000 + i)
            c_tx.write(local, 0, 0, remote.id, 0, imm=i, ordered=True)
        got = drain(c_rx, "received", 400)
        assert [c.imm for c in got if c.imm < 1_000_000] == list(range(200))
        drain(c_tx, "sent", 400)  # (the native engine counts a lane's frames as its sender's poll sees them)
        assert sum(1 for n in c_tx.frames_sent if n) >= 4, c_tx.frames_sent  # the bulk is still spread
    finally:
        c_tx.close()
        c_rx.close()
        tx.close()
        rx.close()


def test_lane_parts_balance_cuts_a_write_over_the_least_loaded_lanes_unless_whole_ends_soon_enough():
    # idle lanes: an 8 MiB write is cut in eight 1 MiB parts, in order, covering the write
    assert lane_parts([0] * 8, 8 * MiB, MiB) == [(lane, lane * MiB, (lane + 1) * MiB) for lane in range(8)]
    # parts are never below min_part: 3 MiB over 8 idle lanes is 3 parts
    assert [hi - lo for _, lo, hi in lane_parts([0] * 8, 3 * MiB, MiB)] == [MiB] * 3
    # a few chunks in a row (what the old rule sent whole to one lane each): lanes half through the first chunk's
    # parts still share the second, filled to one level (the least-loaded first)
    queued = [MiB // 2] * 7 + [MiB]
    parts = lane_parts(queued, 8 * MiB, MiB)
    assert len(parts) == 7 and parts[-1][2] == 8 * MiB  # the busiest lane's part would be below min_part
    ends = [queued[lane] + hi - lo for lane, lo, hi in parts]
    assert max(ends) - min(ends) <= 8  # they finish together (integer rounding aside)
    # many chunks queued (a pipelined 1 GiB call: ~4 per lane): whole, on the least-loaded lane
    assert lane_parts([32 * MiB] * 3 + [25 * MiB] + [30 * MiB] * 4, 8 * MiB, MiB) == [(3, 0, 8 * MiB)]
    # the slack decides: whole ends at 9 MiB, the cut write at 1 + 1/8 MiB
    assert len(lane_parts([MiB] * 8, 8 * MiB, MiB, slack=1.0)) == 8
    assert lane_parts([MiB] * 8, 8 * MiB, MiB, slack=8.0) == [(0, 0, 8 * MiB)]
    # small writes and one lane: whole
    assert lane_parts([0] * 8, 100, MiB) == [(0, 0, 100)]
    assert lane_parts([0], 8 * MiB, MiB) == [(0, 0, 8 * MiB)]
    assert lane_parts([5, 0, 7], 0, MiB) == [(1, 0, 0)]


def test_lane_parts_idle_is_the_old_rule():
    assert lane_parts([0, 0, 9, 0], 8 * MiB, MiB, "idle") == [(0, 0, 8 * MiB // 3 + 1), (1, 8 * MiB // 3 + 1,
                                                                   2 * (8 * MiB // 3 + 1)), (3, 2 * (8 * MiB // 3 + 1),
                                                                                             8 * MiB)]
    assert lane_parts([MiB // 2] * 4, 8 * MiB, MiB, "idle") == [(0, 0, 8 * MiB)]  # no lane idle: whole


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 64 * MiB), min_size=1, max_size=16), st.integers(0, 64 * MiB),
       st.sampled_from([1, 4096, MiB]), st.sampled_from(["balance", "idle"]), st.floats(0, 4))
def test_lane_parts_cover_the_write_in_order_on_distinct_lanes(queued, nbytes, min_part, split, slack):
    parts = lane_parts(queued, nbytes, min_part, split, slack)
    assert parts[0][1] == 0 and parts[-1][2] == nbytes
    assert all(a[2] == b[1] for a, b in zip(parts, parts[1:], strict=False))
    assert len({lane for lane, _, _ in parts}) == len(parts) and all(0 <= lane < len(queued) for lane, _, _ in parts)
    if len(parts) > 1:
        assert min(hi - lo for _, lo, hi in parts) >= min_part - 1  # the idle rule rounds its steps up
    else:
        assert queued[parts[0][0]] == min(queued)


def test_idle_lanes_share_a_write_and_busy_lanes_take_whole_writes():
    c_tx, c_rx, tx, rx = pair(lanes=4, split="idle")
    try:
        src, dst, local, remote = regions(tx, rx, 128 << 20)
        for k in range(8):  # the first finds 4 idle lanes; the next 7 are issued while those are busy
            c_tx.write(local, k << 24, 16 << 20, remote.id, k << 24, imm=k)
        drain(c_rx, "received", 8)
        drain(c_tx, "sent", 8)
        assert np.array_equal(src, dst)
        assert min(c_tx.frames_sent) >= 1          # the first write went over every lane
        assert sum(c_tx.frames_sent) <= 16         # not 4 parts per write (32 frames)
        assert c_tx._queued == [0, 0, 0, 0]        # the bookkeeping drains
    finally:
        tx.close()
        rx.close()


def test_part_size_and_socket_buffers_are_settings(monkeypatch):
    # whole 8 MiB writes per lane, fixed 1 MiB socket buffers: same bytes, and the buffers are what was set
    c_tx, c_rx, tx, rx = pair(lanes=4, min_part=8 << 20, socket_buffer=1 << 20)
    try:
        src, dst, local, remote = regions(tx, rx, 24 << 20)
        for k in range(3):
            c_tx.write(local, k << 23, 8 << 20, remote.id, k << 23, imm=k)
        drain(c_rx, "received", 3)
        assert np.array_equal(src, dst)
        # Linux doubles the value set (bookkeeping) up to net.core.rmem_max; autotuning would start far lower
        assert c_tx.lanes[0].getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= min(1 << 20, _rmem_max())
    finally:
        tx.close()
        rx.close()
    monkeypatch.setenv("HOCCL_TCP_MIN_PART", "4096")
    assert TcpTransport().min_part == 4096 and TcpTransport().socket_buffer == 0  # autotuning by default
    monkeypatch.setenv("HOCCL_TCP_SOCKET_BUFFER", "lots")
    with pytest.raises(TransportError, match="HOCCL_TCP_SOCKET_BUFFER='lots'"):
        TcpTransport()
    with pytest.raises(TransportError, match="min_part=0"):
        TcpTransport(min_part=0, socket_buffer=0)
    monkeypatch.delenv("HOCCL_TCP_SOCKET_BUFFER")
    assert (TcpTransport().split, TcpTransport().split_slack) == ("balance", 1.0)
    monkeypatch.setenv("HOCCL_TCP_SPLIT", "idle")
    monkeypatch.setenv("HOCCL_TCP_SPLIT_SLACK", "0.5")
    assert (TcpTransport().split, TcpTransport().split_slack) == ("idle", 0.5)
    assert TcpTransport(split="balance").split == "balance"  # an argument wins
    monkeypatch.setenv("HOCCL_TCP_SPLIT", "random")
    with pytest.raises(TransportError, match="HOCCL_TCP_SPLIT='random': give one of balance, idle"):
        TcpTransport()
    with pytest.raises(TransportError, match="split='x'"):
        TcpTransport(split="x")
    with pytest.raises(TransportError, match="split_slack=-1"):
        TcpTransport(split="idle", split_slack=-1)


def _rmem_max() -> int:
    try:
        with open("/proc/sys/net/core/rmem_max") as f:
            return int(f.read())
    except OSError:
        return 1 << 20


def _receiver(address_q, result_q, nbytes, die_after):
    rx = TcpTransport(lanes=2, session="x")
    buf = np.zeros(nbytes, dtype=np.uint8)
    region = rx.register(buf)  # before accepting: the peer may write as soon as it is connected
    assert region.id == 0
    address_q.put(rx.listen())
    conn = rx.accept(timeout_s=20)
    got = 0
    while got < (die_after or 10**9):
        got += len([c for c in conn.poll(timeout_s=20) if c.kind == "received"])
        if not die_after and got == 1:
            result_q.put(int(zlib.crc32(buf)))
            rx.close()
            return
    import os

    os._exit(0)  # a peer that dies in the middle


def test_across_processes():
    ctx = mp.get_context("spawn")
    address_q, result_q = ctx.Queue(), ctx.Queue()
    n = 32 << 20
    child = ctx.Process(target=_receiver, args=(address_q, result_q, n, 0))
    child.start()
    try:
        tx = TcpTransport(lanes=2, session="x")
        conn = tx.connect(address_q.get(timeout=30), timeout_s=10)
        data = np.random.default_rng().integers(0, 256, n, dtype=np.uint8)
        conn.write(tx.register(data), 0, n, 0, 0, imm=7)
        drain(conn, "sent", 1)
        assert result_q.get(timeout=30) == zlib.crc32(data)
        tx.close()
    finally:
        child.join(20)
        if child.is_alive():
            child.kill()


def test_peer_killed_mid_transfer_is_reported():
    ctx = mp.get_context("spawn")
    address_q, result_q = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_receiver, args=(address_q, result_q, 1 << 20, 3))
    child.start()
    tx = TcpTransport(lanes=2, session="x")
    try:
        conn = tx.connect(address_q.get(timeout=30), timeout_s=10)
        region = tx.register(np.ones(1 << 20, dtype=np.uint8))
        start = time.monotonic()
        with pytest.raises(TransportError, match="connection to .* failed"):
            while time.monotonic() - start < 30:
                conn.write(region, 0, 1 << 20, 0, 0)
                with contextlib.suppress(HocclTimeoutError):
                    conn.poll(timeout_s=0.01)
        assert time.monotonic() - start < 30
    finally:
        tx.close()
        child.join(20)
        if child.is_alive():
            child.kill()


def raw_peer(**settings):
    """(receiving transport, a hand-made peer's socket that passed the handshake, the accepted connection): a
    one-lane transport with 64 bytes registered, session "s"."""
    rx = TcpTransport(lanes=1, session="s", **settings)
    host, port = rx.listen().rsplit(":", 1)
    rx.register(np.zeros(64, dtype=np.uint8))
    t, box = _accepting(rx)
    raw = socket.create_connection((host, int(port)), timeout=10)
    assert raw_handshake(raw, b"s") == 1
    t.join(10)
    return rx, raw, box["conn"]


def test_corrupt_frame_is_detected():
    rx, raw, conn = raw_peer()
    head = HEADER.pack(MAGIC, VERSION, 0, 0, 0, 0, 1, 0, 0, 4, 0, 0, 4)
    raw.sendall(head + struct.pack("<I", zlib.crc32(head) ^ 1))  # a bit flipped
    with pytest.raises(TransportError, match="corrupt frame header"):
        conn.poll(timeout_s=10)
    raw.close()
    rx.close()


def raw_handshake(sock, session: bytes, key: bytes = b"", lane: int = 0, lanes: int = 1, name: bytes = b"raw",
                  magic: bytes = MAGIC) -> int:
    """A hand-made peer's side of the handshake; the acceptor's final status (0 refused, 1 accepted)."""
    import hashlib
    import hmac

    hello = HELLO.pack(magic, VERSION, lane, lanes, b"12345678", session.ljust(32, b"\0"), name.ljust(16, b"\0"),
                       b"n" * 16)
    sock.sendall(hello)
    status = sock.recv(1)
    if status != b"\1":
        return 0
    rest = b""
    while len(rest) < CHALLENGE.size - 1:
        rest += sock.recv(CHALLENGE.size - 1 - len(rest))
    nonce_a = rest[:16]
    me, it = sock.getsockname(), sock.getpeername()
    ends = f"{me[0]}|{me[1]}|{it[0]}|{it[1]}".encode()  # both ends of this connection, connector first
    sock.sendall(hmac.new(key, b"connector" + hello + nonce_a + ends, hashlib.sha256).digest())
    return sock.recv(1)[0]


def test_session_mismatch_refused_on_both_sides():
    rx = TcpTransport(lanes=1, session="plan-a")
    address = rx.listen()
    errors = {}

    def accept():
        try:
            rx.accept(timeout_s=2)
        except (TransportError, HocclTimeoutError) as exc:  # the wrong peer is dropped; the wait times out naming it
            errors["rx"] = str(exc)

    t = threading.Thread(target=accept)
    t.start()
    with pytest.raises(TransportError, match="session mismatch"):
        TcpTransport(lanes=1, session="plan-b").connect(address, timeout_s=10)
    t.join(10)
    assert "session mismatch" in errors["rx"]
    rx.close()


def test_setup_errors_are_clear():
    busy = TcpTransport(lanes=1)
    address = busy.listen()
    port = int(address.split(":")[1])
    with pytest.raises(TransportError, match=f"cannot listen on 127.0.0.1:{port}"):
        TcpTransport(port=port).listen()
    busy.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    free_port = s.getsockname()[1]
    s.close()
    with pytest.raises(TransportError, match="cannot connect to"):
        TcpTransport(lanes=1).connect(f"127.0.0.1:{free_port}", timeout_s=5)
    with pytest.raises(TransportError, match="host:port"):
        TcpTransport().connect("nowhere", timeout_s=1)
    lonely = TcpTransport(lanes=1)
    lonely.listen()
    t0 = time.monotonic()
    with pytest.raises(HocclTimeoutError, match="no peer connected"):
        lonely.accept(timeout_s=0.5)
    assert time.monotonic() - t0 < 5
    lonely.close()
    with pytest.raises(TransportError, match="lanes"):
        TcpTransport(lanes=0)
    with pytest.raises(TransportError, match="uint8"):
        TcpTransport().register(np.zeros(4, dtype=np.float32))


def test_bad_writes_and_poll_timeout():
    c_tx, c_rx, tx, rx = pair(lanes=1)
    try:
        local = tx.register(np.zeros(16, dtype=np.uint8))
        with pytest.raises(TransportError, match="outside local region"):
            c_tx.write(local, 8, 16, 0, 0)
        with pytest.raises(TransportError, match="32 bits"):
            c_tx.write(local, 0, 4, 0, 0, imm=2**32)
        with pytest.raises(HocclTimeoutError, match="no completion"):
            c_rx.poll(timeout_s=0.2)
        # a write into a region the receiver never registered fails the connection, clearly
        c_tx.write(local, 0, 4, remote_region=5, remote_offset=0)
        with pytest.raises(TransportError, match="outside what this side registered .*same plan, chunk size"):
            while True:
                c_rx.poll(timeout_s=5)
    finally:
        tx.close()
        rx.close()


def test_completions_before_a_failure_are_delivered_first():
    c_tx, c_rx, tx, rx = pair(lanes=2)
    try:
        data = np.arange(64, dtype=np.uint8)
        local, remote = tx.register(data), rx.register(np.zeros(64, dtype=np.uint8))
        c_tx.write(local, 0, 64, remote.id, 0, imm=9)
        drain(c_tx, "sent", 1)
        time.sleep(0.2)
        tx.close()  # the sender finished and left
        time.sleep(0.2)
        first = c_rx.poll(timeout_s=5)
        assert [(c.kind, c.imm) for c in first] == [("received", 9)]
        with pytest.raises(TransportError, match="peer closed"):
            c_rx.poll(timeout_s=5)
    finally:
        rx.close()


def test_completions_wake_a_waiting_poller_and_keep_their_order():
    """The deque between lane threads and the poller: items come out in order; a poller waiting for the first is woken
    by a put from another thread (not by its timeout); a wait with nothing put returns None at its timeout."""
    comps = Completions()
    assert comps.empty() and comps.take() is None
    for k in range(3):
        comps.put(k)
    assert [comps.take(), comps.take(), comps.take(), comps.take()] == [0, 1, 2, None]
    t0 = time.monotonic()
    assert comps.take(0.05) is None and time.monotonic() - t0 >= 0.04
    for _ in range(20):  # a put racing the poller's look: never lost, never waits out the 5 s
        putter = threading.Timer(0.001, comps.put, args=("late",))
        t0 = time.monotonic()
        putter.start()
        assert comps.take(5.0) == "late"
        assert time.monotonic() - t0 < 2.0
        putter.join()
    assert comps.empty()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3 << 20), st.integers(0, 1 << 20)), min_size=1, max_size=12),
       st.sampled_from([1, 4096, 1 << 20]), st.integers(1, 5))
def test_any_writes_land_whole_whatever_the_lanes_hold(writes, min_part, lanes):
    """Writes of any size (0 bytes included) at any offsets, posted back to back so that some find idle
    lanes and some busy ones: every byte lands where it was sent, one completion per write, and the
    per-lane bookkeeping drains to zero."""
    c_tx, c_rx, tx, rx = pair(lanes=lanes, min_part=min_part)
    try:
        size = 4 << 20
        src, dst, local, remote = regions(tx, rx, size)
        want = np.zeros(size, dtype=np.uint8)
        posted = []
        for k, (n, off) in enumerate(writes):
            n = min(n, size - off)
            posted.append(c_tx.write(local, off, n, remote.id, off, imm=k))
            want[off:off + n] = src[off:off + n]
        received = drain(c_rx, "received", len(writes))
        drain(c_tx, "sent", len(writes))
        assert sorted(c.imm for c in received) == list(range(len(writes)))
        assert np.array_equal(dst, want)
        assert c_tx._queued == [0] * lanes and sum(c_tx.frames_sent) >= len(writes)
    finally:
        tx.close()
        rx.close()


def _accepting(rx, timeout_s=10):
    box = {}

    def run():
        try:
            box["conn"] = rx.accept(timeout_s=timeout_s)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, box


def test_stray_connections_are_dropped_and_the_real_peer_gets_in():
    """A wrong-session hello, an HTTP request, a silent socket and a hello naming lane 7 of 2 come first; the
    acceptor drops each and the real peer (with the job's secret) connects, without waiting for the silent one."""
    import hoccl_runtime.net.transport.tcp as tcp

    secret = b"k" * 32
    rx = TcpTransport(lanes=2, session="job", secret=secret)
    address = rx.listen()
    host, port = address.split(":")
    t, box = _accepting(rx)
    old = tcp.HELLO_TIMEOUT_S
    tcp.HELLO_TIMEOUT_S = 0.5  # the silent one is dropped after this long
    try:
        strays = []
        for send in (lambda c: raw_handshake(c, b"other", secret, lanes=2),
                     lambda c: c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b" " * 100),
                     lambda c: None,
                     lambda c: raw_handshake(c, b"job", secret, lane=7, lanes=2)):
            c = socket.create_connection((host, int(port)), timeout=10)
            send(c)
            strays.append(c)
        tx = TcpTransport(lanes=2, session="job", secret=secret, name="node1")
        tx.connect(address, timeout_s=10)
        t.join(10)
        assert "conn" in box, box
        assert box["conn"].peer_name == "node1"
        reasons = " | ".join(rx.refused)
        assert "session mismatch" in reasons and "lane 7 of 2" in reasons
        # hellos are read concurrently: the silent socket did not hold the real peer back; its refusal (at its
        # deadline) is taken by the next accept
        with pytest.raises(HocclTimeoutError, match="no valid hello"):
            rx.accept(timeout_s=1.0)
    finally:
        tcp.HELLO_TIMEOUT_S = old
        for c in strays:
            c.close()
        rx.close()
        tx.close()


def test_peers_prove_they_hold_the_secret():
    rx = TcpTransport(lanes=1, session="job", secret=b"a" * 32)
    address = rx.listen()
    t, box = _accepting(rx, timeout_s=2)
    with pytest.raises(TransportError, match="failed authentication: it does not hold this job's secret"):
        TcpTransport(lanes=1, session="job", secret=b"b" * 32).connect(address, timeout_s=5)
    # a process with only the plan (the session) and no secret: refused by the acceptor's check of its code
    host, port = address.split(":")
    c = socket.create_connection((host, int(port)), timeout=5)
    assert raw_handshake(c, b"job", b"") == 0
    c.close()
    t.join(10)
    assert isinstance(box.get("error"), HocclTimeoutError)
    assert "failed authentication" in str(box["error"])
    rx.close()


def test_an_incomplete_connection_is_closed_when_accept_times_out():
    """A peer that opens one lane of two and stops: accept times out naming it, and that lane is closed (the
    peer sees EOF), not left open until the transport closes."""
    rx = TcpTransport(lanes=2, session="job")
    address = rx.listen()
    host, port = address.split(":")
    t, box = _accepting(rx, timeout_s=1.5)
    c = socket.create_connection((host, int(port)), timeout=5)
    assert raw_handshake(c, b"job", lanes=2) == 1  # lane 0 of 2 accepted, lane 1 never comes
    t.join(10)
    assert isinstance(box.get("error"), HocclTimeoutError) and "closed 1 lane(s)" in str(box["error"])
    c.settimeout(5)
    assert c.recv(1) == b""  # closed by the acceptor
    assert not rx._pending
    c.close()
    rx.close()


@pytest.mark.parametrize("kwargs, text", [({"port": -1}, "port=-1"), ({"port": 70000}, "port=70000"),
                                          ({"port": "80"}, "port='80'"),
                                          ({"socket_buffer": 2**40}, "socket_buffer=1099511627776"),
                                          ({"socket_buffer": 1.5}, "socket_buffer=1.5"),
                                          ({"secret": "str"}, "secret is a str")])
def test_bad_transport_arguments_are_transport_errors_naming_the_value(kwargs, text):
    """Each was an OverflowError or TypeError from deep inside (setsockopt, bind, the MAC)."""
    from hoccl_runtime.errors import TransportError

    with pytest.raises(TransportError, match=re.escape(text)):
        TcpTransport(**kwargs)


def test_the_socket_buffer_setting_is_bounded(monkeypatch):
    from hoccl_runtime.errors import TransportError

    monkeypatch.setenv("HOCCL_TCP_SOCKET_BUFFER", str(2**32))
    with pytest.raises(TransportError, match="HOCCL_TCP_SOCKET_BUFFER=4294967296 is out of range"):
        TcpTransport()


def test_a_socket_address_setting_this_host_cannot_listen_at_names_the_variable(monkeypatch):
    from hoccl_runtime.comm.net import _local_address
    from hoccl_runtime.errors import HocclError

    monkeypatch.setenv("HOCCL_SOCKET_ADDR", "203.0.113.7")  # TEST-NET-3: no host has it
    with pytest.raises(HocclError, match=r"HOCCL_SOCKET_ADDR='203.0.113.7': this host cannot listen"):
        _local_address()
    monkeypatch.setenv("HOCCL_SOCKET_ADDR", "127.0.0.1")
    assert _local_address() == "127.0.0.1"


def test_the_real_peer_gets_in_beside_many_silent_and_slow_sockets():
    """Any local process can open sockets to the listener without the secret: 100 silent ones and one sending its
    hello a byte every 0.3 s (each cost 5 s, one at a time, and a slow one kept accept past its timeout). The real
    peer gets in at once, and accept's timeout is a hard limit."""
    import hoccl_runtime.net.transport.tcp as tcp

    old = tcp.HELLO_TIMEOUT_S
    tcp.HELLO_TIMEOUT_S = 2.0
    secret = b"s" * 32
    rx = TcpTransport(lanes=2, session="job", secret=secret)
    host, port = rx.listen().split(":")
    strays, stop = [], threading.Event()
    try:
        for _ in range(100):
            strays.append(socket.create_connection((host, int(port)), timeout=10))
        slow = socket.create_connection((host, int(port)), timeout=10)
        strays.append(slow)

        def drip():
            for byte in HELLO.pack(MAGIC, VERSION, 0, 2, b"x" * 8, b"job".ljust(32, b"\0"), b"slow".ljust(16, b"\0"),
                                   b"\0" * 16):
                if stop.wait(0.3):
                    return
                with contextlib.suppress(OSError):
                    slow.sendall(bytes([byte]))

        threading.Thread(target=drip, daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(HocclTimeoutError):
            rx.accept(timeout_s=1.0)  # nobody real: the timeout holds, whatever the strays do
        assert time.monotonic() - t0 < 3
        t, box = _accepting(rx, timeout_s=10)
        tx = TcpTransport(lanes=2, session="job", secret=secret, name="real")
        t0 = time.monotonic()
        tx.connect(f"{host}:{port}", timeout_s=10)
        t.join(10)
        assert box.get("conn") is not None and box["conn"].peer_name == "real"
        assert time.monotonic() - t0 < 4, time.monotonic() - t0  # (one at a time: 100 x 2 s)
        tx.close()
    finally:
        stop.set()
        tcp.HELLO_TIMEOUT_S = old
        for c in strays:
            c.close()
        rx.close()


def test_a_relay_cannot_carry_the_handshake():
    """A process that relays a real handshake between two connections of its own (the connector dialled it, say
    through an address planted in the unauthenticated store) could then inject frames; the codes cover both ends'
    addresses and ports, so the relayed handshake fails on both sides."""
    secret = b"r" * 32
    rx = TcpTransport(lanes=1, session="job", secret=secret)
    target = rx.listen()
    thost, tport = target.split(":")
    relay = socket.create_server(("127.0.0.1", 0))
    relay_port = relay.getsockname()[1]

    def pump(a, b):
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def serve():
        with contextlib.suppress(OSError):
            inner, _ = relay.accept()
            outer = socket.create_connection((thost, int(tport)))
            for a, b in ((inner, outer), (outer, inner)):
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    t, box = _accepting(rx, timeout_s=3)
    tx = TcpTransport(lanes=1, session="job", secret=secret, name="victim")
    try:
        with pytest.raises(TransportError, match="failed authentication.*relay"):
            tx.connect(f"127.0.0.1:{relay_port}", timeout_s=5)
        t.join(5)
        assert "conn" not in box and isinstance(box.get("error"), HocclTimeoutError), box
    finally:
        tx.close()
        rx.close()
        relay.close()


@pytest.mark.parametrize("direct", [262144, 1 << 20, 0])
def test_small_writes_into_idle_lanes_leave_from_the_callers_thread(monkeypatch, direct):
    """A small write into a lane with nothing queued is sent by the caller (its "sent" completion is there when
    write() returns: no hand-off to the lane's thread); with HOCCL_TCP_DIRECT_BYTES=0 every write is handed over.
    Both ways, interleaved with large writes that the lane threads carry, every write lands once, in place, and
    each lane's frames arrive in the order they were numbered."""
    monkeypatch.setenv("HOCCL_TCP_DIRECT_BYTES", str(direct))
    c_tx, c_rx, tx, rx = pair(lanes=2)
    try:
        assert tx.direct_bytes == direct
        src, dst, local, remote = regions(tx, rx, 8 << 20)
        w = c_tx.write(local, 0, 100, remote.id, 0, imm=1)
        first = c_tx.poll(timeout_s=0)
        if direct:
            assert [(c.kind, c.write_id) for c in first] == [("sent", w)]
        ids = {w} | {c_tx.write(local, off, n, remote.id, off, imm=2 + i)
                     for i, (off, n) in enumerate([(100, 3 << 20), (4 << 20, 1000), (5 << 20, 3 << 20), (9, 50)])}
        sent = [c.write_id for c in first] + [c.write_id for c in drain(c_tx, "sent", 5 - len(first))]
        assert sorted(sent) == sorted(ids)
        drain(c_rx, "received", 5)
        for off, n in [(0, 100), (100, 3 << 20), (4 << 20, 1000), (5 << 20, 3 << 20)]:
            assert np.array_equal(dst[off:off + n], src[off:off + n])
    finally:
        c_tx.close()
        c_rx.close()
        tx.close()
        rx.close()


def test_the_first_part_of_a_cut_write_leaves_from_the_callers_thread(monkeypatch):
    """A write cut over idle lanes into parts of at most HOCCL_TCP_DIRECT_BYTES: the caller sends its first part
    itself, after handing the others to their lanes' threads, so the parts travel at once; every byte lands once, in
    place, and the write completes once (one "sent", one "received")."""
    import threading

    monkeypatch.setenv("HOCCL_TCP_DIRECT_BYTES", str(64 << 10))
    c_tx, c_rx, tx, rx = pair(lanes=4, min_part=64 << 10)
    senders: list = []
    send_frame = c_tx._send_frame

    def spy(lane, sock, item):
        senders.append((item[1], threading.current_thread().name))  # (part, thread)
        return send_frame(lane, sock, item)

    c_tx._send_frame = spy
    try:
        src, dst, local, remote = regions(tx, rx, 1 << 20)
        w = c_tx.write(local, 0, 256 << 10, remote.id, 0, imm=5)
        assert [c.write_id for c in drain(c_tx, "sent", 1)] == [w]
        got = drain(c_rx, "received", 1)
        assert [(c.imm, c.nbytes) for c in got] == [(5, 256 << 10)], got
        assert np.array_equal(dst[:256 << 10], src[:256 << 10])
        assert sorted(p for p, _ in senders) == [0, 1, 2, 3], senders
        by = dict(senders)
        assert by[0] == threading.current_thread().name, senders  # the caller's
        assert all(name.startswith("hoccl-tcp-send") for p, name in senders if p), senders
    finally:
        c_tx.close()
        c_rx.close()
        tx.close()
        rx.close()


def test_a_reset_connection_is_reported_as_the_peer_closing_it():
    """A peer whose socket resets (closed with data unread, or its process killed: RST, not FIN) is "the peer
    closed the connection", as a clean close is, not a bare "Connection reset by peer"."""
    import socket
    import struct

    rx, raw, conn = raw_peer()
    try:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST
        raw.close()
        with pytest.raises(TransportError, match=r"peer closed the connection \(reset"):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                conn.poll(timeout_s=0)
                time.sleep(0.01)
    finally:
        rx.close()


def test_polled_receives_land_every_write_with_no_receiving_thread():
    """receive="poll": no lane has a receiving thread; whoever polls reads what the lanes have. Writes cut over the
    lanes, whole, tiny, empty and ordered all land once, in place, with their immediates and byte counts, while
    the sender's threads push them (the receiver polls; nothing is direct from the sender's caller then)."""
    c_tx, c_rx, tx, rx = pair(lanes=4, receive="poll")
    try:
        assert rx.receive == "poll" and tx.direct_bytes == 0
        assert not c_rx._threads[1] and all(t.name.startswith("hoccl-tcp-send") for t in c_rx._threads[0])
        src, dst, local, remote = regions(tx, rx, 24 << 20)
        end = 24 << 20
        writes = [(0, 16 << 20, 11, False), (16 << 20, (8 << 20) - 10, 22, False), (end - 10, 3, 33, False),
                  (end - 7, 0, 44, True), (end - 7, 7, 55, True)]
        ids = {c_tx.write(local, off, n, remote.id, off, imm=imm, ordered=o) for off, n, imm, o in writes}
        received = drain(c_rx, "received", len(writes))  # the receiver's polls make room for the senders' threads
        assert {c.write_id for c in drain(c_tx, "sent", len(writes))} == ids
        assert sorted((c.imm, c.offset, c.nbytes) for c in received) == sorted((imm, off, n) for off, n, imm, _
                                                                               in writes)
        assert np.array_equal(src[:end - 7], dst[:end - 7]) and np.array_equal(src[-7:], dst[-7:])
        assert c_rx.poll(timeout_s=0) == []
    finally:
        c_tx.close()
        c_rx.close()
        tx.close()
        rx.close()


@pytest.mark.parametrize("how", ["corrupt", "mid-frame", "closed"])
def test_polled_receives_report_a_bad_or_closed_peer(how):
    """receive="poll": a corrupt header, a peer gone in the middle of a frame, and a peer that closed are the same
    TransportErrors as with receiving threads, raised by poll (no hang: poll waits at most its timeout)."""
    rx, raw, conn = raw_peer(receive="poll")
    try:
        head = HEADER.pack(MAGIC, VERSION, 0, 0, 0, 0, 1, 0, 0, 4, 0, 0, 4)
        crc = zlib.crc32(head) ^ (1 if how == "corrupt" else 0)
        raw.sendall(head + struct.pack("<I", crc) + (b"ab" if how == "mid-frame" else b""))
        if how != "corrupt":
            raw.close()
        want = {"corrupt": "corrupt frame header", "mid-frame": "closed the connection mid-write",
                "closed": "the peer closed the connection"}[how]
        start = time.monotonic()
        with pytest.raises(TransportError, match=want):
            while time.monotonic() - start < 10:
                conn.poll(timeout_s=1)
    finally:
        raw.close()
        rx.close()


def test_a_bad_receive_setting_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HOCCL_TCP_RECEIVE", "threads")
    with pytest.raises(TransportError, match="HOCCL_TCP_RECEIVE.*thread, poll"):
        TcpTransport()
    with pytest.raises(TransportError, match="receive='x': choose one of thread, poll"):
        TcpTransport(receive="x")
