"""The inter-node path on host memory: one process per node, a plan's network pieces over TCP,
checked byte for byte against the reference replay (hoccl_compiler.verify.replay)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology, replay
from hoccl_compiler.ir import CompileOptions


def _node(node, exchange, plan_json, slots):
    from hoccl_compiler.codec import plan_from_json
    from hoccl_runtime.net.executor import HostNodeExecutor

    plan = plan_from_json(plan_json)
    L = plan.topology.gpus_per_node
    bufs = {}
    for r in range(node * L, (node + 1) * L):
        inp = np.random.default_rng([r, 3]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
        bufs[r] = (inp, np.full(plan.ranks.output_bytes[r], 0xA5, dtype=np.uint8))
    transport = HostNodeExecutor.make_transport(plan, node, lanes=2, secret=b'test-job')
    ex = HostNodeExecutor(plan, node, bufs, transport, slots=slots, timeout_s=20)
    ex.connect(exchange(transport.listen()))
    ex.run()
    transport.close()
    return {r: bufs[r][1].tobytes() for r in bufs}


def run_nodes(plan, slots=2):
    from hoccl_bench.nodeprocs import run_node_processes

    results = run_node_processes(_node, plan.topology.nodes, (plan.model_dump_json(), slots), timeout_s=120)
    outputs = {r: np.frombuffer(b, dtype=np.uint8) for outs in results.values() for r, b in outs.items()}
    inputs = [np.random.default_rng([r, 3]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
              for r in range(plan.num_ranks)]
    expected = replay(plan, inputs).outputs
    for r in range(plan.num_ranks):
        assert np.array_equal(outputs[r], expected[r]), f"rank {r} differs"


@pytest.mark.parametrize("kind,forwarding", [("alltoall", "symmetric"), ("allgather", "symmetric"),
                                             ("alltoall", "none"), ("sendrecv", "symmetric")])
def test_two_nodes_of_two_gpus(kind, forwarding):
    topo = make_topology("h200x2", nodes=2, forwarding=forwarding)  # 4 ranks: forwarding copies included
    spec = CollectiveSpec(kind=kind, size_bytes=4 * 10_007) if kind != "sendrecv" else \
        CollectiveSpec(kind=kind, pairs=((0, 3, 20_000), (2, 1, 9_999), (1, 2, 5)))
    plan = compile_plan(topo, spec, CompileOptions(chunk_bytes=1024, baselines=False, multicast=False))
    run_nodes(plan, slots=2)  # 2 slots: the ring wraps many times, credits must work


@pytest.mark.parametrize("kind", ["alltoall", "allgather"])
def test_two_nodes_with_polled_receives(monkeypatch, kind):
    """HOCCL_TCP_RECEIVE=poll: the driving loops read the lanes themselves (no receiving threads); the rings wrap,
    credits and notices flow, and every byte lands as the replay has it."""
    monkeypatch.setenv("HOCCL_TCP_RECEIVE", "poll")  # the node processes take it from the environment
    topo = make_topology("h200x2", nodes=2)
    plan = compile_plan(topo, CollectiveSpec(kind=kind, size_bytes=4 * 30_011),
                        CompileOptions(chunk_bytes=1024, baselines=False, multicast=False))
    run_nodes(plan, slots=2)


def test_three_nodes_one_gpu_each_skewed():
    topo = make_topology("h200x2", nodes=3, gpus_per_node=1)
    mat = ((0, 5000, 70), (3000, 11, 0), (1, 2, 0))
    plan = compile_plan(topo, CollectiveSpec(kind="alltoallv", matrix=mat), CompileOptions(chunk_bytes=512))
    run_nodes(plan, slots=3)


def test_wrong_world_size_and_missing_buffers_are_clear_errors():
    from hoccl_runtime.errors import TransportError
    from hoccl_runtime.net.executor import HostNodeExecutor

    plan = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1), CollectiveSpec(kind="allgather",
                        size_bytes=64), CompileOptions(chunk_bytes=64, baselines=False))
    bufs = {0: (np.zeros(32, np.uint8), np.zeros(64, np.uint8))}
    transport = HostNodeExecutor.make_transport(plan, 0, open=True)
    try:
        with pytest.raises(TransportError, match="has nodes 0..1"):
            HostNodeExecutor(plan, 2, bufs, transport)
        with pytest.raises(TransportError, match=r"no buffers for \[1\]"):
            HostNodeExecutor(plan, 1, bufs, transport)
        ex = HostNodeExecutor(plan, 0, bufs, transport)
        with pytest.raises(TransportError, match="for 2 nodes.*got \\[0, 1, 2\\]"):
            ex.connect({0: "127.0.0.1:1", 1: "127.0.0.1:2", 2: "127.0.0.1:3"})
        with pytest.raises(TransportError, match="kind 'ib'"):
            HostNodeExecutor.make_transport(plan, 0, kind="ib")
        # a TCP transport authenticates its peers unless one asks for an open one
        with pytest.raises(TransportError, match=r"needs the job's secret=.*or open=True"):
            HostNodeExecutor.make_transport(plan, 0)
        HostNodeExecutor.make_transport(plan, 0, secret=b"job").close()
    finally:
        transport.close()


def _reuse_nodes(plans_per_node, timeout_s=10, before_run=None, after_run=None):
    """Two nodes in threads over TCP with reusable executors; node n runs plans_per_node[n] in order
    (``before_run(n, run)`` / ``after_run(n, run)`` around each). Returns (outputs per run per rank, errors)."""
    from threaded import failures, in_threads

    from hoccl_runtime.net.executor import HostNodeExecutor

    first = plans_per_node[0][0]
    L = first.topology.gpus_per_node
    transports = [HostNodeExecutor.make_transport(first, n, lanes=2, secret=b'test-job') for n in range(2)]

    def bufs(plan, n, run):
        return {r: (np.random.default_rng([r, run + 1, 5]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8),
                    np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8)) for r in range(n * L, (n + 1) * L)}

    execs = [HostNodeExecutor(first, n, bufs(first, n, -1), transports[n], slots=2, timeout_s=timeout_s, reuse=True)
             for n in range(2)]
    addresses = {n: t.listen() for n, t in enumerate(transports)}
    results = {}

    def node(n):
        execs[n].connect(addresses)
        for run, plan in enumerate(plans_per_node[n]):
            b = bufs(plan, n, run)
            if before_run is not None:
                before_run(n, run)
            execs[n].run(plan, b)
            if after_run is not None:
                after_run(n, run)
            results[(n, run)] = {r: out for r, (_, out) in b.items()}

    errors = failures(in_threads(2, node))
    for t in transports:
        t.close()
    return results, errors


def test_one_executor_runs_many_plans_over_the_same_connections():
    topo = make_topology("h200x2", nodes=2)  # 2 x 2 GPUs, forwarding
    opts = CompileOptions(chunk_bytes=1024, baselines=False, multicast=False)
    plans = [compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=4 * 3001), opts),
             compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=4 * 5003), opts),
             compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 3, 7000), (3, 0, 11))), opts),
             compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=4 * 3001), opts)]
    results, errors = _reuse_nodes([plans, plans])
    assert not errors, errors
    _check_runs(plans, {(r, run): results[(r // 2, run)] for r in range(4) for run in range(4)}, range(4))


def test_nodes_in_different_collectives_raise_plan_error():
    from hoccl_runtime.errors import PlanError, TransportError

    topo = make_topology("h200x2", nodes=2)
    opts = CompileOptions(chunk_bytes=1024, baselines=False, multicast=False)
    ag = compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=4 * 3001), opts)
    a2a = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=4 * 5003), opts)
    _, errors = _reuse_nodes([[ag], [a2a]], timeout_s=5)
    assert len(errors) == 2 and all(isinstance(e, PlanError) for _, e in errors), errors
    assert all("every node must run the same collectives" in str(e) for _, e in errors)
    other = compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=4 * 3001),
                         CompileOptions(chunk_bytes=2048, baselines=False, multicast=False))
    _, errors = _reuse_nodes([[ag, other], [ag, other]], timeout_s=5)
    assert errors and all(isinstance(e, TransportError) and "chunk size" in str(e) for _, e in errors), errors


def _check_runs(plans, results, runs):
    for run in runs:
        plan = plans[run]
        inputs = [np.random.default_rng([r, run + 1, 5]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
                  for r in range(plan.num_ranks)]
        want = replay(plan, inputs).outputs
        for r in range(plan.num_ranks):
            assert np.array_equal(results[(r, run)][r], want[r]), f"run {run} rank {r}"


@pytest.mark.usefixtures("whole_rings")
def test_a_senders_run_ends_before_the_receiver_reaches_its_call():
    """Eager sends: chunks that fit the receiver's ring leave, and the sender's run ends, while the receiver is not in
    its run yet (it only starts once the sender's run returned): the run waits for the receiver's previous run, not
    for this one."""
    import threading

    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    opts = CompileOptions(chunk_bytes=1024, baselines=False)
    plans = [compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 2000),)), opts),
             compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 1500),)), opts),
             compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((1, 0, 900),)), opts)]
    sent = [threading.Event() for _ in plans]
    order = []

    def before(n, run):
        if n == 1 and run < 2:
            assert sent[run].wait(10), f"node 0's run {run} did not end before node 1 started it"
        order.append((n, run))

    results, errors = _reuse_nodes([plans, plans], timeout_s=15, before_run=before,
                                   after_run=lambda n, run: sent[run].set() if n == 0 else None)
    assert not errors, errors
    assert order.index((0, 1)) < order.index((1, 1))
    _check_runs(plans, results, range(3))


class _Steps:
    """When each node's executor passed a step of each run (its first time): ``note(ex, what)``; ``waited`` marks the
    end of every run's wait for the previous run (installed on HostNodeExecutor by the constructor)."""

    def __init__(self, monkeypatch):
        import threading

        from hoccl_runtime.net.executor import HostNodeExecutor

        self.at: dict = {}
        self._lock = threading.Lock()
        wait = HostNodeExecutor._wait_for_previous

        def waited(ex):
            wait(ex)
            self.note(ex, "waited")

        monkeypatch.setattr(HostNodeExecutor, "_wait_for_previous", waited)

    def note(self, ex, what: str) -> None:
        import time

        with self._lock:
            self.at.setdefault((ex.node, ex._runs, what), time.monotonic())


@pytest.mark.parametrize("receive", ["thread", "poll"])
@pytest.mark.usefixtures("whole_rings")
def test_a_senders_staging_copies_start_before_the_other_nodes_notices_are_in(monkeypatch, receive):
    """The copy out of the sender's buffer into its send ring does not wait for the other node to be through the
    previous run (only the network writes do): node 1 ends run 0 late, and node 0 has staged run 1's first chunk
    while it still waits for that. With HOCCL_TCP_RECEIVE=poll every write goes through a lane's thread, so run 0's
    writes are known to have left only while run 1 already waits: their slots are freed and staged into there."""
    import time

    monkeypatch.setenv("HOCCL_TCP_RECEIVE", receive)

    from hoccl_runtime.net.executor import HostNodeExecutor

    steps, stage_out = _Steps(monkeypatch), HostNodeExecutor._stage_out

    def staged(self, *args):
        steps.note(self, "staged")
        return stage_out(self, *args)

    monkeypatch.setattr(HostNodeExecutor, "_stage_out", staged)
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    opts = CompileOptions(chunk_bytes=1024, baselines=False)
    plans = [compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 2000),)), opts),
             compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 1500),)), opts)]

    def before(n, run):
        if n == 1 and run == 0:
            time.sleep(0.5)  # node 1 reaches (and so ends) run 0 late

    results, errors = _reuse_nodes([plans, plans], timeout_s=15, before_run=before)
    assert not errors, errors
    _check_runs(plans, results, range(2))
    ahead = steps.at[(0, 1, "waited")] - steps.at[(0, 1, "staged")]
    assert ahead > 0.2, f"node 0 staged run 1 only {ahead * 1e3:.0f} ms before node 1's notice of run 0 was in"


