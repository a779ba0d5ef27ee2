"""The compiler's internal representation: frozen dataclasses of NumPy arrays.

Each pass takes a :class:`CompileState` and returns a new one with its own field filled in
(``dataclasses.replace``); nothing is mutated in place. Pydantic appears only at the edges (the
topology, the collective and the plan file).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .schema import Role, chunk_sizes, mixed_sizes, plan_chunk_sizes, waited_chunk  # the plan format's chunk rules

if TYPE_CHECKING:
    from .collective import CollectiveSpec, Layout
    from .schema import Plan
    from .topology import Topology

__all__ = [
    "ROLE_NAMES", "ROLE_DOMAINS", "LOCAL", "NATIVE", "SEND_FORWARD", "RDMA", "RECV_FORWARD",
    "CompileOptions", "PieceTable", "Schedule", "ChunkSchedule", "Costing", "CompileState", "chunk_sizes",
    "plan_chunk_sizes", "waited_chunk", "mixed_sizes",
]

# Roles of a transfer (the plan stores the index; the names and domains are written beside them).
LOCAL, NATIVE, SEND_FORWARD, RDMA, RECV_FORWARD = (int(r) for r in Role)  # plain ints on the hot paths
ROLE_NAMES = tuple(r.label for r in Role)
ROLE_DOMAINS = tuple(r.domain for r in Role)

DEFAULT_CHUNK_BYTES = 4 << 20


@dataclass(frozen=True)
class CompileOptions:
    """Knobs of the passes. ``chunk_bytes`` is the DMA/network chunk size of the plan; None lets the scheduler
    choose it (the size with the least cost-model v2 time, :func:`hoccl_compiler.passes.chunks.choose_chunk`)."""

    chunk_bytes: int | None = None
    # The network transfers' own chunk (None: ``chunk_bytes``; "auto": the one with the least cost-model v2 time among
    # none and a few, where one may help: hoccl_compiler.pipeline.net_chunk_may_help). Smaller than the copies' chunk,
    # a network hop's store-and-forward shrinks while copies keep their size and their few copy-engine starts; a
    # multicast Broadcast's parts then go down one chain of nodes per rail, where a part keeps its rail (the trees of
    # nodes take an NVLink copy between their network hops, which no smaller network chunk shortens).
    net_chunk_bytes: int | str | None = None
    baselines: bool = True  # compute the two simpler schedules for the report
    # Fraction of RDMA time the scheduler may add to cut the number of stages (0: time-optimal peeling only;
    # None: as many stages as the cost model v2 says pay for their barriers). Skewed traffic peels into many tiny
    # stages; each costs the runtime a barrier.
    max_extra_time: float | None = None
    # The verify pass's byte-level replay (on top of the structural checks, which already prove delivery): False
    # never (the default: it was 6-17 ms of a 1 MiB one-node compile whose other passes take 1.5 ms), None small
    # plans only (what hoccl-compile asks for), True always. Not part of the plan: the same plan either way.
    byte_replay: bool | None = False
    # Multicast routing of AllGather and Broadcast (hoccl_compiler.multicast): each block crosses the network once
    # per node and is passed on inside it. False: one unicast flow per source and destination, as C lists them.
    multicast: bool = True

    def __post_init__(self) -> None:
        from .errors import OptionsError

        for name in ("chunk_bytes", "net_chunk_bytes"):
            value = getattr(self, name)
            if value is None or (name == "net_chunk_bytes" and value == "auto"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                also = ", \"auto\"" if name == "net_chunk_bytes" else ""
                raise OptionsError(f"CompileOptions({name}={value!r}): give a positive number of bytes, e.g. "
                                   f"1 << 20, or None{also}")
        if self.max_extra_time is not None and not 0 <= self.max_extra_time <= 1:
            raise OptionsError(f"CompileOptions(max_extra_time={self.max_extra_time!r}): give a fraction in 0..1, "
                               "e.g. 0.01, or None")

    def as_dict(self) -> dict[str, Any]:
        return {"chunk_bytes": self.chunk_bytes, "net_chunk_bytes": self.net_chunk_bytes,
                "max_extra_time": self.max_extra_time, "multicast": self.multicast}


@dataclass(frozen=True)
class PieceTable:
    """Pieces of flows after forwarding: each inter-node flow becomes up to three pieces."""

    flow: np.ndarray
    role: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray


@dataclass(frozen=True)
class Schedule:
    """Stages: per stage, which byte range of which flow moves (all of the flow's pieces move it)."""

    num_stages: int
    seg_stage: np.ndarray   # per segment: its stage
    seg_flow: np.ndarray    # the flow
    seg_offset: np.ndarray  # byte offset inside the flow
    seg_bytes: np.ndarray
    stage_time_s: np.ndarray
    report: dict[str, Any] = field(default_factory=dict)
    # multicast plans: per segment, the segment of the flow it reads from (same stage and byte range), whose chunk k
    # its chunk k waits for; -1 for a direct flow's. None: no flow is forwarded.
    seg_after: np.ndarray | None = None


@dataclass(frozen=True)
class ChunkSchedule:
    """Transfers per stage (one per piece of a segment) and each stage's chunk order."""

    chunk_bytes: int        # the plan's chunk size (the options' or the one the scheduler chose)
    net_chunk_bytes: int | None  # the network transfers' own (None: chunk_bytes)
    tr_stage: np.ndarray
    tr_flow: np.ndarray
    tr_role: np.ndarray
    tr_src: np.ndarray
    tr_dst: np.ndarray
    tr_offset: np.ndarray   # offset inside the flow
    tr_bytes: np.ndarray
    tr_queue: np.ndarray
    tr_after: np.ndarray    # index (within its stage) of the transfer it follows chunk by chunk, or -1
    queue_gpu: np.ndarray
    queue_kind: tuple[str, ...]
    queue_index: np.ndarray
    order_stage: np.ndarray  # per chunk slot, in execution order per stage: its stage
    order_transfer: np.ndarray  # global transfer index
    # the cost model v2 of exactly this schedule (cost.StageCosts), where choosing the chunk size costed it already
    # (the costing pass takes it instead of costing the same schedule again); None otherwise
    costs: Any = None


@dataclass(frozen=True)
class Costing:
    """The cost model v2 over the chunk schedule: per-stage times and the plan's report."""

    stage_time_s: np.ndarray
    report: dict[str, Any]


@dataclass(frozen=True)
class CompileState:
    topology: Topology
    collective: CollectiveSpec
    options: CompileOptions
    layout: Layout | None = None
    origin: np.ndarray | None = None
    pieces: PieceTable | None = None
    hoccl: np.ndarray | None = None
    schedule: Schedule | None = None
    chunks: ChunkSchedule | None = None
    costing: Costing | None = None
    plan: Plan | None = None

