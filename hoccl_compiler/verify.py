"""Verification of a plan, from the plan file alone (pass 6, and ``hoccl-inspect --verify``).

Checks, each failure raising :class:`PlanError` naming the stage, transfer, flow and ranks:

1. the flows are exactly the collective's layout (recomputed from the collective in the plan), and
   every rank's output is tiled by them: every byte lands once, in the right place;
2. the HOCCL matrix is C expanded by the forwarding rule, and the stages add up to it exactly;
3. every transfer has the role its endpoints allow, sits on a queue of its source GPU (network
   writes on the NIC queue; the queue table itself is the one the topology gives), and waits on the
   piece before it in its flow's path, byte range for byte range; each flow's delivered ranges cover
   it exactly once;
4. per stage, each GPU has at most one outgoing and one incoming RDMA transfer;
5. each stage's chunk order lists every chunk of its transfers exactly once, and every chunk comes
   after the chunk it waits for, so the queues (each running its own entries in that order) cannot
   deadlock;
6. for small plans, a byte-level replay on NumPy buffers of random data yields the expected outputs.
"""

from __future__ import annotations

import numpy as np

from .collective import layout
from .errors import PlanError
from .ir import LOCAL, NATIVE, RDMA, RECV_FORWARD, ROLE_NAMES, SEND_FORWARD, mixed_sizes, plan_chunk_sizes, waited_chunk
from .schema import Plan
from .units import byte_sums

__all__ = ["verify_plan", "check_indices", "replay", "ReplayResult", "BYTE_REPLAY_LIMIT"]

BYTE_REPLAY_LIMIT = 8 << 20  # plans moving at most this many bytes also get a byte-level replay

_TR_FIELDS = ("flow", "role", "src", "dst", "offset", "bytes", "queue", "after")


def _transfers(plan: Plan) -> dict[str, np.ndarray]:
    """All stages' transfers as flat arrays, with 'stage' and 'local' (index within its stage)."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in (*_TR_FIELDS, "stage", "local")}
    for s, stage in enumerate(plan.stages):
        if stage.index != s:
            raise PlanError(f"stage at position {s} says index {stage.index}; stages must be numbered 0..n-1")
        tr = stage.transfers
        n = len(tr.flow)
        for k in _TR_FIELDS:
            cols[k].append(np.asarray(getattr(tr, k), dtype=np.int64))
        cols["stage"].append(np.full(n, s, dtype=np.int64))
        cols["local"].append(np.arange(n, dtype=np.int64))
    return {k: (np.concatenate(v) if v else np.zeros(0, np.int64)) for k, v in cols.items()}


def _describe(plan: Plan, t: dict[str, np.ndarray], i: int) -> str:
    role = int(t["role"][i])
    role_name = ROLE_NAMES[role] if 0 <= role < len(ROLE_NAMES) else f"role {role}"
    return (f"stage {t['stage'][i]}, transfer {t['local'][i]} (flow {t['flow'][i]}, {role_name} "
            f"GPU {t['src'][i]} -> GPU {t['dst'][i]}, bytes {t['offset'][i]}..{t['offset'][i] + t['bytes'][i]})")


def _fail_first(mask: np.ndarray, plan: Plan, t: dict[str, np.ndarray], why: str) -> None:
    if mask.any():
        i = int(np.nonzero(mask)[0][0])
        raise PlanError(f"plan {plan.plan_id}: {_describe(plan, t, i)}: {why} ({int(mask.sum())} transfer(s) in all)")


def _check_transfer_indices(plan: Plan, t: dict[str, np.ndarray], n_flows: int) -> None:
    G, n_queues = plan.topology.num_gpus, len(plan.queues.gpu)
    _fail_first((t["flow"] < 0) | (t["flow"] >= n_flows), plan, t, f"flow index outside 0..{n_flows - 1}")
    _fail_first((t["role"] < 0) | (t["role"] >= len(ROLE_NAMES)), plan, t, "unknown role")
    _fail_first((t["src"] < 0) | (t["src"] >= G) | (t["dst"] < 0) | (t["dst"] >= G), plan, t, "GPU outside 0..G-1")
    _fail_first((t["queue"] < 0) | (t["queue"] >= n_queues), plan, t, f"queue outside 0..{n_queues - 1}")
    stage_size = np.bincount(t["stage"], minlength=len(plan.stages))[t["stage"]]
    _fail_first((t["after"] < -1) | (t["after"] >= stage_size), plan, t, "waits on a transfer outside its stage")


def _first_outside(col, lo: int, hi: int) -> int | None:
    """The index of ``col``'s first entry outside ``lo..hi``, or None."""
    col = np.asarray(col, dtype=np.int64)
    bad = (col < lo) | (col > hi)
    return int(np.flatnonzero(bad)[0]) if bad.any() else None


