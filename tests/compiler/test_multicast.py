"""Multicast plans (hoccl_compiler.multicast): each block crosses the network once per node and is passed on
inside it; the file says where every forwarded copy reads (flows.via) and which chunk it waits for (after); the
verifier proves delivery from the file alone and refuses every tampering."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, PlanError, compile_plan, load_plan, make_topology, replay, save_plan
from hoccl_compiler.cli import compile_main
from hoccl_compiler.ir import NATIVE, RDMA, CompileOptions
from hoccl_compiler.verify import verify_plan


def _plan(kind, preset="paper-h800", nodes=2, gpn=None, size=None, chunk=4096, **kw):
    topo = make_topology(preset, nodes=nodes, gpus_per_node=gpn)
    G = topo.num_gpus
    size = size or G * 3 * chunk
    return compile_plan(topo, CollectiveSpec(kind=kind, size_bytes=size, **kw),
                        CompileOptions(chunk_bytes=chunk, baselines=False, byte_replay=True))


def _transfers(plan):
    rows = []
    for st in plan.stages:
        tr = st.transfers
        rows += list(zip(tr.flow, tr.role, tr.src, tr.dst, tr.bytes, strict=True))
    return rows


@pytest.mark.parametrize("nodes,gpn,in_place", [(2, 8, False), (3, 4, True), (2, 2, False), (4, 2, True)])
def test_allgather_blocks_cross_the_network_once_per_node_on_their_rail(nodes, gpn, in_place):
    plan = _plan("allgather", nodes=nodes, gpn=gpn, in_place=in_place)  # verified, bytes replayed
    L, G = gpn, nodes * gpn
    block = plan.ranks.input_bytes[0]
    assert plan.options.multicast
    fl = plan.flows
    rdma = [(s, d, n) for f, r, s, d, n in _transfers(plan) if r == RDMA]
    assert sum(n for *_, n in rdma) == (nodes - 1) * G * block  # (N - 1) x the output, once per node
    assert all(s % L == d % L for s, d, _ in rdma)  # every network transfer on its rail
    for f, (u, v, g) in enumerate(zip(fl.src, fl.dst, fl.via, strict=True)):
        landing = v // L * L + u % L
        if u // L == v // L or v == landing:
            assert g == -1, f
        else:  # passed on inside the node by the GPU the block landed on
            assert (fl.src[g], fl.dst[g]) == (u, landing), f
    for f, r, s, d, _ in _transfers(plan):
        if fl.via[f] >= 0:
            assert r == NATIVE and s == fl.dst[fl.via[f]]


@pytest.mark.parametrize("nodes,gpn,root", [(1, 8, 0), (1, 4, 3), (2, 4, 5), (3, 4, 0), (3, 1, 1), (2, 8, 9)])
@pytest.mark.parametrize("in_place", [False, True])
def test_broadcast_is_a_chain_in_the_roots_node_and_parts_down_the_rails(nodes, gpn, root, in_place):
    plan = _plan("broadcast", nodes=nodes, gpn=gpn, root=root, in_place=in_place)
    L, G, S = gpn, nodes * gpn, plan.ranks.output_bytes[0]
    fl = plan.flows
    tr = _transfers(plan)
    assert sum(n for _, r, *_, n in tr if r == RDMA) == (nodes - 1) * S
    into: dict[int, set[int]] = {}  # NVLink senders into each GPU
    out_bytes = np.zeros(G, np.int64)
    for f, r, s, d, n in tr:
        if r == NATIVE:
            into.setdefault(d, set()).add(s)
            out_bytes[s] += n
    a = root // L
    for v in range(a * L, a * L + L):  # the root's node: one sender each, its chain predecessor
        if v != root:
            assert into[v] == {a * L + (v - 1) % L}, v
    assert out_bytes.max() <= S  # no GPU sends more than S over NVLink
    assert all(s % L == d % L for _, r, s, d, _ in tr if r == RDMA)
    assert [(u, v, n) for u, v, n in zip(fl.src, fl.dst, fl.bytes, strict=True)]  # flows cut into parts are fine


@pytest.mark.parametrize("N", [2, 3, 4, 5, 9, 16, 33, 100, 2048])
@pytest.mark.parametrize("L", [2, 8])
def test_two_trees_of_nodes_keep_one_stream_a_rail_and_are_shallow(N, L):
    """multicast.node_trees: every node but the root's takes every part once, each on a rail of its own, and sends
    on each rail at most once (one network send and one receive per GPU); a part reaches every node in about
    log2(N) network hops, and a node passes a part on from the GPU it came in by or the next one of its ring."""
    from hoccl_compiler.multicast import node_chain, node_trees

    a, i = N // 3, L - 1
    parent, rail = node_trees(N, L, a, i)
    others = [b for b in range(N) if b != a]
    assert (parent[a] == -1).all() and (rail[a] == -1).all()
    for b in others:
        assert sorted(rail[b].tolist()) == list(range(L)), b  # each part in once, one rail each
    sent: dict[int, list[int]] = {}
    for b in others:
        for p in range(L):
            sent.setdefault(int(parent[b, p]), []).append(int(rail[b, p]))
    assert all(len(r) == len(set(r)) <= L for r in sent.values())  # one stream out per rail
    for b in others:
        for p in range(L):
            x, hops = b, 0
            while x != a:
                up = int(parent[x, p])
                if up != a:  # sent from the GPU it came in by, or the next one round the ring
                    assert (rail[x, p] - rail[up, p]) % L in (0, 1), (b, p)
                x, hops = up, hops + 1
            assert hops <= int(np.log2(N)) + 1, (b, p, hops)
    chain_parent, chain_rail = node_chain(N, L, a, i)
    assert (chain_rail[others] == np.arange(L)).all()
    assert sorted(chain_parent[others, 0].tolist()) == sorted((a + k) % N for k in range(N - 1))


def test_a_broadcast_across_many_nodes_runs_down_trees():
    """From 3 nodes on, a Broadcast's parts run down two trees of nodes: at 64 nodes a part's deepest path has 6
    network hops where the chain had 63, and the plan is verified and byte-replayed like the others."""
    plan = _plan("broadcast", nodes=64, gpn=2, root=3)
    fl = plan.flows
    sender = [fl.dst[g] if g >= 0 else 3 for g in fl.via]  # the GPU each flow reads from (the root: GPU 3)
    hops = []
    for f in range(len(fl.via)):
        n, g = 0, f
        while g >= 0:
            n += sender[g] // 2 != fl.dst[g] // 2  # a network hop
            g = fl.via[g]
        hops.append(n)
    assert max(hops) == 6
    assert sum(n for _, r, *_, n in _transfers(plan) if r == RDMA) == 63 * plan.ranks.output_bytes[0]


def test_a_small_multicast_plan_reads_back_and_compact_files_carry_it(tmp_path):
    plan = _plan("allgather", nodes=3, gpn=4)
    full = load_plan(save_plan(plan, tmp_path / "p.json", encoding="full"))
    compact = load_plan(save_plan(plan, tmp_path / "p.json.gz", encoding="compact"))
    assert full == plan and compact == plan
    text = (tmp_path / "p.json").read_text()
    assert '"via"' in text and '"multicast":true' in text.replace(" ", "")


def test_unicast_plans_keep_their_files_without_the_new_fields(tmp_path):
    topo = make_topology("paper-h800", nodes=2)
    uni = compile_plan(topo, CollectiveSpec(kind="allgather", size_bytes=1 << 20), CompileOptions(multicast=False))
    a2a = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=1 << 20))
    for plan in (uni, a2a):
        data = json.loads(save_plan(plan, tmp_path / "u.json").read_text())
        assert "via" not in data["flows"] and "multicast" not in data["options"] and not plan.options.multicast


def _edit(plan, *, flows=None, stage=None, options=None):
    update = {}
    if flows:
        update["flows"] = plan.flows.model_copy(update=flows)
    if options:
        update["options"] = plan.options.model_copy(update=options)
    if stage:
        s = plan.stages[0]
        new = s.model_copy(update={k: v for k, v in stage.items() if k == "chunks"} |
                           ({"transfers": s.transfers.model_copy(update={k: v for k, v in stage.items()
                                                                         if k != "chunks"})}
                            if any(k != "chunks" for k in stage) else {}))
        update["stages"] = [new, *plan.stages[1:]]
    return plan.model_copy(update=update)


def test_the_verifier_refuses_tampered_multicast_plans():
    plan = _plan("broadcast", nodes=1, gpn=4, root=0)
    verify_plan(plan, byte_replay=True)
    via = list(plan.flows.via)
    fwd = [f for f, g in enumerate(via) if g >= 0]
    f = fwd[-1]
    cases = {
        "not another flow of the same source bytes":
            {"flows": {"via": [f if i == f else g for i, g in enumerate(via)]}},
        "cycle": {"flows": {"via": [fwd[0] if i == via[fwd[0]] else g for i, g in enumerate(via)]}},
        "does not wait": {"stage": {"after": [-1] * len(plan.stages[0].transfers.flow)}},
        "carry 'via' but": {"options": {"multicast": False}},
        "needs flows.via": {"flows": {"via": None}},
    }
    for why, edit in cases.items():
        with pytest.raises(PlanError, match=why):
            verify_plan(_edit(plan, **edit))
    # a forwarded chunk listed before the chunk it copies: the queues could deadlock
    st = plan.stages[0]
    t = st.transfers.flow.index(f)
    order = [t] + [i for i in st.chunks if i != t] + [t] * (st.chunks.count(t) - 1)
    with pytest.raises(PlanError, match="comes before the chunk it waits for"):
        verify_plan(_edit(plan, stage={"chunks": order}))


def test_replay_moves_forwarded_chunks_only_after_they_landed():
    """The byte replay runs chunks in the stage's order: a broadcast chain's output is right, and the same plan with
    a forwarded transfer's chunks moved to the front (the order the verifier refuses) copies poison."""
    plan = _plan("broadcast", nodes=1, gpn=4, root=1)
    rng = np.random.default_rng(3)
    ins = [rng.integers(0, 256, n, dtype=np.uint8) for n in plan.ranks.input_bytes]
    outs = replay(plan, ins).outputs
    assert all(np.array_equal(o, ins[1]) for o in outs)
    st = plan.stages[0]
    f = max(range(len(plan.flows.via)), key=lambda i: plan.flows.via[i])
    t = st.transfers.flow.index(f)
    bad = _edit(plan, stage={"chunks": [t] * st.chunks.count(t) + [i for i in st.chunks if i != t]})
    assert not np.array_equal(replay(bad, ins).outputs[plan.flows.dst[f]], ins[1])


