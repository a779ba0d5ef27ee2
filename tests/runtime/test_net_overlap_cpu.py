"""HOCCL_NET_OVERLAP (on by default since 2026-12-06), on the host executor: consecutive runs of a reusable network
executor on alternate halves of every ring (the GPU executor's path through the proxy process is in
test_netcomm_cpu.py). The bytes of many runs of mixed plans stay right whatever the nodes' skew; a node
runs ahead of a slow peer by one run (its next run's data waits in the peer's other half) but not by two."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, CompileOptions, compile_plan, make_topology
from hoccl_compiler.verify import replay


def _nodes(plans, nodes, slots, before_run=None, timeout_s=20, verbs=None):
    """``verbs``: the fake pyverbs module (tests/support/fake_pyverbs.py) to join the nodes over the verbs transport
    instead of TCP."""
    from threaded import failures, in_threads

    from hoccl_runtime.net.executor import HostNodeExecutor
    from hoccl_runtime.net.transport.verbs import VerbsTransport

    first = plans[0]
    L = first.topology.gpus_per_node
    transports = [HostNodeExecutor.make_transport(first, n, lanes=2, secret=b"overlap") if verbs is None else
                  VerbsTransport(pyverbs=verbs, session=first.plan_id, name=f"node{n}", qps=2, timeout_s=timeout_s)
                  for n in range(nodes)]

    def bufs(plan, n, run):
        return {r: (np.random.default_rng([r, run + 1, 7]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8),
                    np.full(plan.ranks.output_bytes[r], 0xA5, np.uint8)) for r in range(n * L, (n + 1) * L)}

    execs = [HostNodeExecutor(first, n, bufs(first, n, -1), transports[n], slots=slots, timeout_s=timeout_s,
                              reuse=True) for n in range(nodes)]
    assert all(ex.halves for ex in execs)
    addresses = {n: t.listen() for n, t in enumerate(transports)}
    results = {}

    def node(n):
        execs[n].connect(addresses)
        for run, plan in enumerate(plans):
            b = bufs(plan, n, run)
            if before_run is not None:
                before_run(n, run)
            execs[n].run(plan, b)
            results[(n, run)] = {r: out for r, (_, out) in b.items()}
        execs[n].leave()

    errors = failures(in_threads(nodes, node))
    for t in transports:
        t.close()
    assert not errors, errors
    for run, plan in enumerate(plans):
        inputs = [np.random.default_rng([r, run + 1, 7]).integers(0, 256, plan.ranks.input_bytes[r], dtype=np.uint8)
                  for r in range(plan.num_ranks)]
        want = replay(plan, inputs).outputs
        for r in range(plan.num_ranks):
            assert np.array_equal(results[(r // L, run)][r], want[r]), f"run {run} rank {r}"
    return results


def _landings_late(monkeypatch, delay_of) -> None:
    """The host executor's landings done ``delay_of(executor)`` seconds after their copy (None: at once)."""
    import hoccl_runtime.net.host as host

    real_land, real_done = host.HostNodeExecutor._land, host.HostNodeExecutor._done

    def land(self, *args):
        real_land(self, *args)
        delay = delay_of(self)
        return None if delay is None else time.monotonic() + delay

    def done(self, token):
        return time.monotonic() >= token if isinstance(token, float) else real_done(self, token)

    monkeypatch.setattr(host.HostNodeExecutor, "_land", land)
    monkeypatch.setattr(host.HostNodeExecutor, "_done", done)


@pytest.mark.parametrize("slots", [2, 4, 8])
def test_many_runs_of_mixed_plans_with_skew_move_the_right_bytes(monkeypatch, slots):
    monkeypatch.setenv("HOCCL_NET_OVERLAP", "1")
    topo = make_topology("h200x2", nodes=3, gpus_per_node=1)
    opts = CompileOptions(chunk_bytes=256, baselines=False, multicast=False)
    kinds = [CollectiveSpec(kind="allgather", size_bytes=3 * 1000),
             CollectiveSpec(kind="sendrecv", pairs=((0, 1, 2000),)),
             CollectiveSpec(kind="sendrecv", pairs=((1, 2, 700), (2, 0, 1500))),
             CollectiveSpec(kind="alltoall", size_bytes=3 * 999),
             CollectiveSpec(kind="sendrecv", pairs=((2, 1, 300),))]
    plans = [compile_plan(topo, kinds[i % len(kinds)], opts) for i in range(20)]
    rng = np.random.default_rng(slots)
    delays = rng.uniform(0, 0.01, size=(3, len(plans)))
    _nodes(plans, 3, slots, before_run=lambda n, run: time.sleep(delays[n, run]))