def test_a_send_does_not_wait_for_a_node_that_received_nothing_in_the_previous_run(monkeypatch):
    """A pipeline's turn: run 0 sends 1 -> 0, run 1 sends 0 -> 1. Node 0's run 1 waits only for the nodes that
    received in run 0 (itself), not for node 1 to be through run 0: node 1 stays in run 0 for 0.5 s after its last
    write, receives run 1's data meanwhile, keeps it for run 1, and both runs come out right."""
    import time

    from hoccl_runtime.net.executor import HostNodeExecutor

    steps, run_done = _Steps(monkeypatch), HostNodeExecutor._run_done

    def held(self):
        done = run_done(self)
        if done and self.node == 1 and self._runs == 0:
            steps.note(self, "done")
            if time.monotonic() - steps.at[(1, 0, "done")] < 0.5:
                return False
            steps.note(self, "left")
        return done

    monkeypatch.setattr(HostNodeExecutor, "_run_done", held)
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    opts = CompileOptions(chunk_bytes=1024, baselines=False)
    plans = [compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((1, 0, 3000),)), opts),
             compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 2500),)), opts),
             compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((1, 0, 700),)), opts)]
    results, errors = _reuse_nodes([plans, plans], timeout_s=15)
    assert not errors, errors
    _check_runs(plans, results, range(3))
    early = steps.at[(1, 0, "left")] - steps.at[(0, 1, "waited")]
    assert early > 0.3, f"node 0 began run 1's writes only {early * 1e3:.0f} ms before node 1 left run 0"


