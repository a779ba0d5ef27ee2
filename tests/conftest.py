from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # the fakes and helpers the tests import


def _cuda_device_count() -> int:
    if importlib.util.find_spec("cupy") is None:
        return 0
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no driver, no device: no GPU tests
        return 0


def _rdma_available() -> bool:
    try:
        from hoccl_runtime.net.transport.verbs import rdma_devices

        return bool(rdma_devices())
    except Exception:  # noqa: BLE001 - pyverbs not installed, or no kernel support
        return False


def pytest_collection_modifyitems(config, items):
    gpus = None
    rdma = None
    for item in items:
        if item.get_closest_marker("gpu") or item.get_closest_marker("multi_gpu"):
            if gpus is None:
                gpus = _cuda_device_count()
            need = 1
            marker = item.get_closest_marker("multi_gpu")
            if marker is not None:
                need = marker.args[0] if marker.args else 2
            if gpus < need:
                item.add_marker(pytest.mark.skip(reason=f"needs {need} CUDA GPU(s), found {gpus}"))
        if item.get_closest_marker("rdma"):
            if rdma is None:
                rdma = _rdma_available()
            if not rdma:
                item.add_marker(pytest.mark.skip(reason="needs an RDMA device (pyverbs found none)"))


@pytest.fixture
def tmp_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True)
def _fake_streams_finish_inside_their_test():
    """Work left on the fake CUDA's stream threads (tests/support/fake_cuda.py, async streams) finishes before the
    buffers handed out by fake_cuda.dev are let go, so no thread copies into freed memory after the test."""
    yield
    fake = sys.modules.get("fake_cuda")
    streams = getattr(fake, "installed", None) if fake is not None else None
    if streams is not None and streams.on:
        for worker in list(streams.workers.values()):
            with contextlib.suppress(TimeoutError):  # a stream left waiting: its own deadline raises in its thread
                worker.drain(timeout_s=25)
    if fake is not None:
        fake.kept.clear()
        fake.installed = None
    if streams is not None and streams.errors:  # a fake stream's wait gave up (20 s): a hang on a GPU
        errors, streams.errors = list(streams.errors), []
        pytest.fail(f"a fake CUDA stream failed: {errors[0]!r} ({len(errors)} in all)", pytrace=False)


@pytest.fixture
def whole_rings(monkeypatch):
    """HOCCL_NET_OVERLAP=0 for a test written for runs that each take a whole staging ring and wait for the previous
    run's receivers: it counts slots, credits or gate moves from that (the default since 2026-12-06 is alternate
    halves, tested in test_net_overlap_cpu.py and test_netcomm_cpu.py)."""
    monkeypatch.setenv("HOCCL_NET_OVERLAP", "0")
