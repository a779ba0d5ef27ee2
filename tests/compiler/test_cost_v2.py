"""The cost model v2 (hoccl_compiler.cost.stage_times_v2 / plan_time_v2) against the chunk-level simulation, and
the scheduler's choices made with it: chunk size, native spread, the last NVLink stage, stages worth a barrier."""

from __future__ import annotations

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.cost import (
    StageChain,
    net_flows,
    overlapped_s,
    pair_edges,
    plan_time_v2,
    stage_times_v2,
    staging_fill_s,
)
from hoccl_compiler.ir import NATIVE, RDMA, CompileOptions
from hoccl_compiler.passes.chunks import CHUNK_CANDIDATES, chunk_order
from hoccl_compiler.passes.stages import spread_over_slack
from hoccl_compiler.pipeline import compile_state
from hoccl_compiler.simulate import simulate

CASES = [  # (preset, nodes, gpus per node, dma queues, collective, bytes, chunk)
    ("dgx-h100", 1, 8, 1, "allgather", 1 << 30, 1 << 40),
    ("dgx-h100", 1, 8, 1, "alltoall", 1 << 30, 4 << 20),
    ("dgx-h100", 1, 8, 1, "alltoall", 1 << 20, 1 << 40),
    ("dgx-h100", 2, 8, 1, "alltoall", 1 << 30, 4 << 20),
    ("dgx-h100", 2, 8, 1, "alltoall", 64 << 20, 1 << 40),
    ("paper-h800", 3, 4, 2, "alltoall", 192 << 20, 2 << 20),
    ("h200x2", 1, 2, 1, "alltoall", 1 << 30, 1 << 40),
    ("h200x2", 2, 2, 1, "alltoall", 1 << 30, 8 << 20),
    ("paper-h800", 2, 4, 1, "broadcast", 64 << 20, 1 << 20),
    ("paper-h800", 1, 8, 1, "allgather", 1 << 30, None),  # the default chunk (auto): issue 35's 1x8, 2x8 and 4x8
    ("paper-h800", 1, 8, 1, "alltoall", 1 << 30, None),   # AllGather (multicast) and All-to-All, the stages run on
    ("paper-h800", 2, 8, 1, "allgather", 1 << 30, None),  # without a barrier (2x8 AllGather: v2 was 5.9% above the
    ("paper-h800", 2, 8, 1, "alltoall", 1 << 30, None),   # simulation while its chain delayed a queue's own copies
    ("paper-h800", 4, 8, 1, "allgather", 1 << 30, None),  # behind the block it forwards)
    ("paper-h800", 4, 8, 1, "alltoall", 1 << 30, None),
    # parts of 7.45 chunks: in the order of passes/chunks.chunk_order alone the simulated queues stalled on chunks
    # not there yet (v2 8% low); list-scheduled ready first (passes/chunks.ready_first), within 5%
    ("dgx-h100", 2, 8, 1, "broadcast", 10**9, 16 << 20),
    # Broadcasts down two trees of nodes (multicast.node_trees): a node takes one half of the parts early and the
    # other late; with one release per queue v2 was 6-15% above the simulation (StageChain.add_pieces)
    ("paper-h800", 6, 4, 1, "broadcast", 256 << 20, None),
    ("dgx-h100", 5, 8, 1, "broadcast", 512 << 20, None),
    # the list schedule longest way first, and v2 ending a piece that waits on nothing with its turn in the chunk order
    # (with the queue's end v2 was 5-23% above the simulation of that order)
    ("paper-h800", 2, 8, 1, "broadcast", 1 << 30, None),
    ("dgx-h100", 4, 8, 1, "broadcast", 64 << 20, None),
    ("paper-h800", 8, 8, 1, "broadcast", 64 << 20, None),
    # two DMA queues a GPU (passes/chunks.assign_queues): dealt copy by copy in destination order, v2 was 12-23%
    # below the simulation of these AllGathers and the plans 1.4-1.6x slower than on one queue
    ("dgx-h100", 2, 8, 2, "allgather", 1 << 30, None),
    ("dgx-h100", 4, 8, 2, "allgather", 1 << 30, None),
    ("paper-h800", 2, 8, 2, "allgather", 1 << 30, None),
    # a block forwarded whole (one chunk) to 7 GPUs over three DMA queues: the queues share the GPU's NVLink out-port
    # (StageChain.add_pieces' ports); v2 charged each queue the port's full bandwidth, 11% below the simulation
    ("dgx-h100", 2, 8, 3, "allgather", 1 << 30, 64 << 20),
    ("paper-h800", 4, 8, 2, "allgather", 1 << 30, 32 << 20),
]