@pytest.mark.usefixtures("whole_rings")
def test_a_run_ends_once_its_writes_are_posted_and_their_slots_stay_taken_until_they_left(monkeypatch):
    """A reusable executor's run is through once its writes are posted (the next call, a receive here, starts while
    a send's last writes still leave); the send slots those writes read stay taken into the next runs until their
    "sent" completions come: node 0's "sent" completions are held back, and its third run (another send through the
    same slots) stages nothing before they are let through. Every run's bytes come out right."""
    import threading
    import time

    from hoccl_runtime.net.executor import HostNodeExecutor

    steps, poll, stage_out = _Steps(monkeypatch), HostNodeExecutor._poll, HostNodeExecutor._stage_out
    keep = HostNodeExecutor._keep
    held, lock, let_go = [], threading.Lock(), threading.Event()

    def holding_keep(self, n, c):  # a "sent" that comes while a run waits for the other node: held back too
        with lock:
            if self.node == 0 and c.kind == "sent" and c.nbytes and not let_go.is_set():
                held.append(c)
                return None
        return keep(self, n, c)

    def holding_poll(self, node):
        items = poll(self, node)
        if self.node != 0:
            return items
        with lock:
            held.extend(c for c in items if c.kind == "sent" and c.nbytes)
            items = [c for c in items if not (c.kind == "sent" and c.nbytes)]
            if let_go.is_set():
                items, held[:] = held + items, []
        return items

    def staged(self, *args):
        steps.note(self, "staged")
        return stage_out(self, *args)

    monkeypatch.setattr(HostNodeExecutor, "_poll", holding_poll)
    monkeypatch.setattr(HostNodeExecutor, "_keep", holding_keep)
    monkeypatch.setattr(HostNodeExecutor, "_stage_out", staged)
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    opts = CompileOptions(chunk_bytes=1024, baselines=False)
    plans = [compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 2000),)), opts),  # both slots
             compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((1, 0, 900),)), opts),
             compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 1500),)), opts)]
    released = {}

    def after(n, run):
        if n == 0 and run == 1:  # node 0's first two runs are through with none of its writes known to have left
            assert held and not let_go.is_set()
            threading.Timer(0.4, lambda: (released.setdefault("at", time.monotonic()), let_go.set())).start()

    results, errors = _reuse_nodes([plans, plans], timeout_s=15, after_run=after)
    assert not errors, errors
    _check_runs(plans, results, range(3))
    assert steps.at[(0, 2, "staged")] >= released["at"], "run 2 staged into a slot whose write had not left"


