"""The torch integration's logic on the CPU: every backend operation against a reference (random data, poisoned
outputs, odd sizes, uneven splits with zeros, several dtypes), reduce ops, deferred send/recv, errors.
The communicator is faked (tests/support/torch_fakes.py); the GPU run is tests/gpu/test_gpu_torch.py."""

from __future__ import annotations

import os
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():  # pragma: no cover - a torch built without distributed
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from torch_fakes import CpuGroup, Fabric, FakeComm, run_ranks  # noqa: E402

import hoccl_runtime.torch as ht  # noqa: E402
from hoccl_runtime._splits import alltoallv_pieces  # noqa: E402
from hoccl_runtime.errors import BufferError, CollectiveError, HocclError, UnsupportedOpError  # noqa: E402
from hoccl_runtime.interop import DeviceBuffer  # noqa: E402
from hoccl_runtime.torch import _work  # noqa: E402
from hoccl_runtime.torch._ops import reduce_blocks, reduction, split_bytes  # noqa: E402

POISON = -7


@pytest.fixture(autouse=True)
def _no_cuda_waits(monkeypatch):
    monkeypatch.setattr(_work, "wait_on_current_stream", lambda event, done=None: None)


def _data(rank: int, shape, dtype=torch.float32, salt: int = 0):
    g = torch.Generator().manual_seed(1000 * salt + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


def _poisoned(shape, dtype=torch.float32):
    return torch.full(shape, POISON, dtype=dtype)


def _opts(cls, **fields):
    o = cls()
    for k, v in fields.items():
        setattr(o, k, v)
    return o


NET = pytest.mark.parametrize("batch", [True, False], ids=["intranode", "network"])  # network: no batches


@NET
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.uint8])
def test_all_gather_into_tensor_and_list(world, dtype, batch):
    n = 7  # odd
    def body(g, r):
        inp = _data(r, (n,), dtype)
        out = _poisoned((world * n,), dtype)
        g._allgather_base(out, inp).wait()
        outs = [_poisoned((n,), dtype) for _ in range(world)]
        g.allgather([outs], [inp]).wait()
        inplace = _poisoned((world * n,), dtype)
        inplace[r * n:(r + 1) * n] = inp
        g.all_gather_single(inplace, inplace[r * n:(r + 1) * n]).wait()
        return out, outs, inplace
    res, _ = run_ranks(world, body, batch=batch)
    want = torch.cat([_data(r, (n,), dtype) for r in range(world)])
    for out, outs, inplace in res:
        assert torch.equal(out, want)
        assert torch.equal(torch.cat(outs), want)
        assert torch.equal(inplace, want)


@NET
@pytest.mark.parametrize("world", [2, 3])
def test_all_to_all_single_even_and_uneven_splits(world, batch):
    # rank r sends (r + j) % 3 rows to j (zeros included); rows are 5 wide
    def sends(r):
        return [(r + j) % 3 for j in range(world)]

    def body(g, r):
        inp = _data(r, (sum(sends(r)), 5), torch.bfloat16)
        recv = [sends(j)[r] for j in range(world)]
        out = _poisoned((sum(recv), 5), torch.bfloat16)
        g.alltoall_base(out, inp, recv, sends(r)).wait()
        even_in = _data(r, (world * 3, 5), salt=1)
        even_out = _poisoned((world * 3, 5))
        g.all_to_all_single(even_out, even_in, [], []).wait()
        ins = [_data(r, (j + 1,), salt=2 + j) for j in range(world)]
        outs = [_poisoned((r + 1,)) for _ in range(world)]
        g.alltoall(outs, ins).wait()
        return out, even_out, outs
    res, _ = run_ranks(world, body, batch=batch)
    for r, (out, even_out, outs) in enumerate(res):
        blocks = []
        for j in range(world):
            src = _data(j, (sum(sends(j)), 5), torch.bfloat16)
            start = sum(sends(j)[:r])
            blocks.append(src[start:start + sends(j)[r]])
        assert torch.equal(out, torch.cat(blocks))
        even = [_data(j, (world * 3, 5), salt=1)[3 * r:3 * r + 3] for j in range(world)]
        assert torch.equal(even_out, torch.cat(even))
        for j in range(world):
            assert torch.equal(outs[j], _data(j, (r + 1,), salt=2 + r))


@NET
@pytest.mark.parametrize("root", [0, 2])
def test_broadcast_scatter_gather(root, batch):
    world, n = 3, 9
    def body(g, r):
        t = _data(r, (n,), torch.int32)
        g.broadcast([t], _opts(dist.BroadcastOptions, rootRank=root)).wait()
        out = _poisoned((n,), torch.int32)
        ins = [[_data(j, (n,), torch.int32, salt=5) for j in range(world)]] if r == root else []
        g.scatter([out], ins, _opts(dist.ScatterOptions, rootRank=root)).wait()
        gathered = [[_poisoned((n,), torch.int32) for _ in range(world)]] if r == root else []
        g.gather(gathered, [_data(r, (n,), torch.int32, salt=6)], _opts(dist.GatherOptions, rootRank=root)).wait()
        return t, out, gathered
    res, _ = run_ranks(world, body, batch=batch)
    for r, (t, out, gathered) in enumerate(res):
        assert torch.equal(t, _data(root, (n,), torch.int32))
        assert torch.equal(out, _data(r, (n,), torch.int32, salt=5))
        if r == root:
            for j in range(world):
                assert torch.equal(gathered[0][j], _data(j, (n,), torch.int32, salt=6))


def _reference(parts, name, factor=None):
    acc = torch.stack([p.double() for p in parts])
    if name == "SUM":
        return acc.sum(0)
    if name == "AVG":
        return acc.mean(0)
    if name == "PREMUL_SUM":
        return acc.sum(0) * factor
    return acc.amin(0) if name == "MIN" else acc.amax(0)


OPS = [("SUM", lambda: dist.ReduceOp.SUM, None), ("AVG", lambda: dist.ReduceOp.AVG, None),
       ("PREMUL_SUM", lambda: dist._make_nccl_premul_sum(0.25), 0.25), ("MIN", lambda: dist.ReduceOp.MIN, None),
       ("MAX", lambda: dist.ReduceOp.MAX, None)]


@NET
@pytest.mark.parametrize("name,make,factor", OPS, ids=[o[0] for o in OPS])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_reductions(name, make, factor, dtype, tol, batch):
    world, n = 3, 11  # 11 is not a multiple of 3: all_reduce pads
    def body(g, r):
        inp = _data(r, (world * n,), dtype, salt=7)
        out = _poisoned((n,), dtype)
        g._reduce_scatter_base(out, inp, _opts(dist.ReduceScatterOptions, reduceOp=make())).wait()
        lst_out = _poisoned((n,), dtype)
        g.reduce_scatter([lst_out], [list(inp.view(world, n).clone().unbind(0))],
                         _opts(dist.ReduceScatterOptions, reduceOp=make())).wait()
        t = _data(r, (n,), dtype, salt=8)
        g.allreduce([t], _opts(dist.AllreduceOptions, reduceOp=make())).wait()
        rt = _data(r, (n,), dtype, salt=9)
        g.reduce([rt], _opts(dist.ReduceOptions, reduceOp=make(), rootRank=1)).wait()
        return out, lst_out, t, rt
    res, _ = run_ranks(world, body, batch=batch)
    scale = 1.0 if dtype == torch.float32 else 4.0
    for r, (out, lst_out, t, rt) in enumerate(res):
        blocks = [_data(j, (world * n,), dtype, salt=7)[r * n:(r + 1) * n] for j in range(world)]
        want = _reference(blocks, name, factor)
        assert torch.allclose(out.double(), want, atol=tol * scale, rtol=tol), (name, r)
        assert torch.equal(lst_out, out)
        want_ar = _reference([_data(j, (n,), dtype, salt=8) for j in range(world)], name, factor)
        assert torch.allclose(t.double(), want_ar, atol=tol * scale, rtol=tol)
        if r == 1:
            want_r = _reference([_data(j, (n,), dtype, salt=9) for j in range(world)], name, factor)
            assert torch.allclose(rt.double(), want_r, atol=tol * scale, rtol=tol)
        else:
            assert torch.equal(rt, _data(r, (n,), dtype, salt=9))  # a non-root's tensor is left alone


