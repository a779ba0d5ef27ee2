"""Pass 3: stages, after the paper's Algorithm 1 (a Birkhoff-like decomposition of T).

1. The RDMA part of T (one cell per inter-node flow) is peeled into matchings. The matrix is first
   completed to one whose every row and column sums to its largest line sum M (the classic
   2n x 2n construction [[R, diag(M - rows)], [diag(M - cols), R^T]]); each step takes a perfect
   matching of the entries >= a threshold (halved when none exists, so large entries go first and
   stages stay few), and removes the smallest matched entry w from every matched cell. Each step
   covers every busiest line, so the RDMA steps add up to exactly M / NIC bandwidth: the RDMA lower
   bound. Each step is a stage: one RDMA flow per GPU out and in, every flow moving w bytes.
2. A stage's RDMA flows bring their forwarding copies (same bytes, same stage) onto NVLink.
3. Native NVLink traffic is peeled into matchings too (the paper's "local matching components"),
   which are spread over the NVLink slack that the RDMA stages leave (stage time x NVLink bandwidth -
   forwarding load, per port): each component takes the same fraction of every stage's room
   (:func:`spread_over_slack`), so no stage's NVLink is loaded to the full while others idle.
4. What does not fit becomes one NVLink-only stage at the end (for one domain alone, running everything
   together is optimal: its time is the busiest port's load), or joins the last RDMA stage where the cost model
   v2 says the barrier before a stage of its own costs more than that stage would save.
   The RDMA stages themselves stay matchings: the network executor runs one flow per NIC and direction at a
   time. Merging them would save nothing in v2 (``costs.stage_sync_us`` is 0: the executor has no barrier, and
   an All-to-All merged into one stage ran as long as its N - 1 stages: docs/results/2026-12-01-s18). Their
   number is the peel's, less the tail that ``fewer_stages`` sends whole where the network transfers it saves (a
   flow split over k stages is k of them: ``cost.net_flows_s``, the busiest GPU's or node's) are worth more than
   the time it adds (or the ``max_extra_time`` fraction allows). The general peel is found lazily
   (:func:`iter_matchings`), as far as that choice needs.
5. Local copies ride in the first stage (they are not costed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from .. import cost, multicast
from ..errors import ScheduleError
from ..ir import DEFAULT_CHUNK_BYTES, LOCAL, NATIVE, RDMA, CompileOptions, CompileState, Schedule
from ..units import byte_sums

if TYPE_CHECKING:
    import scipy.sparse as sp

Matching = tuple[int, np.ndarray, np.ndarray]  # (bytes per matched cell, rows, cols)


def peel_matchings(matrix: np.ndarray, progress: Callable[[str], None] | None = None) -> list[Matching]:
    """Decompose a nonnegative integer matrix into weighted matchings whose weights sum to its max line sum.

    Returns ``[(w, rows, cols), ...]``: in each, the cells ``(rows[i], cols[i])`` form a matching
    and each moves ``w``. Summing ``w`` over all the matchings a cell appears in gives the cell.
    """
    return list(iter_matchings(matrix, progress))


def iter_matchings(matrix: np.ndarray, progress: Callable[[str], None] | None = None) -> Iterator[Matching]:
    """:func:`peel_matchings` one matching at a time, each found when asked for (a skewed matrix's peel moves
    nearly all of its bytes in its first matchings and then spends thousands on the last few: a caller that cuts
    the tail need not find them)."""
    import scipy.sparse as sp  # here, not at import: reading a plan (hoccl-inspect, the runtime) needs none of it
    from scipy.sparse.csgraph import maximum_bipartite_matching

    n = matrix.shape[0]
    row_sum, col_sum = matrix.sum(axis=1), matrix.sum(axis=0)
    top = int(max(row_sum.max(initial=0), col_sum.max(initial=0)))
    if top == 0:
        return
    r, c = np.nonzero(matrix)
    vals = matrix[r, c]
    row_gap, col_gap = top - row_sum, top - col_sum
    if row_gap.any() or col_gap.any():  # complete to a matrix whose every line sums to `top`
        gr, gc = np.nonzero(row_gap)[0], np.nonzero(col_gap)[0]
        # [[R, diag(row_gap)], [diag(col_gap), R^T]]: the lower-right copy of R is peeled on its own
        r, c, vals = (np.concatenate([r, gr, n + gc, n + c]),
                      np.concatenate([c, n + gr, gc, n + r]),
                      np.concatenate([vals, row_gap[gr], col_gap[gc], vals]))
        size = 2 * n
    else:
        size = n
    A = sp.csr_matrix((vals.astype(np.int64), (r, c)), shape=(size, size))
    A.sum_duplicates()
    A.sort_indices()
    keys = _cell_keys(A)
    threshold = 1 << (int(A.data.max()).bit_length() - 1)
    rows_all = np.arange(size)
    found = moved = 0
    while A.nnz:
        if A.data.min() >= threshold:
            graph = A
        else:
            keep = A.data >= threshold
            graph = sp.csr_matrix((A.data[keep], A.indices[keep], _kept_indptr(A, keep)), shape=A.shape)
        match = maximum_bipartite_matching(graph, perm_type="column")
        if (match < 0).any():
            if threshold == 1:
                raise ScheduleError("internal: a line-balanced matrix had no perfect matching; please report this")
            threshold >>= 1
            continue
        pos = np.searchsorted(keys, rows_all * size + match)
        w = int(A.data[pos].min())
        A.data[pos] -= w
        real = (rows_all < n) & (match < n)
        moved += w
        if (A.data[pos] == 0).any():
            A.eliminate_zeros()
            keys = _cell_keys(A)
        if real.any():
            found += 1
            if progress is not None and found % 256 == 0:
                progress(f"stages: {found} matchings, {100 * moved / top:.2f}% of the busiest line")
            yield w, rows_all[real], match[real].astype(np.int64)


def uniform_matchings(matrix: np.ndarray, gpus_per_node: int, *, across: bool) -> list[Matching] | None:
    """The decomposition of a node-uniform matrix in closed form, or None when ``matrix`` is not one.

    Node-uniform: every cell between two GPUs of different nodes (``across``; the RDMA part of a uniform
    All-to-All or AllGather) or between two different GPUs of one node (not ``across``; its native NVLink part)
    holds the same byte count ``c``, and every other cell is 0. Its matchings are shifts, each a permutation that
    moves ``c`` per cell, and they add up to the max line sum, as the peel's do:

    * across nodes: GPU (a, i) -> GPU ((a + k) mod N, (i + l) mod L) for k in 1..N-1, l in 0..L-1;
    * within a node: GPU (a, i) -> GPU (a, (i + l) mod L) for l in 1..L-1.

    The peel finds the same number of matchings but pays a bipartite matching on the whole support for each (at
    2048 GPUs 24 s of a 55 s compile)."""
    G = matrix.shape[0]
    L = gpus_per_node
    if G == 0 or G % L:
        return None
    N = G // L
    gpu = np.arange(G)
    node, local = gpu // L, gpu % L
    # (node shift, local shift) of each matching
    shifts = [(k, j) for k in range(1, N) for j in range(L)] if across else [(0, j) for j in range(1, L)]
    if not shifts:
        return None
    c = int(matrix[0, ((node[0] + shifts[0][0]) % N) * L + (local[0] + shifts[0][1]) % L])
    if c <= 0:
        return None
    same_node = node[:, None] == node[None, :]
    support = ~same_node if across else same_node & ~np.eye(G, dtype=bool)
    if not (np.all(matrix[support] == c) and not matrix[~support].any()):
        return None
    return [(c, gpu, ((node + k) % N) * L + (local + j) % L) for k, j in shifts]


MIN_NATIVE_PIECE = DEFAULT_CHUNK_BYTES  # no native fragment spread into a stage is smaller (but a component's tail)
WeightedMatching = tuple[np.ndarray, np.ndarray, np.ndarray]  # (bytes per cell, rows, cols)
TAILS = (0.1, 0.05, 0.02, 0.01, 0.005, 0.002, 0.001, 0.0005)


class _Peel:
    """A peel's matchings (a list, or :func:`iter_matchings` found as far as asked for), and what is left of its
    ``matrix``: no fewer matchings can follow than the most cells a line still holds (a matching takes one cell of
    a line), which answers :meth:`more_than` often long before the peel would."""

    def __init__(self, matchings: Iterable[Matching], matrix: np.ndarray):
        self._rest = iter(matchings)
        self.found: list[Matching] = []
        self.moved = 0
        self.done = False
        self._matrix = matrix
        self._left: np.ndarray | None = None  # what is left after found[:_counted], made when first asked for
        self._row_cells: np.ndarray | None = None  # ... and the cells it holds per row and per column
        self._col_cells: np.ndarray | None = None
        self._counted = 0

    def _more(self) -> bool:
        if not self.done:
            try:
                m = next(self._rest)
            except StopIteration:
                self.done = True
            else:
                self.found.append(m)
                self.moved += m[0]
        return not self.done

    def until(self, amount: float) -> list[Matching]:
        """The matchings up to the first after which ``amount`` has moved (all of them, if it never has)."""
        while self.moved < amount and self._more():
            pass
        return self.found

    def more_than(self, count: int) -> bool:
        """Whether the whole peel has more than ``count`` matchings."""
        while len(self.found) <= count:
            rows, cols = self.cells_left()
            if len(self.found) + max(int(rows.max(initial=0)), int(cols.max(initial=0))) > count:
                return True
            if not self._more():
                break
        return len(self.found) > count

    def extend(self, count: int) -> None:
        """Find up to ``count`` more matchings (fewer where the peel ends)."""
        for _ in range(count):
            if not self._more():
                break

    def cells_left(self) -> tuple[np.ndarray, np.ndarray]:
        """The cells each row and each column of the matrix still holds after the matchings found."""
        if self._left is None:
            self._left = self._matrix.astype(np.int64)
            nonzero = self._left > 0
            self._row_cells, self._col_cells = nonzero.sum(axis=1), nonzero.sum(axis=0)
        for w, a, b in self.found[self._counted:]:
            self._left[a, b] -= w
            emptied = self._left[a, b] == 0
            self._row_cells[a[emptied]] -= 1  # a matching's rows (and columns) are distinct
            self._col_cells[b[emptied]] -= 1
        self._counted = len(self.found)
        return self._row_cells, self._col_cells

    def all(self) -> list[Matching]:
        while self._more():
            pass
        return self.found


def fewer_stages(matrix: np.ndarray, peeled: Iterable[Matching], max_extra_time: float | None,
                 stage_cost_bytes: float = 0.0, flow_cost_bytes: float = 0.0,
                 node_of: np.ndarray | None = None, node_flow_cost_bytes: float = 0.0) -> list[WeightedMatching]:
    """Trade RDMA time for fewer stages: at most a fraction ``max_extra_time`` of it, or (None) whatever the cost
    model v2 says a stage's barrier is worth (``stage_cost_bytes``: the barrier's time in bytes of the busiest
    NIC) and the network transfers' host cost (``cost.net_flows_s``, the same way: ``flow_cost_bytes`` per transfer
    of the busiest GPU, ``node_flow_cost_bytes`` per transfer of the busiest node, the more of the two;
    ``node_of[gpu]``: its node; a flow split over k stages is k transfers).

    The time-optimal peel ends in many stages that move almost nothing: a GPU with d destinations
    needs at least d stages, and the peel makes several times that. Here the peel is cut where a
    fraction ``tail`` of the busiest line is left, and the rest is sent whole, cell by cell, in
    maximum matchings of what remains (each such stage lasts as long as its largest cell). With a fraction, the
    largest tail whose extra time fits the allowance wins, and with ``max_extra_time == 0`` the peel is returned
    as it is; with None, the cut (or none) with the least time plus barriers.

    ``peeled`` may be :func:`iter_matchings`: the peel is then followed only as far as the decision needs (the
    cuts need it to 1 - the smallest tail of the busiest line; the whole peel only where it could still win, as
    its cost is at least that of the part found, or where its count decides).
    """
    peel = _Peel(peeled, matrix)

    def weighted(matchings: list[Matching]) -> list[WeightedMatching]:
        return [(np.full(a.size, w, np.int64), a, b) for w, a, b in matchings]

    if (max_extra_time is not None and max_extra_time <= 0) or \
            (max_extra_time is None and stage_cost_bytes <= 0 and flow_cost_bytes <= 0 and node_flow_cost_bytes <= 0):
        return weighted(peel.all())

    G = matrix.shape[0]

    def fixed_of(count: int, sends: np.ndarray, recvs: np.ndarray) -> float:
        """The barriers between ``count`` stages and the host cost of the transfers each GPU sends and receives,
        in bytes, as v2 charges them (``cost.plan_time_v2``; ``cost.transfers_cost``, each after the first)."""
        if not count:
            return 0.0
        gpu = max(int(sends.max()), int(recvs.max()))
        node = 0.0
        if node_flow_cost_bytes and node_of is not None:
            node = max(np.bincount(node_of, weights=sends).max(), np.bincount(node_of, weights=recvs).max())
        return stage_cost_bytes * (count - 1) + cost.transfers_cost(flow_cost_bytes, node_flow_cost_bytes, gpu,
                                                                      float(node))

    def transfers(stages: list) -> tuple[np.ndarray, np.ndarray]:  # per GPU: the transfers it sends, receives
        if not stages:
            return np.zeros(G, np.int64), np.zeros(G, np.int64)
        return (np.bincount(np.concatenate([a for _, a, _ in stages]), minlength=G),
                np.bincount(np.concatenate([b for _, _, b in stages]), minlength=G))

    def fixed(stages: list) -> float:
        return fixed_of(len(stages), *transfers(stages))

    nonzero = matrix > 0
    degree = max(int(nonzero.sum(axis=1).max(initial=0)), int(nonzero.sum(axis=0).max(initial=0)))
    if not peel.more_than(degree):
        return weighted(peel.found)  # as few stages as a GPU has destinations (or sources): no cut can make fewer
    # every matching of the peel crosses the busiest line (it has no slack), so their weights sum to its total
    top = int(max(matrix.sum(axis=1).max(), matrix.sum(axis=0).max()))
    best: list[WeightedMatching] | None = None
    best_cost = np.inf
    for tail in TAILS:
        residual = matrix.copy()
        moved, prefix = 0, []
        for w, a, b in peel.until((1 - tail) * top):
            if moved >= (1 - tail) * top:
                break
            residual[a, b] -= w
            moved += w
            prefix.append((np.full(a.size, w, np.int64), a, b))
        rest = _whole_cell_matchings(residual, node_of)
        time = moved + sum(int(w.max()) for w, _, _ in rest)
        count = len(prefix) + len(rest)
        if max_extra_time is None:
            cut = time + fixed(prefix + rest)
            if cut < best_cost:
                best, best_cost = prefix + rest, cut
        elif time <= (1 + max_extra_time) * top and peel.more_than(count):
            return prefix + rest  # tails are tried largest first: the first that fits cuts the most
    if max_extra_time is not None or best is None:
        return weighted(peel.all())
    # the whole peel costs at least its part found so far and one more transfer for each cell it has not emptied
    # (and as many more stages as the fullest line has such cells): where even that loses, it is not finished. The
    # bound is tried on more of the peel (half as much again each time) before the whole of it is found
    while not peel.done:
        sends, recvs = transfers(peel.found)
        more_rows, more_cols = peel.cells_left()
        at_least = fixed_of(len(peel.found) + int(max(more_rows.max(), more_cols.max())), sends + more_rows,
                            recvs + more_cols)
        if best_cost < top + at_least:
            return best
        peel.extend(len(peel.found) // 2 + 64)
    full = weighted(peel.all())
    return best if best_cost < top + fixed(full) else full


def _whole_cell_matchings(residual: np.ndarray, node_of: np.ndarray | None = None) -> list[WeightedMatching]:
    """The cells of ``residual`` whole, in as few matchings as can be found: by shifts where they reach the
    fewest possible (below), else maximum matchings of the cells left, one after another.

    Shifts: with ``node_of`` (GPU -> node, GPU g on node g // L) and every cell between two nodes, the cells of
    one shift, GPU (a, i) -> ((a + k) mod N, (i + l) mod L), form a matching, and the shifts cover every such cell
    once. Where the shifts that hold a cell are no more than the cells of the fullest line (no decomposition has
    fewer matchings), they are the answer, found without a bipartite matching: a skewed All-to-Allv's tail holds
    nearly every cell, and the maximum matchings (a 1024-GPU tail: a thousand of them on a million cells) took
    most of its compile."""
    r, c = np.nonzero(residual)  # row-major: the cells' keys r * m + c ascend, and stay so as cells go
    if not r.size:
        return []
    if node_of is not None:
        N = int(node_of.max()) + 1
        L = node_of.size // N
        if np.array_equal(node_of, np.arange(node_of.size) // L) and not (node_of[r] == node_of[c]).any():
            shift = ((node_of[c] - node_of[r]) % N) * L + (c - r) % L
            groups = np.unique(shift)
            fullest = max(int(np.bincount(r).max()), int(np.bincount(c).max()))
            if groups.size <= fullest:
                order = np.lexsort((r, shift))  # by shift, each by row
                r, c, shift = r[order], c[order], shift[order]
                cuts = np.flatnonzero(np.diff(shift)) + 1
                return [(residual[a, b].astype(np.int64), a.astype(np.int64), b.astype(np.int64))
                        for a, b in zip(np.split(r, cuts), np.split(c, cuts), strict=True)]
    return _maximum_matchings(residual, r, c)


def _maximum_matchings(residual: np.ndarray, r: np.ndarray, c: np.ndarray) -> list[WeightedMatching]:
    """Maximum matchings of the cells ``(r, c)`` of ``residual`` left, one after another (on the list of cells,
    not the dense matrix)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import maximum_bipartite_matching

    out = []
    n, m = residual.shape
    key = r.astype(np.int64) * m + c
    v = residual[r, c].astype(np.int64)
    per_row = np.bincount(r, minlength=n)
    indptr = np.zeros(n + 1, np.int64)
    while key.size:
        np.cumsum(per_row, out=indptr[1:])
        graph = sp.csr_matrix((np.ones(key.size, np.int8), key % m, indptr), shape=(n, m))  # sorted: no conversion
        match = maximum_bipartite_matching(graph, perm_type="column")
        rows = np.nonzero(match >= 0)[0].astype(np.int64)
        cols = match[rows].astype(np.int64)
        pos = np.searchsorted(key, rows * m + cols)
        out.append((v[pos], rows, cols))
        per_row[rows] -= 1
        key, v = np.delete(key, pos), np.delete(v, pos)
    return out


def _cell_keys(A: sp.csr_matrix) -> np.ndarray:
    row = np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr))
    return row * A.shape[1] + A.indices


