"""Train a GPT-style decoder with FSDP2 (bf16 mixed precision) and report tokens/s, TFLOP/s, step time, forward and
backward time, CPU slack and peak memory per communication variant.

    torchrun --nproc_per_node 2 examples/train_fsdp.py --size small --comm hoccl,nccl --repeats 3
    torchrun --nproc_per_node 2 examples/train_fsdp.py --size tiny --comm hoccl --share-gpu    # 2 ranks, 1 GPU

``--comm`` takes a list; the variants train the same model from the same seed on the same synthetic data, in
interleaved rounds (``--repeats``), so their numbers come from the same minutes of the machine and their losses can be
compared: an AllGather is a copy, so with one ``--reduce`` the losses agree exactly.

* ``hoccl``: ``hoccl_runtime.torch.use_for_fsdp`` (AllGathers in place on copy engines; window memory on one node).
  With ``--reduce hoccl`` its reduce-scatters run on a second hoccl group (``use_for_fsdp``'s default), so that
  they and the AllGathers do not wait for each other on one group.
* ``hoccl-onegroup`` (with ``--reduce hoccl``): ``hoccl`` with its reduce-scatters on the AllGathers' group
  (``use_for_fsdp(reduce_group=group)``; the default until 2026-12-05).
* ``nccl``: FSDP2 as it comes, on the NCCL default group.
* ``none``: no communication at all: each rank trains its own replica of the model (not sharded; bf16 autocast
  where the others use FSDP's bf16 parameters), the limit that the others' step times are read against (their
  difference to it is the communication they did not hide).
* ``nccl-ce``: NCCL's copy-engine AllGather (symmetric memory, CTA policy zero): torch's
  ``FSDPModule.set_symm_mem_for_comm`` where it has it (after 2.11), else the same through FSDP's custom
  AllGather (:class:`SymmMemAllGather`: outputs from ``symm_mem``'s memory pool, rendezvoused, then NCCL's
  all_gather_into_tensor, which takes its copy-engine path on symmetric memory with CTA policy zero).

``+prefetch=N`` after any variant but ``none`` (``nccl+prefetch=2``, ``hoccl+prefetch=2+HOCCL_...``): FSDP2's
explicit prefetch (``set_modules_to_forward_prefetch`` / ``set_modules_to_backward_prefetch``, torch's recipe), each
block's AllGather issued N blocks ahead in both passes and the root's first N with it; without it, FSDP2's implicit
one-ahead prefetch. ``+window=BYTES`` after a hoccl variant: ``use_for_fsdp(window_bytes=BYTES)``, the registered
window its AllGather outputs come from (0: none, torch's allocator gives them; default 4x the largest module's on
one node, none across nodes).

``--reduce nccl|hoccl``: who reduces the gradients (HOCCL: copy-engine moves plus one local kernel).
``--share-gpu``: every rank on GPU 0 (for correctness on a 1-GPU machine: the copies are then same-GPU copies,
and their speed says nothing about HOCCL). NCCL runs ranks that share a GPU only as separate hosts (a
``NCCL_HOSTID`` each): ``scripts/tcp-nodes.sh`` makes each rank such a node, over TCP for both.

CPU slack (the HOCCL paper's Figure 10) is, per transformer block's forward, the time its first kernel starts on
the GPU minus the time the CPU finished launching the block: positive while the CPU runs ahead of the GPU.
Forward and backward times are measured on the compute stream, so they include any wait for communication that
was not hidden (the paper's Figure 12). ``--gc-every N``: Python's collector off, a collection after every N steps
(torchtitan's way, examples/gc_steps.py); the report says how long the collections took either way. Ends with a
table (rank 0) and ``--json`` (default train_fsdp.json).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gc_steps import Collector, add_option  # noqa: E402
from gpt import GPT, SIZES, Config, batch, deterministic, loss_fn, need_cuda, out_of_memory  # noqa: E402
from variants import check, options, settings, split  # noqa: E402

VARIANTS = ("hoccl", "hoccl-onegroup", "nccl", "nccl-ce", "none")
OPTIONS = ("prefetch", "window")  # +prefetch=N on any variant but none, +window=BYTES on hoccl's (examples/variants.py)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    p.add_argument("--size", default="small", choices=sorted(SIZES), help="model shape (examples/gpt.py)")
    p.add_argument("--layers", type=int, help="override the size's layer count")
    p.add_argument("--batch", type=int, default=4, help="sequences per rank and step")
    p.add_argument("--steps", type=int, default=10, help="steps per variant and round")
    p.add_argument("--warmup", type=int, default=2, help="steps of each variant left out of the figures")
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds over the variants")
    p.add_argument("--comm", default="hoccl", help=f"comma-separated variants: {', '.join(VARIANTS)}; "
                   "hoccl+NAME=VALUE[+NAME=VALUE]: a hoccl group made with those HOCCL_* settings "
                   "(examples/variants.py); +prefetch=N: FSDP2's explicit prefetch of N blocks ahead in both "
                   "passes (default: its implicit one-ahead); hoccl+window=BYTES: use_for_fsdp's window "
                   "(0: none)")
    p.add_argument("--reduce", default=None, choices=("nccl", "hoccl"),
                   help="who reduces gradients (default: nccl, or hoccl with --share-gpu)")
    p.add_argument("--share-gpu", action="store_true", help="every rank on GPU 0 (correctness only)")
    p.add_argument("--fp32", action="store_true", help="no mixed precision (for exact comparisons)")
    p.add_argument("--no-reshard-after-forward", action="store_true")
    p.add_argument("--cpu-offload", action="store_true", help="FSDP2 CPUOffloadPolicy")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic kernels: variants that move the same bytes give identical losses")
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds the process groups (and HOCCL's calls) wait for a peer before raising")
    add_option(p)
    p.add_argument("--json", default="train_fsdp.json", help="where rank 0 writes every figure")
    args = p.parse_args(argv)
    args.comm = [c.strip() for c in args.comm.split(",") if c.strip()]
    why = check(args.comm, VARIANTS, OPTIONS)
    if why:
        p.error(why)
    if args.reduce is None:
        args.reduce = "hoccl" if args.share_gpu else "nccl"
    if "hoccl-onegroup" in args.comm and args.reduce != "hoccl":
        p.error("--comm hoccl-onegroup puts HOCCL's reduce-scatters on the AllGathers' group: it needs --reduce "
                f"hoccl, not --reduce {args.reduce}")
    if args.steps <= args.warmup and args.repeats == 1:
        p.error(f"--steps {args.steps} with --warmup {args.warmup}: nothing left to measure")
    return args


class Slack:
    """CPU slack per block forward: GPU start (an event before the block) minus CPU launch end (after it)."""

    def __init__(self, model: torch.nn.Module):
        self.marks: list[tuple[torch.cuda.Event, float]] = []
        self._open: list[torch.cuda.Event] = []
        for block in model.layers:
            block.register_forward_pre_hook(self._pre)
            block.register_forward_hook(self._post)
        self.on = False

    def _pre(self, module, args):
        if self.on:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._open.append(ev)

    def _post(self, module, args, out):
        if self.on and self._open:
            self.marks.append((self._open.pop(), time.perf_counter()))

    def read(self, base: torch.cuda.Event, t0: float) -> list[float]:
        """Slack in ms of the marks since ``base`` (recorded at host time ``t0`` on an idle GPU)."""
        out = [(t0 + base.elapsed_time(ev) / 1e3 - cpu) * 1e3 for ev, cpu in self.marks]
        self.marks.clear()
        return out


class SymmMemAllGather:
    """FSDP2's AllGather on NCCL symmetric memory, as torch's own ``SymmMemAllGather`` (newer torch) does it, for
    torch 2.11, which has FSDP's custom-AllGather hook but not ``set_symm_mem_for_comm``."""

    def __init__(self, group: dist.ProcessGroup):
        import torch.distributed._symmetric_memory as symm_mem

        self.symm_mem, self.group = symm_mem, group
        symm_mem.set_backend("NCCL")
        dist.barrier(group=group)  # the communicator exists before the first rendezvous

    def allocate(self, size, *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        with torch.cuda.use_mem_pool(self.symm_mem.get_mem_pool(device)):  # reused buffers: one rendezvous each
            return torch.empty(size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group, async_op: bool = False):
        self.symm_mem.rendezvous(output_tensor, group=group.group_name)  # in place: the output only
        return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)