def test_reduction_ops_named():
    assert reduction(dist.ReduceOp.SUM).name == "SUM"
    assert reduction(dist._make_nccl_premul_sum(0.5)) == ht.Reduction("PREMUL_SUM", 0.5)
    for op in (dist.ReduceOp.BAND, dist.ReduceOp.PRODUCT, dist.ReduceOp.BXOR):
        with pytest.raises(UnsupportedOpError, match="HOCCL reduces with SUM, AVG, PREMUL_SUM, MIN, MAX"):
            reduction(op)
    with pytest.raises(UnsupportedOpError, match="AVG of torch.int32"):
        reduce_blocks(torch.ones(2, 3, dtype=torch.int32), reduction(dist.ReduceOp.AVG),
                      torch.empty(3, dtype=torch.int32))


def test_split_sizes_are_checked():
    t = torch.empty(10, 3)
    assert split_bytes([4, 0, 6], t, 3, "input") == (48, 0, 72)
    assert split_bytes(None, torch.empty(6, 2), 3, "input") == (16, 16, 16)
    with pytest.raises(CollectiveError, match=r"input_split_sizes \[4, 5\] add up to 9 but input has 10 rows"):
        split_bytes([4, 5], torch.empty(10), 2, "input")
    with pytest.raises(CollectiveError, match="has 2 entries for a group of 3"):
        split_bytes([5, 5], t, 3, "input")
    with pytest.raises(CollectiveError, match="negative"):
        split_bytes([12, -2], t, 2, "input")
    with pytest.raises(CollectiveError, match="not a multiple of the group size 3"):
        split_bytes([], t, 3, "output")


def test_alltoallv_pieces_offsets_and_errors():
    inp, out = DeviceBuffer(1000, 60, 0), DeviceBuffer(5000, 40, 0)
    p = alltoallv_pieces(1, 3, inp, out, [10, 20, 30], [15, 20, 5])
    assert p.sends == [(0, DeviceBuffer(1000, 10, 0)), (2, DeviceBuffer(1030, 30, 0))]
    assert p.recvs == [(0, DeviceBuffer(5000, 15, 0)), (2, DeviceBuffer(5035, 5, 0))]
    assert p.local == (DeviceBuffer(1010, 20, 0), DeviceBuffer(5015, 20, 0))
    zero = alltoallv_pieces(0, 2, DeviceBuffer(1, 8, 0), DeviceBuffer(2, 8, 0), [0, 8], [0, 8])
    assert zero.local is None and zero.sends == [(1, DeviceBuffer(1, 8, 0))]
    with pytest.raises(CollectiveError, match="sends itself 20 bytes .* expects 25"):
        alltoallv_pieces(1, 3, inp, DeviceBuffer(5000, 45, 0), [10, 20, 30], [15, 25, 5])
    with pytest.raises(CollectiveError, match="add up to 50 bytes but the buffer holds 60"):
        alltoallv_pieces(1, 3, inp, out, [10, 20, 20], [15, 20, 5])


@pytest.mark.parametrize("rendezvous", [False, True])
@pytest.mark.parametrize("batch", [True, False])
def test_isend_irecv_deferred_into_one_batch(batch, rendezvous):
    """Both ranks isend first, then irecv (as 1F1B stages do): with a rendezvous communicator that blocks a send
    until its receive is posted, sending at once would deadlock; the batch issued at wait() does not."""
    world = 3
    def body(g, r):
        works, outs = [], {}
        for j in range(world):
            if j != r:
                works.append(g.send([_data(r, (5 + j,), salt=j)], j, 0))
        for j in range(world):
            if j != r:
                outs[j] = _poisoned((5 + r,))
                works.append(g.recv([outs[j]], j, 0))
        assert all(w._done.event is None for w in works)  # nothing issued yet
        works[-1].wait()
        assert all(w.is_completed() for w in works)
        return outs
    res, fabric = run_ranks(world, body, batch=batch, rendezvous=rendezvous)
    for r, outs in enumerate(res):
        for j, t in outs.items():
            assert torch.equal(t, _data(j, (5 + r,), salt=r))


@pytest.mark.parametrize("issue", ["1", "0"])
def test_batch_isend_irecv_issues_its_batch_when_it_returns(monkeypatch, issue):
    """``dist.batch_isend_irecv`` (as torch.distributed.pipelining calls it) issues a hoccl group's batch before it
    returns, as NCCL's does: 1F1B's first stage fires its first activation alone and waits on it only after its
    next forward. With HOCCL_BATCH_ISSUE=0 the batch waits for its first wait, as before."""
    monkeypatch.setenv("HOCCL_BATCH_ISSUE", issue)

    from torch.distributed import distributed_c10d as c10d

    def body(g, r):
        c10d._world.pg_group_ranks[g] = {0: 0, 1: 1}  # as new_group registers a group (P2POp looks peers up there)
        try:
            return exchange(g, r)
        finally:
            c10d._world.pg_group_ranks.pop(g, None)

    def exchange(g, r):
        peer, got = 1 - r, _poisoned((6,))
        order = [dist.P2POp(dist.isend, _data(r, (6,)), group=g, group_peer=peer),
                 dist.P2POp(dist.irecv, got, group=g, group_peer=peer)]
        works = dist.batch_isend_irecv(order if r == 0 else order[::-1])  # each rank lists its pair its own way
        issued = [w._done.event is not None for w in works]
        for w in works:
            w.wait()
        lone = dist.batch_isend_irecv([dist.P2POp(dist.isend, _data(r, (3,), salt=1), group=g, group_peer=peer)])
        issued_lone = lone[0]._done.event is not None  # a lone send: out before anything waits on it
        got2 = _poisoned((3,))
        g.recv([got2], peer, 0).wait()
        lone[0].wait()
        return issued, issued_lone, got, got2

    res, _ = run_ranks(2, body)
    for r, (issued, issued_lone, got, got2) in enumerate(res):
        assert issued == [issue == "1"] * 2 and issued_lone == (issue == "1")
        assert torch.equal(got, _data(1 - r, (6,))) and torch.equal(got2, _data(1 - r, (3,), salt=1))


