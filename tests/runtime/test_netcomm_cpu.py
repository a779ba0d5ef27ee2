"""The one-GPU-per-node communicator end to end on a CPU: two ranks in threads, CUDA faked in host memory
(tests/support/fake_cuda.py), the real TCP transport, GpuNodeExecutor, proxy thread and flags."""

from __future__ import annotations

import threading
import time

import fake_cuda
import numpy as np
import pytest
from fake_cuda import dev  # arrays as device buffers, kept alive until the test's fake streams drained
from threaded import failures, in_threads

from hoccl_runtime.errors import BufferError, HocclError


def two_ranks(monkeypatch, body):
    """Run body(comm, rank) on ranks 0 and 1 in threads; returns {rank: result or exception}."""
    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.net import NetCommunicator

    store = fake_cuda.Store()
    return fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=20, chunk_bytes=64 << 10,
                                                            lanes=2), body)


@pytest.mark.parametrize(("receive", "poll_us", "one_stream", "overlap"),
                         [("thread", "10", "2", "0"), ("poll", "10", "2", "0"), ("thread", "0", "2", "0"),
                          ("thread", "0", "0", "0"), ("thread", "10", "2", "1"), ("thread", "10", "0", "1")])
def test_collectives_through_the_proxy_in_order(monkeypatch, receive, poll_us, one_stream, overlap):
    """receive=poll: the proxy process's driving loop reads the lanes; poll_us=0: its loops spin (HOCCL_NET_POLL_US,
    a yield between looks), on the caller's stream (one_stream=2) and on copy streams (0); overlap=1: consecutive
    calls on alternate halves of the rings (HOCCL_NET_OVERLAP)."""
    monkeypatch.setenv("HOCCL_TCP_RECEIVE", receive)
    monkeypatch.setenv("HOCCL_NET_POLL_US", poll_us)
    monkeypatch.setenv("HOCCL_NET_ONE_STREAM", one_stream)
    monkeypatch.setenv("HOCCL_NET_OVERLAP", overlap)

    def body(comm, r):
        rng = np.random.default_rng(r)
        got = {}
        for n in (1, 3001, 200_000):  # 200 kB: several 64 KiB chunks through 4-slot rings
            inp = rng.integers(0, 256, n, dtype=np.uint8)
            out = np.full(2 * n, 0xA5, np.uint8)
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            a2a_in = rng.integers(0, 256, 2 * n, dtype=np.uint8)
            a2a_out = np.full(2 * n, 0xA5, np.uint8)
            comm.all_to_all_single(dev(a2a_out, r), dev(a2a_in, r), stream=7)
            buf = rng.integers(0, 256, n, dtype=np.uint8) if r == 0 else np.full(n, 0xA5, np.uint8)
            sent = buf.copy()
            comm.send(dev(buf, r), 1, stream=7) if r == 0 else comm.recv(dev(buf, r), 0, stream=7)
            bc = rng.integers(0, 256, n, dtype=np.uint8) if r == 1 else np.full(n, 0xA5, np.uint8)
            comm.broadcast(dev(bc, r), 1, stream=7)
            sc_in = rng.integers(0, 256, 2 * n, dtype=np.uint8)
            sc_out = np.full(n, 0xA5, np.uint8)
            comm.scatter(dev(sc_out, r), dev(sc_in, r) if r == 0 else None, root=0, stream=7)
            ga_in = rng.integers(0, 256, n, dtype=np.uint8)
            ga_out = np.full(2 * n, 0xA5, np.uint8)
            comm.gather(dev(ga_in, r), dev(ga_out, r) if r == 1 else None, root=1, stream=7)
            comm.synchronize()
            got[n] = (inp, out, a2a_in, a2a_out, sent, buf, bc, sc_in, sc_out, ga_in, ga_out)
        # another stream (FSDP's all-gather stream beside the group's): its own START/DONE pair, same call order
        other_in, other_out = np.full(4, r + 7, np.uint8), np.zeros(8, np.uint8)
        comm.all_gather_into_tensor(dev(other_out, r), dev(other_in, r), stream=8)
        comm.synchronize()
        got["other stream"] = other_out.tolist()
        # code written for one node's windows runs here too: calls on a window's buffer move the same bytes
        space = np.zeros(64, np.uint8)
        with pytest.raises(BufferError, match="on GPU 5"):  # as on one node: memory of the communicator's GPU
            comm.register_window(dev(space, 5))
        with comm.register_window(dev(space, r)) as win:
            space[:8] = r + 1
            comm.all_gather_into_tensor(dev(space[16:32], r), dev(space[:8], r), stream=7)
            comm.synchronize()
        got["window"] = (space[16:32].tolist(), win.closed, win.tensor)
        return got

    results = two_ranks(monkeypatch, body)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
    for r in (0, 1):
        assert results[r]["window"] == ([1] * 8 + [2] * 8, True, None), results[r]["window"]
        assert results[r]["other stream"] == [7] * 4 + [8] * 4
    for n in (1, 3001, 200_000):
        (i0, o0, a0, b0, s0, _, bc0, sc_in0, sc0, ga0, _), (i1, o1, a1, b1, _, r1, bc1, _, sc1, ga1, gout1) = \
            results[0][n], results[1][n]
        assert np.array_equal(bc0, bc1), n  # broadcast from rank 1, in place
        assert np.array_equal(sc0, sc_in0[:n]) and np.array_equal(sc1, sc_in0[n:]), n
        assert np.array_equal(gout1, np.concatenate([ga0, ga1])), n
        want = np.concatenate([i0, i1])
        assert np.array_equal(o0, want) and np.array_equal(o1, want), n
        assert np.array_equal(b0, np.concatenate([a0[:n], a1[:n]])) and np.array_equal(b1, np.concatenate([a0[n:],
                                                                                                             a1[n:]]))
        assert np.array_equal(r1, s0), n


def test_an_in_place_allgather_copies_no_block_onto_itself(monkeypatch):
    """FSDP's AllGather is in place (each rank's input is its block of the output): the rank's own block is there
    already, so no copy of it is enqueued (a same-GPU copy runs on SMs), and the output is still right. An
    out-of-place call still copies the block."""
    self_copies, local_copies = [], []
    real = fake_cuda.Runtime.memcpyAsync

    def memcpy(rt, dst, src, n, kind, stream):
        (self_copies if dst == src else local_copies).append(n)
        return real(rt, dst, src, n, kind, stream)

    monkeypatch.setattr(fake_cuda.Runtime, "memcpyAsync", memcpy)
    n = 3001

    def body(comm, r):
        out = np.full(2 * n, 0xA5, np.uint8)
        out[r * n:(r + 1) * n] = r + 1
        comm.all_gather_into_tensor(dev(out, r), dev(out[r * n:(r + 1) * n], r), stream=7)
        comm.synchronize()
        inp = np.full(n, r + 1, np.uint8)
        out2 = np.zeros(2 * n, np.uint8)
        comm.all_gather_into_tensor(dev(out2, r), dev(inp, r), stream=7)
        comm.synchronize()
        return out, out2

    results = two_ranks(monkeypatch, body)
    want = np.concatenate([np.full(n, 1, np.uint8), np.full(n, 2, np.uint8)])
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
        out, out2 = results[r]
        assert np.array_equal(out, want) and np.array_equal(out2, want), r
    assert self_copies == []
    assert n in local_copies  # the out-of-place calls copied each rank's block (staging copies are other sizes too)


def test_ranks_in_different_collectives_fail_and_release_their_streams(monkeypatch):
    def body(comm, r):
        a, b = np.zeros(1024, np.uint8), np.zeros(2048, np.uint8)
        if r == 0:
            comm.all_gather_into_tensor(dev(b, r), dev(a, r), stream=7)
        else:
            comm.all_to_all_single(dev(b, r), dev(b.copy(), r), stream=7)
        with pytest.raises(HocclError, match="every node must run the same collectives"):
            comm.synchronize()  # the fake stream already waited for DONE: the proxy released it
        return "raised"

    results = two_ranks(monkeypatch, body)
    assert results == {0: "raised", 1: "raised"}, results