def test_cli_multicast_switch(tmp_path, capsys):
    out = tmp_path / "b.json"
    assert compile_main(["broadcast", "--nodes", "2", "--size", "8MiB", "-o", str(out), "-q"]) == 0
    assert load_plan(out).options.multicast
    assert compile_main(["broadcast", "--nodes", "2", "--size", "8MiB", "-o", str(out), "-q", "--multicast",
                         "off"]) == 0
    assert not load_plan(out).options.multicast
    assert compile_main(["allgather", "--nodes", "2", "--size", "8MiB", "-o", str(out), "--pattern", "on"]) == 0
    assert "multicast    each GPU's block crosses the network once per node" in capsys.readouterr().out
    assert load_plan(out).options.multicast  # the pattern plan's expansion: a multicast plan too
    assert compile_main(["allgather", "--nodes", "2", "--size", "8MiB", "-o", str(out), "--pattern", "on",
                         "--multicast", "off"]) == 0
    assert "multicast  " not in capsys.readouterr().out
    assert not load_plan(out).options.multicast


def test_a_compact_file_whose_forwarded_segment_lost_its_source_is_refused(tmp_path):
    """A compact file keeps only segments; a forwarded flow's segment must have its source flow's segment of the same
    bytes in its stage (from which its wait is derived), else the file is corrupt."""
    import gzip

    plan = _plan("allgather", nodes=3, gpn=4)
    path = save_plan(plan, tmp_path / "p.json.gz", encoding="compact")
    data = json.loads(gzip.decompress(path.read_bytes()))
    seg = data["stages"][0]["segments"]
    f = next(i for i, fl in enumerate(seg["flow"]) if plan.flows.via[fl] >= 0)
    g = seg["flow"].index(plan.flows.via[seg["flow"][f]])
    for k in ("flow", "offset", "bytes"):  # drop the source's segment
        del seg[k][g]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(PlanError, match="corrupt|does not|no segment"):
        load_plan(bad)