@pytest.mark.parametrize("issue", ["1", "0"])
def test_pipelinings_one_kind_batches_are_issued_at_once(monkeypatch, issue):
    """torch's pipelining batches (``schedules._batch_p2p``): newer torch issues a batch of sends only, or of
    receives only, op by op through ``dist.isend``/``irecv`` (torch 2.13), older through ``batch_isend_irecv``;
    either way a hoccl group issues the ops before ``_batch_p2p`` returns (a lone send deferred would leave a
    forward late), the peers' calls pair up and the bytes arrive. With HOCCL_BATCH_ISSUE=0 they wait for a wait."""
    import sys

    from torch.distributed import distributed_c10d as c10d
    from torch.distributed.pipelining import schedules

    from hoccl_runtime.torch import _lone

    monkeypatch.setenv("HOCCL_BATCH_ISSUE", issue)
    assert "torch.distributed.pipelining.schedules" in sys.modules
    if not hasattr(schedules, "_batch_p2p"):
        pytest.skip("this torch's pipelining has no _batch_p2p")

    def body(g, r):
        c10d._world.pg_group_ranks[g] = {0: 0, 1: 1}
        try:
            _lone.install_pipelining()  # as a group made after pipelining was imported does
            peer, got = 1 - r, _poisoned((4,))
            sent = _data(r, (4,), salt=3)
            first = schedules._batch_p2p([dist.P2POp(dist.isend if r == 0 else dist.irecv, sent if r == 0 else got,
                                                     group=g, group_peer=peer)])
            issued = [w._done.event is not None for w in first]
            for w in first:
                w.wait()
            return issued, got, schedules._batch_p2p._hoccl_issues_now
        finally:
            c10d._world.pg_group_ranks.pop(g, None)

    res, _ = run_ranks(2, body)
    for r, (issued, _, wrapped) in enumerate(res):
        assert wrapped and issued == [issue == "1"], (r, issued)
    assert torch.equal(res[1][1], _data(0, (4,), salt=3))


def test_batch_isend_irecv_of_one_hoccl_group_is_one_call():
    """A batch of plain tensors through one hoccl group goes to the group as one call: its stream follows the
    caller's once per batch (not once per op), the communicator gets every op in one batch, and each op's Work ends
    with it. A batch torch must handle itself (complex tensors: torch views them as real) goes op by op as before,
    with the same bytes."""
    from torch.distributed import distributed_c10d as c10d
    from torch_fakes import _AtOnce

    class Counting(_AtOnce):
        def __init__(self):
            self.follows = 0

        def follow(self):
            self.follows += 1

    def body(g, r):
        c10d._world.pg_group_ranks[g] = {0: 0, 1: 1}
        g._streams = Counting()
        batches = []
        real = g.comm.batch_isend_irecv
        g.comm.batch_isend_irecv = lambda ops, stream=None: (batches.append([op[0] for op in ops]), real(ops))
        try:
            peer = 1 - r
            got = [_poisoned((5,)), _poisoned((7,))]
            ops = [dist.P2POp(dist.isend, _data(r, (5,)), group=g, group_peer=peer),
                   dist.P2POp(dist.isend, _data(r, (7,), salt=2), group=g, group_peer=peer),
                   dist.P2POp(dist.irecv, got[0], group=g, group_peer=peer),
                   dist.P2POp(dist.irecv, got[1], group=g, group_peer=peer)]
            works = dist.batch_isend_irecv(ops)
            whole = (g._streams.follows, [sorted(b) for b in batches])
            results = [w.result() for w in works]
            for w in works:
                w.wait()
            g._streams.follows, batches[:] = 0, []
            cgot = torch.full((3,), complex("nan"), dtype=torch.complex64)
            cops = [dist.P2POp(dist.isend, torch.arange(3).to(torch.complex64) * (1 + r * 1j), group=g,
                               group_peer=peer), dist.P2POp(dist.irecv, cgot, group=g, group_peer=peer)]
            for w in dist.batch_isend_irecv(cops):
                w.wait()
            by_op = (g._streams.follows, len(batches))
            # a lone isend still deferred goes out in the next batch with its ops, as before: one call
            batches[:] = []
            late = _poisoned((2,))
            if r == 0:
                lone = g.send([_data(r, (3,), salt=4)], peer, 0)
                works = [lone, *dist.batch_isend_irecv([dist.P2POp(dist.irecv, late, group=g, group_peer=peer)])]
            else:
                early = _poisoned((3,))
                works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, early, group=g, group_peer=peer),
                                                dist.P2POp(dist.isend, _data(r, (2,), salt=4), group=g,
                                                           group_peer=peer)])
            for w in works:
                w.wait()
            merged = [sorted(b) for b in batches]
            return whole, results, got, by_op, cgot, merged, late, None if r == 0 else early
        finally:
            c10d._world.pg_group_ranks.pop(g, None)

    res, _ = run_ranks(2, body)
    for r, (whole, results, got, by_op, cgot, merged, late, early) in enumerate(res):
        assert merged == [["recv", "send"]], merged
        if r == 0:
            assert torch.equal(late, _data(1, (2,), salt=4))
        else:
            assert torch.equal(early, _data(0, (3,), salt=4))
        assert whole == (1, [["recv", "recv", "send", "send"]])  # one hand-off, one call for the four ops
        assert results[:2] == [[], []] and results[2][0] is got[0] and results[3][0] is got[1]
        assert torch.equal(got[0], _data(1 - r, (5,))) and torch.equal(got[1], _data(1 - r, (7,), salt=2))
        assert by_op == (2, 1)  # torch's way: a hand-off per op, issued as one batch when the wrapper returns
        assert torch.equal(cgot, torch.arange(3).to(torch.complex64) * (1 + (1 - r) * 1j))


def test_batch_isend_irecv_wrapper_leaves_other_groups_alone():
    """The wrapper is installed once, keeps torch's own function underneath, and issues nothing for ops of a group
    that is not a hoccl group."""
    from torch.distributed import distributed_c10d as c10d

    from hoccl_runtime.torch import _batch

    assert dist.batch_isend_irecv is c10d.batch_isend_irecv and dist.batch_isend_irecv._hoccl_issues_batch
    wrapped = dist.batch_isend_irecv
    _batch.install()
    assert dist.batch_isend_irecv is wrapped  # idempotent: not wrapped twice

    class Other:
        flushed = False

        def _flush_now(self):  # a duck-typed look-alike must not be flushed: only ProcessGroupHoccl is
            Other.flushed = True

    class Op:
        group = Other()

    _batch.issue_batches([Op()])
    assert not Other.flushed


def test_a_collective_issues_pending_sends_first():
    def body(g, r):
        peer = 1 - r
        got = _poisoned((4,))
        w1 = g.send([_data(r, (4,))], peer, 0)
        w2 = g.recv([got], peer, 0)
        out = _poisoned((2,))
        g._allgather_base(out, torch.tensor([float(r)])).wait()  # flushes the batch before its own call
        assert w1._done.event is not None and w2._done.event is not None
        return got, out
    res, _ = run_ranks(2, body)
    for r, (got, out) in enumerate(res):
        assert torch.equal(got, _data(1 - r, (4,)))
        assert torch.equal(out, torch.tensor([0.0, 1.0]))


def test_bad_input_is_refused_and_the_next_call_works():
    def body(g, r):
        with pytest.raises(BufferError, match="must hold 2 x the input"):
            g._allgather_base(torch.empty(3), torch.empty(2))
        with pytest.raises(CollectiveError, match="add up to 3 but input has 4 rows"):
            g.alltoall_base(torch.empty(4), torch.empty(4), [2, 2], [1, 2])
        with pytest.raises(UnsupportedOpError, match="recv from any source"):
            g.recv_anysource([torch.empty(1)], 0)
        with pytest.raises(CollectiveError, match="send with rank 5"):
            g.send([torch.empty(1)], 5, 0)
        with pytest.raises(BufferError, match="not contiguous"):
            g.broadcast([torch.empty(4, 4).t()], _opts(dist.BroadcastOptions, rootRank=0))
        with pytest.raises(UnsupportedOpError, match="BAND"):
            g.allreduce([torch.ones(2)], _opts(dist.AllreduceOptions, reduceOp=dist.ReduceOp.BAND))
        out = _poisoned((4,))
        g._allgather_base(out, torch.full((2,), float(r))).wait()
        return out
    res, _ = run_ranks(2, body)
    assert all(torch.equal(o, torch.tensor([0.0, 0.0, 1.0, 1.0])) for o in res)


