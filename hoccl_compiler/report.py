"""Summaries of a plan for people (text) and tools (JSON), computed from the plan file alone."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cost import collective_bound
from .schema import Plan
from .units import format_bytes

__all__ = ["summary", "bounds", "bound_lines", "stage_rows", "queue_timelines", "format_text", "format_us"]


def format_us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f} us" if seconds < 1e-2 else f"{seconds * 1e3:,.3f} ms"


_us = format_us  # the short name, within the formatting below


def bounds(plan: Any) -> dict[str, Any]:
    """A plan's (or pattern plan's) bounds and ratios: ``lower_bound_s`` the collective's own bound
    (:func:`hoccl_compiler.cost.collective_bound`, multicast allowed), ``ratio`` the predicted time over it;
    ``traffic_bound_s`` / ``traffic_ratio`` the same for this plan's traffic (every flow unicast, what the stages
    are scheduled against), with its bound by domain."""
    rep, spec = plan.report, plan.collective
    traffic = rep.lower_bound_s
    bound = collective_bound(spec.kind, spec.size_bytes, plan.topology, traffic)
    predicted = rep.predicted_time_s
    return {"predicted_time_s": predicted, "lower_bound_s": bound, "ratio": predicted / bound if bound > 0 else 1.0,
            "traffic_bound_s": traffic, "traffic_ratio": rep.ratio,
            "lower_bound_by_domain_s": rep.lower_bound_by_domain_s}


def bound_lines(plan: Any) -> list[str]:
    """The report's predicted / bound lines (both plan kinds)."""
    b = bounds(plan)
    lines = [f"predicted    {_us(b['predicted_time_s'])}   lower bound {_us(b['lower_bound_s'])}   "
             f"ratio {b['ratio']:.3f}"]
    by_domain = ", ".join(f"{k} {_us(v)}" for k, v in b["lower_bound_by_domain_s"].items())
    if b["traffic_bound_s"] > b["lower_bound_s"] * (1 + 1e-9):
        lines.append(f"             (this plan's traffic: bound {_us(b['traffic_bound_s'])}, "
                     f"x{b['traffic_bound_s'] / b['lower_bound_s']:.2f} of the collective's, ratio "
                     f"{b['traffic_ratio']:.3f}: " + (
                         "multicast, each block across the network once per node: what NVLink must carry then"
                         if getattr(plan.options, "multicast", False) else
                         "it sends bytes that several GPUs need once per destination GPU, not once per node") + ")")
        lines.append(f"             (traffic bound by domain: {by_domain})")
    else:
        lines.append(f"             (bound by domain: {by_domain})")
    return lines


def summary(plan: Plan) -> dict[str, Any]:
    domain_of = [r.domain for r in plan.roles]
    per_domain: dict[str, int] = {"local": 0, "nvlink": 0, "rdma": 0}
    transfers = 0
    for stage in plan.stages:
        roles = np.asarray(stage.transfers.role, dtype=np.int64)
        nbytes = np.asarray(stage.transfers.bytes, dtype=np.int64)
        transfers += roles.size
        for role, total in enumerate(np.bincount(roles, weights=nbytes, minlength=len(domain_of))):
            per_domain[domain_of[role]] += int(total)
    rep = plan.report
    out: dict[str, Any] = {
        "plan_id": plan.plan_id,
        "schema_version": plan.schema_version,
        "generator": plan.generator,
        "collective": plan.collective.model_dump(mode="json", exclude={"matrix", "pairs"}),
        "collective_text": plan.collective.describe(),
        "topology": plan.topology.model_dump(mode="json"),
        "topology_text": plan.topology.describe(),
        "gpus": plan.num_ranks,
        "flows": len(plan.flows.src),
        "stages": len(plan.stages),
        "rdma_stages": rep.rdma_stages,
        "transfers": transfers,
        "chunks": plan.num_chunk_entries(),
        "chunk_bytes": plan.options.chunk_bytes,
        "net_chunk_bytes": plan.options.net_chunk_bytes,
        "bytes_by_domain": per_domain,
        "bytes_requested": int(np.asarray(plan.flows.bytes, dtype=np.int64).sum()),
        **bounds(plan),
        "cost_model": rep.cost_model or "port model (a plan from before the cost model v2)",
    }
    if rep.breakdown_s is not None:
        out["breakdown_s"] = dict(rep.breakdown_s)
    if rep.baselines is not None:
        b = rep.baselines
        out["baselines"] = {
            "everything_at_once_s": b.everything_at_once_s,
            "everything_at_once_ratio": b.everything_at_once_s / out["lower_bound_s"] if out["lower_bound_s"] else 1.0,
            "naive_rounds_s": b.naive_rounds_s,
            "naive_rounds_ratio": None if b.naive_rounds_s is None else
            b.naive_rounds_s / out["lower_bound_s"] if out["lower_bound_s"] else 1.0,
            "naive_rounds": b.naive_rounds,
        }
    return out


def stage_rows(plan: Plan) -> list[dict[str, Any]]:
    """Per stage: its start (after the call's start and the barriers before it, in the cost model v2), time and
    contents."""
    rows = []
    parts = plan.report.breakdown_s or {}
    start = parts.get("call_s", 0.0)
    sync = parts.get("stage_sync_s", 0.0) / max(1, len(plan.stages) - 1)
    for stage in plan.stages:
        tr = stage.transfers
        roles = np.asarray(tr.role, dtype=np.int64)
        nbytes = np.asarray(tr.bytes, dtype=np.int64)
        rdma = roles == 3
        rows.append({
            "stage": stage.index, "start_s": start, "time_s": stage.time_s, "transfers": int(roles.size),
            "rdma_flows": int(rdma.sum()), "rdma_bytes": int(nbytes[rdma].sum()),
            "nvlink_bytes": int(nbytes[(roles == 1) | (roles == 2) | (roles == 4)].sum()),
            "local_bytes": int(nbytes[roles == 0].sum()), "chunks": len(stage.chunks),
        })
        start += stage.time_s + sync
    return rows


