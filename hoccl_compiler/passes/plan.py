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
    Plan,
    PlanOptions,
    QueueTable,
    RankBuffers,
    Report,
    Stage,
    TransferTable,
    plan_id_for,
)


def run(state: CompileState, options: CompileOptions) -> CompileState:
    lay, sched, ch, co = state.layout, state.schedule, state.chunks, state.costing
    assert lay is not None and sched is not None and ch is not None and co is not None, "plan runs after costing"
    plan_options = PlanOptions(chunk_bytes=ch.chunk_bytes, max_extra_time=options.max_extra_time,
                               multicast=lay.via is not None)

    stage_tr_start = np.searchsorted(ch.tr_stage, np.arange(sched.num_stages + 1))
    stage_ord_start = np.searchsorted(ch.order_stage, np.arange(sched.num_stages + 1))
    # The tables (stages, flows, queues, ranks) are built without pydantic's per-element validation
    # (model_construct): every column is an array of this pass, of one length per table by construction, and the
    # plan is verified after this pass (pipeline: verify_plan, or the compact read-back); at 1024 GPUs validating
    # them cost about 2.5 s of a compile.
    stages = []
    for s in range(sched.num_stages):
        lo, hi = stage_tr_start[s], stage_tr_start[s + 1]
        after = ch.tr_after[lo:hi]
        transfers = TransferTable.model_construct(
            flow=ch.tr_flow[lo:hi].tolist(), role=ch.tr_role[lo:hi].tolist(), src=ch.tr_src[lo:hi].tolist(),
            dst=ch.tr_dst[lo:hi].tolist(), offset=ch.tr_offset[lo:hi].tolist(), bytes=ch.tr_bytes[lo:hi].tolist(),
            queue=ch.tr_queue[lo:hi].tolist(), after=np.where(after >= 0, after - lo, -1).tolist(),
        )
        olo, ohi = stage_ord_start[s], stage_ord_start[s + 1]
        chunk_order = (ch.order_transfer[olo:ohi] - lo).tolist()
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
        ranks=RankBuffers.model_construct(input_bytes=lay.input_bytes.tolist(), output_bytes=lay.output_bytes.tolist(),
                                          resident_offset=res_off.tolist(), resident_bytes=res_bytes.tolist()),
        origin_matrix=state.origin.tolist(),
        hoccl_matrix=state.hoccl.tolist(),
        flows=FlowTable.model_construct(src=lay.src.tolist(), dst=lay.dst.tolist(), bytes=lay.bytes.tolist(),
                                        src_offset=lay.src_offset.tolist(), dst_offset=lay.dst_offset.tolist(),
                                        via=None if lay.via is None else lay.via.tolist()),
        queues=QueueTable.model_construct(gpu=ch.queue_gpu.tolist(), kind=list(ch.queue_kind),
                                          index=ch.queue_index.tolist()),
        stages=stages,
        report=Report(**co.report),
    )
    return dataclasses.replace(state, plan=plan)
