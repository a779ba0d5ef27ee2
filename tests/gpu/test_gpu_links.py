"""The runtime's look at the GPU links (hoccl_runtime.plans) on real CUDA: the probe and the copy-engine
measurement run, and the topology the communicators compile for comes out of them. On the 1-GPU machine there is
no peer: the probe sees one GPU and the measurement times a copy within it (its figure is not a link's)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu
cp = pytest.importorskip("cupy")


@pytest.fixture(autouse=True)
def _needs_a_gpu():
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("needs 1 CUDA GPU")
    except cp.cuda.runtime.CUDARuntimeError:
        pytest.skip("needs 1 CUDA GPU")


def test_the_probe_sees_this_machines_gpus():
    from hoccl_runtime import plans

    links = plans.gpu_links(0)
    n = cp.cuda.runtime.getDeviceCount()
    assert links is not None and links.count == n and set(links.peer_access) == set(range(1, n))
    if n == 1:
        assert links.kind == "none"
    else:
        assert links.kind in ("nvlink", "pcie")


def test_a_copy_engine_measurement_gives_a_bandwidth():
    from hoccl_runtime import plans

    n = cp.cuda.runtime.getDeviceCount()
    gbps = plans.measure_link_gbps(0, 1 if n > 1 else 0, nbytes=64 << 20, repeats=3)
    assert 1.0 < gbps < 5000.0


def test_the_communicators_topology_with_links_measured(monkeypatch, tmp_path):
    from hoccl_runtime import plans

    monkeypatch.delenv("HOCCL_TOPOLOGY", raising=False)
    monkeypatch.setenv("HOCCL_MEASURE_LINKS", "1")
    monkeypatch.setenv("HOCCL_CACHE_DIR", str(tmp_path))
    n = cp.cuda.runtime.getDeviceCount()
    topo = plans.machine_topology(nodes=1, gpus_per_node=max(n, 2), device=0)
    if n > 1:  # a real link: measured once and kept
        assert "measured" in topo.name and (tmp_path / "links.json").exists()
    else:  # ranks sharing the one GPU: no link to measure, the preset by name
        assert "measured" not in topo.name and not (tmp_path / "links.json").exists()
    assert topo.nvlink_gbps > 0
