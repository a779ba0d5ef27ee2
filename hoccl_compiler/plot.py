"""``hoccl-inspect --plot``: stage matrices as heat maps and a timeline of every cost the prediction counts.

Needs the ``plot`` extra (matplotlib). The timeline's top row is the cost model v2's sum, as labelled segments: the
call's start, the stages, the barriers between them (0 where the runtime has none) and the network transfers' host
work, so it ends at the predicted time in the title. Below it, the queues: up to ``GANTT_CHUNK_LIMIT`` chunks each
chunk replayed in the cost model (every queue runs its chunks in the stage's order at its link's bandwidth, DMA
queues at NVLink speed, NIC queues at NIC speed, a chunk starting when its queue is free and the chunk it waits for
has landed); above that, each queue's busy time per stage (its bytes in the stage at its link's bandwidth, from the
stage's start), so a plan of any size is drawn in time linear in its transfers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from .errors import HocclError
from .schema import Plan

__all__ = ["plot_plan", "gantt_segments", "cost_segments", "queue_busy"]

GANTT_CHUNK_LIMIT = 20_000
ROLE_COLORS = {"local": "#999999", "native": "#f28e2b", "send_forward": "#e15759", "rdma": "#4e79a7",
               "recv_forward": "#59a14f"}
COST_COLORS = {"call start": "#bab0ac", "stages": "#76b7b2", "barriers": "#ff9da7",
               "network transfers (host)": "#edc948"}


def gantt_segments(plan: Plan, start_s: float = 0.0) -> list[tuple[int, float, float, str]]:
    """(queue, start_s, duration_s, role name) of every chunk, replaying the stages in order from ``start_s``."""
    from .ir import plan_chunk_sizes, waited_chunk

    topo = plan.topology
    out: list[tuple[int, float, float, str]] = []
    free = np.zeros(len(plan.queues.gpu))
    t0 = start_s
    for stage in plan.stages:
        tr = stage.transfers
        size = plan_chunk_sizes(plan, tr.role).tolist()  # each transfer's chunk (the network's own, where set)
        landed: dict[tuple[int, int], float] = {}
        seen: dict[int, int] = {}
        end_of_stage = t0
        free[:] = t0
        for t in stage.chunks:
            k = seen.get(t, 0)
            seen[t] = k + 1
            q = tr.queue[t]
            chunk = size[t]
            nbytes = min(chunk, tr.bytes[t] - k * chunk)
            role = plan.roles[tr.role[t]].name
            bw = topo.nic_gbps if role == "rdma" else topo.nvlink_gbps
            start = free[q]
            if tr.after[t] >= 0:
                a = tr.after[t]
                start = max(start, landed[(a, waited_chunk(k, chunk, size[a], tr.bytes[t]))])
            dur = nbytes / (bw * 1e9) if role != "local" else 0.0
            free[q] = start + dur
            landed[(t, k)] = start + dur
            end_of_stage = max(end_of_stage, start + dur)
            out.append((q, start, dur, role))
        t0 = max(end_of_stage, t0 + stage.time_s)
    return out


def cost_segments(plan: Plan) -> list[tuple[str, float, float]]:
    """(what, start_s, duration_s) of the prediction's parts in the order the cost model adds them; they end at
    the predicted time. A plan without a v2 breakdown is one "stages" segment of its predicted time."""
    parts = plan.report.breakdown_s or {}
    if not parts:
        return [("stages", 0.0, plan.report.predicted_time_s)]
    out, t = [], 0.0
    for what, key in (("call start", "call_s"), ("stages", "stages_s"), ("barriers", "stage_sync_s"),
                      ("network transfers (host)", "net_flows_s")):
        d = float(parts.get(key) or 0.0)
        if d > 0:
            out.append((what, t, d))
            t += d
    return out


def queue_busy(plan: Plan, start_s: float = 0.0) -> list[tuple[int, float, float, bool]]:
    """(queue, start_s, busy_s, is a NIC queue) per queue and stage: the queue's bytes in the stage at its link's
    bandwidth, from the stage's start (stages one after the other, each its cost-model time)."""
    topo = plan.topology
    nic = np.asarray([k == "nic" for k in plan.queues.kind], bool)
    rate = np.where(nic, topo.nic_gbps, topo.nvlink_gbps) * 1e9
    local = [i for i, r in enumerate(plan.roles) if r.name == "local"]
    out, t0 = [], start_s
    for stage in plan.stages:
        tr = stage.transfers
        q = np.asarray(tr.queue, np.int64)
        b = np.asarray(tr.bytes, float)
        if local:
            b = np.where(np.isin(np.asarray(tr.role), local), 0.0, b)  # local copies are not timed (as the replay)
        if q.size:
            busy = np.bincount(q, weights=b, minlength=nic.size) / rate
            for i in np.flatnonzero(busy):
                out.append((int(i), t0, float(busy[i]), bool(nic[i])))
        t0 += stage.time_s
    return out