def _zipf_cases():
    rng = np.random.default_rng(7)
    for nodes, gpn, q, chunk in ((1, 8, 1, 4 << 20), (2, 4, 2, 1 << 20), (3, 4, 1, 1 << 40), (2, 8, 2, None)):
        G = nodes * gpn
        m = np.minimum(rng.zipf(1.3, (G, G)) * (1 << 20), 1 << 30).astype(np.int64)
        np.fill_diagonal(m, 0)
        yield make_topology("paper-h800", nodes=nodes, gpus_per_node=gpn, dma_queues=q), \
            CollectiveSpec(kind="alltoallv", matrix=tuple(map(tuple, m.tolist()))), chunk


def _all_cases():
    for preset, nodes, gpn, q, kind, size, chunk in CASES:
        yield make_topology(preset, nodes=nodes, gpus_per_node=gpn, dma_queues=q), \
            CollectiveSpec(kind=kind, size_bytes=size, root=0 if kind == "broadcast" else None,
                           in_place=kind == "broadcast"), chunk
    yield from _zipf_cases()


@pytest.mark.parametrize("case", list(_all_cases()), ids=lambda c: f"{c[0].nodes}x{c[0].gpus_per_node}-{c[1].kind}")
def test_v2_agrees_with_the_chunk_level_simulation_within_5_percent(case):
    """Within 5% for every uniform collective, the stages overlapping as the runtimes run them. Skewed All-to-Allv
    across nodes: within 16%, v2 the lower. There the simulation's overlapping stages share ports (a GPU's in-port
    taking one stage's tail and the next one's head from two queues at once, max-min fair), which delays the chunks
    that later pieces wait for; v2 counts each port's and queue's busy time and the paths' chain, not that sharing
    (and the network executor's receive rings hand a GPU's slots from one stage's flow to the next one in turn)."""
    topo, spec, chunk = case
    plan = compile_plan(topo, spec, CompileOptions(chunk_bytes=chunk, baselines=False))
    sim = simulate(plan)
    assert plan.report.cost_model == "v2"
    skewed = spec.kind == "alltoallv" and topo.nodes > 1
    assert plan.report.predicted_time_s == pytest.approx(sim.total_s, rel=0.16 if skewed else 0.05)
    if skewed:
        assert plan.report.predicted_time_s <= sim.total_s * 1.05
    # each stage alone: within 10% where the traffic is uniform and unicast. A skewed plan's small stages (5% of
    # its time) and a multicast plan's stages (its forwarded copies reach the in-ports out of step with the direct
    # ones, which the simulation shares max-min fairly; v2 counts the queues' positions) differ by up to 20-30%
    # alone; their sums, as the runtimes run them, are the totals above.
    for stage, simulated in zip(plan.stages, sim.stage_s, strict=True):
        assert stage.time_s == pytest.approx(simulated, rel=0.10 if not skewed and not plan.options.multicast
                                             else 0.35)
    assert plan.report.predicted_time_s >= plan.report.lower_bound_s


def _stage_v2(plan, order_of):
    """v2 time of a one-stage plan's stage with its chunk order replaced by ``order_of(transfers, chunks)``."""
    topo, (stage,) = plan.topology, plan.stages
    tr = stage.transfers
    arr = {k: np.asarray(getattr(tr, k), dtype=np.int64) for k in ("role", "src", "dst", "bytes", "queue", "after")}
    order = np.asarray(order_of(tr, stage.chunks), dtype=np.int64)
    return float(stage_times_v2(topo, plan.options.chunk_bytes, np.zeros(len(tr.flow), np.int64), arr["role"],
                                arr["src"], arr["dst"], arr["bytes"], arr["queue"], arr["after"], order, 1).time_s[0])


@pytest.mark.parametrize("kind", ["allgather", "alltoall"])
def test_v2_charges_a_destination_hot_spot_as_the_simulation_does(kind):
    """One dgx-h100 node, one chunk per transfer: every queue starting on GPU 0 (the old ascending order) costs
    about 4x the rotated order in the simulation, and more in v2, which charges each queue the co-senders at the
    same position of theirs as if the queues kept in step (they drift apart as the crowded ports drain; v2 is
    pessimistic for orders with hot spots, and agrees with the simulation for the rotated order)."""
    plan = compile_plan(make_topology("dgx-h100", nodes=1), CollectiveSpec(kind=kind, size_bytes=1 << 30),
                        CompileOptions(chunk_bytes=1 << 40, baselines=False))
    rotated = _stage_v2(plan, lambda tr, chunks: chunks)
    ascending = _stage_v2(plan, lambda tr, chunks: sorted(chunks, key=lambda i: (tr.dst[i], i)))
    stage = plan.stages[0]
    old = plan.model_copy(update={"stages": [stage.model_copy(update={
        "chunks": sorted(stage.chunks, key=lambda i: (stage.transfers.dst[i], i))})]})
    simulated = simulate(old).stage_s[0]
    assert simulated >= 3.5 * rotated
    assert ascending >= simulated
    assert rotated == pytest.approx(simulate(plan).stage_s[0], rel=0.01)


