"""The cost model shared by the scheduler, its report and ``hoccl-inspect``.

Two layers. The *port model* (v1) gives the proven lower bound; the *cost model v2* (:func:`stage_times_v2`,
:func:`plan_time_v2`) adds the fixed costs a real queue pays, and is what plans' predicted times, stage times and
baselines use.

Port model. Every GPU has four ports: NVLink out, NVLink in, NIC out and NIC in, at the topology's bandwidths.
A transfer uses the out port of its source and the in port of its destination, on NVLink for
native and forwarding copies and on the NIC for RDMA. Local copies (a rank to itself) are not
costed.

* A HOCCL stage lasts ``max over ports of load / bandwidth``: the weighted chunk interleaving
  serves every transfer of a queue in proportion to its size, and a stage holds at most one RDMA
  flow per NIC and direction, so every port can finish its load together.
* The lower bound of any schedule of T is the same maximum over the whole of T.

The two simpler schedules the report compares with are costed under v2 (``passes/costing.py``);
:func:`max_min_rates` (max-min fair sharing of ports) is the chunk-level simulation's
(:mod:`hoccl_compiler.simulate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .chain import StageChain, firsts, group_start, overlapped_s, pair_edges, run_start_of, shared_delay
from .ir import LOCAL, RDMA, mixed_sizes
from .topology import Topology
from .units import chain_depth

__all__ = ["port_capacity", "piece_ports", "port_loads", "loads_time", "lower_bound", "collective_bound",
           "stage_times_v2", "chunk_start_s", "plan_time_v2", "overlapped_s", "StageChain", "pair_edges", "StageCosts",
           "has_network", "duplex_capacity", "incast_senders", "staging_fill_s", "net_flows", "plan_net_flows",
           "net_flows_s", "transfers_cost"]


def port_capacity(topo: Topology) -> np.ndarray:
    """Bytes per second of each of the 4G ports (index kind * G + gpu)."""
    G = topo.num_gpus
    return np.repeat(np.array([topo.nvlink_gbps, topo.nvlink_gbps, topo.nic_gbps, topo.nic_gbps]) * 1e9, G)


def piece_ports(role: np.ndarray, src: np.ndarray, dst: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """(out port, in port) of each transfer; -1 for local copies."""
    rdma = role == RDMA
    out_port = np.where(rdma, 2 * G + src, src)
    in_port = np.where(rdma, 3 * G + dst, G + dst)
    local = role == LOCAL
    return np.where(local, -1, out_port), np.where(local, -1, in_port)


def port_loads(role: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, G: int) -> np.ndarray:
    out_port, in_port = piece_ports(role, src, dst, G)
    costed = out_port >= 0
    loads = np.bincount(out_port[costed], weights=nbytes[costed], minlength=4 * G)
    loads += np.bincount(in_port[costed], weights=nbytes[costed], minlength=4 * G)
    return loads


def loads_time(loads: np.ndarray, capacity: np.ndarray) -> float:
    return float((loads / capacity).max()) if loads.size else 0.0


def lower_bound(role, src, dst, nbytes, topo: Topology) -> tuple[float, dict[str, float]]:
    """Max over GPUs and ports of line sum / bandwidth, overall and per domain."""
    G = topo.num_gpus
    t = port_loads(role, src, dst, nbytes, G) / port_capacity(topo)
    per = {"nvlink": float(t[: 2 * G].max(initial=0.0)), "rdma": float(t[2 * G:].max(initial=0.0))}
    return max(per.values()), per


def collective_bound(kind: str, size_bytes: int | None, topo: Topology, traffic_bound: float) -> float:
    """The collective's own lower bound: the port bound of the best store-and-forward algorithm through GPUs, in
    which bytes that several GPUs need may cross the network once per node and be passed on inside it (multicast),
    where this plan's traffic (``traffic_bound``, :func:`lower_bound`) sends them once per destination GPU.

    * AllGather, block ``b = size / G``: a GPU must receive ``(G - 1) b`` on its NVLink and NIC ports together (its
      NVLink alone on one node), and a node ``(G - L) b`` through its ``L`` NICs.
    * Broadcast of ``S``: every other GPU must receive ``S``, and every other node ``S`` through its NICs.
    * Every other collective sends distinct bytes to each destination: its bound is its traffic's.

    The smaller of that and ``traffic_bound`` (a plan's traffic never beats the collective's bound)."""
    G, L, N = topo.num_gpus, topo.gpus_per_node, topo.nodes
    if kind not in ("allgather", "broadcast") or not size_bytes or G < 2:
        return traffic_bound
    if kind == "allgather":
        block = size_bytes // G
        gpu_needs, node_needs = (G - 1) * block, (G - L) * block
    else:
        gpu_needs, node_needs = size_bytes, size_bytes if N > 1 else 0
    nvlink, nic = topo.nvlink_gbps * 1e9, topo.nic_gbps * 1e9
    gpu_in = nvlink + (nic if N > 1 else 0.0)
    bound = max(gpu_needs / gpu_in, node_needs / (L * nic) if N > 1 else 0.0)
    return min(bound, traffic_bound)


def max_min_rates(out_port: np.ndarray, in_port: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Progressive filling: every live transfer's rate rises together; a port that fills freezes the
    transfers through it. Port -> transfer lists make each step cost O(ports + transfers frozen)."""
    n, P = out_port.size, capacity.size
    ports = np.concatenate([out_port, in_port])
    by_port = np.argsort(ports, kind="stable")
    members = np.concatenate([np.arange(n), np.arange(n)])[by_port]
    indptr = np.searchsorted(ports[by_port], np.arange(P + 1))
    other = np.concatenate([in_port, out_port])[by_port]  # the other port of each membership
    live_count = np.diff(indptr).astype(np.float64)
    room = capacity.astype(np.float64).copy()  # capacity left after everything assigned so far
    frozen = np.zeros(n, dtype=bool)
    rate = np.zeros(n)
    level = 0.0
    left = n
    while left:
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(live_count > 0, room / live_count, np.inf)
        delta = float(step.min())
        level += delta
        room -= delta * live_count
        full = np.nonzero((live_count > 0) & (step <= delta * (1 + 1e-9) + 1e-300))[0]
        for p in full:
            lo, hi = indptr[p], indptr[p + 1]
            fl = members[lo:hi]
            new = ~frozen[fl]
            if not new.any():
                continue
            fl, oth = fl[new], other[lo:hi][new]
            frozen[fl] = True
            rate[fl] = level
            left -= fl.size
            np.subtract.at(live_count, oth, 1.0)
            live_count[p] -= fl.size
        room[full] = 0.0
    return rate


