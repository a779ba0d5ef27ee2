"""An in-process fake of the pyverbs classes VerbsTransport uses, over a fabric that copies bytes
between registered regions of one process (tests/transport/test_transport_verbs.py). It follows pyverbs'
signatures (checked against Debian's pyverbs 44) and the RC semantics the transport relies on: a
write with immediate lands its bytes, consumes one posted receive on the peer and completes on both
completion queues; a write to a peer whose queue pairs are gone completes with an error status."""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import sys
import threading
import types

_lock = threading.RLock()
_qps: dict[int, QP] = {}
_mrs: dict[int, tuple[int, int]] = {}       # rkey -> (address, length)
_numbers = itertools.count(0x100)
RETRY_EXC_ERR = 12


class _Obj:
    def __init__(self, *args, **kwargs):
        self.args = args
        self.__dict__.update(kwargs)

    def close(self):
        pass


class Context(_Obj):
    def query_gid(self, port, index):
        return f"fe80:0000:0000:0000:0000:0000:0000:{index + 1:04x}"


class PD(_Obj):
    pass


class MR:
    def __init__(self, pd, length, access, address=None, **kwargs):
        with _lock:
            self.lkey = self.rkey = next(_numbers)
            _mrs[self.rkey] = (address, length)
        self.address, self.length = address, length

    def close(self):
        with _lock:
            _mrs.pop(self.rkey, None)


class Mlx5DmaBufMR(MR):
    """pyverbs.providers.mlx5.mlx5dv_dmabuf.Mlx5DmaBufMR (rdma-core 51+): an MR over a dma-buf fd, addressed
    by ``iova`` through its keys."""

    registered: list[tuple[int, int, int, int]] = []  # (fd, offset, length, iova)

    def __init__(self, pd, offset, length, iova=0, fd=None, access=0, mlx5_access=0):
        if fd is None or fd < 0:
            raise RuntimeError("Failed to register a mlx5 dma-buf MR: no fd")
        os.fstat(fd)  # a real, open descriptor
        super().__init__(pd, length, access, address=iova)
        Mlx5DmaBufMR.registered.append((fd, offset, length, iova))


class CompChannel:
    def __init__(self, ctx):
        self.fd, self._w = os.pipe()
        self.events = 0

    def get_cq_event(self, cq):
        os.read(self.fd, 1)
        self.events += 1

    def close(self):
        for fd in (self.fd, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)


class CQ:
    def __init__(self, ctx, cqe, cq_context, channel, comp_vector):
        self.channel, self.items, self.armed = channel, [], False
        self.lock = threading.Lock()

    def push(self, wc):
        with self.lock:
            self.items.append(wc)
            if self.armed and self.channel is not None:
                self.armed = False
                os.write(self.channel._w, b"e")

    def poll(self, num_entries=1):
        with self.lock:
            got, self.items = self.items[:num_entries], self.items[num_entries:]
        return len(got), got

    def req_notify(self, solicited_only=False):
        with self.lock:
            if self.items and self.channel is not None:
                os.write(self.channel._w, b"e")
            else:
                self.armed = True

    def ack_events(self, n):
        pass

    def close(self):
        pass


class WC(_Obj):
    pass


class QPCap(_Obj):
    pass


class QPInitAttr(_Obj):
    pass


class QPAttr(_Obj):
    pass


