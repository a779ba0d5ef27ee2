"""The hoccl backend and the FSDP2 hooks under torchrun, every rank on GPU 0 (run by tests/gpu/test_gpu_torch.py).

    python -m torch.distributed.run --nproc_per_node 4 tests/support/mp_torch_worker.py OUT.json [checks...]

Each check runs on every rank, on fresh random data with poisoned outputs, against a reference every rank can
compute (each rank's data is a function of its rank and a salt); rank 0 writes {check: "ok" | the error}
to OUT.json. A failing check does not stop the others (the groups stay usable: that is checked too).
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hoccl_runtime.torch as ht  # noqa: E402
from hoccl_runtime.errors import BufferError, CollectiveError, HocclError, UnsupportedOpError  # noqa: E402

DEV = torch.device("cuda", 0)
POISON = -3
DTYPES = (torch.float32, torch.bfloat16, torch.int64, torch.uint8)


def data(rank: int, shape, dtype=torch.float32, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(7919 * salt + rank)
    t = torch.randn(shape, generator=g) * 10 if dtype.is_floating_point else torch.randint(0, 100, shape, generator=g)
    return t.to(dtype).to(DEV)


def poisoned(shape, dtype=torch.float32) -> torch.Tensor:
    return torch.full(shape, POISON, dtype=dtype, device=DEV)


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


def same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    expect(a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b), f"{what}: got {a.flatten()[:6].tolist()}.. "
           f"want {b.flatten()[:6].tolist()}..")


# --- the checks ------------------------------------------------------------------------------------------------
def check_all_gather(g, me, w):
    for k, dtype in enumerate(DTYPES):
        for n in (1, 1001, 65537):  # odd sizes
            inp = data(me, (n,), dtype, salt=k)
            out = poisoned((w * n,), dtype)
            dist.all_gather_into_tensor(out, inp, group=g)
            want = torch.cat([data(r, (n,), dtype, salt=k) for r in range(w)])
            same(out, want, f"all_gather_into_tensor {dtype} {n}")
            inplace = poisoned((w * n,), dtype)
            inplace[me * n:(me + 1) * n] = inp
            work = dist.all_gather_into_tensor(inplace, inplace[me * n:(me + 1) * n], group=g, async_op=True)
            work.wait()
            same(inplace, want, f"in place {dtype} {n}")
            outs = [poisoned((n,), dtype) for _ in range(w)]
            dist.all_gather(outs, inp, group=g)
            same(torch.cat(outs), want, f"all_gather list {dtype} {n}")


def check_all_to_all(g, me, w):
    for k, dtype in enumerate(DTYPES):
        rows = 3 * w
        inp = data(me, (rows, 33), dtype, salt=10 + k)
        out = poisoned((rows, 33), dtype)
        dist.all_to_all_single(out, inp, group=g)
        want = torch.cat([data(r, (rows, 33), dtype, salt=10 + k)[3 * me:3 * me + 3] for r in range(w)])
        same(out, want, f"all_to_all_single {dtype}")

        def sends(r):  # uneven, zeros included
            return [(r * 7 + j * 3) % 5 for j in range(w)]
        inp = data(me, (sum(sends(me)), 17), dtype, salt=20 + k)
        recv = [sends(r)[me] for r in range(w)]
        out = poisoned((sum(recv), 17), dtype)
        dist.all_to_all_single(out, inp, recv, sends(me), group=g)
        blocks = []
        for r in range(w):
            src = data(r, (sum(sends(r)), 17), dtype, salt=20 + k)
            blocks.append(src[sum(sends(r)[:me]):sum(sends(r)[:me + 1])])
        same(out, torch.cat(blocks), f"all_to_all_single with splits {dtype}")
        ins = [data(me, (j + 2,), dtype, salt=30 + j) for j in range(w)]
        outs = [poisoned((me + 2,), dtype) for _ in range(w)]
        dist.all_to_all(outs, ins, group=g)
        for j in range(w):
            same(outs[j], data(j, (me + 2,), dtype, salt=30 + me), f"all_to_all list from {j}")


def check_rooted(g, me, w):
    for root in range(w):
        t = data(me, (4099,), torch.bfloat16, salt=40)
        dist.broadcast(t, group_src=root, group=g)
        same(t, data(root, (4099,), torch.bfloat16, salt=40), f"broadcast root {root}")
        # 2 w MiB: on 3 ranks or more within a node a scatter and an in-place AllGather (HOCCL_BROADCAST_SPLIT_BYTES)
        big = data(me, (w << 19,), salt=43) if me == root else poisoned((w << 19,))
        dist.broadcast(big, group_src=root, group=g)
        same(big, data(root, (w << 19,), salt=43), f"broadcast of {w * 2} MiB root {root}")
        out = poisoned((513,), torch.int64)
        ins = [data(j, (513,), torch.int64, salt=41) for j in range(w)] if me == root else None
        dist.scatter(out, ins, group_src=root, group=g)
        same(out, data(me, (513,), torch.int64, salt=41), f"scatter root {root}")
        outs = [poisoned((257,)) for _ in range(w)] if me == root else None
        dist.gather(data(me, (257,), salt=42), outs, group_dst=root, group=g)
        if me == root:
            for j in range(w):
                same(outs[j], data(j, (257,), salt=42), f"gather root {root} from {j}")


def check_p2p(g, me, w):
    peer = me ^ 1
    if peer >= w:
        return
    for n in (5, 1 << 20, 3 << 20 | 7):  # eager and rendezvous sizes
        got = poisoned((n,), torch.uint8)
        ops = [dist.P2POp(dist.isend, data(me, (n,), torch.uint8, salt=50), group=g, group_peer=peer),
               dist.P2POp(dist.irecv, got, group=g, group_peer=peer)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        same(got, data(peer, (n,), torch.uint8, salt=50), f"batch_isend_irecv {n}")
        got = poisoned((n,), torch.uint8)
        if me % 2 == 0:  # blocking send then recv against recv then send
            dist.send(data(me, (n,), torch.uint8, salt=51), group_dst=peer, group=g)
            dist.recv(got, group_src=peer, group=g)
        else:
            dist.recv(got, group_src=peer, group=g)
            dist.send(data(me, (n,), torch.uint8, salt=51), group_dst=peer, group=g)
        same(got, data(peer, (n,), torch.uint8, salt=51), f"send/recv {n}")
        got = poisoned((n,), torch.uint8)  # both isend first, then irecv: deferred, so no deadlock
        a = dist.isend(data(me, (n,), torch.uint8, salt=52), group_dst=peer, group=g)
        b = dist.irecv(got, group_src=peer, group=g)
        b.wait()
        a.wait()
        same(got, data(peer, (n,), torch.uint8, salt=52), f"isend/irecv {n}")


def _ref(parts, name, factor):
    acc = torch.stack([p.double() for p in parts])
    return {"SUM": lambda: acc.sum(0), "AVG": lambda: acc.mean(0), "PREMUL_SUM": lambda: acc.sum(0) * factor,
            "MIN": lambda: acc.amin(0), "MAX": lambda: acc.amax(0)}[name]()


def check_reductions(g, me, w):
    ops = [("SUM", dist.ReduceOp.SUM, None), ("AVG", dist.ReduceOp.AVG, None),
           ("PREMUL_SUM", dist._make_nccl_premul_sum(0.5), 0.5), ("MIN", dist.ReduceOp.MIN, None),
           ("MAX", dist.ReduceOp.MAX, None)]
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2)):
        for name, op, factor in ops:
            n = 1027
            inp = data(me, (w * n,), dtype, salt=60)
            out = poisoned((n,), dtype)
            dist.reduce_scatter_tensor(out, inp, op=op, group=g)
            want = _ref([data(r, (w * n,), dtype, salt=60)[me * n:(me + 1) * n] for r in range(w)], name, factor)
            expect(torch.allclose(out.double(), want, rtol=tol, atol=tol * 10), f"reduce_scatter {name} {dtype}")
            t = data(me, (n,), dtype, salt=61)
            dist.all_reduce(t, op=op, group=g)
            want = _ref([data(r, (n,), dtype, salt=61) for r in range(w)], name, factor)
            expect(torch.allclose(t.double(), want, rtol=tol, atol=tol * 10), f"all_reduce {name} {dtype}")
            t = data(me, (n,), dtype, salt=62)
            dist.reduce(t, group_dst=w - 1, op=op, group=g)
            if me == w - 1:
                want = _ref([data(r, (n,), dtype, salt=62) for r in range(w)], name, factor)
                expect(torch.allclose(t.double(), want, rtol=tol, atol=tol * 10), f"reduce {name} {dtype}")


def check_barrier(g, me, w):
    for _ in range(3):
        dist.barrier(group=g)


def check_errors(g, me, w):
    """Each bad call raises a HocclError subclass naming the problem, and the group works after it."""
    cases = [
        (BufferError, "on cpu", lambda: dist.all_gather_into_tensor(torch.empty(w * 4), torch.empty(4), group=g)),
        (BufferError, "not contiguous", lambda: dist.broadcast(torch.empty(4, 4, device=DEV).t(), group_src=0,
                                                               group=g)),
        (CollectiveError, "add up to", lambda: dist.all_to_all_single(torch.empty(w + 1, device=DEV),
                                                                       torch.empty(w + 1, device=DEV),
                                                                       [1] * w, [1] * w, group=g)),
        (UnsupportedOpError, "BAND", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32, device=DEV),
                                                             op=dist.ReduceOp.BAND, group=g)),
        (BufferError, "must hold", lambda: dist.all_gather_into_tensor(torch.empty(3, device=DEV),
                                                                       torch.empty(2, device=DEV), group=g)),
    ]
    for cls, text, call in cases:
        try:
            call()
        except cls as exc:
            expect(text in str(exc), f"{cls.__name__} without {text!r}: {exc}")
        else:
            raise AssertionError(f"no {cls.__name__} ({text})")
    _all_gather_still_works(g, me, w)


def check_split_refusal(g, me, w):
    """An All-to-Allv whose split sizes do not add up on rank 1 only (issue 36, item 4): rank 1 refuses at once,
    and every other rank raises a HocclError naming rank 1 and its reason within a second (not a 30 s wait ending
    in a plain TimeoutError, nor a GPU waiting forever). Over the network, where the ranks exchange their sizes
    in the call, they raise in it and the group works after. Within a node (pairwise copies, no exchange) rank 1
    tells them through the shared memory: a rank that comes to the call after that skips it (and the group works
    after); one that made it already is failed by its watchdog, which releases its GPU's waits on rank 1, and
    raises at its next call; the group is then unusable on every rank, as after a partner's death (so this check
    comes last there). Which of the two happens is a race; the ranks must agree."""
    import time

    pairwise = getattr(g.comm, "pairs_alone", False)
    send = [4] * w if me != 1 else [4] * (w - 1) + [5]  # rank 1's input splits sum past its input
    inp, out = data(me, (4 * w,), salt=71), poisoned((4 * w,))
    dist.barrier(group=g)  # the ranks enter together, so the time below is the time to hear of rank 1
    t0 = time.monotonic()
    try:
        dist.all_to_all_single(out, inp, [4] * w, send, group=g)
        torch.cuda.synchronize()
        if pairwise:  # this rank made the call: its next call says that the output is not valid
            dist.all_gather_into_tensor(poisoned((w,)), data(me, (1,), salt=72), group=g)
    except HocclError as exc:
        took = time.monotonic() - t0
        expect(me == 1 or ("rank 1" in str(exc) and "add up to" in str(exc)),
               f"rank {me}'s error does not name rank 1 and its reason: {exc}")
        expect(took < 1.0, f"rank {me} heard of rank 1's refusal after {took:.1f} s")
    else:
        raise AssertionError(f"rank {me}: no error for rank 1's bad splits")
    if not pairwise:
        _all_gather_still_works(g, me, w)
        return
    try:
        _all_gather_still_works(g, me, w)
        outcome = "works"
    except HocclError as exc:
        expect("unusable" in str(exc), f"rank {me}: a later call's error does not say the group is unusable: {exc}")
        outcome = "unusable"
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, outcome)  # gloo
    expect(len(set(every)) == 1, f"after rank 1's refusal the ranks disagree on the group: {every}")


def _all_gather_still_works(g, me, w):
    out = poisoned((w * 3,))
    dist.all_gather_into_tensor(out, data(me, (3,), salt=70), group=g)
    same(out, torch.cat([data(r, (3,), salt=70) for r in range(w)]), "all_gather after errors")


def check_nccl_shared_gpu(g, me, w):
    """reduce='nccl' where ranks may share a GPU: the group is made, and NCCL answers for itself. Without a
    NCCL_HOSTID per rank NCCL refuses the duplicate GPU at its first call, and the error passed on names
    NCCL_HOSTID; where it runs (ranks on their own GPUs, or a host id each), the sum is right."""
    ht.configure(reduce="nccl")
    try:
        pg = dist.new_group(backend="hoccl")
        x = data(me, (6,), salt=90)
        try:
            dist.all_reduce(x, group=pg)
        except HocclError as exc:
            expect("NCCL_HOSTID" in str(exc), f"NCCL's refusal without the NCCL_HOSTID hint: {exc}")
        else:
            torch.cuda.synchronize()
            same(x, sum(data(r, (6,), salt=90) for r in range(w)), "all_reduce by NCCL")
    finally:
        ht.configure(reduce="hoccl")


def check_subgroups(g, me, w):
    """new_group(ranks) of every pair split (all ranks call each new_group), and a 2-D DeviceMesh's dimensions."""
    if w < 4:
        return
    from torch.distributed.device_mesh import init_device_mesh

    halves = [dist.new_group([0, 1], backend="hoccl"), dist.new_group([2, 3], backend="hoccl")]
    mine = halves[me // 2]
    out = poisoned((2 * 5,), torch.bfloat16)
    dist.all_gather_into_tensor(out, data(me, (5,), torch.bfloat16, salt=80), group=mine)
    base = (me // 2) * 2
    same(out, torch.cat([data(base + r, (5,), torch.bfloat16, salt=80) for r in range(2)]), "subgroup all_gather")
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"), backend_override={"dp": "hoccl",
                                                                                             "tp": "hoccl"})
    for dim in ("dp", "tp"):
        pg = mesh.get_group(dim)
        ranks = dist.get_process_group_ranks(pg)
        out = poisoned((2 * 7,))
        dist.all_gather_into_tensor(out, data(me, (7,), salt=81), group=pg)
        same(out, torch.cat([data(r, (7,), salt=81) for r in ranks]), f"mesh {dim} all_gather")
        t = data(me, (9,), salt=82)
        dist.all_reduce(t, group=pg)
        want = sum(data(r, (9,), salt=82).double() for r in ranks)
        expect(torch.allclose(t.double(), want, rtol=1e-5, atol=1e-4), f"mesh {dim} all_reduce")


