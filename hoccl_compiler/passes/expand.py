"""Pass 2: the HOCCL matrix T. Every inter-node flow u -> v becomes up to three pieces.

    u --send_forward--> ū --rdma--> v̄ --recv_forward--> v        (NVLink, network, NVLink)

A forward whose two ends are one GPU disappears (u is its own peer, or forwarding is off). Each
piece keeps the index of its flow, so later passes move chunk k of the three pieces in order.

A multicast plan (the layout has ``via``: :mod:`hoccl_compiler.multicast`) has no forwarding pieces: a flow moves
in one piece from the GPU that holds its bytes (its source, or for a forwarded flow the destination of the flow it
reads from) to its destination, native within a node, rdma between nodes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import LOCAL, NATIVE, RDMA, RECV_FORWARD, SEND_FORWARD, CompileOptions, CompileState, PieceTable


def holders(lay) -> np.ndarray:
    """Per flow, the GPU its bytes leave from: its source, or where it is forwarded, the destination of the flow
    whose output it reads."""
    if lay.via is None:
        return lay.src
    return np.where(lay.via >= 0, lay.dst[np.maximum(lay.via, 0)], lay.src)


def run(state: CompileState, options: CompileOptions) -> CompileState:
    topo, lay = state.topology, state.layout
    assert lay is not None, "expand runs after traffic"
    G = topo.num_gpus
    node = np.arange(G, dtype=np.int64) // topo.gpus_per_node
    flow = np.arange(lay.src.size, dtype=np.int64)
    u, v, nbytes = holders(lay), lay.dst, lay.bytes
    peer = np.asarray(topo.peer_array(), dtype=np.int64) if lay.via is None else np.arange(G, dtype=np.int64)

    local = u == v
    native = (~local) & (node[u] == node[v])
    inter = node[u] != node[v]
    ubar, vbar = peer[u], peer[v]
    send_fwd = inter & (ubar != u)
    recv_fwd = inter & (vbar != v)

    parts = [  # (mask, role, src, dst): flows stay in order; roles in path order within a flow
        (local, LOCAL, u, v),
        (native, NATIVE, u, v),
        (send_fwd, SEND_FORWARD, u, ubar),
        (inter, RDMA, ubar, vbar),
        (recv_fwd, RECV_FORWARD, vbar, v),
    ]
    cols = {k: [] for k in ("flow", "role", "src", "dst", "bytes")}
    for mask, role, src, dst in parts:
        cols["flow"].append(flow[mask])
        cols["role"].append(np.full(int(mask.sum()), role, dtype=np.int64))
        cols["src"].append(src[mask])
        cols["dst"].append(dst[mask])
        cols["bytes"].append(nbytes[mask])
    arrays = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
    order = np.lexsort((arrays["role"], arrays["flow"]))
    pieces = PieceTable(**{k: a[order] for k, a in arrays.items()})

    hoccl = np.zeros((G, G), dtype=np.int64)
    np.add.at(hoccl, (pieces.src, pieces.dst), pieces.bytes)
    return dataclasses.replace(state, pieces=pieces, hoccl=hoccl)