@pytest.mark.parametrize("bad", ["splits", "dtype"])
def test_a_rank_refusing_its_split_sizes_tells_the_others(bad):
    """Rank 1's split sizes do not add up to its input (or its tensors differ in dtype), found by the group
    before the communicator's call: over the network, where the ranks exchange their sizes in that call, rank 1
    tells the others, which raise a CollectiveError naming rank 1 and its reason at once instead of waiting for
    its sizes until their timeout (issue 36, item 4, found on the GPU); then the group works."""

    def body(g, r):
        inp, out = _data(r, (4,)), _poisoned((4,))
        send = [2, 2]
        if r == 1:
            send = [2, 3] if bad == "splits" else send
            inp = inp.double() if bad == "dtype" else inp
        t0 = time.monotonic()
        with pytest.raises(HocclError) as got:
            g.alltoall_base(out, inp, [2, 2], send).wait()
        took = time.monotonic() - t0
        g._allgather_base(out, torch.full((2,), float(r))).wait()
        return str(got.value), type(got.value).__name__, took, out

    res, _ = run_ranks(2, body, batch=False)
    (err0, name0, took0, out0), (err1, name1, _, _) = res
    assert name0 == "CollectiveError" and "rank 1 refused" in err0, res
    assert ("add up to 5 but input has 4 rows" if bad == "splits" else "float64") in err0, res
    assert took0 < 1.0 and name1 in ("CollectiveError", "BufferError"), res
    assert all(torch.equal(o, torch.tensor([0.0, 0.0, 1.0, 1.0])) for o in (res[0][3], res[1][3]))


def test_tensor_checks_name_the_fix():
    from hoccl_runtime.torch._ops import check_tensor

    with pytest.raises(BufferError, match=r"on cpu .* pass x.cuda\(\)"):
        check_tensor(torch.ones(3), "input")
    with pytest.raises(BufferError, match="not a torch tensor"):
        check_tensor([1, 2], "input")


def test_configure_and_group_options():
    with pytest.raises(HocclError, match="reduce='sum'"):
        ht.configure(reduce="sum")
    with pytest.raises(HocclError, match="gpus_per_node=0"):
        ht.configure(gpus_per_node=0)
    with pytest.raises(HocclError, match="needs an NCCL backend"):
        ht.ProcessGroupHoccl(object(), 0, 2, reduce="nccl", streams=object())


def test_use_for_fsdp_takes_a_reduce_group_only_of_hoccl_its_ranks_and_hoccl_reducing():
    """The checks of use_for_fsdp(reduce_group=): a bad value is refused naming it and the fix; good ones pass."""
    from hoccl_runtime.torch._fsdp import _check_reduce_group

    def group(world):
        return CpuGroup(FakeComm(Fabric(world), 0), 0, world)

    two, other_two, three = group(2), group(2), group(3)
    _check_reduce_group(None, two, "nccl")  # the default: nothing to check
    _check_reduce_group(other_two, two, "hoccl")
    _check_reduce_group(two, two, "hoccl")  # the same group: as the default
    with pytest.raises(HocclError, match=r"reduce='nccl'.*drop reduce_group or pass reduce='hoccl'"):
        _check_reduce_group(other_two, two, "nccl")
    with pytest.raises(HocclError, match="takes a hoccl process group.*not object"):
        _check_reduce_group(object(), two, "hoccl")
    with pytest.raises(HocclError, match=r"holds ranks \[0, 1, 2\] but the AllGather's group \[0, 1\]"):
        _check_reduce_group(three, two, "hoccl")


def test_the_backend_is_registered_for_cuda():
    assert "HOCCL" in dist.Backend._plugins
    assert dist.Backend.backend_capability["hoccl"] == ["cuda"]
    assert dist.Backend("hoccl") == "hoccl"


