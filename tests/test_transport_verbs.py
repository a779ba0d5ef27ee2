"""The verbs transport's discovery, against a fake pyverbs and (where installed) the real one."""

from __future__ import annotations

import sys
import types

import pytest

from hoccl_runtime.errors import TransportError
from hoccl_runtime.transport import verbs


def fake_pyverbs(monkeypatch, *, devices=None, error=None, enums_name="libibverbs_enums"):
    pkg = types.ModuleType("fakeverbs")
    pkg.__path__ = []
    device = types.ModuleType("fakeverbs.device")

    def get_device_list():
        if error is not None:
            raise error
        return [types.SimpleNamespace(name=n.encode()) for n in devices]

    device.get_device_list = get_device_list
    enums = types.ModuleType(f"fakeverbs.{enums_name}")
    for mod in (pkg, device, enums):
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return pkg


def test_no_device_says_use_tcp(monkeypatch):
    pkg = fake_pyverbs(monkeypatch, error=RuntimeError("Failed to get devices list"))
    monkeypatch.setattr(verbs, "import_pyverbs", lambda: pkg)
    assert verbs.rdma_devices(pkg) == []
    with pytest.raises(TransportError, match="no RDMA device.*TCP transport"):
        verbs.require_rdma_device()


def test_device_choice(monkeypatch):
    pkg = fake_pyverbs(monkeypatch, devices=["mlx5_0", "mlx5_1"])
    monkeypatch.setattr(verbs, "import_pyverbs", lambda: pkg)
    assert verbs.require_rdma_device() == "mlx5_0"
    assert verbs.require_rdma_device("mlx5_1") == "mlx5_1"
    with pytest.raises(TransportError, match="'mlx5_9' not found; this machine has mlx5_0, mlx5_1"):
        verbs.require_rdma_device("mlx5_9")


@pytest.mark.parametrize("name", ["libibverbs_enums", "enums"])
def test_enum_module_rename(monkeypatch, name):
    pkg = fake_pyverbs(monkeypatch, devices=[], enums_name=name)
    assert verbs.verbs_enums(pkg).__name__ == f"fakeverbs.{name}"


def test_real_pyverbs_where_installed():
    try:
        pv = verbs.import_pyverbs()
    except TransportError as exc:
        assert "apt-get install python3-pyverbs" in str(exc)
        pytest.skip("pyverbs is not installed here")
    assert verbs.verbs_enums(pv).__name__.startswith("pyverbs.")
    names = verbs.rdma_devices(pv)
    if not names:  # every machine here: the kernel has no RDMA support
        with pytest.raises(TransportError, match="no RDMA device"):
            verbs.require_rdma_device()


@pytest.mark.rdma
def test_rdma_device_is_usable():
    assert verbs.require_rdma_device()