def plot_plan(plan: Plan, path: str | Path, progress: Callable[[str], None] | None = None) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        raise HocclError("--plot needs matplotlib; pip install 'hoccl[plot]'") from None
    say = progress or (lambda message: None)
    path = Path(path)
    G = plan.num_ranks
    shown = min(len(plan.stages), 4)
    fig = plt.figure(figsize=(15, 10), constrained_layout=True)
    grid = fig.add_gridspec(3, shown + 2, height_ratios=[1, 0.12, 1.4])
    say(f"plot: heat maps of {G} GPUs")
    mats = [("origin C", np.asarray(plan.origin_matrix, float)), ("HOCCL T", np.asarray(plan.hoccl_matrix, float))]
    for s in range(shown):
        m = np.zeros((G, G))
        tr = plan.stages[s].transfers
        np.add.at(m, (np.asarray(tr.src), np.asarray(tr.dst)), np.asarray(tr.bytes, float))
        mats.append((f"stage {s} ({plan.stages[s].time_s * 1e6:.0f} us)", m))
    for i, (title, m) in enumerate(mats):
        ax = fig.add_subplot(grid[0, i])
        im = ax.imshow(m / 2**20, cmap="viridis", interpolation="nearest", vmin=0)
        fig.colorbar(im, ax=ax, shrink=0.8).set_label("MiB", fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("dst GPU", fontsize=8)
        ax.set_ylabel("src GPU", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))  # GPU numbers, never 2.5
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
        ax.tick_params(labelsize=6)
    costs = cost_segments(plan)
    stages_at = next((start for what, start, _ in costs if what == "stages"), 0.0)
    predicted = plan.report.predicted_time_s
    # the prediction's parts, labelled, on a row of their own
    top = fig.add_subplot(grid[1, :])
    total = sum(d for _, _, d in costs) or 1.0
    for what, start, d in costs:
        top.broken_barh([(start * 1e6, d * 1e6)], (0, 1), facecolors=COST_COLORS[what])
        if d > 0.12 * total:  # a label where it fits; the legend names every part
            top.text((start + d / 2) * 1e6, 0.5, f"{what} {d * 1e6:,.1f} us", ha="center", va="center", fontsize=7)
    top.set_yticks([])
    top.set_title("the cost model v2's prediction: " + " + ".join(f"{w} {d * 1e6:,.1f} us" for w, _, d in costs) +
                  f" = {predicted * 1e6:,.1f} us", fontsize=9)
    ax = fig.add_subplot(grid[2, :], sharex=top)
    entries = plan.num_chunk_entries()
    if entries <= GANTT_CHUNK_LIMIT:
        say(f"plot: replaying {entries:,} chunks")
        spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for q, start, dur, role in gantt_segments(plan, stages_at):
            spans.setdefault((q, role), []).append((start * 1e6, max(dur * 1e6, 1e-3)))
        say(f"plot: drawing {entries:,} chunks")
        for (q, role), items in spans.items():  # one call per queue and role: fast at any count
            ax.broken_barh(items, (q - 0.4, 0.8), facecolors=ROLE_COLORS[role])
        roles = {role for _, role in spans}
        ax.legend(handles=[Patch(color=c, label=r) for r, c in ROLE_COLORS.items() if r in roles],
                  loc="upper right", fontsize=8)
        title = f"{entries:,} chunks per queue over time (cost model replay)"
    else:
        say(f"plot: {entries:,} chunks, drawn as each queue's busy time per stage")
        busy_spans: dict[tuple[int, bool], list[tuple[float, float]]] = {}
        for q, start, busy, is_nic in queue_busy(plan, stages_at):
            busy_spans.setdefault((q, is_nic), []).append((start * 1e6, max(busy * 1e6, 1e-3)))
        for (q, is_nic), items in busy_spans.items():
            ax.broken_barh(items, (q - 0.4, 0.8), facecolors=ROLE_COLORS["rdma" if is_nic else "native"])
        ax.legend(handles=[Patch(color=ROLE_COLORS["rdma"], label="NIC queue busy"),
                           Patch(color=ROLE_COLORS["native"], label="DMA queue busy")], loc="upper right", fontsize=8)
        title = (f"each queue's busy time per stage, from the stage's start ({entries:,} chunks, "
                 f"{len(plan.stages):,} stages: too many to draw one by one)")
    labels = [f"{k}{g}.{i}" for k, g, i in zip(plan.queues.kind, plan.queues.gpu, plan.queues.index, strict=True)]
    if len(labels) <= 32:
        ax.set_yticks(range(len(labels)), labels, fontsize=6)
        ax.set_ylabel("queue")
    else:  # too many to name: each GPU's first queue, at most 32 of them
        firsts = {}
        for q, g in enumerate(plan.queues.gpu):
            firsts.setdefault(int(g), q)
        gpus = sorted(firsts)[::max(1, -(-len(firsts) // 32))]
        ax.set_yticks([firsts[g] for g in gpus], [f"GPU {g}" for g in gpus], fontsize=6)
        ax.set_ylabel(f"queues ({len(labels)}), by GPU")
    ax.axvline(plan.report.lower_bound_s * 1e6, color="k", linestyle="--", linewidth=1)
    ax.axvline(predicted * 1e6, color="#e15759", linestyle=":", linewidth=1)
    ax.set_xlabel("time (us); dashed: lower bound; dotted: predicted")
    end = max(predicted, plan.report.lower_bound_s, stages_at + sum(s.time_s for s in plan.stages))
    ax.set_xlim(0, end * 1e6 * 1.02 + 1e-9)
    ax.set_title(title, fontsize=10)
    fig.suptitle(f"{plan.collective.describe()} on {plan.topology.describe()}\npredicted "
                 f"{predicted * 1e6:.1f} us, bound {plan.report.lower_bound_s * 1e6:.1f} us", fontsize=10)
    say(f"plot: writing {path}")
    _save(fig, path, path.suffix.lstrip(".") or "png")
    plt.close(fig)
    return path


def _save(fig, path: Path, fmt: str) -> None:
    """Through a temporary file of a random name made exclusively, moved over ``path``: a symlink planted at the name
    is replaced, never written through; nothing half-written is left (as hoccl-compile writes plans)."""
    import contextlib
    import os
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fig.savefig(fh, format=fmt, dpi=110)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