@pytest.mark.parametrize("nodes,L", [(2, 1), (3, 2)])
def test_runs_on_alternate_halves_over_the_verbs_transport(monkeypatch, nodes, L):
    """Over RDMA a receiver is not told where a write landed (a write with immediate completes with its immediate
    alone), so a data write says in its immediate which run's half it fills. Until 2026-12-07 the host executor
    read the half from the completion's offset, which the verbs transport leaves at -1: every chunk of the first run
    was taken for the next run's, and the reusable executors (the communicators') stalled on their first call with
    HOCCL_NET_OVERLAP on, its default (found by examples/measure_verbs_host_costs.py)."""
    import fake_pyverbs

    monkeypatch.setenv("HOCCL_NET_OVERLAP", "1")
    pv = fake_pyverbs.install(monkeypatch)
    topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L)
    opts = CompileOptions(chunk_bytes=256, baselines=False, multicast=False)
    G = nodes * L
    kinds = [CollectiveSpec(kind="allgather", size_bytes=G * 1000), CollectiveSpec(kind="alltoall", size_bytes=G * 999),
             CollectiveSpec(kind="sendrecv", pairs=((0, G - 1, 2000),))]
    plans = [compile_plan(topo, kinds[i % len(kinds)], opts) for i in range(9)]
    delays = np.random.default_rng(nodes).uniform(0, 0.01, size=(nodes, len(plans)))
    _nodes(plans, nodes, 4, before_run=lambda n, run: time.sleep(delays[n, run]), timeout_s=10, verbs=pv)


def test_a_node_runs_one_run_ahead_of_a_slow_peer_and_no_further(monkeypatch):
    """Node 0 only sends (runs 0, 1, 2 to node 1): its runs 0 and 1 end while node 1 has not begun any (each fits a
    half), its run 2 waits until node 1 is through run 0 (the last run in that half)."""
    monkeypatch.setenv("HOCCL_NET_OVERLAP", "1")
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    opts = CompileOptions(chunk_bytes=512, baselines=False)
    plans = [compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, 1000 + 7 * i),)), opts)
             for i in range(3)]
    ended = [threading.Event() for _ in plans]
    began = threading.Event()
    seen = {}

    def before(n, run):
        if n == 1 and run == 0:
            seen["ahead"] = ended[1].wait(10)  # node 0's runs 0 and 1 end before node 1 begins
            seen["not_two"] = not ended[2].is_set()
            began.set()
        if n == 0 and run > 0:
            ended[run - 1].set()

    import hoccl_runtime.net.host as host

    real = host.HostNodeExecutor.run

    def run(self, plan=None, buffers=None):
        real(self, plan, buffers)
        if self.node == 0 and self._runs == 3:
            ended[2].set()

    monkeypatch.setattr(host.HostNodeExecutor, "run", run)
    _nodes(plans, 2, slots=4, before_run=before)
    assert seen == {"ahead": True, "not_two": True}


def test_the_setting_is_read_by_reusable_executors_only(monkeypatch):
    from hoccl_runtime.net.executor import HostNodeExecutor
    from hoccl_runtime.net.gated import GatedNodeExecutor

    monkeypatch.setenv("HOCCL_NET_OVERLAP", "1")
    plan = compile_plan(make_topology("h200x2", nodes=2, gpus_per_node=1),
                        CollectiveSpec(kind="sendrecv", pairs=((0, 1, 1000),)), CompileOptions(baselines=False))
    bufs = {0: (np.zeros(1000, np.uint8), np.zeros(0, np.uint8))}
    transport = HostNodeExecutor.make_transport(plan, 0, open=True)
    try:
        ex = GatedNodeExecutor(plan, 0, bufs, transport, slots=4, reuse=True)
        assert ex.halves and ex.span == 2
        assert not HostNodeExecutor(plan, 0, bufs, transport, slots=4).halves  # one run: nothing to overlap
    finally:
        transport.close()