def test_a_pure_senders_peer_in_another_collective_raises_and_the_sender_hears_of_it():
    """The receiver checks the sender's plan notice before it takes a byte: another collective there is a PlanError;
    the sender, whose run ended when its writes left, fails at its next run: either it waits for a receiver that never
    finishes that run, or (when the receiver's own notice reaches it first) it reads that the peer runs another plan."""
    from hoccl_runtime.errors import HocclTimeoutError, PlanError, TransportError

    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    opts = CompileOptions(chunk_bytes=1024, baselines=False)
    p = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 2000),)), opts)
    q = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 1000),)), opts)
    _, errors = _reuse_nodes([[p, p], [q]], timeout_s=3)
    by_node = dict(errors)
    assert isinstance(by_node.get(1), PlanError) and "as its run 0" in str(by_node[1]), errors
    sender = by_node.get(0)
    if isinstance(sender, PlanError):  # node 1's notice of the other plan reached node 0 before its wait timed out
        assert "node 1" in str(sender) and "as its run 0" in str(sender), errors
    else:
        assert isinstance(sender, (HocclTimeoutError, TransportError)), errors
        assert "did not finish the run before plan" in str(sender) or "closed" in str(sender), errors


def test_ring_slots_default_holds_about_256_mib():
    from hoccl_runtime.errors import TransportError
    from hoccl_runtime.net.executor import RING_BYTES, ring_slots

    assert RING_BYTES == 256 << 20
    assert ring_slots(8 << 20) == 32
    assert ring_slots(32 << 20) == 8
    assert ring_slots(1 << 30) == 4        # never fewer than 4: copies still overlap the network
    assert ring_slots(4096) == 64          # never more than 64 slots
    assert ring_slots(8 << 20, 64 << 20) == 8
    with pytest.raises(TransportError, match="ring_bytes=0"):
        ring_slots(8 << 20, 0)