def queue_timelines(plan: Plan, stage: int, limit: int = 24, max_queues: int = 24) -> list[str]:
    """One line per queue of a stage: its chunks in order, as flow:role[chunk]."""
    abbrev = {"local": "L", "native": "N", "send_forward": "S", "rdma": "R", "recv_forward": "V"}
    st = plan.stages[stage]
    tr = st.transfers
    seen: dict[int, int] = {}
    lines: dict[int, list[str]] = {}
    for t in st.chunks:
        k = seen.get(t, 0)
        seen[t] = k + 1
        q = tr.queue[t]
        lines.setdefault(q, []).append(f"f{tr.flow[t]}{abbrev[plan.roles[tr.role[t]].name]}[{k}]")
    out = []
    shown = sorted(lines)[:max_queues]
    for q in shown:
        name = f"{plan.queues.kind[q]}{plan.queues.gpu[q]}.{plan.queues.index[q]}"
        items = lines[q]
        more = f" ... (+{len(items) - limit})" if len(items) > limit else ""
        out.append(f"  {name:>12}: {' '.join(items[:limit])}{more}")
    if len(lines) > len(shown):
        out.append(f"  ... {len(lines) - len(shown)} more queue(s) (--format json or --plot for all)")
    return out


def format_text(plan: Plan, *, max_stages: int = 20, timelines: int = 1) -> str:
    s = summary(plan)
    b = s["bytes_by_domain"]
    lines = [
        f"plan {s['plan_id']} (schema v{s['schema_version']}, {s['generator']})",
        f"collective   {s['collective_text']}",
        f"topology     {s['topology_text']}",
        f"GPUs         {s['gpus']}   flows {s['flows']:,}   stages {s['stages']:,} ({s['rdma_stages']:,} with RDMA)   "
        f"transfers {s['transfers']:,}   chunks {s['chunks']:,} of {format_bytes(s['chunk_bytes'])}"
        + (f" (network: {format_bytes(s['net_chunk_bytes'])})" if s.get("net_chunk_bytes") else ""),
        f"bytes        requested {format_bytes(s['bytes_requested'])}; moved: NVLink {format_bytes(b['nvlink'])}, "
        f"RDMA {format_bytes(b['rdma'])}, local {format_bytes(b['local'])}",
        *bound_lines(plan),
    ]
    if "breakdown_s" in s:
        p = s["breakdown_s"]
        flows = f" + network transfers {_us(p['net_flows_s'])}" if p.get("net_flows_s") else ""
        lines.append(f"             ({s['cost_model']}: call {_us(p['call_s'])} + stages {_us(p['stages_s'])} + "
                     f"barriers {_us(p['stage_sync_s'])}{flows}; the stages in the port model alone {_us(p['ports'])})")
    if b["local"]:  # measured on driver 580 / CUDA 13.0 (hoccl_bench.smfree, docs/architecture.md)
        local = format_bytes(b["local"])
        from .collective import IN_PLACE_KINDS

        ways = []
        if plan.collective.kind in IN_PLACE_KINDS and not plan.collective.in_place:
            ways.append("compile it --in-place")
        if plan.topology.nodes == 1 and not getattr(plan.options, "multicast", False):  # the intra-node runtime's
            ways.append("run with HOCCL_LOCAL_COPIES=peer")
        lines[5:5] = [f"note         local {local}: same-GPU copies, which the CUDA driver runs on SMs"] + (
            [f"             (to avoid them: {', or '.join(ways)})"] if ways else [])
    if "baselines" in s:
        bl = s["baselines"]
        naive = "not costed (too many rounds for the GPUs)" if bl["naive_rounds_s"] is None else \
            f"{_us(bl['naive_rounds_s'])} (x{bl['naive_rounds_ratio']:.3f})"
        lines.append(f"simpler      everything at once (one stage) {_us(bl['everything_at_once_s'])} "
                     f"(x{bl['everything_at_once_ratio']:.3f} of bound);  naive rounds ({bl['naive_rounds']}) {naive}")
    rows = stage_rows(plan)
    lines.append("")
    lines.append(f"{'stage':>6} {'start':>12} {'time':>12} {'transfers':>9} {'rdma':>5} {'RDMA bytes':>12} "
                 f"{'NVLink bytes':>13} {'chunks':>7}")
    for r in rows[:max_stages]:
        lines.append(f"{r['stage']:>6} {_us(r['start_s']):>12} {_us(r['time_s']):>12} {r['transfers']:>9} "
                     f"{r['rdma_flows']:>5} {format_bytes(r['rdma_bytes']):>12} {format_bytes(r['nvlink_bytes']):>13} "
                     f"{r['chunks']:>7}")
    if len(rows) > max_stages:
        lines.append(f"   ... {len(rows) - max_stages} more stage(s) (--stages N shows more)")
    for stage in range(min(timelines, len(plan.stages))):
        lines.append("")
        lines.append(f"stage {stage} chunk order per queue (f<flow><role>[chunk]; N native, S send_forward, "
                     "R rdma, V recv_forward, L local):")
        lines.extend(queue_timelines(plan, stage))
    return "\n".join(lines)
