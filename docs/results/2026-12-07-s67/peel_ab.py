"""Session 67: the general peel with its matching kept and repaired (hoccl_compiler.passes.matching) against the peel
before it (a matching from scratch each step, copied below from 7e60501), on the RDMA matrices of Zipf(1.1)
All-to-Allvs (paper-h800, the compiler's own inputs to the peel) and on the plans compiled with each.

python docs/results/2026-12-07-s67/peel_ab.py [--plans] [G ...]"""
import sys
import time

import numpy as np

sys.path[:0] = ['.', 'examples']
from workloads import zipf_matrix  # noqa: E402

import hoccl_compiler.passes.stages as st  # noqa: E402
from hoccl_compiler import CollectiveSpec, compile_plan, make_topology  # noqa: E402
from hoccl_compiler.errors import ScheduleError  # noqa: E402
from hoccl_compiler.ir import CompileOptions  # noqa: E402

NEW = st.iter_matchings  # the patched peel where kept_matching.patch is applied; main's otherwise


def old_iter_matchings(matrix, progress=None):  # 7e60501's, verbatim but for the helpers inlined
    import scipy.sparse as sp
    from scipy.sparse.csgraph import maximum_bipartite_matching

    def cell_keys(A):
        row = np.repeat(np.arange(A.shape[0], dtype=np.int64), np.diff(A.indptr))
        return row * A.shape[1] + A.indices

    def kept_indptr(A, keep):
        counts = np.add.reduceat(keep.astype(np.int64), A.indptr[:-1]) if A.nnz else np.zeros(A.shape[0], np.int64)
        counts[np.diff(A.indptr) == 0] = 0
        return np.concatenate([[0], np.cumsum(counts)])

    n = matrix.shape[0]
    row_sum, col_sum = matrix.sum(axis=1), matrix.sum(axis=0)
    top = int(max(row_sum.max(initial=0), col_sum.max(initial=0)))
    if top == 0:
        return
    r, c = np.nonzero(matrix)
    vals = matrix[r, c]
    row_gap, col_gap = top - row_sum, top - col_sum
    if row_gap.any() or col_gap.any():
        gr, gc = np.nonzero(row_gap)[0], np.nonzero(col_gap)[0]
        r, c, vals = (np.concatenate([r, gr, n + gc, n + c]), np.concatenate([c, n + gr, gc, n + r]),
                      np.concatenate([vals, row_gap[gr], col_gap[gc], vals]))
        size = 2 * n
    else:
        size = n
    A = sp.csr_matrix((vals.astype(np.int64), (r, c)), shape=(size, size))
    A.sum_duplicates()
    A.sort_indices()
    keys = cell_keys(A)
    threshold = 1 << (int(A.data.max()).bit_length() - 1)
    rows_all = np.arange(size)
    while A.nnz:
        if A.data.min() >= threshold:
            graph = A
        else:
            keep = A.data >= threshold
            graph = sp.csr_matrix((A.data[keep], A.indices[keep], kept_indptr(A, keep)), shape=A.shape)
        match = maximum_bipartite_matching(graph, perm_type="column")
        if (match < 0).any():
            if threshold == 1:
                raise ScheduleError("internal")
            threshold >>= 1
            continue
        pos = np.searchsorted(keys, rows_all * size + match)
        w = int(A.data[pos].min())
        A.data[pos] -= w
        real = (rows_all < n) & (match < n)
        if (A.data[pos] == 0).any():
            A.eliminate_zeros()
            keys = cell_keys(A)
        if real.any():
            yield w, rows_all[real], match[real].astype(np.int64)


def rdma_matrix(G):
    """The matrix the compiler hands the general peel for the Zipf All-to-Allv on G GPUs."""
    got = []

    def grab(matrix, progress=None):
        got.append(matrix.copy())
        raise KeyboardInterrupt

    st.iter_matchings = grab
    try:
        compile_plan(make_topology("paper-h800", nodes=G // 8), spec(G), CompileOptions(baselines=False))
    except KeyboardInterrupt:
        pass
    finally:
        st.iter_matchings = NEW
    return got[0]


def spec(G):
    mat = zipf_matrix(G, mean_pair_bytes=(1 << 30) // G, seed=G)
    return CollectiveSpec(kind="alltoallv", matrix=tuple(map(tuple, mat.tolist())))


def peel_stats(fn, M, limit=None):
    t0 = time.perf_counter()
    out, left = [], M.astype(np.int64).copy()
    for m in fn(M):
        out.append(m)
        if limit and len(out) >= limit:
            break
    dt = time.perf_counter() - t0
    cells = sum(a.size for _, a, _ in out)
    for w, a, b in out:
        left[a, b] -= w
    assert (left >= 0).all()
    exact = limit is None and not left.any()
    moved = sum(w for w, _, _ in out)
    top = int(max(M.sum(1).max(), M.sum(0).max()))
    return dict(s=dt, matchings=len(out), transfers=cells, moved=moved / top, exact=exact)


def plan_stats(G, extra):
    t0 = time.perf_counter()
    plan = compile_plan(make_topology("paper-h800", nodes=G // 8), spec(G),
                        CompileOptions(max_extra_time=extra, baselines=False))
    rep = plan.report
    return dict(s=time.perf_counter() - t0, stages=len(plan.stages), ports=rep.breakdown_s["ports"] / rep.lower_bound_s,
                v2=rep.ratio, transfers=sum(len(s.transfers) for s in plan.stages))


if __name__ == "__main__":
    plans = "--plans" in sys.argv
    counts = [int(a) for a in sys.argv[1:] if a.isdigit()] or [16, 64, 256]
    for G in counts:
        M = rdma_matrix(G)
        limit = None if G <= 256 else 300
        print(f"## {G} GPUs: RDMA matrix {M.shape[0]}x{M.shape[1]}, {int((M > 0).sum())} cells"
              + (f" (the first {limit} matchings)" if limit else " (the whole peel)"), flush=True)
        for name, fn in (("before", old_iter_matchings), ("kept", NEW)):
            s = peel_stats(fn, M, limit)
            print(f"  peel {name:6s}: {s['s']:8.2f} s, {s['matchings']:6d} matchings, {s['transfers']:8d} cells "
                  "matched,"
                  f" {100 * s['moved']:.2f}% of the busiest line, exact {s['exact']}", flush=True)
        if plans:
            for extra in (0.0, None):
                for name, fn in (("before", old_iter_matchings), ("kept", NEW)):
                    st.iter_matchings = fn
                    try:
                        p = plan_stats(G, extra)
                    finally:
                        st.iter_matchings = NEW
                    print(f"  plan {name:6s} max_extra_time={extra}: {p['stages']:5d} stages, {p['transfers']:8d} "
                          f"transfers, ports/bound {p['ports']:.4f}, v2/bound {p['v2']:.3f}, {p['s']:.2f} s",
                          flush=True)