def _check_queue_table(plan: Plan) -> None:
    """The queue table is the one the topology gives (docs/plan-format.md, ``queues``): per GPU in order,
    ``dma_queues`` queues ``dma`` 0..q-1, then ``dma_local``, ``dma_recv`` and ``nic``, each index 0. A runtime
    takes a queue's stream from its GPU, kind and index, so a queue moved, renamed or renumbered would run its
    copies on another GPU's or another queue's stream."""
    G, q = plan.topology.num_gpus, plan.topology.dma_queues
    kinds = ("dma",) * q + ("dma_local", "dma_recv", "nic")
    qt = plan.queues
    if len(qt.gpu) != G * len(kinds):
        raise PlanError(f"plan {plan.plan_id}: {len(qt.gpu)} queues where {G} GPUs of {q} DMA queue(s) have "
                        f"{G * len(kinds)} ({len(kinds)} a GPU): the plan is corrupt; recompile it")
    want_gpu = np.repeat(np.arange(G, dtype=np.int64), len(kinds))
    want_index = np.tile(np.r_[np.arange(q), 0, 0, 0], G)
    bad = (np.asarray(qt.gpu, np.int64) != want_gpu) | (np.asarray(qt.index, np.int64) != want_index)
    bad |= np.asarray(qt.kind, dtype=object) != np.array(kinds * G, dtype=object)
    if bad.any():
        i = int(np.argmax(bad))
        raise PlanError(f"plan {plan.plan_id}: queue {i} is {qt.kind[i]} {qt.index[i]} of GPU {qt.gpu[i]}, where "
                        f"the queue table of {G} GPUs with {q} DMA queue(s) has {kinds[i % len(kinds)]} "
                        f"{int(want_index[i])} of GPU {int(want_gpu[i])}: the plan is corrupt; recompile it")


def check_indices(plan: Plan) -> None:
    """Raise :class:`PlanError` where an index in ``plan`` points outside what it indexes: a flow's GPUs or ``via``,
    a queue's GPU, a transfer's flow, role, GPUs, queue or wait, a chunk order's transfer. O(size of the plan), a
    small part of :func:`verify_plan` (which does it too): what a tool that reads an unverified plan (``hoccl-inspect``
    without ``--verify``, :func:`~hoccl_compiler.simulate.simulate`) checks first, so that a damaged file is refused
    by name instead of failing on an index deep inside."""
    G, fl = plan.topology.num_gpus, plan.flows
    n_flows = len(fl.src)
    for what, col, lo, hi in (("src", fl.src, 0, G - 1), ("dst", fl.dst, 0, G - 1),
                              ("via", [] if fl.via is None else fl.via, -1, n_flows - 1)):
        i = _first_outside(col, lo, hi)
        if i is not None:
            raise PlanError(f"plan {plan.plan_id}: flow {i}'s {what} is {col[i]}, outside {lo}..{hi}: the plan is "
                            "corrupt; recompile it")
    q = _first_outside(plan.queues.gpu, 0, G - 1)
    if q is not None:
        raise PlanError(f"plan {plan.plan_id}: queue {q} is on GPU {plan.queues.gpu[q]}, outside 0..{G - 1}: the plan "
                        "is corrupt; recompile it")
    _check_queue_table(plan)
    t = _transfers(plan)
    _check_transfer_indices(plan, t, n_flows)
    _chunk_entries(plan, np.searchsorted(t["stage"], np.arange(len(plan.stages) + 1)))