def _echo(node, exchange, tag):
    return (tag, node, sorted(exchange(f"addr-{node}").items()))


def _broken(node, exchange):
    if node == 1:
        raise ValueError("node 1 broke on purpose")
    return exchange("addr")  # never completes: node 1 does not publish; the parent raises first


def _vanishes(node, exchange):
    import os

    os._exit(3)


def test_node_processes_exchange_addresses_and_report_failures():
    from hoccl_bench.nodeprocs import run_node_processes
    from hoccl_runtime.errors import TransportError

    got = run_node_processes(_echo, 3, ("t",), timeout_s=60)
    assert got == {n: ("t", n, [(0, "addr-0"), (1, "addr-1"), (2, "addr-2")]) for n in range(3)}
    with pytest.raises(TransportError, match="(?s)node 1 failed.*node 1 broke on purpose"):
        run_node_processes(_broken, 2, timeout_s=60)
    with pytest.raises(TransportError, match=r"exited without a result \(exit codes \[3\]\)"):
        run_node_processes(_vanishes, 1, timeout_s=60)


@contextlib.contextmanager
def _node0_of_three(overlap: bool):
    """Node 0 of a 3-node AllGather (1 GPU a node, chunks of 64 B), a reusable host executor with 4 slots, its
    connections stood in for and its first run begun: completions are fed to ``_on_completion`` by hand."""
    from hoccl_runtime.net.executor import HostNodeExecutor

    plan = compile_plan(make_topology("h200x2", nodes=3, gpus_per_node=1), CollectiveSpec(kind="allgather",
                        size_bytes=3 * 512), CompileOptions(chunk_bytes=64, baselines=False))
    bufs = {0: (np.zeros(512, np.uint8), np.zeros(3 * 512, np.uint8))}
    transport = HostNodeExecutor.make_transport(plan, 0, open=True)
    try:
        ex = HostNodeExecutor(plan, 0, bufs, transport, slots=4, reuse=True, overlap=overlap)
        ex.conns = {1: None, 2: None}
        ex._mine[0] = (ex._plan_crc(), ex.plan)  # what _hello records; then both peers' plan notices match it
        ex._begin_run()
        yield ex
    finally:
        transport.close()