def test_the_chosen_chunk_is_no_worse_than_any_candidate():
    """--chunk auto: within one node one chunk per transfer (nothing to pipeline, a start per chunk); across nodes a
    size that pipelines the forwarding, and no candidate has a lower v2 time beyond the 1% tolerance."""
    one = compile_plan(make_topology("dgx-h100", nodes=1), CollectiveSpec(kind="alltoall", size_bytes=1 << 30),
                       CompileOptions(chunk_bytes=None, baselines=False))
    assert one.options.chunk_bytes == max(max(st.transfers.bytes) for st in one.stages)
    state = compile_state(make_topology("paper-h800", nodes=2), CollectiveSpec(kind="alltoall", size_bytes=1 << 30),
                          CompileOptions(chunk_bytes=None, baselines=False))
    ch, chosen = state.chunks, state.chunks.chunk_bytes
    assert chosen < int(ch.tr_bytes.max())

    def v2(c):  # the plan's time: its stages overlapping as the runtime runs them, the staging's fill
        topo = state.topology
        order = chunk_order(topo, c, ch.tr_stage, ch.tr_role, ch.tr_src, ch.tr_dst, ch.tr_bytes)
        sc = stage_times_v2(topo, c, ch.tr_stage, ch.tr_role, ch.tr_src, ch.tr_dst, ch.tr_bytes, ch.tr_queue,
                            ch.tr_after, order, state.schedule.num_stages)
        return plan_time_v2(topo, sc.time_s, True, fill_s=staging_fill_s(topo, c, ch.tr_role, ch.tr_bytes),
                            flows=net_flows(topo, ch.tr_role, ch.tr_src, ch.tr_dst),
                            overlap_s=overlapped_s(sc.port_busy_s, sc.queue_busy_s, sc.pipeline_s,
                                                   sc.chain.time_s()))[0]

    best = v2(chosen)
    for c in CHUNK_CANDIDATES:
        if c < int(ch.tr_bytes.max()):
            assert best <= v2(c) * 1.01 + 1e-12, c


def test_spread_over_slack():
    room = np.array([100.0, 300.0, 0.0, 600.0])
    assert spread_over_slack(500, room, 10).tolist() == [50, 150, 0, 300]  # the same fraction of every room
    assert spread_over_slack(2000, room, 10).tolist() == [100, 300, 0, 600]  # all the room, no more
    got = spread_over_slack(500, room, 120)  # 50 is below a piece: its share goes to the roomiest stages
    assert got.sum() == 500 and got[0] == 0 and all(got <= room)
    assert spread_over_slack(0, room, 10).tolist() == [0, 0, 0, 0]


def test_native_traffic_is_spread_over_the_stages():
    """2 nodes x 8 All-to-All: the native NVLink part rides in every RDMA stage's slack, each loaded alike, where it
    used to fill stage 0 to the full and leave the later ones idle."""
    state = compile_state(make_topology("paper-h800", nodes=2), CollectiveSpec(kind="alltoall", size_bytes=1 << 30),
                          CompileOptions(chunk_bytes=4 << 20, baselines=False))
    ch = state.chunks
    native = ch.tr_role == NATIVE
    per_stage = np.bincount(ch.tr_stage[native], weights=ch.tr_bytes[native], minlength=state.schedule.num_stages)
    assert per_stage.min() > 0 and per_stage.max() <= 1.01 * per_stage.min()
    assert state.plan.report.breakdown_s["ports"] == pytest.approx(state.plan.report.lower_bound_s)


@pytest.mark.parametrize("sync_us,joins", [(0.0, False), (1e6, True)])
def test_the_last_nvlink_stage_joins_the_last_rdma_stage_when_its_barrier_costs_more(sync_us, joins):
    """Slow NVLink (native traffic overflows the RDMA stages' slack): a barrier that costs nothing keeps the rest
    in an NVLink stage of its own; a costly one moves it into the last RDMA stage."""
    base = make_topology("paper-h800", nodes=2, gpus_per_node=4, nvlink_gbps=60.0)
    topo = base.model_copy(update={"costs": base.costs.model_copy(update={"stage_sync_us": sync_us})})
    plan = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=64 << 20),
                        CompileOptions(chunk_bytes=1 << 20, baselines=False))
    last = plan.stages[-1].transfers
    has_rdma = RDMA in last.role
    assert has_rdma == joins
    assert len(plan.stages) == plan.report.rdma_stages + (0 if joins else 1)