def _train_against_reference(model, ref, me, w, shard, shards, tol, what, steps=5):
    """``steps`` SGD steps of the sharded ``model`` (rank ``me`` of ``w``, holding shard ``shard`` of ``shards``) and
    of the unsharded ``ref`` on every rank's batch (FSDP averages the ranks' gradients): each step's loss, then this
    rank's shard of every parameter, within ``tol`` of the reference."""
    from gpt import SIZES, batch, loss_fn

    c = SIZES["tiny"]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(steps):
        x, y = batch(c, 2, step, me, DEV)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        xs = [batch(c, 2, step, r, DEV) for r in range(w)]
        ref_losses = [loss_fn(ref(xr), yr) for xr, yr in xs]
        torch.stack(ref_losses).mean().backward()
        ref_opt.step()
        ref_opt.zero_grad()
        expect(abs(loss.item() - ref_losses[me].item()) <= tol * max(1.0, abs(loss.item())),
               f"{what} step {step}: loss {loss.item()} vs reference {ref_losses[me].item()}")
    # this rank's shard against the same rows of the reference (FSDP2 shards dim 0 as torch.chunk does; a
    # DTensor's full_tensor() would take the functional collectives, which need a C++ backend)
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        chunks = torch.chunk(q.detach(), shards, dim=0)
        local = p.to_local().to(DEV)
        if shard < len(chunks) and chunks[shard].numel():
            want = chunks[shard]
            err = (local[:want.shape[0]] - want).abs().max().item()
            expect(err <= tol * max(1.0, q.abs().max().item()), f"{what} {name}: max diff {err}")