@pytest.mark.parametrize("mib", [752, 1280])
def test_a_broadcast_across_nodes_does_not_stall_on_its_chunk_order(mib):
    """A 2x8 Broadcast whose parts are 11.75 / 20 chunks long: in the order of chunk_order's fixed shifts per hop
    the simulated queues (each running its chunks strictly in the plan's order, as the runtimes do) held chunks that
    had not arrived while others waited behind them, 1.27x / 1.53x v2's time. List-scheduled ready first
    (passes/chunks.ready_first) the simulation and v2 agree within 6%, and the plan still verifies."""
    from hoccl_compiler.simulate import simulate

    plan = compile_plan(make_topology("dgx-h100", nodes=2), CollectiveSpec(kind="broadcast", size_bytes=mib << 20,
                                                                           root=0),
                        CompileOptions(chunk_bytes=8 << 20, baselines=False))
    verify_plan(plan)
    sim = simulate(plan).total_s
    assert 0.94 <= plan.report.predicted_time_s / sim <= 1.06, (plan.report.predicted_time_s, sim)


def test_an_8x8_broadcast_of_more_than_20000_chunk_entries_does_not_stall_either():
    """8x8 paper-h800, 1392 MiB in 4 MiB chunks: 22,524 chunk entries, above the 20,000 up to which the order was
    list-scheduled until 2026-12-04: in the shifted order the simulation ran 1.23x v2's time (a queue holding a chunk
    not there yet); list-scheduled, within 5% (the list schedule is O(n log n) now, and takes up to 300,000 entries)."""
    from hoccl_compiler.simulate import simulate

    plan = compile_plan(make_topology("paper-h800", nodes=8), CollectiveSpec(kind="broadcast", size_bytes=1392 << 20,
                                                                             root=0),
                        CompileOptions(chunk_bytes=4 << 20, baselines=False))
    assert sum(len(st.chunks) for st in plan.stages) > 20_000
    sim = simulate(plan).total_s
    assert 0.95 <= plan.report.predicted_time_s / sim <= 1.05, (plan.report.predicted_time_s, sim)