def explicit_prefetch(model, depth: int) -> None:
    """FSDP2's explicit prefetch, torch's recipe: each block's AllGather issued ``depth`` blocks ahead in both passes,
    and the root's first ``depth`` with it (``model``: a GPT whose blocks and root are fully_shard-ed)."""
    blocks = list(model.layers)
    model.set_modules_to_forward_prefetch(blocks[:depth])
    for i, block in enumerate(blocks):
        block.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + depth])
        block.set_modules_to_backward_prefetch(blocks[max(0, i - depth):i][::-1])


def _timeout(args):
    return datetime.timedelta(seconds=args.timeout)


def build(variant: str, args: argparse.Namespace, c: Config, device: torch.device, groups: dict) -> tuple:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    torch.manual_seed(args.seed)
    model = GPT(c).to(device)
    kind, env = split(variant, VARIANTS, OPTIONS)  # (hoccl, its settings) for hoccl+NAME=VALUE
    if kind == "none":  # this rank's own replica: no sharding, no communication
        return model, torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=True), Slack(model)
    if kind in ("hoccl", "hoccl-onegroup"):
        import hoccl_runtime.torch as ht

        if variant not in groups:  # a group per variant: its settings are read when it is made
            ht.configure(reduce=args.reduce, device=device.index)
            with settings(env):
                groups[variant] = dist.new_group(backend="hoccl", timeout=_timeout(args))
        mesh_group = groups[variant] if args.share_gpu else dist.group.WORLD
    elif kind == "nccl-ce":
        if "nccl-ce" not in groups:
            from torch.distributed.distributed_c10d import ProcessGroupNCCL

            opts = ProcessGroupNCCL.Options()
            opts.config.cta_policy = 2  # NCCL_CTA_POLICY_ZERO
            groups["nccl-ce"] = dist.new_group(backend="nccl", pg_options=opts)
        mesh_group = groups["nccl-ce"]
    else:
        mesh_group = dist.group.WORLD
    mesh = DeviceMesh.from_group(mesh_group, "cuda")
    kw: dict = {"mesh": mesh, "reshard_after_forward": not args.no_reshard_after_forward}
    if not args.fp32:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if args.cpu_offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    for block in model.layers:
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    opts = options(variant)
    if opts.get("prefetch"):
        explicit_prefetch(model, opts["prefetch"])
    if kind in ("hoccl", "hoccl-onegroup"):
        import hoccl_runtime.torch as ht

        # the reduce-scatters on use_for_fsdp's own second group, or on the AllGathers' group (hoccl-onegroup)
        rs = groups[variant] if kind == "hoccl-onegroup" else None
        with settings(env):  # the variant's settings reach the second group too
            ht.use_for_fsdp(model, groups[variant], reduce=args.reduce, reduce_group=rs,
                            window_bytes=opts.get("window"))
    elif kind == "nccl-ce":
        from torch.distributed.fsdp import FSDPModule

        mods = [m for m in model.modules() if isinstance(m, FSDPModule)]
        if hasattr(mods[0], "set_symm_mem_for_comm"):
            for m in mods:
                m.set_symm_mem_for_comm()
        else:
            if not hasattr(mods[0], "set_custom_all_gather"):
                raise SystemExit("--comm nccl-ce needs FSDP2's set_custom_all_gather (torch >= 2.6) or "
                                 "set_symm_mem_for_comm")
            gather = SymmMemAllGather(mesh_group)
            for m in mods:
                m.set_custom_all_gather(gather)
    if kind == "nccl" and args.reduce == "hoccl":
        import hoccl_runtime.torch as ht

        if "hoccl" not in groups:
            ht.configure(reduce="hoccl", device=device.index)
            groups["hoccl"] = dist.new_group(backend="hoccl", timeout=_timeout(args))
        rs = ht.HocclReduceScatter(groups["hoccl"])
        for m in model.modules():
            if hasattr(m, "set_custom_reduce_scatter"):
                m.set_custom_reduce_scatter(rs)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=True)
    return model, opt, Slack(model)


