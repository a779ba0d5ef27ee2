"""Train the GPT-style decoder over pipeline stages with torch.distributed.pipelining (GPipe or 1F1B), the
activations and gradients between stages moving through a ``hoccl`` process group (copy engines, no SM).

    torchrun --nproc_per_node 2 examples/train_pipeline.py --size small --schedule 1f1b
    torchrun --nproc_per_node 2 examples/train_pipeline.py --size tiny --share-gpu --check   # 2 ranks, 1 GPU

Each rank runs one stage (embeddings and the first blocks on rank 0, the last blocks and the head on the last
rank). ``--check`` also trains the whole model in one process on the same microbatches and compares every
loss and every gradient of this rank's stage with it. Ends with a table (last rank) and ``--json``.
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
from gpt import GPT, SIZES, Config, batch, loss_fn  # noqa: E402


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
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--share-gpu", action="store_true", help="every rank on GPU 0 (correctness only)")
    p.add_argument("--check", action="store_true", help="compare losses and gradients with a one-process reference")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="train_pipeline.json")
    args = p.parse_args(argv)
    if args.batch % args.microbatches:
        p.error(f"--batch {args.batch} is not a multiple of --microbatches {args.microbatches}")
    return args


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    import hoccl_runtime.torch as ht

    args = parse(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = torch.device("cuda", 0 if args.share_gpu else int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(device)
    dist.init_process_group("gloo")  # the CPU side (barriers); stages exchange through the hoccl group
    ht.configure(device=device.index, reduce="hoccl" if args.share_gpu else None)
    pp = dist.new_group(backend="hoccl")
    base = SIZES[args.size]
    c = Config(layers=args.layers or base.layers, dim=base.dim, heads=base.heads, seq=base.seq, vocab=base.vocab)
    torch.manual_seed(args.seed)
    full = GPT(c).to(device)
    reference = None
    if args.check:
        import copy

        reference = copy.deepcopy(full)
    module = stage_module(full, rank, world)
    mb = args.batch // args.microbatches
    example_in = torch.zeros(mb, c.seq, dtype=torch.long, device=device) if rank == 0 else \
        torch.zeros(mb, c.seq, c.dim, device=device)
    example_out = torch.zeros(mb, c.seq, c.vocab if rank == world - 1 else c.dim, device=device)
    stage = PipelineStage(module, rank, world, device, input_args=(example_in,), output_args=(example_out,), group=pp)
    schedule_cls = ScheduleGPipe if args.schedule == "gpipe" else Schedule1F1B
    schedule = schedule_cls(stage, n_microbatches=args.microbatches, loss_fn=loss_fn)
    opt = torch.optim.SGD(module.parameters(), lr=args.lr)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=args.lr) if reference is not None else None
    ref_stage = stage_module(reference, rank, world) if reference is not None else None
    times, losses_all, worst = [], [], {"loss": 0.0, "grad": 0.0}
    for i in range(args.steps):
        x, y = batch(c, args.batch, i, 0, device)  # every stage sees the same global batch
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses: list = []
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            schedule.step(target=y, losses=losses)
        else:
            schedule.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if reference is not None:
            ref_losses = [loss_fn(reference(xm), ym) for xm, ym in zip(x.chunk(args.microbatches),
                                                                       y.chunk(args.microbatches), strict=True)]
            torch.stack(ref_losses).mean().backward()
            if rank == world - 1:
                got = torch.stack([lo.detach() for lo in losses])
                worst["loss"] = max(worst["loss"], (got - torch.stack(ref_losses).detach()).abs().max().item())
            for (name, p), q in zip(module.named_parameters(), ref_stage.parameters(), strict=True):
                if p.grad is None:
                    raise SystemExit(f"rank {rank}: no gradient for {name}")
                scale = q.grad.abs().max().item() or 1.0
                worst["grad"] = max(worst["grad"], (p.grad - q.grad).abs().max().item() / scale)
            ref_opt.step()
            ref_opt.zero_grad()
        opt.step()
        opt.zero_grad()
        if rank == world - 1:
            losses_all.append([lo.item() for lo in losses])
            print(f"[{i + 1}/{args.steps}] loss {statistics.mean(losses_all[-1]):.4f}", file=sys.stderr, flush=True)
    med = statistics.median(times[args.warmup:] or times)
    tokens = args.batch * c.seq
    result = {"schedule": args.schedule, "stages": world, "microbatches": args.microbatches,
              "tokens_per_s": tokens / med, "step_ms": med * 1e3, "losses": losses_all,
              "max_loss_diff": worst["loss"] if args.check else None,
              "max_grad_rel_diff": worst["grad"] if args.check else None, "share_gpu": args.share_gpu}
    gathered = [None] * world
    dist.all_gather_object(gathered, result)
    if rank == world - 1:
        print(f"{'schedule':<9}{'stages':>7}{'tokens/s':>11}{'step ms':>9}  check vs one process")
        check = "-" if not args.check else \
            f"loss diff {worst['loss']:.2e}, grad rel diff {max(g['max_grad_rel_diff'] for g in gathered):.2e}"
        print(f"{args.schedule:<9}{world:>7}{result['tokens_per_s']:>11.0f}{result['step_ms']:>9.2f}  {check}")
        Path(args.json).write_text(json.dumps({"ranks": gathered}, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
