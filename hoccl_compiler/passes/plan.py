"""Pass 5: the pydantic plan. Building is the only transformation; writing is ``model_dump_json``."""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import __version__
from ..ir import CompileOptions, CompileState
from ..schema import (
    PLAN_ROLES,
    SCHEMA_VERSION,
    FlowTable,
    IntColumn,
    Plan,
    PlanOptions,
    QueueTable,
    RankBuffers,
    Report,
    Stage,
    TransferTable,
    plan_id_for,
)

col = IntColumn.of


def run(state: CompileState, options: CompileOptions) -> CompileState:
    lay, sched, ch, co = state.layout, state.schedule, state.chunks, state.costing
    assert lay is not None and sched is not None and ch is not None and co is not None, "plan runs after costing"
    plan_options = PlanOptions(chunk_bytes=ch.chunk_bytes, net_chunk_bytes=ch.net_chunk_bytes,
                               max_extra_time=options.max_extra_time, multicast=lay.via is not None)

    stage_tr_start = np.searchsorted(ch.tr_stage, np.arange(sched.num_stages + 1))
    stage_ord_start = np.searchsorted(ch.order_stage, np.arange(sched.num_stages + 1))
    # The tables (stages, flows, queues, ranks) are built without pydantic's per-element validation
    # (model_construct): every column is an array of this pass, of one length per table by construction, and the
    # plan is verified after this pass (pipeline: verify_plan, or the compact read-back); at 1024 GPUs validating
    # them cost about 2.5 s of a compile. Every integer column is an IntColumn (one buffer, no int objects).
    stages = []
    for s in range(sched.num_stages):
        lo, hi = stage_tr_start[s], stage_tr_start[s + 1]
        after = ch.tr_after[lo:hi]
        transfers = TransferTable.model_construct(
            flow=col(ch.tr_flow[lo:hi]), role=col(ch.tr_role[lo:hi]), src=col(ch.tr_src[lo:hi]),
            dst=col(ch.tr_dst[lo:hi]), offset=col(ch.tr_offset[lo:hi]), bytes=col(ch.tr_bytes[lo:hi]),
            queue=col(ch.tr_queue[lo:hi]), after=col(np.where(after >= 0, after - lo, -1)),
        )
        olo, ohi = stage_ord_start[s], stage_ord_start[s + 1]
        chunk_order = col(ch.order_transfer[olo:ohi] - lo)
        stages.append(Stage.model_construct(index=s, time_s=float(co.stage_time_s[s]), transfers=transfers,
                                            chunks=chunk_order))

    res_off, res_bytes = lay.resident()
    plan = Plan.model_construct(  # from the parts built above (roles PLAN_ROLES); verified after this pass
        schema_version=SCHEMA_VERSION,
        plan_id=plan_id_for(state.topology, state.collective, plan_options),
        generator=f"hoccl-compiler {__version__}",
        topology=state.topology,
        collective=state.collective,
        options=plan_options,
        roles=PLAN_ROLES,
        ranks=RankBuffers.model_construct(input_bytes=col(lay.input_bytes), output_bytes=col(lay.output_bytes),
                                          resident_offset=col(res_off), resident_bytes=col(res_bytes)),
        origin_matrix=[col(row) for row in state.origin],
        hoccl_matrix=[col(row) for row in state.hoccl],
        flows=FlowTable.model_construct(src=col(lay.src), dst=col(lay.dst), bytes=col(lay.bytes),
                                        src_offset=col(lay.src_offset), dst_offset=col(lay.dst_offset),
                                        via=None if lay.via is None else col(lay.via)),
        queues=QueueTable.model_construct(gpu=col(ch.queue_gpu), kind=list(ch.queue_kind), index=col(ch.queue_index)),
        stages=stages,
        report=Report(**co.report),
    )
    return dataclasses.replace(state, plan=plan)