def verify_plan(plan: Plan, *, byte_replay: bool | None = None) -> None:
    """Raise :class:`PlanError` unless ``plan`` is a correct schedule of its collective."""
    topo = plan.topology
    G = topo.num_gpus
    # 0. sizes the file must carry for its GPU count, checked before anything G x G is allocated -------------
    if len(plan.origin_matrix) != G or any(len(row) != G for row in plan.origin_matrix) or \
            len(plan.hoccl_matrix) != G or any(len(row) != G for row in plan.hoccl_matrix) or \
            any(len(getattr(plan.ranks, f)) != G for f in ("input_bytes", "output_bytes", "resident_offset",
                                                           "resident_bytes")):
        raise PlanError(f"plan {plan.plan_id} claims {G} GPUs ({topo.nodes} x {topo.gpus_per_node}) but its origin "
                        f"matrix is {len(plan.origin_matrix)} rows, its hoccl_matrix {len(plan.hoccl_matrix)} (each "
                        f"row must have {G} entries) and its rank table {len(plan.ranks.input_bytes)} entries: the "
                        "plan is corrupt; recompile it")
    if plan.collective.matrix is not None and len(plan.collective.matrix) != G:
        raise PlanError(f"plan {plan.plan_id}: its collective's matrix is {len(plan.collective.matrix)} rows for {G} "
                        "GPUs: the plan is corrupt; recompile it")
    _check_queue_table(plan)
    # 1. flows == layout of the collective; outputs tiled exactly once -----------------------------
    lay = layout(plan.collective, G)
    flows = {k: np.asarray(getattr(plan.flows, k), dtype=np.int64)
             for k in ("src", "dst", "bytes", "src_offset", "dst_offset")}
    multicast = plan.options.multicast
    if multicast:
        _check_parts(plan, flows, lay)
    else:
        if plan.flows.via is not None:
            raise PlanError(f"plan {plan.plan_id}: its flows carry 'via' but its options do not say multicast; the "
                            "plan is corrupt: recompile it")
        for name, expected in (("src", lay.src), ("dst", lay.dst), ("bytes", lay.bytes),
                               ("src_offset", lay.src_offset), ("dst_offset", lay.dst_offset)):
            got = flows[name]
            if got.shape != expected.shape or not np.array_equal(got, expected):
                raise PlanError(f"plan {plan.plan_id}: flows.{name} does not match the {plan.collective.kind} "
                                f"layout for {G} ranks; the plan is corrupt or for another collective: recompile it")
    via = _checked_via(plan, flows) if multicast else np.full(flows["src"].size, -1, np.int64)
    if plan.ranks.input_bytes != lay.input_bytes.tolist() or plan.ranks.output_bytes != lay.output_bytes.tolist():
        raise PlanError(f"plan {plan.plan_id}: per-rank buffer sizes do not match the collective; recompile it")
    res_off, res_bytes = lay.resident()  # in place: output bytes that already hold the rank's input
    if plan.ranks.resident_offset != res_off.tolist() or plan.ranks.resident_bytes != res_bytes.tolist():
        raise PlanError(f"plan {plan.plan_id}: ranks.resident_offset / resident_bytes do not match the in-place "
                        f"layout of its {plan.collective.kind}; the plan is corrupt: recompile it")
    has_res = np.nonzero(res_bytes)[0]
    _check_tiling(plan, np.concatenate([flows["dst"], has_res]),
                  np.concatenate([flows["dst_offset"], res_off[has_res]]),
                  np.concatenate([flows["bytes"], res_bytes[has_res]]), lay.output_bytes, "output", "writes")
    _check_tiling(plan, flows["src"], flows["src_offset"], flows["bytes"], lay.input_bytes, "input", "reads",
                  allow_gaps=True)
    if _matrix_mismatch(plan.origin_matrix, G, flows["src"], flows["dst"], flows["bytes"]) is not None:
        raise PlanError(f"plan {plan.plan_id}: origin_matrix is not the sum of the flows")

    # 2. T = expand(C); stages add up to T --------------------------------------------------------------
    # (a multicast plan has no forwarding: each flow moves in one piece from the GPU that holds its bytes)
    peer = np.arange(G, dtype=np.int64) if multicast else np.asarray(topo.peer_array(), dtype=np.int64)
    node = np.arange(G) // topo.gpus_per_node
    u, v, nb = np.where(via >= 0, flows["dst"][np.maximum(via, 0)], flows["src"]), flows["dst"], flows["bytes"]
    inter = node[u] != node[v]
    sf = inter & (peer[u] != u)
    rf = inter & (peer[v] != v)
    if _matrix_mismatch(plan.hoccl_matrix, G, np.concatenate([np.where(inter, peer[u], u), u[sf], peer[v][rf]]),
                        np.concatenate([np.where(inter, peer[v], v), peer[u][sf], v[rf]]),
                        np.concatenate([nb, nb[sf], nb[rf]])) is not None:
        raise PlanError(f"plan {plan.plan_id}: hoccl_matrix is not the origin matrix expanded with forwarding")

    t = _transfers(plan)
    n_flows = u.size
    n_tr = t["flow"].size
    _check_transfer_indices(plan, t, n_flows)  # ranges first, so that indexing below is safe
    _fail_first((t["bytes"] <= 0) | (t["offset"] < 0) | (t["offset"] + t["bytes"] > nb[t["flow"]]), plan, t,
                "byte range outside its flow")

    differ = _matrix_mismatch(plan.hoccl_matrix, G, t["src"], t["dst"], t["bytes"])
    if differ is not None:
        a, b, held, moved = differ
        raise PlanError(f"plan {plan.plan_id}: the stages move {moved} bytes GPU {a} -> GPU {b} but "
                        f"T holds {held}: the stages do not add up to T")

    # 3. roles, queues, waits, coverage ----------------------------------------------------------------
    fu, fv = u[t["flow"]], v[t["flow"]]
    role, src, dst = t["role"], t["src"], t["dst"]
    f_inter = node[fu] != node[fv]
    # choices per role, in the order of ir.LOCAL, NATIVE, SEND_FORWARD, RDMA, RECV_FORWARD (0..4; checked above)
    out_u, in_v = np.where(f_inter, peer[fu], fu), np.where(f_inter, peer[fv], fv)  # ū and v̄ of inter-node flows
    want_src = np.choose(role, [fu, fu, fu, out_u, in_v])
    want_dst = np.choose(role, [fv, fv, out_u, in_v, fv])
    allowed = np.choose(role, [fu == fv, (fu != fv) & ~f_inter, f_inter & (peer[fu] != fu), f_inter,
                               f_inter & (peer[fv] != fv)])
    _fail_first(~allowed, plan, t, "this role does not apply to the flow's endpoints")
    _fail_first((src != want_src) | (dst != want_dst), plan, t,
                "wrong endpoints for its role (the forwarding path is u -> peer(u) -> peer(v) -> v)")
    q_gpu = np.asarray(plan.queues.gpu, dtype=np.int64)
    kind_code = {"dma": 0, "dma_recv": 1, "nic": 2, "dma_local": 3}
    q_kind = np.asarray([kind_code[k] for k in plan.queues.kind], dtype=np.int64)
    want_kind = np.array([3, 0, 0, 2, 1], np.int64)[role]  # per role, as above
    _fail_first(q_gpu[t["queue"]] != src, plan, t, "its queue belongs to another GPU (copies run on the source)")
    kind_of = q_kind[t["queue"]]
    if multicast and (role == RDMA).any():  # its native copies are dealt over dma and dma_recv queues
        kind_of = np.where((role == NATIVE) & (kind_of == 1), 0, kind_of)
    _fail_first(kind_of != want_kind, plan, t, "wrong queue kind: network writes go on a nic queue, recv_forward "
                "copies on dma_recv, local copies on dma_local, native and send_forward on dma (a multicast plan "
                "across nodes: native copies on dma or dma_recv)")

    base = np.searchsorted(t["stage"], np.arange(len(plan.stages) + 1))
    has_prev = ((role == RDMA) & (peer[fu] != fu) & f_inter) | (role == RECV_FORWARD)
    prev_role = np.where(role == RDMA, SEND_FORWARD, np.where(role == RECV_FORWARD, RDMA, -1))
    after_g = np.where(t["after"] >= 0, base[t["stage"]] + t["after"], 0)
    forwarded = via[t["flow"]] >= 0  # (multicast) it reads another flow's output: it waits on that flow's piece
    _fail_first(~has_prev & ~forwarded & (t["after"] != -1), plan, t,
                "waits on another transfer but is the first piece of its path")
    same_bytes = (t["offset"][after_g] == t["offset"]) & (t["bytes"][after_g] == t["bytes"])
    ok_prev = (t["after"] >= 0) & (t["flow"][after_g] == t["flow"]) & (t["role"][after_g] == prev_role) & same_bytes
    _fail_first(has_prev & ~ok_prev, plan, t,
                "does not wait on the previous piece of its flow for the same bytes in the same stage")
    ok_source = (t["after"] >= 0) & (t["flow"][after_g] == via[t["flow"]]) & same_bytes & (t["dst"][after_g] == fu)
    _fail_first(forwarded & ~ok_source, plan, t, "reads another flow's output (via) but does not wait, in the same "
                "stage, on that flow's transfer of the same bytes into it")
    deliver = (role == LOCAL) | (role == NATIVE) | (role == RECV_FORWARD) | ((role == RDMA) & (peer[fv] == fv))
    needs_next = ((role == SEND_FORWARD) | (role == RDMA)) & ~deliver
    followed = np.zeros(n_tr, dtype=bool)
    followed[after_g[t["after"] >= 0]] = True
    _fail_first(needs_next & ~followed, plan, t, "moves bytes into staging that no later piece takes onward")
    _check_coverage(plan, t, deliver, nb)

    # 4. RDMA degree bound -------------------------------------------------------------------------------
    rd = role == RDMA
    for end, what in ((src, "outgoing"), (dst, "incoming")) if rd.any() else ():
        key = t["stage"][rd] * G + end[rd]
        uniq, counts = np.unique(key, return_counts=True)
        if (counts > 1).any():
            k = int(uniq[counts > 1][0])
            raise PlanError(f"plan {plan.plan_id}: stage {k // G}: GPU {k % G} has {int(counts[counts > 1][0])} "
                            f"{what} RDMA transfers; a stage allows at most one per GPU and direction")

    # 5. chunk orders and deadlock freedom -----------------------------------------------------------------
    _check_chunk_orders(plan, t, base)

    # 6. byte-level replay for small plans -----------------------------------------------------------------
    if byte_replay is None:
        byte_replay = int(lay.output_bytes.sum()) <= BYTE_REPLAY_LIMIT
    if byte_replay:
        rng = np.random.default_rng(0x40CC1)
        inputs = [rng.integers(0, 256, int(n), dtype=np.uint8) for n in lay.input_bytes]
        outputs = replay(plan, inputs).outputs
        for rank in range(G):
            expected = np.zeros(int(lay.output_bytes[rank]), dtype=np.uint8)
            expected[res_off[rank]: res_off[rank] + res_bytes[rank]] = inputs[rank][: res_bytes[rank]]
            for i in np.nonzero(lay.dst == rank)[0]:
                expected[lay.dst_offset[i]: lay.dst_offset[i] + lay.bytes[i]] = \
                    inputs[lay.src[i]][lay.src_offset[i]: lay.src_offset[i] + lay.bytes[i]]
            if not np.array_equal(outputs[rank], expected):
                bad = int(np.nonzero(outputs[rank] != expected)[0][0])
                raise PlanError(f"plan {plan.plan_id}: byte replay: rank {rank}'s output byte {bad} is wrong")