def test_stages_pay_for_their_network_transfers():
    """Skewed All-to-Allv: with free network transfers (and no barrier) the default keeps the time-optimal peel;
    with the measured per-transfer cost it sends the tail whole in fewer stages, so fewer transfers, and predicts
    less time than the peel."""
    from workloads import zipf_matrix

    spec = CollectiveSpec(kind="alltoallv", matrix=tuple(map(tuple, zipf_matrix(32, 1 << 24, seed=3).tolist())))
    measured = make_topology("paper-h800", nodes=4)
    assert measured.costs.stage_sync_us == 0.0 and measured.costs.net_flow_us > 0
    free = _with_costs(measured, net_flow_us=0.0, net_node_flow_us=0.0)
    peel = compile_plan(measured, spec, CompileOptions(max_extra_time=0.0, baselines=False))
    assert len(compile_plan(free, spec, CompileOptions(baselines=False)).stages) == len(peel.stages)
    auto = compile_plan(measured, spec, CompileOptions(baselines=False))
    assert len(auto.stages) < len(peel.stages)
    assert auto.report.predicted_time_s < peel.report.predicted_time_s


def _with_costs(topo, **costs):
    return topo.model_copy(update={"costs": topo.costs.model_copy(update=costs)})


def test_nvlink_both_ways_at_once_costs_the_duplex_factor_in_v2_and_the_simulation():
    topo = make_topology("h200x2")
    per_way = 512 << 20  # AllGather of 1 GiB on 2 GPUs: each sends 512 MiB to the other while receiving as much
    both = compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=1 << 30),
                        CompileOptions(chunk_bytes=1 << 40, baselines=False))
    one = compile_plan(topo, CollectiveSpec(kind="sendrecv", pairs=((0, 1, per_way),)),
                       CompileOptions(chunk_bytes=1 << 40, baselines=False))
    d = topo.costs.nvlink_duplex
    assert d == pytest.approx(1.026)
    start = topo.costs.dma_start_us * 1e-6
    assert one.stages[0].time_s == pytest.approx(start + per_way / (topo.nvlink_gbps * 1e9), rel=1e-6)
    assert both.stages[0].time_s == pytest.approx(start + d * per_way / (topo.nvlink_gbps * 1e9), rel=1e-6)
    assert simulate(both).stage_s[0] == pytest.approx(both.stages[0].time_s, rel=1e-6)
    plain = compile_plan(_with_costs(topo, nvlink_duplex=1.0), CollectiveSpec(kind="allgather", size_bytes=1 << 30),
                         CompileOptions(chunk_bytes=1 << 40, baselines=False))
    assert plain.stages[0].time_s == pytest.approx(one.stages[0].time_s, rel=1e-6)
    assert both.report.lower_bound_s == pytest.approx(plain.report.lower_bound_s)  # the port model's bound stays


def test_a_network_call_pays_the_host_staging_fill_and_drain_once():
    topo = make_topology("h200x2", nodes=2, gpus_per_node=1)
    none = _with_costs(topo, net_staging_gbps=0.0)
    for size, chunk in ((2 << 20, 2 << 20), (64 << 20, 8 << 20)):
        spec = CollectiveSpec(kind="sendrecv", pairs=((0, 1, size),))
        opts = CompileOptions(chunk_bytes=chunk, baselines=False)
        staged, direct = compile_plan(topo, spec, opts), compile_plan(none, spec, opts)
        fill = 2 * chunk / (topo.costs.net_staging_gbps * 1e9)  # the first chunk in, the last one out
        assert staged.report.predicted_time_s - direct.report.predicted_time_s == pytest.approx(fill, rel=1e-6)
        assert simulate(staged).total_s - simulate(direct).total_s == pytest.approx(fill, rel=1e-6)
    within = compile_plan(make_topology("h200x2"), CollectiveSpec(kind="alltoall", size_bytes=64 << 20))
    assert within.report.breakdown_s["call_s"] == pytest.approx(topo.costs.call_us * 1e-6)  # one node: no staging


def test_net_flows_counts_the_busiest_gpus_and_nodes_network_transfers():
    from hoccl_compiler.cost import net_flows

    for nodes, L in ((2, 1), (5, 1), (2, 2), (2, 4), (3, 2)):
        topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L)
        plan = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=(64 << 10) * topo.num_gpus ** 2),
                            CompileOptions(chunk_bytes=8 << 20, max_extra_time=0.0, baselines=False))
        cols = [np.concatenate([np.asarray(getattr(s.transfers, c)) for s in plan.stages]) for c in ("role", "src",
                                                                                                      "dst")]
        # each GPU's peer carries one network transfer to every GPU of every other node: L per remote node
        assert net_flows(topo, *cols) == (L * (nodes - 1), L * L * (nodes - 1))
    one = make_topology("h200x2")
    assert net_flows(one, np.array([NATIVE]), np.array([0]), np.array([1])) == (0, 0)