@pytest.mark.parametrize("net", [None, 1500])
@pytest.mark.parametrize("kind", ["allgather", "alltoall", "sendrecv"])
def test_gpu_node_executor_with_forwarding_on_faked_cuda(monkeypatch, kind, net):
    """GpuNodeExecutor's copies (staging out, landing, forwarding within a node) for 2 nodes x 2 GPUs,
    run on host memory through the faked CUDA, reused for a second plan: byte-equal to the replay. ``net``: the
    network transfers in chunks of their own (1,500 B under 4,096 B copies: the rings' slots hold those)."""
    _forwarding_nodes(monkeypatch, kind, net)


@pytest.mark.parametrize("land,send", [("1", "1"), ("0", "1"), ("1", "0"), ("0", "0")])
@pytest.mark.parametrize("kind", ["allgather", "sendrecv"])
def test_the_native_engine_opens_the_gates_and_the_bytes_stay_right(monkeypatch, kind, land, send):
    """On the native TCP engine its receiving threads open landing gates the moment their chunks are in
    (HOCCL_NET_LAND_GATES=1, the default), and its watcher lets each write go once its staging copy's count shows
    (HOCCL_NET_SEND_GATES=1): through rings of 2 slots that each chunk of a transfer takes in turn (credits between),
    over two plans in a row, with the bytes the replay's. With 0 the loop does either itself."""
    from hoccl_runtime.net.transport import native
    from hoccl_runtime.net.transport.tcp import TcpConnection

    try:
        native.engine_library()
    except HocclError as exc:
        pytest.skip(f"the native engine does not build here: {exc}")
    monkeypatch.setenv("HOCCL_TCP_ENGINE", "native")
    monkeypatch.setenv("HOCCL_NET_LAND_GATES", land)
    monkeypatch.setenv("HOCCL_NET_SEND_GATES", send)
    ahead, write = [], TcpConnection.write
    monkeypatch.setattr(TcpConnection, "write", lambda self, *a, **kw: ahead.append("after" in kw) or write(
        self, *a, **kw))
    opened = _forwarding_nodes(monkeypatch, kind)
    assert (min(opened) > 0) if land == "1" else opened == [0, 0], opened
    assert any(ahead) == (send == "1")