def _check_parts(plan: Plan, flows: dict[str, np.ndarray], lay) -> None:
    """A multicast plan's flows are the layout's blocks, each whole or cut into consecutive parts (sorted by src,
    dst, offset; each part at the same distance into the block on both sides)."""
    G = plan.topology.num_gpus
    key, block_key = flows["src"] * G + flows["dst"], lay.src * G + lay.dst
    where = np.searchsorted(block_key, key)
    inside = where < block_key.size
    b = np.minimum(where, max(block_key.size - 1, 0))
    bad = ~inside
    if block_key.size:
        into = flows["src_offset"] - lay.src_offset[b]
        bad |= (block_key[b] != key) | (flows["dst_offset"] - lay.dst_offset[b] != into)
        first = np.r_[True, b[1:] != b[:-1]] if b.size else np.zeros(0, bool)
        prev_end = np.r_[0, into[:-1] + flows["bytes"][:-1]] if b.size else np.zeros(0, np.int64)
        bad |= np.where(first, into != 0, into != prev_end) | (flows["bytes"] <= 0)
        if b.size and (np.diff(b) < 0).any():
            bad[1:] |= np.diff(b) < 0
    if bad.any() or (block_key.size and not np.array_equal(byte_sums(b, flows["bytes"], block_key.size), lay.bytes)):
        f = int(np.nonzero(bad)[0][0]) if bad.any() else -1
        which = f"flow {f} (GPU {flows['src'][f]} -> GPU {flows['dst'][f]})" if f >= 0 else "its flows"
        raise PlanError(f"plan {plan.plan_id}: {which} is not a part of the {plan.collective.kind} layout's blocks "
                        f"for {G} ranks (each block whole or cut into consecutive parts, in order); the plan is "
                        "corrupt or for another collective: recompile it")