@pytest.mark.parametrize("nodes,L", [(4, 1), (2, 2), (3, 2), (2, 4)])
def test_network_transfers_cost_the_busier_of_a_gpus_chain_and_a_nodes_thread(nodes, L):
    """v2 charges the more of net_flow_us per further transfer of the busiest GPU and net_node_flow_us per further
    transfer of the busiest node (measured, session 19: nodes of several GPUs pay the node's driving thread, which
    the costs per GPU do not explain); the simulation charges the same."""
    topo = make_topology("h200x2", nodes=nodes, gpus_per_node=L)
    c = topo.costs
    plan = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=(64 << 10) * topo.num_gpus ** 2),
                        CompileOptions(chunk_bytes=8 << 20, max_extra_time=0.0, baselines=False))
    gpu, node = L * (nodes - 1), L * L * (nodes - 1)
    want = max(c.net_flow_us * (gpu - 1), c.net_node_flow_us * (node - 1)) * 1e-6
    assert plan.report.breakdown_s["net_flows_s"] == pytest.approx(want)
    assert (want == c.net_flow_us * (gpu - 1) * 1e-6) == (L == 1)  # one GPU: its chain; several: the thread
    free_node = compile_plan(_with_costs(topo, net_node_flow_us=0.0), plan.collective,
                             CompileOptions(chunk_bytes=8 << 20, max_extra_time=0.0, baselines=False))
    assert free_node.report.breakdown_s["net_flows_s"] == pytest.approx(c.net_flow_us * (gpu - 1) * 1e-6)
    assert simulate(plan).total_s == pytest.approx(plan.report.predicted_time_s, rel=0.05)


def test_network_transfers_cost_the_same_staged_or_merged_into_one_stage():
    """The network path's host cost is per transfer, not per stage (measured: an All-to-All of N - 1 stages and the
    same merged into one ran alike, session 18): v2 and the simulation charge net_flow_us per further transfer
    of the busiest GPU (one GPU per node), no barrier, and the everything-at-once baseline pays the same."""
    from hoccl_compiler.schema import Stage, TransferTable

    N = 4
    topo = make_topology("h200x2", nodes=N, gpus_per_node=1)
    c = topo.costs
    staged = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=(64 << 10) * N * N),
                          CompileOptions(chunk_bytes=8 << 20, max_extra_time=0.0))
    assert len(staged.stages) == N - 1 and c.stage_sync_us == 0.0
    parts = staged.report.breakdown_s
    assert parts["net_flows_s"] == pytest.approx((N - 2) * c.net_flow_us * 1e-6)
    assert parts["stage_sync_s"] == 0.0
    assert staged.report.baselines.everything_at_once_s >= c.net_call_us * 1e-6 + parts["net_flows_s"]
    cols = {name: [] for name in TransferTable.model_fields}
    chunks = []
    for st in staged.stages:
        base = len(cols["flow"])
        for name in TransferTable.model_fields:
            vals = list(getattr(st.transfers, name))
            cols[name].extend([v + base if v >= 0 else v for v in vals] if name == "after" else vals)
        chunks.extend(i + base for i in st.chunks)
    merged = staged.model_copy(update={"stages": [Stage(index=0, time_s=0.0, transfers=TransferTable(**cols),
                                                        chunks=chunks)]})
    a, b = simulate(staged).total_s, simulate(merged).total_s
    assert a == pytest.approx(b, rel=0.02)  # only the device part differs: 64 KiB flows
    assert a == pytest.approx(staged.report.predicted_time_s, rel=0.05)


def test_nic_incast_loss_shows_what_the_stages_are_for():
    """costs.nic_incast_loss (0 by default: not measured): with several GPUs writing into one NIC at once, everything
    at once pays it and the stages (one flow per NIC each) do not; the simulation agrees with v2 on the plan."""
    topo = make_topology("paper-h800", nodes=4, gpus_per_node=2)
    device_only = {"net_call_us": 0.0, "net_flow_us": 0.0, "net_node_flow_us": 0.0, "net_staging_gbps": 0.0}
    ratios = {}
    for loss in (0.0, 0.15):
        t = topo.model_copy(update={"costs": topo.costs.model_copy(update={**device_only, "nic_incast_loss": loss})})
        plan = compile_plan(t, CollectiveSpec(kind="alltoall", size_bytes=256 << 20), CompileOptions())
        rep = plan.report
        ratios[loss] = (rep.ratio, rep.baselines.everything_at_once_s / rep.lower_bound_s)
        assert rep.predicted_time_s == pytest.approx(simulate(plan).total_s, rel=0.05)
    assert ratios[0.15][0] == pytest.approx(ratios[0.0][0], rel=1e-9)  # the stages: one sender per NIC each
    assert ratios[0.0][0] < 1.01
    assert ratios[0.0][1] < 1.01 and ratios[0.15][1] > 1.5  # at once: 7 GPUs into each NIC, 1 + 0.15 x 6 slower


