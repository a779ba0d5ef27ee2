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


@pytest.fixture
def real_pyverbs():
    try:
        return verbs.import_pyverbs()
    except TransportError:
        pytest.skip("pyverbs is not installed here")


def test_write_with_imm_request_with_real_pyverbs(real_pyverbs):
    e = verbs.verbs_enums(real_pyverbs)
    wr = verbs.write_with_imm(real_pyverbs, wr_id=3, addr=0x1000, nbytes=4096, lkey=5, remote_addr=0x2000,
                              rkey=99, imm=0xABCD)
    assert (wr.wr_id, wr.opcode, wr.imm_data, wr.num_sge) == (3, e.IBV_WR_RDMA_WRITE_WITH_IMM, 0xABCD, 1)
    assert wr.send_flags & e.IBV_SEND_SIGNALED
    recv = verbs.recv_for_imm(real_pyverbs, 8, scratch_addr=0x3000, scratch_lkey=6)
    assert (recv.wr_id, recv.num_sge) == (8, 1)
    with pytest.raises(TransportError, match="32 bits"):
        verbs.write_with_imm(real_pyverbs, wr_id=0, addr=0, nbytes=0, lkey=0, remote_addr=0, rkey=0, imm=-1)


def test_rc_transition_attributes_with_real_pyverbs(real_pyverbs):
    e = verbs.verbs_enums(real_pyverbs)
    init, rtr, rts = verbs.rc_attrs(real_pyverbs, port=1, dest_qpn=0x1234, dest_psn=77, my_psn=88,
                                    dgid="fe80:0000:0000:0000:0000:0000:0000:0001", sgid_index=3)
    assert init.qp_state == e.IBV_QPS_INIT and init.qp_access_flags & e.IBV_ACCESS_REMOTE_WRITE
    assert (rtr.qp_state, rtr.dest_qp_num, rtr.rq_psn, rtr.path_mtu) == (e.IBV_QPS_RTR, 0x1234, 77, e.IBV_MTU_4096)
    assert (rts.qp_state, rts.sq_psn) == (e.IBV_QPS_RTS, 88)
