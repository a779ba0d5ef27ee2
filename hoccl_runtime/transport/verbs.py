"""RDMA verbs through rdma-core's pyverbs. What this build has: device discovery, with the clear
"no RDMA device, use TCP" answer every machine here gives, and the device-free pieces of the data
path (the write-with-immediate and receive requests, the RC queue pair's INIT/RTR/RTS attributes),
built with pyverbs' own classes and checked against the real library. Not yet: the transport that
opens the device, registers staging once, exchanges queue pairs over the bootstrap store and polls
the completion channel; nothing of it has run on an RDMA NIC.

Installing pyverbs (what we found, 2026-11-30):

* Debian's ``python3-pyverbs`` (rdma-core 44): ``apt-get install python3-pyverbs``. It imports from
  the system Python and, for the same Python version, from a virtual environment through
  ``/usr/lib/python3/dist-packages`` (this module adds that path when ``import pyverbs`` fails).
* PyPI's ``pyverbs`` is an unofficial sdist that builds rdma-core: it fails with Cython 3.3, builds
  with Cython 3.0.12 and ``--no-build-isolation``, then needs rdma-core 59's libibverbs at run time.
* The enums moved: ``pyverbs.enums`` up to rdma-core 58, ``pyverbs.libibverbs_enums`` from 59.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from ..errors import TransportError

__all__ = ["import_pyverbs", "verbs_enums", "rdma_devices", "require_rdma_device"]

SYSTEM_DIST_PACKAGES = "/usr/lib/python3/dist-packages"
NO_DEVICE_ADVICE = ("use the TCP transport instead (hoccl_runtime.transport.TcpTransport), which runs over any IP "
                    "network")


def import_pyverbs() -> ModuleType:
    """``pyverbs``, from this environment or from Debian's system packages; TransportError if absent."""
    try:
        return importlib.import_module("pyverbs")
    except ImportError:
        pass
    if SYSTEM_DIST_PACKAGES not in sys.path:
        sys.path.append(SYSTEM_DIST_PACKAGES)
        try:
            return importlib.import_module("pyverbs")
        except ImportError:
            pass
        finally:
            sys.path.remove(SYSTEM_DIST_PACKAGES)
    raise TransportError("pyverbs (rdma-core's Python bindings) is not installed: apt-get install python3-pyverbs, "
                         f"or pip install 'hoccl[rdma]' (see hoccl_runtime/transport/verbs.py); or {NO_DEVICE_ADVICE}")


def verbs_enums(pyverbs: ModuleType | None = None) -> ModuleType:
    """The enum module under its name for this rdma-core: ``libibverbs_enums`` (>= 59) or ``enums``."""
    pyverbs = pyverbs or import_pyverbs()
    for name in ("libibverbs_enums", "enums"):
        try:
            return importlib.import_module(f"{pyverbs.__name__}.{name}")
        except ImportError:
            continue
    raise TransportError(f"pyverbs at {getattr(pyverbs, '__file__', '?')} has neither libibverbs_enums nor enums")


def rdma_devices(pyverbs: ModuleType | None = None) -> list[str]:
    """Names of the RDMA devices the kernel exposes; [] when it has none (or no RDMA support at all)."""
    pyverbs = pyverbs or import_pyverbs()
    device = importlib.import_module(f"{pyverbs.__name__}.device")
    try:
        devices = device.get_device_list()
    except Exception as exc:  # noqa: BLE001 - pyverbs raises PyverbsRDMAError without kernel support
        if "device" in str(exc).lower():
            return []
        raise TransportError(f"listing RDMA devices failed: {exc}") from None
    names = []
    for d in devices:
        name = getattr(d, "name", d)
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