def test_training_examples_turn_cuda_s_out_of_memory_into_one_line_with_the_fix():
    """CUDA's out-of-memory error in a training example (session 70: FSDP's limit at 1.3b beside two FSDP variants,
    two ranks on an 80 GB H100) becomes one line: where, what torch said first, and what to change."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from gpt import out_of_memory

    said = ("CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which "
            "47.19 MiB is free. Process 2006 has 66.00 MiB memory in use. Including non-PyTorch memory, this process "
            "has 39.56 GiB memory in use.")
    line = out_of_memory("train_fsdp.py", "the none variant's step 0", torch.OutOfMemoryError(said),
                         ["hoccl", "nccl", "none"])
    assert line.startswith("train_fsdp.py: out of GPU memory in the none variant's step 0 (CUDA out of memory. "
                           "Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 47.19 MiB "
                           "is free). ")
    assert "Process 2006" not in line and "\n" not in line
    assert "--comm hoccl,nccl,none" in line and "the none limit on its own" in line and "--batch or --size" in line


def test_training_examples_parse_and_the_model_trains_on_cpu(capsys):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import train_fsdp
    import train_pipeline
    from gpt import GPT, SIZES, batch, loss_fn

    for argv, text in ((["--comm", "gloo"], "choose from hoccl, hoccl-onegroup, nccl, nccl-ce, none"),
                       (["--comm", "hoccl-onegroup,nccl"], "it needs --reduce hoccl, not --reduce nccl")):
        with pytest.raises(SystemExit):
            train_fsdp.parse(argv)
        assert text in capsys.readouterr().err
    args = train_fsdp.parse(["--comm", "hoccl,nccl,none", "--repeats", "2"])
    assert args.comm == ["hoccl", "nccl", "none"] and args.reduce == "nccl"
    assert train_fsdp.parse(["--share-gpu"]).reduce == "hoccl"
    assert train_fsdp.parse(["--comm", "hoccl,hoccl-onegroup", "--reduce", "hoccl"]).comm == ["hoccl", "hoccl-onegroup"]
    # NCCL answers for ranks sharing a GPU itself (it runs them with a NCCL_HOSTID each): not refused here
    assert train_fsdp.parse(["--comm", "nccl", "--share-gpu", "--reduce", "nccl"]).reduce == "nccl"
    with pytest.raises(SystemExit):
        train_fsdp.parse(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "CPU slack and peak memory per communication variant." in help_text  # the whole first paragraph
    with pytest.raises(SystemExit):
        train_pipeline.parse(["--batch", "6", "--microbatches", "4"])
    assert train_pipeline.parse(["--comm", "hoccl,nccl", "--share-gpu"]).share_gpu
    for argv, text in ((["--comm", "hoccl,gloo"], "choose from hoccl, nccl, none, each once"),
                       (["--comm", "hoccl,hoccl"], "each once"),
                       (["--repeats", "0"], "take 1 or more")):
        with pytest.raises(SystemExit):
            train_pipeline.parse(argv)
        assert text in capsys.readouterr().err
    assert train_pipeline.parse(["--comm", "hoccl,nccl", "--repeats", "3"]).comm == ["hoccl", "nccl"]
    # a hoccl group with settings of its own beside the plain one, in the same run (examples/variants.py)
    both = "hoccl,hoccl+HOCCL_NET_CHUNK_BYTES=8388608+HOCCL_NET_LANES=4,nccl"
    assert train_fsdp.parse(["--comm", both]).comm == both.split(",")
    assert train_pipeline.parse(["--comm", both]).comm == both.split(",")
    for bad, text in (("hoccl+CHUNK=1", "give HOCCL settings as NAME=VALUE"),
                      ("nccl+HOCCL_NET_LANES=4", "after hoccl+"), ("hoccl+HOCCL_NET_LANES", "NAME=VALUE"),
                      ("hoccl,hoccl", "name each once")):
        for example in (train_fsdp, train_pipeline):
            with pytest.raises(SystemExit):
                example.parse(["--comm", bad])
            assert text in capsys.readouterr().err
    from variants import settings, split

    assert split("hoccl+HOCCL_NET_LANES=4", ("hoccl",)) == ("hoccl", {"HOCCL_NET_LANES": "4"})
    # FSDP's explicit prefetch depth, an option of the example's own beside the settings (not put in the environment)
    from variants import options

    assert train_fsdp.parse(["--comm", "hoccl+prefetch=2+HOCCL_NET_LANES=4,nccl+prefetch=3,nccl"]).comm[1] == \
        "nccl+prefetch=3"
    assert split("hoccl+prefetch=2+HOCCL_NET_LANES=4", ("hoccl",), ("prefetch",)) == \
        ("hoccl", {"HOCCL_NET_LANES": "4"})
    assert options("nccl+prefetch=3") == {"prefetch": 3} and options("nccl") == {}
    # use_for_fsdp's window, in bytes (0: none), on hoccl variants only
    assert options("hoccl+window=0+prefetch=2") == {"window": 0, "prefetch": 2}
    assert train_fsdp.parse(["--comm", "hoccl,hoccl+window=0"]).comm == ["hoccl", "hoccl+window=0"]
    for bad, text in (("nccl+prefetch=x", "'x' is not a whole number"), ("nccl+prefetch=0", "must be 1 or more"),
                      ("none+prefetch=2", "not none"), ("hoccl+window=-1", "must be 0 or more"),
                      ("nccl+window=0", "window= applies to hoccl, hoccl-onegroup, not nccl")):
        with pytest.raises(SystemExit):
            train_fsdp.parse(["--comm", bad])
        assert text in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train_pipeline.parse(["--comm", "nccl+prefetch=2"])
    assert "this example has no prefetch= option" in capsys.readouterr().err
    os.environ.pop("HOCCL_NET_LANES", None)
    with settings({"HOCCL_NET_LANES": "4"}):
        from hoccl_runtime.comm.net import net_lanes

        assert net_lanes(None) == 4  # what a group made here reads
    assert "HOCCL_NET_LANES" not in os.environ
    assert train_pipeline.parse(["--comm", "hoccl,nccl,none"]).comm == ["hoccl", "nccl", "none"]
    c = SIZES["tiny"]
    torch.manual_seed(0)
    model = GPT(c)
    x, y = batch(c, 2, 0, 0, "cpu")
    assert x.shape == (2, c.seq) and torch.equal(batch(c, 2, 0, 0, "cpu")[0], x)  # the same data on every run
    loss = loss_fn(model(x), y)
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in model.parameters())
    stages = [train_pipeline.stage_module(model, s, 2) for s in range(2)]
    assert torch.allclose(stages[1](stages[0](x)), model(x))  # the stages compose to the model
    assert c.flops_per_token() > 6 * c.params


def test_reductions_go_to_the_nccl_group_when_asked():
    """reduce='nccl': every reduction is handed to the NCCL backend made from the same store, unchanged."""

    calls = []

    class FakeNccl:
        def allreduce(self, tensors, opts):
            calls.append(("allreduce", tensors[0].shape, opts.reduceOp))
            return "nccl-work"

        def _reduce_scatter_base(self, out, inp, opts):
            calls.append(("reduce_scatter_tensor", out.shape, opts.reduceOp))
            return "nccl-work"

        def reduce_scatter(self, outs, ins, opts):
            calls.append(("reduce_scatter", outs[0].shape, opts.reduceOp))
            return "nccl-work"

        def reduce(self, tensors, opts):
            calls.append(("reduce", tensors[0].shape, opts.rootRank))
            return "nccl-work"

    g = CpuGroup(FakeComm(Fabric(2), 0), 0, 2, reduce="nccl", nccl=FakeNccl())
    t = torch.ones(4)
    assert g.allreduce([t], _opts(dist.AllreduceOptions, reduceOp=dist.ReduceOp.AVG)) == "nccl-work"
    assert g._reduce_scatter_base(torch.empty(2), torch.ones(4), _opts(dist.ReduceScatterOptions)) == "nccl-work"
    assert g.reduce_scatter([torch.empty(2)], [[torch.ones(2), torch.ones(2)]], _opts(dist.ReduceScatterOptions)) \
        == "nccl-work"
    assert g.reduce([t], _opts(dist.ReduceOptions, rootRank=1)) == "nccl-work"
    assert [c[0] for c in calls] == ["allreduce", "reduce_scatter_tensor", "reduce_scatter", "reduce"]
    assert calls[0][2] == dist.ReduceOp.AVG and calls[3][2] == 1
    assert torch.equal(t, torch.ones(4))  # HOCCL moved nothing itself
    g.allreduce([t])  # no options: NCCL's bindings take no None, so torch's defaults go (found on the H200)
    assert calls[-1] == ("allreduce", (4,), dist.ReduceOp.SUM)


@NET
def test_a_rank_with_nothing_to_move_still_takes_part(batch):
    """Uneven All-to-Allv where rank 1 sends and receives nothing: on the network path (every call a collective
    of all ranks) it must still make the call, or the others would wait for it."""
    world = 3

    def sends(r):
        return [0, 0, 0] if r == 1 else [2 if j != 1 else 0 for j in range(world)]

    def body(g, r):
        inp = _data(r, (sum(sends(r)), 4), salt=90)
        recv = [sends(j)[r] for j in range(world)]
        out = _poisoned((sum(recv), 4))
        g.alltoall_base(out, inp, recv, sends(r)).wait()
        return out

    res, _ = run_ranks(world, body, batch=batch)
    for r in (0, 2):
        want = torch.cat([_data(j, (sum(sends(j)), 4), salt=90)[sum(sends(j)[:r]):sum(sends(j)[:r + 1])]
                          for j in range(world)])
        assert torch.equal(res[r], want)
    assert res[1].numel() == 0


def test_a_call_holds_its_tensors_until_waited_for(monkeypatch):
    """The group's stream holds a call's tensors while its end event has not completed, so a caller that drops
    them early does not get their memory reused under the copies; Work.wait() ends the hold (the caller's stream
    is then after the call), so when a tensor can be freed is a point of the program, the same on every rank, not
    one of GPU timing. (FSDP's window blocks come back when their tensor dies: with the hold ending only at
    completion, ranks over TCP ran out of window at different calls, session 14.)"""
    import collections
    import types
    import weakref

    from hoccl_runtime.torch import _group, _streams

    class Pending:  # an end event the GPU has not reached
        cuda_event = 0

        def record(self, stream=None):
            pass

        def query(self):
            return False

    monkeypatch.setattr(torch.cuda, "Event", Pending)
    for name in ("event_record", "stream_wait_event"):  # the group's follow() on raw handles: no CUDA here
        monkeypatch.setattr(_streams, name, lambda *args: None)
    monkeypatch.setattr(_streams, "current_raw_stream", lambda: 0)
    held_after = {}

    def body(g, r):
        streams = g._streams
        inp = _data(r, (5,))
        kept = []
        for wait in (False, True):
            out = _poisoned((10,))
            ref = weakref.ref(out)
            work = g._allgather_base(out, inp)
            if wait:
                work.wait()
            del out, work
            kept.append(ref() is not None)
        held_after[r] = len(streams._held)
        return kept

    def holding_streams():
        s = _group._Streams.__new__(_group._Streams)  # the real hold, no CUDA stream
        s.device, s.stream, s.handle, s._held = 0, types.SimpleNamespace(wait_event=lambda e: None), None, \
            collections.deque()
        s.events = _streams.EventPool()
        s._ready = Pending()
        return s

    monkeypatch.setattr("torch_fakes._AtOnce", holding_streams)
    results, _ = run_ranks(2, body, batch=False)
    assert results == [[True, False], [True, False]], results  # held without wait; let go at wait
    assert held_after == {0: 2, 1: 2}  # the events stay (nothing completed); the second list is empty


def _pipeline_variants_worker(rank, world, store_path, out_path):
    import sys
    from argparse import Namespace
    from pathlib import Path

    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import train_pipeline
    from gpt import SIZES

    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)
    args = Namespace(batch=4, microbatches=2, schedule="1f1b", seed=0, lr=1e-2, check=True, warmup=1,
                     share_gpu=False)
    cpu = torch.device("cpu")
    groups = {name: dist.new_group(backend="gloo") for name in ("a", "b")}
    variants = [train_pipeline.Variant(name, groups[name], args, SIZES["tiny"], cpu, rank, world) for name in "ab"]
    variants.append(train_pipeline.Variant("none", None, args, SIZES["tiny"], cpu, rank, world))
    before = [q.detach().clone() for q in variants[-1].module.parameters()]
    for _ in range(2):  # interleaved rounds
        for v in variants:
            v.train(2, cpu)
    results = [v.result() for v in variants]
    results[-1]["moved"] = all(not torch.equal(a, b) for a, b in zip(before, variants[-1].module.parameters()))
    gathered = [None] * world
    dist.all_gather_object(gathered, results)
    if rank == world - 1:
        import json

        Path(out_path).write_text(json.dumps(gathered))
    dist.destroy_process_group()


def test_the_pipeline_example_trains_every_variant_alike_in_rounds(tmp_path):
    """examples/train_pipeline.py's Variant on CPU (gloo groups stand in for hoccl and nccl): each variant trains its
    own copy from the same seed in interleaved rounds, so their losses agree exactly and match the one-process
    reference (--check); the first round's warm-up steps are left out of the times."""
    import json

    import torch.multiprocessing as mp

    out = tmp_path / "out.json"
    mp.start_processes(_pipeline_variants_worker, args=(2, str(tmp_path / "store"), str(out)), nprocs=2,
                       start_method="spawn")
    ranks = json.loads(out.read_text())
    last = ranks[-1]
    a, b, none = last
    assert a["comm"] == "a" and b["comm"] == "b"
    assert len(a["losses"]) == 4 and a["losses"] == b["losses"]  # 2 rounds x 2 steps, the same on both
    assert a["max_loss_diff"] < 1e-5 and max(r[0]["max_grad_rel_diff"] for r in ranks) < 1e-4
    assert len(a["tokens_per_s_rounds"]) == 2 and a["tokens_per_s"] > 0
    # "none", the limit: every stage trains on its own (fixed activations in, fixed gradients back), no group
    assert none["comm"] == "none" and len(none["losses"]) == 4 and none["losses"] != a["losses"]
    assert all(r[-1]["moved"] for r in ranks)  # every parameter of every stage was trained
    assert len(none["tokens_per_s_rounds"]) == 2 and none["tokens_per_s"] > 0