def _checked_via(plan: Plan, flows: dict[str, np.ndarray]) -> np.ndarray:
    """The multicast plan's ``via``: every entry -1 or another flow of the same source bytes to another GPU, and no
    cycle (pointer doubling: a chain longer than the flow count has one)."""
    n = flows["src"].size
    if plan.flows.via is None or len(plan.flows.via) != n:
        raise PlanError(f"plan {plan.plan_id}: a multicast plan needs flows.via, one entry per flow; recompile it")
    via = np.asarray(plan.flows.via, dtype=np.int64)
    g = np.maximum(via, 0)
    bad = (via < -1) | (via >= n)
    g = np.where(bad, 0, g)
    bad |= (via >= 0) & ((via == np.arange(n)) | (flows["src"][g] != flows["src"]) |
                         (flows["src_offset"][g] != flows["src_offset"]) | (flows["bytes"][g] != flows["bytes"]) |
                         (flows["dst"][g] == flows["dst"]))
    if bad.any():
        f = int(np.nonzero(bad)[0][0])
        raise PlanError(f"plan {plan.plan_id}: flow {f} reads via {int(via[f])}, which is not another flow of the same "
                        "source bytes to another GPU; the plan is corrupt: recompile it")
    jump = via.copy()
    for _ in range(max(1, int(n).bit_length()) + 1):
        jump = np.where(jump >= 0, jump[np.maximum(jump, 0)], -1)
    if (jump >= 0).any():
        f = int(np.nonzero(jump >= 0)[0][0])
        raise PlanError(f"plan {plan.plan_id}: flow {f}'s via chain runs in a cycle; the plan is corrupt: recompile it")
    return via


