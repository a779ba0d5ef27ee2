"""The verbs transport's discovery, against a fake pyverbs and (where installed) the real one."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import types

import fake_pyverbs as fakepv  # tests/ is on sys.path (pytest's rootdir-relative import)
import numpy as np
import pytest
from threaded import failures, in_threads

from hoccl_runtime.errors import HocclTimeoutError, TransportError
from hoccl_runtime.net.transport import verbs


def fake_pyverbs(monkeypatch, *, devices=None, error=None, enums_name="libibverbs_enums"):
    pkg = types.ModuleType("fakeverbs")
    pkg.__path__ = []
    device = types.ModuleType("fakeverbs.device")

    def get_device_list():
        if error is not None:
            raise error
        return [types.SimpleNamespace(name=n.encode()) for n in devices]

    device.get_device_list = get_device_list
    enums = types.ModuleType(f"fakeverbs.{enums_name}")
    for mod in (pkg, device, enums):
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return pkg


def test_no_device_says_use_tcp(monkeypatch):
    pkg = fake_pyverbs(monkeypatch, error=RuntimeError("Failed to get devices list"))
    monkeypatch.setattr(verbs, "import_pyverbs", lambda: pkg)
    assert verbs.rdma_devices(pkg) == []
    with pytest.raises(TransportError, match="no RDMA device.*TCP transport"):
        verbs.require_rdma_device()


def test_device_choice(monkeypatch):
    pkg = fake_pyverbs(monkeypatch, devices=["mlx5_0", "mlx5_1"])
    monkeypatch.setattr(verbs, "import_pyverbs", lambda: pkg)
    assert verbs.require_rdma_device() == "mlx5_0"
    assert verbs.require_rdma_device("mlx5_1") == "mlx5_1"
    with pytest.raises(TransportError, match="'mlx5_9' not found; this machine has mlx5_0, mlx5_1"):
        verbs.require_rdma_device("mlx5_9")


@pytest.mark.parametrize("name", ["libibverbs_enums", "enums"])
def test_enum_module_rename(monkeypatch, name):
    pkg = fake_pyverbs(monkeypatch, devices=[], enums_name=name)
    assert verbs.verbs_enums(pkg).__name__ == f"fakeverbs.{name}"


def test_real_pyverbs_where_installed():
    try:
        pv = verbs.import_pyverbs()
    except TransportError as exc:
        assert "apt-get install python3-pyverbs" in str(exc)
        pytest.skip("pyverbs is not installed here")
    assert verbs.verbs_enums(pv).__name__.startswith("pyverbs.")
    names = verbs.rdma_devices(pv)
    if not names:  # every machine here: the kernel has no RDMA support
        with pytest.raises(TransportError, match="no RDMA device"):
            verbs.require_rdma_device()


@pytest.mark.rdma
def test_rdma_device_is_usable():
    assert verbs.require_rdma_device()


@pytest.fixture
def real_pyverbs():
    try:
        return verbs.import_pyverbs()
    except TransportError:
        pytest.skip("pyverbs is not installed here")


def test_write_with_imm_request_with_real_pyverbs(real_pyverbs):
    e = verbs.verbs_enums(real_pyverbs)
    wr = verbs.write_with_imm(real_pyverbs, wr_id=3, addr=0x1000, nbytes=4096, lkey=5, remote_addr=0x2000,
                              rkey=99, imm=0xABCD)
    assert (wr.wr_id, wr.opcode, wr.imm_data, wr.num_sge) == (3, e.IBV_WR_RDMA_WRITE_WITH_IMM, 0xABCD, 1)
    assert wr.send_flags & e.IBV_SEND_SIGNALED
    recv = verbs.recv_for_imm(real_pyverbs, 8, scratch_addr=0x3000, scratch_lkey=6)
    assert (recv.wr_id, recv.num_sge) == (8, 1)
    with pytest.raises(TransportError, match="32 bits"):
        verbs.write_with_imm(real_pyverbs, wr_id=0, addr=0, nbytes=0, lkey=0, remote_addr=0, rkey=0, imm=-1)


def test_rc_transition_attributes_with_real_pyverbs(real_pyverbs):
    e = verbs.verbs_enums(real_pyverbs)
    init, rtr, rts = verbs.rc_attrs(real_pyverbs, port=1, dest_qpn=0x1234, dest_psn=77, my_psn=88,
                                    dgid="fe80:0000:0000:0000:0000:0000:0000:0001", sgid_index=3)
    assert init.qp_state == e.IBV_QPS_INIT and init.qp_access_flags & e.IBV_ACCESS_REMOTE_WRITE
    assert (rtr.qp_state, rtr.dest_qp_num, rtr.rq_psn, rtr.path_mtu) == (e.IBV_QPS_RTR, 0x1234, 77, e.IBV_MTU_4096)
    assert (rts.qp_state, rts.sq_psn) == (e.IBV_QPS_RTS, 88)


# --- the transport, against an in-process fake of pyverbs (tests/support/fake_pyverbs.py) -------------------------


def verbs_pair(monkeypatch, *, session_b="s", qps=3, sizes=(1 << 16, 1 << 16)):
    pv = fakepv.install(monkeypatch)
    a = verbs.VerbsTransport(pyverbs=pv, session="s", name="node0", qps=qps, timeout_s=5)
    b = verbs.VerbsTransport(pyverbs=pv, session=session_b, name="node1", qps=qps, timeout_s=5)
    bufs_a = [np.zeros(n, np.uint8) for n in sizes]
    bufs_b = [np.zeros(n, np.uint8) for n in sizes]
    regs_a = [a.register(x) for x in bufs_a]
    regs_b = [b.register(x) for x in bufs_b]
    address = b.listen()
    box = {}

    def accept():
        try:
            box["b"] = b.accept(timeout_s=5)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            box["err"] = exc

    t = threading.Thread(target=accept)
    t.start()
    try:
        conn_a = a.connect(address, timeout_s=5)
    finally:
        t.join(10)
    return a, b, conn_a, box, (bufs_a, regs_a, bufs_b, regs_b)


def test_verbs_writes_land_and_complete_on_both_sides(monkeypatch):
    a, b, conn_a, box, (bufs_a, regs_a, bufs_b, _) = verbs_pair(monkeypatch)
    conn_b = box["b"]
    assert conn_b.peer_name == "node0" and len(conn_a.qps) == 3
    bufs_a[0][:] = np.random.default_rng(1).integers(0, 256, bufs_a[0].size, dtype=np.uint8)
    ids = [conn_a.write(regs_a[0], k * 1000, 1000, 1, 7 + k * 1000, imm=(5 << 24) | k) for k in range(6)]
    sent, got = [], []
    deadline = time.monotonic() + 5
    while (len(sent) < 6 or len(got) < 6) and time.monotonic() < deadline:
        sent += conn_a.poll(timeout_s=0)
        got += conn_b.poll(timeout_s=0)
    assert sorted(c.write_id for c in sent) == ids and all(c.kind == "sent" for c in sent)
    assert sorted(c.imm for c in got) == [(5 << 24) | k for k in range(6)]
    assert all(c.kind == "received" and c.nbytes == 1000 for c in got)
    assert np.array_equal(bufs_b[1][7:7 + 6000], bufs_a[0][:6000])
    assert {qp.qp_num for qp in conn_a.qps} == conn_a.qp_nums and conn_a._next == 6  # round robin over 3 QPs
    a.close()
    b.close()


def test_a_loop_polling_each_connection_drains_the_shared_cq_once_a_turn(monkeypatch):
    """A node joined to two peers polls both connections in turn, as the network executors' driving loop does: the
    transport's one CQ is drained once a turn (by the first connection that finds nothing queued), and every
    completion still reaches its own connection."""
    pv = fakepv.install(monkeypatch)
    hub, b, c = (verbs.VerbsTransport(pyverbs=pv, session="s", name=f"node{i}", qps=2, timeout_s=5) for i in range(3))
    bufs = {t: np.zeros(1 << 12, np.uint8) for t in (hub, b, c)}
    regs = {t: t.register(x) for t, x in bufs.items()}
    address, box = hub.listen(), {}

    def accept():
        box["first"], box["second"] = hub.accept(timeout_s=5), hub.accept(timeout_s=5)

    t = threading.Thread(target=accept)
    t.start()
    to_hub = {b: b.connect(address, timeout_s=5)}
    to_hub[c] = c.connect(address, timeout_s=5)
    t.join(10)
    conns = {conn.peer_name: conn for conn in (box["first"], box["second"])}
    drains = []
    real = hub._poll_cq
    monkeypatch.setattr(hub, "_poll_cq", lambda: drains.append(1) or real())
    for _ in range(4):  # nothing queued: one drain a turn, not one per connection
        assert conns["node1"].poll(timeout_s=0) == [] and conns["node2"].poll(timeout_s=0) == []
    assert len(drains) == 4
    for k in range(3):
        to_hub[b].write(regs[b], 0, 64, 0, 64 * k, imm=100 + k)
        to_hub[c].write(regs[c], 0, 64, 0, 1024 + 64 * k, imm=200 + k)
    got = {"node1": [], "node2": []}
    deadline = time.monotonic() + 5
    while (len(got["node1"]) < 3 or len(got["node2"]) < 3) and time.monotonic() < deadline:
        for name, conn in conns.items():
            got[name] += conn.poll(timeout_s=0)
    assert sorted(x.imm for x in got["node1"]) == [100, 101, 102]
    assert sorted(x.imm for x in got["node2"]) == [200, 201, 202]
    for x in (hub, b, c):
        x.close()


def test_verbs_ordered_writes_take_queue_pair_0(monkeypatch):
    """Ordered writes (the executors' plan notices) all go on queue pair 0, which delivers in order; the others
    still go round robin over every queue pair."""
    a, b, conn_a, box, (_, regs_a, _, _) = verbs_pair(monkeypatch)
    conn_b = box["b"]
    posted = []
    for i, qp in enumerate(conn_a.qps):
        post = qp.post_send
        qp.post_send = lambda wr, i=i, post=post: (posted.append(i), post(wr))[1]
    for k in range(6):
        conn_a.write(regs_a[0], 0, 100, 1, 0, imm=1000 + k)
        conn_a.write(regs_a[0], 0, 0, 1, 0, imm=k, ordered=True)
    got = []
    deadline = time.monotonic() + 5
    while len(got) < 12 and time.monotonic() < deadline:
        got += conn_b.poll(timeout_s=0)
    assert posted[1::2] == [0] * 6 and sorted(set(posted[0::2])) == [0, 1, 2], posted
    assert [c.imm for c in got if c.imm < 1000] == list(range(6))
    a.close()
    b.close()


def test_verbs_poll_waits_on_the_channel_fd(monkeypatch):
    a, b, conn_a, box, (_, regs_a, _, _) = verbs_pair(monkeypatch, qps=1)
    conn_b = box["b"]
    assert b.channel_fd is not None
    threading.Timer(0.2, lambda: conn_a.write(regs_a[0], 0, 10, 0, 0, imm=42)).start()
    t0 = time.monotonic()
    got = conn_b.poll(timeout_s=5)
    assert [c.imm for c in got] == [42] and 0.1 < time.monotonic() - t0 < 3
    with pytest.raises(HocclTimeoutError, match="no completion"):  # nothing more: a bounded wait, as with TCP
        conn_b.poll(timeout_s=0.05)
    a.close()
    b.close()


def test_verbs_session_mismatch_and_bad_writes(monkeypatch):
    with pytest.raises(TransportError, match="is in session 'other', this transport in 's'"):
        verbs_pair(monkeypatch, session_b="other")  # the acceptor refuses too (before any RDMA)
    a, b, conn_a, box, (_, regs_a, _, _) = verbs_pair(monkeypatch)
    with pytest.raises(TransportError, match="region 5 does not exist"):
        conn_a.write(regs_a[0], 0, 10, 5, 0)
    with pytest.raises(TransportError, match="out of range"):
        conn_a.write(regs_a[0], 0, 10, 0, (1 << 16) - 5)
    with pytest.raises(TransportError, match="before connecting"):
        a.register(np.zeros(8, np.uint8))
    a.close()
    b.close()


def test_verbs_dead_peer_is_a_transport_error(monkeypatch):
    a, b, conn_a, box, (_, regs_a, _, _) = verbs_pair(monkeypatch, qps=2)
    fakepv.kill_qps_of(box["b"])
    conn_a.write(regs_a[0], 0, 100, 0, 0, imm=1)
    with pytest.raises(TransportError, match="peer died or the link dropped"):
        for _ in range(50):
            with contextlib.suppress(HocclTimeoutError):
                conn_a.poll(timeout_s=0.05)
    with pytest.raises(TransportError):
        conn_a.write(regs_a[0], 0, 100, 0, 0, imm=2)
    a.close()
    b.close()


def test_verbs_no_device_and_unreachable_peer(monkeypatch):
    pv = fakepv.install(monkeypatch, devices=())
    with pytest.raises(TransportError, match="no RDMA device.*TCP transport"):
        verbs.VerbsTransport(pyverbs=pv)
    pv = fakepv.install(monkeypatch)
    with pytest.raises(TransportError, match="'mlx5_9' not found"):
        verbs.VerbsTransport(pyverbs=pv, device="mlx5_9")
    t = verbs.VerbsTransport(pyverbs=pv, timeout_s=1)
    with pytest.raises(TransportError, match="nothing listens"):
        t.connect("127.0.0.1:1", timeout_s=0.3)
    t.listen()
    with pytest.raises(HocclTimeoutError, match="no peer connected"):
        t.accept(timeout_s=0.2)
    t.close()


def test_inter_node_schedule_over_the_verbs_transport(monkeypatch):
    """The host executor's two nodes, in threads, over the (fake) verbs transport: byte-equal to replay."""
    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.net.executor import HostNodeExecutor

    pv = fakepv.install(monkeypatch)
    plan = compile_plan(make_topology("h200x2", nodes=2), CollectiveSpec(kind="alltoall", size_bytes=4 * 10_007),
                        CompileOptions(chunk_bytes=1024, baselines=False))
    inputs = [np.random.default_rng([r, 3]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
              for r in range(plan.num_ranks)]
    outputs = {r: np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8) for r in range(plan.num_ranks)}
    transports = [verbs.VerbsTransport(pyverbs=pv, session=plan.plan_id, name=f"node{n}", qps=2, timeout_s=10)
                  for n in range(2)]
    execs = [HostNodeExecutor(plan, n, {r: (inputs[r], outputs[r]) for r in range(2 * n, 2 * n + 2)},
                              transports[n], slots=2, timeout_s=10) for n in range(2)]
    addresses = {n: t.listen() for n, t in enumerate(transports)}

    def node(n):
        execs[n].connect(addresses)
        execs[n].run()

    errors = failures(in_threads(2, node))
    for t in transports:
        t.close()
    assert not errors, errors
    want = replay(plan, inputs).outputs
    for r in range(plan.num_ranks):
        assert np.array_equal(outputs[r], want[r]), f"rank {r}"


def test_transport_queue_pair_arguments_with_real_pyverbs(real_pyverbs):
    """The keyword arguments VerbsTransport passes to pyverbs' QPCap and QPInitAttr exist there."""
    import importlib

    qp = importlib.import_module(f"{real_pyverbs.__name__}.qp")
    e = verbs.verbs_enums(real_pyverbs)
    cap = qp.QPCap(max_send_wr=128, max_recv_wr=256, max_send_sge=1, max_recv_sge=1)
    attr = qp.QPInitAttr(qp_type=e.IBV_QPT_RC, cap=cap)
    assert attr.qp_type == e.IBV_QPT_RC and attr.cap.max_recv_wr == 256
    for name in ("IBV_WC_SUCCESS", "IBV_WC_RECV_RDMA_WITH_IMM", "IBV_ACCESS_REMOTE_WRITE", "IBV_QPT_RC"):
        assert hasattr(e, name), name


# --- GPUDirect RDMA: staging rings in GPU memory, registered as dma-bufs or through peer memory ------------


def _gpu_nodes_over_verbs(monkeypatch, *, dmabuf, mr_refuses_gpu=False, kind="alltoall"):
    """2 nodes x 2 GPUs on faked CUDA (device pointers are host memory) over the fake verbs transport,
    the GPU executor with its default staging: returns (outputs, wanted outputs, transports)."""
    import fake_cuda

    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.interop import DeviceBuffer
    from hoccl_runtime.net.executor import GpuNodeExecutor

    fake_cuda.install(monkeypatch, async_streams=True)
    gpu_memory = set()
    malloc = fake_cuda.Runtime.malloc

    def tracked_malloc(self, nbytes):
        ptr = malloc(self, nbytes)
        gpu_memory.add(ptr)
        return ptr

    monkeypatch.setattr(fake_cuda.Runtime, "malloc", tracked_malloc)

    class Refusing(set):  # a plain MR on GPU memory fails: no nvidia_peermem
        def __contains__(self, address):
            return mr_refuses_gpu and address in gpu_memory

    pv = fakepv.install(monkeypatch, dmabuf=dmabuf, mr_refuses=Refusing())
    plan = compile_plan(make_topology("h200x2", nodes=2), CollectiveSpec(kind=kind, size_bytes=4 * 10_007),
                        CompileOptions(chunk_bytes=4096, baselines=False, multicast=False))
    inputs = [np.random.default_rng([r, 5]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
              for r in range(4)]
    outputs = [np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8) for r in range(4)]
    transports = [verbs.VerbsTransport(pyverbs=pv, session=plan.plan_id, name=f"node{n}", qps=2, timeout_s=10)
                  for n in range(2)]
    execs = {}

    def make(n):
        bufs = {r: (DeviceBuffer(int(inputs[r].ctypes.data), inputs[r].nbytes, r % 2),
                    DeviceBuffer(int(outputs[r].ctypes.data), outputs[r].nbytes, r % 2)) for r in (2 * n, 2 * n + 1)}
        execs[n] = GpuNodeExecutor(plan, n, bufs, transports[n], slots=3, timeout_s=10)

    errors = failures(in_threads(2, make))
    if errors:
        for t in transports:
            t.close()
        raise errors[0][1]
    addresses = {n: t.listen() for n, t in enumerate(transports)}

    def node(n):
        execs[n].connect(addresses)
        execs[n].run()
        execs[n].close()

    errors = failures(in_threads(2, node))
    assert not errors, errors
    return outputs, replay(plan, inputs).outputs, transports, execs


def test_gpu_executor_reused_over_verbs_on_alternate_ring_halves(monkeypatch):
    """The network communicators' way over RDMA: a reusable GPU executor (HOCCL_NET_OVERLAP on, its default), 6 runs
    of mixed plans on buffers of their own, each byte-equal to replay. Until 2026-12-07 the first run stalled: the
    receiver took the half a write filled from its completion's offset, which a write with immediate does not carry."""
    import fake_cuda

    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.interop import DeviceBuffer
    from hoccl_runtime.net.executor import GpuNodeExecutor

    monkeypatch.setenv("HOCCL_NET_OVERLAP", "1")
    fake_cuda.install(monkeypatch, async_streams=True)
    pv = fakepv.install(monkeypatch, dmabuf=True)
    topo, opts = make_topology("h200x2", nodes=2), CompileOptions(chunk_bytes=4096, baselines=False, multicast=False)
    plans = [compile_plan(topo, CollectiveSpec(kind=kind, size_bytes=4 * (10_007 + 13 * i)), opts)
             for i, kind in enumerate(("alltoall", "allgather") * 3)]
    data = [[np.random.default_rng([r, run, 5]).integers(0, 256, p.ranks.input_bytes[r], dtype=np.uint8)
             for r in range(4)] for run, p in enumerate(plans)]
    outputs = [[np.full(p.ranks.output_bytes[r], 0xA5, np.uint8) for r in range(4)] for p in plans]

    def bufs(run, n):
        return {r: (DeviceBuffer(int(data[run][r].ctypes.data), data[run][r].nbytes, r % 2),
                    DeviceBuffer(int(outputs[run][r].ctypes.data), outputs[run][r].nbytes, r % 2))
                for r in (2 * n, 2 * n + 1)}

    transports = [verbs.VerbsTransport(pyverbs=pv, session=plans[0].plan_id, name=f"node{n}", qps=2, timeout_s=10)
                  for n in range(2)]
    execs = {}
    errors = failures(in_threads(2, lambda n: execs.__setitem__(n, GpuNodeExecutor(
        plans[0], n, bufs(0, n), transports[n], slots=4, timeout_s=10, reuse=True))))
    assert not errors, errors
    assert all(ex.halves for ex in execs.values())
    addresses = {n: t.listen() for n, t in enumerate(transports)}

    def node(n):
        execs[n].connect(addresses)
        for run, p in enumerate(plans):
            execs[n].run(p, bufs(run, n))
        execs[n].close()

    errors = failures(in_threads(2, node))
    for t in transports:
        t.close()
    assert not errors, errors
    for run, p in enumerate(plans):
        want = replay(p, data[run]).outputs
        for r in range(4):
            assert np.array_equal(outputs[run][r], want[r]), f"run {run} rank {r}"


def test_gpudirect_rings_registered_as_dmabufs(monkeypatch):
    """With the verbs transport the GPU executor stages in GPU memory (no pinned host ring), registered once
    per ring as a dma-buf (fd, offset, iova = the GPU address); the collective is byte-equal to replay."""
    import fake_cuda

    outputs, want, transports, execs = _gpu_nodes_over_verbs(monkeypatch, dmabuf=True)
    try:
        assert all(ex.staging == "device" for ex in execs.values())
        for r in range(4):
            assert np.array_equal(outputs[r], want[r]), f"rank {r}"
        assert [t.gpu_registration for t in transports] == ["dma-buf", "dma-buf"]
        # 2 GPUs per node x (send + receive ring) x 2 nodes, each exported and registered at its own address
        assert len(fake_cuda.dmabuf_exports) == 8 and len(fakepv.Mlx5DmaBufMR.registered) == 8
        assert sorted(iova for *_, iova in fakepv.Mlx5DmaBufMR.registered) == sorted(
            address for address, *_ in fake_cuda.dmabuf_exports)
        assert {device for *_, device in fake_cuda.dmabuf_exports} == {0, 1}
    finally:
        fds = [fd for fd, *_ in fakepv.Mlx5DmaBufMR.registered]
        for t in transports:
            t.close()
    for fd in fds:  # the transport closed the dma-buf descriptors with its MRs
        with pytest.raises(OSError):
            import os

            os.fstat(fd)


def test_gpudirect_falls_back_to_peer_memory(monkeypatch):
    outputs, want, transports, _ = _gpu_nodes_over_verbs(monkeypatch, dmabuf=False, kind="allgather")
    for t in transports:
        t.close()
    assert [t.gpu_registration for t in transports] == ["peer-memory", "peer-memory"]
    for r in range(4):
        assert np.array_equal(outputs[r], want[r]), f"rank {r}"


def test_gpu_memory_that_cannot_be_registered_says_why_and_what_to_do(monkeypatch):
    with pytest.raises(TransportError) as info:
        _gpu_nodes_over_verbs(monkeypatch, dmabuf=False, mr_refuses_gpu=True)
    text = str(info.value)
    assert "no mlx5 dma-buf MR" in text and "nvidia_peermem" in text and "staging='host'" in text


def test_host_transports_refuse_gpu_memory_and_device_staging(monkeypatch):
    import fake_cuda

    from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
    from hoccl_compiler.ir import CompileOptions
    from hoccl_runtime.interop import DeviceBuffer
    from hoccl_runtime.net.executor import GpuNodeExecutor
    from hoccl_runtime.net.transport import TcpTransport

    fake_cuda.install(monkeypatch, async_streams=True)
    tcp = TcpTransport(session="s")
    with pytest.raises(TransportError, match="cannot register GPU memory"):
        tcp.register_device(0x1000, 4096, 0)
    plan = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1),
                        CollectiveSpec(kind="sendrecv", pairs=((0, 1, 1000),)),
                        CompileOptions(chunk_bytes=4096, baselines=False))
    a, b = np.zeros(1000, np.uint8), np.zeros(0, np.uint8)
    bufs = {0: (DeviceBuffer(int(a.ctypes.data), 1000, 0), DeviceBuffer(int(b.ctypes.data), 0, 0))}
    with pytest.raises(TransportError, match="staging='device' needs a transport that registers GPU memory"):
        GpuNodeExecutor(plan, 0, bufs, tcp, staging="device")
    with pytest.raises(TransportError, match="staging='pinned'"):
        GpuNodeExecutor(plan, 0, bufs, tcp, staging="pinned")
    ex = GpuNodeExecutor(plan, 0, bufs, tcp)
    assert ex.staging == "host"
    ex.close()
    tcp.close()
