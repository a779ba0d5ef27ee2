"""The compact encoding of a plan file: only what the compiler decided, everything derivable left out.

A plan in the full encoding lists, besides the schedule, much that follows from the collective and the topology:
the flows (the collective's layout), both matrices, the queues, and per transfer its endpoints, queue, wait and
byte range (a segment's pieces share its range; their roles and endpoints follow from the flow and the
forwarding rule). At 1024 GPUs that is four fifths of the file. The compact encoding keeps per stage only its
segments (flow, offset, bytes) and its chunk order, beside the header and the report::

    {"schema_version": 2, "encoding": "compact-1", "plan_id": ..., "generator": ..., "topology": ...,
     "collective": ..., "options": ..., "report": ...,
     "stages": [{"index": 0, "time_s": ..., "segments": {"flow": [...], "offset": [...], "bytes": [...]},
                 "chunks": [...]}, ...]}

Reading it re-derives the rest with the compiler's own passes (``traffic``, ``expand``, the queue assignment and
the plan pass): the result is the same :class:`~hoccl_compiler.schema.Plan` as the full file's, and its plan id
must come out as the file says (a file whose inputs were edited is refused). Writing it refuses a plan whose
transfers are not what those passes derive from its segments (a hand-edited plan): such a plan needs the full
encoding. A plan the pass table built in this process (:func:`~hoccl_compiler.pipeline.built_here`) is not derived
again for that check: its transfers come from those same passes. Verification (``hoccl-inspect --verify``, the
runtime's check of a plan from outside) runs on the derived plan, as on a full one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .errors import PlanError

__all__ = ["ENCODING", "to_compact", "from_compact"]

ENCODING = "compact-1"


def _segments_of(plan) -> list[dict[str, list[int]]]:
    out = []
    for stage in plan.stages:
        tr = stage.transfers
        after, flow = np.asarray(tr.after, dtype=np.int64), np.asarray(tr.flow, np.int64)
        # a path's first piece: it waits on nothing, or (multicast) on another flow's transfer, not its own flow's
        first = np.nonzero((after < 0) | (flow[np.maximum(after, 0)] != flow))[0]
        out.append({"flow": np.asarray(tr.flow, np.int64)[first].tolist(),
                    "offset": np.asarray(tr.offset, np.int64)[first].tolist(),
                    "bytes": np.asarray(tr.bytes, np.int64)[first].tolist()})
    return out


# what a compact file holds, and nothing else (the full encoding's schema forbids extra fields the same way)
_COMPACT_KEYS = frozenset({"schema_version", "plan_id", "generator", "topology", "collective", "options", "report",
                           "encoding", "stages"})
_STAGE_KEYS = frozenset({"index", "time_s", "segments", "chunks"})
_SEGMENT_KEYS = frozenset({"flow", "offset", "bytes"})


def _no_unknown_keys(obj: dict, known: frozenset, where: str) -> None:
    unknown = sorted(set(obj) - known)
    if unknown:
        raise ValueError(f"{where} has {unknown}, which the compact encoding does not hold (it holds {sorted(known)})")


def to_compact(plan) -> dict[str, Any]:
    """The compact encoding of ``plan`` (a dict ready for JSON); raises :class:`PlanError` when the plan's
    transfers are not the ones its segments derive (then write the full encoding), or when the plan was read from a
    file an older version wrote (its id is not its inputs' id under today's topology model, which the compact reader
    checks)."""
    from .schema import plan_id_for

    if plan.plan_id != plan_id_for(plan.topology, plan.collective, plan.options):
        raise PlanError(f"plan {plan.plan_id}: it was compiled by an older version (under today's topology model, "
                        f"whose added fields take their defaults, its inputs' id is "
                        f"{plan_id_for(plan.topology, plan.collective, plan.options)}), so a compact file of it would "
                        "not read back; recompile it, or write it in the full encoding")
    segments = _segments_of(plan)
    head = plan.model_dump(mode="json", include={"schema_version", "plan_id", "generator", "topology",
                                                 "collective", "options", "report"})
    stages = [{"index": s.index, "time_s": s.time_s, "segments": seg, "chunks": list(s.chunks)}
              for s, seg in zip(plan.stages, segments, strict=True)]
    compact = {**head, "encoding": ENCODING, "stages": stages}
    from .pipeline import built_here

    # a plan the pass table built here is what the reader's passes derive from its segments (the same passes);
    # another one (read from a file, made by hand) is derived again and compared: at 1024 GPUs 2.5-3 s of a write
    if not built_here(plan) and not _derives(plan, from_compact(compact, source=f"plan {plan.plan_id}", arrays=True)):
        raise PlanError(f"plan {plan.plan_id}: its transfers are not the ones the compiler derives from its "
                        "segments (a hand-made or edited plan?); write it in the full encoding")
    return compact


def _derives(plan, state) -> bool:
    """Whether the compile state a compact file decodes to (:func:`from_compact` with ``arrays``) is ``plan``: its
    transfers, waits, chunk orders, flows, queues and ranks, compared as arrays (building the plan from it again
    and comparing models took 3-4 s of writing a 1024-GPU plan)."""
    ch, lay = state.chunks, state.layout
    if len(plan.stages) != state.schedule.num_stages:
        return False
    sizes = np.array([len(st.transfers.flow) for st in plan.stages], np.int64)
    base = np.repeat(np.cumsum(sizes) - sizes, sizes)

    def column(k: str) -> np.ndarray:
        parts = [np.asarray(getattr(st.transfers, k), np.int64) for st in plan.stages]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    if any(not np.array_equal(column(k), getattr(ch, f"tr_{k}"))
           for k in ("flow", "role", "src", "dst", "offset", "bytes", "queue")):
        return False
    after = column("after")
    if not np.array_equal(np.where(after >= 0, after + base, -1), ch.tr_after):
        return False
    n_chunks = np.array([len(st.chunks) for st in plan.stages], np.int64)
    orders = [np.asarray(st.chunks, np.int64) for st in plan.stages]
    chunk_base = np.repeat(np.cumsum(sizes) - sizes, n_chunks)
    if not np.array_equal((np.concatenate(orders) if orders else np.zeros(0, np.int64)) + chunk_base,
                          ch.order_transfer):
        return False
    fl, q, rk = plan.flows, plan.queues, plan.ranks
    res_off, res_bytes = lay.resident()
    pairs = [(fl.src, lay.src), (fl.dst, lay.dst), (fl.bytes, lay.bytes), (fl.src_offset, lay.src_offset),
             (fl.dst_offset, lay.dst_offset), (q.gpu, ch.queue_gpu), (q.index, ch.queue_index),
             (rk.input_bytes, lay.input_bytes), (rk.output_bytes, lay.output_bytes), (rk.resident_offset, res_off),
             (rk.resident_bytes, res_bytes)]
    if (fl.via is None) != (lay.via is None) or (fl.via is not None and not np.array_equal(fl.via, lay.via)):
        return False
    return all(np.array_equal(np.asarray(a, np.int64), b) for a, b in pairs) and tuple(q.kind) == ch.queue_kind


def _within_budget(topology: Any, collective: Any, source: str) -> None:
    """Refuse, with the numbers, a header whose collective would take more memory to decode than the budget
    (:func:`~hoccl_compiler.codec.decode_budget`): a file of a few KB can claim 16,384 GPUs, and decoding runs the
    traffic passes over every cell of the matrix before anything else could refuse it."""
    from .codec import DECODE_BYTES_PER_CELL, decode_budget

    G = topology.num_gpus
    kind = collective.kind
    if collective.matrix is not None:
        cells = int(np.count_nonzero(np.asarray(collective.matrix)))
    elif collective.pairs is not None:
        cells = len(collective.pairs)
    elif kind in ("broadcast", "scatter", "gather"):
        cells = G
    else:
        cells = G * G
    need, budget = cells * DECODE_BYTES_PER_CELL, decode_budget()
    if need > budget:
        raise PlanError(f"{source} claims {kind} over {G:,} GPUs: decoding it would take about {need / 2**30:.1f} GiB "
                        f"({cells:,} cells of about {DECODE_BYTES_PER_CELL} B), over the budget of "
                        f"{budget / 2**30:.1f} GiB (HOCCL_MAX_PLAN_MEMORY, default half of this machine's memory); "
                        "raise it if the plan is real")


def from_compact(data: dict[str, Any], source: str = "<plan>", *, arrays: bool = False):
    """The :class:`~hoccl_compiler.schema.Plan` a compact file encodes (see the module docstring); ``arrays``: the
    compile state it decodes to instead, its chunk schedule filled, before the plan is built from it."""
    from pydantic import ValidationError

    from . import multicast
    from .collective import CollectiveSpec
    from .ir import CompileOptions, CompileState, Costing, Schedule
    from .passes import chunks, expand, traffic
    from .passes import plan as plan_pass
    from .schema import PlanOptions, Report, check_plan_id
    from .topology import Topology

    try:
        _no_unknown_keys(data, _COMPACT_KEYS, "the file")
        topology = Topology.model_validate(data["topology"])
        collective = CollectiveSpec.model_validate(data["collective"])
        options = PlanOptions.model_validate(data["options"])
        report = Report.model_validate(data["report"])
        stages = data["stages"]
        if not isinstance(stages, list):
            raise TypeError("stages is not a list")
        seg_cols = []
        for s, stage in enumerate(stages):
            if stage.get("index") != s:
                raise ValueError(f"stage at position {s} says index {stage.get('index')!r}")
            _no_unknown_keys(stage, _STAGE_KEYS, f"stage {s}")
            seg = stage["segments"]
            _no_unknown_keys(seg, _SEGMENT_KEYS, f"stage {s}'s segments")
            cols = [np.asarray(seg[k], dtype=np.int64) for k in ("flow", "offset", "bytes")]
            if len({c.size for c in cols}) != 1 or any(c.ndim != 1 for c in cols):
                raise ValueError(f"stage {s}: segments columns differ in length")
            seg_cols.append(cols)
        times = np.array([float(stage["time_s"]) for stage in stages])
        if times.size and not (np.isfinite(times).all() and (times >= 0).all()):
            bad = int(np.flatnonzero(~(np.isfinite(times) & (times >= 0)))[0])
            raise ValueError(f"stage {bad}: time_s is {times[bad]}, not a time in seconds >= 0")
        orders = [np.asarray(stage["chunks"], dtype=np.int64) for stage in stages]
        for s, order in enumerate(orders):
            if order.ndim != 1:
                raise ValueError(f"stage {s}: chunks is {stages[s]['chunks']!r}, not a list of transfer indices")
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, OverflowError, ValidationError) as exc:
        raise PlanError(f"{source} is not a valid compact plan ({type(exc).__name__}: {exc}); recompile it with "
                        "hoccl-compile") from None

    _within_budget(topology, collective, source)
    opts = CompileOptions(chunk_bytes=options.chunk_bytes, net_chunk_bytes=options.net_chunk_bytes,
                          max_extra_time=options.max_extra_time, baselines=False, multicast=options.multicast)
    state = CompileState(topology=topology, collective=collective, options=opts)
    state = expand.run(traffic.run(state, opts), opts)
    pieces, n_flows = state.pieces, state.layout.src.size
    seg_stage = np.concatenate([np.full(c[0].size, s, np.int64) for s, c in enumerate(seg_cols)]) if seg_cols \
        else np.zeros(0, np.int64)
    seg_flow, seg_offset, seg_bytes = (np.concatenate([c[i] for c in seg_cols]) if seg_cols else
                                       np.zeros(0, np.int64) for i in range(3))
    if seg_flow.size and (seg_flow.min() < 0 or seg_flow.max() >= n_flows):
        raise PlanError(f"{source}: a segment names flow {int(seg_flow.max())}, but the collective has {n_flows} "
                        "flows; the file is corrupt: recompile it")
    if np.any(np.diff(seg_stage * max(n_flows, 1) + seg_flow) <= 0):
        raise PlanError(f"{source}: segments must be sorted by flow within each stage, one per flow and stage; "
                        "the file is corrupt: recompile it")
    seg_after = None
    via = state.layout.via
    if via is not None:  # multicast: each forwarded segment waits on its source's of the same bytes
        seg_after = multicast.source_segments(seg_stage, seg_flow, seg_offset, seg_bytes, via, len(stages))
        if seg_after is None:
            raise PlanError(f"{source}: a forwarded flow's segment has no segment of the same bytes of the flow it "
                            "reads from in its stage; the file is corrupt: recompile it")
    elif options.multicast:
        raise PlanError(f"{source}: it says multicast, but its {collective.kind} on {topology.num_gpus} GPUs has no "
                        "multicast routing; the file is corrupt: recompile it")
    sched = Schedule(num_stages=len(stages), seg_stage=seg_stage, seg_flow=seg_flow, seg_offset=seg_offset,
                     seg_bytes=seg_bytes, stage_time_s=times, report={"rdma_stages": report.rdma_stages},
                     seg_after=seg_after)

    def order_of(tr_stage: np.ndarray) -> np.ndarray:  # the file's chunk orders: transfer indices within a stage
        start = np.searchsorted(tr_stage, np.arange(len(stages) + 1))
        for s, order in enumerate(orders):
            count = start[s + 1] - start[s]
            if order.size and (order.min() < 0 or order.max() >= count):
                raise PlanError(f"{source}: stage {s}'s chunk order names transfer {int(order.max())} of {count}; "
                                "the file is corrupt: recompile it")
        return np.concatenate([o + start[s] for s, o in enumerate(orders)]) if orders else np.zeros(0, np.int64)

    ch = chunks.build(topology, pieces, sched, options.chunk_bytes, order_of, options.net_chunk_bytes)
    state = dataclasses.replace(state, schedule=sched, chunks=ch,
                                costing=Costing(stage_time_s=times, report=report.model_dump()))
    if arrays:
        return state
    plan_opts = CompileOptions(chunk_bytes=options.chunk_bytes, net_chunk_bytes=options.net_chunk_bytes,
                               max_extra_time=options.max_extra_time, multicast=options.multicast)
    plan = plan_pass.run(state, plan_opts).plan
    if plan.plan_id != data.get("plan_id"):
        # a file written before a topology field was added hashes to its id as written (the new field's default
        # filled in on reading); an edited one does not
        check_plan_id(data, plan.plan_id, source)
        plan = plan.model_copy(update={"plan_id": data["plan_id"]})
    return plan.model_copy(update={"generator": str(data.get("generator", plan.generator))})