def _hellos(ex) -> None:
    """Nodes 1 and 2's plan notices for ``ex``'s run (its plan)."""
    from hoccl_runtime.net.executor import PLAN_HELLO
    from hoccl_runtime.net.transport.base import Completion

    for n in (1, 2):
        ex._on_completion(n, Completion("received", 1, PLAN_HELLO | ex._plan_crc(), 0, 0, 0))


@pytest.mark.usefixtures("whole_rings")
def test_forged_immediates_are_transport_errors_naming_node_and_plan():
    """A credit for a chunk that waits for none, data for a GPU or position the run does not receive, a chunk that
    arrives twice, or a credit from the wrong node: a TransportError naming the node, the plan and the value."""
    from hoccl_runtime.errors import TransportError
    from hoccl_runtime.net.executor import CREDIT
    from hoccl_runtime.net.transport.base import Completion

    # 3 nodes x 1 GPU, chunks of 64 B, 4 slots: node 0 sends 8 chunks to each of nodes 1 and 2 (two stages), so
    # its send positions 4.. wait for credits and 0..3 do not (at each receiver, the ring positions of node 0's
    # chunks are 0..7: the other sender's come after or before them)
    with _node0_of_three(overlap=False) as ex:  # reuse: every chunk through the rings
        plan = ex.plan
        held = Completion("received", 1, 0, 0, 0, 0)
        ex._on_completion(int(ex._run.inc[0].peer[0]), held)  # data before its node's plan notice: held back
        assert ex._run.receives_left == 16 and sum(map(len, ex._deferred.values())) == 1
        _hellos(ex)
        assert ex._backlog and not ex._deferred  # the notice matched: the held data goes back to be taken
        ex._backlog.clear()
        seq = ex._run.out[0]
        assert len(seq.stage) == 16 and list(seq.ring[:4]) == [0, 1, 2, 3]
        peer4 = int(seq.peer[4])  # the node that credits send position 4
        other = 3 - peer4
        first = int(ex._run.inc[0].peer[0])  # the node whose chunk is receive position 0
        assert ex._run.receives_left == 16
        ex._on_completion(first, Completion("received", 1, 0, 0, 0, 0))  # fine once
        assert ex._run.receives_left == 15
        cases = [(peer4, CREDIT | (5 << 24) | 4, "credited chunk 4 of local GPU 5"),    # no such sender
                 (peer4, CREDIT | 2, "credited chunk 2 of local GPU 0"),               # one of the ring's first S
                 (peer4, CREDIT | 99, "credited chunk 99"),                            # beyond the run's chunks
                 (other, CREDIT | 4, "credited chunk 4"),                              # from the wrong node
                 (first, (9 << 24) | 0, "wrote chunk 0 for local GPU 9"),              # not a GPU of this node
                 (first, 99, "wrote chunk 99 for local GPU 0.*no chunk of this run"),  # beyond the chunks due
                 (first, 0, "wrote chunk 0 for local GPU 0.*arrived twice"),           # a duplicate
                 (3 - first, 0, r"wrote chunk 0 for local GPU 0.*GPU \d sends that one")]  # from the wrong node
        for node, imm, text in cases:
            with pytest.raises(TransportError, match=rf"node 0, plan {plan.plan_id}: node {node} {text}"):
                ex._on_completion(node, Completion("received", 1, imm, 0, 0, 0))
        ex._on_completion(peer4, Completion("received", 1, CREDIT | 4, 0, 0, 0))  # the right credit is taken
        assert ex._run.credit[0][4] == 1


