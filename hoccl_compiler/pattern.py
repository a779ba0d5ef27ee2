"""Pattern plans: a uniform All-to-All or AllGather on any number of GPUs, as formulas instead of lists.

A uniform collective's plan is the same on every GPU up to a shift: its RDMA stages are the shift permutations
(:func:`hoccl_compiler.passes.stages.uniform_matchings`), its native NVLink traffic is L - 1 shifts within the
node, and every flow has the same size. An explicit plan lists all of that per flow and per transfer, G^2 flows
at G GPUs: at 16,384 GPUs 268 million, beyond any machine's memory. A pattern plan keeps only

* ``cell_bytes``: every flow's size;
* ``rdma_shifts``: per RDMA stage s its shift (k, j): every GPU x sends the flow peer(x) -> peer(y), whole, to
  y = GPU ((node(x) + k) mod N, (local(x) + j) mod L), forwarded through the symmetric peers as in any plan;
* ``native``: (stage, l, bytes) entries: in that stage every GPU g sends ``bytes`` more of its flow to
  GPU (node(g), (local(g) + l) mod L), each flow's entries taking consecutive ranges in stage order;
* the own blocks (out-of-place) in stage 0, and per stage its predicted time.

A multicast AllGather (``options.multicast``, where :mod:`hoccl_compiler.multicast` routes the explicit plan) has
the shifts (k, 0) only: every GPU x sends its own block, whole and with no forwarding piece, to y = GPU ((node(x) +
k) mod N, local(x)), and y passes the block it receives on to its node's L - 1 other GPUs in the same stage, each
copy waiting on that network transfer; ``native`` holds each GPU's own block to its node's GPUs. Each block crosses
the network once per node. The explicit compiler pairs a stage's nodes by the matchings its decomposition finds,
not always shifts, with the same load on every port and queue: the expansion is a plan whose every stage costs
what the explicit plan's does (the same plan on 2 nodes, where there is one pairing).

This is what the stages pass computes for these inputs, scalar instead of per GPU (every GPU's ports carry the
same load in a stage, so one slack per stage stands for all): :func:`expand` turns a pattern plan back into the
explicit :class:`~hoccl_compiler.schema.Plan` through the compiler's own later passes, and the tests check that it
is the plan :func:`~hoccl_compiler.pipeline.compile_plan` makes (multicast: as above). :func:`verify_pattern` checks a
pattern from the file alone, in O(stages): the shifts are every (k, j) once (multicast: every (k, 0)), every native
shift adds up to a flow, the stage indices are in range, the id is the inputs'. Stage times come from the cost model
v2 on one representative stage per distinct stage content (the stages are alike but for where native traffic
rides). The overlap between stages is costed over one node's pairs of queues (``cost.StageChain.add``), which leaves
out the port that copies released at one moment on two queues of a GPU share (``StageChain.add_pieces``' ports): a
multicast stage deals its copies over a GPU's DMA and ``dma_recv`` queues (since 2026-12-06,
:func:`~hoccl_compiler.passes.chunks.assign_queues`), so a multicast AllGather's pattern predicts up to 1% less than
its explicit plan (tests/compiler/test_pattern.py).

``hoccl-compile --pattern`` writes one; ``hoccl-inspect`` reads, checks and summarises it; ``load_plan`` expands
one of at most ``EXPAND_LIMIT`` GPUs into a full plan (the runtimes take full plans).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from . import __version__, cost
from .collective import CollectiveSpec
from .errors import PlanError, ScheduleError, schema_problems
from .ir import DEFAULT_CHUNK_BYTES, NATIVE, RDMA, CompileOptions, CompileState, Schedule
from .passes.chunks import waits_on_previous
from .schema import SCHEMA_VERSION, PlanOptions, Report
from .topology import Topology

__all__ = ["PatternPlan", "ENCODING", "pattern_applies", "compile_pattern", "expand", "verify_pattern",
           "EXPAND_LIMIT", "format_pattern", "load_pattern"]

ENCODING = "pattern-1"
EXPAND_LIMIT = 1024  # GPUs up to which load_plan expands a pattern plan into a full one
# peak memory of a pattern compile per GPU: 1.9 KB measured from 16,384 to 32,768 GPUs (AllGather, CPU VM, 2026-12-02:
# 106 and 136 MB peak RSS), with room
PATTERN_BYTES_PER_GPU = 2560


class PatternPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[2]
    encoding: Literal["pattern-1"]
    plan_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    generator: str
    topology: Topology
    collective: CollectiveSpec
    options: PlanOptions
    cell_bytes: int = Field(ge=0)
    num_stages: int = Field(ge=0)
    rdma_shifts: list[tuple[int, int]]
    native: list[tuple[int, int, int]]
    stage_time_s: list[float]
    report: Report

    @property
    def num_ranks(self) -> int:
        return self.topology.num_gpus

    @model_validator(mode="after")
    def _one_time_per_stage(self):
        # the shape every reader indexes by (hoccl-inspect's table reads a time per stage before any --verify);
        # the rest of the pattern is verify_pattern's
        if len(self.stage_time_s) != self.num_stages:
            raise ValueError(f"num_stages is {self.num_stages} but stage_time_s has {len(self.stage_time_s)} "
                             "entries (one per stage): the file was edited or damaged; recompile it")
        return self


def _pattern_id(topology: Topology, collective: CollectiveSpec, options: PlanOptions) -> str:
    payload = json.dumps({"schema_version": SCHEMA_VERSION, "encoding": ENCODING,
                          "topology": topology.model_dump(mode="json"),
                          "collective": collective.model_dump(mode="json"), "options": options.model_dump(mode="json")},
                         sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def pattern_applies(topology: Topology, collective: CollectiveSpec) -> str | None:
    """None when the collective has a pattern plan on this topology, else why not."""
    if collective.kind not in ("alltoall", "allgather"):
        return f"{collective.kind} is not uniform (pattern plans are for alltoall and allgather)"
    if collective.kind == "alltoall" and collective.in_place:
        return "in-place alltoall"
    if topology.dma_queues != 1:
        return "more than one DMA queue per GPU"
    G = topology.num_gpus
    if collective.size_bytes is None or collective.size_bytes % G:
        return f"the size is not a multiple of the {G} ranks"
    return None


def _multicast(topology: Topology, collective: CollectiveSpec, asked: bool) -> bool:
    """Whether a pattern plan of ``collective`` is routed for multicast (an AllGather of some bytes across nodes of
    several GPUs, where the options ask for it, as the explicit compiler routes it: :mod:`hoccl_compiler.multicast`;
    one of 0 bytes has no flow to route)."""
    from . import multicast

    return asked and collective.kind == "allgather" and bool(collective.size_bytes) and \
        multicast.applies("allgather", topology.nodes, topology.gpus_per_node)


def _flow_index(u: np.ndarray, v: np.ndarray, G: int, in_place: bool) -> np.ndarray:
    """The layout's flow number of u -> v (flows sorted by (src, dst); in place: no u -> u)."""
    if not in_place:
        return u * G + v
    return u * (G - 1) + np.where(v < u, v, v - 1)