def require_rdma_device(name: str | None = None) -> str:
    """The RDMA device to use (``name`` or the first one), or a TransportError that says to use TCP."""
    names = rdma_devices()
    if not names:
        raise TransportError(f"no RDMA device on this machine (the kernel lists none: no NIC or no RDMA support); "
                             f"{NO_DEVICE_ADVICE}")
    if name is None:
        return names[0]
    if name not in names:
        raise TransportError(f"RDMA device {name!r} not found; this machine has {', '.join(names)}")
    return name


# --- work requests and queue-pair attributes ------------------------------------------------------------
# The pieces of the data path that need no device, built with pyverbs' own classes so that they are
# checked against the real library (tests/test_transport_verbs.py). The RC connection they serve:
# reset -> INIT (port, access: local write + remote write) -> RTR (peer's QP number, PSN, GID, MTU)
# -> RTS (our PSN, timeouts); then every network chunk is one RDMA write with immediate, and the
# receiver keeps receive requests posted (each immediate consumes one) and reads completions.


def write_with_imm(pyverbs: ModuleType, *, wr_id: int, addr: int, nbytes: int, lkey: int, remote_addr: int,
                   rkey: int, imm: int) -> object:
    """An RDMA write with immediate of ``nbytes`` from a registered local address to a remote one."""
    wr_mod = importlib.import_module(f"{pyverbs.__name__}.wr")
    e = verbs_enums(pyverbs)
    if not 0 <= imm < 2**32:
        raise TransportError(f"immediate {imm} does not fit in 32 bits")
    sge = wr_mod.SGE(addr, nbytes, lkey)
    wr = wr_mod.SendWR(wr_id=wr_id, opcode=e.IBV_WR_RDMA_WRITE_WITH_IMM, num_sge=1, imm_data=imm, sg=[sge],
                       send_flags=e.IBV_SEND_SIGNALED)
    wr.set_wr_rdma(rkey, remote_addr)
    return wr


def recv_for_imm(pyverbs: ModuleType, wr_id: int, scratch_addr: int, scratch_lkey: int) -> object:
    """A receive request for an incoming write-with-immediate (which consumes one, and carries its data
    in the write itself). pyverbs insists on one scatter-gather entry: a zero-length one on a
    registered scratch buffer."""
    wr_mod = importlib.import_module(f"{pyverbs.__name__}.wr")
    return wr_mod.RecvWR(wr_id=wr_id, num_sge=1, sg=[wr_mod.SGE(scratch_addr, 0, scratch_lkey)])


def rc_attrs(pyverbs: ModuleType, *, port: int, dest_qpn: int, dest_psn: int, my_psn: int, dgid: str,
             sgid_index: int, mtu: str = "IBV_MTU_4096") -> tuple[object, object, object]:
    """QP attributes for the INIT, RTR and RTS transitions of a reliable connection."""
    qp_mod = importlib.import_module(f"{pyverbs.__name__}.qp")
    addr_mod = importlib.import_module(f"{pyverbs.__name__}.addr")
    e = verbs_enums(pyverbs)
    init = qp_mod.QPAttr()
    init.qp_state = e.IBV_QPS_INIT
    init.port_num = port
    init.pkey_index = 0
    init.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    rtr = qp_mod.QPAttr()
    rtr.qp_state = e.IBV_QPS_RTR
    rtr.path_mtu = getattr(e, mtu)
    rtr.dest_qp_num = dest_qpn
    rtr.rq_psn = dest_psn
    rtr.max_dest_rd_atomic = 1
    rtr.min_rnr_timer = 12
    route = addr_mod.GlobalRoute(dgid=addr_mod.GID(dgid), sgid_index=sgid_index)
    rtr.ah_attr = addr_mod.AHAttr(gr=route, is_global=1, port_num=port)
    rts = qp_mod.QPAttr()
    rts.qp_state = e.IBV_QPS_RTS
    rts.sq_psn = my_psn
    rts.timeout = 14
    rts.retry_cnt = 7
    rts.rnr_retry = 7
    rts.max_rd_atomic = 1
    return init, rtr, rts