# GPUs up to which the verifier compares a plan's G x G matrices whole (128 MiB of int64 each at 4096); above, row by
# row against the sums it computes per nonzero cell (a 16,384-GPU Broadcast's dense copies took 6 x 2 GiB)
DENSE_MATRIX_GPUS = 4096


def _matrix_mismatch(rows, G: int, i: np.ndarray, j: np.ndarray, w: np.ndarray) -> tuple[int, int, int, int] | None:
    """The first cell (row, column, the matrix's value, the sum) where the G x G matrix ``rows`` (a sequence of G
    rows of G ints, as a plan holds it) is not the sum of ``w`` at (``i``, ``j``); None where it is everywhere."""
    key = np.asarray(i, np.int64) * G + np.asarray(j, np.int64)
    if G <= DENSE_MATRIX_GPUS:
        want = byte_sums(key, w, G * G)
        got = np.asarray(rows, dtype=np.int64).reshape(G * G)
        bad = np.flatnonzero(got != want)
        return None if not bad.size else (*divmod(int(bad[0]), G), int(got[bad[0]]), int(want[bad[0]]))
    cells, inverse = np.unique(key, return_inverse=True)
    sums = byte_sums(inverse, w, cells.size)
    bounds = np.searchsorted(cells, np.arange(G + 1, dtype=np.int64) * G)
    want = np.zeros(G, np.int64)
    for r in range(G):
        lo, hi = bounds[r], bounds[r + 1]
        want[cells[lo:hi] - r * G] = sums[lo:hi]
        got = np.asarray(rows[r], dtype=np.int64)
        if not np.array_equal(got, want):
            c = int(np.flatnonzero(got != want)[0])
            return r, c, int(got[c]), int(want[c])
        want[cells[lo:hi] - r * G] = 0
    return None


def _check_tiling(plan: Plan, rank, offset, nbytes, size, what: str, verb: str, allow_gaps: bool = False) -> None:
    order = np.lexsort((offset, rank))
    rank, offset, nbytes = rank[order], offset[order], nbytes[order]
    end = offset + nbytes
    if (end > size[rank]).any():
        i = int(np.nonzero(end > size[rank])[0][0])
        raise PlanError(f"plan {plan.plan_id}: rank {rank[i]}: a flow {verb} {what} bytes {offset[i]}..{end[i]} "
                        f"beyond its {size[rank[i]]}-byte {what} buffer")
    same = rank[1:] == rank[:-1]
    overlap = same & (offset[1:] < end[:-1])
    if overlap.any() and not allow_gaps:
        i = int(np.nonzero(overlap)[0][0]) + 1
        raise PlanError(f"plan {plan.plan_id}: rank {rank[i]}: {what} bytes from {offset[i]} are written twice")
    if not allow_gaps:
        covered = byte_sums(rank, nbytes, size.size)
        if not np.array_equal(covered, size):
            r = int(np.nonzero(covered != size)[0][0])
            raise PlanError(f"plan {plan.plan_id}: rank {r}: {covered[r]} of its {size[r]} {what} bytes are written")


def _check_coverage(plan: Plan, t, deliver: np.ndarray, flow_bytes: np.ndarray) -> None:
    """Each flow's delivering transfers cover its bytes exactly once."""
    d = np.nonzero(deliver)[0]
    order = d[np.lexsort((t["offset"][d], t["flow"][d]))]
    flow, off, nb = t["flow"][order], t["offset"][order], t["bytes"][order]
    starts = np.concatenate([[True], flow[1:] != flow[:-1]])
    expected_off = np.where(starts, 0, np.concatenate([[0], off[:-1] + nb[:-1]]))
    bad = off != expected_off
    if bad.any():
        _fail_first(np.isin(np.arange(t["flow"].size), order[bad]), plan, t,
                    "its bytes overlap or leave a gap with the flow's other deliveries")
    total = byte_sums(flow, nb, flow_bytes.size)
    if not np.array_equal(total, flow_bytes):
        f = int(np.nonzero(total != flow_bytes)[0][0])
        raise PlanError(f"plan {plan.plan_id}: flow {f} (GPU {plan.flows.src[f]} -> GPU {plan.flows.dst[f]}) "
                        f"delivers {total[f]} of its {flow_bytes[f]} bytes")