def _forwarding_nodes(monkeypatch, kind, net=None) -> list[int]:
    """Run two plans on 2 nodes x 2 GPUs through GpuNodeExecutor and check the bytes; the landing gates each node's
    native engine opened (0 on the Python lanes)."""
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.net.executor import GpuNodeExecutor

    fake_cuda.install(monkeypatch, async_streams=True)
    topo = make_topology("h200x2", nodes=2)  # symmetric forwarding: u -> ū -> v̄ -> v
    spec = CollectiveSpec(kind=kind, size_bytes=4 * 20_011) if kind != "sendrecv" else \
        CollectiveSpec(kind=kind, pairs=((0, 3, 70_000), (2, 1, 9_999), (1, 2, 5)))
    opts = CompileOptions(chunk_bytes=4096, net_chunk_bytes=net, baselines=False, multicast=False)
    plans = [compile_plan(topo, spec, opts), compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=4 * 777),
                                                          opts)]

    def arrays(plan, run):
        return {r: (np.random.default_rng([r, run, 9]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8),
                    np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8)) for r in range(4)}

    data = [arrays(p, i) for i, p in enumerate(plans)]
    transports = [GpuNodeExecutor.make_transport(plans[0], n, lanes=2, secret=b'test-job') for n in range(2)]
    addresses = {n: t.listen() for n, t in enumerate(transports)}

    opened = [0, 0]
    slot = [0, 0]

    def node(n):
        bufs = [{r: (dev(i, r % 2), dev(o, r % 2)) for r, (i, o) in d.items() if r // 2 == n} for d in data]
        ex = GpuNodeExecutor(plans[0], n, bufs[0], transports[n], slots=2, timeout_s=20, reuse=True)
        slot[n] = ex.chunk  # what one ring slot holds: the plan's network chunk
        ex.connect(addresses)
        for plan, b in zip(plans, bufs, strict=True):
            ex.run(plan, b)
        opened[n] = sum(getattr(c._engine, "gates_opened", 0) for c in ex.conns.values())
        ex.close()

    errors = failures(in_threads(2, node))
    for t in transports:
        t.close()
    assert not errors, errors
    assert slot == [net or 4096] * 2
    for plan, d in zip(plans, data, strict=True):
        want = replay(plan, [d[r][0] for r in range(4)]).outputs
        for r in range(4):
            assert np.array_equal(d[r][1], want[r]), (plan.collective.kind, r)
    return opened


def test_two_nodes_of_two_gpus_through_the_node_leaders(monkeypatch):
    """NodeNetCommunicator: 4 ranks in threads as 2 nodes x 2 GPUs (local rank 0 drives each node, forwarding
    within the node), faked CUDA, real TCP: all_gather, all_to_all, broadcast through the leaders, and
    send/recv within a node (copy-engine communicator) and across nodes (pair executors), twice."""
    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.nodenet import NodeNetCommunicator

    store = fake_cuda.Store()
    world = 4

    def body(comm, r):
        got = []
        for rep in range(2):
            for n in (5, 70_001):
                inp = np.random.default_rng([r, rep, n]).integers(0, 256, n, dtype=np.uint8)
                out = np.full(world * n, 0xA5, np.uint8)
                comm.all_gather_into_tensor(dev(out, r % 2), dev(inp, r % 2), stream=7)
                a2a_in = np.random.default_rng([r, rep, n, 1]).integers(0, 256, world * n, dtype=np.uint8)
                a2a_out = np.full(world * n, 0xA5, np.uint8)
                comm.all_to_all_single(dev(a2a_out, r % 2), dev(a2a_in, r % 2), stream=7)
                bc = np.random.default_rng([9, rep, n]).integers(0, 256, n, dtype=np.uint8) if r == 3 else \
                    np.full(n, 0xA5, np.uint8)
                comm.broadcast(dev(bc, r % 2), 3, stream=7)
                # send/recv: 0 -> 3 and 2 -> 1 cross the nodes (pair executors), 1 -> 0 and 3 -> 2 stay inside
                # (the node's copy-engine communicator); every rank sends once and receives once
                p2p = np.random.default_rng([r, rep, n, 2]).integers(0, 256, n, dtype=np.uint8)
                got_p2p = np.full(n, 0xA5, np.uint8)
                dst = {0: 3, 1: 0, 2: 1, 3: 2}[r]
                src = {3: 0, 0: 1, 1: 2, 2: 3}[r]
                if r in (0, 2):  # senders first on one end, receivers first on the other: no host deadlock
                    comm.send(dev(p2p, r % 2), dst, stream=7)
                    comm.recv(dev(got_p2p, r % 2), src, stream=7)
                else:
                    comm.recv(dev(got_p2p, r % 2), src, stream=7)
                    comm.send(dev(p2p, r % 2), dst, stream=7)
                comm.synchronize()
                got.append((inp, out, a2a_in, a2a_out, bc, p2p, got_p2p, src))
        return got

    results = fake_cuda.run_ranks(world, lambda r: NodeNetCommunicator(
        r, world, r % 2, store, gpus_per_node=2, timeout_s=20, chunk_bytes=16 << 10, lanes=2), body)
    assert all(not isinstance(results.get(r), Exception) for r in range(world)), results
    for i in range(4):
        parts = [results[r][i] for r in range(world)]
        n = parts[0][0].size
        want_ag = np.concatenate([p[0] for p in parts])
        for r in range(world):
            assert np.array_equal(parts[r][1], want_ag), (i, r)
            assert np.array_equal(parts[r][3], np.concatenate([p[2][r * n:(r + 1) * n] for p in parts])), (i, r)
        assert all(np.array_equal(parts[r][4], parts[3][4]) for r in range(world)), i  # broadcast from rank 3
        for r in range(world):
            assert np.array_equal(parts[r][6], parts[parts[r][7]][5]), (i, r)  # what rank r received


def test_two_nodes_of_four_gpus(monkeypatch):
    """2 nodes x 4 GPUs (issue 6's second layout, here as 8 threads): AllGather and All-to-All through the
    leaders with forwarding inside each node, and send/recv around the ring (inside a node and across)."""
    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.nodenet import NodeNetCommunicator

    store, world, L, n = fake_cuda.Store(), 8, 4, 30_011

    def body(comm, r):
        inp = np.random.default_rng([r, 1]).integers(0, 256, n, dtype=np.uint8)
        out = np.full(world * n, 0xA5, np.uint8)
        comm.all_gather_into_tensor(dev(out, r % L), dev(inp, r % L), stream=7)
        a2a_in = np.random.default_rng([r, 2]).integers(0, 256, world * n, dtype=np.uint8)
        a2a_out = np.full(world * n, 0xA5, np.uint8)
        comm.all_to_all_single(dev(a2a_out, r % L), dev(a2a_in, r % L), stream=7)
        p2p = np.random.default_rng([r, 3]).integers(0, 256, n, dtype=np.uint8)
        got = np.full(n, 0xA5, np.uint8)
        nxt, prv = (r + 1) % world, (r - 1) % world
        if r % 2 == 0:  # even ranks send first, odd ranks receive first: no host deadlock around the ring
            comm.send(dev(p2p, r % L), nxt, stream=7)
            comm.recv(dev(got, r % L), prv, stream=7)
        else:
            comm.recv(dev(got, r % L), prv, stream=7)
            comm.send(dev(p2p, r % L), nxt, stream=7)
        comm.synchronize()
        return inp, out, a2a_in, a2a_out, p2p, got

    results = fake_cuda.run_ranks(world, lambda r: NodeNetCommunicator(
        r, world, r % L, store, gpus_per_node=L, timeout_s=30, chunk_bytes=16 << 10, lanes=2), body)
    assert all(not isinstance(results.get(r), Exception) for r in range(world)), results
    want_ag = np.concatenate([results[r][0] for r in range(world)])
    for r in range(world):
        assert np.array_equal(results[r][1], want_ag), r
        want_a2a = np.concatenate([results[p][2][r * n:(r + 1) * n] for p in range(world)])
        assert np.array_equal(results[r][3], want_a2a), r
        assert np.array_equal(results[r][5], results[(r - 1) % world][4]), r


def test_two_nodes_of_three_gpus(monkeypatch):
    """L = 3 (no forwarding pairs): an all_gather through the leaders, a send between two non-leader ranks
    of one node (the other local ranks do not take part), and one across the nodes."""
    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.nodenet import NodeNetCommunicator

    store, world, n = fake_cuda.Store(), 6, 10_007

    def body(comm, r):
        inp = np.full(n, r, np.uint8)
        out = np.full(world * n, 0xA5, np.uint8)
        comm.all_gather_into_tensor(dev(out, r % 3), dev(inp, r % 3), stream=7)
        got = np.full(n, 0xA5, np.uint8)
        mine = np.full(n, 41 if r == 1 else 52, np.uint8)  # alive for the whole call (a DeviceBuffer is a pointer)
        if r == 1:
            comm.send(dev(mine, 1), 2, stream=7)
        elif r == 2:
            comm.recv(dev(got, 2), 1, stream=7)
            comm.send(dev(mine, 2), 5, stream=7)
        elif r == 5:
            comm.recv(dev(got, 2), 2, stream=7)
        comm.synchronize()
        return out, got

    results = fake_cuda.run_ranks(world, lambda r: NodeNetCommunicator(
        r, world, r % 3, store, gpus_per_node=3, timeout_s=20, chunk_bytes=8 << 10, lanes=2), body)
    assert all(not isinstance(results.get(r), Exception) for r in range(world)), results
    want = np.repeat(np.arange(world, dtype=np.uint8), n)
    assert all(np.array_equal(results[r][0], want) for r in range(world))
    assert (results[2][1] == 41).all(), results[2][1][:8]
    assert (results[5][1] == 52).all(), results[5][1][:8]


def drop(comm) -> None:
    """Rank ``comm``'s network connections drop: its proxy process is killed, or (a proxy thread) its transport
    closes."""
    if comm.proxy_kind == "process":
        comm._proxy._proc.kill()
        comm._proxy._proc.wait()
    else:
        comm.transport.close()


@pytest.mark.parametrize("proxy,one_stream,gates", [("process", "0", "0"), ("thread", "0", "0"), ("process", "2", "0"),
                                                    ("thread", "2", "0"), ("process", "2", "1"), ("thread", "0", "1")])
def test_a_peer_that_drops_out_fails_the_survivors_calls_without_a_hang(monkeypatch, proxy, one_stream, gates):
    """After one good call rank 1's connection drops (its proxy process dies, or its transport closes); rank 0's
    next call must end with TransportError within the timeout, its stream released (no hang): from synchronize(), or
    from the call itself where the proxy saw the drop already, in the first call's tail (its DONE comes before its
    last notices and writes leave, and an error after that is the next call's: seen once in a loaded CI run, session
    53, not in 190 runs here);
    also with the calls on their streams, START a counter and no DONE wait (HOCCL_NET_ONE_STREAM=2), and with the
    native engine's gates on (its writes posted ahead dropped, its landing gates disarmed, when the run fails)."""
    import time

    monkeypatch.setenv("HOCCL_NET_PROXY", proxy)
    monkeypatch.setenv("HOCCL_NET_ONE_STREAM", one_stream)
    monkeypatch.setenv("HOCCL_NET_LAND_GATES", gates)
    monkeypatch.setenv("HOCCL_NET_SEND_GATES", gates)

    from hoccl_runtime.errors import HocclTimeoutError, TransportError

    both_done = threading.Barrier(2)  # the ranks are threads: rank 1 drops only once rank 0's first call is through

    def body(comm, r):
        inp, out = np.full(100, r, np.uint8), np.zeros(200, np.uint8)
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        comm.synchronize()
        both_done.wait(20)  # (no barrier ends a run: rank 1 may be through with it before rank 0 is)
        if r == 1:
            drop(comm)  # the connection drops
            return "dropped"
        time.sleep(0.2)
        t0 = time.monotonic()
        with pytest.raises((TransportError, HocclTimeoutError)) as err:
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)  # raises, or returns: stream released
            comm.synchronize()
        waited = time.monotonic() - t0
        return waited, str(err.value), fake_cuda.drained(7)  # the stream's work after the call runs

    results = two_ranks(monkeypatch, body)
    assert results[1] == "dropped", results
    waited, message, drained = results[0]
    assert waited < 15 and ("closed" in message or "did not" in message) and drained, results


@pytest.mark.parametrize("one_stream", ["0", "2"])
def test_the_proxy_runs_in_a_process_of_its_own_and_its_death_fails_calls_without_a_hang(monkeypatch, one_stream):
    """The default proxy is a process (it never waits for the training loop's GIL) that drives the calls through
    shared memory. Killed between calls, the calls issued after still return, their streams are released (the
    stream work after them runs), and the error names the proxy process; on the peer, the calls fail too. Also with
    the calls on their streams, START a counter and no DONE wait (HOCCL_NET_ONE_STREAM=2: the watcher's drain takes
    counted STARTs)."""
    import os
    import time

    from hoccl_runtime.errors import HocclTimeoutError, TransportError

    monkeypatch.setenv("HOCCL_NET_ONE_STREAM", one_stream)

    def body(comm, r):
        assert comm.proxy_kind == "process" and comm._proxy._proc.pid != os.getpid()
        assert comm._rings is None and comm._arena.size <= 64 << 10  # flags only until the first call
        inp, out = np.full(1000, r + 1, np.uint8), np.zeros(2000, np.uint8)
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        assert comm._rings.size >= 2 * comm._executor.slots * comm.chunk_bytes  # the rings, shared with the proxy
        comm.synchronize()
        good = out.tolist() == [1] * 1000 + [2] * 1000
        time.sleep(0.2)
        if r == 0:
            drop(comm)
        t0 = time.monotonic()
        errors = []
        for _ in range(3):  # every call after returns, and raises once the failure is known
            try:
                comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            except (TransportError, HocclTimeoutError) as exc:
                errors.append(str(exc))
        with pytest.raises((TransportError, HocclTimeoutError)) as err:
            comm.synchronize()
        waited = time.monotonic() - t0
        return good, waited, str(err.value), fake_cuda.drained(7)  # the stream's work after the calls runs

    results = two_ranks(monkeypatch, body)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
        good, waited, message, drained = results[r]
        assert good and waited < 15 and drained, results
    assert "proxy process" in results[0][2] and "exited" in results[0][2], results[0]
    assert fake_cuda._streams.errors == []


def test_nodes_with_different_staging_rings_fail_clearly(monkeypatch):
    """One node with a smaller ring than the other (different ring_bytes): the receiver refuses the first
    write past its ring, naming the likely cause, and the sender fails too instead of waiting forever."""
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.errors import TransportError
    from hoccl_runtime.net.executor import GpuNodeExecutor

    fake_cuda.install(monkeypatch, async_streams=True)
    plan = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1),
                        CollectiveSpec(kind="sendrecv", pairs=((0, 1, 200_000),)),
                        CompileOptions(chunk_bytes=4096, baselines=False))
    a, b, empty = np.ones(200_000, np.uint8), np.zeros(200_000, np.uint8), np.zeros(0, np.uint8)
    bufs = {0: {0: (dev(a, 0), dev(empty, 0))}, 1: {1: (dev(empty, 1), dev(b, 1))}}
    transports = [GpuNodeExecutor.make_transport(plan, n, lanes=2, secret=b'test-job') for n in range(2)]
    addresses = {n: t.listen() for n, t in enumerate(transports)}

    def node(n):
        ex = GpuNodeExecutor(plan, n, bufs[n], transports[n], ring_bytes=(64 << 10) if n == 0 else (16 << 10),
                             timeout_s=10)
        ex.connect(addresses)
        try:
            ex.run()
        finally:
            transports[n].close()  # what a failing node process does on its way out

    t0 = time.monotonic()
    results = in_threads(2, node, timeout_s=30)
    assert time.monotonic() - t0 < 25
    assert isinstance(results.get(1), TransportError) and "ring_bytes" in str(results[1]), results
    assert isinstance(results.get(0), TransportError), results