def _use_for_fsdp_worker(rank, world, store_path, out_path):
    """torch's FSDP2 on CPU (gloo, one rank) given HOCCL's hooks by use_for_fsdp: by default (its own second group,
    made through torch's new_group), with reduce_group=the group and with another group (the hoccl groups faked):
    which group each module's AllGather and reduce-scatter were handed, and how the default's group was made."""
    import json
    import sys
    from pathlib import Path

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
    import hoccl_runtime.torch._group as group_module

    made = []

    def create(store, r, size, timeout, ranks):  # what torch's new_group(backend="hoccl") reaches, faked
        made.append({"options": dict(group_module._options), "timeout_s": timeout.total_seconds(), "size": size})
        return CpuGroup(FakeComm(Fabric(size), r), r, size)

    group_module._create = create
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)
    ht.configure(reduce="nccl")  # the user's defaults: the default's group reduces with HOCCL all the same
    result = {}
    first = None
    for name in ("default", "default again", "one", "own"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
        mesh = init_device_mesh("cpu", (world,))
        for block in model:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        if name != "default again":  # a second model on the first group
            g, rs = (CpuGroup(FakeComm(Fabric(world), rank), rank, world) for _ in range(2))
            g.comm.timeout_s, g.comm.device = 42.0, 3
        got = ht.use_for_fsdp(model, g, window_bytes=0, reduce="hoccl",
                              reduce_group={"one": g, "own": rs}.get(name))
        want_rs = {"one": g, "own": rs}.get(name, got._fsdp_reduce_group)
        first = want_rs if name == "default" else first
        result[name + ": the first's"] = want_rs is first
        hooks = [block._get_fsdp_state()._fsdp_param_group for block in model]
        result[name] = {"returned_gather_group": got is g, "rs_is_another": want_rs is not g,
                        "gather": [h._all_gather_comm.group is g for h in hooks],
                        "scatter": [h._reduce_scatter_comm.group is want_rs for h in hooks]}
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    g.comm.windows_help = False  # a network communicator's (comm/net.py): by default no window, torch's allocator
    result["no window across nodes"] = ht.use_for_fsdp(model, g, reduce="hoccl", reduce_group=g)._fsdp_pool is None
    result["made"] = made
    result["options_after"] = dict(group_module._options)
    Path(out_path).write_text(json.dumps(result))
    dist.destroy_process_group()


def test_use_for_fsdp_hands_the_reduce_scatters_their_own_group(tmp_path):
    """use_for_fsdp on torch's own FSDP2 modules: every module gathers on the group; by default it reduce-scatters on
    a second hoccl group made there (once per group, a second model reusing it; with HOCCL reducing, on the group's
    GPU and timeout, the user's configure() defaults left as they were), with reduce_group=rs on ``rs``, with
    reduce_group=group on the group; on a communicator that gains nothing from a window (across nodes), by default
    no window."""
    import json

    import torch.multiprocessing as mp

    out = tmp_path / "out.json"
    mp.start_processes(_use_for_fsdp_worker, args=(1, str(tmp_path / "store"), str(out)), nprocs=1,
                       start_method="spawn")
    got = json.loads(out.read_text())
    want = {"returned_gather_group": True, "gather": [True, True], "scatter": [True, True]}
    assert got["default"] == got["default again"] == {**want, "rs_is_another": True}
    assert got["default again: the first's"] is True and got["own: the first's"] is False  # made once per group
    assert got["own"] == {**want, "rs_is_another": True}
    assert got["one"] == {**want, "rs_is_another": False}
    assert got["made"] == [{"options": {"reduce": "hoccl", "device": 3}, "timeout_s": 42.0, "size": 1}]
    assert got["options_after"] == {"reduce": "nccl"}
    assert got["no window across nodes"] is True


def _spawn_gloo_ranks(worker, world, tmp_path, out):
    """``worker(rank, world, store_path, out)`` in ``world`` spawned processes. gloo's own TCP mesh between spawned
    ranks failed once in a loaded CI run ("Gloo connectFullMesh failed ... Connection closed by peer"): set it up
    again once, on a fresh store."""
    import torch.multiprocessing as mp

    for attempt in range(2):
        try:
            mp.start_processes(worker, args=(world, str(tmp_path / f"store{attempt}"), str(out)), nprocs=world,
                               start_method="spawn")
            return
        except mp.ProcessRaisedException as exc:
            if attempt or "Gloo connectFullMesh failed" not in str(exc):
                raise


def _hsdp_worker(rank, world, store_path, out_path):
    """HSDP on CPU (gloo, 4 ranks, a 2 x 2 mesh: 2 replicas of 2 shards), the hoccl groups faked: use_for_fsdp's
    default makes a second group for every shard group, and keeps the group where FSDP's mesh is a slice (a 2 x 2
    (pp, dp) mesh's "dp": each rank sees only its own row)."""
    import json
    import sys
    from datetime import timedelta
    from pathlib import Path

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
    import hoccl_runtime.torch._group as group_module

    made = []

    def create(store, r, size, timeout, ranks):
        made.append({"ranks": ranks, "reduce": group_module._options.get("reduce")})
        group = CpuGroup(FakeComm(Fabric(size), r), r, size)
        group.comm.timeout_s = 30.0
        return group

    group_module._create = create
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    result = {}
    for name, dims in (("hsdp", ("replicate", "shard")), ("sliced", ("pp", "dp"))):
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=dims)
        fsdp_mesh = mesh if name == "hsdp" else mesh["dp"]
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
        for block in model:
            fully_shard(block, mesh=fsdp_mesh)
        fully_shard(model, mesh=fsdp_mesh)
        rows = [[0, 1], [2, 3]]  # the shard groups either way: the mesh's last dimension
        mine = None
        for row in rows:  # the user's hoccl groups, made alike on every rank
            g = dist.new_group(ranks=row, backend="hoccl")
            mine = g if rank in row else mine
        del made[:]
        ht.use_for_fsdp(model, mine, window_bytes=0, reduce="hoccl")
        rs = mine._fsdp_reduce_group
        hooks = [block._get_fsdp_state()._fsdp_param_group for block in model]
        result[name] = {"another": rs is not mine, "ranks": dist.get_process_group_ranks(rs), "made": list(made),
                        "scatter": [h._reduce_scatter_comm.group is rs for h in hooks]}
    Path(f"{out_path}.{rank}").write_text(json.dumps(result))
    dist.destroy_process_group()