def check_fsdp(g, me, w):
    """5 steps of FSDP2 with HOCCL's AllGather and reduce-scatter (fp32): losses and final parameters equal an
    unsharded one-process reference on the same data, also with FSDP2's explicit prefetch two blocks ahead (two of
    HOCCL's AllGathers in flight at once); then bf16 mixed precision (and reshard_after_forward=False, CPU offload)
    within bf16 tolerance of an fp32 reference."""
    import copy

    from gpt import GPT, SIZES
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    c = SIZES["tiny"]
    for variant in ("fp32", "fp32-prefetch", "bf16", "bf16-keep", "offload"):
        _TRACE_AT[0] = variant
        torch.manual_seed(0)
        model = GPT(c).to(DEV)
        ref = copy.deepcopy(model)
        kw = {"mesh": DeviceMesh.from_group(g, "cuda")}
        if not variant.startswith("fp32"):
            kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if variant == "bf16-keep":
            kw["reshard_after_forward"] = False
        if variant == "offload":
            kw["offload_policy"] = CPUOffloadPolicy()
        for block in model.layers:
            fully_shard(block, **kw)
        fully_shard(model, **kw)
        if variant == "fp32-prefetch":  # examples/train_fsdp.py's +prefetch=2
            from train_fsdp import explicit_prefetch

            explicit_prefetch(model, 2)
        ht.use_for_fsdp(model, g)
        tol = 1e-5 if variant.startswith("fp32") else 3e-2
        _train_against_reference(model, ref, me, w, me, w, tol, f"fsdp {variant}")
        pool = g._fsdp_pool
        if g.comm.windows_help:  # one node's communicator: a window by default (none across nodes)
            expect(pool is not None and pool.misses == 0 and pool.peak > 0,
                   f"fsdp {variant}: window pool misses {pool.misses if pool else None}")
        else:
            expect(pool is None, f"fsdp {variant}: a window across nodes "
                                 f"({pool.nbytes if pool is not None else 0} bytes), where none helps")