def _place(topo: Topology, c: int, multicast: bool = False):
    """The stages pass on scalars: (RDMA shifts, native entries, number of stages).
    ``multicast``: an AllGather's direct flows only (each GPU's block to the same local index of every other node,
    no forwarding piece, and to its own node's GPUs); the blocks forwarded inside a node move with the shift that
    brings them (:func:`_stage_transfers`), as the explicit stages pass stages a multicast plan's direct flows
    alone."""
    from .passes.stages import MIN_NATIVE_PIECE, spread_over_slack

    N, L = topo.nodes, topo.gpus_per_node
    peers = np.asarray(topo.peer_array()) if topo.forwarding != "none" else np.arange(topo.num_gpus)
    forwards = bool((peers != np.arange(topo.num_gpus)).any()) and not multicast
    shifts = ([(k, 0) for k in range(1, N)] if multicast else [(k, j) for k in range(1, N) for j in range(L)]) \
        if c > 0 else []
    S = len(shifts)
    nvl_Bps = topo.nvlink_gbps * 1e9
    capacity = np.array([topo.nvlink_gbps * 1e9, topo.nic_gbps * 1e9])
    # per stage, every GPU: NIC out/in c; NVLink out/in 2c where forwarding (its own send, another's arrival)
    nvl_load = 2.0 * c if forwards else 0.0
    t = float((np.array([nvl_load, float(c)]) / capacity).max()) if S else 0.0
    stage_time = np.full(S, t)
    slack = stage_time * nvl_Bps - nvl_load
    native: list[tuple[int, int, int]] = []
    leftover: list[tuple[int, int]] = []
    for l_shift in range(1, L) if c > 0 else ():
        amounts = spread_over_slack(c, slack.copy(), MIN_NATIVE_PIECE)
        for st in np.nonzero(amounts)[0]:
            slack[st] -= int(amounts[st])
            native.append((int(st), l_shift, int(amounts[st])))
        rest = c - int(amounts.sum())
        if rest > 0:
            leftover.append((l_shift, rest))
    num_stages = S
    if leftover:
        into = S
        if S:
            load = float(sum(w for _, w in leftover))
            alone = load / nvl_Bps
            used = stage_time[S - 1] * nvl_Bps - slack[S - 1]
            merged = max(stage_time[S - 1], (used + load) / nvl_Bps)  # out and in ports alike
            if merged < stage_time[S - 1] + alone + topo.costs.stage_sync_us * 1e-6:
                into = S - 1
        native += [(into, l_shift, w) for l_shift, w in leftover]
        num_stages = max(num_stages, into + 1)
    merged: dict[tuple[int, int], int] = {}  # a shift's rest merged into a stage that has some of it already: one entry
    for st, l_shift, amount in native:
        merged[(st, l_shift)] = merged.get((st, l_shift), 0) + amount
    return shifts, [(st, l_shift, amount) for (st, l_shift), amount in sorted(merged.items())], num_stages