def step(model, opt, slack, c: Config, args, index: int, rank: int, device, autocast: bool = False) -> dict:
    """One training step; ``autocast``: bf16 autocast for the forward (the ``none`` variant, whose replica has no
    FSDP mixed-precision policy)."""
    x, y = batch(c, args.batch, index, rank, device)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    base, f1, b1, end = (torch.cuda.Event(enable_timing=True) for _ in range(4))
    base.record()
    slack.on = True
    with torch.autocast("cuda", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
        loss = loss_fn(model(x), y)
    slack.on = False
    f1.record()
    loss.backward()
    b1.record()
    opt.step()
    opt.zero_grad(set_to_none=True)
    end.record()
    end.synchronize()
    seconds = time.perf_counter() - t0
    return {"step": index, "loss": loss.item(), "seconds": seconds, "forward_ms": base.elapsed_time(f1),
            "backward_ms": f1.elapsed_time(b1), "slack_ms": slack.read(base, t0)}


def settings_line(args) -> str:
    keys = ("NCCL_P2P_LEVEL", "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE", "NCCL_CUMEM_ENABLE",
            "NCCL_CTA_POLICY", "CUDA_DEVICE_MAX_CONNECTIONS", "HOCCL_REDUCE")
    env = " ".join(f"{k}={os.environ[k]}" for k in keys if k in os.environ) or "no NCCL_* transport overrides"
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "n/a"
    return (f"torch {torch.__version__}, NCCL {nccl}, GPU {torch.cuda.get_device_name()}, ranks "
            f"{dist.get_world_size()} {'sharing GPU 0' if args.share_gpu else 'one GPU each'}, {env}")


def round_spread(records: list[dict], steps: int, tokens: int) -> tuple[list[float], float]:
    """Each round's tokens/s (the median of its measured steps; ``steps`` records a round) and their spread:
    (max - min) / min, the figure the comparison's rounds are held to."""
    rounds = [[r["seconds"] for r in records[i:i + steps] if r["measured"]] for i in range(0, len(records), steps)]
    per = [tokens / statistics.median(secs) for secs in rounds if secs]
    return per, (max(per) - min(per)) / min(per) if len(per) > 1 else 0.0


def summarize(records: list[dict], c: Config, args, world: int) -> dict:
    timed = [r for r in records if r["measured"]]
    secs = [r["seconds"] for r in timed]
    tokens = args.batch * c.seq * world
    med = statistics.median(secs)
    slack = [s for r in timed for s in r["slack_ms"]]
    per_round, spread = round_spread(records, args.steps, tokens)
    return {"tokens_per_s": tokens / med, "tflops": tokens * c.flops_per_token() / med / 1e12,
            "rounds_tokens_per_s": per_round, "round_spread": spread,
            "step_ms": med * 1e3, "forward_ms": statistics.median(r["forward_ms"] for r in timed),
            "backward_ms": statistics.median(r["backward_ms"] for r in timed),
            "slack_ms_median": statistics.median(slack) if slack else None,
            "slack_ms_p10": sorted(slack)[len(slack) // 10] if slack else None,
            "steps_measured": len(timed), "final_loss": records[-1]["loss"]}


def progress(done: int, total: int, label: str) -> None:
    if not sys.stderr.isatty():
        if done == total or done % max(1, total // 10) == 0:
            print(f"[{done}/{total}] {label}", file=sys.stderr, flush=True)
        return
    width = 30
    fill = width * done // total
    print(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {label:<40}", end="" if done < total else "\n",
          file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    need_cuda(Path(__file__).name)
    if args.deterministic:
        deterministic()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = torch.device("cuda", 0 if args.share_gpu else local)
    torch.cuda.set_device(device)
    nccl = args.reduce == "nccl" or any(v.startswith("nccl") for v in args.comm)
    if args.share_gpu and not nccl:
        dist.init_process_group("gloo", timeout=_timeout(args))
    else:  # NCCL answers for ranks that share a GPU itself (it runs them with a NCCL_HOSTID each)
        dist.init_process_group("nccl", device_id=device, timeout=_timeout(args))
    base = SIZES[args.size]
    c = Config(layers=args.layers or base.layers, dim=base.dim, heads=base.heads, seq=base.seq, vocab=base.vocab)
    groups: dict = {}
    records: dict[str, list[dict]] = {v: [] for v in args.comm}
    total, done, where = len(args.comm) * args.repeats * args.steps, 0, "building the variants' models"
    try:
        runs = {v: build(v, args, c, device, groups) for v in args.comm}
        with Collector(args.gc_every) as collector:
            for _ in range(args.repeats):
                for v in args.comm:
                    model, opt, slack = runs[v]
                    for _ in range(args.steps):
                        i = len(records[v])
                        where = f"the {v} variant's step {i}"
                        rec = step(model, opt, slack, c, args, i, rank, device,
                                   autocast=v == "none" and not args.fp32)
                        collector.step_done()
                        rec["measured"] = i >= args.warmup
                        records[v].append(rec)
                        done += 1
                        if rank == 0:
                            progress(done, total, f"{v} step {i} loss {rec['loss']:.4f}")
    except torch.OutOfMemoryError as exc:
        raise SystemExit(out_of_memory(Path(__file__).name, where, exc, args.comm)) from None
    peak = torch.cuda.max_memory_allocated(device) / 2**30
    summary = {v: summarize(records[v], c, args, world) for v in args.comm}
    losses = {v: [r["loss"] for r in records[v]] for v in args.comm}
    first = args.comm[0]
    equal = {v: losses[v] == losses[first] for v in args.comm}
    if rank == 0:
        print(settings_line(args))
        print(f"model {args.size}: {c.params / 1e6:.1f} M parameters, {c.layers} layers, seq {c.seq}, batch "
              f"{args.batch} per rank, {'fp32' if args.fp32 else 'bf16 params / fp32 reduce'}, reduce by {args.reduce}")
        w = max(9, max(len(v) for v in args.comm) + 1)
        head = f"{'comm':<{w}}{'tokens/s':>11}{'spread':>8}{'TFLOP/s':>9}{'step ms':>9}{'fwd ms':>8}{'bwd ms':>8}" \
               f"{'slack ms':>10}{'loss':>9}  losses == {first}"
        print(head)
        for v in args.comm:
            s = summary[v]
            slack = f"{s['slack_ms_median']:.2f}" if s["slack_ms_median"] is not None else "-"
            print(f"{v:<{w}}{s['tokens_per_s']:>11.0f}{s['round_spread']:>8.1%}{s['tflops']:>9.1f}{s['step_ms']:>9.2f}"
                  f"{s['forward_ms']:>8.2f}"
                  f"{s['backward_ms']:>8.2f}{slack:>10}{s['final_loss']:>9.4f}  {'yes' if equal[v] else 'NO'}")
        print(f"peak memory on rank 0: {peak:.2f} GiB (all variants' models and optimizers together)")
        print(f"rank 0: {collector.line()}")
        Path(args.json).write_text(json.dumps({"settings": settings_line(args), "args": vars(args),
                                               "gc": collector.summary(),
                                               "params": c.params, "summary": summary, "records": records,
                                               "losses_equal": equal, "peak_gib_rank0": peak}, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
