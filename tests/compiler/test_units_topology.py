from __future__ import annotations

import json

import pytest

from hoccl_compiler import PRESETS, TopologyError, format_bytes, load_topology, make_topology, parse_size


@pytest.mark.parametrize("text,value", [("1GiB", 1 << 30), ("512 MiB", 512 << 20), ("4k", 4096), ("1000", 1000),
                                        ("1.5KiB", 1536), ("2MB", 2_000_000), (7, 7), ("1G", 1 << 30),
                                        ("64M", 64 << 20), ("1GB", 10**9)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "GiB", "1 parsec", "-3", "0.3B"])
def test_parse_size_rejects(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_format_bytes():
    assert format_bytes(1 << 30) == "1 GiB"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(12) == "12 B"


def test_presets_scale_with_nodes():
    topo = make_topology("paper-h800", nodes=4)
    assert topo.num_gpus == 32 and topo.nvlink_gbps == 200 and topo.nic_gbps == 50
    assert topo.peer_of(0) == 1 and topo.peer_of(9) == 8 and topo.peer_of(31) == 30
    assert set(PRESETS) >= {"paper-h800", "dgx-h100", "h200x2"}
    h = make_topology("h200x2", nodes=2)
    assert h.num_gpus == 4 and h.nvlink_gbps == 396


def test_odd_gpus_per_node_last_is_own_peer():
    topo = make_topology("paper-h800", nodes=2, gpus_per_node=3)
    assert topo.peers == (1, 0, 2)
    assert topo.peer_of(5) == 5


def test_forwarding_none_makes_every_gpu_its_own_peer():
    topo = make_topology("paper-h800", nodes=2, forwarding="none")
    assert [topo.peer_of(g) for g in range(16)] == list(range(16))


@pytest.mark.parametrize("fields,needle", [
    (dict(peers=[1, 2, 0, 3]), "involution"),
    (dict(peers=[1, 0]), "entries"),
    (dict(peers=[1, 0, 3, 9]), "outside the node"),
    (dict(nvlink_gbps=0), "nvlink_gbps"),
    (dict(nic_gbps=-5), "nic_gbps"),
    (dict(nodes=0), "nodes"),
])
def test_topology_file_validation(tmp_path, fields, needle):
    data = dict(name="t", nodes=2, gpus_per_node=4, nvlink_gbps=400, nic_gbps=50)
    data.update(fields)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TopologyError, match=needle):
        load_topology(path)


def test_topology_unknown_field(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(dict(nodes=1, gpus_per_node=2, nvlink_gbps=1, nic_gbps=1, colour="red")))
    with pytest.raises(TopologyError, match="colour"):
        load_topology(path)


def test_topology_yaml_and_overrides(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "cluster.yaml"
    path.write_text("nodes: 2\ngpus_per_node: 4\nnvlink_gbps: 300\nnic_gbps: 25\npeers: [1, 0, 3, 2]\n")
    topo = load_topology(path, nodes=3)
    assert topo.name == "cluster" and topo.nodes == 3 and topo.peer_of(6) == 7


def test_topology_bad_json_and_missing_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(TopologyError, match="not valid JSON"):
        load_topology(bad)
    with pytest.raises(TopologyError, match="cannot read"):
        load_topology(tmp_path / "missing.json")


def test_unknown_preset():
    with pytest.raises(TopologyError, match="unknown topology preset"):
        make_topology("tpu-pod")


def test_the_runtime_compiles_for_the_machine_not_a_preset(monkeypatch, tmp_path):
    import warnings

    from hoccl_runtime import plans

    monkeypatch.delenv("HOCCL_TOPOLOGY", raising=False)
    for name, nvlink in (("NVIDIA H200", 396.0), ("NVIDIA H100 80GB HBM3", 450.0), ("NVIDIA H800", 200.0)):
        monkeypatch.setattr(plans, "_gpu_name", lambda device, name=name: name)
        topo = plans.machine_topology(nodes=1, gpus_per_node=8, device=0, dma_queues=2)
        assert (topo.nvlink_gbps, topo.gpus_per_node, topo.dma_queues, topo.name) == (nvlink, 8, 2, f"machine ({name})")
    monkeypatch.setattr(plans, "_gpu_name", lambda device: "NVIDIA A100-SXM4-80GB")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        topo = plans.machine_topology(nodes=2, gpus_per_node=4, device=0)
    assert topo.nvlink_gbps == 450.0 and any("HOCCL_TOPOLOGY" in str(w.message) for w in caught)
    path = tmp_path / "machine.json"
    path.write_text('{"name": "lab", "nodes": 1, "gpus_per_node": 2, "nvlink_gbps": 123, "nic_gbps": 7}')
    monkeypatch.setenv("HOCCL_TOPOLOGY", str(path))
    topo = plans.machine_topology(nodes=3, gpus_per_node=4, device=0, forwarding="none")
    assert (topo.name, topo.nvlink_gbps, topo.nic_gbps, topo.nodes, topo.gpus_per_node, topo.forwarding) == \
        ("lab", 123.0, 7.0, 3, 4, "none")
    assert topo.peers == (1, 0, 3, 2)  # the file's peer map was for 2 GPUs: the default pairs for 4


def test_the_runtimes_on_demand_compile_skips_only_the_byte_replay(monkeypatch, tmp_path):
    """compile_call and a default compile_plan verify structurally but never replay bytes (the replay made small
    compiles 6-17 ms); hoccl-compile of the same size still replays (CompileOptions(byte_replay=None))."""
    import hoccl_compiler.verify as verify
    from hoccl_compiler import CollectiveSpec, compile_plan
    from hoccl_runtime.plans import CallKey, compile_call

    replays = []
    real = verify.replay
    monkeypatch.setattr(verify, "replay", lambda *a, **k: replays.append(1) or real(*a, **k))
    structural = []
    real_orders = verify._check_chunk_orders
    monkeypatch.setattr(verify, "_check_chunk_orders", lambda *a: structural.append(1) or real_orders(*a))
    topo = make_topology("dgx-h100", nodes=1)
    plan = compile_call(topo, CallKey.alltoall(1 << 20), 1 << 40)
    assert plan.num_ranks == 8 and structural and not replays
    compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=1 << 20))
    assert not replays
    from hoccl_compiler.ir import CompileOptions

    compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=1 << 20), CompileOptions(byte_replay=None))
    assert replays
    replays.clear()
    from hoccl_compiler.cli import compile_main

    assert compile_main(["alltoall", "--topology", "dgx-h100", "--nodes", "1", "--size", "1MiB", "-q", "-o",
                         str(tmp_path / "p.json")]) == 0
    assert replays