def test_the_ready_first_order_takes_a_queue_s_chunk_that_is_there_before_one_that_is_not():
    """Two paths through GPU 1's queue: chunk 0 of a forwarded part arrives late (its source crosses a slow hop
    first), chunk 0 of the other part is there at once. The given order puts the late one first; the list schedule
    starts the one that is there, and keeps every chunk after the chunk it waits for."""
    from hoccl_compiler.simulate import ready_first_order

    topo = make_topology("dgx-h100", nodes=2)
    G = topo.num_gpus
    # transfers: 0: GPU 8 -> 0 (network, slow); 1: GPU 0 -> 1 forwards 0; 2: GPU 0 -> 1 direct (its own bytes)
    role = np.array([RDMA, NATIVE, NATIVE])
    src, dst = np.array([8, 0, 0]), np.array([0, 1, 1])
    nbytes = np.array([8 << 20, 8 << 20, 8 << 20])
    queue = np.array([G * 10 + 99, 7, 7])  # the network transfer on a queue of its own, the two copies on one
    after = np.array([-1, 0, -1])
    stage = np.zeros(3, np.int64)
    got = ready_first_order(topo, 8 << 20, stage, role, src, dst, nbytes, queue, after, np.array([0, 1, 2]))
    got = got.tolist()
    assert sorted(got) == [0, 1, 2]
    assert got.index(2) < got.index(1)  # on GPU 0's queue the copy that is there goes first
    assert got.index(0) < got.index(1)  # and the forwarded one after the chunk it copies


def test_critical_path_s_is_the_longest_way_through_each_chunk_s_followers():
    """critical_path_s (vectorized level by level) against its definition written as a plain recursion, on random
    forests of waits with 1-5 chunks a transfer."""
    from hoccl_compiler.simulate import critical_path_s

    rng = np.random.default_rng(7)
    for _ in range(100):
        n = int(rng.integers(1, 25))
        after = np.array([int(rng.integers(0, t)) if t and rng.random() < 0.7 else -1 for t in range(n)])
        n_chunks = rng.integers(1, 6, n)
        took = rng.random(int(n_chunks.sum()))
        base = np.cumsum(n_chunks) - n_chunks
        want: list[list[float]] = [[] for _ in range(n)]
        for t in range(n - 1, -1, -1):  # a transfer waits only on one before it: children first
            way = [0.0] * int(n_chunks[t])
            for k in range(int(n_chunks[t]) - 1, -1, -1):
                ahead = [way[k + 1]] if k + 1 < n_chunks[t] else [0.0]
                ahead += [want[c][k] for c in range(n) if after[c] == t and k < n_chunks[c]]
                way[k] = took[base[t] + k] + max(ahead)
            want[t] = way
        np.testing.assert_allclose(critical_path_s(n_chunks, took, after), np.concatenate(want), rtol=1e-12)