def _chunk_entries(plan: Plan, base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every chunk order entry as (its stage, the transfer it names in that stage), each checked to name one of its
    stage's transfers (``base``: where each stage's transfers start in the flat numbering, and their end)."""
    sizes = np.diff(base)
    e_stage = np.repeat(np.arange(len(plan.stages), dtype=np.int64),
                        [len(stage.chunks) for stage in plan.stages])
    e_local = np.concatenate([np.asarray(stage.chunks, dtype=np.int64) for stage in plan.stages]) \
        if plan.stages else np.zeros(0, np.int64)
    bad = (e_local < 0) | (e_local >= sizes[e_stage])
    if bad.any():
        s = int(e_stage[bad][0])
        raise PlanError(f"plan {plan.plan_id}: stage {s}: chunk order names transfer {int(e_local[bad][0])}, "
                        f"outside 0..{sizes[s] - 1}: the plan is corrupt; recompile it")
    return e_stage, e_local


def _check_chunk_orders(plan: Plan, t, base: np.ndarray) -> None:
    size = plan_chunk_sizes(plan, t["role"])  # each transfer's chunk (the network's own, where the plan has one)
    n_chunks = np.maximum(1, -(-t["bytes"] // size))
    first_chunk = np.cumsum(n_chunks) - n_chunks
    e_stage, e_local = _chunk_entries(plan, base)
    e_tr = base[e_stage] + e_local
    count = np.bincount(e_tr, minlength=t["flow"].size)
    what = (f"ceil(bytes / {plan.options.chunk_bytes})" if plan.options.net_chunk_bytes is None else
            f"ceil(bytes / {plan.options.chunk_bytes}), or ceil(bytes / {plan.options.net_chunk_bytes}) for a network "
            "transfer")
    _fail_first(count != n_chunks, plan, t, f"its chunk count in the queue order is not {what}")
    # chunk k of a transfer is its k-th occurrence in its queue's order: the stable sort by transfer lists the chunks
    # (transfer after transfer, k in order: the chunk ids, as the counts are right) with the entry of each
    entry_of_chunk = np.argsort(e_tr, kind="stable")
    chunk_of_entry = np.empty(e_tr.size, dtype=np.int64)
    chunk_of_entry[entry_of_chunk] = np.arange(e_tr.size)
    # the entries that wait (the rest have no dependency), each with the chunk it waits for (its own index k where
    # the plan has one chunk size)
    waits = np.flatnonzero(t["after"][e_tr] >= 0)
    w_tr = e_tr[waits]
    a_tr = base[e_stage[waits]] + t["after"][w_tr]  # (its own stage's numbering: the transfer it waits on)
    w_k = chunk_of_entry[waits] - first_chunk[w_tr]
    dep = first_chunk[a_tr] + (waited_chunk(w_k, size[w_tr], size[a_tr], t["bytes"][w_tr]) if mixed_sizes(size)
                               else w_k)
    del a_tr, w_k
    # A chunk's dependency must come earlier in its stage's order. Each queue runs its own entries in
    # that order, so the stage order itself is an execution that respects every queue and every wait:
    # no deadlock is possible.
    late = entry_of_chunk[dep] > waits
    if late.any():
        i = int(waits[np.nonzero(late)[0][0]])
        k = int(chunk_of_entry[i] - first_chunk[e_tr[i]])
        raise PlanError(f"plan {plan.plan_id}: {_describe(plan, t, int(e_tr[i]))}: its chunk {k} comes before "
                        "the chunk it waits for in the stage's chunk order (the queues could deadlock)")


def hot_spots(plan: Plan) -> list[str]:
    """Warnings (not errors: the plan is correct, only slower) for stages whose DMA queues start on one
    destination where they need not: the first copies of several GPUs' queues converge on one in-port while
    another issue order would start them on distinct destinations (a matching of queues to the destinations each
    one serves in the stage that is larger than the distinct first destinations). A queue whose transfers all go to
    one GPU has no other choice, so skewed traffic does not warn where no order does better."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_bipartite_matching

    kinds = plan.queues.kind
    G = plan.topology.num_gpus
    out = []
    for stage in plan.stages:
        tr = stage.transfers
        first: dict[int, int] = {}  # DMA queue -> destination of its first entry in the stage order
        for i in stage.chunks:
            q = tr.queue[i]
            if kinds[q] == "dma" and q not in first and tr.src[i] != tr.dst[i]:
                first[q] = tr.dst[i]
        if len(first) < 2:
            continue
        counts = np.bincount(np.fromiter(first.values(), dtype=np.int64), minlength=G)
        if counts.max() <= 1:
            continue
        queues = sorted(first)
        row = {q: j for j, q in enumerate(queues)}
        pairs = {(row[tr.queue[i]], tr.dst[i]) for i in range(len(tr.flow))
                 if tr.queue[i] in row and tr.src[i] != tr.dst[i]}
        rows, cols = zip(*sorted(pairs), strict=True)
        graph = csr_matrix((np.ones(len(rows), np.int8), (rows, cols)), shape=(len(queues), G))
        best = int((maximum_bipartite_matching(graph, perm_type="column") >= 0).sum())
        distinct = int((counts > 0).sum())
        if best > distinct:
            d = int(counts.argmax())
            out.append(f"stage {stage.index}: {int(counts.max())} of {len(first)} DMA queues start on GPU {d}, where "
                       f"another issue order would start {best} of them on distinct destinations ({distinct} now): "
                       "a destination hot spot (slower, not wrong; this compiler rotates the issue order of even "
                       "traffic, but its weighted interleave of uneven flows can still start queues together)")
    return out


