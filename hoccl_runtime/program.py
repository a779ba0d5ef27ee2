"""Lowering a plan to per-queue copy lists for the intra-node executor (pure CPU, testable).

For each queue of the plan, the copies it issues, in order: the stage order's chunks that sit on the
queue, consecutive chunks of one transfer merged into one copy (a copy engine streams a large copy
better than many small ones: measured on H200, 1 MiB chunks 202 GB/s, 16 MiB 364, one copy 396).
And, for ``local_copies="peer"`` (both runtimes), the routes that move a rank's own block on copy
engines through a peer's output instead of a same-GPU copy (:func:`bounce_route`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hoccl_compiler.schema import Plan

from .errors import HocclError, PlanError, UnsupportedPlanError
from .settings import env_choice

__all__ = ["LOCAL_COPIES", "Bounce", "Copy", "Program", "bounce_moves", "bounce_route", "check_bounds",
           "local_copies_setting", "lower", "own_copies"]

LOCAL_COPIES = ("sm", "peer")  # who copies a rank's own block of an out-of-place call

_INTRA_ROLES = {"local", "native"}


@dataclass
class Copy:
    src_rank: int
    src_offset: int   # in the source rank's input buffer (its output where from_output)
    dst_rank: int
    dst_offset: int   # in the destination rank's output buffer
    nbytes: int
    from_output: bool = False  # a multicast plan's forwarded copy: it reads what another copy wrote


@dataclass
class Program:
    """queue id -> copies in issue order; queue id -> GPU; queue id -> ranks whose buffers it touches. A multicast
    plan's program also has ``waits`` ((queue, copy index) -> the (queue, copy index) whose bytes it reads: it
    may start once that one is done) and ``issue``, every copy in an order that puts each after what it waits
    for (the plan's chunk order); an empty ``issue``: no copy waits, the queues are issued one after another."""

    copies: dict[int, list[Copy]] = field(default_factory=dict)
    queue_gpu: dict[int, int] = field(default_factory=dict)
    touches: dict[int, set[int]] = field(default_factory=dict)
    waits: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    issue: list[tuple[int, int]] = field(default_factory=list)


def check_bounds(plan: Plan) -> None:
    """Every transfer of ``plan`` inside its ranks' buffers as the plan sizes them (the buffers are checked
    against those sizes at every call), so no copy made from it can reach outside the caller's memory, whatever
    else is wrong with the plan: the runtime's own last line, behind verification (hoccl_runtime._trust).
    Chunks are pieces of their transfer, so checking transfers checks every copy. Whole stages are checked at once
    with NumPy (a call's first use of a large plan has millions of transfers); a stage that looks wrong, or values
    NumPy cannot hold, are checked transfer by transfer, which names the first bad one."""
    import numpy as np

    fl, ranks = plan.flows, plan.ranks
    try:
        f_src, f_dst, f_src_off, f_dst_off = (np.asarray(c, dtype=np.int64) for c in
                                              (fl.src, fl.dst, fl.src_offset, fl.dst_offset))
        in_bytes, out_bytes = np.asarray(ranks.input_bytes, np.int64), np.asarray(ranks.output_bytes, np.int64)
    except (OverflowError, ValueError):
        for stage in plan.stages:
            _check_stage_bounds(plan, stage)
        return
    limit = 1 << 61  # sums of two such values cannot wrap around int64
    n_flows, G = f_src.size, in_bytes.size
    if plan.options.multicast and fl.via is not None:  # a forwarded flow reads its source flow's output range
        _check_forwarded_bounds(plan, f_dst, f_dst_off, out_bytes)
    for stage in plan.stages:
        tr = stage.transfers
        try:
            f, off, n = (np.asarray(c, dtype=np.int64) for c in (tr.flow, tr.offset, tr.bytes))
        except (OverflowError, ValueError):
            _check_stage_bounds(plan, stage)
            continue
        bad = (f < 0) | (f >= n_flows) | (off < 0) | (n < 0) | (off >= limit) | (n >= limit)
        if not bad.any():
            for rank, base, size in ((f_src[f], f_src_off[f], in_bytes), (f_dst[f], f_dst_off[f], out_bytes)):
                inside = (rank >= 0) & (rank < G)
                at = base + off
                bad |= ~inside | (at < 0) | (np.abs(base) >= limit) | (at + n > size[np.where(inside, rank, 0)])
        if bad.any():
            _check_stage_bounds(plan, stage)


def _check_forwarded_bounds(plan: Plan, f_dst, f_dst_off, out_bytes) -> None:
    """Each forwarded flow's source flow exists, has its byte count and writes inside its destination's output,
    and each of its transfers stays inside the flow: so its reads stay inside that output."""
    import numpy as np

    fl = plan.flows
    n = f_dst.size
    try:
        via, nb = np.asarray(fl.via, dtype=np.int64), np.asarray(fl.bytes, dtype=np.int64)
    except (OverflowError, ValueError):
        via = nb = None
    ok = via is not None and via.size == n and ((via >= -1) & (via < n)).all()
    if ok:
        g = np.maximum(via, 0)
        fwd = via >= 0
        rank = f_dst[g]
        ok = bool(((nb[g] == nb) & (f_dst_off[g] >= 0) & (rank >= 0) & (rank < out_bytes.size) &
                   (f_dst_off[g] + nb <= out_bytes[np.clip(rank, 0, max(out_bytes.size - 1, 0))]))[fwd].all())
        for stage in plan.stages if ok else ():
            tr = stage.transfers
            f, off, m = (np.asarray(c, dtype=np.int64) for c in (tr.flow, tr.offset, tr.bytes))
            inside = (f >= 0) & (f < n)
            ff = np.where(inside, f, 0)
            ok = bool((~inside | ~fwd[ff] | ((off >= 0) & (m >= 0) & (off + m <= nb[ff]))).all())
            if not ok:
                break
    if not ok:
        raise PlanError(f"plan {plan.plan_id}: a forwarded flow (via) would read outside the output its source flow "
                        "writes: the plan is corrupt or was changed; the runtime will not run it (recompile it)")


def _check_stage_bounds(plan: Plan, stage) -> None:
    """check_bounds for one stage, transfer by transfer in Python integers: raises naming the first bad one."""
    fl, ranks = plan.flows, plan.ranks
    n_flows = len(fl.src)
    tr = stage.transfers
    for t in range(len(tr.flow)):
        f, off, n = tr.flow[t], tr.offset[t], tr.bytes[t]
        if not 0 <= f < n_flows or off < 0 or n < 0:
            raise PlanError(f"plan {plan.plan_id} stage {stage.index} transfer {t}: flow {f}, offset {off}, "
                            f"{n} bytes are out of range; the plan is corrupt: recompile it")
        src, dst = fl.src[f], fl.dst[f]
        for what, rank, at, size in (("input", src, fl.src_offset[f] + off, ranks.input_bytes),
                                     ("output", dst, fl.dst_offset[f] + off, ranks.output_bytes)):
            if not 0 <= rank < len(size) or at < 0 or at + n > size[rank]:
                limit = size[rank] if 0 <= rank < len(size) else "?"
                raise PlanError(f"plan {plan.plan_id} stage {stage.index} transfer {t} would copy bytes "
                                f"[{at}, {at + n}) of rank {rank}'s {what}, which holds {limit}: the plan is "
                                "corrupt or was changed; the runtime will not run it (recompile it)")


def lower(plan: Plan, *, forwarded: bool = False) -> Program:
    """The plan's copies per queue. ``forwarded``: the caller runs ``Program.waits`` (a multicast plan's forwarded
    copies); else such a plan is refused."""
    via = plan.flows.via if plan.options.multicast else None
    if via is not None and not forwarded:
        raise UnsupportedPlanError(
            f"plan {plan.plan_id} is a multicast plan (its {plan.collective.kind}'s forwarded copies read what "
            "other copies wrote), which this runtime path does not run yet: run it with hoccl_runtime.execute, "
            "or recompile it with hoccl-compile --multicast off")
    check_bounds(plan)
    roles = [r.name for r in plan.roles]
    prog = Program()
    for stage in plan.stages:
        tr = stage.transfers
        used = {roles[r] for r in tr.role}
        if not used <= _INTRA_ROLES:
            raise UnsupportedPlanError(
                f"plan {plan.plan_id} stage {stage.index} has {sorted(used - _INTRA_ROLES)} transfers (inter-node "
                "traffic), which a single-node executor cannot run: compile for one node (--nodes 1), or run it "
                "one process per node with hoccl_runtime.net.executor.GpuNodeExecutor")
        _lower_stage(plan, stage, via, prog)
    return prog


def _lower_stage(plan: Plan, stage, via: Sequence[int] | None, prog: Program) -> None:
    """One stage into ``prog``: every chunk a copy, consecutive chunks of a queue merged into one. In a multicast
    plan (``via``) a forwarded flow's copy reads the output its source flow writes, each chunk after the source's
    chunk: a chunk something waits for ends its copy, a chunk that waits starts one (``Program.waits``), and the
    copies are listed in the chunk order (``Program.issue``)."""
    chunk, fl, tr = plan.options.chunk_bytes, plan.flows, stage.transfers
    targets = {a for a in tr.after if a >= 0} if via is not None else set()
    seen: dict[int, int] = {}
    where: dict[tuple[int, int], tuple[int, int]] = {}  # (transfer, chunk) -> (queue, copy index)
    growing: dict[int, bool] = {}  # per queue: whether its last copy may take the next chunk
    for t in stage.chunks:
        k = seen.get(t, 0)
        seen[t] = k + 1
        f, q = tr.flow[t], tr.queue[t]
        start = tr.offset[t] + k * chunk
        n = min(chunk, tr.offset[t] + tr.bytes[t] - start)
        g = via[f] if via is not None else -1
        if g >= 0:
            copy = Copy(fl.dst[g], fl.dst_offset[g] + start, fl.dst[f], fl.dst_offset[f] + start, n, True)
        else:
            copy = Copy(fl.src[f], fl.src_offset[f] + start, fl.dst[f], fl.dst_offset[f] + start, n)
        queue = prog.copies.setdefault(q, [])
        wait = where.get((tr.after[t], k)) if via is not None and tr.after[t] >= 0 else None
        last = queue[-1] if queue else None
        if wait is None and t not in targets and growing.get(q, True) and last is not None and \
                (last.src_rank, last.dst_rank, last.from_output) == (copy.src_rank, copy.dst_rank, copy.from_output) \
                and last.src_offset + last.nbytes == copy.src_offset \
                and last.dst_offset + last.nbytes == copy.dst_offset:
            last.nbytes += n
        else:
            queue.append(copy)
            if via is not None:
                prog.issue.append((q, len(queue) - 1))
            if wait is not None:
                prog.waits[(q, len(queue) - 1)] = wait
        growing[q] = t not in targets
        where[(t, k)] = (q, len(queue) - 1)
        prog.queue_gpu[q] = plan.queues.gpu[q]
        prog.touches.setdefault(q, set()).update((copy.src_rank, copy.dst_rank))


def dma_queues(prog: Program, kind: Sequence[str], gpu: int) -> list[int]:
    """GPU ``gpu``'s DMA queues with copies, in order (``kind``: the plan's queue kinds). The first is the one
    the caller's stream carries (pacing caps it) and the one a rank's own block leaves by with
    local_copies="peer"; the others run on side streams."""
    return sorted(q for q in prog.copies if prog.queue_gpu[q] == gpu and kind[q] == "dma")


def own_copies(prog: Program, rank: int) -> tuple[Copy, ...]:
    """The plan's copies from ``rank``'s input into its own output (its own block), in queue order."""
    return tuple(c for q in sorted(prog.copies) for c in prog.copies[q] if c.src_rank == c.dst_rank == rank)


@dataclass(frozen=True)
class Bounce:
    """A piece of a rank's own block on its way through peer ``peer``'s output (local_copies="peer"): the
    rank's output at ``dst`` gets its input at ``src``, read back from the peer's output at ``via`` by the
    rank's copy engine. With ``temp`` the rank first writes it there, into a region that a later send of
    its own overwrites; without, a send of the rank has put those bytes there already."""

    peer: int
    via: int
    src: int
    dst: int
    nbytes: int
    temp: bool


def bounce_route(prog: Program, rank: int, world: int, main: int | None) -> tuple[Bounce, ...] | None:
    """How ``rank``'s own block can move on copy engines only, through the outputs of the peers that its
    first DMA queue (``main``) sends to, nearest next rank first; None if it has no own block or no route.
    A same-GPU copy is a kernel of the CUDA driver (hoccl_bench.smfree); a copy to or from a peer GPU
    is not. The pieces go on ``main`` itself, so stream order is all the ordering they need:

    * Read back: when the rank's sends carry those input bytes (AllGather, broadcast), its copy engine
      pulls them from where they landed, after the sends (one block more over NVLink).
    * Through a region: else (All-to-All, scatter), it first pushes the bytes into the peers' outputs
      where its sends will write, pulls them back, and only then sends (two blocks more).

    Both stay inside the peers' windows: after they said their output may be written, before the rank
    says its copies are done.
    """
    local = own_copies(prog, rank)
    if not local or main is None:
        return None
    sends = sorted((c for c in prog.copies[main] if c.src_rank == rank != c.dst_rank),
                   key=lambda c: ((c.dst_rank - rank) % world, c.dst_offset))
    route: list[Bounce] = []
    for c in local:  # read back from the sends' destinations
        pos, end = c.src_offset, c.src_offset + c.nbytes
        while pos < end:
            s = next((s for s in sends if s.src_offset <= pos < s.src_offset + s.nbytes), None)
            if s is None:
                break
            n = min(end, s.src_offset + s.nbytes) - pos
            route.append(Bounce(s.dst_rank, s.dst_offset + pos - s.src_offset, pos, c.dst_offset + pos - c.src_offset,
                                n, False))
            pos += n
        if pos < end:
            break
    else:
        return _merged(route)
    route, regions = [], iter(sends)  # through regions the sends will overwrite
    for c in local:
        done = 0
        while done < c.nbytes:
            s = next(regions, None)
            if s is None:
                return None
            n = min(c.nbytes - done, s.nbytes)
            route.append(Bounce(s.dst_rank, s.dst_offset, c.src_offset + done, c.dst_offset + done, n, True))
            done += n
    return _merged(route)


def bounce_moves(route: tuple[Bounce, ...], inp: int, out: int, outputs: Mapping[int, int]
                 ) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """A route as copies (dst, src, bytes) for a rank whose input is at ``inp`` and output at ``out``, with
    ``outputs[peer]`` each peer's output as mapped here: (those to issue before the rank's sends, those to
    issue after them). Pieces already in place (the input given inside the output) are left out."""
    before: list[tuple[int, int, int]] = []
    after: list[tuple[int, int, int]] = []
    for b in route:
        src, dst, via = inp + b.src, out + b.dst, outputs[b.peer] + b.via
        if src == dst:
            continue
        if b.temp:
            before += [(via, src, b.nbytes), (dst, via, b.nbytes)]
        else:
            after.append((dst, via, b.nbytes))
    return before, after


def _merged(route: list[Bounce]) -> tuple[Bounce, ...]:
    """Pieces that continue each other (the chunks of one send, interleaved with others on the queue) as
    one copy each way: a copy engine streams one large copy better than many small ones."""
    out: list[Bounce] = []
    for b in route:
        last = out[-1] if out else None
        if last is not None and (last.peer, last.temp) == (b.peer, b.temp) and last.via + last.nbytes == b.via \
                and last.src + last.nbytes == b.src and last.dst + last.nbytes == b.dst:
            out[-1] = Bounce(b.peer, last.via, last.src, last.dst, last.nbytes + b.nbytes, b.temp)
        else:
            out.append(b)
    return tuple(out)


def local_copies_setting(value: str | None) -> str:
    """``value``, or HOCCL_LOCAL_COPIES (default "sm") when None; HocclError unless one of LOCAL_COPIES."""
    if value is None:
        value = env_choice("HOCCL_LOCAL_COPIES", "sm", LOCAL_COPIES)
    if value not in LOCAL_COPIES:
        raise HocclError(f"local_copies={value!r}: give one of {', '.join(LOCAL_COPIES)}")
    return value
