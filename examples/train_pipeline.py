"""Train the GPT-style decoder over pipeline stages with torch.distributed.pipelining (GPipe or 1F1B), the
activations and gradients between stages moving through a ``hoccl`` process group (copy engines, no SM), or
through NCCL's point-to-point to compare.

    torchrun --nproc_per_node 2 examples/train_pipeline.py --size small --schedule 1f1b --comm hoccl,nccl --repeats 3
    torchrun --nproc_per_node 2 examples/train_pipeline.py --size tiny --share-gpu --check   # 2 ranks, 1 GPU

Each rank runs one stage (embeddings and the first blocks on rank 0, the last blocks and the head on the last
rank). ``--comm`` takes a list (``hoccl``, ``nccl``, ``none``): each variant trains its own copy of the model from
the same seed on the same batches, in interleaved rounds (``--repeats``, ``--steps`` each), so their losses can be
compared and their times come from the same minutes of the machine. ``none`` is the limit: every rank runs its
stage's forwards and backwards on the same microbatch shapes with no communication at all (a fixed activation in,
a fixed gradient back), so the step times of the others less its step time are their exposed communication and
waiting (the pipeline's bubble included: ranks that share a GPU fill each other's bubble; on GPUs of their own
``none`` has no bubble, and the difference is the bubble plus communication). ``--check`` also trains the whole
model in one process on the same microbatches and compares every loss and every gradient of this rank's stage with
it. Ends with a table (last rank: tokens/s, the mean and min-max of the rounds' medians; step time; losses against
the first variant's) and ``--json``. ``--gc-every N``: Python's collector off, a collection after every N steps
(torchtitan's way, examples/gc_steps.py); the report says how long the collections took either way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gc_steps import Collector, add_option  # noqa: E402
from gpt import GPT, SIZES, Config, batch, deterministic, loss_fn, need_cuda, out_of_memory  # noqa: E402
from variants import check as check_variants  # noqa: E402
from variants import settings, split  # noqa: E402


class First(nn.Module):
    def __init__(self, full: GPT, blocks: range):
        super().__init__()
        self.tok, self.pos = full.tok, full.pos
        self.layers = nn.ModuleList(full.layers[i] for i in blocks)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for b in self.layers:
            x = b(x)
        return x


class Middle(nn.Module):
    def __init__(self, full: GPT, blocks: range):
        super().__init__()
        self.layers = nn.ModuleList(full.layers[i] for i in blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.layers:
            x = b(x)
        return x


class Last(Middle):
    def __init__(self, full: GPT, blocks: range):
        super().__init__(full, blocks)
        self.norm, self.head = full.norm, full.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(super().forward(x)))


COMMS = ("hoccl", "nccl", "none")


def stage_module(full: GPT, stage: int, stages: int) -> nn.Module:
    n = len(full.layers)
    if n < stages:
        raise SystemExit(f"{n} blocks cannot fill {stages} stages: give --layers >= {stages}")
    cuts = [n * s // stages for s in range(stages + 1)]
    blocks = range(cuts[stage], cuts[stage + 1])
    if stage == 0:
        return First(full, blocks)
    return Last(full, blocks) if stage == stages - 1 else Middle(full, blocks)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", default="small", choices=sorted(SIZES))
    p.add_argument("--layers", type=int, help="override the size's layer count")
    p.add_argument("--schedule", default="1f1b", choices=("gpipe", "1f1b"))
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--batch", type=int, default=8, help="sequences per step (split into microbatches)")
    p.add_argument("--steps", type=int, default=6, help="steps per variant and round")
    p.add_argument("--warmup", type=int, default=2, help="steps of each variant's first round left out of the times")
    p.add_argument("--repeats", type=int, default=1, help="interleaved rounds over the variants")
    p.add_argument("--comm", default="hoccl", help=f"comma-separated variants: {', '.join(COMMS)}; "
                   "hoccl+NAME=VALUE[+NAME=VALUE]: a hoccl group made with those HOCCL_* settings "
                   "(examples/variants.py)")
    p.add_argument("--share-gpu", action="store_true", help="every rank on GPU 0 (correctness only; NCCL runs "
                   "there only with a NCCL_HOSTID per rank, as scripts/tcp-nodes.sh gives)")
    p.add_argument("--check", action="store_true", help="compare losses and gradients with a one-process reference")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deterministic", action="store_true",
                   help="deterministic kernels: variants that move the same bytes give identical losses")
    add_option(p)
    p.add_argument("--json", default="train_pipeline.json")
    args = p.parse_args(argv)
    if args.batch % args.microbatches:
        p.error(f"--batch {args.batch} is not a multiple of --microbatches {args.microbatches}")
    args.comm = [c for c in args.comm.split(",") if c]
    why = check_variants(args.comm, COMMS)
    if why:
        p.error(why)
    if args.repeats < 1 or args.steps < 1:
        p.error("--repeats and --steps take 1 or more")
    return args


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Variant:
    """One comm's pipeline: its own copy of the model (same seed), stage, schedule and optimizer, and its figures."""

    def __init__(self, name: str, group, args, c: Config, device: torch.device, rank: int, world: int):
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        self.name, self.args, self.c, self.rank, self.world = name, args, c, rank, world
        torch.manual_seed(args.seed)
        full = GPT(c).to(device)
        self.reference = None
        if args.check:
            import copy

            self.reference = copy.deepcopy(full)
        self.module = stage_module(full, rank, world)
        self.opt = torch.optim.SGD(self.module.parameters(), lr=args.lr)
        self.step_no = 0
        self.times: list[list[float]] = []  # per round
        self.losses: list[list[float]] = []
        self.worst = {"loss": 0.0, "grad": 0.0}
        if name == "none":  # a fixed activation in and a fixed gradient back, one microbatch's shape
            self.schedule = self.reference = self.ref_opt = self.ref_stage = None
            g = torch.Generator(device=device).manual_seed(args.seed + 1)
            shape = (args.batch // args.microbatches, c.seq, c.dim)
            self._fixed = (torch.randn(shape, device=device, generator=g),
                           torch.randn(shape, device=device, generator=g) * 1e-3)
            return
        # no example inputs or outputs: the schedule's first step infers the shapes between stages (a metadata
        # exchange over the group; given examples, torch 2.13 on CPU/gloo gave the first stage no gradient from
        # the second step on)
        stage = PipelineStage(self.module, rank, world, device, group=group)
        schedule_cls = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
        self.schedule = schedule_cls(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)
        self.ref_opt = torch.optim.SGD(self.reference.parameters(), lr=args.lr) if self.reference is not None \
            else None
        self.ref_stage = stage_module(self.reference, rank, world) if self.reference is not None else None

    def train(self, steps: int, device: torch.device, collector: Collector | None = None) -> None:
        args, rank, world = self.args, self.rank, self.world
        times = []
        for _ in range(steps):
            i = self.step_no
            self.step_no += 1
            x, y = batch(self.c, args.batch, i, 0, device)  # every stage sees the same global batch
            sync(device)
            t0 = time.perf_counter()
            losses: list = []
            if self.schedule is None:
                self._alone(x, y, losses)
            elif rank == 0:
                self.schedule.step(x)
            elif rank == world - 1:
                self.schedule.step(target=y, losses=losses)
            else:
                self.schedule.step()
            sync(device)
            times.append(time.perf_counter() - t0)
            if collector is not None:
                collector.step_done()
            if self.reference is not None:
                self._check(x, y, losses)
            self.opt.step()
            self.opt.zero_grad()
            if rank == world - 1:
                self.losses.append([lo.item() for lo in losses])
                print(f"[{self.name} {i + 1}] loss {statistics.mean(self.losses[-1]):.4f}", file=sys.stderr,
                      flush=True)
        self.times.append(times[args.warmup:] if not self.times else times)

    def _alone(self, x: torch.Tensor, y: torch.Tensor, losses: list) -> None:
        """The ``none`` variant's step: this stage's forward and backward of every microbatch, a fixed activation
        in (not the first stage) and a fixed gradient back (not the last), each microbatch's forward then its
        backward (nothing to wait for, so the order is the GPU's work alone)."""
        rank, world, mbs = self.rank, self.world, self.args.microbatches
        act, grad = self._fixed
        for xm, ym in zip(x.chunk(mbs), y.chunk(mbs), strict=True):
            inp = xm if rank == 0 else act.detach().requires_grad_()
            out = self.module(inp)
            if rank == world - 1:
                loss = loss_fn(out, ym) / mbs
                loss.backward()
                losses.append(loss.detach() * mbs)
            else:
                out.backward(grad)

    def _check(self, x, y, losses) -> None:
        args, reference = self.args, self.reference
        ref_losses = [loss_fn(reference(xm), ym) for xm, ym in zip(x.chunk(args.microbatches),
                                                                   y.chunk(args.microbatches), strict=True)]
        torch.stack(ref_losses).mean().backward()
        if self.rank == self.world - 1:
            got = torch.stack([lo.detach() for lo in losses])
            self.worst["loss"] = max(self.worst["loss"], (got - torch.stack(ref_losses).detach()).abs().max().item())
        for (name, p), q in zip(self.module.named_parameters(), self.ref_stage.parameters(), strict=True):
            if p.grad is None:
                raise SystemExit(f"rank {self.rank}: no gradient for {name}")
            scale = q.grad.abs().max().item() or 1.0
            self.worst["grad"] = max(self.worst["grad"], (p.grad - q.grad).abs().max().item() / scale)
        self.ref_opt.step()
        self.ref_opt.zero_grad()

    def result(self) -> dict:
        tokens = self.args.batch * self.c.seq
        all_times = [t for r in self.times for t in r] or [float("nan")]
        per_round = [tokens / statistics.median(r) for r in self.times if r]
        return {"comm": self.name, "schedule": self.args.schedule, "stages": self.world,
                "microbatches": self.args.microbatches,
                "tokens_per_s": statistics.mean(per_round) if per_round else tokens / statistics.median(all_times),
                "tokens_per_s_rounds": per_round, "step_ms": statistics.median(all_times) * 1e3,
                "losses": self.losses, "max_loss_diff": self.worst["loss"] if self.args.check else None,
                "max_grad_rel_diff": self.worst["grad"] if self.args.check else None,
                "share_gpu": self.args.share_gpu}


def main(argv: list[str] | None = None) -> int:
    import hoccl_runtime.torch as ht

    args = parse(argv)
    need_cuda(Path(__file__).name)
    if args.deterministic:
        deterministic()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", 0 if args.share_gpu else int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    dist.init_process_group("gloo")  # the CPU side (barriers); stages exchange through the variant's group
    groups = {}
    for v in args.comm:
        kind, env = split(v, COMMS)
        if kind == "hoccl":  # a group per variant: its settings are read when it is made
            ht.configure(device=device.index, reduce="hoccl" if args.share_gpu else None)
            with settings(env):
                groups[v] = dist.new_group(backend="hoccl")
        elif kind == "nccl":
            groups[v] = dist.new_group(backend="nccl")
    base = SIZES[args.size]
    c = Config(layers=args.layers or base.layers, dim=base.dim, heads=base.heads, seq=base.seq, vocab=base.vocab)
    where = "building the variants' stages"
    try:
        variants = [Variant(v, groups.get(v), args, c, device, rank, world) for v in args.comm]  # none: no group
        with Collector(args.gc_every) as collector:
            for _ in range(args.repeats):
                for v in variants:
                    where = f"the {v.name} variant's steps"
                    v.train(args.steps, device, collector)
    except torch.OutOfMemoryError as exc:
        raise SystemExit(out_of_memory(Path(__file__).name, where, exc, args.comm)) from None
    results = {}
    for v in variants:
        gathered = [None] * world
        dist.all_gather_object(gathered, v.result())
        results[v.name] = gathered
    if rank == world - 1:
        first = results[args.comm[0]][-1]["losses"]  # "none" trains on fixed activations: its losses differ
        w = max(7, max(len(v) for v in args.comm) + 1)
        print(f"{'comm':<{w}}{'schedule':<9}{'stages':>7}{'tokens/s':>11}{'(min-max over rounds)':>24}{'step ms':>9}"
              f"  losses == {args.comm[0]}  check vs one process")
        for v in variants:
            r = results[v.name][-1]
            rounds = r["tokens_per_s_rounds"]
            spread = f"{min(rounds):.0f}-{max(rounds):.0f}" if rounds else "-"
            check = "-" if not args.check or v.name == "none" else \
                f"loss diff {v.worst['loss']:.2e}, grad rel diff " \
                f"{max(g['max_grad_rel_diff'] for g in results[v.name]):.2e}"
            same = "-" if "none" in (v.name, args.comm[0]) else "yes" if r["losses"] == first else "no"
            print(f"{v.name:<{w}}{args.schedule:<9}{world:>7}{r['tokens_per_s']:>11.0f}{spread:>24}"
                  f"{r['step_ms']:>9.2f}  {same:<13}  {check}")
        print(f"rank {rank}: {collector.line()}")
        Path(args.json).write_text(json.dumps({"comm": args.comm, "ranks": results[args.comm[0]],
                                               "by_comm": results, "gc": collector.summary(),
                                               "args": vars(args)}, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