def test_stage_chain_delays_only_the_work_that_waits_on_a_path():
    """A queue that forwards a block it receives and copies its own block too (a multicast AllGather's GPU) ends at
    its busy time where the block arrives in time, and after the block's last chunk plus the forwarded copies' last
    chunks where it arrives late; several waiting pieces on one queue add up (one after another on the queue)."""
    up, down = np.array([0]), np.array([1])

    def end_of(up_busy: float, waiting: list[tuple[float, float]]) -> float:
        chain = StageChain(2, hops=2)
        n = len(waiting)
        edges = pair_edges(np.repeat(up, n), np.repeat(down, n), np.full(n, 1.0),
                           np.array([w[0] for w in waiting]), np.array([w[1] for w in waiting]))
        chain.add(np.array([up_busy, 20.0]), *edges)
        return float(chain.end[1])

    assert end_of(10.0, [(0.5, 5.0)]) == 20.0           # in time: its own copies run while the path fills
    assert end_of(30.0, [(0.5, 5.0)]) == 30.5           # late: after the block's last chunk, its own last chunk
    assert end_of(30.0, [(0.5, 5.0)] * 3) == 31.5       # three forwarded copies of it: three last chunks
    assert end_of(2.0, [(0.5, 9.0)] * 3) == 1.0 + 27.0  # the three start after the first chunk and take 27
    u, d, f, la, wh = pair_edges(np.array([0, 0, 2]), np.array([1, 1, 1]), np.array([1.0, 3.0, 2.0]),
                                 np.array([0.5, 0.5, 1.0]), np.array([4.0, 5.0, 6.0]))
    assert (u.tolist(), d.tolist(), f.tolist(), la.tolist(), wh.tolist()) == \
        ([0, 2], [1, 1], [3.0, 2.0], [1.0, 1.0], [9.0, 6.0])
    # round a ring: the pieces wait on different upstream pieces, each follows its own last chunk (the most of
    # them); pieces forwarded from one upstream piece follow its last chunk one after another (their sum)
    ring = pair_edges(np.zeros(3, np.int64), np.ones(3, np.int64), np.ones(3), np.array([0.5, 0.7, 0.6]),
                      np.full(3, 5.0), source=np.array([10, 11, 12]))
    fanout = pair_edges(np.zeros(3, np.int64), np.ones(3, np.int64), np.ones(3), np.array([0.5, 0.7, 0.6]),
                        np.full(3, 5.0), source=np.array([10, 10, 10]))
    assert ring[3].tolist() == [0.7] and fanout[3].tolist() == [pytest.approx(1.8)]
    assert ring[4].tolist() == fanout[4].tolist() == [15.0]


def test_a_queue_s_waiting_pieces_start_each_when_their_own_path_reaches_it():
    """StageChain.add_pieces: queue 2 forwards a piece that comes in early (from queue 0) and one that comes in late
    (from queue 1, which is busy until 30 first): it ends with the late one's release plus its own time, not both
    pieces' time after the late release (one release per queue, StageChain.add, would have it end at 47); pieces
    that follow one piece run their last chunks one after another after it."""
    queue = np.array([0, 1, 2, 2])
    up = np.array([0, 1])  # pieces 2 and 3 wait on pieces 0 and 1
    first = np.array([1.0, 30.0, 1.0, 1.0])
    whole = np.array([10.0, 31.0, 10.0, 10.0])

    def end_of(ups: np.ndarray, busy: list[float]) -> np.ndarray:
        chain = StageChain(3)
        tail = np.full(2, 0.5 * (3 - np.unique(ups).size))  # last chunks of 0.5: one, or two after one piece
        chain.add_pieces(np.array(busy), np.array([2, 3]), queue, ups, np.array([1, 1]), first, tail, whole,
                         (np.zeros(4), np.zeros(4)))
        return chain.end

    end = end_of(up, [10.0, 31.0, 20.0])
    assert end[2] == 30.0 + 10.0  # the late piece released at 30 (queue 1's first chunk), then its 10
    assert end[2] < 30.0 + 20.0 - 3.0  # well before both pieces after the late release
    # both follow piece 1 (a block forwarded twice from one GPU): after its end, two last chunks
    fan = end_of(np.array([1, 1]), [10.0, 31.0, 20.0])
    assert fan[2] == max(30.0 + 20.0, 31.0 + 1.0)
    slow = end_of(np.array([1, 1]), [10.0, 80.0, 20.0])  # piece 1's queue busier than its first chunk says
    assert slow[2] == 80.0 + 1.0



