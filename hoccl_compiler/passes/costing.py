"""Pass 5: the cost model v2 (:mod:`hoccl_compiler.cost`) over the chunk schedule: every stage's predicted time,
the plan's, and the two simpler schedules it is compared with, costed the same way.

* *Everything at once*: every flow whole in one stage, on the same queues in the same weighted chunk interleaving
  (the best a single stage can do), no barrier.
* *Naive rounds*: round k moves every flow u -> (u + k) mod G whole (one flow per GPU each way, blind to
  domains), the rounds one after the other, each round after a synchronisation: the network barrier
  (``stage_sync_us``) where the plan has network transfers, a rendezvous (``call_us``) within one node. Not costed
  (None, the rounds still counted) where the rounds times the GPUs pass ``NAIVE_ROUNDS_CELLS``.

All three pay the network transfers' host cost of their busiest GPU or node (``cost.net_flows_s``; each flow whole
is one transfer).

The report keeps the port model's lower bound (no schedule beats it) beside them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import cost
from ..ir import LOCAL, CompileOptions, CompileState, Costing, chunk_sizes
from ..units import chain_depth
from .chunks import assign_queues, chunk_order, waits_on_previous

# the naive rounds are costed only where their rounds times the GPUs stay within this: the costing holds per-stage
# port arrays, so its memory grows with both (a 4096-GPU Broadcast's 7,000-odd rounds took 4.5 GB on top of the
# compile's 1.2 GB, a 16,384-GPU one's ran a 24 GiB machine out of memory; 2026-12-04)
NAIVE_ROUNDS_CELLS = 16_000_000


def run(state: CompileState, options: CompileOptions) -> CompileState:
    topo, pieces, lay, sched, ch = state.topology, state.pieces, state.layout, state.schedule, state.chunks
    assert pieces is not None and lay is not None and sched is not None and ch is not None, "costing runs after chunks"
    network = cost.has_network(pieces.role)
    stages = ch.costs  # where choosing the chunk size costed this very schedule
    sizes = chunk_sizes(ch.tr_role, ch.chunk_bytes, ch.net_chunk_bytes)
    if stages is None:
        stages = cost.stage_times_v2(topo, sizes, ch.tr_stage, ch.tr_role, ch.tr_src, ch.tr_dst,
                                     ch.tr_bytes, ch.tr_queue, ch.tr_after, ch.order_transfer, sched.num_stages)
    predicted, parts = cost.plan_time_v2(topo, stages.time_s, network,
                                         fill_s=cost.staging_fill_s(topo, sizes, ch.tr_role, ch.tr_bytes),
                                         flows=cost.net_flows(topo, ch.tr_role, ch.tr_src, ch.tr_dst),
                                         overlap_s=cost.overlapped_s(stages.port_busy_s, stages.queue_busy_s,
                                                                     stages.pipeline_s,
                                                                     stages.chain.time_s() if stages.chain else 0.0))
    bound, per_domain = cost.lower_bound(pieces.role, pieces.src, pieces.dst, pieces.bytes, topo)
    report = {
        "predicted_time_s": predicted,
        "lower_bound_s": bound,
        "lower_bound_by_domain_s": per_domain,
        "ratio": predicted / bound if bound > 0 else 1.0,
        "rdma_stages": sched.report["rdma_stages"],
        "cost_model": "v2",
        "breakdown_s": {"ports": float(stages.ports_s.sum()), **parts},
    }
    if options.baselines:
        shift = (lay.dst - lay.src) % topo.num_gpus
        if lay.via is not None:  # multicast: a forwarded flow goes in a round after the flow it reads from
            shift = chain_depth(lay.via) * topo.num_gpus + shift
        costed = np.bincount(pieces.flow[pieces.role != LOCAL], minlength=lay.src.size) > 0  # flows that move
        rounds_of = np.unique(shift[costed])
        round_index = np.searchsorted(rounds_of, shift)
        sync = (topo.costs.stage_sync_us if network else topo.costs.call_us) * 1e-6
        at_once_args = (state, ch.chunk_bytes, np.zeros(lay.src.size, np.int64), 0.0, True, ch.net_chunk_bytes)
        rounds_args = (state, ch.chunk_bytes, np.where(costed, round_index, 0), sync,
                       lay.via is None,  # overlap: a forwarded flow's round comes after its source's
                       ch.net_chunk_bytes)
        if rounds_of.size * topo.num_gpus > NAIVE_ROUNDS_CELLS:
            at_once, _ = whole_flows_time(*at_once_args)
            rounds = None  # not costed: the count says why
        else:
            # one after the other: in two threads they kept both sets of temporaries alive at the compile's peak;
            # with NumPy's hugepage advice off (cli._no_hugepage_advice), one after the other was the faster on the
            # 2-core VM too (1024-GPU All-to-All: 12.2-12.5 s wall and 2.1 GB, against 14.0-14.4 s and 3.0 GB;
            # docs/results/compiler-history.md, 2026-12-06)
            at_once, _ = whole_flows_time(*at_once_args)
            rounds, _ = whole_flows_time(*rounds_args)
        report["baselines"] = {"everything_at_once_s": at_once, "naive_rounds_s": rounds,
                               "naive_rounds": int(rounds_of.size)}
    return dataclasses.replace(state, costing=Costing(stage_time_s=stages.time_s, report=report))


def whole_flows_time(state: CompileState, chunk_bytes: int, flow_stage: np.ndarray, sync_s: float,
                     overlap: bool = True, net_chunk_bytes: int | None = None) -> tuple[float, np.ndarray]:
    """v2 time of the schedule that moves every flow whole in stage ``flow_stage[flow]`` (stages one after the
    other, ``sync_s`` between two: where it is 0, overlapping as the runtimes run them, unless ``overlap`` is
    false, as for a multicast plan's rounds, whose forwarded flows wait for rounds before theirs), and its stage
    times. ``net_chunk_bytes``: the network pieces' own chunk, as the plan's."""
    topo, pieces = state.topology, state.pieces
    tr_stage = flow_stage[pieces.flow]
    order = np.lexsort((np.arange(tr_stage.size), tr_stage))  # pieces stay in path order within a flow
    st, role, src, dst, nb, fl = (a[order] for a in (tr_stage, pieces.role, pieces.src, pieces.dst, pieces.bytes,
                                                     pieces.flow))
    del tr_stage, order  # the pieces' size each; two of these costings may run at once, at the compile's peak
    after = waits_on_previous(fl)
    depth = None
    if state.layout.via is not None:  # a forwarded flow's first piece waits on its source's last, in one stage
        via = state.layout.via
        last = np.full(via.size, -1, np.int64)
        last[fl] = np.arange(fl.size)  # pieces in path order: the last one written wins
        first = np.full(via.size, -1, np.int64)
        first[fl[::-1]] = np.arange(fl.size)[::-1]
        fwd = np.flatnonzero((via >= 0) & (first >= 0))
        same = st[first[fwd]] == st[last[via[fwd]]]
        after[first[fwd[same]]] = last[via[fwd[same]]]
        depth = chain_depth(after)
    del fl
    S = int(st.max()) + 1 if st.size else 0
    queue = assign_queues(topo, st, role, src, dst, nb, after)
    sizes = chunk_sizes(role, chunk_bytes, net_chunk_bytes)
    entries = chunk_order(topo, sizes, st, role, src, dst, nb, depth, after)
    sc = cost.stage_times_v2(topo, sizes, st, role, src, dst, nb, queue, after, entries, S)
    total, _ = cost.plan_time_v2(topo, sc.time_s, cost.has_network(role), sync_s,
                                 fill_s=cost.staging_fill_s(topo, sizes, role, nb),
                                 flows=cost.net_flows(topo, role, src, dst),
                                 overlap_s=cost.overlapped_s(sc.port_busy_s, sc.queue_busy_s, sc.pipeline_s,
                                                             sc.chain.time_s() if sc.chain else 0.0)
                                 if overlap else None)
    return total, sc.time_s
