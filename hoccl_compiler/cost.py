"""The cost model shared by the scheduler, its report and ``hoccl-inspect``.

Every GPU has four ports: NVLink out, NVLink in, NIC out and NIC in, at the topology's bandwidths.
A transfer uses the out port of its source and the in port of its destination, on NVLink for
native and forwarding copies and on the NIC for RDMA. Local copies (a rank to itself) are not
costed.

* A HOCCL stage lasts ``max over ports of load / bandwidth``: the weighted chunk interleaving
  serves every transfer of a queue in proportion to its size, and a stage holds at most one RDMA
  flow per NIC and direction, so every port can finish its load together.
* The lower bound of any schedule of T is the same maximum over the whole of T.
* The two simpler schedules, in the same port model:
  - *everything at once*: all transfers start together and each port is shared max-min fairly
    among the transfers that use it (what uncoordinated copy streams and congestion-controlled
    queue pairs converge to). Completions within ``FAIR_SHARE_TOLERANCE`` of the elapsed time are
    processed as one event at the last of them, which errs against this baseline (never below the exact
    fair-share time, so never below the lower bound).
  - *naive rounds*: round k sends flow u -> (u + k) mod G for every u (one flow per GPU each way,
    blind to domains), all pieces of a round together, the round lasting as long as its busiest port.
"""

from __future__ import annotations

import numpy as np

from .ir import LOCAL, RDMA
from .topology import Topology

__all__ = ["port_capacity", "piece_ports", "port_loads", "loads_time", "lower_bound", "naive_rounds_time",
           "fair_share_time", "FAIR_SHARE_TOLERANCE"]

FAIR_SHARE_TOLERANCE = 1e-2


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


def naive_rounds_time(flow_src, flow_dst, role, src, dst, nbytes, piece_flow, topo: Topology) -> tuple[float, int]:
    """Rounds by shift k = (dst - src) mod G; returns (total time, number of non-empty rounds)."""
    G = topo.num_gpus
    shift = (flow_dst[piece_flow] - flow_src[piece_flow]) % G
    out_port, in_port = piece_ports(role, src, dst, G)
    costed = out_port >= 0
    shift, out_port, in_port, w = shift[costed], out_port[costed], in_port[costed], nbytes[costed]
    if not w.size:
        return 0.0, 0
    rounds, inverse = np.unique(shift, return_inverse=True)
    P = 4 * G
    loads = np.bincount(inverse * P + out_port, weights=w, minlength=rounds.size * P)
    loads += np.bincount(inverse * P + in_port, weights=w, minlength=rounds.size * P)
    times = (loads.reshape(rounds.size, P) / port_capacity(topo)).max(axis=1)
    return float(times.sum()), int(rounds.size)


def fair_share_time(role, src, dst, nbytes, topo: Topology, max_events: int = 100_000) -> float:
    """Completion time of every transfer started at once under max-min fair port sharing."""
    G = topo.num_gpus
    out_port, in_port = piece_ports(role, src, dst, G)
    keep = (out_port >= 0) & (nbytes > 0)
    out_port, in_port = out_port[keep], in_port[keep]
    remaining = nbytes[keep].astype(np.float64)
    capacity = port_capacity(topo)
    now = 0.0
    for _ in range(max_events):
        if not remaining.size:
            return now
        rate = _max_min_rates(out_port, in_port, capacity)
        finish = remaining / rate
        dt = float(finish.min())
        # Completions within FAIR_SHARE_TOLERANCE of the elapsed time count as one event at the *last* of
        # them: the grouped transfers hold their ports until then, and the others run on at their rates,
        # which max-min fairness could only raise once a transfer ends. So the result is slightly
        # pessimistic for this baseline (within the tolerance), never below the exact fair-share time, and so
        # never below the lower bound.
        done = finish <= dt + FAIR_SHARE_TOLERANCE * (now + dt)
        dt = float(finish[done].max())
        now += dt
        remaining = remaining[~done] - rate[~done] * dt
        out_port, in_port = out_port[~done], in_port[~done]
    raise RuntimeError(f"fair-share simulation did not finish in {max_events} events")


def _max_min_rates(out_port: np.ndarray, in_port: np.ndarray, capacity: np.ndarray) -> np.ndarray:
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
