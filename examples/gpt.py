"""A GPT-style decoder (pre-norm blocks, causal attention, GELU MLP) for the training examples and tests.

Synthetic tokens only: nothing is downloaded. ``SIZES`` names shapes from a CPU-test size up to one that fills
an H200 under FSDP with 2 ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 - torch's convention
from torch import nn


@dataclass(frozen=True)
class Config:
    layers: int
    dim: int
    heads: int
    seq: int
    vocab: int = 32000

    @property
    def params(self) -> int:
        """Parameters (embeddings tied to the output layer)."""
        return self.vocab * self.dim + self.seq * self.dim + self.layers * (12 * self.dim * self.dim + 13 * self.dim) \
            + 2 * self.dim

    def flops_per_token(self) -> float:
        """Training FLOPs per token: 6 x params for the matrix products, plus attention's 12 x layers x seq x dim
        (forward and backward, causal masking not discounted, as in the Megatron-LM papers)."""
        return 6.0 * self.params + 12.0 * self.layers * self.seq * self.dim


SIZES = {
    "tiny": Config(layers=2, dim=64, heads=4, seq=32, vocab=512),
    "small": Config(layers=4, dim=512, heads=8, seq=256, vocab=8192),
    "350m": Config(layers=24, dim=1024, heads=16, seq=1024),
    "1.3b": Config(layers=24, dim=2048, heads=16, seq=2048),
    "2.7b": Config(layers=32, dim=2560, heads=32, seq=2048),
    "6.7b": Config(layers=32, dim=4096, heads=32, seq=2048),
}


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.heads = c.heads
        self.ln1 = nn.LayerNorm(c.dim)
        self.qkv = nn.Linear(c.dim, 3 * c.dim)
        self.proj = nn.Linear(c.dim, c.dim)
        self.ln2 = nn.LayerNorm(c.dim)
        self.fc = nn.Linear(c.dim, 4 * c.dim)
        self.out = nn.Linear(4 * c.dim, c.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.config = c
        self.tok = nn.Embedding(c.vocab, c.dim)
        self.pos = nn.Embedding(c.seq, c.dim)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = nn.LayerNorm(c.dim)
        self.head = nn.Linear(c.dim, c.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.layers:
            x = block(x)
        return self.head(self.norm(x))


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def batch(c: Config, batch_size: int, step: int, rank: int, device: torch.device | str) -> tuple:
    """Synthetic (tokens, targets) for a step and rank, the same on every run (a fixed generator)."""
    g = torch.Generator().manual_seed(10_000 * step + rank)
    tokens = torch.randint(0, c.vocab, (batch_size, c.seq + 1), generator=g)
    return tokens[:, :-1].to(device), tokens[:, 1:].to(device)


def deterministic() -> None:
    """Deterministic kernels (--deterministic): cuBLAS with a fixed workspace and torch's deterministic algorithms
    (cuDNN attention's backward included, which warn-only mode leaves non-deterministic), so that two variants that
    move the same bytes give bit-identical losses."""
    import os

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # read when cuBLAS starts: before any matmul
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True


def out_of_memory(script: str, where: str, exc: BaseException, variants: list[str]) -> str:
    """One line for CUDA's out-of-memory error in a training example: where it struck, the first three sentences of
    what torch said (what it tried to allocate, the GPU's capacity and what was free), and what to change. Every
    variant of ``--comm`` keeps its model and optimizer on the GPU for the whole run, and ranks that share a GPU each
    hold their own: at 1.3b FSDP's ``none`` limit beside two FSDP variants did not fit two ranks on an 80 GB H100."""
    said = ". ".join(str(exc).split(". ")[:3]).strip().rstrip(".")
    return (f"{script}: out of GPU memory in {where} ({said}). The variants of --comm {','.join(variants)} each keep "
            f"their model and optimizer on the GPU for the whole run, and ranks that share a GPU hold one set each: "
            f"run fewer variants at once (the none limit on its own, as scripts/tcp-nodes.sh --compare does at 1.3b), "
            f"or a smaller --batch or --size")


def need_cuda(script: str) -> None:
    """Exit with one line, not torch's traceback, where this torch has no CUDA GPU (the training examples need one;
    hoccl_runtime.torch.require_cuda says what to install)."""
    from hoccl_runtime.errors import HocclError
    from hoccl_runtime.torch import require_cuda

    try:
        require_cuda(script)
    except HocclError as exc:
        raise SystemExit(str(exc)) from None