# --- cost model v2 --------------------------------------------------------------------------------------------
#
# A stage of transfers on serial queues (each queue runs its entries of the stage's chunk order one after the
# other; topology.costs holds the fixed costs) lasts the longest of four terms:
#
#   ports     max over ports of load / bandwidth (the port model: every port finishing its load together; a
#             GPU whose NVLink carries traffic both ways in the stage has costs.nvlink_duplex less bandwidth on
#             each, as the raw copies measured: :func:`duplex_capacity`);
#   queues    max over queues of  sum over its chunks (start + bytes / its port's bandwidth + convergence),
#             where a chunk's convergence is the delay from chunks of other queues of its kind that sit at the
#             same position of their queue and use the same in-port (or out-port): each such chunk shares the
#             port with it for min(their bytes) / bandwidth. Rotated issue orders have none; ascending ones make
#             every GPU's first chunk share GPU 0's in-port (the "destination hot spot");
#   pipeline  max over forwarded paths (send_forward -> rdma -> recv_forward, chunk k after chunk k) of the
#             fill, the bottleneck and the drain: sum_i c_i + max_i r_i over the path's pieces, c_i being a piece's
#             first chunk's time (start + chunk / bandwidth + its convergence) and r_i the rest of it: its other
#             chunks, or, where its queue carries other transfers too, the queue's time until its last chunk's
#             turn (queue time x (n - 1) / n for n chunks);
#
# and a plan lasts  call + stages + (stages - 1) * stage_sync + the transfers' host cost, where "stages" is the
# sum of the stage times where a barrier separates them, and where none does (both runtimes: stage_sync 0) the
# overlapped time, :func:`overlapped_s`: the busiest port's or queue's time over all stages, or the chain of
# queues running on from stage to stage (:class:`StageChain`)  (network plans:
# net_call_us plus the host staging's fill and drain, :func:`staging_fill_s`, stage_sync_us per further stage (0:
# our network executor has no barrier) and the more of net_flow_us per further network transfer of the busiest
# GPU and net_node_flow_us per further one of the busiest node, :func:`net_flows_s`; plans within one node
# call_us, no barrier and no flow cost). hoccl_compiler.simulate runs the
# same queues chunk by chunk with ports shared max-min fairly; the two agree within 5% on the plans in
# tests/compiler/test_cost_v2.py, and v2's predictions are compared with measured runs in docs/benchmarks.md.