def check_hsdp(g, me, w):
    """HSDP over hoccl on 4 ranks, a 2 x 2 mesh (2 replicas of 2 shards; with HOCCL_GPUS_PER_NODE=2 a replica per
    node, the replicas' all-reduce across nodes): use_for_fsdp's default puts each replica's reduce-scatters on a
    second hoccl group of its shard ranks, made here for both replicas; 5 fp32 steps then equal an unsharded
    reference on all 4 ranks' batches."""
    import copy

    from gpt import GPT, SIZES
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    expect(w == 4, f"the HSDP check needs 4 ranks, not {w}")
    mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("replicate", "shard"),
                            backend_override={"replicate": "hoccl", "shard": "hoccl"})
    rows = [[0, 1], [2, 3]]  # the shard groups: the mesh's last dimension
    mine = None
    for row in rows:  # the user's hoccl groups of the shard ranks, made alike on every rank
        grp = dist.new_group(ranks=row, backend="hoccl", timeout=datetime.timedelta(seconds=30))
        mine = grp if me in row else mine
    torch.manual_seed(0)
    model = GPT(SIZES["tiny"]).to(DEV)
    ref = copy.deepcopy(model)
    for block in model.layers:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    ht.use_for_fsdp(model, mine)
    rs = mine._fsdp_reduce_group
    expect(rs is not mine and dist.get_process_group_ranks(rs) == rows[me // 2],
           f"hsdp: the reduce-scatters' group holds {dist.get_process_group_ranks(rs)}, not a second group of "
           f"{rows[me // 2]}")
    _train_against_reference(model, ref, me, w, me % 2, 2, 1e-5, "hsdp")


def check_fsdp_no_kernel(g, me, w):
    """A profiler trace of FSDP's AllGather through the hook (in place, window memory) shows no kernel."""
    from torch.profiler import ProfilerActivity, profile

    from hoccl_runtime.torch import HocclAllGather, WindowPool

    pool = WindowPool(g.comm, 8 << 20, 0)
    gather = HocclAllGather(g, pool)
    n = 1 << 18
    out = gather.allocate((w * n,), dtype=torch.bfloat16, device=DEV)
    out[me * n:(me + 1) * n] = data(me, (n,), torch.bfloat16, salt=90)
    torch.cuda.synchronize()
    for _ in range(3):  # warm: plan, mappings, graph
        gather(out, out[me * n:(me + 1) * n], g)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        gather(out, out[me * n:(me + 1) * n], g)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    expect(not kernels, f"kernels in the FSDP AllGather trace: {kernels[:5]}")
    same(out, torch.cat([data(r, (n,), torch.bfloat16, salt=90) for r in range(w)]), "hook all_gather")
    print(f"rank {me}: FSDP AllGather trace: {len(kernels)} kernels", flush=True)
    del out
    pool.close()


_TRACE_AT = [""]  # what the calls traced by HOCCL_TEST_TRACE_CALLS are part of


def _trace_calls(comm) -> list:
    """Record every collective call of a network communicator (thread, check part, key) for OUT.calls.rankN:
    ranks that issue calls in different orders show where."""
    import threading

    calls = []
    real = comm._call

    def traced(key, *args, **kwargs):
        calls.append(f"{threading.current_thread().name} {_TRACE_AT[0]} {key[0]} {str(key[1:])[:60]}")
        return real(key, *args, **kwargs)

    comm._call = traced
    return calls


CHECKS = {name[6:]: fn for name, fn in globals().items() if name.startswith("check_")}


def main() -> int:
    out_path = sys.argv[1]
    names = sys.argv[2:] or list(CHECKS)
    torch.cuda.set_device(DEV)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=90))
    ht.configure(device=0, reduce="hoccl")
    g = dist.new_group(backend="hoccl", timeout=datetime.timedelta(seconds=30))
    me, w = dist.get_rank(g), dist.get_world_size(g)
    traced = _trace_calls(g.comm) if os.environ.get("HOCCL_TEST_TRACE_CALLS") and \
        hasattr(g.comm, "_call") else None
    results = {}
    for name in names:
        faulthandler.dump_traceback_later(120)  # a check that hangs leaves every thread's stack in the log
        _TRACE_AT[0] = name
        try:
            CHECKS[name](g, me, w)
            torch.cuda.synchronize()
            results[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - recorded, the next check runs
            where = traceback.extract_tb(exc.__traceback__)[-3:]
            results[name] = f"{type(exc).__name__}: {exc} (at " + " <- ".join(
                f"{Path(f.filename).name}:{f.lineno}" for f in reversed(where)) + ")"
            traceback.print_exc()
        faulthandler.cancel_dump_traceback_later()
        if traced is not None:
            Path(f"{out_path}.calls.rank{dist.get_rank()}").write_text("\n".join(traced))
        dist.barrier()  # gloo: the ranks stay in step whatever failed
    Path(f"{out_path}.rank{dist.get_rank()}").write_text(json.dumps(results, indent=1))  # each rank's own view
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, results)
    if dist.get_rank() == 0:
        merged = {n: next((r[n] for r in every if r[n] != "ok"), "ok") for n in names}
        Path(out_path).write_text(json.dumps(merged, indent=1))
        print(json.dumps(merged, indent=1), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
