"""A HOCCL communicator faked on CPU torch tensors, ranks as threads (tests only).

``FakeComm`` has the calls the hoccl process group makes (all_gather_into_tensor, all_to_all_single,
all_to_all_v, broadcast, batch_isend_irecv, send, recv) and moves bytes as the real one does, through a
shared ``Fabric``. Collectives meet every rank (and check that they called the same one); sends land in
per-pair queues. ``rendezvous=True`` makes send and recv block until their partner arrives, as the
real communicators' rendezvous does, to show that an issue order cannot deadlock. ``CpuGroup`` is the real
ProcessGroupHoccl with its one CUDA part (streams and events) run at once.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque

import torch

from hoccl_runtime.errors import CollectiveError, HocclTimeoutError
from hoccl_runtime.torch._group import ProcessGroupHoccl

TIMEOUT_S = 10.0


class Fabric:
    def __init__(self, world: int):
        self.world = world
        self.cond = threading.Condition()
        self.calls: dict = {}
        self.mail: dict[tuple[int, int], deque] = {}
        self.posted: dict[tuple[int, int], int] = {}   # rendezvous: receives posted per pair
        self.log: list = []


class FakeComm:
    def __init__(self, fabric: Fabric, rank: int, *, batch: bool = True, rendezvous: bool = False):
        self.fabric, self.rank, self.world, self.device = fabric, rank, fabric.world, 0
        self._seq = 0
        self.rendezvous = rendezvous
        self.closed = False
        self.pairs_alone = batch  # the intra-node communicator's way; else the network ones'
        self.batch_isend_irecv = self._batch if batch else self._sequential
        if not batch:  # the network communicators exchange the split sizes, and a rank that refuses says so
            self.refuse_all_to_all_v = self._refuse_all_to_all_v

    def close(self) -> None:
        self.closed = True

    def _tell(self, name: str, payload) -> int:
        """Post this rank's part of its next collective call without waiting for the others; the call's key."""
        f = self.fabric
        key = self._seq
        self._seq += 1
        with f.cond:
            f.calls.setdefault(key, {})[self.rank] = (name, payload)
            f.cond.notify_all()
        return key

    def _refuse_all_to_all_v(self, exc):
        """The network communicators' refusal: the others' call raises naming this rank (it does not wait)."""
        self._tell("alltoallv", ("!", f"{type(exc).__name__}: {exc}"))

    def _meet(self, name: str, payload):
        f = self.fabric
        key = self._tell(name, payload)
        with f.cond:
            if not f.cond.wait_for(lambda: len(f.calls[key]) == f.world, TIMEOUT_S):
                raise HocclTimeoutError(f"rank {self.rank}: call {key} ({name}) met {sorted(f.calls[key])} only")
            got = f.calls[key]
        names = {v[0] for v in got.values()}
        if len(names) != 1:
            raise CollectiveError(f"call {key}: ranks called {sorted(names)}")
        return [got[r][1] for r in range(f.world)]

    def all_gather_into_tensor(self, output, input, stream=None):
        parts = self._meet("allgather", input.clone())
        output.view(-1).copy_(torch.cat([p.reshape(-1) for p in parts]))

    def all_to_all_single(self, output, input, stream=None):
        parts = self._meet("alltoall", input.clone())
        w, me = self.world, self.rank
        out = output.view(w, -1)
        for j in range(w):
            out[j].copy_(parts[j].reshape(w, -1)[me])

    def all_to_all_v(self, output, input, output_split_bytes, input_split_bytes, stream=None):
        if self.pairs_alone:  # the intra-node communicator: pairwise, a rank with nothing sits out
            src, dst = input.reshape(-1).view(torch.uint8), output.reshape(-1).view(torch.uint8)
            ins = [sum(input_split_bytes[:j]) for j in range(self.world)]
            outs = [sum(output_split_bytes[:j]) for j in range(self.world)]
            ops = [("send", src[ins[j]:ins[j] + n], j) for j, n in enumerate(input_split_bytes) if n and j != self.rank]
            ops += [("recv", dst[outs[j]:outs[j] + n], j) for j, n in enumerate(output_split_bytes)
                    if n and j != self.rank]
            if ops:
                self._batch(ops)
            me, n = self.rank, output_split_bytes[self.rank]
            dst[outs[me]:outs[me] + n].copy_(src[ins[me]:ins[me] + n])
            return
        parts = self._meet("alltoallv", (input.clone().view(-1).view(torch.uint8), list(input_split_bytes)))
        me = self.rank
        for j, (src, splits) in enumerate(parts):
            if isinstance(src, str):
                raise CollectiveError(f"rank {me}: rank {j} refused this All-to-Allv ({splits})")
        out = output.view(-1).view(torch.uint8)
        at = 0
        for j in range(self.world):
            src, splits = parts[j]
            start = sum(splits[:me])
            n = splits[me]
            if n != output_split_bytes[j]:
                raise CollectiveError(f"rank {j} sends {n} bytes to {me}, which expects {output_split_bytes[j]}")
            out[at:at + n].copy_(src[start:start + n])
            at += n

    def broadcast(self, tensor, root, stream=None):
        parts = self._meet("broadcast", tensor.clone())
        tensor.copy_(parts[root])

    def _batch(self, ops, stream=None):
        """As the real batch: every receive is posted (its address published) before any send waits."""
        recvs = [(t, peer) for kind, t, peer in ops if kind == "recv"]
        for _, peer in recvs:
            self._post(peer)
        for kind, t, peer in ops:
            if kind == "send":
                self.send(t, peer, stream)
        for t, peer in recvs:
            self._take(t, peer)

    def _sequential(self, ops, stream=None):
        """As the network communicators' batch: one op after another in the (src, dst) order of every rank."""
        key = {"send": lambda p: (self.rank, p), "recv": lambda p: (p, self.rank)}
        for kind, t, peer in sorted(ops, key=lambda op: key[op[0]](op[2])):
            self.send(t, peer, stream) if kind == "send" else self.recv(t, peer, stream)

    def _post(self, src):
        f = self.fabric
        with f.cond:
            f.log.append(("recv", src, self.rank))
            if self.rendezvous:
                f.posted[(src, self.rank)] = f.posted.get((src, self.rank), 0) + 1
                f.cond.notify_all()

    def send(self, tensor, dst, stream=None):
        f = self.fabric
        pair = (self.rank, dst)
        with f.cond:
            f.log.append(("send", self.rank, dst))
            if self.rendezvous and not f.cond.wait_for(lambda: f.posted.get(pair, 0) > 0, TIMEOUT_S):
                raise HocclTimeoutError(f"rank {self.rank}: send to {dst} found no receive")
            if self.rendezvous:
                f.posted[pair] -= 1
            f.mail.setdefault(pair, deque()).append(tensor.clone())
            f.cond.notify_all()

    def recv(self, tensor, src, stream=None):
        self._post(src)
        self._take(tensor, src)

    def _take(self, tensor, src):
        f = self.fabric
        pair = (src, self.rank)
        with f.cond:
            if not f.cond.wait_for(lambda: f.mail.get(pair), TIMEOUT_S):
                raise HocclTimeoutError(f"rank {self.rank}: nothing came from {src}")
            got = f.mail[pair].popleft()
        if got.nbytes != tensor.nbytes:
            raise CollectiveError(f"rank {src} sent {got.nbytes} bytes, rank {self.rank} expects {tensor.nbytes}")
        tensor.view(-1).copy_(got.view(-1))


