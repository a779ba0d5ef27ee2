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
* stages run one after the other, each after the barrier of :func:`hoccl_compiler.cost.plan_time_v2` (network
  plans), the whole after the call's start (network plans: with the host staging's fill and drain) and with the
  network transfers' host cost (``costs.net_flow_us`` and ``net_node_flow_us``): the same composition as the
  cost model v2, so the two compare stage by stage.

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
    duplex_capacity,
    has_network,
    max_min_rates,
    piece_ports,
    plan_net_flows,
    plan_time_v2,
    port_capacity,
    staging_fill_s,
)
from .errors import PlanError
from .ir import RDMA
from .schema import Plan

__all__ = ["simulate", "Simulation"]


@dataclass(frozen=True)
class Simulation:
    total_s: float  # the call's start, the stages and the barriers between them
    stage_s: tuple[float, ...]
    chunks: int


def simulate(plan: Plan, *, chunk_start_s: float | None = None, nic_start_s: float | None = None,
             max_events: int = 5_000_000) -> Simulation:
    """Simulate ``plan`` chunk by chunk (see the module docstring). ``chunk_start_s`` / ``nic_start_s`` replace
    the topology's per-chunk DMA / NIC start costs."""
    topo = plan.topology
    dma_start = topo.costs.dma_start_us * 1e-6 if chunk_start_s is None else chunk_start_s
    nic_start = topo.costs.nic_start_us * 1e-6 if nic_start_s is None else nic_start_s
    G = topo.num_gpus
    capacity = port_capacity(topo)
    chunk = plan.options.chunk_bytes
    stage_times = []
    events = 0
    n_chunks_total = 0
    for stage in plan.stages:
        tr = stage.transfers
        # the cost model's ports (a plan's role indices are the IR's role codes); local copies use none
        out_port, in_port = piece_ports(np.asarray(tr.role), np.asarray(tr.src), np.asarray(tr.dst), G)
        local = out_port < 0
        start_of = np.where(np.asarray(tr.role) == RDMA, nic_start, dma_start)
        n_of = np.maximum(1, -(-np.asarray(tr.bytes, dtype=np.int64) // chunk))
        # every queue's entries in order: (transfer, chunk k, bytes)
        seen = np.zeros(len(tr.flow), dtype=np.int64)
        queues: dict[int, list[tuple[int, int, int]]] = {}
        for t in stage.chunks:
            k = int(seen[t])
            seen[t] += 1
            start = k * chunk
            nbytes = int(min(chunk, tr.bytes[t] - start)) if tr.bytes[t] else 0
            queues.setdefault(tr.queue[t], []).append((t, k, nbytes))
        n_chunks_total += sum(len(v) for v in queues.values())
        done: set[tuple[int, int]] = set()
        head = {q: 0 for q in queues}
        # the chunk a queue is on: (transfer, k, bytes left, time its start cost ends)
        active: dict[int, list] = {}
        now = 0.0
        while True:
            # start what can start: a free queue whose next chunk's dependency landed
            for q, entries in queues.items():
                if q in active or head[q] >= len(entries):
                    continue
                t, k, nbytes = entries[head[q]]
                after = tr.after[t]
                if after >= 0 and k < n_of[after] and (after, k) not in done:
                    continue
                active[q] = [t, k, float(nbytes), now + float(start_of[t])]
                head[q] += 1
            if not active:
                if any(head[q] < len(v) for q, v in queues.items()):
                    raise PlanError(f"plan {plan.plan_id}: stage {stage.index}: the simulation found queues that "
                                    "wait for each other (a chunk order that can deadlock)")
                break
            events += 1
            if events > max_events:
                raise PlanError(f"plan {plan.plan_id}: the simulation took more than {max_events} events")
            moving = [q for q, a in active.items() if a[3] <= now and a[2] > 0 and not local[a[0]]]
            rate = np.zeros(0)
            if moving:
                ts = np.array([active[q][0] for q in moving])
                busy = np.zeros(capacity.size, bool)  # a GPU's NVLink busy both ways now: each way slower
                busy[out_port[ts]] = busy[in_port[ts]] = True
                rate = max_min_rates(out_port[ts], in_port[ts], duplex_capacity(topo, busy))
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
        stage_times.append(now)
    network = any(has_network(np.asarray(st.transfers.role)) for st in plan.stages)
    fill = max((staging_fill_s(topo, chunk, np.asarray(st.transfers.role), np.asarray(st.transfers.bytes))
                for st in plan.stages), default=0.0)
    total, _ = plan_time_v2(topo, np.array(stage_times), network, fill_s=fill, flows=plan_net_flows(plan))
    return Simulation(total, tuple(stage_times), n_chunks_total)