@pytest.mark.usefixtures("whole_rings")
def test_a_landed_chunk_credits_its_slot_whatever_arrived_before_it():
    """Chunks arrive out of ring order (each write takes a lane of its own), and a GPU lands them in ring order: a
    landing copy's credit leaves once that copy is through, not behind a chunk of another slot that arrived earlier
    but lands later. Held so, the credit waited for a copy that the launch order (net/order.py) does not put below the
    staging copy it frees: with one hardware queue a node, tests/runtime/test_hw_queues_cpu.py's Broadcast deadlocked
    (about 1 run in 20 under load; the fake CUDA's 20 s wait deadline then let stale bytes through)."""
    from hoccl_runtime.net.executor import CREDIT, HostNodeExecutor
    from hoccl_runtime.net.transport.base import Completion

    class Landing(HostNodeExecutor):  # landing copies that the test says are through
        def _land(self, vbar, slot, v, dst_off, n):
            self.landings.append([False])
            return self.landings[-1]

        def _done(self, token):
            return token is None or token[0]  # None: a staging copy (none here)

    class Conn:
        def __init__(self):
            self.imms = []

        def write(self, *args, imm=0, **kwargs):
            self.imms.append(imm)
            return len(self.imms)

    # 3 nodes x 1 GPU, chunks of 64 B, 4 slots: node 0 receives 16 chunks through its ring (reuse: every chunk)
    plan = compile_plan(make_topology("h200x2", nodes=3, gpus_per_node=1), CollectiveSpec(kind="allgather",
                        size_bytes=3 * 512), CompileOptions(chunk_bytes=64, baselines=False))
    bufs = {0: (np.zeros(512, np.uint8), np.zeros(3 * 512, np.uint8))}
    transport = HostNodeExecutor.make_transport(plan, 0, open=True)
    try:
        ex = Landing(plan, 0, bufs, transport, slots=4, reuse=True)
        ex.landings, ex.conns, ex._checked = [], {1: Conn(), 2: Conn()}, {1: 1, 2: 1}  # both plan notices matched
        ex._begin_run()
        seq = ex._run.inc[0]
        position = {int(ring): p for p, ring in enumerate(seq.ring)}  # ring position -> receive position
        arrived = [0, 2, 4, 1]  # ring positions; 4 (slot 0 again) came before 1
        for ring in arrived:
            p = position[ring]
            ex._on_completion(int(seq.peer[p]), Completion("received", 1, p, 0, 0, 0))
        for ring, landing in zip(arrived, ex.landings, strict=True):
            landing[0] = ring < 4  # the GPU landed ring positions 0, 1 and 2 (in ring order); 4 not yet
        ex._post_ready()
        credited = {(n, imm & 0xFFFFFF) for n, conn in ex.conns.items() for imm in conn.imms if imm & CREDIT}
        users = [ex._run.routes.ring_user(0, ring + 4) for ring in (0, 1, 2)]  # the chunks these three let in
        assert credited == {(ex._node_of(u), x) for u, x in users}
    finally:
        transport.close()