QUEUE_CLASS = np.array([1, 0, 0, 3, 2])  # per role: 0 dma (native, send_forward), 1 local, 2 recv, 3 nic


@dataclass(frozen=True)
class StageCosts:
    """Per stage (arrays of the stage count): the v2 time and its four terms; and over all stages, what each port
    and each queue is busy for (``port_busy_s``: 4G ports, ``queue_busy_s``: G x (dma_queues + 3) queues), from
    which :func:`overlapped_s` gives the stages' time where no barrier separates them."""

    time_s: np.ndarray
    ports_s: np.ndarray
    queues_s: np.ndarray
    pipeline_s: np.ndarray
    port_busy_s: np.ndarray
    queue_busy_s: np.ndarray
    chain: StageChain | None = None
    # per stage, what StageChain.add takes: each queue's busy time (stages x queues) and the path edges, one per
    # waiting piece (stage, upstream queue, downstream queue, upstream first chunk s, downstream last chunk s and
    # whole time s, upstream piece, how early the upstream piece is through; :func:`pair_edges` makes them one per
    # pair of queues)
    stage_busy_s: np.ndarray | None = None
    edges: tuple[np.ndarray, ...] | None = None


def has_network(role: np.ndarray) -> bool:
    return bool((np.asarray(role) == RDMA).any())


def chunk_start_s(topo: Topology, role: np.ndarray) -> np.ndarray:
    """Each transfer's start cost per chunk (s): the NIC's for a network transfer, a copy engine's for the rest."""
    return np.where(role == RDMA, topo.costs.nic_start_us, topo.costs.dma_start_us) * 1e-6