def test_queues_that_take_pieces_released_together_share_their_port():
    """StageChain.add_pieces with ``ports``: piece 0 (queue 0, its first chunk through at 4) is forwarded whole to
    three GPUs, pieces 1-3, on queues 1, 1 and 2 of one GPU, over one out-port of bandwidth 1 (bytes 2, 2 and 1,
    whole times 2, 2 and 1 with no start). Queue 1's two pieces run one after another (4 after the release) and,
    for as long as queue 2's one piece of 1 byte moves, share the port with it: queue 1 ends at 4 + 4 + 1, queue 2
    at 4 + 1 + 1 (max-min fair). Without ``ports`` each queue has the whole port: 8 and 5."""
    queue = np.array([0, 1, 1, 2])
    first = np.array([4.0, 2.0, 2.0, 1.0])
    whole = np.array([4.0, 2.0, 2.0, 1.0])
    nbytes = np.array([4, 2, 2, 1])
    out_port = np.array([9, 0, 0, 0])
    cap = np.ones(4)

    def ends(ports) -> list[float]:
        chain = StageChain(3)
        chain.add_pieces(np.array([4.0, 4.0, 1.0]), np.array([1, 2, 3]), queue, np.zeros(3, np.int64),
                         np.ones(3, np.int64), first, np.array([4.0, 4.0, 1.0]), whole, (np.zeros(4), np.zeros(4)),
                         None, ports)
        return chain.end.tolist()

    assert ends((out_port, nbytes, cap)) == [4.0, 9.0, 6.0]
    assert ends(None) == [4.0, 8.0, 5.0]
    # on one queue they run one after another anyway: nothing shared
    queue[3] = 1
    chain = StageChain(3)
    chain.add_pieces(np.array([4.0, 5.0, 0.0]), np.array([1, 2, 3]), queue, np.zeros(3, np.int64),
                     np.ones(3, np.int64), first, np.array([5.0, 5.0, 5.0]), whole, (np.zeros(4), np.zeros(4)), None,
                     (out_port, nbytes, cap))
    assert chain.end.tolist() == [4.0, 9.0, 0.0]


@pytest.mark.parametrize("kind,nodes,queues", [("allgather", 2, 2), ("allgather", 4, 2), ("broadcast", 2, 2),
                                               ("allgather", 2, 3)])
def test_a_second_dma_queue_never_slows_a_multicast_plan(kind, nodes, queues):
    """Two (or three) DMA queues a GPU against one, dgx-h100, 1 GiB, host costs as the preset has them: the
    simulated plan is no slower (an AllGather's copies dealt over the DMA queues and the dma_recv queue, each in
    the rotation that keeps the destinations a permutation; a Broadcast's ring on one queue, as its copies share the
    one link), and every GPU's copies to one destination that wait, or that do not, are on one queue. Three queues
    on 2x8: v2 once charged each queue the full NVLink for a forwarded block dealt over them, chose 64 MiB chunks
    (one a block) and the plan simulated 1.09x one queue's."""
    spec = CollectiveSpec(kind=kind, size_bytes=1 << 30, root=0 if kind == "broadcast" else None)
    one, two = (compile_plan(make_topology("dgx-h100", nodes=nodes, dma_queues=q), spec,
                             CompileOptions(baselines=False)) for q in (1, queues))
    assert simulate(two).total_s <= simulate(one).total_s * 1.001
    used = set()
    for stage in two.stages:
        tr = stage.transfers
        groups: dict[tuple, set] = {}
        for src, dst, after, queue, role in zip(tr.src, tr.dst, tr.after, tr.queue, tr.role, strict=True):
            if role == NATIVE:
                groups.setdefault((src, dst, after >= 0), set()).add(queue)
                used.add(queue)
        assert all(len(queues) == 1 for queues in groups.values())
    if kind == "allgather":  # every DMA queue of a GPU carries copies, and its dma_recv queue
        assert len(used) == (queues + 1) * len({two.queues.gpu[q] for q in used})


@pytest.mark.parametrize("preset,nodes,chunk", [("dgx-h100", 4, None), ("paper-h800", 2, None),
                                                 ("paper-h800", 2, 1 << 20), ("dgx-h100", 2, 1 << 20)])
def test_a_multicast_allgather_across_nodes_deals_its_copies_to_the_dma_recv_queue_too(preset, nodes, chunk):
    """One DMA queue a GPU: a multicast AllGather across nodes deals each GPU's copies over its DMA queue and its
    dma_recv queue (which its plan leaves free: no recv_forward copies), every GPU's copies to one destination that
    wait, or that do not, on one queue. The dgx-h100 4x8 AllGather of 1 GiB (auto chunk) was 1.183x its collective
    bound with every copy on the DMA queue; v2 and the simulation now agree within 1% at 1.09-1.10x. With 1 MiB
    chunks the copies' starts (2.5 us a chunk) are as long as their bytes, and v2, which charges two queues' chunks at
    one position of one out-port as moving together, is pessimistic: up to 20% above the simulation, whose queues
    drift apart so that one's start overlaps the other's bytes. Never below it."""
    from hoccl_compiler.cost import collective_bound

    topo = make_topology(preset, nodes=nodes)
    spec = CollectiveSpec(kind="allgather", size_bytes=1 << 30)
    plan = compile_plan(topo, spec, CompileOptions(chunk_bytes=chunk, baselines=False))
    kinds = plan.queues.kind
    for stage in plan.stages:
        tr = stage.transfers
        groups: dict[tuple, set] = {}
        for src, dst, after, queue, role in zip(tr.src, tr.dst, tr.after, tr.queue, tr.role, strict=True):
            if role == NATIVE:
                groups.setdefault((src, dst, after >= 0), set()).add(kinds[queue])
        assert all(len(k) == 1 for k in groups.values())
        assert set().union(*groups.values()) == {"dma", "dma_recv"}
    v2, sim = plan.report.predicted_time_s, simulate(plan).total_s
    if chunk is None:
        assert v2 == pytest.approx(sim, rel=0.01)
    else:
        assert sim <= v2 <= 1.21 * sim
    if (preset, nodes, chunk) == ("dgx-h100", 4, None):
        bound = collective_bound("allgather", 1 << 30, topo, plan.report.lower_bound_s)
        host = dict.fromkeys(("call_us", "net_call_us", "net_flow_us", "net_node_flow_us", "stage_sync_us",
                              "net_staging_gbps"), 0.0)  # the device side: the host's costs at 0
        device = compile_plan(_with_costs(topo, **host), spec, CompileOptions(baselines=False))
        ratio = device.report.predicted_time_s / bound
        assert ratio == pytest.approx(1.091, abs=0.005)  # 1.183 with every copy on the DMA queue