def test_a_rank_that_fails_at_start_is_heard_of_at_once(monkeypatch):
    """Rank 1's transport cannot be made (lanes=0): rank 0, waiting for its address, raises within a second
    naming it, instead of waiting until its timeout; nothing of rank 0's is left listening."""
    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.net import NetCommunicator

    store = fake_cuda.Store()
    took = {}

    def make(r):
        t0 = time.monotonic()
        try:
            return NetCommunicator(r, 2, r, store, timeout_s=30, lanes=0 if r == 1 else 2)
        finally:
            took[r] = time.monotonic() - t0

    results = fake_cuda.run_ranks(2, make, lambda comm, r: "up", timeout_s=60)
    assert isinstance(results[1], HocclError) and "lanes=0" in str(results[1])
    assert isinstance(results[0], HocclError) and "rank 1 failed while setting up" in str(results[0])
    assert took[0] < 2.0, took


def test_one_call_set_for_every_communicator(monkeypatch):
    """Every communicator has the calls of hoccl_runtime.api; an option one cannot honour is an
    UnsupportedOpError naming it (not a TypeError); the network batch runs sends and receives in one order."""
    import inspect

    from hoccl_runtime.api import CALLS
    from hoccl_runtime.comm import Communicator
    from hoccl_runtime.comm.net import NetCommunicator
    from hoccl_runtime.comm.nodenet import NodeNetCommunicator
    from hoccl_runtime.errors import UnsupportedOpError

    for cls in (Communicator, NetCommunicator, NodeNetCommunicator):
        missing = [c for c in CALLS if not callable(getattr(cls, c, None))]
        assert not missing, (cls.__name__, missing)
        for call in ("all_gather_into_tensor", "all_to_all_single", "broadcast", "scatter", "gather", "send"):
            params = inspect.signature(getattr(cls, call)).parameters
            assert "rate_gbps" in params and "duration_s" in params, (cls.__name__, call)
    assert Communicator.pairs_alone and not NetCommunicator.pairs_alone and not NodeNetCommunicator.pairs_alone

    def body(comm, r):
        n = 3001
        mine = np.random.default_rng(r).integers(0, 256, n, dtype=np.uint8)
        got = np.full(n, 0xA5, np.uint8)
        # both ranks list their send first: the batch orders them alike on both
        comm.batch_isend_irecv([("send", dev(mine, r), 1 - r), ("recv", dev(got, r), 1 - r)], stream=7)
        comm.synchronize()
        with pytest.raises(UnsupportedOpError, match=r"all_gather_into_tensor\(rate_gbps=/duration_s=\)"):
            comm.all_gather_into_tensor(dev(np.zeros(2, np.uint8), r), dev(np.zeros(1, np.uint8), r), stream=7,
                                        rate_gbps=10.0)
        with pytest.raises(UnsupportedOpError, match="execute"):
            comm.execute(None, None, None, stream=7)
        with pytest.raises(HocclError, match="batch op"):
            comm.batch_isend_irecv([("put", dev(mine, r), 1 - r)], stream=7)
        return mine, got

    results = two_ranks(monkeypatch, body)
    assert not failures(results), results
    assert np.array_equal(results[0][1], results[1][0]) and np.array_equal(results[1][1], results[0][0])


def _traced_prepares(monkeypatch) -> list:
    """Record every GpuNodeExecutor.prepare: (after events, trace start, trace end, thread name)."""
    from hoccl_runtime.net import executor as netexec

    prepares: list = []
    real = netexec.GpuNodeExecutor.prepare

    def prepare(self, plan=None, buffers=None, *, after=(), **kw):
        with fake_cuda._lock:
            start = len(fake_cuda.trace)
        got = real(self, plan, buffers, after=after, **kw)
        with fake_cuda._lock:
            prepares.append((tuple(after), start, len(fake_cuda.trace), threading.current_thread().name))
        return got

    monkeypatch.setattr(netexec.GpuNodeExecutor, "prepare", prepare)
    monkeypatch.setattr(fake_cuda, "trace", [])
    return prepares


def _check_copies_wait_for_the_callers(prepares: list, calls: int) -> None:
    """Each prepared run's copy streams wait for every one of its events before their first copy, and each event
    was recorded on the callers' stream (7) before."""
    trace = fake_cuda.trace
    assert len(prepares) == calls, (len(prepares), calls)
    for after, start, end, thread in prepares:
        assert after, "a network call's copies were enqueued without an event of its caller's stream"
        for event in after:
            assert any(t[:3] == ("record", event, 7) for t in trace[:start]), (event, trace[:start][-5:])
        mine = [t for t in trace[start:end] if t[3] == thread]
        copy_streams = {t[1] for t in mine if t[0] == "copy"}
        assert copy_streams, "the run enqueued no copy"
        for s in copy_streams:
            first = next(i for i, t in enumerate(mine) if t[0] == "copy" and t[1] == s)
            waited = {t[2] for t in mine[:first] if t[0] == "wait" and t[1] == s}
            assert set(after) <= waited, (s, after, waited)


def _cuda_calls_of(prefix: str) -> list:
    return [t for t in fake_cuda.trace if t[3].startswith(prefix)]


@pytest.mark.parametrize("one_stream", ["0", "2"])
def test_the_network_proxy_makes_no_cuda_call(monkeypatch, one_stream):
    """Every copy of a network call is enqueued in the caller's thread, gated by counters, after an event where
    the call sits in the caller's stream (HOCCL_NET_ONE_STREAM=0; 2, the default: on that stream itself where the
    call fits the rings); the proxy thread only opens the gates. On the H200 the proxy issuing its own copies
    deadlocked behind the application's blocking tensor.cpu() (which waited for that very call): a proxy that makes
    no CUDA call cannot be held up by one."""
    monkeypatch.setenv("HOCCL_NET_ONE_STREAM", one_stream)
    prepares = _traced_prepares(monkeypatch)

    def body(comm, r):
        n = 3001
        inp = np.full(n, r + 1, np.uint8)
        out = np.zeros(2 * n, np.uint8)
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        a2a_in, a2a_out = np.full(2 * n, r + 1, np.uint8), np.zeros(2 * n, np.uint8)  # held until synchronize
        comm.all_to_all_single(dev(a2a_out, r), dev(a2a_in, r), stream=7)
        buf = np.full(n, 9, np.uint8) if r == 0 else np.zeros(n, np.uint8)
        comm.send(dev(buf, r), 1, stream=7) if r == 0 else comm.recv(dev(buf, r), 0, stream=7)
        comm.synchronize()
        return out.tolist() == [1] * n + [2] * n and a2a_out.tolist() == [1] * n + [2] * n and buf.min() == 9

    results = two_ranks(monkeypatch, body)
    assert results == {0: True, 1: True}, results
    assert len(prepares) == 2 * 3, prepares
    if one_stream == "0":
        _check_copies_wait_for_the_callers(prepares, calls=2 * 3)
    else:  # every call fits the rings, so each went on the caller's stream, after no event
        assert all(after == () for after, *_ in prepares), prepares
    assert not any(thread.startswith("hoccl-proxy") for *_, thread in prepares)
    assert _cuda_calls_of("hoccl-proxy") == []
    assert fake_cuda._streams.errors == []