def _stage_transfers(topo: Topology, c: int, in_place: bool, shift: tuple[int, int] | None,
                     natives: list[tuple[int, int]], offsets: dict[int, int], local: bool, multicast: bool = False):
    """One stage's transfers as the chunks pass has them (sorted by flow, pieces in path order): flow, role, src,
    dst, offset, bytes, after. ``multicast`` (an AllGather, shifts (k, 0)): GPU x sends its block to GPU y of the
    node k on, with no forwarding piece, and y passes the block it receives from the node k before (x's mirror) on
    to its node's other GPUs, each copy waiting on that network transfer."""
    G, L = topo.num_gpus, topo.gpus_per_node
    g = np.arange(G, dtype=np.int64)
    node, loc = g // L, g % L
    peer = np.asarray(topo.peer_array(), dtype=np.int64)
    rows = []  # (flow, role order key, role, src, dst, offset, bytes)
    passed_on: list[tuple[np.ndarray, np.ndarray]] = []  # multicast: (forwarded flow, the flow it reads from)
    if shift is not None and multicast:
        k = shift[0]
        y = ((node + k) % topo.nodes) * L + loc
        zeros, cc = np.zeros(G, np.int64), np.full(G, c, np.int64)
        rows.append((_flow_index(g, y, G, in_place), RDMA, g, y, zeros, cc))  # rdma x -> y, the direct flow
        x = ((node - k) % topo.nodes) * L + loc  # where GPU g's block of this stage comes from
        for l_shift in range(1, L):
            dst = node * L + (loc + l_shift) % L
            f = _flow_index(x, dst, G, in_place)
            rows.append((f, NATIVE, g, dst, zeros, cc))  # g passes x's block on to dst
            passed_on.append((f, _flow_index(x, g, G, in_place)))
    elif shift is not None:
        k, j = shift
        y = ((node + k) % topo.nodes) * L + (loc + j) % L
        u, v = peer[g], peer[y]
        f = _flow_index(u, v, G, in_place)
        zeros = np.zeros(G, np.int64)
        cc = np.full(G, c, np.int64)
        fwd, back = u != g, v != y
        rows.append((f[fwd], 2, u[fwd], g[fwd], zeros[fwd], cc[fwd]))            # send_forward u -> x
        rows.append((f, 3, g, y, zeros, cc))                                       # rdma x -> y
        rows.append((f[back], 4, y[back], v[back], zeros[back], cc[back]))        # recv_forward y -> v
    for l_shift, amount in natives:
        dst = node * L + (loc + l_shift) % L
        rows.append((_flow_index(g, dst, G, in_place), NATIVE, g, dst, np.full(G, offsets.get(l_shift, 0), np.int64),
                     np.full(G, amount, np.int64)))
    if local:
        rows.append((_flow_index(g, g, G, False), 0, g, g, np.zeros(G, np.int64), np.full(G, c, np.int64)))
    if not rows:
        z = np.zeros(0, np.int64)
        return z, z, z, z, z, z, z
    flow, role, src, dst, off, nb = (np.concatenate([np.asarray(r[i], dtype=np.int64) if i != 1 else
                                                     np.full(len(r[0]), r[1], np.int64) for r in rows])
                                     for i in range(6))
    order = np.lexsort((role, flow))
    flow, role, src, dst, off, nb = (a[order] for a in (flow, role, src, dst, off, nb))
    after = waits_on_previous(flow)
    if passed_on:  # every flow is one transfer here: a forwarded copy waits on the network transfer it reads
        fwd, source = (np.concatenate(a) for a in zip(*passed_on, strict=True))
        after[np.searchsorted(flow, fwd)] = np.searchsorted(flow, source)
    return flow, role, src, dst, off, nb, after