def test_a_node_still_in_its_run_takes_a_peer_s_next_run_credit_as_that_run_s(monkeypatch):
    """3 nodes of an AllGather, two runs in turn, node 2's last landing of run 0 held back 0.4 s: nodes 0 and 1 are
    through run 0 and into run 1 meanwhile, and node 1, landing node 0's run-1 chunks, credits node 2's run-1 sends
    while node 2 still waits in run 0. Node 2 keeps those credits for its run 1 (until 2026-12-06 it refused them as
    forged, and nodes 0 and 1 then timed out: CI's test_hw_queues_cpu.py under load)."""
    import hoccl_runtime.net.host as host
    from hoccl_runtime.net.wire import CREDIT

    monkeypatch.setenv("HOCCL_NET_OVERLAP", "1")
    topo = make_topology("h200x2", nodes=3, gpus_per_node=1)
    opts = CompileOptions(chunk_bytes=256, baselines=False)
    plans = [compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=3 * size), opts) for size in (3000, 2000)]
    held = {"kept": 0}
    real_take = host.HostNodeExecutor._take_ahead

    def take(self):
        if self.node == 2 and self._runs == 1:
            held["kept"] = sum(1 for early in self._ahead.values() for c in early if c.imm & CREDIT)
        real_take(self)

    # node 2's last landing of run 0 done 0.4 s after its copy
    _landings_late(monkeypatch, lambda ex: 0.4 if ex.node == 2 and ex._runs == 0 and ex._run.receives_left == 0
                   else None)
    monkeypatch.setattr(host.HostNodeExecutor, "_take_ahead", take)
    _nodes(plans, 3, slots=4, timeout_s=10)
    assert held["kept"] > 0  # node 2 kept run-1 credits that came in run 0, and took them in run 1


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("nodes,slots,L", [(3, 4, 1), (4, 2, 1), (4, 6, 1), (3, 4, 2)])
def test_runs_of_mixed_plans_with_landings_late_at_random_move_the_right_bytes(monkeypatch, seed, nodes, slots, L):
    """12 runs of mixed plans on 3-4 nodes, each node late into each run, and 30% of the landings done up to 20 ms
    after their copy: the bytes of every run right, no hang. (Before next-run credits were kept, 38 of 100 such cases
    failed, 2026-12-06: a node still in a run took a peer's next-run credit as forged.)"""
    import random

    monkeypatch.setenv("HOCCL_NET_OVERLAP", "1")
    topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L)
    opts = CompileOptions(chunk_bytes=256, baselines=False, multicast=False)  # the host executor's plans
    rng = random.Random(seed * 100 + nodes * 10 + L)
    kinds = [CollectiveSpec(kind="allgather", size_bytes=nodes * L * 1000),
             CollectiveSpec(kind="alltoall", size_bytes=nodes * L * 999),
             CollectiveSpec(kind="sendrecv", pairs=((0, 1, 2000),)),
             CollectiveSpec(kind="sendrecv", pairs=((1, 2, 700), (2, 0, 1500)))]
    plans = [compile_plan(topo, rng.choice(kinds), opts) for _ in range(12)]
    lock = threading.Lock()

    def late(ex):
        with lock:
            d = rng.random()
        return 0.02 * d if d < 0.3 else None

    _landings_late(monkeypatch, late)
    delays = np.random.default_rng(seed).uniform(0, 0.01, size=(nodes, len(plans)))
    _nodes(plans, nodes, slots, before_run=lambda n, run: time.sleep(delays[n, run]), timeout_s=15)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("nodes,L,slots", [(3, 1, 4), (3, 2, 4), (4, 1, 2)])
def test_the_gpu_executor_with_copies_late_at_random_moves_the_right_bytes(monkeypatch, seed, nodes, L, slots):
    """The GPU executor on the fake CUDA (async streams), 6 runs of AllGather, All-to-All and Broadcast (multicast
    where 2 GPUs a node) on 3-4 nodes, one stream step in five up to 20 ms late: the bytes of every run right, no hang.
    (Before next-run credits were kept, 5 of these 18 cases failed, 2026-12-06.)"""
    import random

    import fake_cuda
    from threaded import check_fake_gpu_runs

    monkeypatch.setenv("HOCCL_NET_OVERLAP", "1")
    fake_cuda.install(monkeypatch, async_streams=True)
    rng = random.Random(seed * 100 + nodes * 10 + L)
    lock = threading.Lock()
    real_issue = fake_cuda._issue

    def issue(step, stream=None):
        with lock:
            d = rng.random()
        if d < 0.2:
            def late(step=step, d=d):
                time.sleep(0.02 * d)
                step()
            return real_issue(late, stream)
        return real_issue(step, stream)

    monkeypatch.setattr(fake_cuda, "_issue", issue)
    topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L)
    G = topo.num_gpus
    plans = []
    for _ in range(6):
        kind = rng.choice(["allgather", "alltoall", "broadcast"])
        size = rng.choice([(1 << 16) + 5, (3 << 16) + 7, 1000])
        plans.append(compile_plan(topo, CollectiveSpec(kind=kind, size_bytes=G * size,
                                                       **({"root": 1} if kind == "broadcast" else {})),
                                  CompileOptions(chunk_bytes=1 << 16, baselines=False)))
    check_fake_gpu_runs(plans, nodes, np.random.default_rng(seed), timeout_s=15, slots=slots)