def test_the_node_leaders_copies_wait_for_every_local_ranks_stream(monkeypatch):
    """With several GPUs per node the leader enqueues the node's copies in its caller's thread, each after an event
    of each local rank's stream (opened from the IPC handle the rank published with its call), and its proxy makes
    no CUDA call (one that did could sit behind the application's blocking CUDA call); a pair's send/recv across
    nodes is enqueued by the caller and its proxy makes no CUDA call either."""
    fake_cuda.install(monkeypatch, async_streams=True)
    prepares = _traced_prepares(monkeypatch)
    from hoccl_runtime.comm.nodenet import NodeNetCommunicator

    store = fake_cuda.Store()
    world = 4

    def body(comm, r):
        n = 501
        inp, out = np.full(n, r + 1, np.uint8), np.zeros(world * n, np.uint8)
        comm.all_gather_into_tensor(dev(out, r % 2), dev(inp, r % 2), stream=7)
        buf = np.full(n, 5, np.uint8) if r == 0 else np.zeros(n, np.uint8)
        if r in (0, 3):  # across the nodes: the pair's executor
            comm.send(dev(buf, 0), 3, stream=7) if r == 0 else comm.recv(dev(buf, 1), 0, stream=7)
        comm.synchronize()
        return out.tolist() == sum(([k + 1] * n for k in range(world)), []) and (r not in (0, 3) or buf.min() == 5)

    results = fake_cuda.run_ranks(world, lambda r: NodeNetCommunicator(
        r, world, r % 2, store, gpus_per_node=2, timeout_s=20, chunk_bytes=16 << 10, lanes=2), body)
    assert results == {r: True for r in range(world)}, results
    _check_copies_wait_for_the_callers(prepares, calls=2 + 2)  # one AllGather per leader, one run per pair end
    assert any(len(after) == 2 for after, *_ in prepares)  # a leader waits for both local ranks' streams
    assert not any(thread.startswith(("hoccl-leader", "hoccl-p2p")) for *_, thread in prepares), prepares
    assert _cuda_calls_of("hoccl-p2p") == [] and _cuda_calls_of("hoccl-leader") == []


def test_a_local_rank_in_another_collective_fails_at_its_leaders_call(monkeypatch):
    """2 nodes of 2: local rank 1 of node 0 issues an All-to-All where its leader issues an AllGather. The leader
    now reads the local ranks' calls in its own call (where it enqueues the node's copies), so it raises PlanError
    there, naming the rank; rank 1's stream is released and its next call raises; node 1, whose leader waits for
    node 0's to connect, fails within its timeout instead of hanging, and says so."""
    from hoccl_runtime.errors import PlanError

    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.nodenet import NodeNetCommunicator

    store = fake_cuda.Store()
    world, n = 4, 1000

    def body(comm, r):
        inp, out = np.full(n, r, np.uint8), np.zeros(world * n, np.uint8)
        t0 = time.monotonic()
        if r == 1:
            comm.all_to_all_single(dev(out, 1), dev(out.copy(), 1), stream=7)
            fake_cuda._streams.worker(7).drain(10)  # released: its DONE came (the data is not to be used)
            with pytest.raises(HocclError, match="leader .rank 0. failed .*another collective"):
                comm.all_gather_into_tensor(dev(out, 1), dev(inp, 1), stream=7)
            return "raised"
        if r == 0:
            with pytest.raises(PlanError, match="local rank 1 is in another collective") as err:
                comm.all_gather_into_tensor(dev(out, 0), dev(inp, 0), stream=7)
            return str(err.value)
        with pytest.raises(HocclError, match="other nodes. leaders"):  # the leader at its call, rank 3 from it
            comm.all_gather_into_tensor(dev(out, r % 2), dev(inp, r % 2), stream=7)
            comm.synchronize(timeout_s=10)
        return time.monotonic() - t0

    results = fake_cuda.run_ranks(world, lambda r: NodeNetCommunicator(
        r, world, r % 2, store, gpus_per_node=2, timeout_s=3, chunk_bytes=16 << 10, lanes=2), body)
    assert results[1] == "raised" and "call 1" in results[0], results
    assert all(isinstance(results[r], float) and results[r] < 15 for r in (2, 3)), results


@pytest.mark.parametrize("bad", ["sizes", "column"])
def test_an_all_to_allv_one_rank_refuses_is_known_to_the_others_at_once(monkeypatch, bad):
    """Split sizes that do not add up on rank 1 ("sizes": rank 1 raised at once while rank 0 waited 30 s in the
    store and ended in a plain TimeoutError, whatever the communicator's timeout), or output splits that are not
    the column of the others' inputs ("column": only the rank that expected them noticed): every rank raises a
    HocclError naming rank 1 within a second, and the next call still works."""

    def body(comm, r):
        inp, out = np.arange(8, dtype=np.uint8) + 10 * r, np.full(8, 0xA5, np.uint8)
        send, recv = [4, 4], [4, 4]
        if r == 1:
            send, recv = ([4, 5], recv) if bad == "sizes" else ([4, 4], [2, 4])
        t0 = time.monotonic()
        try:
            comm.all_to_all_v(dev(out, r), dev(inp, r), recv, send, stream=7)
        except HocclError as exc:
            took, error = time.monotonic() - t0, exc
        else:
            return "no error"
        comm.all_to_all_v(dev(out, r), dev(inp, r), [4, 4], [4, 4], stream=7)  # the next call still works
        comm.synchronize()
        return type(error).__name__, "rank 1" in str(error) or r == 1, took < 1.0, out.tolist()  # (was 30 s)

    results = two_ranks(monkeypatch, body)
    want = {0: [0, 1, 2, 3, 10, 11, 12, 13], 1: [4, 5, 6, 7, 14, 15, 16, 17]}
    for r in (0, 1):
        name, names_rank_1, quick, out = results[r]
        assert names_rank_1 and quick and out == want[r], results
        assert name in ("CollectiveError", "PlanError", "BufferError"), results
    if bad == "sizes":
        assert results[0][0] == "CollectiveError", results


