"""The runtime's view of the machine's GPU links (hoccl_runtime.plans: gpu_links, the measured-once bandwidth and
its cache, the choice between a measurement and a preset), with CUDA faked."""

from __future__ import annotations

import json
import warnings

import pytest

from hoccl_runtime import plans
from hoccl_runtime.plans import Links


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A machine of 4 GPUs named ``name``, links as given; every measurement counted."""
    monkeypatch.delenv("HOCCL_TOPOLOGY", raising=False)
    monkeypatch.delenv("HOCCL_MEASURE_LINKS", raising=False)
    monkeypatch.setenv("HOCCL_CACHE_DIR", str(tmp_path))
    measured: list[tuple[int, int]] = []

    def setup(name: str, access=(True, True, True), nvlink=(True, True, True), gbps: float = 55.5):
        monkeypatch.setattr(plans, "_gpu_name", lambda device: name)
        others = [g for g in range(4) if g != 0]
        peer = dict(zip(others, access, strict=True))
        native = {g: a and n for g, a, n in zip(others, access, nvlink, strict=True)}
        monkeypatch.setattr(plans, "gpu_links", lambda device: Links(device, 4, peer, native))
        monkeypatch.setattr(plans, "measure_link_gbps", lambda a, b: measured.append((a, b)) or gbps)
        return measured
    return setup


def test_nvlink_with_a_matching_preset_takes_the_preset(machine):
    measured = machine("NVIDIA H200")
    topo = plans.machine_topology(nodes=1, gpus_per_node=4, device=0)
    assert topo.nvlink_gbps == 396.0 and topo.name == "machine (NVIDIA H200)" and not measured


def test_pcie_is_measured_once_and_the_figure_kept(machine, tmp_path):
    measured = machine("NVIDIA H200", nvlink=(False, False, False), gbps=52.3)
    topo = plans.machine_topology(nodes=1, gpus_per_node=4, device=0)
    assert topo.nvlink_gbps == 52.3 and "pcie measured 52 GB/s" in topo.name and measured == [(0, 1)]
    again = plans.machine_topology(nodes=1, gpus_per_node=4, device=0)  # a later process: read from the cache
    assert again.nvlink_gbps == 52.3 and measured == [(0, 1)]
    cache = json.loads((tmp_path / "links.json").read_text())
    assert list(cache.values()) == [52.3] and "pcie" in next(iter(cache))


def test_an_unknown_gpu_is_measured_instead_of_guessed(machine):
    measured = machine("NVIDIA B300", gbps=780.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no preset matches" warning: the figure is this machine's
        topo = plans.machine_topology(nodes=1, gpus_per_node=4, device=0)
    assert topo.nvlink_gbps == 780.0 and "nvlink measured 780 GB/s" in topo.name and measured == [(0, 1)]


def test_measure_links_asks_for_a_measurement_even_with_a_preset(machine, monkeypatch):
    measured = machine("NVIDIA H100 80GB HBM3", gbps=401.0)
    monkeypatch.setenv("HOCCL_MEASURE_LINKS", "1")
    assert plans.machine_topology(nodes=1, gpus_per_node=4, device=0).nvlink_gbps == 401.0 and measured


def test_a_gpu_without_peer_access_is_named(machine):
    machine("NVIDIA H200", access=(True, False, True))
    with pytest.warns(RuntimeWarning, match=r"GPU 0 cannot access GPU\(s\) \[2\] directly"):
        plans.machine_topology(nodes=1, gpus_per_node=4, device=0)


def test_one_gpu_per_node_or_a_topology_file_look_at_no_link(machine, monkeypatch, tmp_path):
    measured = machine("NVIDIA H200", nvlink=(False, False, False))
    assert plans.machine_topology(nodes=2, gpus_per_node=1, device=0).nvlink_gbps == 396.0 and not measured
    path = tmp_path / "t.json"
    path.write_text('{"nodes": 1, "gpus_per_node": 4, "nvlink_gbps": 100, "nic_gbps": 10}')
    monkeypatch.setenv("HOCCL_TOPOLOGY", str(path))
    assert plans.machine_topology(nodes=1, gpus_per_node=4, device=0).nvlink_gbps == 100.0 and not measured


def test_an_unwritable_cache_warns_and_still_uses_the_measurement(machine, monkeypatch, tmp_path):
    measured = machine("NVIDIA H200", nvlink=(False, False, False), gbps=40.0)
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("HOCCL_CACHE_DIR", str(blocker / "sub"))  # under a file: cannot be made
    with pytest.warns(RuntimeWarning, match="HOCCL_CACHE_DIR"):
        assert plans.machine_topology(nodes=1, gpus_per_node=4, device=0).nvlink_gbps == 40.0
    assert measured == [(0, 1)]


def test_links_kind():
    assert Links(0, 2, {1: True}, {1: True}).kind == "nvlink"
    assert Links(0, 3, {1: True, 2: True}, {1: True, 2: False}).kind == "pcie"
    assert Links(0, 2, {1: False}, {1: False}).kind == "none"


def test_a_failed_measurement_warns_and_falls_back(machine, monkeypatch):
    machine("NVIDIA H200", nvlink=(False, False, False))

    def broken(a, b):
        raise RuntimeError("cudaErrorPeerAccessUnsupported")
    monkeypatch.setattr(plans, "measure_link_gbps", broken)
    with pytest.warns(RuntimeWarning, match="measuring the copy bandwidth GPU 0 -> GPU 1 failed"):
        assert plans.machine_topology(nodes=1, gpus_per_node=4, device=0).nvlink_gbps == 396.0


def test_ranks_measuring_at_once_each_take_the_next_gpu(machine, monkeypatch):
    """Every rank of a PCIe machine measures its link at start-up: rank d times d -> d + 1 (cyclically), so no two
    measurements share a destination's in-port."""
    measured = machine("NVIDIA H200", nvlink=(False, False, False))
    others = {0: [1, 2, 3], 1: [0, 2, 3], 2: [0, 1, 3], 3: [0, 1, 2]}
    monkeypatch.setattr(plans, "gpu_links", lambda device: Links(device, 4, dict.fromkeys(others[device], True),
                                                                 dict.fromkeys(others[device], False)))
    for d in range(4):
        plans.machine_topology(nodes=1, gpus_per_node=4, device=d)
    assert measured == [(0, 1), (1, 2), (2, 3), (3, 0)]
