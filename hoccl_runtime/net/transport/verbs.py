"""RDMA verbs through rdma-core's pyverbs: device discovery (with the clear "no RDMA device, use TCP"
answer every machine here gives), the work requests and RC queue-pair attributes (built with pyverbs'
own classes and checked against the real library), and :class:`VerbsTransport`: the device opened
once, staging regions registered once, queue pairs exchanged over an out-of-band TCP socket, RDMA
writes with immediate round robin over several queue pairs, completions collected from one
completion queue, waiting on the completion channel's fd with ``select`` (which releases the GIL).
Nothing of it has run on an RDMA NIC: the transport's logic is tested against an in-process fake of
the pyverbs classes it uses.

Installing pyverbs (what we found, 2026-11-30):

* Debian's ``python3-pyverbs`` (rdma-core 44): ``apt-get install python3-pyverbs``. It imports from
  the system Python and, for the same Python version, from a virtual environment through
  ``/usr/lib/python3/dist-packages`` (this module adds that path when ``import pyverbs`` fails).
* PyPI's ``pyverbs`` is an unofficial sdist that builds rdma-core: it fails with Cython 3.3, builds
  with Cython 3.0.12 and ``--no-build-isolation``, then needs rdma-core 59's libibverbs at run time.
* The enums moved: ``pyverbs.enums`` up to rdma-core 58, ``pyverbs.libibverbs_enums`` from 59.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import select
import socket
import struct
import sys
import threading
import time
import weakref
from collections import deque
from types import ModuleType

import numpy as np

from ...errors import HocclTimeoutError, TransportError
from .base import Completion, Connection, Region, Transport, open_listener

__all__ = ["import_pyverbs", "verbs_enums", "rdma_devices", "require_rdma_device", "VerbsTransport",
           "VerbsConnection"]

SYSTEM_DIST_PACKAGES = "/usr/lib/python3/dist-packages"
NO_DEVICE_ADVICE = ("use the TCP transport instead (hoccl_runtime.net.transport.TcpTransport), which runs over any IP "
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
                         "or pip install 'hoccl[rdma]' (see hoccl_runtime/net/transport/verbs.py); or "
                         f"{NO_DEVICE_ADVICE}")


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
# checked against the real library (tests/transport/test_transport_verbs.py). The RC connection they serve:
# reset -> INIT (port, access: local write + remote write) -> RTR (peer's QP number, PSN, GID, MTU)
# -> RTS (our PSN, timeouts); then every network chunk is one RDMA write with immediate, and the
# receiver keeps receive requests posted (each immediate consumes one) and reads completions.


# pyverbs -> (its wr module, its enum module): looked up once, not on every work request (importlib on each write and
# each receive repost took about 9% of a driving thread's time under cProfile on the fake NIC)
_WR_MODULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _wr_modules(pyverbs: ModuleType) -> tuple[ModuleType, ModuleType]:
    got = _WR_MODULES.get(pyverbs)
    if got is None:
        got = _WR_MODULES[pyverbs] = (importlib.import_module(f"{pyverbs.__name__}.wr"), verbs_enums(pyverbs))
    return got


def write_with_imm(pyverbs: ModuleType, *, wr_id: int, addr: int, nbytes: int, lkey: int, remote_addr: int,
                   rkey: int, imm: int) -> object:
    """An RDMA write with immediate of ``nbytes`` from a registered local address to a remote one."""
    wr_mod, e = _wr_modules(pyverbs)
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
    wr_mod = _wr_modules(pyverbs)[0]
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


# --- the transport ---------------------------------------------------------------------------------------
# One device context, protection domain, completion channel and completion queue per transport; per
# connection ``qps`` RC queue pairs (the analogue of the TCP transport's lanes: writes go round robin).
# Staging regions are registered once (``register``) before connecting; their addresses and rkeys go to
# the peer in the out-of-band hello, with the queue pairs' numbers and PSNs and the port's GID. The
# out-of-band channel is a plain TCP socket, as NCCL's bootstrap is; it also carries the session (a
# plan id) and the transport's name, so a mismatch is refused before any RDMA happens.

_HELLO = struct.Struct("!I")  # length prefix of the JSON hello


def _send_json(sock: socket.socket, obj: dict) -> None:
    data = json.dumps(obj).encode()
    sock.sendall(_HELLO.pack(len(data)) + data)


def _recv_json(sock: socket.socket, peer: str) -> dict:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            part = sock.recv(n - len(buf))
            if not part:
                raise TransportError(f"{peer} closed the out-of-band connection during the queue-pair exchange")
            buf += part
        return buf

    (n,) = _HELLO.unpack(exact(_HELLO.size))
    if n > 1 << 20:
        raise TransportError(f"{peer} sent a {n}-byte hello; it is not a HOCCL verbs transport")
    return json.loads(exact(n))


def _event_fds() -> set[int]:
    fds = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if "infinibandevent" in os.readlink(f"/proc/self/fd/{name}"):
                fds.add(int(name))
        except OSError:
            continue
    return fds


class VerbsConnection(Connection):
    """``qps`` RC queue pairs to one peer. Writes are RDMA writes with immediate, round robin."""

    def __init__(self, transport: VerbsTransport, qps: list, peer: str, peer_name: str, remote_regions: list):
        self.transport, self.qps, self.peer, self.peer_name = transport, qps, peer, peer_name
        self.remote_regions = remote_regions       # [(address, rkey, nbytes)] in the peer's register order
        self.qp_nums = {qp.qp_num for qp in qps}
        self._next = 0
        self._outstanding = [0] * len(qps)
        self._seen_drains = transport._drains  # the transport's drain count when this connection last looked (poll)
        self.closed = False

    def write(self, local: Region, offset: int, nbytes: int, remote_region: int, remote_offset: int,
              imm: int = 0, *, ordered: bool = False) -> int:
        t = self.transport
        t._check_usable(self)
        if not 0 <= remote_region < len(self.remote_regions):
            raise TransportError(f"{self.peer} registered {len(self.remote_regions)} regions; region {remote_region} "
                                 "does not exist there")
        address, rkey, size = self.remote_regions[remote_region]
        if remote_offset < 0 or nbytes < 0 or remote_offset + nbytes > size or offset + nbytes > local.nbytes:
            raise TransportError(f"write of {nbytes} bytes at {remote_offset} into {self.peer}'s region "
                                 f"{remote_region} ({size} bytes) from offset {offset} of a {local.nbytes}-byte region "
                                 "is out of range; do both ends run the same plan, chunk size and ring_bytes?")
        mr = t._mrs[local.id]
        if ordered:  # one reliable-connection queue pair delivers in order: queue pair 0 takes every ordered write
            lane = 0
        else:
            lane = self._next % len(self.qps)
            self._next += 1
        deadline = time.monotonic() + t.timeout_s
        while self._outstanding[lane] >= t.max_writes:  # send queue full: collect completions first
            t._drain(wait_s=min(0.01, max(0.0, deadline - time.monotonic())))
            t._check_usable(self)
            if time.monotonic() > deadline:
                raise HocclTimeoutError(f"{self.peer}: {t.max_writes} writes on queue pair {lane} did not complete "
                                        f"within {t.timeout_s:g} s")
        with t._lock:
            wid = t._next_write
            t._next_write += 1
            t._writes[wid] = (self, lane, remote_region, remote_offset, nbytes, imm)
        wr = write_with_imm(t.pv, wr_id=wid, addr=local.address + offset, nbytes=nbytes, lkey=mr.lkey,
                            remote_addr=address + remote_offset, rkey=rkey, imm=imm)
        self._outstanding[lane] += 1
        try:
            self.qps[lane].post_send(wr)
        except Exception as exc:  # noqa: BLE001 - pyverbs raises its own error types
            raise TransportError(f"posting a write to {self.peer} on queue pair {lane} failed: {exc}") from None
        return wid

    def poll(self, timeout_s: float = 0.0, max_items: int = 64) -> list[Completion]:
        t = self.transport
        got = t._take(self, max_items)
        if got or timeout_s <= 0:
            t._check_usable(self)
            if got:
                return got
            # the CQ is the transport's, shared by its connections: a loop that polls each connection in turn drains
            # it once a turn, with the first connection that finds nothing drained since it last looked
            drain = self._seen_drains == t._drains
            if drain:
                t._drain()
            self._seen_drains = t._drains
            return t._take(self, max_items) if drain else got
        deadline = time.monotonic() + timeout_s
        while True:
            t._check_usable(self)
            got = t._take(self, max_items, drain=True, wait_s=min(0.05, max(0.0, deadline - time.monotonic())))
            if got:
                return got
            if time.monotonic() >= deadline:
                raise HocclTimeoutError(f"no completion from {self.peer} within {timeout_s:g} s")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for qp in self.qps:
            with contextlib.suppress(Exception):  # closing anyway
                qp.close()


class VerbsTransport(Transport):
    """RDMA write-with-immediate over RC queue pairs (pyverbs). Nothing of it has run on an RDMA NIC
    here: its logic is tested against an in-process fake of the pyverbs classes it uses
    (tests/transport/test_transport_verbs.py) and its work requests against the real pyverbs."""

    def __init__(self, *, device: str | None = None, port: int = 1, gid_index: int = 0, qps: int = 4,
                 host: str = "127.0.0.1", oob_port: int = 0, session: str = "", name: str = "",
                 max_writes: int = 128, recv_depth: int = 256, timeout_s: float = 30.0,
                 pyverbs: ModuleType | None = None):
        self.pv = pyverbs or import_pyverbs()
        self.e = verbs_enums(self.pv)
        names = rdma_devices(self.pv)
        if not names:
            raise TransportError(f"no RDMA device on this machine (the kernel lists none); {NO_DEVICE_ADVICE}")
        if device is not None and device not in names:
            raise TransportError(f"RDMA device {device!r} not found; this machine has {', '.join(names)}")
        if qps < 1:
            raise TransportError(f"qps={qps}: a connection needs at least one queue pair")
        self.device = device or names[0]
        self.port, self.gid_index, self.nqps, self.session, self.name = port, gid_index, qps, session, name
        self.max_writes, self.recv_depth, self.timeout_s = max_writes, recv_depth, timeout_s
        self.host, self.oob_port = host, oob_port
        dev, pd_mod, cq_mod = (importlib.import_module(f"{self.pv.__name__}.{m}") for m in ("device", "pd", "cq"))
        self.ctx = dev.Context(name=self.device)
        self.pd = pd_mod.PD(self.ctx)
        before = _event_fds()
        self.channel = cq_mod.CompChannel(self.ctx)
        # pyverbs' get_cq_event blocks holding the GIL and the channel's fd is not exposed: wait on the fd
        # the channel opened (the new "infinibandevent" entry of /proc/self/fd) with select(), which
        # releases the GIL, and only then take the event; without it, poll with short sleeps.
        fd = getattr(self.channel, "fd", None)
        new = _event_fds() - before
        self.channel_fd = fd if fd is not None else (new.pop() if len(new) == 1 else None)
        self.cq = cq_mod.CQ(self.ctx, 4 * (max_writes + recv_depth) * qps, None, self.channel, 0)
        self.cq.req_notify()
        self.gid = str(self.ctx.query_gid(port, gid_index))
        self._mrs: list = []
        self._regions: list[Region] = []
        self._dmabuf_fds: list[int] = []
        self.gpu_registration: str | None = None  # how GPU memory was registered: "dma-buf" or "peer-memory"
        self._scratch = None
        self._conns: list[VerbsConnection] = []
        self._by_qp: dict[int, VerbsConnection] = {}
        self._pending: dict[VerbsConnection, deque] = {}
        self._writes: dict[int, tuple] = {}
        self._next_write = 0
        self._lock = threading.Lock()
        self._drains = 0  # CQ drains so far (VerbsConnection.poll)
        self._failed: dict[VerbsConnection, TransportError] = {}
        self._listener: socket.socket | None = None
        self.closed = False

    # --- regions --------------------------------------------------------------------------------------
    def register(self, buffer: np.ndarray) -> Region:
        if self._conns:
            raise TransportError("register every staging region before connecting: the peer learns the regions "
                                 "(address, rkey) in the connection's hello")
        view = np.ascontiguousarray(buffer).view(np.uint8).reshape(-1)
        if view.ctypes.data != buffer.ctypes.data:
            raise TransportError("a staging region must be contiguous memory (it is registered in place)")
        mr_mod = importlib.import_module(f"{self.pv.__name__}.mr")
        access = self.e.IBV_ACCESS_LOCAL_WRITE | self.e.IBV_ACCESS_REMOTE_WRITE
        try:
            mr = mr_mod.MR(self.pd, max(1, view.nbytes), access, address=int(view.ctypes.data))
        except Exception as exc:  # noqa: BLE001
            raise TransportError(f"registering {view.nbytes} bytes with {self.device} failed: {exc}") from None
        region = Region(len(self._regions), view)
        self._regions.append(region)
        self._mrs.append(mr)
        return region

    device_memory = True

    def register_device(self, address: int, nbytes: int, device: int) -> Region:
        """Register GPU memory once, for RDMA straight from and into it (GPUDirect RDMA). First as a dma-buf
        (the CUDA driver exports the range as a dma-buf fd, rdma-core's mlx5 provider registers it:
        ``Mlx5DmaBufMR``, rdma-core 51+; the kernel's own path, no extra module), else through the
        nvidia-peermem module (a plain MR on the GPU address). Which one worked is in ``gpu_registration``."""
        if self._conns:
            raise TransportError("register every staging region before connecting: the peer learns the regions "
                                 "(address, rkey) in the connection's hello")
        if nbytes < 1:
            raise TransportError(f"a GPU region needs at least one byte (got {nbytes})")
        access = self.e.IBV_ACCESS_LOCAL_WRITE | self.e.IBV_ACCESS_REMOTE_WRITE
        why = []
        mr = None
        try:
            dmabuf = importlib.import_module(f"{self.pv.__name__}.providers.mlx5.mlx5dv_dmabuf")
        except ImportError:
            why.append("dma-buf: this pyverbs has no mlx5 dma-buf MR (rdma-core 51+ with the mlx5 provider)")
        else:
            from ..._cuda import dmabuf_fd

            try:
                fd, offset = dmabuf_fd(address, nbytes, device)
            except Exception as exc:  # noqa: BLE001 - a CUDA error or an unsupported driver
                why.append(f"dma-buf: the CUDA driver exported no dma-buf ({exc})")
            else:
                try:
                    mr = dmabuf.Mlx5DmaBufMR(self.pd, offset, nbytes, iova=address, fd=fd, access=access)
                    self.gpu_registration = "dma-buf"
                    self._dmabuf_fds.append(fd)
                except Exception as exc:  # noqa: BLE001
                    os.close(fd)
                    why.append(f"dma-buf: registering it with {self.device} failed ({exc})")
        if mr is None:
            mr_mod = importlib.import_module(f"{self.pv.__name__}.mr")
            try:
                mr = mr_mod.MR(self.pd, nbytes, access, address=address)
                self.gpu_registration = "peer-memory"
            except Exception as exc:  # noqa: BLE001
                why.append(f"peer memory: {exc} (is the nvidia_peermem module loaded?)")
                raise TransportError(f"cannot register {nbytes} bytes of GPU {device} memory with {self.device}: "
                                     + "; ".join(why) + ". Stage through host memory instead (GpuNodeExecutor("
                                     "staging='host'))") from None
        region = Region(len(self._regions), None, device_address=address, device_bytes=nbytes)
        self._regions.append(region)
        self._mrs.append(mr)
        return region

    # --- connection setup -----------------------------------------------------------------------------
    def listen(self) -> str:
        sock = open_listener(self.host, self.oob_port, 64)
        self._listener = sock
        host, port = sock.getsockname()
        return f"{host}:{port}"

    def _make_qps(self) -> list:
        qp_mod = importlib.import_module(f"{self.pv.__name__}.qp")
        cap = qp_mod.QPCap(max_send_wr=self.max_writes, max_recv_wr=self.recv_depth, max_send_sge=1, max_recv_sge=1)
        attr = qp_mod.QPInitAttr(qp_type=self.e.IBV_QPT_RC, scq=self.cq, rcq=self.cq, cap=cap)
        return [qp_mod.QP(self.pd, attr) for _ in range(self.nqps)]

    def _hello(self, qps: list, psns: list[int]) -> dict:
        return {"magic": "hoccl-verbs-1", "session": self.session, "name": self.name, "gid": self.gid,
                "qps": [[qp.qp_num, psn] for qp, psn in zip(qps, psns, strict=True)],
                "regions": [[r.address, int(mr.rkey), r.nbytes]
                            for r, mr in zip(self._regions, self._mrs, strict=True)]}

    def _handshake(self, sock: socket.socket, peer: str) -> VerbsConnection:
        sock.settimeout(self.timeout_s)
        qps = self._make_qps()
        psns = [random.randrange(1 << 24) for _ in qps]
        try:
            _send_json(sock, self._hello(qps, psns))
            theirs = _recv_json(sock, peer)
        except TimeoutError:
            raise HocclTimeoutError(f"{peer} did not answer the queue-pair exchange within {self.timeout_s:g} "
                                    "s") from None
        except OSError as exc:
            raise TransportError(f"queue-pair exchange with {peer} failed: {exc}") from None
        if theirs.get("magic") != "hoccl-verbs-1":
            raise TransportError(f"{peer} is not a HOCCL verbs transport (hello {str(theirs)[:80]})")
        if theirs.get("session") != self.session:
            raise TransportError(f"{peer} is in session {theirs.get('session')!r}, this transport in {self.session!r} "
                                 "(different plans?)")
        if len(theirs["qps"]) != len(qps):
            raise TransportError(f"{peer} opened {len(theirs['qps'])} queue pairs, this side {len(qps)}: use the same "
                                 "qps= on every node")
        self._scratch = self._scratch or self.register_scratch()
        for qp, psn, (their_qpn, their_psn) in zip(qps, psns, theirs["qps"], strict=True):
            init, rtr, rts = rc_attrs(self.pv, port=self.port, dest_qpn=their_qpn, dest_psn=their_psn, my_psn=psn,
                                      dgid=theirs["gid"], sgid_index=self.gid_index)
            try:
                qp.to_init(init)
                for i in range(self.recv_depth):
                    qp.post_recv(recv_for_imm(self.pv, i, *self._scratch))
                qp.to_rtr(rtr)
                qp.to_rts(rts)
            except Exception as exc:  # noqa: BLE001
                raise TransportError(f"bringing up a queue pair to {peer} failed: {exc}") from None
        try:  # both sides' receives are posted before either writes
            sock.sendall(b"R")
            if sock.recv(1) != b"R":
                raise TransportError(f"{peer} closed before its queue pairs were ready")
        except OSError as exc:
            raise TransportError(f"{peer}: {exc}") from None
        conn = VerbsConnection(self, qps, peer, theirs.get("name", ""), [tuple(r) for r in theirs["regions"]])
        with self._lock:
            self._conns.append(conn)
            self._pending[conn] = deque()
            for qp in qps:
                self._by_qp[qp.qp_num] = conn
        return conn

    def register_scratch(self) -> tuple[int, int]:
        """The zero-length scatter entry every posted receive needs (see recv_for_imm)."""
        mr_mod = importlib.import_module(f"{self.pv.__name__}.mr")
        self._scratch_buf = np.zeros(64, np.uint8)
        mr = mr_mod.MR(self.pd, 64, self.e.IBV_ACCESS_LOCAL_WRITE, address=int(self._scratch_buf.ctypes.data))
        self._scratch_mr = mr
        return int(self._scratch_buf.ctypes.data), int(mr.lkey)

    def connect(self, address: str, timeout_s: float = 30.0) -> VerbsConnection:
        host, _, port = address.rpartition(":")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                sock = socket.create_connection((host, int(port)), timeout=max(0.1, deadline - time.monotonic()))
                break
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise TransportError(f"nothing listens at {address} (is the peer's transport listening?)") from None
                time.sleep(0.05)
            except OSError as exc:
                raise TransportError(f"cannot reach {address}: {exc}") from None
        with sock:
            return self._handshake(sock, address)

    def accept(self, timeout_s: float = 30.0) -> VerbsConnection:
        if self._listener is None:
            raise TransportError("accept() before listen()")
        self._listener.settimeout(timeout_s)
        try:
            sock, (host, port) = self._listener.accept()
        except TimeoutError:
            raise HocclTimeoutError(f"no peer connected within {timeout_s:g} s") from None
        with sock:
            return self._handshake(sock, f"{host}:{port}")

    # --- completions ------------------------------------------------------------------------------------
    def _drain(self, wait_s: float = 0.0) -> None:
        """Move every completion of the CQ to its connection's queue; wait up to ``wait_s`` for the
        channel first when the CQ is empty (select on the channel's fd releases the GIL)."""
        with self._lock:
            n = self._poll_cq()
            self._drains += 1
        if n or wait_s <= 0:
            return
        if self.channel_fd is None:
            time.sleep(min(wait_s, 50e-6))
        else:
            ready, _, _ = select.select([self.channel_fd], [], [], wait_s)
            if not ready:
                return
            with self._lock:
                self.channel.get_cq_event(self.cq)  # the event is there: this does not block
                self.cq.ack_events(1)
                self.cq.req_notify()
        with self._lock:
            self._poll_cq()

    def _poll_cq(self) -> int:
        e, total = self.e, 0
        while True:
            n, wcs = self.cq.poll(num_entries=64)
            if n <= 0:
                return total
            total += n
            for wc in wcs[:n]:
                self._on_wc(wc, e)

    def _on_wc(self, wc, e) -> None:
        conn = self._by_qp.get(wc.qp_num)
        if conn is None:
            return
        if wc.status != e.IBV_WC_SUCCESS:
            vendor = getattr(wc, "vendor_err", "?")
            self._failed[conn] = TransportError(f"{conn.peer}: a work request failed with status {wc.status} (vendor "
                                                f"error {vendor}); the peer died or the link dropped")
            return
        if wc.opcode == e.IBV_WC_RECV_RDMA_WITH_IMM:
            self._pending[conn].append(Completion("received", -1, int(wc.imm_data), -1, -1, int(wc.byte_len)))
            qp = next(q for q in conn.qps if q.qp_num == wc.qp_num)
            qp.post_recv(recv_for_imm(self.pv, wc.wr_id, *self._scratch))  # keep the receive queue full
            return
        info = self._writes.pop(wc.wr_id, None)
        if info is None:
            return
        _, lane, region, offset, nbytes, imm = info
        conn._outstanding[lane] -= 1
        self._pending[conn].append(Completion("sent", wc.wr_id, imm, region, offset, nbytes))

    def _take(self, conn: VerbsConnection, max_items: int, drain: bool = False, wait_s: float = 0.0) -> list:
        if drain:
            self._drain(wait_s)
        with self._lock:
            q = self._pending.get(conn, deque())
            return [q.popleft() for _ in range(min(max_items, len(q)))]

    def _check_usable(self, conn: VerbsConnection) -> None:
        if self.closed or conn.closed:
            raise TransportError(f"the connection to {conn.peer} is closed")
        err = self._failed.get(conn)
        if err is not None:
            raise err

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for conn in self._conns:
            conn.close()
        if self._listener is not None:
            self._listener.close()
        for obj in (*self._mrs, getattr(self, "_scratch_mr", None), self.cq, self.channel, self.pd, self.ctx):
            if obj is not None:
                with contextlib.suppress(Exception):  # closing anyway
                    obj.close()
        for fd in self._dmabuf_fds:  # after the MRs that hold the dma-bufs
            with contextlib.suppress(OSError):
                os.close(fd)
        self._dmabuf_fds.clear()