@pytest.mark.parametrize("gates", ["0", "1"])
def test_the_proxy_process_traces_every_call_where_asked(monkeypatch, tmp_path, gates):
    """HOCCL_NET_TRACE: each rank's proxy process writes a row per call at close, its steps in order; with the
    native engine's landing gates on, a ``gate`` row per write whose gate it opened, each at a frame that landed."""
    import csv

    monkeypatch.setenv("HOCCL_NET_TRACE", str(tmp_path / "trace"))
    monkeypatch.setenv("HOCCL_NET_LAND_GATES", gates)

    def body(comm, r):
        inp, out = np.full(3000, r, np.uint8), np.zeros(6000, np.uint8)
        for _ in range(3):
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        comm.send(dev(inp, r), 1, stream=7) if r == 0 else comm.recv(dev(inp, r), 0, stream=7)
        comm.synchronize()
        return True

    assert two_ranks(monkeypatch, body) == {0: True, 1: True}
    bases, gated = [], {}
    for r in (0, 1):
        with open(tmp_path / f"trace.rank{r}.csv") as f:
            rows = list(csv.DictReader(f))
        bases.append({float(row["t0_us"]) for row in rows})
        assert len(bases[-1]) == 1, rows  # one base per file
        assert [row["call"] for row in rows] == ["allgather 6000"] * 3 + ["sendrecv 0->1 3000"], rows
        for row in rows:  # the run begins when taken, sees its stream arrive after its plan notice went out
            times = [float(row[k]) for k in ("taken_us", "begun_us", "announced_us", "hello_us", "network_us",
                                             "copies_us")]
            assert times == sorted(times) and float(row["arrived_us"]) >= 0
            # the driving loop marks its stream when it looks (after its notice went out), which may be only once the
            # network part is through (a receiver whose bytes came early, every turn busy): before the copies end,
            # which wait for it (CI saw stream 21,758 > network 21,600 us once, 2026-12-06)
            assert times[2] <= float(row["stream_us"]) <= times[5], row
            if row["received_us"]:  # what it received was landed (seen done) before its network part was through
                assert float(row["received_us"]) <= float(row["landed_us"]) <= times[4], row
            # the driving loop's longest poll sleep and longest turn: each within the run
            span = times[-1] - times[0]
            assert 0 <= float(row["sleep_us"]) <= span and 0 <= float(row["turn_us"]) <= span, row
        with open(tmp_path / f"trace.rank{r}.gc.csv") as f:  # the proxy process's garbage collections (maybe none)
            gcs = list(csv.DictReader(f))
        assert all(g["generation"] in ("0", "1", "2") and float(g["us"]) >= 0 for g in gcs), gcs
        with open(tmp_path / f"trace.rank{r}.frames.csv") as f:  # the TCP writes posted and frames sent and landed
            frames = list(csv.DictReader(f))
        kinds = {k: [x for x in frames if x["what"] == k] for k in ("post", "send", "recv", "gate")}
        landed = {(x["write"], x["part"], x["end_us"]) for x in kinds["recv"]}
        assert all((x["write"], x["part"], x["start_us"]) in landed for x in kinds["gate"]), frames
        assert not kinds["gate"] if gates == "0" else len({x["write"] for x in kinds["gate"]}) == len(kinds["gate"])
        gated[r] = len(kinds["gate"])
        assert sum(int(x["bytes"]) for x in kinds["send"]) == sum(int(x["bytes"]) for x in kinds["post"]) > 0
        # each AllGather moves the rank's 3000 bytes to the other; the send moves 3000 more from rank 0 to rank 1
        assert sum(int(x["bytes"]) for x in kinds["recv"]) == 3 * 3000 + 3000 * r, frames
        assert all(float(x["start_us"]) <= float(x["end_us"]) for x in kinds["send"] + kinds["recv"]), frames
        assert {x["t0_us"] for x in frames} == {rows[0]["t0_us"]}
    assert abs(bases[0].pop() - bases[1].pop()) < 5e6  # one host clock: the ranks' first calls within seconds
    from hoccl_runtime.net.trace import summarize

    text = summarize(str(tmp_path / "trace"))  # python -m hoccl_runtime.net.trace PREFIX
    assert "ranks 0, 1" in text and text.count("allgather 6000 x3:") == 2 and "sendrecv 0->1 3000 x1:" in text, text
    # every payload was sent and landed: the frames paired across the ranks, by size (3000 bytes: <= 4 KiB)
    assert "part <= 4 KiB x7: hand-off" in text and "write <= 4 KiB x7: whole p50" in text, text
    for r in (0, 1):  # the gates the engine opened, per rank, where it opened any
        assert (f"rank {r}: the engine opened the landing gates of {gated[r]} of the {3 + r} data writes" in text) == \
            (gated[r] > 0), text