class _Event:
    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class _AtOnce:
    """The group's streams, on the CPU: everything has run when it returns."""

    handle = None

    def follow(self):
        pass

    def torch_ops(self):
        return contextlib.nullcontext()

    def end(self, tensors):
        return _Event()


class CpuGroup(ProcessGroupHoccl):
    def __init__(self, comm, rank, size, **kw):
        kw.setdefault("streams", _AtOnce())
        super().__init__(comm, rank, size, **kw)

    def _device(self):
        return torch.device("cpu")

    def _check(self, t, what):
        if not t.is_contiguous():
            from hoccl_runtime.errors import BufferError

            raise BufferError(f"{what} is not contiguous")


def run_ranks(world: int, body, *, batch: bool = True, rendezvous: bool = False, **group_kw):
    """``body(group, rank)`` on ``world`` threads, each with its CpuGroup; returns their results by rank, and
    re-raises the first error."""
    fabric = Fabric(world)
    results: dict[int, object] = {}
    errors: dict[int, BaseException] = {}

    def one(r: int) -> None:
        try:
            g = CpuGroup(FakeComm(fabric, r, batch=batch, rendezvous=rendezvous), r, world, **group_kw)
            results[r] = body(g, r)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors[r] = exc

    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT_S * 3)
        if t.is_alive():
            raise HocclTimeoutError("a rank thread hung")
    if errors:
        raise errors[min(errors)]
    return [results[r] for r in range(world)], fabric