class ReplayResult:
    def __init__(self, outputs: list[np.ndarray]):
        self.outputs = outputs


def replay(plan: Plan, inputs: list[np.ndarray]) -> ReplayResult:
    """Execute a plan on NumPy byte buffers (the reference executor): returns every rank's output.

    Staging on a forwarding GPU is modelled per (GPU, flow); outputs start poisoned (0xA5) so unwritten
    bytes show (except, in place, the part that holds the rank's own input). Chunks run stage by stage in each
    stage's chunk order (which lists every chunk after the one it waits for), so a multicast plan's forwarded copy
    reads only what has landed in the output it reads.
    """
    G = plan.topology.num_gpus
    if len(inputs) != G:
        raise PlanError(f"replay needs {G} input buffers, got {len(inputs)}")
    for rank, (buf, n) in enumerate(zip(inputs, plan.ranks.input_bytes, strict=True)):
        if buf.dtype != np.uint8 or buf.size != n:
            raise PlanError(f"replay: rank {rank}'s input must be {n} uint8 bytes, got {buf.size} {buf.dtype}")
    outputs = [np.full(n, 0xA5, dtype=np.uint8) for n in plan.ranks.output_bytes]
    res_off, res_bytes = layout(plan.collective, G).resident()
    for rank in range(G):  # in place: the input lives inside the output already
        outputs[rank][res_off[rank]: res_off[rank] + res_bytes[rank]] = inputs[rank][: res_bytes[rank]]
    staging: dict[tuple[int, int], np.ndarray] = {}
    fl = plan.flows
    via = fl.via if plan.options.multicast and fl.via is not None else None
    peer = list(range(G)) if via is not None else plan.topology.peer_array()
    for stage in plan.stages:
        tr = stage.transfers
        size = plan_chunk_sizes(plan, tr.role)
        seen: dict[int, int] = {}
        for i in stage.chunks:  # chunk by chunk in the stage's order: a forwarded copy reads what landed before it
            k = seen.get(i, 0)
            seen[i] = k + 1
            f, role, chunk = tr.flow[i], tr.role[i], int(size[i])
            off = tr.offset[i] + k * chunk
            n = min(chunk, tr.offset[i] + tr.bytes[i] - off)
            u, v = fl.src[f], fl.dst[f]
            if via is not None and via[f] >= 0:  # from the output the flow it follows fills
                g = via[f]
                data = outputs[fl.dst[g]][fl.dst_offset[g] + off: fl.dst_offset[g] + off + n].copy()
            elif role in (LOCAL, NATIVE, SEND_FORWARD) or (role == RDMA and peer[u] == u):
                data = inputs[u][fl.src_offset[f] + off: fl.src_offset[f] + off + n]
            else:  # rdma from ū's staging, recv_forward from v̄'s staging
                data = staging[(tr.src[i], f)][off: off + n]
            if role in (LOCAL, NATIVE, RECV_FORWARD) or (role == RDMA and peer[v] == v):
                outputs[v][fl.dst_offset[f] + off: fl.dst_offset[f] + off + n] = data
            else:  # into the staging area of the next GPU on the path
                area = staging.setdefault((tr.dst[i], f), np.zeros(fl.bytes[f], dtype=np.uint8))
                area[off: off + n] = data
    return ReplayResult(outputs)
