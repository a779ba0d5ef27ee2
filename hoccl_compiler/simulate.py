"""A chunk-level event simulation of a plan, from the file alone: what the fluid cost model cannot see.

The cost model (:mod:`hoccl_compiler.cost`) lets every transfer of a stage share its ports at once. A real queue
is one copy engine (or one NIC queue pair): it moves one chunk at a time, in its order. Here:

* every queue runs its entries of the stage's chunk order one after the other, each chunk paying its start
  (``topology.costs``: the DMA start measured at about 2.5 us on the H200; the NIC's) before its bytes move;
* a chunk may start only once the chunk it waits for (``after``: the same chunk of the piece before it on a
  forwarding path) has landed;
* the chunks moving at one moment share each port (a GPU's NVLink out and in, NIC out and in) max-min fairly,
  recomputed at every start and end, so several queues sending to one destination split its in-port; a GPU whose
  NVLink moves chunks both ways at that moment has ``costs.nvlink_duplex`` less bandwidth each way;
* each stage is simulated alone (``stage_s``, what v2's stage times describe), and, where no barrier separates the
  stages (``costs.stage_sync_us`` 0, as in both runtimes), the whole plan at once with every queue running on into
  its next stage's chunks (``overlapped_s``: the plan's stages); with a barrier, the stages one after the other.
  The whole comes after the call's start (network plans: with the host staging's fill and drain) and with the
  network transfers' host cost (``costs.net_flow_us`` and ``net_node_flow_us``): the composition of the cost
  model v2 (:func:`hoccl_compiler.cost.plan_time_v2`), so the two compare stage by stage and as a whole.

With zero start costs a schedule whose queues keep their ports busy meets the
lower bound; destination hot spots (every GPU sending to the same one first) and serial engines show up as
time above it::

    queue of GPU 1   [->0 ......... 1/6 of GPU 0's in-port ......][->2 ...]
    queue of GPU 2   [->0 ......... 1/6 ..........................][->3 ...]      ascending order: 6 senders, 1 port
    queue of GPU 1   [->2][->3][->4] ...                                         rotated: a permutation each step
    queue of GPU 2   [->3][->4][->5] ...
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .cost import (
    chunk_start_s,
    duplex_capacity,
    has_network,
    incast_senders,
    max_min_rates,
    piece_ports,
    plan_net_flows,
    plan_time_v2,
    port_capacity,
    staging_fill_s,
)
from .errors import PlanError
from .ir import RDMA, mixed_sizes, plan_chunk_sizes, waited_chunk
from .schema import Plan
from .units import chain_depth

__all__ = ["simulate", "Simulation", "ready_first_order", "critical_path_s"]


@dataclass(frozen=True)
class Simulation:
    total_s: float  # the call's start, the stages (overlapped where no barrier separates them), the barriers
    stage_s: tuple[float, ...]  # each stage alone on the ports
    chunks: int
    overlapped_s: float | None = None  # all stages at once, each queue running on into its next stage's chunks


def simulate(plan: Plan, *, chunk_start_s: float | None = None, nic_start_s: float | None = None,
             max_events: int = 5_000_000) -> Simulation:
    """Simulate ``plan`` chunk by chunk (see the module docstring). ``chunk_start_s`` / ``nic_start_s`` replace
    the topology's per-chunk DMA / NIC start costs. A plan whose indices point outside what they index (a damaged
    file) raises :class:`~hoccl_compiler.errors.PlanError` (:func:`~hoccl_compiler.verify.check_indices`)."""
    from .verify import check_indices

    check_indices(plan)
    topo = plan.topology
    dma_start = topo.costs.dma_start_us * 1e-6 if chunk_start_s is None else chunk_start_s
    nic_start = topo.costs.nic_start_us * 1e-6 if nic_start_s is None else nic_start_s
    G = topo.num_gpus
    network = any(has_network(np.asarray(st.transfers.role)) for st in plan.stages)
    barrier = network and topo.costs.stage_sync_us > 0
    # every stage's transfers in one numbering (stage after stage); ``after`` stays within a stage
    cols = {c: [] for c in ("role", "src", "dst", "bytes", "queue", "after")}
    base = 0
    for stage in plan.stages:
        tr = stage.transfers
        for c in ("role", "src", "dst", "bytes", "queue"):
            cols[c].append(np.asarray(getattr(tr, c), dtype=np.int64))
        after = np.asarray(tr.after, dtype=np.int64)
        cols["after"].append(np.where(after >= 0, after + base, -1))
        base += after.size
    flat = {c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in cols.items()}
    role, after_of, nbytes_of, queue_of = flat["role"], flat["after"], flat["bytes"], flat["queue"]
    size = plan_chunk_sizes(plan, role)  # each transfer's chunk (the network's own, where the plan has one)
    out_port, in_port = piece_ports(role, flat["src"], flat["dst"], G)  # local copies use no port
    sim = _Run(topo, role, flat["src"], flat["dst"], out_port, in_port, np.where(role == RDMA, nic_start, dma_start),
               np.maximum(1, -(-nbytes_of // size)), after_of, plan.plan_id, max_events,
               size if plan.options.net_chunk_bytes is not None else None, nbytes_of)
    offsets = np.cumsum([0] + [len(st.transfers.flow) for st in plan.stages])
    entries = []  # per stage: (queue, transfer, k, bytes) in its chunk order
    for i, stage in enumerate(plan.stages):
        seen: dict[int, int] = {}
        mine = []
        for t in stage.chunks:
            g = int(offsets[i] + t)
            k = seen.get(g, 0)
            seen[g] = k + 1
            left = int(nbytes_of[g]) - k * int(size[g])
            mine.append((int(queue_of[g]), g, k, max(0, min(int(size[g]), left)) if nbytes_of[g] else 0))
        entries.append(mine)
    n_chunks = sum(len(e) for e in entries)
    # each stage alone on the ports (what v2's stage times describe), then, where no barrier separates them (both
    # runtimes), the whole plan with every queue running on into its next stage's chunks
    stage_times = [sim.run(e, f"stage {st.index}") for e, st in zip(entries, plan.stages, strict=True)]
    whole = None if barrier or len(entries) < 2 else sim.run([e for st in entries for e in st], "the plan")
    total, _ = plan_time_v2(topo, np.array(stage_times), network, fill_s=_fill(plan),
                            flows=plan_net_flows(plan), overlap_s=whole)
    return Simulation(total, tuple(stage_times), n_chunks, whole)


def ready_first_order(topo, chunk_bytes, stage, role, src, dst, nbytes, queue, after,
                      order: np.ndarray) -> np.ndarray:
    """``order`` (a chunk order over these transfers, stage after stage) list-scheduled, stage by stage: each queue,
    once free, starts, of its chunks whose dependency has landed, the one with the longest way still ahead of it
    (:func:`critical_path_s`; ties: the first in ``order``), or waits for the first to land, a chunk taking its start
    cost and its bytes at its path's port speed (the simulation's rules without its max-min sharing of the ports, so
    that it is fast enough for the compiler). The chunks in the order they start: an order in which no queue holds a
    chunk that is not there yet while one behind it is (:func:`hoccl_compiler.passes.chunks.ready_first`).

    The longest way first: a Broadcast's root node passes every part down its chain of GPUs, and each part leaves
    the node from its own GPU of the chain. Taken as they come (by position in ``order``, until 2026-12-04) the parts
    ended together, and the last chunk of the part that leaves the node last still had its network hop and the
    other node's ring ahead; longest first, the root sends its own rail's part (whose network hop reads the root's
    input) at the end, and every part's early chunks before its late ones, so that every NIC is fed: the chunk
    simulation 5-11% less for 1 GiB on 2-8 nodes of dgx-h100 and paper-h800 (docs/results/2026-12-04-s38/).

    Each queue keeps its chunks in two heaps, those whose dependency has started by when it lands and those that
    have landed by priority: O(n log n), 0.33 s for a 65,536-entry 8x8 Broadcast order on the CPU VM, where a scan of
    each queue's list per look took 1.23 s (the same orders on 60 cases, 2026-12-04). ``chunk_bytes``: one size, or
    each transfer's (a chunk waits for the chunk of its dependency that holds its last byte: ``waited_chunk``)."""
    import heapq

    size = np.broadcast_to(np.asarray(chunk_bytes, dtype=np.int64), nbytes.shape)
    n_chunks = np.maximum(1, -(-nbytes // size))
    out_port, in_port = piece_ports(role, src, dst, topo.num_gpus)
    cap = port_capacity(topo)
    rate = np.where(out_port >= 0, np.minimum(cap[np.maximum(out_port, 0)], cap[np.maximum(in_port, 0)]), np.inf)
    start_s = chunk_start_s(topo, role)
    base = np.cumsum(n_chunks) - n_chunks  # transfer t's chunk k is entry base[t] + k of the per-chunk arrays
    e_tr = np.repeat(np.arange(n_chunks.size), n_chunks)
    e_k = np.arange(e_tr.size) - base[e_tr]
    took_e = start_s[e_tr] + np.clip(nbytes[e_tr] - e_k * size[e_tr], 0, size[e_tr]) / rate[e_tr]
    ahead = (-critical_path_s(n_chunks, took_e, after, *((size, nbytes) if mixed_sizes(size) else ()))).tolist()
    size_of, nbytes_of = size.tolist(), nbytes.tolist()
    took_e = took_e.tolist()
    o_stage = stage[order]
    bounds = np.searchsorted(o_stage, np.arange(int(o_stage.max(initial=-1)) + 2))
    out: list[int] = []
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        # per queue, its chunks by position in ``order``: those whose dependency has started (so when it lands is
        # known) wait in ``known`` by that time, and move to ``ready`` (by priority) once it has come; a queue takes
        # the first of its ready chunks. A chunk whose dependency has not started is known when it starts.
        known: dict[int, list] = {}   # queue -> heap of (lands, -way ahead, position, transfer, k, seconds)
        ready: dict[int, list] = {}   # queue -> heap of (-way ahead, position, transfer, k, seconds)
        waiting: dict[tuple[int, int], list] = {}  # (dependency transfer, k) -> its dependents' entries
        left: dict[int, int] = {}     # queue -> its chunks not taken yet
        seen: dict[int, int] = {}
        for pos, t in enumerate(order[lo:hi].tolist()):
            k = seen.get(t, 0)
            seen[t] = k + 1
            q = int(queue[t])
            e = int(base[t]) + min(k, int(n_chunks[t]) - 1)
            entry = (ahead[e], pos, t, k, took_e[e])
            left[q] = left.get(q, 0) + 1
            known.setdefault(q, [])
            ready.setdefault(q, [])
            a = int(after[t])
            d = k if a < 0 or size_of[a] == size_of[t] else waited_chunk(k, size_of[t], size_of[a], nbytes_of[t])
            if a < 0 or d >= n_chunks[a]:
                known[q].append((0.0, *entry))
            else:
                waiting.setdefault((a, d), []).append((q, entry))
        for heap in known.values():
            heapq.heapify(heap)
        wake = [(0.0, q) for q in left]  # (time, queue): when a queue looks for its next chunk
        heapq.heapify(wake)
        free = dict.fromkeys(left, 0.0)
        while wake:
            now, q = heapq.heappop(wake)
            if not left[q] or now < free[q]:
                continue
            kq, rq = known[q], ready[q]
            while kq and kq[0][0] <= now:
                heapq.heappush(rq, heapq.heappop(kq)[1:])
            if not rq:  # nothing there yet: look again when the first known chunk lands, or a dependency starts
                if kq:
                    heapq.heappush(wake, (kq[0][0], q))
                continue
            _, _, t, k, took = heapq.heappop(rq)
            left[q] -= 1
            out.append(t)
            end = now + took
            free[q] = end
            heapq.heappush(wake, (end, q))
            for d, entry in waiting.pop((t, k), ()):
                heapq.heappush(known[d], (end, *entry))
                heapq.heappush(wake, (end, d))
        if any(left.values()):
            raise PlanError("the chunk order's queues wait for each other (a dependency that never starts); "
                            "please report this")
    return np.asarray(out, dtype=np.int64)


def critical_path_s(n_chunks: np.ndarray, took: np.ndarray, after: np.ndarray, size: np.ndarray | None = None,
                    nbytes: np.ndarray | None = None) -> np.ndarray:
    """Per chunk (transfer t's chunk k at ``sum(n_chunks[:t]) + k``; ``took``: each chunk's seconds): the longest way
    from its start to the end of what must follow it, its own later chunks and, recursively, chunk k of every
    transfer that waits on t (``after``): ``r[t, k] = took[t, k] + max(r[t, k + 1], r[c, k] for after[c] = t)``.
    Other work on the same queues is left out: it is what the list schedule orders by these. Vectorized level by
    level of the waits, deepest first; within a transfer ``r[k] = T[k] + max over j >= k of (child[j] - T[j + 1])``
    with ``T`` its chunks' suffix sums, a segmented running maximum. ``size`` / ``nbytes`` (per transfer, where
    chunks differ in size): a waiting chunk's way goes to the chunk that holds its last byte (``waited_chunk``)."""
    n_chunks = np.asarray(n_chunks, np.int64)
    base = np.cumsum(n_chunks) - n_chunks
    rank = np.zeros(took.size)
    child = np.zeros(took.size)  # per chunk: the longest way of a waiting transfer's same chunk
    depth = chain_depth(after)
    for d in range(int(depth.max(initial=0)), -1, -1):
        ts = np.flatnonzero(depth == d)
        n = n_chunks[ts]
        e = np.repeat(base[ts] - np.cumsum(n) + n, n) + np.arange(int(n.sum()))  # the level's chunks, by transfer
        g = np.repeat(np.arange(ts.size), n)
        cs = np.cumsum(took[e])
        last = np.cumsum(n) - 1
        v = child[e] - (cs[last][g] - cs)  # child[j] - T[j + 1]
        span = float(np.abs(v).max(initial=0.0)) * 4 + 1.0
        lift = (ts.size - 1 - g) * span  # a running maximum from the back, group by group
        best = np.maximum.accumulate((v + lift)[::-1])[::-1] - lift
        rank[e] = cs[last][g] - cs + took[e] + best
        up = after[ts]
        waits = up >= 0
        if waits.any():  # hand each chunk's way to the same chunk of the transfer it waits on
            wt, wn = ts[waits], n[waits]
            k = np.arange(int(wn.sum())) - np.repeat(np.cumsum(wn) - wn, wn)
            parent = np.repeat(up[waits], wn)
            pk = k if size is None else waited_chunk(k, np.repeat(size[wt], wn), size[parent],
                                                     np.repeat(nbytes[wt], wn))
            ok = pk < n_chunks[parent]
            np.maximum.at(child, (base[parent] + pk)[ok], rank[np.repeat(base[wt], wn) + k][ok])
    return rank


def _fill(plan: Plan) -> float:
    return max((staging_fill_s(plan.topology, plan_chunk_sizes(plan, st.transfers.role), np.asarray(st.transfers.role),
                               np.asarray(st.transfers.bytes)) for st in plan.stages), default=0.0)


class _Run:
    """The event loop over chunk entries: queues serial, ports shared max-min fairly (module docstring)."""

    def __init__(self, topo, role, src, dst, out_port, in_port, start_of, n_of, after_of, plan_id, max_events,
                 size=None, nbytes=None):
        self.topo, self.role, self.src, self.dst = topo, role, src, dst
        self.out_port, self.in_port = out_port, in_port
        self.start_of, self.n_of, self.after_of = start_of, n_of, after_of
        self.size, self.nbytes = size, nbytes  # each transfer's chunk and bytes, where chunks differ (None: k waits k)
        self.local = out_port < 0
        self.capacity = port_capacity(topo)
        self.plan_id, self.max_events, self.events = plan_id, max_events, 0

    def run(self, entries: list, what: str) -> float:
        """The time ``entries`` (queue, transfer, k, bytes; each queue's in order) take from 0."""
        queues: dict[int, list[tuple[int, int, int, int]]] = {}
        size = self.size
        for q, t, k, nbytes in entries:  # with the chunk it waits for (its dependency's that holds its last byte)
            a = self.after_of[t]
            d = k if size is None or a < 0 else waited_chunk(k, size[t], size[a], self.nbytes[t])
            queues.setdefault(q, []).append((t, k, nbytes, d))
        done: set[tuple[int, int]] = set()
        head = {q: 0 for q in queues}
        active: dict[int, list] = {}  # the chunk a queue is on: (transfer, k, bytes left, time its start cost ends)
        local, out_port, in_port = self.local, self.out_port, self.in_port
        now = 0.0
        while True:
            # start what can start: a free queue whose next chunk's dependency landed
            for q, items in queues.items():
                if q in active or head[q] >= len(items):
                    continue
                t, k, nbytes, d = items[head[q]]
                after = self.after_of[t]
                if after >= 0 and d < self.n_of[after] and (after, d) not in done:
                    continue
                active[q] = [t, k, float(nbytes), now + float(self.start_of[t])]
                head[q] += 1
            if not active:
                if any(head[q] < len(v) for q, v in queues.items()):
                    raise PlanError(f"plan {self.plan_id}: {what}: the simulation found queues that wait for each "
                                    "other (a chunk order that can deadlock)")
                return now
            self.events += 1
            if self.events > self.max_events:
                raise PlanError(f"plan {self.plan_id}: the simulation took more than {self.max_events} events")
            moving = [q for q, a in active.items() if a[3] <= now and a[2] > 0 and not local[a[0]]]
            rate = np.zeros(0)
            if moving:
                ts = np.array([active[q][0] for q in moving])
                busy = np.zeros(self.capacity.size, bool)  # a GPU's NVLink busy both ways now: each way slower
                busy[out_port[ts]] = busy[in_port[ts]] = True
                senders = None  # and a NIC several GPUs write into now (costs.nic_incast_loss)
                if self.topo.costs.nic_incast_loss > 0:
                    senders = incast_senders(self.topo, np.zeros(ts.size, np.int64), self.role[ts], self.src[ts],
                                             self.dst[ts], 1)[0]
                rate = max_min_rates(out_port[ts], in_port[ts], duplex_capacity(self.topo, busy, senders))
            # the next event: a start cost ends, a chunk lands, or a local/empty chunk ends at once
            dt = np.inf
            for a in active.values():
                if a[3] > now:
                    dt = min(dt, a[3] - now)
                elif a[2] <= 0 or local[a[0]]:
                    dt = 0.0
            for i, q in enumerate(moving):
                dt = min(dt, active[q][2] / rate[i])
            now += dt
            for i, q in enumerate(moving):
                active[q][2] -= rate[i] * dt
            for q in [q for q, a in active.items() if a[3] <= now * (1 + 1e-12) and (a[2] <= 1e-3 or local[a[0]])]:
                t, k = active[q][0], active[q][1]
                done.add((t, k))
                del active[q]