def _kept_indptr(A: sp.csr_matrix, keep: np.ndarray) -> np.ndarray:
    counts = np.add.reduceat(keep.astype(np.int64), A.indptr[:-1]) if A.nnz else np.zeros(A.shape[0], np.int64)
    counts[np.diff(A.indptr) == 0] = 0  # reduceat repeats the next value for empty rows
    return np.concatenate([[0], np.cumsum(counts)])


def run(state: CompileState, options: CompileOptions,
        progress: Callable[[str], None] | None = None) -> CompileState:
    topo, pieces, lay = state.topology, state.pieces, state.layout
    assert pieces is not None and lay is not None, "stages runs after expand"
    if lay.via is not None:  # multicast: the direct flows are staged; each forwarded one moves with its source
        return multicast.staged(state, lambda direct: run(direct, options, progress))
    G = topo.num_gpus
    capacity = cost.port_capacity(topo)
    nvl_Bps = topo.nvlink_gbps * 1e9
    flow_src, flow_dst = lay.src, lay.dst

    # --- 1. RDMA matchings -------------------------------------------------------------------------
    rdma_matrix, cell_flow = role_cells(pieces, RDMA, G)
    peeled = uniform_matchings(rdma_matrix, topo.gpus_per_node, across=True)
    if peeled is None:  # the general peel, found as far as the stage count's choice needs (fewer_stages)
        peeled = iter_matchings(rdma_matrix, progress)
    # a network barrier between two stages and a network transfer's host cost, per GPU and per node, in bytes of
    # the NIC's time (the cost model v2's stage_sync_us, net_flow_us and net_node_flow_us)
    us_bytes = topo.nic_gbps * 1e9 * 1e-6
    c = topo.costs
    rdma_stages = fewer_stages(rdma_matrix, peeled, options.max_extra_time, c.stage_sync_us * us_bytes,
                               c.net_flow_us * us_bytes, np.arange(G) // topo.gpus_per_node,
                               c.net_node_flow_us * us_bytes)

    records_stage: list[np.ndarray] = []
    records_flow: list[np.ndarray] = []
    records_bytes: list[np.ndarray] = []
    loads = np.zeros((len(rdma_stages), 4 * G))
    for s, (w, a, b) in enumerate(rdma_stages):
        flows = cell_flow[a, b]
        records_stage.append(np.full(flows.size, s, np.int64))
        records_flow.append(flows)
        records_bytes.append(w)
        u, v = flow_src[flows], flow_dst[flows]
        ww = w.astype(np.float64)
        np.add.at(loads[s], 2 * G + a, ww)  # NIC out of ū
        np.add.at(loads[s], 3 * G + b, ww)  # NIC in of v̄
        fwd = u != a
        np.add.at(loads[s], u[fwd], ww[fwd])           # NVLink out of u
        np.add.at(loads[s], G + a[fwd], ww[fwd])       # NVLink in of ū
        back = v != b
        np.add.at(loads[s], b[back], ww[back])         # NVLink out of v̄
        np.add.at(loads[s], G + v[back], ww[back])     # NVLink in of v

    # --- 2. native NVLink matchings packed into the slack of RDMA stages ---------------------------
    native_matrix, native_flow = role_cells(pieces, NATIVE, G)
    if rdma_stages:
        native_peeled = uniform_matchings(native_matrix, topo.gpus_per_node, across=False)
        components = [[w, a, b] for w, a, b in (native_peeled if native_peeled is not None else
                                                peel_matchings(native_matrix))]
    else:  # no slack to spread over: every cell goes whole into one NVLink stage (as step 4 below would put all
        # of the matchings), so the peel is not needed
        components = []
        a, b = np.nonzero(native_matrix)
        if a.size:
            records_stage.append(np.zeros(a.size, np.int64))
            records_flow.append(native_flow[a, b])
            records_bytes.append(native_matrix[a, b])
    stage_time = np.array([cost.loads_time(loads[s], capacity) for s in range(len(rdma_stages))])
    min_piece = MIN_NATIVE_PIECE  # the same whatever the chunk size: a plan recompiles to itself from its file
    slack_out = stage_time[:, None] * nvl_Bps - loads[:, :G]
    slack_in = stage_time[:, None] * nvl_Bps - loads[:, G: 2 * G]
    for comp in components:
        remaining, a, b = comp
        amounts = spread_over_slack(remaining, np.minimum(slack_out[:, a].min(axis=1, initial=np.inf),
                                                          slack_in[:, b].min(axis=1, initial=np.inf)), min_piece)
        for st in np.nonzero(amounts)[0]:
            amount = int(amounts[st])
            slack_out[st, a] -= amount
            slack_in[st, b] -= amount
            records_stage.append(np.full(a.size, st, np.int64))
            records_flow.append(native_flow[a, b])
            records_bytes.append(np.full(a.size, amount, np.int64))
        comp[0] = remaining - int(amounts.sum())
    num_stages = len(rdma_stages) or int(bool(records_flow))  # no RDMA: the native stage, if any
    leftover = [(w, a, b) for w, a, b in components if w > 0]
    if leftover:
        # an NVLink-only stage at the end, or (a network plan, where the cost model v2 says the barrier before it
        # costs more than the longer last stage) the rest added to the last RDMA stage
        last = num_stages - 1
        into = num_stages
        if num_stages:
            out_load = np.zeros(G)
            in_load = np.zeros(G)
            for w, a, b in leftover:
                np.add.at(out_load, a, float(w))
                np.add.at(in_load, b, float(w))
            alone = max(out_load.max(), in_load.max()) / nvl_Bps
            used_out = stage_time[last] * nvl_Bps - slack_out[last]
            used_in = stage_time[last] * nvl_Bps - slack_in[last]
            merged = max(stage_time[last], (used_out + out_load).max() / nvl_Bps, (used_in + in_load).max() / nvl_Bps)
            if merged < stage_time[last] + alone + topo.costs.stage_sync_us * 1e-6:
                into = last
        for w, a, b in leftover:
            records_stage.append(np.full(a.size, into, np.int64))
            records_flow.append(native_flow[a, b])
            records_bytes.append(np.full(a.size, w, np.int64))
        num_stages = max(num_stages, into + 1)

    # --- 3. local copies ride in the first stage -----------------------------------------------------
    local = pieces.role == LOCAL
    if local.any():
        num_stages = max(num_stages, 1)
        records_stage.append(np.zeros(int(local.sum()), np.int64))
        records_flow.append(pieces.flow[local])
        records_bytes.append(pieces.bytes[local])

    # --- 4. segments: per (flow, stage) one byte range, consecutive in stage order ---------------------
    seg_stage, seg_flow, seg_offset, seg_bytes = segments_of(records_stage, records_flow, records_bytes, num_stages,
                                                             lay.bytes)

    # --- 5. stage times from the final stage contents (every piece of each segment) ------------------
    stage_time_s = stage_times_of_segments(state, seg_stage, seg_flow, seg_bytes, num_stages)
    order = np.lexsort((seg_flow, seg_stage))
    schedule = Schedule(
        num_stages=num_stages,
        seg_stage=seg_stage[order], seg_flow=seg_flow[order], seg_offset=seg_offset[order],
        seg_bytes=seg_bytes[order], stage_time_s=stage_time_s,
        report={"rdma_stages": len(rdma_stages)},
    )
    return dataclasses.replace(state, schedule=schedule)


