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
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .collective import CollectiveSpec, Layout

__all__ = ["MULTICAST_KINDS", "applies", "route", "roots_of", "source_segments", "staged", "forwarded_schedule"]

MULTICAST_KINDS = ("allgather", "broadcast")


def applies(kind: str, nodes: int, gpus_per_node: int) -> bool:
    """Whether multicast routing changes the plan of ``kind`` on this machine (else the unicast plan is the one)."""
    G = nodes * gpus_per_node
    if kind == "allgather":
        return nodes > 1 and gpus_per_node > 1
    return kind == "broadcast" and G > 2


def route(spec: CollectiveSpec, topo, lay: Layout) -> Layout:
    """``lay`` routed for multicast (flows split into parts where the routing needs it, and ``via``); ``lay``
    itself where :func:`applies` is false."""
    if not applies(spec.kind, topo.nodes, topo.gpus_per_node) or lay.src.size == 0:
        return lay
    if spec.kind == "allgather":
        return _allgather(topo, lay)
    return _broadcast(spec, topo, lay)


def _allgather(topo, lay: Layout) -> Layout:
    G, L = topo.num_gpus, topo.gpus_per_node
    u, v = lay.src, lay.dst
    index = np.full(G * G, -1, np.int64)
    index[u * G + v] = np.arange(u.size)
    node_u, node_v = u // L, v // L
    landing = node_v * L + u % L  # GPU (node of v, local index of u): where u's block enters v's node
    via = np.where((node_u != node_v) & (v != landing), index[u * G + landing], -1)
    return dataclasses.replace(lay, via=via)


def _broadcast(spec: CollectiveSpec, topo, lay: Layout) -> Layout:
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
    node_chain = [(a + k) % N for k in range(N)]  # the order the parts run through the nodes
    for f, (v, p) in enumerate(zip(dst.tolist(), part.tolist(), strict=True)):
        if p < 0:
            continue
        b, q = divmod(v, L)
        if b == a:  # the root's node: a chain from the root through the node, every part down it
            prev = b * L + (q - 1) % L
        elif q == p % L:  # the GPU on the part's rail: from the same rail of the node before in the chain
            prev = node_chain[node_chain.index(b) - 1] * L + q
        else:  # round its node's ring from the GPU on the part's rail: each GPU takes from its predecessor only
            prev = b * L + (q - 1) % L
        via[f] = -1 if prev == root else flow_of[(prev, p)]
    n = dst.size
    return dataclasses.replace(lay, src=np.full(n, root, np.int64), dst=dst, bytes=nbytes, src_offset=offset,
                               dst_offset=offset, via=via)


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
