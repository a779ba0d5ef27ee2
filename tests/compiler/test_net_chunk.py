"""Plans whose network transfers move in chunks of their own (CompileOptions.net_chunk_bytes, --net-chunk): every
collective compiles, verifies and replays byte for byte; a copy waits for the network chunk that holds its last byte;
the cost model v2 and the chunk simulation agree; the file says so only where it is set; tampering is refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, PlanError, compile_plan, load_plan, make_topology, replay, save_plan
from hoccl_compiler.cli import compile_main
from hoccl_compiler.ir import RDMA, CompileOptions, chunk_sizes, waited_chunk
from hoccl_compiler.simulate import simulate
from hoccl_compiler.verify import verify_plan


def _plan(kind, nodes=2, gpn=2, size=1_000_008, chunk=64 << 10, net=20_000, multicast=True, **kw):
    topo = make_topology("paper-h800", nodes=nodes, gpus_per_node=gpn)
    return compile_plan(topo, CollectiveSpec(kind=kind, size_bytes=size, **kw),
                        CompileOptions(chunk_bytes=chunk, net_chunk_bytes=net, byte_replay=True, multicast=multicast))


def _outputs_right(plan, want) -> None:
    rng = np.random.default_rng(7)
    ins = [rng.integers(0, 256, n, dtype=np.uint8) for n in plan.ranks.input_bytes]
    outs = replay(plan, ins).outputs
    for r, out in enumerate(outs):
        assert np.array_equal(out, want(ins, r)), r


def test_waited_chunk_is_the_chunk_that_holds_the_last_byte():
    # equal sizes: chunk k; a copy of 64 KiB after network chunks of 20,000 B: the one holding byte 65,535 (and the
    # short last chunk the transfer's last one); network chunks after copies: the copy holding their last byte
    assert [int(waited_chunk(k, 100, 100, 350)) for k in range(4)] == [0, 1, 2, 3]
    assert [int(waited_chunk(k, 65536, 20000, 150_000)) for k in range(3)] == [3, 6, 7]
    assert [int(waited_chunk(k, 20000, 65536, 150_000)) for k in range(8)] == [0, 0, 0, 1, 1, 1, 2, 2]
    assert int(waited_chunk(0, 64, 16, 0)) == 0  # a transfer of no bytes: one empty chunk, waiting for the first
    role = np.array([1, RDMA, 4])
    assert chunk_sizes(role, 64, None).tolist() == [64, 64, 64]
    assert chunk_sizes(role, 64, 16).tolist() == [64, 16, 64]


@pytest.mark.parametrize("net", [20_000, 1 << 20, 65536])
@pytest.mark.parametrize("multicast", [True, False])
def test_every_collective_runs_right_with_a_network_chunk_of_its_own(net, multicast):
    """Smaller, larger and equal network chunks (equal: the plan is the one-chunk plan, the option left out)."""
    G = 4
    for kind in ("allgather", "broadcast", "alltoall", "sendrecv"):
        kw = {"root": 1} if kind == "broadcast" else {}
        if kind == "sendrecv":
            plan = compile_plan(make_topology("paper-h800", nodes=2, gpus_per_node=2),
                                CollectiveSpec(kind="sendrecv", pairs=[(0, 3, 300_001), (2, 1, 7)]),
                                CompileOptions(chunk_bytes=64 << 10, net_chunk_bytes=net, byte_replay=True))
            verify_plan(plan, byte_replay=True)
            continue
        plan = _plan(kind, net=net, multicast=multicast, **kw)
        verify_plan(plan, byte_replay=True)
        assert plan.options.net_chunk_bytes == (None if net == 64 << 10 else net)
        if kind == "allgather":
            _outputs_right(plan, lambda ins, r: np.concatenate(ins))
        elif kind == "broadcast":
            _outputs_right(plan, lambda ins, r: ins[1])
        else:
            _outputs_right(plan, lambda ins, r: np.concatenate([ins[s][r * 1_000_008 // G:(r + 1) * 1_000_008 // G]
                                                                for s in range(G)]))


def test_a_copy_waits_for_every_network_chunk_it_reads():
    """In a plan of 64 KiB copies and 20,000 B network chunks, each forwarded copy's chunk comes after the network
    chunk that holds its last byte in the chunk order, and the replay with that network chunk moved to the end of
    the order (behind the copy that reads it) leaves poison where the copy read too early."""
    plan = _plan("broadcast", nodes=2, gpn=2, root=0)
    st = plan.stages[0]
    tr = st.transfers
    sizes = chunk_sizes(tr.role, plan.options.chunk_bytes, plan.options.net_chunk_bytes)
    rdma = [t for t in range(len(tr.flow)) if tr.role[t] == RDMA]
    readers = [t for t in range(len(tr.flow)) if tr.after[t] in rdma and tr.role[t] != RDMA]
    assert readers, "a part that comes over the network is passed on inside its node"
    t = readers[0]
    a = tr.after[t]
    pos = {}
    seen: dict[int, int] = {}
    for i, x in enumerate(st.chunks):
        pos[(x, seen.get(x, 0))] = i
        seen[x] = seen.get(x, 0) + 1
    for k in range(seen[t]):
        d = int(waited_chunk(k, sizes[t], sizes[a], tr.bytes[t]))
        assert pos[(a, d)] < pos[(t, k)]
    # the network transfer's last chunk moved behind everything: its reader's last chunk now reads poison
    order = [x for x in st.chunks]
    last = max(i for i, x in enumerate(order) if x == a)
    bad_order = order[:last] + order[last + 1:] + [a]
    # moving only its position keeps it the last occurrence of ``a``, so it stays chunk n - 1
    bad = plan.model_copy(update={"stages": [st.model_copy(update={"chunks": bad_order}), *plan.stages[1:]]})
    with pytest.raises(PlanError, match="comes before the chunk it waits for"):
        verify_plan(bad)
    rng = np.random.default_rng(1)
    ins = [rng.integers(0, 256, n, dtype=np.uint8) for n in plan.ranks.input_bytes]
    assert not np.array_equal(replay(bad, ins).outputs[tr.dst[t]], ins[0])


def test_the_file_carries_the_network_chunk_only_where_it_is_set(tmp_path):
    plan = _plan("allgather", nodes=3, gpn=2)
    data = json.loads(save_plan(plan, tmp_path / "p.json").read_text())
    assert data["options"]["net_chunk_bytes"] == 20_000
    assert load_plan(tmp_path / "p.json") == plan
    assert load_plan(save_plan(plan, tmp_path / "p.json.gz", encoding="compact")) == plan
    one = _plan("allgather", nodes=3, gpn=2, net=None)
    assert "net_chunk_bytes" not in json.loads(save_plan(one, tmp_path / "o.json").read_text())["options"]
    assert one.plan_id != plan.plan_id


def test_a_tampered_network_chunk_is_refused(tmp_path):
    plan = _plan("allgather", nodes=2, gpn=2)
    with pytest.raises(PlanError, match=r"ceil\(bytes / 30000\) for a network transfer"):
        verify_plan(plan.model_copy(update={"options": plan.options.model_copy(update={"net_chunk_bytes": 30_000})}))
    path = save_plan(plan, tmp_path / "p.json")
    data = json.loads(path.read_text())
    data["options"]["net_chunk_bytes"] = 40_000
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="its plan_id .* is not the id of its topology, collective and options"):
        load_plan(path)  # an edited file is refused as read, before the verifier (test_plan_trust: the runtime's)
    data["options"]["net_chunk_bytes"] = 0
    path.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="net_chunk_bytes"):
        load_plan(path)


@pytest.mark.parametrize("nodes", [4, 8])
def test_a_dgx_broadcast_with_network_chunks_goes_down_chains_and_v2_agrees_with_the_simulation(nodes):
    """dgx-h100, 1 GiB: 8 MiB copies, 1 MiB network chunks. The parts go down one chain of nodes per rail (a part
    keeps its rail), and v2's device-side time is within 1% of the chunk simulation's (both below the one-chunk
    plan's 1.18x of the collective bound at 4 nodes)."""
    topo = make_topology("dgx-h100", nodes=nodes)
    spec = CollectiveSpec(kind="broadcast", size_bytes=1 << 30)
    plan = compile_plan(topo, spec, CompileOptions(chunk_bytes=8 << 20, net_chunk_bytes=1 << 20, baselines=False))
    st = plan.stages[0]
    tr = st.transfers
    L = topo.gpus_per_node
    for t in range(len(tr.flow)):
        if tr.role[t] == RDMA:  # every network transfer on one rail, and from the GPU the part came in by
            assert tr.src[t] % L == tr.dst[t] % L
    host = plan.report.predicted_time_s - st.time_s
    device = simulate(plan).total_s - host
    assert abs(st.time_s - device) <= 0.01 * device
    if nodes == 4:
        assert st.time_s / plan.report.lower_bound_s < 1.15


def test_cli_net_chunk(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert compile_main(["broadcast", "--topology", "paper-h800", "--nodes", "2", "--gpus-per-node", "2", "--size",
                         "1MiB", "--chunk", "256KiB", "--net-chunk", "64KiB", "-o", str(out), "-q"]) == 0
    assert load_plan(out).options.net_chunk_bytes == 64 << 10
    assert compile_main(["alltoall", "--net-chunk", "0", "-o", str(out)]) == 2
    assert "--net-chunk 0 must be a positive size" in capsys.readouterr().err
    assert compile_main(["alltoall", "--net-chunk", "1MiB", "--pattern", "on", "-o", str(out)]) == 2
    assert "a pattern plan takes one chunk size" in capsys.readouterr().err


def test_the_plot_s_replay_starts_a_copy_after_the_network_chunk_it_reads():
    """plot.gantt_segments (no matplotlib needed): with 1 MiB network chunks under 4 MiB copies, a copy that follows a
    network transfer starts no sooner than the 4th of that transfer's chunks has landed."""
    from hoccl_compiler.plot import gantt_segments

    topo = make_topology("dgx-h100", nodes=2, gpus_per_node=2)
    plan = compile_plan(topo, CollectiveSpec(kind="broadcast", size_bytes=16 << 20),
                        CompileOptions(chunk_bytes=4 << 20, net_chunk_bytes=1 << 20, baselines=False))
    segs = gantt_segments(plan)
    assert len(segs) == plan.num_chunk_entries()
    tr = plan.stages[0].transfers
    readers = [t for t in range(len(tr.flow)) if tr.after[t] >= 0 and tr.role[tr.after[t]] == RDMA
               and tr.role[t] != RDMA]
    assert readers
    for t in readers:
        landed = sorted(s + d for q, s, d, role in segs if q == tr.queue[tr.after[t]])
        first = min(s for q, s, d, role in segs if q == tr.queue[t])
        assert first >= landed[3] - 1e-12 and first < landed[4]  # four 1 MiB network chunks make one 4 MiB copy


def test_auto_takes_a_network_chunk_only_where_the_cost_model_puts_it_ahead():
    """``net_chunk_bytes="auto"`` (the CLI's default): the dgx-h100 Broadcast of 1 GiB on 4 nodes takes one (below
    1.15x its collective bound on the device side, where one chunk is at 1.18x); an All-to-All, a plan over TCP and a
    Broadcast on one node keep one chunk, and so does ``--dump-after`` (one pass table run)."""
    from hoccl_compiler.pipeline import compile_state, net_chunk_may_help

    auto = CompileOptions(net_chunk_bytes="auto", baselines=False)
    bc = CollectiveSpec(kind="broadcast", size_bytes=1 << 30)
    dgx = make_topology("dgx-h100", nodes=4)
    chosen = compile_plan(dgx, bc, auto)
    one = compile_plan(dgx, bc, CompileOptions(baselines=False))
    assert chosen.options.net_chunk_bytes in (1 << 20, 512 << 10, 256 << 10) and one.options.net_chunk_bytes is None
    assert chosen.report.predicted_time_s < 0.99 * one.report.predicted_time_s
    device = [p.stages[0].time_s / p.report.lower_bound_s for p in (chosen, one)]
    assert device[0] < 1.15 < device[1]
    for topo, spec in ((dgx, CollectiveSpec(kind="alltoall", size_bytes=1 << 26)),
                       (make_topology("h200x2", nodes=4), bc), (make_topology("dgx-h100", nodes=1), bc)):
        assert not net_chunk_may_help(topo, spec, auto)
        assert compile_plan(topo, spec, auto).options.net_chunk_bytes is None
    assert compile_state(dgx, bc, auto, stop_after="chunks").chunks.net_chunk_bytes is None


def test_cli_net_chunk_auto_and_off(tmp_path):
    out = tmp_path / "b.json"
    args = ["broadcast", "--topology", "dgx-h100", "--nodes", "4", "--size", "1GiB", "--no-baselines", "-q", "-o",
            str(out)]
    assert compile_main(args) == 0
    assert load_plan(out).options.net_chunk_bytes is not None
    assert compile_main([*args, "--net-chunk", "off"]) == 0
    assert load_plan(out).options.net_chunk_bytes is None


@pytest.mark.parametrize("kw", [dict(chunk_bytes=0), dict(net_chunk_bytes=0), dict(net_chunk_bytes=-5),
                                dict(net_chunk_bytes="bogus"), dict(net_chunk_bytes=1.5), dict(chunk_bytes=True),
                                dict(max_extra_time=2.0), dict(max_extra_time=float("nan"))])
def test_bad_compile_options_are_refused_by_name(kw):
    from hoccl_compiler import OptionsError

    name = next(iter(kw))
    with pytest.raises(OptionsError, match=f"CompileOptions\\({name}="):
        CompileOptions(**kw)