def test_plan_caches_are_bounded():
    """MoE All-to-Allv sizes change every step: a communicator's plan cache forgets its oldest entries."""
    from hoccl_runtime.plans import PlanCache

    cache = PlanCache(maxsize=3)
    for k in range(5):
        cache[("sendrecv", 0, 1, k)] = k
    assert list(cache) == [("sendrecv", 0, 1, k) for k in (2, 3, 4)] and cache.get(("sendrecv", 0, 1, 0)) is None
    cache[("sendrecv", 0, 1, 3)] = "again"  # an update keeps the size
    assert len(cache) == 3 and cache[("sendrecv", 0, 1, 3)] == "again"


def test_network_host_costs_come_from_the_transport():
    """The network path's host costs are the transport's (TRANSPORT_COSTS): presets with RDMA NICs take the verbs
    profile, the TCP machine the tcp one; ``transport=`` switches; costs a topology sets itself win."""
    from pydantic import ValidationError

    from hoccl_compiler.topology import TRANSPORT_COSTS, CostParams, Topology

    verbs, tcp = TRANSPORT_COSTS["verbs"], TRANSPORT_COSTS["tcp"]
    assert verbs != tcp and tcp == {k: getattr(CostParams(), k) for k in tcp}  # the defaults are the TCP profile
    h800 = make_topology("paper-h800", nodes=2)
    assert h800.transport == "verbs" and h800.costs.net_node_flow_us == verbs["net_node_flow_us"]
    assert h800.costs.net_staging_gbps == 0.0 and "(verbs)" in h800.describe()
    assert make_topology("h200x2", nodes=2).costs.net_call_us == tcp["net_call_us"]
    assert make_topology("paper-h800", nodes=2, transport="tcp").costs.net_flow_us == tcp["net_flow_us"]
    partial = dict(name="t", nodes=2, gpus_per_node=2, nvlink_gbps=100.0, nic_gbps=10.0, transport="verbs",
                   costs={"net_call_us": 5.0, "dma_start_us": 1.0})
    t = Topology(**partial)
    assert (t.costs.net_call_us, t.costs.dma_start_us, t.costs.net_flow_us) == (5.0, 1.0, verbs["net_flow_us"])
    assert Topology(**t.model_dump()) == t  # a dumped topology (a plan's) reads back as it was
    with pytest.raises(ValidationError, match="transport"):
        Topology(**{**partial, "transport": "ucx"})


def test_transport_flag_of_the_cli(tmp_path):
    from hoccl_compiler.cli import compile_main

    out = tmp_path / "p.json"
    assert compile_main(["alltoall", "--topology", "paper-h800", "--nodes", "2", "--size", "1MiB", "--transport",
                         "tcp", "-o", str(out), "--quiet"]) == 0
    topo = json.loads(out.read_text())["topology"]
    assert topo["transport"] == "tcp" and topo["costs"]["net_call_us"] == 871.0