@pytest.mark.parametrize("stops", [0, 1])
def test_a_stopped_node_is_named_in_the_survivors_errors(stops):
    """A node connects, then stops (its transport closes) before the run: the other's error names it (the node, not
    a bare host:port), on the accepting side (node 0, which learns names from the hello) and on the connecting one
    (node 1, told by its executor)."""
    import threading

    from hoccl_runtime.errors import HocclTimeoutError, TransportError
    from hoccl_runtime.net.executor import HostNodeExecutor

    plan = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1), CollectiveSpec(kind="allgather",
                        size_bytes=2 * 4096), CompileOptions(chunk_bytes=1024, baselines=False))
    transports = [HostNodeExecutor.make_transport(plan, n, lanes=1, secret=b"job") for n in (0, 1)]
    addresses = {n: t.listen() for n, t in enumerate(transports)}
    execs = {n: HostNodeExecutor(plan, n, {n: (np.zeros(4096, np.uint8), np.zeros(8192, np.uint8))}, transports[n],
                                 timeout_s=5) for n in (0, 1)}
    threads = [threading.Thread(target=execs[n].connect, args=(addresses,)) for n in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    survivor = 1 - stops
    try:
        transports[stops].close()
        with pytest.raises((TransportError, HocclTimeoutError)) as err:
            execs[survivor].run()
        assert f"node{stops}" in str(err.value) or f"node {stops}" in str(err.value), err.value
    finally:
        transports[survivor].close()


def test_with_alternate_halves_a_credit_this_run_does_not_wait_for_is_the_next_runs():
    """With alternate halves (the default) a node may start its next run while this node still runs this one, and
    its credits carry no run: one that matches no credit this run waits for is kept for the next run and taken there;
    one that matches none there either is refused then, naming the node and the plan. (Until 2026-12-06 such a credit
    was refused at once: a 3-node AllGather of two runs in turn failed so under load in CI, test_hw_queues_cpu.py.)"""
    from hoccl_runtime.errors import TransportError
    from hoccl_runtime.net.executor import CREDIT
    from hoccl_runtime.net.transport.base import Completion

    with _node0_of_three(overlap=True) as ex:
        plan = ex.plan
        assert ex.halves and ex.span == 2  # two slots a run: send positions 2.. wait for credits
        _hellos(ex)
        ex._backlog.clear()
        seq = ex._run.out[0]
        peer = int(seq.peer[2])  # the node that credits send position 2
        ex._on_completion(peer, Completion("received", 1, CREDIT | 2, 0, 0, 0))  # this run's: taken
        assert ex._run.credit[0][2] == 1 and not ex._ahead
        early = Completion("received", 1, CREDIT | 2, 0, 0, 0)  # position 2 again: the node's next run's
        ex._on_completion(peer, early)
        assert ex._ahead == {peer: [early]} and ex._run.credit[0][2] == 1
        forged = Completion("received", 1, CREDIT | 99, 0, 0, 0)  # no position 99 in either run
        ex._on_completion(peer, forged)
        # the next run (the same plan): what was kept is taken, and the forged credit refused
        ex._runs += 1
        ex._mine[1] = (ex._plan_crc(), ex.plan)
        ex._begin_run()
        ex._take_ahead()
        assert ex._backlog == {peer: [early, forged]} and not ex._ahead
        ex._backlog.clear()
        _hellos(ex)  # the nodes' plan notices for this run
        assert ex._run.credit[0][2] == 0
        ex._on_completion(peer, early)
        assert ex._run.credit[0][2] == 1
        with pytest.raises(TransportError, match=rf"node 0, plan {plan.plan_id}: node {peer} credited chunk 99"):
            ex._on_completion(peer, forged)


def test_data_immediates_carry_the_ring_half_and_positions_keep_23_bits(monkeypatch):
    """A data write's immediate: local GPU << 24 | HALF | receive position (net/wire.py). A plan whose GPU would
    receive more network chunks in a run than 23 bits number is refused by name (credits' send positions keep 24)."""
    import hoccl_runtime.net.routes as routes
    from hoccl_runtime.errors import TransportError
    from hoccl_runtime.net.wire import CREDIT, HALF, POSITIONS, data_imm

    assert data_imm(5, 7, 0) == (5 << 24) | 7 and data_imm(5, 7, 1) == (5 << 24) | HALF | 7
    assert HALF == 1 << 23 and POSITIONS == HALF - 1 and not HALF & CREDIT and data_imm(125, POSITIONS, 1) < CREDIT
    plan = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1),
                        CollectiveSpec(kind="sendrecv", pairs=((0, 1, 10 * 1024),)),
                        CompileOptions(chunk_bytes=1024, baselines=False))
    routes.Routes(plan, False, [0, 1])  # 10 chunks: within any limit
    monkeypatch.setattr(routes, "POSITIONS", 9)
    with pytest.raises(TransportError, match=r"GPU 1 moves 10 network chunks in one run, more than an immediate can "
                                             r"number \(2\*\*23\)"):
        routes.Routes(plan, False, [0, 1])