def compile_pattern(topology: Topology, collective: CollectiveSpec, options: CompileOptions | None = None
                    ) -> PatternPlan:
    """The pattern plan of a uniform All-to-All or AllGather (see the module docstring)."""
    from .passes.chunks import assign_queues, pick_chunk

    options = options or CompileOptions()
    why = pattern_applies(topology, collective)
    if why is not None:
        raise PlanError(f"no pattern plan for this collective ({why}); compile it without --pattern")
    if options.net_chunk_bytes not in (None, "auto"):  # auto: one chunk here
        raise PlanError(f"a pattern plan takes one chunk size, not a network chunk of its own "
                        f"({options.net_chunk_bytes} B): compile it without --pattern, or without --net-chunk")
    G = topology.num_gpus
    _check_memory(G, "compile", ScheduleError, "compile it on a machine with more memory, or for fewer GPUs")
    c = collective.size_bytes // G
    in_place = collective.in_place
    mc = _multicast(topology, collective, options.multicast)
    shifts, native, S = _place(topology, c, mc)
    # every stage's transfers, one per distinct content (the shifts are alike by symmetry)
    by_stage: dict[int, list[tuple[int, int]]] = {}
    for st, l_shift, amount in native:
        by_stage.setdefault(st, []).append((l_shift, amount))
    distinct: dict[tuple, tuple] = {}
    keys: list[tuple] = []
    offsets: dict[int, int] = {}
    for s in range(S):
        entries = by_stage.get(s, [])
        local = s == 0 and not in_place and c > 0
        key = (s < len(shifts), tuple(entries), tuple(sorted(offsets.items())) if entries else (), local)
        if key not in distinct:
            flow, role, src, dst, off, nb, after = _stage_transfers(
                topology, c, in_place, shifts[s] if s < len(shifts) else None, entries, offsets, local, mc)
            stage = np.zeros(flow.size, np.int64)
            queue = assign_queues(topology, stage, role, src, dst, nb, after)
            distinct[key] = (stage, role, src, dst, nb, after, queue)
        keys.append(key)
        for l_shift, amount in entries:
            offsets[l_shift] = offsets.get(l_shift, 0) + amount
    uses: dict[tuple, int] = {}
    for key in keys:
        uses[key] = uses.get(key, 0) + 1
    costed: dict[int, tuple] = {}

    def costs_of(chunk: int) -> tuple:
        if chunk not in costed:
            costed[chunk] = _stage_costs(topology, chunk, S, distinct, keys, uses, mc)
        return costed[chunk]

    network = len(shifts) > 0
    # every RDMA stage is a shift: one transfer per GPU each way, so the busiest node sends L per stage
    flows = (len(shifts), topology.gpus_per_node * len(shifts))

    def plan_time(chunk: int) -> tuple[float, dict]:
        times, ports, pipes, port_busy, queue_busy, chain_s = costs_of(chunk)
        fill = cost.staging_fill_s(topology, chunk, np.array([RDMA]), np.array([c])) if network else 0.0
        return cost.plan_time_v2(topology, times, network, fill_s=fill, flows=flows,
                                 overlap_s=cost.overlapped_s(port_busy, queue_busy, pipes, chain_s))

    chunk = options.chunk_bytes
    if chunk is None:  # as the explicit compiler chooses (the plan's v2 time, its stages overlapping)
        largest = max((int(d[4].max(initial=0)) for d in distinct.values()), default=0)
        chunk = DEFAULT_CHUNK_BYTES if largest == 0 else pick_chunk(
            largest, lambda k: plan_time(k)[0],
            lambda k: sum(n * int(np.maximum(1, -(-distinct[key][4] // k)).sum()) for key, n in uses.items()))
    times, ports, pipes, port_busy, queue_busy, chain_s = costs_of(chunk)
    predicted, parts = plan_time(chunk)
    # the port model's bound: every GPU's ports carry the same totals (multicast: a block per other node over the NIC;
    # over NVLink its own block and each block it passes on, to the node's L - 1 other GPUs)
    N, L = topology.nodes, topology.gpus_per_node
    if mc:
        nic, nvl = float((N - 1) * c), float(N * (L - 1) * c)
    else:
        nic = float((N - 1) * L * c)
        forwards = bool((np.asarray(topology.peer_array()) != np.arange(G)).any())
        nvl = float((2 * nic if forwards else 0.0) + (L - 1) * c)
    per = {"nvlink": nvl / (topology.nvlink_gbps * 1e9), "rdma": nic / (topology.nic_gbps * 1e9)}
    bound = max(per.values())
    report = Report(predicted_time_s=predicted, lower_bound_s=bound, lower_bound_by_domain_s=per,
                    ratio=predicted / bound if bound > 0 else 1.0, rdma_stages=len(shifts), cost_model="v2",
                    breakdown_s={"ports": float(ports.sum()), **parts})
    plan_options = PlanOptions(chunk_bytes=chunk, max_extra_time=options.max_extra_time, multicast=mc)
    return PatternPlan(schema_version=SCHEMA_VERSION, encoding=ENCODING,
                       plan_id=_pattern_id(topology, collective, plan_options),
                       generator=f"hoccl-compiler {__version__}", topology=topology, collective=collective,
                       options=plan_options, cell_bytes=c, num_stages=S, rdma_shifts=shifts, native=native,
                       stage_time_s=times.tolist(), report=report)


def _stage_costs(topo: Topology, chunk: int, S: int, distinct: dict, keys: list, uses: dict,
                 multicast: bool = False) -> tuple:
    """v2 of a pattern plan's stages with chunks of ``chunk``: each distinct stage content costed once. The stages
    overlap (no barrier, cost.overlapped_s): each port's and queue's busy time over all stages, and the queues' chain
    from stage to stage. A pattern plan is the same on every node (its shifts move every node alike), so one node's
    queues stand for all: queue q is q mod ``per_node``, each stage's path edges reduced to those. Returns the stage
    times, port and pipeline times, the busy time of every port and queue, and the chain's time."""
    from .passes.chunks import chunk_order
    from .units import chain_depth

    per_node = topo.gpus_per_node * (topo.dma_queues + 3)
    seen: dict[tuple, tuple] = {}
    for key, (stage, role, src, dst, nb, after, queue) in distinct.items():
        order = chunk_order(topo, chunk, stage, role, src, dst, nb, *((chain_depth(after), after) if multicast else ()))
        sc = cost.stage_times_v2(topo, chunk, stage, role, src, dst, nb, queue, after, order, 1)
        qb = sc.queue_busy_s
        node_busy = np.pad(qb, (0, -qb.size % per_node)).reshape(-1, per_node).max(axis=0)
        seen[key] = (float(sc.time_s[0]), float(sc.ports_s[0]), float(sc.pipeline_s[0]), sc.port_busy_s, qb,
                     (node_busy, *_node_edges(sc.edges[1:], per_node)))
    times, ports, pipes = np.zeros(S), np.zeros(S), np.zeros(S)
    chain = cost.StageChain(per_node)
    for s, key in enumerate(keys):
        times[s], ports[s], pipes[s], _, _, step = seen[key]
        chain.add(*step)
    port_busy = sum((seen[k][3] * n for k, n in uses.items()), np.zeros(4 * topo.num_gpus))
    queue_busy = np.zeros(max((seen[k][4].size for k in uses), default=0))
    for k, n in uses.items():
        queue_busy[:seen[k][4].size] += seen[k][4] * n
    return times, ports, pipes, port_busy, queue_busy, chain.time_s()


def _node_edges(edges: tuple, per_node: int) -> tuple[np.ndarray, ...]:
    """A stage's path edges (upstream queue, downstream queue, first chunk s, last chunk s, whole s, upstream piece;
    one per waiting piece) on one node's queues (queue mod ``per_node``): one per pair of queues
    (:func:`cost.pair_edges`), then one per pair of one node's queues with the largest times (every node's pair
    alike)."""
    up, down, first, last, whole = cost.pair_edges(*edges)
    if not up.size:
        return up, down, first, last, whole
    pair = (up % per_node) * per_node + down % per_node
    keys, inverse = np.unique(pair, return_inverse=True)
    f, la, wh = np.zeros(keys.size), np.zeros(keys.size), np.zeros(keys.size)
    np.maximum.at(f, inverse, first)
    np.maximum.at(la, inverse, last)
    np.maximum.at(wh, inverse, whole)
    return keys // per_node, keys % per_node, f, la, wh


def _check_memory(G: int, what: str, error: type, fix: str) -> None:
    """Refuse, before building anything of G entries, a pattern plan over the memory budget."""
    from .codec import decode_budget

    need, budget = G * PATTERN_BYTES_PER_GPU, decode_budget()
    if need > budget:
        raise error(f"a pattern plan of {G:,} GPUs takes about {need / 2**30:,.1f} GiB to {what}, over the "
                    f"{budget / 2**30:.1f} GiB allowed (HOCCL_MAX_PLAN_MEMORY, default half of this machine's memory): "
                    f"{fix}")


def verify_pattern(pp: PatternPlan) -> None:
    """Check a pattern plan from the file alone (O(stages)); raises :class:`PlanError` naming the problem."""
    topo, G = pp.topology, pp.topology.num_gpus
    why = pattern_applies(topo, pp.collective)
    if why is not None:
        raise PlanError(f"pattern plan {pp.plan_id}: its collective has no pattern plan ({why})")
    if pp.plan_id != _pattern_id(topo, pp.collective, pp.options):
        raise PlanError(f"pattern plan {pp.plan_id}: the id is not its inputs' (the file was edited?); recompile it")
    _check_memory(G, "verify", PlanError, "verify it on a machine with more memory, or raise the setting")
    c = pp.collective.size_bytes // G
    if pp.cell_bytes != c:
        raise PlanError(f"pattern plan {pp.plan_id}: cell_bytes {pp.cell_bytes} but the collective's flows are {c} B")
    mc = pp.options.multicast
    if mc and not _multicast(topo, pp.collective, True):
        raise PlanError(f"pattern plan {pp.plan_id}: multicast, but its collective ({pp.collective.kind} on "
                        f"{topo.nodes} x {topo.gpus_per_node} GPUs) is not routed for multicast; recompile it")
    locals_ = range(1) if mc else range(topo.gpus_per_node)  # multicast: each block on its own rail
    want = {(k, j) for k in range(1, topo.nodes) for j in locals_} if c else set()
    got = list(pp.rdma_shifts)
    if len(got) != len(set(got)) or set(got) != want:
        missing, extra = sorted(want - set(got))[:3], sorted(set(got) - want)[:3]
        raise PlanError(f"pattern plan {pp.plan_id}: the RDMA shifts must be every (node shift 1..{topo.nodes - 1}, "
                        f"local shift {'0' if mc else f'0..{topo.gpus_per_node - 1}'}) once"
                        f"{' (multicast)' if mc else ''}; missing {missing}, extra or repeated {extra or 'none'}")
    if not len(got) <= pp.num_stages <= len(got) + 1 or len(pp.stage_time_s) != pp.num_stages:
        raise PlanError(f"pattern plan {pp.plan_id}: {pp.num_stages} stages for {len(got)} RDMA shifts and "
                        f"{len(pp.stage_time_s)} stage times")
    total: dict[int, int] = {}
    last = (-1, 0)
    for st, l_shift, amount in pp.native:
        if not (0 <= st < pp.num_stages and 1 <= l_shift < topo.gpus_per_node and amount > 0) or (st, l_shift) <= last:
            raise PlanError(f"pattern plan {pp.plan_id}: native entry {(st, l_shift, amount)} is out of range or out "
                            "of order (stage in 0..stages-1, local shift 1..L-1, bytes > 0, sorted by stage and "
                            "shift)")
        last = (st, l_shift)
        total[l_shift] = total.get(l_shift, 0) + amount
    for l_shift in range(1, topo.gpus_per_node):
        if c and total.get(l_shift, 0) != c:
            raise PlanError(f"pattern plan {pp.plan_id}: native shift {l_shift} moves {total.get(l_shift, 0)} of "
                            f"its flows' {c} bytes")
    if any(not np.isfinite(t) or t < 0 for t in pp.stage_time_s):
        raise PlanError(f"pattern plan {pp.plan_id}: a stage time is negative or not finite")


def expand(pp: PatternPlan):
    """The explicit :class:`~hoccl_compiler.schema.Plan` of a pattern plan (through the compiler's traffic, expand,
    chunks, costing and plan passes), for a plan of at most ``EXPAND_LIMIT`` GPUs."""
    from .passes import expand as expand_pass
    from .passes import traffic
    from .passes.stages import role_cells, segments_of, stage_times_of_segments

    G = pp.topology.num_gpus
    if G > EXPAND_LIMIT:
        raise PlanError(f"pattern plan {pp.plan_id} has {G} GPUs: too many to expand into a full plan (at most "
                        f"{EXPAND_LIMIT}); hoccl-inspect reads and verifies it as it is")
    verify_pattern(pp)
    mc = pp.options.multicast
    opts = CompileOptions(chunk_bytes=pp.options.chunk_bytes, max_extra_time=pp.options.max_extra_time,
                          baselines=False, multicast=mc)
    state = CompileState(topology=pp.topology, collective=pp.collective, options=opts)
    state = expand_pass.run(traffic.run(state, opts), opts)
    lay, pieces = state.layout, state.pieces
    in_place = pp.collective.in_place
    L, g = pp.topology.gpus_per_node, np.arange(G, dtype=np.int64)
    node, loc = g // L, g % L
    # the network flows (multicast: each GPU's block straight to the same local index of the node k on)
    cell_flow = None if mc else role_cells(pieces, RDMA, G)[1]
    rs, rf, rb = [], [], []
    for s, (k, j) in enumerate(pp.rdma_shifts):
        y = ((node + k) % pp.topology.nodes) * L + (loc + j) % L
        rs.append(np.full(G, s, np.int64))
        rf.append(_flow_index(g, y, G, in_place) if mc else cell_flow[g, y])
        rb.append(np.full(G, pp.cell_bytes, np.int64))
    for st, l_shift, amount in pp.native:
        rs.append(np.full(G, st, np.int64))
        rf.append(_flow_index(g, node * L + (loc + l_shift) % L, G, in_place))
        rb.append(np.full(G, amount, np.int64))
    if not in_place and pp.cell_bytes:
        rs.append(np.zeros(G, np.int64))
        rf.append(_flow_index(g, g, G, False))
        rb.append(np.full(G, pp.cell_bytes, np.int64))
    if mc:  # the blocks passed on inside the nodes move with the network flows they read (the stages pass's way)
        from .multicast import forwarded_schedule

        empty = np.zeros(0, np.int64)
        sched = forwarded_schedule(state, *(np.concatenate(r) if r else empty for r in (rs, rf, rb)), pp.num_stages,
                                   {"rdma_stages": len(pp.rdma_shifts)})
        return _through_the_passes(dataclasses.replace(state, schedule=sched), opts)
    seg_stage, seg_flow, seg_offset, seg_bytes = segments_of(rs, rf, rb, pp.num_stages, lay.bytes)
    order = np.lexsort((seg_flow, seg_stage))
    times = stage_times_of_segments(state, seg_stage, seg_flow, seg_bytes, pp.num_stages)
    sched = Schedule(num_stages=pp.num_stages, seg_stage=seg_stage[order], seg_flow=seg_flow[order],
                     seg_offset=seg_offset[order], seg_bytes=seg_bytes[order], stage_time_s=times,
                     report={"rdma_stages": len(pp.rdma_shifts)})
    return _through_the_passes(dataclasses.replace(state, schedule=sched), opts)


def _through_the_passes(state: CompileState, opts: CompileOptions):
    """The plan of a stage schedule: the compiler's chunks, costing and plan passes."""
    from .passes import chunks, costing
    from .passes import plan as plan_pass

    for p in (chunks, costing, plan_pass):
        state = p.run(state, opts)
    return state.plan


def _flow_count(pp: PatternPlan) -> int:
    """Flows the pattern stands for: one per (src, dst) pair, none onto itself in place, none at all of 0 bytes."""
    G = pp.topology.num_gpus
    if not pp.cell_bytes:
        return 0
    return G * (G - 1) if pp.collective.in_place else G * G


def format_pattern(pp: PatternPlan, max_stages: int = 8) -> str:
    """The readable summary of a pattern plan (what hoccl-inspect prints)."""
    from .report import bound_lines
    from .report import format_us as _us
    from .units import format_bytes

    rep, topo = pp.report, pp.topology
    parts = rep.breakdown_s or {}
    lines = [
        f"plan {pp.plan_id} (schema v{pp.schema_version}, pattern, {pp.generator})",
        f"collective   {pp.collective.describe()}",
        f"topology     {topo.describe()}",
        f"GPUs         {topo.num_gpus:,}   flows {_flow_count(pp):,} of {format_bytes(pp.cell_bytes)} (as shifts)   "
        f"stages {pp.num_stages:,} ({rep.rdma_stages:,} with RDMA)   chunks of {format_bytes(pp.options.chunk_bytes)}",
        *bound_lines(pp),
        f"             (v2: call {_us(parts.get('call_s', 0.0))} + stages {_us(parts.get('stages_s', 0.0))} + barriers "
        f"{_us(parts.get('stage_sync_s', 0.0))} + network transfers {_us(parts.get('net_flows_s', 0.0))}; the stages "
        f"in the port model alone {_us(parts.get('ports', 0.0))})",
        "",
        f"{'stage':>6} {'time':>12}  RDMA shift (node, local)   native (local shift: bytes)",
    ]
    if pp.options.multicast:
        lines.insert(-2, "multicast    each GPU's block crosses the network once per node, on its rail (shift (k, 0)); "
                         "the GPU it reaches passes it on to its node's other GPUs in the same stage")
    native: dict[int, list[str]] = {}
    for st, l_shift, amount in pp.native:
        native.setdefault(st, []).append(f"+{l_shift}: {format_bytes(amount)}")
    for s in range(min(pp.num_stages, max_stages)):
        shift = pp.rdma_shifts[s] if s < len(pp.rdma_shifts) else None
        lines.append(f"{s:>6} {_us(pp.stage_time_s[s]):>12}  {str(shift) if shift else '-':<26} "
                     f"{', '.join(native.get(s, [])) or '-'}")
    if pp.num_stages > max_stages:
        lines.append(f"   ... {pp.num_stages - max_stages:,} more stage(s)")
    return "\n".join(lines)


def load_pattern(data: dict, source: str = "<plan>") -> PatternPlan:
    from pydantic import ValidationError

    try:
        return PatternPlan.model_validate(data)
    except ValidationError as exc:
        raise PlanError(f"{source} is not a valid pattern plan: {schema_problems(exc)}") from None
