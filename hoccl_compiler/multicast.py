"""Multicast routing: bytes that several GPUs need cross the network once per node and spread inside it.

An AllGather's or Broadcast's layout (:func:`hoccl_compiler.collective.layout`) lists one unicast flow per source
and destination, so on nodes of ``L`` GPUs a block would cross the network once per destination GPU. Here each
flow is routed instead: a *direct* flow reads the source's input, a *forwarded* flow (``via[f] = g``) reads the
same bytes from the output of ``dst[g]``, which flow ``g`` fills, chunk after chunk (the chunk schedule makes
chunk k of ``f`` wait for chunk k of ``g``). Flows of a multicast plan expand without NVLink forwarding pieces:
every network transfer goes from the GPU that holds the bytes to the GPU that receives them, on the holder's NIC
rail (the same local index on both nodes).

* AllGather, GPU u = (node a, local i): u sends its block to every GPU of node a (NVLink) and, for every other node
  b, to GPU (b, i) over the network (the rail that :func:`~hoccl_compiler.passes.stages.iter_matchings` balances:
  N - 1 stages of one network transfer per GPU and direction); GPU (b, i) passes it on to the other GPUs of node b.
  Each GPU sends and receives (N - 1) blocks over its NIC and N (L - 1) over NVLink: each block crosses the network
  once per node.
* Broadcast of S bytes from root r = (a, i): within node a a chain, r -> (a, i+1) -> ... -> (a, i-1), every GPU
  passing on what its predecessor wrote into its output, chunk by chunk (each GPU receives from one sender: a root
  that sent to several while they passed parts on to each other would share every in-port with them and starve).
  Across nodes S is cut into one part per rail: GPU (a, p) sends part p down the chain of nodes a, a+1, ..., a+N-1
  on rail p, and in each other node GPU (b, p) passes it on to the next node and round its node's ring, (b, p) ->
  (b, p+1) -> ... -> (b, p-1): every GPU takes the parts from its predecessor only. Every GPU receives S, every
  NIC moves its S / L once each way. Parts enter a node at different GPUs, a chain hop apart each; until
  2026-12-04 the entry GPU passed its part to every other GPU of its node itself, and those copies met in the
  in-ports out of step (the chunk simulation: a 2x8 Broadcast of 1 GiB 10.3 ms, 4x8 10.9). Round the ring, with
  the chunk order by when a chunk can be there (:func:`hoccl_compiler.passes.chunks.chunk_order`): 7.3 and 7.5 ms.
  From 3 nodes on the parts run down two trees of nodes instead (:func:`node_trees`), about log2(N) network hops
  deep rather than N - 1, each GPU still making one network send and one receive. A plan whose network transfers
  move in chunks of their own keeps the chain (``route(..., trees=False)``): down it a part keeps its rail, so each
  hop passes on one small network chunk, where a tree's inner node passes a part on from another rail, after one
  copy of its ring in the copies' chunk (dgx-h100, 1 GiB on 4 nodes: 1.117x the bound against the trees' 1.183x).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .collective import CollectiveSpec, Layout

__all__ = ["MULTICAST_KINDS", "applies", "route", "roots_of", "source_segments", "staged", "forwarded_schedule",
           "use_trees", "node_chain", "node_trees"]

MULTICAST_KINDS = ("allgather", "broadcast")


def applies(kind: str, nodes: int, gpus_per_node: int) -> bool:
    """Whether multicast routing changes the plan of ``kind`` on this machine (else the unicast plan is the one)."""
    G = nodes * gpus_per_node
    if kind == "allgather":
        return nodes > 1 and gpus_per_node > 1
    return kind == "broadcast" and G > 2


def route(spec: CollectiveSpec, topo, lay: Layout, trees: bool = True) -> Layout:
    """``lay`` routed for multicast (flows split into parts where the routing needs it, and ``via``); ``lay``
    itself where :func:`applies` is false. ``trees``: a Broadcast's parts down two trees of nodes where
    :func:`use_trees` says (False: one chain of nodes per rail, whatever the nodes, for a plan whose network
    transfers have a chunk of their own: a part keeps its rail down a chain, so smaller network chunks shorten
    every hop, while in a tree a part leaves an inner node by another rail, through a copy of that node's ring)."""
    if not applies(spec.kind, topo.nodes, topo.gpus_per_node) or lay.src.size == 0:
        return lay
    if spec.kind == "allgather":
        return _allgather(topo, lay)
    return _broadcast(spec, topo, lay, trees)


def _allgather(topo, lay: Layout) -> Layout:
    G, L = topo.num_gpus, topo.gpus_per_node
    u, v = lay.src, lay.dst
    index = np.full(G * G, -1, np.int64)
    index[u * G + v] = np.arange(u.size)
    node_u, node_v = u // L, v // L
    landing = node_v * L + u % L  # GPU (node of v, local index of u): where u's block enters v's node
    via = np.where((node_u != node_v) & (v != landing), index[u * G + landing], -1)
    return dataclasses.replace(lay, via=via)


def _broadcast(spec: CollectiveSpec, topo, lay: Layout, trees: bool = True) -> Layout:
    G, L, N = topo.num_gpus, topo.gpus_per_node, topo.nodes
    root, size = int(spec.root or 0), int(spec.size_bytes or 0)
    a, i = divmod(root, L)
    P = L if N > 1 else 1  # parts: one per rail where there is a network, else the whole
    bounds = np.array([size * p // P for p in range(P + 1)], np.int64)
    part_bytes = np.diff(bounds)
    parts = np.nonzero(part_bytes)[0]
    rows: list[tuple[int, int, int]] = []  # (dst, part, bytes) in flow order: by dst, then offset
    for v in range(G):
        if v == root:
            if not spec.in_place:
                rows.append((v, -1, size))  # the root's own copy, whole
            continue
        rows += [(v, int(p), int(part_bytes[p])) for p in parts]
    dst = np.array([r[0] for r in rows], np.int64)
    part = np.array([r[1] for r in rows], np.int64)
    nbytes = np.array([r[2] for r in rows], np.int64)
    offset = np.where(part >= 0, bounds[np.maximum(part, 0)], 0)
    flow_of = {(int(d), int(p)): f for f, (d, p) in enumerate(zip(dst, part, strict=True))}
    via = np.full(dst.size, -1, np.int64)
    parent, rail = (node_trees if trees and use_trees(N, L) else node_chain)(N, L, a, i)
    for f, (v, p) in enumerate(zip(dst.tolist(), part.tolist(), strict=True)):
        if p < 0:
            continue
        b, q = divmod(v, L)
        if b == a:  # the root's node: a chain from the root through the node, every part down it
            prev = b * L + (q - 1) % L
        elif q == rail[b, p]:  # the GPU the part enters by: from the same rail of the part's parent node
            prev = parent[b, p] * L + q
        else:  # round its node's ring from the GPU it entered by: each GPU takes from its predecessor only
            prev = b * L + (q - 1) % L
        via[f] = -1 if prev == root else flow_of[(prev, p)]
    n = dst.size
    return dataclasses.replace(lay, src=np.full(n, root, np.int64), dst=dst, bytes=nbytes, src_offset=offset,
                               dst_offset=offset, via=via)


def use_trees(nodes: int, gpus_per_node: int) -> bool:
    """Whether a Broadcast's parts run down two trees of nodes (:func:`node_trees`) rather than one chain
    (:func:`node_chain`): from ``TREE_NODES`` nodes on, where the node has an even number of GPUs (a tree's inner
    node sends half the parts to each of two children, one rail each)."""
    return nodes >= TREE_NODES and gpus_per_node >= 2 and gpus_per_node % 2 == 0


TREE_NODES = 3


def node_chain(N: int, L: int, a: int, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Per node and part, the node the part comes from and the rail it enters by (-1 on the root's node ``a``):
    every part down the chain of nodes a, a+1, ..., a+N-1, part p on rail p. ``i``: the root's GPU in its node."""
    parent = np.full((N, L), -1, np.int64)
    rail = np.full((N, L), -1, np.int64)
    order = [(a + k) % N for k in range(N)]
    for prev, b in zip(order, order[1:], strict=False):
        parent[b] = prev
        rail[b] = np.arange(L)
    return parent, rail


def node_trees(N: int, L: int, a: int, i: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`node_chain`'s tables for two trees of nodes (NCCL's double binary tree, here on rails).

    The other nodes, in the order a+1, ..., a+N-1, make a binary heap (tree A: position j's children are 2j+1 and
    2j+2) and, reversed, a second one (tree B). The first half of the parts runs down tree A, the second down tree
    B, each from the root's node to its tree's top. A node with children in one tree has none in the other (the
    heaps' inner positions are the first half of each order), so it sends its L/2 parts of that tree to each of at
    most two children, and every node takes all L parts, half from each parent: L streams at most out of a node and
    L into it, one per rail, so every GPU makes one network send and one receive.

    Rails: a node takes one tree's parts on the even rails and the other tree's on the odd ones (the root's node
    sends part k of a half on rail 2k or 2k + 1). It passes a part on to one child from the GPU the part came in by
    and to the other from the next GPU of its ring, one NVLink hop on, so the part's rail keeps or changes its
    parity. Which child changes it
    is chosen so that every node's two halves come in on rails of different parity: a 2-colouring of the nodes in
    which siblings differ in both trees, always found for these two heaps (checked for up to 3,000 nodes); where
    it were not, the chain is used. Depth: about log2(N) network hops and one NVLink hop per level, against the
    chain's N - 1 network hops."""
    others = [(a + k) % N for k in range(1, N)]
    M = len(others)
    half = L // 2
    orders = (others, others[::-1])  # tree A's heap order, tree B's
    # parity of the rails each node takes tree A's half on (tree B's: the other): siblings differ in both trees,
    # and tree B's top takes its half from the root's node on the rails tree A's top does not use
    links: dict[int, list[tuple[int, int]]] = {b: [] for b in others}  # (other node, 1: must differ, 0: equal)
    for order in orders:
        for j in range(M):
            if 2 * j + 2 < M:
                x, y = order[2 * j + 1], order[2 * j + 2]
                links[x].append((y, 1))
                links[y].append((x, 1))
    if M > 1:
        links[orders[0][0]].append((orders[1][0], 0))
        links[orders[1][0]].append((orders[0][0], 0))
    parity: dict[int, int] = {}
    for start in others:
        if start in parity:
            continue
        parity[start] = 0
        todo = [start]
        while todo:
            x = todo.pop()
            for y, differ in links[x]:
                want = parity[x] ^ differ
                if y not in parity:
                    parity[y] = want
                    todo.append(y)
                elif parity[y] != want:
                    return node_chain(N, L, a, i)
    parent = np.full((N, L), -1, np.int64)
    rail = np.full((N, L), -1, np.int64)
    for t, order in enumerate(orders):
        parts = np.arange(half) + t * half
        own = np.array([parity[b] ^ t for b in order], np.int64)  # this tree's rail parity per heap position
        for j, b in enumerate(order):
            if j == 0:  # from the root's node, part k on rail 2k + parity
                parent[b, parts], rail[b, parts] = a, 2 * np.arange(half) + own[0]
            else:
                up = (j - 1) // 2
                parent[b, parts] = order[up]
                rail[b, parts] = (rail[order[up], parts] + (own[j] != own[up])) % L
    return parent, rail


def roots_of(via: np.ndarray) -> np.ndarray:
    """Per flow, the direct flow its bytes come from (itself where direct), following ``via`` (acyclic)."""
    root = np.arange(via.size, dtype=np.int64)
    nxt = via.copy()
    while (nxt >= 0).any():
        has = nxt >= 0
        root[has] = nxt[has]
        nxt[has] = via[nxt[has]]
    return root



def staged(state, stage_direct):
    """The stages pass of a multicast plan: the direct flows are staged as a unicast plan's flows are
    (``stage_direct(state)``: the pass itself, on a state of those flows alone), and each forwarded flow moves in
    the stages of the direct flow it descends from, range for range; its segments wait on its source's (the
    Schedule's ``seg_after``). Where direct flows share a GPU pair (a broadcast's parts), which the decomposition
    cannot tell apart, every flow moves whole in one stage (its network transfers, one per GPU and direction,
    allow it)."""
    lay, pieces, G = state.layout, state.pieces, state.topology.num_gpus
    via = lay.via
    direct = np.flatnonzero(via < 0)
    cells = lay.src[direct] * G + lay.dst[direct]
    report: dict = {}
    if np.unique(cells).size == cells.size:
        renumber = np.cumsum(via < 0) - 1
        keep = via[pieces.flow] < 0
        sub_pieces = dataclasses.replace(pieces, **{k: getattr(pieces, k)[keep] for k in
                                                    ("flow", "role", "src", "dst", "bytes")})
        sub_pieces = dataclasses.replace(sub_pieces, flow=renumber[sub_pieces.flow])
        sub_lay = dataclasses.replace(lay, **{k: getattr(lay, k)[direct] for k in
                                              ("src", "dst", "bytes", "src_offset", "dst_offset")}, via=None)
        sub = stage_direct(dataclasses.replace(state, layout=sub_lay, pieces=sub_pieces)).schedule
        rec_stage, rec_flow, rec_bytes, num_stages = sub.seg_stage, direct[sub.seg_flow], sub.seg_bytes, sub.num_stages
        report = dict(sub.report)
    else:
        rec_stage, rec_flow, rec_bytes = np.zeros(direct.size, np.int64), direct, lay.bytes[direct]
        num_stages = int(bool(direct.size))
        report = {"rdma_stages": num_stages if (lay.src // state.topology.gpus_per_node !=
                                                lay.dst // state.topology.gpus_per_node).any() else 0}
    return dataclasses.replace(state, schedule=forwarded_schedule(state, rec_stage, rec_flow, rec_bytes, num_stages,
                                                                  report))


def forwarded_schedule(state, rec_stage, rec_flow, rec_bytes, num_stages: int, report: dict):
    """The Schedule of a multicast plan from its direct flows' records (stage, flow, bytes moved there; a pattern
    plan's shifts give them too, :func:`hoccl_compiler.pattern.expand`): every forwarded flow moves in the stages of
    the direct flow it descends from, range for range, each of its segments waiting on its source's."""
    from .ir import Schedule
    from .passes.stages import segments_of, stage_times_of_segments

    lay = state.layout
    via = lay.via
    # every forwarded flow gets the records of the direct flow it descends from
    by_flow = np.argsort(rec_flow, kind="stable")
    rec_stage, rec_flow, rec_bytes = rec_stage[by_flow], rec_flow[by_flow], rec_bytes[by_flow]
    start = np.searchsorted(rec_flow, np.arange(via.size))
    count = np.searchsorted(rec_flow, np.arange(via.size), side="right") - start
    forwarded = np.flatnonzero(via >= 0)
    root = roots_of(via)[forwarded]
    n = count[root]
    pick = np.repeat(start[root] - np.cumsum(n) + n, n) + np.arange(int(n.sum()))
    seg_stage, seg_flow, seg_offset, seg_bytes = segments_of(
        [rec_stage, rec_stage[pick]], [rec_flow, np.repeat(forwarded, n)], [rec_bytes, rec_bytes[pick]],
        num_stages, lay.bytes)
    order = np.lexsort((seg_flow, seg_stage))
    seg_stage, seg_flow, seg_offset, seg_bytes = (a[order] for a in (seg_stage, seg_flow, seg_offset, seg_bytes))
    seg_after = source_segments(seg_stage, seg_flow, seg_offset, seg_bytes, via, num_stages)
    if seg_after is None:
        from .errors import ScheduleError
        raise ScheduleError("internal: a forwarded flow's segment has no matching segment of its source; please "
                            "report this")
    stage_time_s = stage_times_of_segments(state, seg_stage, seg_flow, seg_bytes, num_stages)
    return Schedule(num_stages=num_stages, seg_stage=seg_stage, seg_flow=seg_flow, seg_offset=seg_offset,
                    seg_bytes=seg_bytes, stage_time_s=stage_time_s, report=report, seg_after=seg_after)


def source_segments(seg_stage, seg_flow, seg_offset, seg_bytes, via, num_stages: int) -> np.ndarray | None:
    """Per segment, the segment of the flow it reads from (``via``) in the same stage, whose chunk k its chunk k
    waits for (-1 for a direct flow's); None where a forwarded segment has none of the same byte range."""
    S = max(num_stages, 1)
    key = seg_flow * S + seg_stage
    by_key = np.argsort(key, kind="stable")
    src_seg = np.where(via[seg_flow] >= 0, via[seg_flow] * S + seg_stage, -1)
    if not key.size:
        return np.zeros(0, np.int64)
    at = np.minimum(np.searchsorted(key[by_key], np.maximum(src_seg, 0)), key.size - 1)
    seg_after = np.where(src_seg >= 0, by_key[at], -1)
    m = np.maximum(seg_after, 0)
    if ((src_seg >= 0) & ((key[m] != src_seg) | (seg_offset[m] != seg_offset) | (seg_bytes[m] != seg_bytes))).any():
        return None
    return seg_after
