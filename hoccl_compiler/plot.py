"""``hoccl-inspect --plot``: stage matrices as heat maps and a Gantt chart of the queues.

Needs the ``plot`` extra (matplotlib). The Gantt chart replays each stage in the cost model: every
queue runs its chunks in the stage's order at its link's bandwidth (DMA queues at NVLink speed,
NIC queues at NIC speed), a chunk starting when its queue is free and the chunk it waits for has
landed. Large plans are drawn at stage level only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .errors import HocclError
from .schema import Plan

__all__ = ["plot_plan", "gantt_segments"]

GANTT_CHUNK_LIMIT = 20_000
ROLE_COLORS = {"local": "#999999", "native": "#f28e2b", "send_forward": "#e15759", "rdma": "#4e79a7",
               "recv_forward": "#59a14f"}


def gantt_segments(plan: Plan) -> list[tuple[int, float, float, str]]:
    """(queue, start_s, duration_s, role name) of every chunk, replaying the stages in order."""
    topo = plan.topology
    chunk = plan.options.chunk_bytes
    out: list[tuple[int, float, float, str]] = []
    free = np.zeros(len(plan.queues.gpu))
    t0 = 0.0
    for stage in plan.stages:
        tr = stage.transfers
        landed: dict[tuple[int, int], float] = {}
        seen: dict[int, int] = {}
        end_of_stage = t0
        free[:] = t0
        for t in stage.chunks:
            k = seen.get(t, 0)
            seen[t] = k + 1
            q = tr.queue[t]
            nbytes = min(chunk, tr.bytes[t] - k * chunk)
            role = plan.roles[tr.role[t]].name
            bw = topo.nic_gbps if role == "rdma" else topo.nvlink_gbps
            start = free[q]
            if tr.after[t] >= 0:
                start = max(start, landed[(tr.after[t], k)])
            dur = nbytes / (bw * 1e9) if role != "local" else 0.0
            free[q] = start + dur
            landed[(t, k)] = start + dur
            end_of_stage = max(end_of_stage, start + dur)
            out.append((q, start, dur, role))
        t0 = max(end_of_stage, t0 + stage.time_s)
    return out


def plot_plan(plan: Plan, path: str | Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        raise HocclError("--plot needs matplotlib; pip install 'hoccl[plot]'") from None
    path = Path(path)
    G = plan.num_ranks
    shown = min(len(plan.stages), 4)
    fig = plt.figure(figsize=(14, 9), constrained_layout=True)
    grid = fig.add_gridspec(2, shown + 2, height_ratios=[1, 1.4])
    mats = [("origin C", np.asarray(plan.origin_matrix, float)), ("HOCCL T", np.asarray(plan.hoccl_matrix, float))]
    for s in range(shown):
        m = np.zeros((G, G))
        tr = plan.stages[s].transfers
        np.add.at(m, (np.asarray(tr.src), np.asarray(tr.dst)), np.asarray(tr.bytes, float))
        mats.append((f"stage {s} ({plan.stages[s].time_s * 1e6:.0f} us)", m))
    for i, (title, m) in enumerate(mats):
        ax = fig.add_subplot(grid[0, i])
        ax.imshow(m / 2**20, cmap="viridis", interpolation="nearest", vmin=0)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("dst GPU", fontsize=8)
        ax.set_ylabel("src GPU", fontsize=8)
        ax.tick_params(labelsize=6)
    ax = fig.add_subplot(grid[1, :])
    if plan.num_chunk_entries() <= GANTT_CHUNK_LIMIT:
        segs = gantt_segments(plan)
        by_role: dict[str, list[tuple[float, float]]] = {}
        rows: dict[str, list[int]] = {}
        for q, start, dur, role in segs:
            by_role.setdefault(role, []).append((q, start, dur))
            rows.setdefault(role, [])
        for role, items in by_role.items():
            for q, start, dur in items:
                ax.broken_barh([(start * 1e6, max(dur * 1e6, 1e-3))], (q - 0.4, 0.8), facecolors=ROLE_COLORS[role])
        labels = [f"{k}{g}.{i}" for k, g, i in zip(plan.queues.kind, plan.queues.gpu, plan.queues.index, strict=True)]
        step = max(1, len(labels) // 40)
        ax.set_yticks(range(0, len(labels), step), labels[::step], fontsize=6)
        ax.set_ylabel("queue")
        ax.legend(handles=[Patch(color=c, label=r) for r, c in ROLE_COLORS.items() if r in by_role],
                  loc="upper right", fontsize=8)
        title = "chunks per queue over time (cost model replay)"
    else:
        starts = np.cumsum([0.0] + [s.time_s for s in plan.stages])
        ax.broken_barh([(starts[i] * 1e6, plan.stages[i].time_s * 1e6) for i in range(len(plan.stages))], (0, 1),
                       facecolors=["#4e79a7", "#a0cbe8"] * (len(plan.stages) // 2 + 1))
        ax.set_yticks([])
        title = f"stages over time ({plan.num_chunk_entries():,} chunks: too many to draw one by one)"
    t_end = sum(s.time_s for s in plan.stages)
    ax.axvline(plan.report.lower_bound_s * 1e6, color="k", linestyle="--", linewidth=1)
    ax.set_xlabel("time (us); dashed line: lower bound")
    ax.set_xlim(0, max(t_end, plan.report.lower_bound_s) * 1e6 * 1.02 + 1e-9)
    ax.set_title(title, fontsize=10)
    fig.suptitle(f"{plan.collective.describe()} on {plan.topology.describe()}\npredicted "
                 f"{plan.report.predicted_time_s * 1e6:.1f} us, bound {plan.report.lower_bound_s * 1e6:.1f} us",
                 fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
