"""The collective's own lower bound (multicast allowed) beside the plan's traffic bound: the report's lower bound
and ratio are the collective's, so that a plan sending a block once per destination GPU shows it."""

from __future__ import annotations

import json

import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, make_topology
from hoccl_compiler.cost import collective_bound
from hoccl_compiler.ir import CompileOptions
from hoccl_compiler.pattern import compile_pattern, format_pattern
from hoccl_compiler.report import format_text, summary

GIB = 1 << 30


@pytest.mark.parametrize("kind,nodes,inflation", [
    ("allgather", 1, 1.0), ("allgather", 2, 8 / 3), ("allgather", 4, 120 / 31), ("allgather", 16, 600 / 127),
    ("broadcast", 1, 7.0), ("broadcast", 2, 40.0), ("broadcast", 4, 120.0)])
def test_todays_allgather_and_broadcast_traffic_against_the_collective_bound(kind, nodes, inflation):
    """paper-h800, 1 GiB: the compiler's unicast traffic over the collective's bound, as the audit computed it
    (AllGather: (G-1)b / (NVLink + NIC) per GPU, (G-L)b / (L NIC) per node; Broadcast: S / (NVLink + NIC),
    S / (L NIC)); on one node NVLink alone."""
    topo = make_topology("paper-h800", nodes=nodes)
    spec = CollectiveSpec(kind=kind, size_bytes=GIB)
    unicast = CompileOptions(baselines=False, multicast=False)
    rep = (compile_pattern(topo, spec, unicast) if nodes == 16 else compile_plan(topo, spec, unicast)).report
    bound = collective_bound(kind, GIB, topo, rep.lower_bound_s)
    assert rep.lower_bound_s / bound == pytest.approx(inflation, rel=1e-9)
    G, L = topo.num_gpus, topo.gpus_per_node
    nvl, nic = topo.nvlink_gbps * 1e9, topo.nic_gbps * 1e9
    if kind == "allgather" and nodes > 1:
        assert bound == pytest.approx(max((G - 1) * (GIB // G) / (nvl + nic), (G - L) * (GIB // G) / (L * nic)))
    if kind == "broadcast" and nodes == 1:
        assert bound == pytest.approx(GIB / nvl)


@pytest.mark.parametrize("kind,nodes,ratio", [
    ("allgather", 1, 1.0), ("allgather", 2, (2 * 7 / 200) / (15 / 250)), ("allgather", 4, (4 * 7 / 200) / (31 / 250)),
    ("allgather", 16, (16 * 7 / 200) / (127 / 250)), ("broadcast", 1, 1.0), ("broadcast", 2, 250 / 200),
    ("broadcast", 4, 250 / 200)])
def test_multicast_traffic_against_the_collective_bound(kind, nodes, ratio):
    """paper-h800, 1 GiB, multicast (the default): every block crosses the network once per node, (N - 1) S
    network bytes in all (S: the output), and the plan's traffic bound is the collective's up to what that
    minimum forces on NVLink: an AllGather GPU receives N (L - 1) blocks over NVLink, a GPU of the root's node all
    of S. (The collective bound lets a GPU take (G - 1) b over NVLink and NIC together, which only more network
    bytes than (N - 1) S could use: on this preset's 200 / 50 GB/s, 1.10-1.25, not the 1.05 both at once.)"""
    topo = make_topology("paper-h800", nodes=nodes)
    plan = compile_plan(topo, CollectiveSpec(kind=kind, size_bytes=GIB), CompileOptions(baselines=False))
    assert plan.options.multicast == (nodes > 1 or kind == "broadcast")
    rep = plan.report
    assert rep.lower_bound_s / collective_bound(kind, GIB, topo, rep.lower_bound_s) == pytest.approx(ratio, rel=1e-3)
    rdma = sum(n for st in plan.stages for r, n in zip(st.transfers.role, st.transfers.bytes, strict=True) if r == 3)
    assert rdma == (nodes - 1) * GIB


def test_unicast_collectives_keep_their_traffic_bound_and_the_report_says_which_is_which():
    topo = make_topology("paper-h800", nodes=2)
    a2a = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=64 << 20), CompileOptions(baselines=False))
    s = summary(a2a)
    assert s["lower_bound_s"] == s["traffic_bound_s"] == a2a.report.lower_bound_s and s["ratio"] == a2a.report.ratio
    assert "this plan's traffic" not in format_text(a2a)
    ag = compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=64 << 20), CompileOptions(multicast=False))
    s = summary(ag)
    assert s["traffic_bound_s"] == ag.report.lower_bound_s and s["lower_bound_s"] < s["traffic_bound_s"]
    assert s["ratio"] == pytest.approx(ag.report.predicted_time_s / s["lower_bound_s"])
    assert s["baselines"]["everything_at_once_ratio"] == pytest.approx(
        ag.report.baselines.everything_at_once_s / s["lower_bound_s"])
    text = format_text(ag)
    assert f"ratio {s['ratio']:.3f}" in text and "x2.67 of the collective's" in text
    json.dumps(s)  # the CLI's --format json
    spec = CollectiveSpec(kind="allgather", size_bytes=64 << 20)
    unicast = compile_pattern(topo, spec, CompileOptions(multicast=False))
    assert "x2.67 of the collective's" in format_pattern(unicast)
    multicast = format_pattern(compile_pattern(topo, spec))  # an AllGather's pattern is multicast by default
    assert "x1.17 of the collective's" in multicast and "multicast, each block across the network once" in multicast
    mc = compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=64 << 20))
    assert mc.options.multicast and "x1.17 of the collective's" in format_text(mc)


def test_collective_bound_edges():
    topo = make_topology("paper-h800", nodes=2)
    assert collective_bound("allgather", 0, topo, 0.0) == 0.0
    assert collective_bound("allgather", None, topo, 1.5) == 1.5  # no size: the traffic's
    one = make_topology("paper-h800", nodes=1, gpus_per_node=1)
    assert collective_bound("broadcast", GIB, one, 0.0) == 0.0  # one GPU: nothing moves
    assert collective_bound("scatter", GIB, topo, 2.0) == 2.0