@pytest.mark.parametrize("preset,nodes,size", [("paper-h800", 2, 64 << 20), ("dgx-h100", 4, 1 << 30)])
def test_a_second_dma_queue_keeps_an_all_to_all_near_one_queue(preset, nodes, size):
    """All-to-All across nodes on two DMA queues a GPU: a GPU's forwarded blocks and its direct copies to one GPU are
    different roles, dealt apart, so the simulated plan stays within 2% of one queue's (grouped by destination alone,
    the 2x8 case took 1.27x), and v2 within 2% of the simulation."""
    spec = CollectiveSpec(kind="alltoall", size_bytes=size)
    one, two = (compile_plan(make_topology(preset, nodes=nodes, dma_queues=q), spec, CompileOptions(baselines=False))
                for q in (1, 2))
    simulated = simulate(two).total_s
    assert simulated <= simulate(one).total_s * 1.02
    assert two.report.predicted_time_s == pytest.approx(simulated, rel=0.02)


@pytest.mark.parametrize(("preset", "nodes", "kind"), [("paper-h800", 2, "alltoall"), ("paper-h800", 2, "allgather"),
                                                       ("dgx-h100", 1, "broadcast")])
def test_v2_of_one_chunk_transfers_is_the_general_figure(preset, nodes, kind):
    """Where every transfer is one chunk of one size, stage_times_v2 takes a shorter way (no chunk index per entry);
    the same transfers with chunk sizes that differ but still hold each transfer whole take the general way, and the
    two agree to the bit."""
    state = compile_state(make_topology(preset, nodes=nodes), CollectiveSpec(kind=kind, size_bytes=64 << 20),
                          CompileOptions(chunk_bytes=1 << 40, baselines=False))
    ch, topo = state.chunks, state.topology
    whole = int(ch.tr_bytes.max())
    mixed = np.where(np.arange(ch.tr_bytes.size) % 2 == 0, whole, 2 * whole)  # every transfer still one chunk

    def costs(sizes):
        order = chunk_order(topo, sizes, ch.tr_stage, ch.tr_role, ch.tr_src, ch.tr_dst, ch.tr_bytes)
        return stage_times_v2(topo, sizes, ch.tr_stage, ch.tr_role, ch.tr_src, ch.tr_dst, ch.tr_bytes, ch.tr_queue,
                              ch.tr_after, order, state.schedule.num_stages)

    fast, general = costs(whole), costs(mixed)
    assert ch.tr_after.max() >= 0  # forwarded pieces: the fill along paths is costed
    for field in ("time_s", "ports_s", "queues_s", "pipeline_s", "queue_busy_s"):
        assert np.array_equal(getattr(fast, field), getattr(general, field)), field
    assert fast.chain.time_s() == general.chain.time_s()
    assert all(np.array_equal(a, b) for a, b in zip(fast.edges, general.edges, strict=True))  # pattern plans' chain


@pytest.mark.parametrize("seed", range(4))
def test_shared_delay_of_one_size_is_the_general_figure(seed):
    """shared_delay takes a shorter way where every member is one size ((group size - 1) x bytes, no second key):
    the same members beside one more of another size, alone in a group of its own (which forces the general way and
    changes no other member's figure), give the same figures to the bit, and both are the sum over the other members
    of a group of min(their bytes, its bytes)."""
    from hoccl_compiler.chain import shared_delay

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    group = rng.integers(0, max(1, n // 4), n) * 4096 + rng.integers(0, 3, n)
    size = int(rng.integers(1, 1 << 26))
    nbytes = np.full(n, size, np.int64)
    fast = shared_delay(group, nbytes)
    general = shared_delay(np.r_[group, group.max() + 1], np.r_[nbytes, size + 1])
    assert np.array_equal(fast, general[:n]) and general[n] == 0.0
    brute = np.array([nbytes[group == g].size - 1 for g in group], float) * size
    assert np.array_equal(fast, brute)
