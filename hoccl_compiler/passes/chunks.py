"""Pass 4: transfers, DMA/NIC queues and the weighted chunk interleaving.

Every segment of a stage becomes one transfer per piece of its flow (native: one; inter-node: up
to send_forward, rdma, recv_forward). Copies go on a DMA queue of their source GPU (local copies
on ``dma_local``; received data that is forwarded on ``dma_recv``, so that waiting for the
network never blocks the GPU's own sends), network writes on the NIC queue of theirs. Each
transfer is cut into ``chunk_bytes`` chunks.

Per stage the chunks are ordered by their *progress key*: chunk k of a transfer of n
chunks has key (k + 1/2) / n (the midpoint of its share of the stage), ties broken by role, then by
the rotation (dst - src) mod gpus-per-node (led by the node offset; :func:`issue_rotation`: no two
queues start on one destination), then transfer index. Every transfer on a queue therefore
advances in proportion to its size, and all of them finish together (the paper's flow-size-aware
chunk schedule). Each queue runs the stage order's entries that belong to it. The three pieces of
one segment have equal sizes, so chunk k of each carries the
same key on its own queue, and equal keys are broken by role (forwarding and network pieces
first): the dependency "chunk k of a piece after chunk k of the piece before it" always points
backwards in the stage order, which keeps the queues free of deadlock::

    DMA(u)   [fwd k=0][fwd k=1][fwd k=2] ...                  u -> ū   (NVLink)
    NIC(ū)            [rdma k=0][rdma k=1][rdma k=2] ...       ū -> v̄   (waits: fwd k done)
    RECV(v̄)                     [back k=0][back k=1] ...      v̄ -> v   (waits: rdma k done)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from .. import cost
from ..errors import ScheduleError
from ..ir import (
    DEFAULT_CHUNK_BYTES,
    LOCAL,
    NATIVE,
    RDMA,
    RECV_FORWARD,
    SEND_FORWARD,
    ChunkSchedule,
    CompileOptions,
    CompileState,
    chunk_sizes,
    mixed_sizes,
    waited_chunk,
)
from ..units import chain_depth
from .stages import expand_segments

MAX_CHUNKS = 1 << 26  # chunk entries a plan may hold (67 M: about 2 GB of plan file)

DEPTH_SHIFT = 0.25  # multicast chunk order: chunk slots a hop after an NVLink copy pushes a chunk back
NETWORK_SHIFT = 1.0  # and a hop after a network transfer: a whole transfer's progress
ROLE_PRIORITY = np.zeros(5, dtype=np.int64)
ROLE_PRIORITY[[SEND_FORWARD, RDMA, RECV_FORWARD, NATIVE, LOCAL]] = np.arange(5)


def run(state: CompileState, options: CompileOptions) -> CompileState:
    assert state.pieces is not None and state.schedule is not None, "chunks runs after stages"
    return dataclasses.replace(state, chunks=build(state.topology, state.pieces, state.schedule,
                                                   options.chunk_bytes, net_chunk_bytes=options.net_chunk_bytes))


def build(topo, pieces, sched, chunk_bytes: int | None, order_of: Callable | None = None,
          net_chunk_bytes: int | None = None) -> ChunkSchedule:
    """The chunk schedule of a stage schedule: its transfers (one per piece of a segment; segments are sorted by
    (stage, flow), so are the transfers, pieces in path order inside a segment), their queues and waits, the chunk
    size (``chunk_bytes``, or None: :func:`choose_chunk`; the network transfers' ``net_chunk_bytes`` where given) and
    the chunk order (:func:`chunk_order`, or ``order_of(tr_stage)`` where the order is given, as a compact plan file
    gives it)."""
    seg_idx, piece_idx = expand_segments(pieces, sched.seg_flow)
    tr_stage = sched.seg_stage[seg_idx]
    tr_bytes = sched.seg_bytes[seg_idx]
    tr_role, tr_src, tr_dst = pieces.role[piece_idx], pieces.src[piece_idx], pieces.dst[piece_idx]
    tr_after = waits_on_previous(seg_idx)
    depth = None
    if sched.seg_after is not None:  # multicast: a forwarded flow's piece waits on its source's last piece
        tr_after, depth = forwarded_waits(tr_after, seg_idx, sched.seg_after)
    queue_gpu, queue_kind, queue_index = queue_table(topo)
    tr_queue = assign_queues(topo, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_after)
    ordered_tr = costs = None
    chunk = chunk_bytes
    if chunk is None:
        chunk, ordered_tr, costs = choose_chunk(topo, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, tr_after,
                                                sched.num_stages, depth, net_chunk_bytes)
    if net_chunk_bytes == chunk:
        net_chunk_bytes = None
    sizes = chunk_sizes(tr_role, chunk, net_chunk_bytes)
    if order_of is not None:
        ordered_tr, costs = order_of(tr_stage), None
    elif ordered_tr is None:  # one chunk size: its order alone is list-scheduled, up to the larger limit
        ordered_tr = ready_first(topo, sizes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, tr_after, depth,
                                 chunk_order(topo, sizes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, depth, tr_after),
                                 READY_FIRST_ONE_ENTRIES)
    elif ordered_tr.size > READY_FIRST_MAX_ENTRIES:  # chosen among sizes past the limit: list-schedule the one chosen
        again = ready_first(topo, sizes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, tr_after, depth,
                            ordered_tr, READY_FIRST_ONE_ENTRIES)
        if again is not ordered_tr:
            ordered_tr, costs = again, None  # the costing pass costs the new order
    return ChunkSchedule(
        chunk_bytes=chunk, net_chunk_bytes=net_chunk_bytes,
        tr_stage=tr_stage, tr_flow=sched.seg_flow[seg_idx], tr_role=tr_role, tr_src=tr_src, tr_dst=tr_dst,
        tr_offset=sched.seg_offset[seg_idx], tr_bytes=tr_bytes, tr_queue=tr_queue, tr_after=tr_after,
        queue_gpu=queue_gpu, queue_kind=queue_kind, queue_index=queue_index,
        order_stage=tr_stage[ordered_tr], order_transfer=ordered_tr, costs=costs,
    )


def waits_on_previous(path_key: np.ndarray) -> np.ndarray:
    """The wait of each transfer of a list whose pieces of one path (equal ``path_key``) are consecutive and in
    path order: the transfer before it on its path (chunk k after chunk k), or -1 for a path's first."""
    n = path_key.size
    same = np.zeros(n, dtype=bool)
    same[1:] = path_key[1:] == path_key[:-1]
    return np.where(same, np.arange(n) - 1, -1)


def forwarded_waits(tr_after: np.ndarray, seg_idx: np.ndarray, seg_after: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The waits of a multicast plan's transfers (each segment's pieces consecutive, in path order; ``seg_after``:
    the segment each one reads from, or -1): a forwarded segment's first piece waits on the last piece of the
    segment it reads from. Returns the waits and each transfer's depth (the transfers before it on its path: the
    chunk order's first key, so that chunk k of a forwarded copy comes after the chunk k it copies)."""
    n_seg = seg_after.size
    per_seg = np.bincount(seg_idx, minlength=n_seg)
    first = np.cumsum(per_seg) - per_seg
    last = first + per_seg - 1
    after = tr_after.copy()
    fwd = np.flatnonzero((seg_after >= 0) & (per_seg > 0))
    after[first[fwd]] = last[seg_after[fwd]]
    return after, chain_depth(after)



def queue_table(topo) -> tuple[np.ndarray, tuple[str, ...], np.ndarray]:
    """Queues: per GPU, q DMA queues for what the GPU sends over NVLink (native, send_forward), one for its local
    copies (they use no link, so they overlap with the sends), one for forwarding what its NIC received
    (recv_forward: it waits on the network, and on its own queue never blocks the send side), and one NIC
    queue. Returns (gpu, kind, index within the kind) per queue."""
    G, q = topo.num_gpus, topo.dma_queues
    per_gpu = q + 3
    queue_gpu = np.repeat(np.arange(G, dtype=np.int64), per_gpu)
    queue_index = np.tile(np.r_[np.arange(q), 0, 0, 0].astype(np.int64), G)
    queue_kind = (("dma",) * q + ("dma_local", "dma_recv", "nic")) * G
    return queue_gpu, queue_kind, queue_index


def assign_queues(topo, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_after) -> np.ndarray:
    """The queue of every transfer (see :func:`queue_table`); sends are dealt over the q DMA queues, in groups:
    per (stage, GPU), the copies of one role to one destination that wait on another transfer (``tr_after`` >= 0:
    forwarded), and those that do not, each group on one queue (copies to one GPU share its link anyway: a
    Broadcast's parts split over queues, each chunk of its chain would take twice as long a hop); the groups most
    bytes first, equal ones by their issue rotation (:func:`issue_rotation`) and then those that do not wait first,
    dealt round-robin. (By destination alone, an All-to-All's block forwarded through a GPU and its direct copy to
    it went on one queue: on two queues a 2x8 paper-h800 All-to-All of 64 MiB simulated 1.27x the time.)

    So where every GPU sends alike, queue j of each GPU holds the same destination offsets, and its chunks, in the
    rotation of :func:`chunk_order`, go to a permutation of the GPUs at each step; and a multicast AllGather's own
    block (offset by offset beside the blocks it forwards, as large) lands on one queue and what it forwards on
    another, so the copies that wait on the network never hold up the ones that do not. Dealt copy by copy in
    destination order instead (until 2026-12-05), two GPUs' queues began on the same destination and a Broadcast's
    ring split each hop over two queues: with two queues a GPU, a 2x8 dgx-h100 AllGather of 1 GiB simulated at 1.75x
    its collective bound and a 2x8 Broadcast at 1.40x, against 1.10x and 1.11x on one queue.

    A multicast plan's stage across nodes (:func:`multicast_across_nodes`) has no recv_forward copies (a network
    write lands in its destination's output), so each GPU's ``dma_recv`` queue (a copy stream of its own in the GPU
    network executor, ``net/gpu.py``) is dealt its copies as one queue more (since 2026-12-06): with one DMA queue a
    dgx-h100 AllGather of 1 GiB on 4 nodes went from 1.183x its collective bound to 1.091x in v2 (1.095x in the
    chunk simulation), as the two-queue figures above; its Broadcasts deal every copy of a GPU to one queue as
    before (one group a GPU: the next in its chain). Like the unicast plans' recv_forward copies beside their sends,
    it counts on a GPU's two copy streams starting their copies each on its own, which no GPU has measured here
    (that needs GPUs with NVLink between them)."""
    q = topo.dma_queues
    send_side = (tr_role == NATIVE) | (tr_role == SEND_FORWARD)
    # a multicast stage across nodes (copies that pass on what another transfer brought, beside network writes): a
    # GPU's dma_recv queue, which no recv_forward copy uses there, takes a share of its copies as one more queue
    extra = multicast_across_nodes(tr_role, tr_after, tr_stage)
    dma_index = np.zeros(tr_stage.size, dtype=np.int64)  # one DMA queue a GPU and no such stage: every send on it
    if q > 1 or extra.any():
        rotation = issue_rotation(tr_src, tr_dst, topo.gpus_per_node, topo.nodes)
        waits = (tr_after >= 0).astype(np.int64)
        for n, stages in ((q, ~extra), (q + 1, extra)):
            at = stages[tr_stage] & send_side
            if n > 1 and at.any():  # index q (the one beyond the DMA queues): dma_recv's, q + 1
                index = _spread_over_queues(tr_stage, tr_src, tr_dst, tr_role, tr_bytes, rotation, waits, at, n)
                dma_index[at] = index[at] + (index[at] == q)
    fixed = np.array([q, -1, -1, q + 2, q + 1], np.int64)  # per role, as ir numbers them: LOCAL .. RECV_FORWARD
    return tr_src * (q + 3) + np.where(send_side, dma_index, fixed[tr_role])


def multicast_across_nodes(tr_role: np.ndarray, tr_after: np.ndarray, tr_stage: np.ndarray) -> np.ndarray:
    """Per stage, whether it is a multicast plan's stage across nodes: native copies that wait on another transfer
    (forwarded flows: unicast plans' native copies wait on nothing) beside network writes. There a GPU's native
    copies are dealt over its DMA queues and its ``dma_recv`` queue (:func:`assign_queues`). Decided stage by stage,
    so that a pattern plan, which costs each stage's transfers alone, deals them as the explicit plan does."""
    S = int(tr_stage.max()) + 1 if tr_stage.size else 0
    rdma = np.bincount(tr_stage[tr_role == RDMA], minlength=S) > 0
    return rdma & (np.bincount(tr_stage[(tr_role == NATIVE) & (tr_after >= 0)], minlength=S) > 0)


def chunk_order(topo, chunk_bytes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, depth=None,
                after=None) -> np.ndarray:
    """Every stage's chunk order (stage after stage): the transfer index of each chunk entry by progress key, then
    role (chunks feeding the network lead: send_forward, rdma, recv_forward before native and local copies), then
    the issue rotation, then transfer. Each queue runs the entries of its own transfers in it.

    Multicast plans (``depth``: each transfer's depth along its forwarding path, ``after``: the transfer it waits
    for): by when a chunk can be there, its progress key pushed back per hop of its path: ``DEPTH_SHIFT`` chunk slots
    for a hop after an NVLink copy, a whole transfer's progress (``NETWORK_SHIFT``) for one after a network transfer;
    then by depth. A copy engine then moves what it holds before what it waits for (an AllGather GPU its own block
    before the blocks the network brings, as before), and a GPU that passes several parts on round its node (a
    broadcast's ring) takes them in the order they reach it: the chunk simulation puts a 2x8 / 4x8 Broadcast of
    1 GiB at 7.3 / 7.5 ms so, against 11.8 ms with every hop's chunks after all of the hop before (the order until
    2026-12-04, which suited the star its node had then: 10.3 / 10.9 ms). A forwarded chunk still comes after the
    chunk it copies (the same progress, pushed back further). ``chunk_bytes``: one size, or each transfer's
    (:func:`~hoccl_compiler.ir.chunk_sizes`)."""
    n_chunks = np.maximum(1, -(-tr_bytes // chunk_bytes))
    total = int(n_chunks.sum())
    if total > MAX_CHUNKS:
        need = -(-int(tr_bytes.sum()) // MAX_CHUNKS)
        which = "--chunk" if np.ndim(chunk_bytes) == 0 or np.min(chunk_bytes) == np.max(chunk_bytes) else \
            "--chunk, and --net-chunk for the network transfers"
        raise ScheduleError(f"chunks of {int(np.min(chunk_bytes))} B cut this plan into {total:,} chunks, over the "
                            f"{MAX_CHUNKS:,} a plan may hold; give a larger chunk size ({which}), at least {need} B")
    n = tr_stage.size
    chunk_tr = np.repeat(np.arange(n, dtype=np.int64), n_chunks)
    chunk_k = np.arange(chunk_tr.size, dtype=np.int64) - np.repeat(np.cumsum(n_chunks) - n_chunks, n_chunks)
    progress = (chunk_k + 0.5) / n_chunks[chunk_tr]
    priority = ROLE_PRIORITY[tr_role][chunk_tr]
    rotation = issue_rotation(tr_src, tr_dst, topo.gpus_per_node, topo.nodes)[chunk_tr]
    size = np.broadcast_to(np.asarray(chunk_bytes, dtype=np.int64), tr_bytes.shape)
    mixed = after is not None and mixed_sizes(size)
    # the keys, least significant first; the last tie-break, the transfer and then its chunk, is the order the
    # chunks are listed in already, which the stable sort keeps
    if depth is None:
        if mixed:
            progress = _after_waited(progress, n_chunks, chunk_tr, chunk_k, size, tr_bytes, after, chain_depth(after))
        # every transfer one chunk: one progress for all, which orders nothing
        keys = (rotation, priority) if total == n and not mixed else (rotation, priority, progress)
    else:
        lag = forward_lag(tr_role, after, depth, n_chunks) if after is not None else depth.astype(np.float64)
        key = progress + lag[chunk_tr]
        if mixed:
            key = _after_waited(key, n_chunks, chunk_tr, chunk_k, size, tr_bytes, after, depth)
        keys = (rotation, priority, depth[chunk_tr], key)
    order = np.lexsort((*keys, tr_stage[chunk_tr]))
    return chunk_tr[order]


def _after_waited(key: np.ndarray, n_chunks, chunk_tr, chunk_k, size, tr_bytes, after, depth) -> np.ndarray:
    """Chunk order keys (per chunk, in :func:`chunk_order`'s layout: transfer after transfer, chunk k at k) raised, hop
    by hop along the waits, to at least the key of the chunk each waits for, where chunks differ in size (a network
    transfer in chunks of its own): chunk k of a transfer of n can then wait for a chunk past k / n of the way
    through the one it follows (the one that holds its last byte, :func:`~hoccl_compiler.ir.waited_chunk`), which
    equal keys order first (by depth or role)."""
    key = key.copy()
    first = np.cumsum(n_chunks) - n_chunks
    level = depth[chunk_tr]
    for d in range(1, int(depth.max(initial=0)) + 1):
        at = np.flatnonzero(level == d)
        t = chunk_tr[at]
        a = after[t]
        at, t, a = at[a >= 0], t[a >= 0], a[a >= 0]
        key[at] = np.maximum(key[at], key[first[a] + waited_chunk(chunk_k[at], size[t], size[a], tr_bytes[t])])
    return key


# chunk entries up to which a deep multicast plan's order is list-scheduled (20,000 until 2026-12-04, when an 8x8
# Broadcast of 22,524 entries in the shifted order simulated 1.23x v2's time; then 100,000, until longest way first
# put a 64x8 / 128x8 Broadcast of 1 GiB at 1.465x the bound in 4 MiB chunks, 131,072 / 262,144 entries, against the
# shifted order's 1.528 / 1.642; the list schedule takes about 1.1 s per 131,072 entries on the CPU VM, the 128x8
# compile 3.9 s against 1.9)
READY_FIRST_MAX_ENTRIES = 300_000
# and up to which the order of the one chunk size a plan takes is (the size given, or the one the chooser took among
# orders past the limit above): about 8.5 s per million entries on the CPU VM
READY_FIRST_ONE_ENTRIES = 2_000_000


def ready_first(topo, chunk_bytes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, after, depth,
                order: np.ndarray, limit: int = READY_FIRST_MAX_ENTRIES) -> np.ndarray:
    """A multicast plan's chunk order, where its paths run more than two hops deep (a Broadcast's chains): every
    stage's chunks in the order they start when each free queue takes, of its chunks whose dependency has landed,
    the one with the longest way ahead (ties: the first in ``order``, :func:`chunk_order`;
    :func:`hoccl_compiler.simulate.ready_first_order`, a list schedule without the simulation's port sharing). The
    runtimes run each queue's chunks strictly in the plan's order, and :func:`chunk_order`'s fixed shifts per hop
    guess when a chunk arrives: a guess too early holds the queue while chunks that are there wait behind it. The
    simulation put 2x8 Broadcasts of 8 of 23 sizes 1.10-1.59x above v2 so (docs/results/compiler-history.md); in the
    order they can start, none waits on a queue for a chunk behind it. Plans of more than ``limit`` chunks (the loop is
    Python), and shallower ones, keep ``order``."""
    if depth is None or int(depth.max(initial=0)) <= 2 or order.size > limit:
        return order
    from ..simulate import ready_first_order

    return ready_first_order(topo, chunk_bytes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, after, order)


def forward_lag(tr_role, after, depth, n_chunks) -> np.ndarray:
    """Per transfer of a multicast plan, how far back its chunks go in the chunk order (:func:`chunk_order`): the sum
    over the hops of its path of ``DEPTH_SHIFT / n_chunks`` (a hop after an NVLink copy) or ``NETWORK_SHIFT`` (after
    a network transfer), in units of the progress key."""
    lag = np.zeros(depth.size)
    for d in range(1, int(depth.max(initial=0)) + 1):
        at = np.flatnonzero(depth == d)
        up = after[at]
        lag[at] = lag[up] + np.where(tr_role[up] == RDMA, NETWORK_SHIFT, DEPTH_SHIFT / n_chunks[at])
    return lag


# Chunk sizes the scheduler tries when the options leave it to it (CompileOptions(chunk_bytes=None), the CLI's
# --chunk auto): 256 KiB .. 256 MiB, and every transfer whole.
CHUNK_CANDIDATES = tuple(1 << k for k in range(18, 29))
CHUNK_TOLERANCE = 0.01  # a larger chunk within 1% of the best time wins: fewer plan entries
CHUNK_BUDGET = 1 << 22  # chunk entries a candidate may cut the plan into (4 M)


def choose_chunk(topo, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, tr_after, num_stages: int,
                 depth=None, net_chunk_bytes: int | None = None) -> tuple[int, np.ndarray, cost.StageCosts | None]:
    """The chunk size :func:`pick_chunk` chooses for these transfers (the network ones keep ``net_chunk_bytes``
    where it is given), with its chunk order and its cost model v2 (costed on the way: neither is made again; no
    costs where nothing was costed)."""
    largest = int(tr_bytes.max(initial=0))
    if largest == 0:
        order = chunk_order(topo, DEFAULT_CHUNK_BYTES, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, depth, tr_after)
        return DEFAULT_CHUNK_BYTES, order, None
    kept: dict[int, tuple[np.ndarray, cost.StageCosts, float]] = {}  # the candidates within the tolerance of the best
    network = cost.has_network(tr_role)
    flows = cost.net_flows(topo, tr_role, tr_src, tr_dst)

    def time_of(c: int) -> float:  # the plan's v2 time as the runtime runs it: stages overlapping, the fill
        sizes = chunk_sizes(tr_role, c, net_chunk_bytes)
        order = ready_first(topo, sizes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, tr_after, depth,
                            chunk_order(topo, sizes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, depth, tr_after))
        costed = cost.stage_times_v2(topo, sizes, tr_stage, tr_role, tr_src, tr_dst, tr_bytes, tr_queue, tr_after,
                                     order, num_stages)
        total = cost.plan_time_v2(topo, costed.time_s, network, flows=flows,
                                  fill_s=cost.staging_fill_s(topo, sizes, tr_role, tr_bytes) if network else 0.0,
                                  overlap_s=cost.overlapped_s(costed.port_busy_s, costed.queue_busy_s,
                                                              costed.pipeline_s,
                                                              costed.chain.time_s() if costed.chain else 0.0))[0]
        kept[c] = order, costed, total
        best = min(v[2] for v in kept.values())
        for k in [k for k, v in kept.items() if v[2] > best * (1 + CHUNK_TOLERANCE)]:
            del kept[k]
        return total

    # no chunk size costs less than the call's fixed parts plus the port bound of these transfers (the same for every
    # size: a chunk size only cuts them), by a hair less for rounding: v2's ports take at least their bytes at full
    # bandwidth over the stages, overlapped or summed (cost.stage_times_v2, cost.overlapped_s)
    bound = cost.lower_bound(tr_role, tr_src, tr_dst, tr_bytes, topo)[0]
    floor = cost.plan_time_v2(topo, np.full(max(num_stages, 1), bound / max(num_stages, 1)), network, flows=flows,
                              overlap_s=bound)[0] * (1 - 1e-9)
    chosen = pick_chunk(largest, time_of, lambda c: int(np.maximum(1, -(-tr_bytes // chunk_sizes(
        tr_role, c, net_chunk_bytes))).sum()), floor)
    return chosen, kept[chosen][0], kept[chosen][1]


def pick_chunk(largest: int, time_of: Callable[[int], float], entries_of: Callable[[int], int],
               floor: float = 0.0) -> int:
    """The largest chunk size whose cost-model v2 time (``time_of(size)``: the plan's, its stages overlapping as the
    runtimes run them) is within
    ``CHUNK_TOLERANCE`` of the least over the candidates: small chunks pay a start each and interleave finely, large
    ones fill and drain forwarded paths slowly; the larger of two near-equal sizes makes a smaller plan. Candidates
    (``CHUNK_CANDIDATES`` below ``largest``, the largest transfer, and ``largest`` itself) are tried from the largest
    down, until two in a row are worse than the best so far or one would cut the plan into more than
    ``CHUNK_BUDGET`` chunk entries (``entries_of(size)``; the largest is always costed), or until no smaller size
    could change the choice: ``floor`` is a time no size's can be under, and once the chosen size's is within
    ``CHUNK_TOLERANCE`` of it, a smaller one could neither win nor move the best so far enough to drop the chosen
    (the same choice as trying them all, without costing them: a plan that a huge flow's port bound sets)."""
    candidates = sorted({c for c in CHUNK_CANDIDATES if c < largest} | {largest}, reverse=True)
    times: dict[int, float] = {}
    worse = 0
    for c in candidates:  # largest first: fewer chunks, cheaper to cost
        # past the budget no smaller chunk is tried; the largest always is (each transfer whole: the fewest entries
        # any chunk size gives, so with more than CHUNK_BUDGET transfers it is the only choice)
        if times and entries_of(c) > CHUNK_BUDGET:
            break
        times[c] = time_of(c)
        # smaller chunks only add starts once the fill and drain they save is gone: stop after two in a row that
        # are worse than the best so far (within one node, where nothing is forwarded, the whole transfers win)
        worse = worse + 1 if times[c] > min(times.values()) * (1 + CHUNK_TOLERANCE) else 0
        if worse == 2 or (floor > 0 and times[_chosen(times)] <= floor * (1 + CHUNK_TOLERANCE)):
            break
    return _chosen(times)


def _chosen(times: dict[int, float]) -> int:
    """The largest size whose time is within ``CHUNK_TOLERANCE`` of the least."""
    best = min(times.values())
    return max(c for c, t in times.items() if t <= best * (1 + CHUNK_TOLERANCE))


def issue_rotation(src: np.ndarray, dst: np.ndarray, gpus_per_node: int, nodes: int) -> np.ndarray:
    """The tie-break that keeps destinations apart: (dst - src) mod gpus-per-node inside a node, led by the node
    offset (dst node - src node) mod nodes. Among chunks of equal progress, GPU u's queue serves u+1 first, then
    u+2, ...: at each step the senders' destinations are a permutation, so no in-port has two senders while
    another idles (ascending destinations would send every GPU to GPU 0 first)::

        step      0     1     2          (4 GPUs, an AllGather's one chunk per transfer)
        GPU 0   ->1   ->2   ->3
        GPU 1   ->2   ->3   ->0
        GPU 2   ->3   ->0   ->1
    """
    local = (dst % gpus_per_node - src % gpus_per_node) % gpus_per_node
    node = (dst // gpus_per_node - src // gpus_per_node) % max(1, nodes)
    return node * gpus_per_node + local


def _spread_over_queues(stage, gpu, dst, role, nbytes, rotation, waits, is_copy, q: int) -> np.ndarray:
    """DMA queue per copy (see :func:`assign_queues`): per (stage, GPU), its groups (the copies of one role to one
    destination that wait, or that do not), most bytes first, equal ones by issue rotation and then those that do not
    wait first, dealt round-robin over the q queues."""
    index = np.zeros(stage.size, dtype=np.int64)
    sel = np.nonzero(is_copy)[0]
    if q == 1 or not sel.size:
        return index
    G = int(max(gpu.max(), dst.max())) + 1
    roles = int(role.max()) + 1
    owner = stage[sel] * G + gpu[sel]
    key = ((owner * G + dst[sel]) * roles + role[sel]) * 2 + waits[sel]
    groups, first, member = np.unique(key, return_index=True, return_inverse=True)
    total = np.bincount(member, weights=nbytes[sel])
    g_owner = owner[first]
    order = np.lexsort((groups % 2, rotation[sel][first], -total, g_owner))
    starts = np.r_[0, np.flatnonzero(np.diff(g_owner[order])) + 1]
    turn = np.arange(order.size) - np.repeat(starts, np.diff(np.r_[starts, order.size]))
    group_queue = np.zeros(groups.size, np.int64)
    group_queue[order] = turn % q
    index[sel] = group_queue[member]
    return index