def test_use_for_fsdp_makes_the_second_group_for_every_hsdp_shard_group(tmp_path):
    """use_for_fsdp's default under HSDP (the group a subgroup): every rank makes a hoccl group for each shard group of
    FSDP's mesh, in the mesh's order, as dist.new_group needs, and keeps its own; with a mesh sliced from a larger
    one (pipelining x FSDP, whose rows differ between ranks) it keeps the group, making none."""
    import json

    out = tmp_path / "out"
    _spawn_gloo_ranks(_hsdp_worker, 4, tmp_path, out)
    for r in range(4):
        got = json.loads((tmp_path / f"out.{r}").read_text())
        row = [0, 1] if r < 2 else [2, 3]
        assert got["hsdp"] == {"another": True, "ranks": row, "made": [{"ranks": row, "reduce": "hoccl"}],
                               "scatter": [True, True]}, (r, got)
        assert got["sliced"] == {"another": False, "ranks": row, "made": [], "scatter": [True, True]}, (r, got)


def _bound_default_group_worker(rank, world, store_path, out_path):
    """torch's own new_group(backend="hoccl") under a default group bound to a device, as
    ``init_process_group("nccl", device_id=...)`` leaves it (torchtitan, examples/train_fsdp.py); the communicator is
    faked, the rest is torch's code path."""
    import json
    import sys
    from pathlib import Path

    import torch.distributed as dist

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

    import hoccl_runtime.torch._group as group_module

    group_module._create = lambda store, r, size, timeout, ranks: CpuGroup(FakeComm(Fabric(size), r), r, size)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)
    dist.distributed_c10d._get_default_group().bound_device_id = torch.device("cuda", 0)  # what device_id= sets
    result = {}
    try:
        pg = dist.new_group(backend="hoccl")
        result = {"type": type(pg).__name__, "splitting": pg._get_backend(torch.device("cuda", 0)).supports_splitting,
                  "alloc": pg._get_backend(torch.device("cuda")).supports_tensor_alloc(torch.device("cuda"))}
        try:
            pg._get_backend(torch.device("cpu"))
        except RuntimeError as exc:
            result["cpu"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        result = {"error": f"{type(exc).__name__}: {exc}"}
    Path(f"{out_path}.{rank}").write_text(json.dumps(result))
    dist.destroy_process_group()


def test_a_hoccl_group_under_a_default_group_bound_to_a_device(tmp_path):
    """init_process_group(..., device_id=dev) then new_group(backend="hoccl"): torch reads
    ``pg._get_backend(device_id).supports_splitting`` of the new group, which a Python ProcessGroup has no backend
    for ("No backend type associated with device type cuda" before); the hoccl group is its own CUDA backend."""
    import json

    out = tmp_path / "out"
    _spawn_gloo_ranks(_bound_default_group_worker, 2, tmp_path, out)
    for r in range(2):
        got = json.loads((tmp_path / f"out.{r}").read_text())
        assert got.get("type") == "CpuGroup", got
        assert got["splitting"] is False and got["alloc"] is False
        assert "device type cpu" in got["cpu"] and "gloo" in got["cpu"]


def test_nccl_errors_where_ranks_share_a_gpu_say_how_to_run_it():
    """reduce='nccl' with ranks on one GPU is not refused (NCCL runs them with a NCCL_HOSTID each); what NCCL
    raises is passed on as a HocclError naming NCCL_HOSTID and the HOCCL reducer, and its successes unchanged."""
    from hoccl_runtime.torch._group import _SharedGpuNccl

    class Refusing:
        timeout = 5

        def allreduce(self, tensors, opts):
            raise RuntimeError("NCCL error: invalid usage, Duplicate GPU detected : rank 1 and rank 0 both on CUDA "
                               "device 1a000")

        def reduce(self, tensors, opts):
            return "work"

    nccl = _SharedGpuNccl(Refusing())
    with pytest.raises(HocclError) as exc:
        nccl.allreduce([torch.ones(2)], None)
    text = str(exc.value)
    assert "Duplicate GPU" in text and "NCCL_HOSTID" in text and "reduce='hoccl'" in text
    assert isinstance(exc.value.__cause__, RuntimeError)
    assert nccl.reduce([torch.ones(2)], None) == "work" and nccl.timeout == 5


def test_the_works_of_one_batch_make_a_stream_wait_once(monkeypatch):
    """A batch's Works (a 1F1B send and receive) share one Completion: the first wait() makes the current stream
    wait for its end event, a second one on the same stream enqueues nothing more, one on another stream does."""
    monkeypatch.undo()  # the real wait_on_current_stream, its CUDA calls recorded
    calls, current = [], [11]
    monkeypatch.setattr(_work, "current_raw_stream", lambda: current[0])
    monkeypatch.setattr(_work, "stream_wait_event", lambda stream, event: calls.append((stream, event)))
    event = type("E", (), {"cuda_event": 99})()
    done = _work.Completion(event, [])
    send, recv = _work.HocclWork(done), _work.HocclWork(done, [torch.ones(1)])
    send.wait()
    recv.wait()
    assert calls == [(11, 99)]
    current[0] = 12
    recv.wait()
    assert calls == [(11, 99), (12, 99)]


def test_get_future_follows_the_call_without_blocking_the_host(monkeypatch):
    """Work.get_future(): the current stream waits for the call's end event (GPU side) and the future is completed
    with the outputs at once; the host never synchronizes (it did: get_future blocked until the call ended)."""
    waited, synced = [], []

    class Event:
        def synchronize(self):
            synced.append(self)

        def query(self):
            return False

    monkeypatch.setattr(_work, "wait_on_current_stream", lambda event, done=None: waited.append(event))
    out = torch.ones(3)
    event = Event()
    fut = _work.HocclWork(_work.Completion(event, [out]), [out]).get_future()
    assert fut.done() and fut.value() == [out] and waited == [event] and synced == []
    failed = _work.Completion()
    failed.error = HocclError("peer 1 died")
    with pytest.raises(HocclError):
        _work.HocclWork(failed, [out]).get_future().value()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message where torch has no CUDA GPU")
def test_without_a_cuda_gpu_the_torch_paths_say_what_they_need(capsys):
    """A CPU-only torch: the hoccl backend, the training examples and hoccl-bench say in one line what is needed
    (torch's own errors were an AssertionError and an AttributeError from _cuda_setDevice)."""
    import sys
    from pathlib import Path

    from hoccl_bench import bench

    with pytest.raises(HocclError, match=r"needs a CUDA GPU.*driver 580.*hoccl\[gpu,torch\]"):
        ht.require_cuda("the hoccl backend")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import train_pipeline

    with pytest.raises(SystemExit, match=r"train_pipeline.py needs a CUDA GPU.*CUDA 13 wheels"):
        train_pipeline.main(["--size", "tiny", "--share-gpu"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RANK", "0")  # as under torchrun: the GPU is what is missing
        mp.setenv("WORLD_SIZE", "2")
        with pytest.raises(SystemExit, match=r"hoccl-bench: hoccl-bench sweep needs a CUDA GPU"):
            bench.main(["sweep"])


def test_train_fsdp_reports_each_rounds_tokens_and_their_spread():
    """The comparison holds its rounds to a spread: each round's tokens/s is the median of its measured steps (the
    warm-up steps of the first round left out), the spread (max - min) / min."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import train_fsdp

    secs = [9.0, 1.0, 1.0, 1.0, 1.0, 1.25, 1.25, 1.25]  # 2 rounds of 4 steps, the first step a warm-up
    records = [{"seconds": s, "measured": i >= 1} for i, s in enumerate(secs)]
    per, spread = train_fsdp.round_spread(records, 4, tokens=1000)
    assert per == [1000.0, 800.0] and spread == pytest.approx(0.25)
    assert train_fsdp.round_spread(records[:4], 4, 1000) == ([1000.0], 0.0)  # one round: no spread


def test_a_calls_end_event_is_reused_once_reached_and_unreferenced(monkeypatch):
    """_Streams.end records each call's end on an event it reuses, as torch's ProcessGroupNCCL caches its events: the
    oldest end event once the GPU reached it and nothing but the group refers to it. One a Work (or anything) still
    holds is never recorded again (a later wait on it must not wait for a later call); one not reached yet neither."""
    import collections
    import gc

    from hoccl_runtime.torch import _streams

    class FakeEvent:  # reached once the test says so; records counted
        def __init__(self):
            self.reached, self.records = False, 0

        def record(self, stream=None):
            self.records += 1
            self.reached = False

        def query(self):
            return self.reached

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    s = _streams._Streams.__new__(_streams._Streams)  # no CUDA stream: end() only records on it
    s.stream, s._held, s.events = None, collections.deque(), _streams.EventPool()
    gc.disable()  # reference counts alone decide here
    try:
        first = s.end([])
        assert s.events.made == 1
        second = s.end([])  # the first not reached: a new one
        assert s.events.made == 2 and second is not first
        first.reached = True
        kept = first  # a Work of the first call still holds its event
        third = s.end([])
        assert s.events.made == 3 and third is not first and first.records == 1
        del kept, first
        second.reached = True
        ident, second_records = id(second), second.records
        del second
        fourth = s.end(["tensor"])  # the second: reached, and only the group has it
        assert s.events.made == 3 and id(fourth) == ident and fourth.records == second_records + 1
        assert list(s._held) == [(fourth, ["tensor"])]
        third.reached = fourth.reached = True
        del third, fourth
        for _ in range(10):  # a steady loop whose Works are dropped: no event made, two in turn
            e = s.end(["t"])
            e.reached = True
            del e
        assert s.events.made == 3 and len(s.events._ends) == 2
    finally:
        gc.enable()


@pytest.mark.parametrize("how", ["shutdown", "abort"])
def test_closing_a_group_ends_the_nccl_backend_it_reduces_with(how):
    """shutdown (torch's destroy_process_group) closes the communicator and then shuts down the NCCL backend the group
    reduces with; abort aborts it. Once: a second close does nothing. An NCCL backend left to its destructor warns
    that destroy_process_group() was not called (FSDP over hoccl with NCCL reducing, session 52). A communicator whose
    close raises still has the NCCL backend ended."""
    class Nccl:
        def __init__(self):
            self.calls = []

        def shutdown(self):
            self.calls.append("shutdown")

        def abort(self):
            self.calls.append("abort")

    for fails in (False, True):
        comm, nccl = FakeComm(Fabric(2), 0), Nccl()
        if fails:
            def broken():
                raise HocclError("the peer is gone")
            comm.close = broken
        g = CpuGroup(comm, 0, 2, reduce="nccl", nccl=nccl)
        if fails:
            with pytest.raises(HocclError, match="the peer is gone"):
                getattr(g, how)()
        else:
            getattr(g, how)()
        getattr(g, how)()  # again: nothing more
        assert nccl.calls == [how], (fails, nccl.calls)


def test_work_wait_with_a_timeout_blocks_the_host_until_the_call_is_through_or_raises():
    """Work.wait(timeout) as NCCL's: the caller's stream waits for the call, and with a timeout (a timedelta or
    seconds; torch's kNoTimeout, 0, is none) the host waits too, raising HocclTimeoutError if the call is not
    through by then. Without one it returns at once whatever the GPU does."""
    from datetime import timedelta

    from hoccl_runtime.errors import HocclTimeoutError

    class Slow:  # an end event reached only once ``reached_at`` has passed
        def __init__(self, after_s):
            self.reached_at = time.monotonic() + after_s

        def query(self):
            return time.monotonic() >= self.reached_at

    def work(after_s):
        return _work.HocclWork(_work.Completion(Slow(after_s)))

    t0 = time.monotonic()
    assert work(3600).wait() is True and work(3600).wait(timedelta(0)) is True  # no timeout: the host goes on
    assert time.monotonic() - t0 < 0.5
    assert work(0.05).wait(timeout=timedelta(seconds=5)) is True  # through within it: waited for
    t0 = time.monotonic()
    with pytest.raises(HocclTimeoutError, match=r"timeout=0.1 s\): the call is not through"):
        work(3600).wait(timeout=0.1)
    assert 0.1 <= time.monotonic() - t0 < 1.0
    with pytest.raises(HocclTimeoutError):
        work(3600).wait(timedelta(milliseconds=50))