def test_the_ready_first_order_starts_the_chunk_with_the_longest_way_ahead():
    """GPU 0's queue holds two copies that are both there at once: one that nothing follows, listed first, and one
    whose chunks a slow network hop and a further copy follow. The list schedule starts the second's chunks first
    (the first's would only hold back the network)."""
    from hoccl_compiler.simulate import ready_first_order

    topo = make_topology("dgx-h100", nodes=2)
    G = topo.num_gpus
    # 0: GPU 0 -> 1 (nothing follows); 1: GPU 0 -> 2; 2: GPU 2 -> 10 over the network, after 1; 3: GPU 10 -> 11
    role = np.array([NATIVE, NATIVE, RDMA, NATIVE])
    src, dst = np.array([0, 0, 2, 10]), np.array([1, 2, 10, 11])
    nbytes = np.full(4, 16 << 20)
    queue = np.array([0, 0, G * 10 + 99, 10 * 11])
    after = np.array([-1, -1, 1, 2])
    got = ready_first_order(topo, 8 << 20, np.zeros(4, np.int64), role, src, dst, nbytes, queue, after,
                            np.array([0, 0, 1, 1, 2, 2, 3, 3])).tolist()
    on_gpu0 = [t for t in got if t in (0, 1)]
    assert on_gpu0 == [1, 1, 0, 0]


def test_a_broadcast_root_sends_its_own_rail_s_part_down_its_chain_last():
    """2x8 Broadcast from GPU 0: part 0 leaves the root's node from the root itself (its network hop reads the
    root's input), every other part from a GPU down the chain. Longest way first, the root's chain copy ends with
    part 0's chunks; v2 (which reads each piece's turn off the chunk order) and the chunk simulation agree."""
    from hoccl_compiler.simulate import simulate

    plan = compile_plan(make_topology("dgx-h100", nodes=2), CollectiveSpec(kind="broadcast", size_bytes=256 << 20,
                                                                             root=0, in_place=True),
                        CompileOptions(chunk_bytes=4 << 20, baselines=False))
    st = plan.stages[0]
    tr = st.transfers
    chain = [i for i in range(len(tr.flow)) if tr.src[i] == 0 and tr.dst[i] == 1]
    part = {i: plan.flows.src_offset[tr.flow[i]] // ((256 << 20) // 8) for i in chain}
    on_root = [part[t] for t in st.chunks if t in part]
    per_part = len(on_root) // 8
    assert on_root[-per_part:] == [0] * per_part  # part 0's chunks last
    assert 0 not in on_root[:-per_part]
    sim = simulate(plan).total_s
    assert 0.98 <= plan.report.predicted_time_s / sim <= 1.02, (plan.report.predicted_time_s, sim)


def test_past_the_list_schedule_s_limit_the_chosen_chunk_size_s_order_alone_is_list_scheduled(monkeypatch):
    """Where every candidate chunk size's order is past READY_FIRST_MAX_ENTRIES (here: all of them), the chooser
    compares them in the shifted order, and the order of the size it takes is list-scheduled once
    (READY_FIRST_ONE_ENTRIES) and costed again: the same plan as with no limit at that size, its v2 the
    simulation's."""
    from hoccl_compiler.passes import chunks
    from hoccl_compiler.simulate import simulate

    topo = make_topology("dgx-h100", nodes=2)
    spec = CollectiveSpec(kind="broadcast", size_bytes=256 << 20, root=0, in_place=True)
    monkeypatch.setattr(chunks, "READY_FIRST_MAX_ENTRIES", 0)
    chosen = compile_plan(topo, spec, CompileOptions(baselines=False))
    monkeypatch.setattr(chunks, "READY_FIRST_MAX_ENTRIES", 10**9)
    given = compile_plan(topo, spec, CompileOptions(baselines=False, chunk_bytes=chosen.options.chunk_bytes))
    assert [st.chunks for st in chosen.stages] == [st.chunks for st in given.stages]
    assert chosen.report.predicted_time_s == pytest.approx(given.report.predicted_time_s, rel=1e-9)
    sim = simulate(chosen).total_s
    assert 0.98 <= chosen.report.predicted_time_s / sim <= 1.02, (chosen.report.predicted_time_s, sim)
    monkeypatch.setattr(chunks, "READY_FIRST_ONE_ENTRIES", 0)  # and past both limits: the shifted order stays
    shifted = compile_plan(topo, spec, CompileOptions(baselines=False, chunk_bytes=chosen.options.chunk_bytes))
    assert [st.chunks for st in shifted.stages] != [st.chunks for st in given.stages]