def stage_times_v2(topo: Topology, chunk_bytes, stage: np.ndarray, role: np.ndarray, src: np.ndarray,
                   dst: np.ndarray, nbytes: np.ndarray, queue: np.ndarray, after: np.ndarray, order: np.ndarray,
                   num_stages: int) -> StageCosts:
    """v2 time of every stage (see the comment above). Transfers are given as flat arrays over all stages
    (``after``: the global index of the transfer a transfer waits for, or -1); ``order`` lists, stage after
    stage, the global transfer index of every chunk entry in the stage's chunk order. ``chunk_bytes``: one size, or
    each transfer's (a plan whose network transfers have a chunk of their own, :func:`~hoccl_compiler.ir.chunk_sizes`;
    a piece that follows one of smaller chunks waits for as many of them as its first chunk holds)."""
    G = topo.num_gpus
    P = 4 * G
    S = max(num_stages, 1)
    nbytes = np.asarray(nbytes, dtype=np.int64)
    chunk_bytes = np.broadcast_to(np.asarray(chunk_bytes, dtype=np.int64), nbytes.shape)
    out_port, in_port = piece_ports(role, src, dst, G)
    costed = out_port >= 0
    loads = np.zeros((S, P))
    if costed.any():
        w = nbytes[costed].astype(np.float64)
        loads = np.bincount(stage[costed] * P + out_port[costed], weights=w, minlength=S * P)
        loads += np.bincount(stage[costed] * P + in_port[costed], weights=w, minlength=S * P)
        loads = loads.reshape(S, P)
    # per stage and port: a GPU's NVLink both ways at once is slower, and so is a NIC several GPUs write into
    cap_sp = duplex_capacity(topo, loads > 0, incast_senders(topo, stage, role, src, dst, S))
    port_time = loads / cap_sp
    ports_s = port_time.max(axis=1)
    cap_of = cap_sp.ravel()  # cap_of[stage * P + port]
    cls = QUEUE_CLASS[role]
    start_s = chunk_start_s(topo, role)
    n_chunks = np.maximum(1, -(-nbytes // chunk_bytes))
    mixed = mixed_sizes(chunk_bytes)
    # every transfer one chunk of one size (a large All-to-All's blocks): each entry is its transfer's first and last
    # chunk, and the per-chunk sums below reduce to the transfer's own (the same figures, bit for bit)
    one = not mixed and bool((n_chunks == 1).all())

    # chunk entries: transfer, chunk index k (its occurrence), bytes, position in its queue
    e_tr = np.asarray(order, dtype=np.int64)
    if one:
        e_k = None
        e_bytes = nbytes[e_tr]
    else:
        e_k = np.zeros(e_tr.size, np.int64)
        by_tr = np.argsort(e_tr, kind="stable")
        e_k[by_tr] = group_start(e_tr[by_tr])
        del by_tr  # entry-sized temporaries go as soon as they are dead: at 1024 GPUs each is 25 MB, and this is
        # the compile's peak (it ran to 60 of them at once, 1.5 GB, before)
        e_bytes = np.clip(nbytes[e_tr] - e_k * chunk_bytes[e_tr], 0, chunk_bytes[e_tr])
    e_q = queue[e_tr]
    q_of = stage[e_tr] * (int(queue.max(initial=0)) + 1) + e_q
    by_q = np.argsort(q_of, kind="stable")  # by (stage, queue), chunk order within
    e_pos = np.zeros(e_tr.size, np.int64)
    head = run_start_of(firsts(q_of[by_q]))  # in by_q's order: where each entry's queue's run starts
    e_pos[by_q] = np.arange(e_tr.size) - head
    del q_of
    live = costed[e_tr]
    # convergence: chunks of one kind at the same queue position on the same port share it
    every = bool(live.all())  # the common case: no gather and scatter through an index, no zeros to fill
    conv = None if every and e_tr.size else np.zeros(e_tr.size)
    if live.any():
        idx = slice(None) if every else np.nonzero(live)[0]
        t = e_tr[idx]
        sp = stage[t] * P
        base = (sp * 4 + cls[t] * P) * (int(e_pos.max()) + 1) + e_pos[idx] * P  # (stage, class, position) * P
        b = e_bytes[idx]
        port = in_port[t]
        conv_in = shared_delay(base + port, b) / cap_of[sp + port]
        port = out_port[t]
        conv_out = shared_delay(base + port, b) / cap_of[sp + port]
        del t, sp, base, b, port
        if every:
            conv = np.maximum(conv_in, conv_out, out=conv_in)
        else:
            conv[idx] = np.maximum(conv_in, conv_out)
        del conv_in, conv_out
    del e_pos
    tr_cap = cap_of[stage * P + np.maximum(out_port, 0)]  # each transfer's out-port bandwidth in its stage
    e_time = np.where(live, start_s[e_tr] + e_bytes / tr_cap[e_tr] + conv, 0.0)
    del live, e_bytes
    Q = max(int(queue.max(initial=-1)) + 1, G * (topo.dma_queues + 3))  # every queue of every GPU
    q_key = stage[e_tr] * Q + e_q
    q_time = np.bincount(q_key, weights=e_time, minlength=S * Q)
    del q_key, e_q
    queues_s = q_time.reshape(S, Q).max(axis=1) if Q else np.zeros(S)
    # each transfer's turn: its queue's time in the stage through its last chunk, in the chunk order (a queue that
    # takes one piece's chunks before another's is through with it early)
    done = np.zeros(nbytes.size)
    opened = np.zeros(nbytes.size)  # and through its first
    if e_tr.size:  # one array of the entries' size (the running sum, in by_q's order) beside two masks
        through = e_time[by_q]
        np.cumsum(through, out=through)
        through -= through[head] - e_time[by_q[head]]  # from each queue's first entry on
        if one:
            done[e_tr[by_q]] = through
            opened[:] = done
        else:
            at_last = (e_k == n_chunks[e_tr] - 1)[by_q]  # each transfer's last entry, and its first
            done[e_tr[by_q[at_last]]] = through[at_last]
            at_first = (e_k == 0)[by_q]
            opened[e_tr[by_q[at_first]]] = through[at_first]
            del at_last, at_first
        del through
    del e_time, by_q, head

    # pipeline fill and drain along forwarded paths (pieces of one segment are consecutive, after = i - 1)
    pipeline_s = np.zeros(S)
    chained = after >= 0
    # every path's pieces consecutive (unicast: send_forward -> rdma -> recv_forward, at most 3); else (multicast)
    # paths branch and run as deep as their chains
    consecutive = bool(np.array_equal(after[chained], np.flatnonzero(chained) - 1))
    path = np.cumsum(~chained) - 1  # consecutive: the path id per transfer
    depth = group_start(path) if consecutive else chain_depth(after)  # each transfer's place along its path
    tr_first = start_s + np.minimum(nbytes, chunk_bytes) / tr_cap  # each piece's first chunk
    # how long the piece a piece follows takes to bring that piece's first chunk (its own first chunk, or as many of
    # its smaller chunks as that holds: a network transfer in chunks of its own)
    up = np.maximum(after, 0)
    if one:
        need = None
        lead = np.where(chained, tr_first[up], 0.0)
    else:
        need = np.maximum(1, -(-np.minimum(nbytes, chunk_bytes) // chunk_bytes[up]))
        lead = np.where(chained, need * start_s[up] + np.minimum(nbytes[up], need * chunk_bytes[up]) / tr_cap[up],
                        0.0)
    if chained.any():
        first = np.minimum(nbytes, chunk_bytes)
        first_conv = np.zeros(nbytes.size)  # the convergence delay of each transfer's first chunk (the fill's)
        if one:
            first_conv[e_tr] = conv
        else:
            first_entry = e_k == 0
            first_conv[e_tr[first_entry]] = conv[first_entry]
            del first_entry
        own = start_s + first / tr_cap
        if one:  # nothing after its one chunk, and it follows a piece of one chunk
            rest = np.zeros(nbytes.size)
        else:
            # after its first chunk, a piece is busy for the rest of its own chunks, or (its queue carries other
            # transfers too) from its first chunk's turn to its last's in the chunk order
            alone = n_chunks * start_s + nbytes / tr_cap
            # a piece whose first chunk holds several of the smaller chunks of the piece it follows (a copy after a
            # network transfer in chunks of its own) starts that much later: where it is the path's slowest piece
            # its rest pays it; where the piece before it is, that one's rest already runs through those chunks
            rest = np.where(costed, np.maximum(alone - own, done - opened) +
                            np.where(chained, lead - tr_first[up], 0.0), 0.0)
            del alone
        own = np.where(costed, own + first_conv, 0.0)
        if consecutive:
            in_path = np.bincount(path, minlength=path.max() + 1)
            multi = in_path[path] > 1
            p_sum = np.bincount(path[multi], weights=own[multi], minlength=path.max() + 1)
            p_max = np.zeros(path.max() + 1)
            np.maximum.at(p_max, path[multi], rest[multi])
            p_stage = np.zeros(path.max() + 1, np.int64)
            p_stage[path] = stage
            p_time = p_sum + p_max
            np.maximum.at(pipeline_s, p_stage, p_time)
            del in_path, multi, p_sum, p_max, p_stage, p_time
        else:  # multicast: paths branch (a forwarded copy reads another flow's output): every path from a root
            fill, top = own.copy(), rest.copy()
            for d in range(1, int(depth.max()) + 1):
                at = np.flatnonzero(depth == d)
                fill[at] = fill[after[at]] + own[at]
                top[at] = np.maximum(top[after[at]], rest[at])
            np.maximum.at(pipeline_s, stage[chained], (fill + top)[chained])
            del fill, top
        del first_conv, own, rest, first
    del e_tr, e_k, conv, opened, chained, path, up, need
    time_s = np.maximum(np.maximum(ports_s, queues_s), pipeline_s)
    if num_stages == 0:
        empty = np.zeros(0)
        return StageCosts(empty, empty, empty, empty, np.zeros(P), np.zeros(Q))
    chain = StageChain(Q)
    busy = q_time.reshape(S, Q)
    tr_idx = np.flatnonzero((after >= 0) & costed)
    up_tr = after[tr_idx]
    keep = costed[up_tr]
    tr_idx, up_tr = tr_idx[keep], up_tr[keep]
    last_t = start_s + (nbytes - (n_chunks - 1) * chunk_bytes) / tr_cap  # and last chunk
    whole_t = n_chunks * start_s + nbytes / tr_cap                        # and all of it
    del keep
    # each waiting piece's depth along its path and the last chunks of its queue's pieces that follow the same piece
    # as it (unicast: its own, each piece has one follower)
    tr_depth = depth[tr_idx]
    tail_t = last_t[tr_idx]
    if np.bincount(up_tr, minlength=1).max(initial=0) > 1:
        _, group = np.unique(queue[tr_idx] * queue.size + up_tr, return_inverse=True)
        tail_t = np.bincount(group, weights=tail_t)[group]
    order_e = np.lexsort((tr_depth, stage[tr_idx]))  # by stage, then along the paths
    tr_idx, up_tr, tr_depth, tail_t = tr_idx[order_e], up_tr[order_e], tr_depth[order_e], tail_t[order_e]
    del order_e
    # how long before its queue's end a piece that waits on nothing is through (:meth:`StageChain.add_pieces`)
    early = np.where(after[up_tr] < 0, busy.ravel()[stage[up_tr] * Q + queue[up_tr]] - done[up_tr], 0.0)
    edges = (stage[tr_idx], queue[up_tr], queue[tr_idx], lead[tr_idx], last_t[tr_idx], whole_t[tr_idx], up_tr,
             early)
    bounds = np.searchsorted(edges[0], np.arange(S + 1))
    scratch = (np.zeros(queue.size), np.zeros(queue.size))
    # a GPU's DMA queues share its NVLink out-port (StageChain.add_pieces' ports): one queue shares with none
    # (or a multicast plan's copies dealt to a dma_recv queue too: passes.chunks.assign_queues)
    shared = topo.dma_queues > 1 or bool(((cls == 0) & (queue % (topo.dma_queues + 3) == topo.dma_queues + 1)).any())
    share = (np.where(cls == 0, out_port, -1), nbytes, tr_cap) if shared else None
    for st in range(S):
        lo, hi = bounds[st], bounds[st + 1]
        chain.add_pieces(busy[st], tr_idx[lo:hi], queue, up_tr[lo:hi], tr_depth[lo:hi], tr_first, tail_t[lo:hi],
                         whole_t, scratch, done, share, lead if mixed else None)
    return StageCosts(time_s, ports_s, queues_s, pipeline_s, port_time.sum(axis=0), busy.sum(axis=0), chain, busy,
                      edges)


def duplex_capacity(topo: Topology, busy: np.ndarray, senders: np.ndarray | None = None) -> np.ndarray:
    """Port bandwidths (bytes/s) per row of ``busy`` (rows x 4G: which ports carry something): a GPU whose NVLink
    out and in ports are both busy gets ``costs.nvlink_duplex`` less on each; a NIC in-port that ``senders`` GPUs
    write into at once (rows x G) ``1 + costs.nic_incast_loss (senders - 1)`` times less."""
    G = topo.num_gpus
    cap = np.broadcast_to(port_capacity(topo), busy.shape).astype(np.float64)
    d = topo.costs.nvlink_duplex
    if d != 1.0 and busy.size:
        both = busy[..., :G] & busy[..., G:2 * G]
        cap[..., :G] = np.where(both, cap[..., :G] / d, cap[..., :G])
        cap[..., G:2 * G] = np.where(both, cap[..., G:2 * G] / d, cap[..., G:2 * G])
    loss = topo.costs.nic_incast_loss
    if loss > 0 and senders is not None and busy.size:
        cap[..., 3 * G:] = cap[..., 3 * G:] / (1.0 + loss * np.maximum(np.asarray(senders) - 1, 0))
    return cap


def incast_senders(topo: Topology, stage: np.ndarray, role: np.ndarray, src: np.ndarray, dst: np.ndarray,
                   num_stages: int) -> np.ndarray | None:
    """Per stage and GPU, how many GPUs write into its NIC in the stage (None where ``nic_incast_loss`` is 0)."""
    if topo.costs.nic_incast_loss <= 0:
        return None
    G = topo.num_gpus
    rdma = np.asarray(role) == RDMA
    pairs = np.unique((np.asarray(stage)[rdma] * G + np.asarray(dst)[rdma]) * G + np.asarray(src)[rdma])
    return np.bincount(pairs // G, minlength=max(num_stages, 1) * G).reshape(max(num_stages, 1), G)


def staging_fill_s(topo: Topology, chunk_bytes, role: np.ndarray, nbytes: np.ndarray) -> float:
    """The host staging's fill and drain of a network plan (``costs.net_staging_gbps``; 0: none): the first
    network chunk's copy into the sending host's ring and the last one's out of the receiving host's
    (``chunk_bytes``: one size, or each transfer's)."""
    rate = topo.costs.net_staging_gbps
    rdma = np.asarray(role) == RDMA
    if rate <= 0 or not rdma.any():
        return 0.0
    net_chunk = int(np.broadcast_to(np.asarray(chunk_bytes), rdma.shape)[rdma].max())
    return 2 * min(net_chunk, int(np.asarray(nbytes)[rdma].max())) / (rate * 1e9)


def net_flows(topo: Topology, role: np.ndarray, src: np.ndarray, dst: np.ndarray) -> tuple[int, int]:
    """The network transfers of the busiest GPU and of the busiest node, over the whole plan: each the most
    transfers one sends, or receives (whichever more). A GPU's transfers run one after another through its rings
    (``costs.net_flow_us`` each after the first); a node's, of all its GPUs, pass through its one driving thread
    (``costs.net_node_flow_us`` each after the first)."""
    rdma = np.asarray(role) == RDMA
    if not rdma.any():
        return 0, 0
    L, N = topo.gpus_per_node, topo.nodes
    s, d = np.asarray(src)[rdma], np.asarray(dst)[rdma]
    gpu = max(int(np.bincount(s).max()), int(np.bincount(d).max()))
    node = max(int(np.bincount(s // L, minlength=N).max()), int(np.bincount(d // L, minlength=N).max()))
    return gpu, node


def plan_net_flows(plan) -> tuple[int, int]:
    """:func:`net_flows` of a whole plan (``plan.stages``' transfer tables, ``plan.topology``)."""
    cols = [np.concatenate([np.asarray(getattr(st.transfers, c), np.int64) for st in plan.stages] or [np.zeros(0)])
            for c in ("role", "src", "dst")]
    return net_flows(plan.topology, *cols)


def transfers_cost(per_gpu: float, per_node: float, gpu: float, node: float) -> float:
    """The host cost of network transfers, in the unit of ``per_gpu`` and ``per_node``: the busiest GPU's chain of
    ``gpu`` transfers (``per_gpu`` each after the first) or the busiest node's driving thread with ``node`` of them
    (``per_node`` each after the first), whichever takes longer."""
    return max(per_gpu * max(0.0, gpu - 1), per_node * max(0.0, node - 1))


def net_flows_s(topo: Topology, flows: tuple[int, int]) -> float:
    """The host cost of a network plan's transfers (:func:`net_flows`), in seconds (:func:`transfers_cost`)."""
    c = topo.costs
    return transfers_cost(c.net_flow_us, c.net_node_flow_us, *flows) * 1e-6


def plan_time_v2(topo: Topology, stage_s: np.ndarray, network: bool, sync_s: float | None = None,
                 fill_s: float = 0.0, flows: tuple[int, int] = (0, 0), overlap_s: float | None = None
                 ) -> tuple[float, dict[str, float]]:
    """A plan's v2 time from its stage times, and its parts: the call's start (network plans: with the staging's
    ``fill_s``, :func:`staging_fill_s`), the stages, the barriers between stages (``sync_s`` each: by default
    ``costs.stage_sync_us`` for network plans, none within a node) and, for network plans, the host cost of the
    ``flows`` (busiest GPU's, busiest node's network transfers, :func:`net_flows`): :func:`net_flows_s`. Where no
    barrier separates the stages (``sync_s`` 0, as in both runtimes) and ``overlap_s`` is given
    (:func:`overlapped_s`), the stages take that, not their sum: each port and queue runs on into the next stage."""
    n = int(np.asarray(stage_s).size)
    c = topo.costs
    call = ((c.net_call_us * 1e-6 + fill_s) if network else c.call_us * 1e-6) if n else 0.0
    if sync_s is None:
        sync_s = c.stage_sync_us * 1e-6 if network else 0.0
    sync = sync_s * max(0, n - 1)
    per_flow = net_flows_s(topo, flows) if network and n else 0.0
    stages = float(np.sum(stage_s)) if overlap_s is None or (sync_s > 0 and n > 1) else float(overlap_s)
    return call + stages + sync + per_flow, {"call_s": call, "stages_s": stages, "stage_sync_s": sync,
                                             "net_flows_s": per_flow}