class QP:
    def __init__(self, pd, attr):
        with _lock:
            self.qp_num = next(_numbers)
            _qps[self.qp_num] = self
        self.cq, self.recvs, self.dest, self.state = attr.scq, [], None, "RESET"

    def to_init(self, attr):
        self.state = "INIT"

    def to_rtr(self, attr):
        self.dest, self.state = attr.dest_qp_num, "RTR"

    def to_rts(self, attr):
        self.state = "RTS"

    def post_recv(self, wr):
        self.recvs.append(wr.wr_id)

    def post_send(self, wr):
        if self.state != "RTS":
            raise RuntimeError(f"post_send on a queue pair in state {self.state}")
        with _lock:
            peer = _qps.get(self.dest)
            region = _mrs.get(wr.rkey)
        sge = wr.sg[0]
        if peer is None or region is None or not peer.recvs:
            self.cq.push(WC(wr_id=wr.wr_id, status=RETRY_EXC_ERR, opcode=1, qp_num=self.qp_num, byte_len=0,
                            imm_data=0, vendor_err=0x81))
            return
        address, length = region
        if not (address <= wr.remote_addr and wr.remote_addr + sge.length <= address + length):
            raise RuntimeError("remote access out of the registered region")
        ctypes.memmove(wr.remote_addr, sge.addr, sge.length)
        peer.cq.push(WC(wr_id=peer.recvs.pop(0), status=0, opcode=129, qp_num=peer.qp_num, byte_len=sge.length,
                        imm_data=wr.imm_data, vendor_err=0))
        self.cq.push(WC(wr_id=wr.wr_id, status=0, opcode=1, qp_num=self.qp_num, byte_len=0, imm_data=0,
                        vendor_err=0))

    def close(self):
        with _lock:
            _qps.pop(self.qp_num, None)


class SGE:
    def __init__(self, addr, length, lkey):
        self.addr, self.length, self.lkey = addr, length, lkey


class SendWR(_Obj):
    def set_wr_rdma(self, rkey, addr):
        self.rkey, self.remote_addr = rkey, addr


class RecvWR(_Obj):
    pass


def install(monkeypatch, devices=("fake_0",), dmabuf: bool = False, mr_refuses=()) -> types.ModuleType:
    """Register the fake as the package ``fakeverbs`` (with its submodules) and return it. ``dmabuf``: with
    the mlx5 provider's dma-buf MR; ``mr_refuses``: a container of the addresses a plain MR refuses (GPU
    memory without the nvidia_peermem module)."""
    pkg = types.ModuleType("fakeverbs")
    pkg.__path__ = []
    mods = {
        "device": {"Context": Context, "get_device_list": lambda: [types.SimpleNamespace(name=d.encode())
                                                                    for d in devices]},
        "pd": {"PD": PD}, "mr": {"MR": _refusing_mr(mr_refuses)},
        "cq": {"CQ": CQ, "CompChannel": CompChannel, "WC": WC},
        "qp": {"QP": QP, "QPCap": QPCap, "QPInitAttr": QPInitAttr, "QPAttr": QPAttr},
        "wr": {"SGE": SGE, "SendWR": SendWR, "RecvWR": RecvWR},
        "addr": {"GID": lambda s: s, "GlobalRoute": _Obj, "AHAttr": _Obj},
        "libibverbs_enums": {"IBV_ACCESS_LOCAL_WRITE": 1, "IBV_ACCESS_REMOTE_WRITE": 2, "IBV_QPT_RC": 2,
                             "IBV_WR_RDMA_WRITE_WITH_IMM": 1, "IBV_SEND_SIGNALED": 2, "IBV_WC_SUCCESS": 0,
                             "IBV_WC_RDMA_WRITE": 1, "IBV_WC_RECV_RDMA_WITH_IMM": 129, "IBV_QPS_INIT": 1,
                             "IBV_QPS_RTR": 2, "IBV_QPS_RTS": 3, "IBV_MTU_4096": 5},
    }
    if dmabuf:
        mods["providers"], mods["providers.mlx5"] = {"__path__": []}, {"__path__": []}
        mods["providers.mlx5.mlx5dv_dmabuf"] = {"Mlx5DmaBufMR": Mlx5DmaBufMR}
    Mlx5DmaBufMR.registered = []
    monkeypatch.setitem(sys.modules, "fakeverbs", pkg)
    for name, attrs in mods.items():
        mod = types.ModuleType(f"fakeverbs.{name}")
        mod.__dict__.update(attrs)
        setattr(pkg, name, mod)
        monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return pkg


def _refusing_mr(refused) -> type:
    class RefusingMR(MR):
        def __init__(self, pd, length, access, address=None, **kwargs):
            if address in refused:
                raise RuntimeError("Failed to register a MR (errno 14: Bad address)")
            super().__init__(pd, length, access, address=address, **kwargs)
    return RefusingMR


def kill_qps_of(conn) -> None:
    """The peer's queue pairs vanish (its process died): later writes to them fail."""
    with _lock:
        for qp in conn.qps:
            _qps.pop(qp.qp_num, None)