def test_the_trace_summary_names_a_missing_trace(tmp_path, capsys):
    from hoccl_runtime.net.trace import main

    assert main([str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "no trace under" in err and "none.rank0.csv" in err and "HOCCL_NET_TRACE" in err, err
    assert main([]) == 2 and "python -m hoccl_runtime.net.trace PREFIX" in capsys.readouterr().out
    from hoccl_runtime.net.trace import CALL_COLUMNS

    (tmp_path / "cut.rank0.csv").write_text("call,arrived_us\nx,1\n")  # not a trace of this version
    assert main([str(tmp_path / "cut")]) == 2
    err = capsys.readouterr().err
    assert "cut.rank0.csv is not a HOCCL_NET_TRACE file" in err and "taken_us" in err, err
    row = ["allgather 8"] + ["1.0"] * (len(CALL_COLUMNS) - 1)
    row[2] = "soon"  # a time that is not a number
    (tmp_path / "bad.rank0.csv").write_text(",".join(CALL_COLUMNS) + "\n" + ",".join(row) + "\n")
    assert main([str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "bad.rank0" in err and "soon" in err and "Traceback" not in err, err


def test_each_network_group_of_a_rank_traces_to_files_of_its_own(monkeypatch, tmp_path):
    """HOCCL_NET_TRACE with two network groups per rank (a training example's settings variants): the first writes
    PREFIX.rankN.csv, the second PREFIX.g1.rankN.csv, each with its own calls."""
    import csv

    from hoccl_runtime.comm.net import NetCommunicator

    monkeypatch.setenv("HOCCL_NET_TRACE", str(tmp_path / "trace"))
    fake_cuda.install(monkeypatch, async_streams=True)
    stores = fake_cuda.Store(), fake_cuda.Store()

    class Two:
        def __init__(self, r):
            self.groups = [NetCommunicator(r, 2, r, store, timeout_s=20, chunk_bytes=64 << 10, lanes=1)
                           for store in stores]

        def close(self):
            for g in self.groups:
                g.close()

    def body(two, r):
        for g, n in zip(two.groups, (3000, 5000), strict=True):
            inp, out = np.full(n, r, np.uint8), np.zeros(2 * n, np.uint8)
            g.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
            g.synchronize()
        return True

    assert fake_cuda.run_ranks(2, Two, body) == {0: True, 1: True}
    for r in (0, 1):
        for name, call in ((f"trace.rank{r}.csv", "allgather 6000"), (f"trace.g1.rank{r}.csv", "allgather 10000")):
            with open(tmp_path / name) as f:
                assert [row["call"] for row in csv.DictReader(f)] == [call], name


def test_random_split_mismatches_between_ranks_are_refused_together_or_run_exactly(monkeypatch):
    """Split mismatches fuzzed: 24 All-to-Allv calls with random splits (seeded, the same sequence on both ranks),
    half of them spoiled on one rank (a size that does not add up, or output splits that are not the column of the
    other's inputs). Each call either moves every byte right on both ranks, or raises a HocclError on both within
    2 s, and the communicator goes on to the next call."""
    cases = 24

    def splits(case: int):
        rng = np.random.default_rng(case)
        m = rng.integers(0, 9, (2, 2))  # m[i][j]: bytes rank i sends rank j
        spoil = None if case % 2 == 0 else (int(rng.integers(0, 2)), rng.choice(["sizes", "column", "negative"]))
        return m, spoil

    def body(comm, r):
        outcomes = []
        for case in range(cases):
            m, spoil = splits(case)
            send, recv = [int(b) for b in m[r]], [int(b) for b in m[:, r]]
            inp = (np.arange(sum(send), dtype=np.uint8) + 37 * r + case).astype(np.uint8)
            out = np.full(max(1, sum(recv)), 0xA5, np.uint8)
            if spoil is not None and spoil[0] == r:
                if spoil[1] == "sizes":
                    send = [send[0] + 1, send[1]]
                elif spoil[1] == "column":
                    recv = [recv[1], recv[0] + 1]
                else:
                    send = [-1, send[1]]
            t0 = time.monotonic()
            try:
                comm.all_to_all_v(dev(out, r), dev(inp, r), recv, send, stream=7)
                comm.synchronize()
                outcomes.append(("ok", out[:sum(int(b) for b in m[:, r])].tolist()))
            except HocclError as exc:
                outcomes.append(("refused", time.monotonic() - t0 < 2.0, type(exc).__name__))
        return outcomes

    results = two_ranks(monkeypatch, body)
    assert not any(isinstance(results[r], Exception) for r in (0, 1)), results
    for case in range(cases):
        m, spoil = splits(case)
        got = [results[r][case] for r in (0, 1)]
        if spoil is None:
            for r in (0, 1):  # block j of rank r's output is rank j's block for r
                want = []
                for j in (0, 1):
                    start = int(m[j, :r].sum())
                    want += [(start + k + 37 * j + case) % 256 for k in range(int(m[j, r]))]
                assert got[r] == ("ok", want), (case, m, got)
        else:
            assert all(g[0] == "refused" and g[1] for g in got), (case, m, spoil, got)


def test_the_proxy_process_keeps_only_the_calls_it_has_not_finished(monkeypatch):
    """Calls the proxy process finished are let go at the next call (a training loop may never synchronize): after
    200 calls without a synchronize, the training process holds at most the few still in flight."""
    def body(comm, r):
        inp, out = np.full(64, r, np.uint8), np.zeros(128, np.uint8)
        for _ in range(200):
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        held = len(comm._proxy._pending)
        deadline = time.monotonic() + 30
        while comm._proxy._unfinished() and time.monotonic() < deadline:  # finished, not synchronized
            time.sleep(0.01)
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        after = len(comm._proxy._pending)
        comm.synchronize()
        return held, after, out.tolist() == [0] * 64 + [1] * 64

    results = two_ranks(monkeypatch, body)
    for r in (0, 1):
        held, after, right = results[r]
        assert right and held >= 1 and after <= 1, results


def test_a_cuda_error_in_a_network_call_is_a_cuda_error_naming_the_call(monkeypatch):
    """CuPy's own CUDA errors (CUDARuntimeError) in a network call's copies became the caller's exception as they
    were; now a CudaError naming the rank and the call, and the stream is not left waiting."""
    from hoccl_runtime.errors import CudaError

    class CUDARuntimeError(RuntimeError):  # CuPy's class name, as cuda_error recognises it
        pass

    def body(comm, r):
        inp, out = np.full(64, r, np.uint8), np.zeros(128, np.uint8)
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        comm.synchronize()
        real = comm._executor.prepare

        def failing(*a, **k):
            raise CUDARuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")

        comm._executor.prepare = failing
        with pytest.raises(CudaError, match=rf"rank {r}: allgather 128: a CUDA call failed: cudaErrorIllegalAddress"):
            comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)
        comm._executor.prepare = real
        comm.all_gather_into_tensor(dev(out, r), dev(inp, r), stream=7)  # the pair stays in step
        comm.synchronize()
        return out.tolist() == [0] * 64 + [1] * 64

    assert two_ranks(monkeypatch, body) == {0: True, 1: True}


def test_network_chunk_and_lane_settings(monkeypatch):
    """chunk_bytes= and lanes= win; else HOCCL_NET_CHUNK_BYTES / HOCCL_NET_LANES; bad values name the setting."""
    from hoccl_runtime.comm.net import net_chunk_bytes, net_lanes
    from hoccl_runtime.errors import HocclError

    monkeypatch.delenv("HOCCL_NET_CHUNK_BYTES", raising=False)
    monkeypatch.delenv("HOCCL_NET_LANES", raising=False)
    assert (net_chunk_bytes(None), net_lanes(None)) == (2 << 20, 8)
    monkeypatch.setenv("HOCCL_NET_CHUNK_BYTES", str(8 << 20))
    monkeypatch.setenv("HOCCL_NET_LANES", "16")
    assert (net_chunk_bytes(None), net_lanes(None), net_lanes(4)) == (8 << 20, 16, 4)
    for bad in (0, 65, True, 2.0):
        with pytest.raises(HocclError, match="lanes="):
            net_lanes(bad)
    monkeypatch.setenv("HOCCL_NET_LANES", "100")
    with pytest.raises(HocclError, match="HOCCL_NET_LANES"):
        net_lanes(None)


@pytest.mark.parametrize("proxy", ["process", "thread"])
def test_a_call_is_set_up_on_the_network_before_its_stream_reaches_it(monkeypatch, proxy, tmp_path):
    """Early runs: the proxy begins a call as soon as it takes it, so its plan notice goes out and the other node's
    is checked while the caller's stream still computes (here: held on a flag); the stream is let go only once it
    reached the call and the copies ran, and the bytes are right."""
    import csv

    from hoccl_runtime.flags import FlagPool, MemOps

    monkeypatch.setenv("HOCCL_NET_PROXY", proxy)
    monkeypatch.setenv("HOCCL_NET_TRACE", str(tmp_path / "trace"))  # the process proxy's marks, written at close
    held = {}

    def body(comm, r):
        buf = np.full(5000, 0xA5, np.uint8) if r == 1 else np.arange(5000, dtype=np.uint8)
        comm.send(dev(buf, r), 1, stream=7) if r == 0 else comm.recv(dev(buf, r), 0, stream=7)  # connects
        comm.synchronize()
        pool = held[r] = FlagPool(1)
        gate = pool.allocate()
        MemOps().wait_eq(gate, 1).enqueue(7)  # the stream computes (is held) until the gate opens
        if proxy == "thread":
            comm._executor.marks = []
        nxt = np.full(5000, 0xA5, np.uint8) if r == 1 else np.arange(5000, dtype=np.uint8)[::-1].copy()
        comm.send(dev(nxt, r), 1, stream=7) if r == 0 else comm.recv(dev(nxt, r), 0, stream=7)
        time.sleep(0.3)
        before = [m for m, _ in comm._executor.marks] if proxy == "thread" else None
        idle = comm._proxy.wait_idle(0.01)
        gate.write(1)
        comm.synchronize()
        return before, idle, nxt.tolist()

    results = two_ranks(monkeypatch, body)
    for r in (0, 1):
        before, idle, got = results[r]
        assert not idle, results  # the call did not finish before its stream got there
        if proxy == "thread":
            assert "hello" in before and "stream" not in before, before  # set up, the stream not there yet
    assert results[1][2] == np.arange(5000, dtype=np.uint8)[::-1].tolist()
    if proxy == "process":
        for r in (0, 1):
            with open(tmp_path / f"trace.rank{r}.csv") as f:
                row = list(csv.DictReader(f))[-1]
            # the set-up was through long before the stream came (it was held for 0.3 s)
            assert float(row["stream_us"]) - float(row["hello_us"]) > 200_000, row


@pytest.mark.parametrize("exchange", ["1", "0"])
def test_a_send_and_receive_batched_on_two_ranks_run_as_one_call(monkeypatch, exchange):
    """1F1B's fused batch (an activation out, a gradient in; the peer the other way round) is one network call per
    rank that moves both messages (HOCCL_NET_EXCHANGE=0: two calls); the bytes land right either way, the ops listed
    in either order, sizes unequal."""
    monkeypatch.setenv("HOCCL_NET_EXCHANGE", exchange)
    calls = []

    def body(comm, r):
        submit = comm._proxy.submit
        comm._proxy.submit = lambda call: (calls.append((r, call[0])), submit(call))[1]
        rng = np.random.default_rng(r + 10)
        out, into = [], []
        for i in range(3):
            n_out, n_in = (3000 + i, 5000 - i) if r == 0 else (5000 - i, 3000 + i)
            mine = rng.integers(0, 256, n_out, dtype=np.uint8)
            theirs = np.full(n_in, 0xA5, np.uint8)
            ops = [("send", dev(mine, r), 1 - r), ("recv", dev(theirs, r), 1 - r)]
            comm.batch_isend_irecv(ops if r == 0 else ops[::-1], stream=7)
            out.append(mine)
            into.append(theirs)
        comm.synchronize()
        return out, into

    results = two_ranks(monkeypatch, body)
    for r in (0, 1):
        for mine, theirs in zip(results[r][0], results[1 - r][1], strict=True):
            assert np.array_equal(mine, theirs)
    per_rank = [sum(1 for rank, _ in calls if rank == r) for r in (0, 1)]
    assert per_rank == ([3, 3] if exchange == "1" else [6, 6]), calls
    if exchange == "1":
        assert all(key.kind == "alltoallv" for _, key in calls), calls


def test_a_pair_batched_on_one_rank_and_not_on_the_other_is_a_plan_error_not_a_hang(monkeypatch):
    """The exchange needs both ranks to batch the pair: a rank that issues the two messages as separate calls
    meets a clear PlanError on both ranks (the plans named), well within the timeout."""
    from hoccl_runtime.errors import PlanError

    def body(comm, r):
        a, b = np.full(4000, r, np.uint8), np.full(4000, 0xA5, np.uint8)
        if r == 0:
            comm.batch_isend_irecv([("send", dev(a, r), 1), ("recv", dev(b, r), 1)], stream=7)
        else:
            comm.recv(dev(b, r), 0, stream=7)
            comm.send(dev(a, r), 0, stream=7)
        with pytest.raises(PlanError, match="every node must run the same collectives") as err:
            comm.synchronize()
        return str(err.value)

    results = two_ranks(monkeypatch, body)
    assert all(isinstance(v, str) for v in results.values()), results


@pytest.mark.parametrize("one_stream", ["0", "1", "2"])
def test_the_stream_goes_on_once_the_calls_copies_are_through(monkeypatch, one_stream):
    """The caller's stream goes on only once a call's copies are through (the proxy's DONE; START and DONE are reset
    by the proxy and the stream after each call). Every copy is slowed on its fake stream, and what the stream sees
    right after each receive is snapshotted in stream order: a stream let go before the landing copies were through
    would see the previous message or poison. Also with the copies on the caller's stream (HOCCL_NET_ONE_STREAM=1,
    and 2: no DONE wait, the stream going on after its own landings; its START and DONE pair unused, so at 0)."""
    monkeypatch.setenv("HOCCL_NET_ONE_STREAM", one_stream)
    fake_cuda.install(monkeypatch, async_streams=True)
    plain = fake_cuda.Runtime.memcpyAsync

    def slow(self, dst, src, n, kind, stream):
        fake_cuda._issue(lambda: time.sleep(0.01), stream)
        plain(self, dst, src, n, kind, stream)

    monkeypatch.setattr(fake_cuda.Runtime, "memcpyAsync", slow)
    n, calls = 150_000, 4  # 3 chunks of 64 KiB a message

    def body(comm, r):
        rng = np.random.default_rng(7)
        sent = [rng.integers(0, 256, n, dtype=np.uint8) for _ in range(calls)]
        buf, seen = np.full(n, 0xA5, np.uint8), []
        for i in range(calls):
            if r == 0:
                comm.send(dev(sent[i].copy(), r), 1, stream=7)
            else:
                comm.recv(dev(buf, r), 0, stream=7)
                fake_cuda._issue(lambda: seen.append(buf.copy()), 7)  # what the stream sees next
        comm.synchronize()
        assert fake_cuda.drained(7)  # the stream itself past its last call (its DONE wait and reset)
        start, done = (f.read() for f in next(iter(comm._pairs.values())))
        return [bool(np.array_equal(a, b)) for a, b in zip(seen, sent, strict=True)] if r == 1 else [], start, done

    from hoccl_runtime.comm.net import NetCommunicator

    store = fake_cuda.Store()
    results = fake_cuda.run_ranks(2, lambda r: NetCommunicator(r, 2, r, store, timeout_s=20, chunk_bytes=64 << 10,
                                                               lanes=2), body)
    for r in (0, 1):
        assert not isinstance(results[r], Exception), results
    assert results[1][0] == [True] * calls, results[1][0]
    for r in (0, 1):  # both flags reset after each call
        _, start, done = results[r]
        assert (start, done) == (0, 0), (r, start, done)


def test_a_size_mismatch_names_the_call_it_was_in_and_later_calls_say_the_communicator_failed(monkeypatch):
    """Two ranks broadcast from rank 0 with other sizes. The receiver raises a PlanError at once; the root, whose part
    was only to send, hears of it at its next call. Both errors name the broadcast (the run the nodes differed in),
    not the call that met the error. Every later call raises the same type, saying the communicator failed in an
    earlier call and must be made again (the proxy skips calls after an error, so their outputs would be stale).
    The root may hear of it in the broadcast itself too, where the receiver's notice comes before its run ends."""
    from hoccl_runtime.errors import PlanError

    def body(comm, r):
        a = np.full(1024 if r == 0 else 2048, 7 if r == 0 else 0xA5, np.uint8)
        errors = []
        for k in range(3):  # the broadcast, then two AllGathers
            try:
                if k == 0:
                    comm.broadcast(dev(a, r), 0, stream=7)
                else:
                    out = np.zeros(512, np.uint8)
                    comm.all_gather_into_tensor(dev(out, r), dev(np.full(256, r, np.uint8), r), stream=7)
                comm.synchronize()
            except PlanError as exc:
                errors.append((k, str(exc)))
        return errors

    results = two_ranks(monkeypatch, body)
    for r in (0, 1):
        errors = results[r]
        assert [k for k, _ in errors] in ([[0, 1, 2], [1, 2]] if r == 0 else [[0, 1, 2]]), results
        first, *later = [message for _, message in errors]
        assert f"node {r} ran plan" in first and "(broadcast " in first and "as its run 0" in first, first
        assert "allgather" not in first, first
        for message in later:
            assert message.startswith(f"rank {r}: this communicator failed in an earlier call"), message
            assert "create a new one" in message and first in message, message


def test_bad_arguments_made_on_every_rank_are_refused_by_name_and_the_next_call_runs(monkeypatch):
    """A root or peer that is no rank (negative, this rank, a float, a bool) is a CollectiveError naming it (a
    negative root came back as pydantic's ValidationError); buffers of sizes that do not go together are a
    BufferError saying how the collective's sizes go (they were a TransportError). Each is raised before anything is
    issued, so where every rank makes the same mistake the communicator goes on: the first of these, a call that
    fails while the nodes connect, included."""
    from hoccl_runtime.errors import BufferError, CollectiveError

    def body(comm, r):
        u8 = np.uint8
        calls = [
            (BufferError, "group size x the input", lambda: comm.all_gather_into_tensor(
                dev(np.zeros(1000, u8), r), dev(np.ones(1024, u8), r), stream=7)),
            (BufferError, "same size", lambda: comm.all_to_all_single(
                dev(np.zeros(2048, u8), r), dev(np.ones(1024, u8), r), stream=7)),
            (CollectiveError, "root=-1 is out of range", lambda: comm.broadcast(dev(np.zeros(64, u8), r), -1,
                                                                                 stream=7)),
            (CollectiveError, "root=1.0 is not a rank", lambda: comm.broadcast(dev(np.zeros(64, u8), r), 1.0,
                                                                                stream=7)),
            (CollectiveError, "root=True is not a rank", lambda: comm.gather(dev(np.zeros(64, u8), r), None, True,
                                                                            stream=7)),
            (CollectiveError, f"dst={r} is this rank itself", lambda: comm.send(dev(np.zeros(64, u8), r), r, stream=7)),
            (CollectiveError, "src=-1 is out of range", lambda: comm.batch_isend_irecv(
                [("recv", dev(np.zeros(64, u8), r), -1)], stream=7)),
        ]
        for kind, words, call in calls:
            with pytest.raises(kind, match=words):
                call()
        out = np.full(512, 0xA5, np.uint8)
        comm.broadcast(dev(out, r), np.int64(1), stream=7)  # a NumPy integer is a rank
        got = np.full(512, 0xA5, np.uint8)
        comm.all_gather_into_tensor(dev(got, r), dev(np.full(256, r + 3, np.uint8), r), stream=7)
        comm.synchronize()
        return got.tolist() == [3] * 256 + [4] * 256

    assert two_ranks(monkeypatch, body) == {0: True, 1: True}


def test_a_buffer_of_the_wrong_size_on_every_rank_of_two_nodes_of_two_gpus_leaves_the_communicator_usable(
        monkeypatch):
    """NodeNetCommunicator: each rank checks its own buffers against the call's plan before it tells its node's
    leader of the call. A size mistake every rank makes is then a BufferError on each, naming that rank's buffer,
    and the next call runs (the leader used to find it, fail the node's communicator for good, and the local ranks
    raised the leader's error, naming the leader's buffer)."""
    from hoccl_runtime.errors import BufferError

    fake_cuda.install(monkeypatch, async_streams=True)
    from hoccl_runtime.comm.nodenet import NodeNetCommunicator

    store = fake_cuda.Store()

    def body(comm, r):
        with pytest.raises(BufferError, match=f"rank {r} input has 1024 bytes but plan .* needs 250"):
            comm.all_gather_into_tensor(dev(np.zeros(1000, np.uint8), r % 2), dev(np.ones(1024, np.uint8), r % 2),
                                        stream=7)
        got = np.zeros(4 * 256, np.uint8)
        comm.all_gather_into_tensor(dev(got, r % 2), dev(np.full(256, r + 3, np.uint8), r % 2), stream=7)
        comm.synchronize()
        return np.unique(got).tolist()

    results = fake_cuda.run_ranks(4, lambda r: NodeNetCommunicator(
        r, 4, r % 2, store, gpus_per_node=2, timeout_s=20, chunk_bytes=16 << 10, lanes=2), body)
    assert results == {r: [3, 4, 5, 6] for r in range(4)}, results