def segments_of(records_stage: list[np.ndarray], records_flow: list[np.ndarray], records_bytes: list[np.ndarray],
                num_stages: int, flow_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per (flow, stage) one byte range, consecutive in stage order: (stage, flow, offset, bytes) of every segment,
    sorted by (flow, stage), from records of bytes moved; checks that every flow gets exactly its bytes."""
    if records_flow:
        st, fl, nb = (np.concatenate(x) for x in (records_stage, records_flow, records_bytes))
    else:
        st = fl = nb = np.zeros(0, np.int64)
    key = fl * max(num_stages, 1) + st
    uniq, inverse = np.unique(key, return_inverse=True)
    seg_bytes = byte_sums(inverse, nb, uniq.size)
    seg_flow, seg_stage = uniq // max(num_stages, 1), uniq % max(num_stages, 1)
    starts = np.cumsum(seg_bytes) - seg_bytes
    first_of_flow = np.searchsorted(seg_flow, seg_flow)  # segments sorted by (flow, stage)
    seg_offset = starts - starts[first_of_flow]
    delivered = byte_sums(seg_flow, seg_bytes, flow_bytes.size)
    if not np.array_equal(delivered, flow_bytes):
        bad = int(np.nonzero(delivered != flow_bytes)[0][0])
        raise ScheduleError(f"internal: flow {bad} got {int(delivered[bad])} of {int(flow_bytes[bad])} bytes "
                            "scheduled; please report this")
    return seg_stage, seg_flow, seg_offset, seg_bytes


def role_cells(pieces, role: int, G: int) -> tuple[np.ndarray, np.ndarray]:
    """The G x G matrix of the pieces of one role (bytes per cell) and the flow each cell carries (-1: none)."""
    sel = pieces.role == role
    matrix = np.zeros((G, G), dtype=np.int64)
    matrix[pieces.src[sel], pieces.dst[sel]] = pieces.bytes[sel]
    flow = np.full((G, G), -1, dtype=np.int64)
    flow[pieces.src[sel], pieces.dst[sel]] = pieces.flow[sel]
    return matrix, flow


def spread_over_slack(remaining: int, room: np.ndarray, min_piece: int) -> np.ndarray:
    """Bytes of a component of ``remaining`` bytes per stage, given each stage's room (its tightest port's
    slack): where the rooms hold more than the component, every stage gets the same fraction of its room, else
    every room is filled. Stages whose share is smaller than ``min_piece`` (a chunk) get none; what rounding and
    those leave goes to the roomiest stages. The rest (the total room was too small) is not placed."""
    room = np.floor(np.maximum(room, 0.0))
    amounts = np.zeros(room.size, np.int64)
    if remaining <= 0 or not room.size:
        return amounts
    usable = room >= min(remaining, min_piece)
    total = float(room[usable].sum())
    if total <= 0:
        return amounts
    share = room * min(1.0, remaining / total)
    amounts[usable] = np.floor(share[usable]).astype(np.int64)
    amounts[amounts < min(remaining, min_piece)] = 0
    for st in np.argsort(-amounts, kind="stable"):  # floating point can round the shares above the bytes (> 2**53)
        excess = int(amounts.sum()) - remaining
        if excess <= 0:
            break
        amounts[st] -= min(excess, int(amounts[st]))
    left = remaining - int(amounts.sum())
    for st in np.argsort(-(room - amounts), kind="stable"):  # rounding and dropped shares: roomiest stages first
        if left <= 0:
            break
        extra = int(min(left, room[st] - amounts[st]))
        if extra > 0 and amounts[st] + extra >= min(remaining, min_piece):
            amounts[st] += extra
            left -= extra
    return amounts


def flow_piece_index(pieces) -> tuple[np.ndarray, np.ndarray]:
    """For each flow, the range [start, end) of its pieces in the (flow-sorted) piece table."""
    n_flows = int(pieces.flow.max()) + 1 if pieces.flow.size else 0
    counts = np.bincount(pieces.flow, minlength=n_flows)
    end = np.cumsum(counts)
    return end - counts, end


def expand_segments(pieces, seg_flow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every (segment, piece) pair: returns (segment index, piece index), pieces in path order."""
    start, end = flow_piece_index(pieces)
    per_seg = (end - start)[seg_flow]
    seg_idx = np.repeat(np.arange(seg_flow.size), per_seg)
    first = np.repeat(np.cumsum(per_seg) - per_seg, per_seg)
    piece_idx = start[seg_flow][seg_idx] + (np.arange(seg_idx.size) - first)
    return seg_idx, piece_idx


def stage_times_of_segments(state: CompileState, seg_stage, seg_flow, seg_bytes, num_stages: int) -> np.ndarray:
    topo, pieces = state.topology, state.pieces
    G = topo.num_gpus
    seg_idx, piece_idx = expand_segments(pieces, seg_flow)
    role, src, dst = pieces.role[piece_idx], pieces.src[piece_idx], pieces.dst[piece_idx]
    out_port, in_port = cost.piece_ports(role, src, dst, G)
    costed = out_port >= 0
    stage = seg_stage[seg_idx][costed]
    w = seg_bytes[seg_idx][costed].astype(np.float64)
    P = 4 * G
    loads = np.bincount(stage * P + out_port[costed], weights=w, minlength=num_stages * P)
    loads += np.bincount(stage * P + in_port[costed], weights=w, minlength=num_stages * P)
    if num_stages == 0:
        return np.zeros(0)
    return (loads.reshape(num_stages, P) / cost.port_capacity(topo)).max(axis=1)
