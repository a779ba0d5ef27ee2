from __future__ import annotations

import numpy as np
import pytest

from hoccl_compiler import CollectiveError, CollectiveSpec, layout
from hoccl_compiler.collective import load_matrix, load_pairs, refuse_reduction


def blocks(lay):
    return sorted(zip(lay.src.tolist(), lay.dst.tolist(), lay.bytes.tolist(), lay.src_offset.tolist(),
                      lay.dst_offset.tolist(), strict=True))


def test_allgather_layout():
    lay = layout(CollectiveSpec(kind="allgather", size_bytes=30), 3)
    assert blocks(lay) == [(u, v, 10, 0, 10 * u) for u in range(3) for v in range(3)]
    assert lay.input_bytes.tolist() == [10] * 3 and lay.output_bytes.tolist() == [30] * 3


def test_allgather_in_place_drops_local_copies():
    lay = layout(CollectiveSpec(kind="allgather", size_bytes=30, in_place=True), 3)
    assert all(u != v for u, v, *_ in blocks(lay))
    offsets, nbytes = lay.resident()
    assert offsets.tolist() == [0, 10, 20] and nbytes.tolist() == [10] * 3


def test_alltoall_layout():
    lay = layout(CollectiveSpec(kind="alltoall", size_bytes=8), 2)
    assert blocks(lay) == [(0, 0, 4, 0, 0), (0, 1, 4, 4, 0), (1, 0, 4, 0, 4), (1, 1, 4, 4, 4)]


def test_alltoallv_layout_offsets_follow_rows_and_columns():
    mat = ((0, 5, 1), (2, 0, 0), (3, 4, 7))
    lay = layout(CollectiveSpec(kind="alltoallv", matrix=mat), 3)
    assert blocks(lay) == [(0, 1, 5, 0, 0), (0, 2, 1, 5, 0), (1, 0, 2, 0, 0), (2, 0, 3, 0, 2), (2, 1, 4, 3, 5),
                           (2, 2, 7, 7, 1)]
    assert lay.input_bytes.tolist() == [6, 2, 14] and lay.output_bytes.tolist() == [5, 9, 8]


def test_broadcast_scatter_gather():
    b = layout(CollectiveSpec(kind="broadcast", size_bytes=7, root=1), 3)
    assert blocks(b) == [(1, 0, 7, 0, 0), (1, 1, 7, 0, 0), (1, 2, 7, 0, 0)]
    assert b.input_bytes.tolist() == [0, 7, 0]
    b = layout(CollectiveSpec(kind="broadcast", size_bytes=7, root=1, in_place=True), 3)
    assert blocks(b) == [(1, 0, 7, 0, 0), (1, 2, 7, 0, 0)]
    assert b.resident()[1].tolist() == [0, 7, 0]
    s = layout(CollectiveSpec(kind="scatter", size_bytes=6, root=2), 3)
    assert blocks(s) == [(2, 0, 2, 0, 0), (2, 1, 2, 2, 0), (2, 2, 2, 4, 0)]
    g = layout(CollectiveSpec(kind="gather", size_bytes=6, root=0, in_place=True), 3)
    assert blocks(g) == [(1, 0, 2, 0, 2), (2, 0, 2, 0, 4)]
    assert g.output_bytes.tolist() == [6, 0, 0]


def test_sendrecv_default_pipeline_and_pairs():
    lay = layout(CollectiveSpec(kind="sendrecv", size_bytes=5), 4)
    assert blocks(lay) == [(0, 1, 5, 0, 0), (1, 2, 5, 0, 0), (2, 3, 5, 0, 0)]
    lay = layout(CollectiveSpec(kind="sendrecv", pairs=((0, 2, 3), (1, 2, 4), (0, 1, 2))), 3)
    # offsets follow the list order per rank: rank 0 sends 3 then 2; rank 2 receives 3 then 4
    assert blocks(lay) == [(0, 1, 2, 3, 0), (0, 2, 3, 0, 0), (1, 2, 4, 0, 3)]


@pytest.mark.parametrize("spec,G,needle", [
    (CollectiveSpec(kind="allgather", size_bytes=10), 3, r"not a multiple of the 3 ranks.*use 9 or 12"),
    (CollectiveSpec(kind="allgather", size_bytes=2), 3, r"multiple of the 3 ranks.*use 3, or another multiple of 3"),
    (CollectiveSpec(kind="allgather"), 3, "needs a size"),
    (CollectiveSpec(kind="broadcast", size_bytes=4, root=5), 3, "root 5 is out of range"),
    (CollectiveSpec(kind="alltoallv", matrix=((1, 2), (3, 4))), 3, "2x2 but the topology has 3 GPUs"),
    (CollectiveSpec(kind="alltoallv", matrix=((1, -2), (3, 4))), 2, "negative"),
    (CollectiveSpec(kind="alltoallv"), 2, "needs a per-pair byte matrix"),
    (CollectiveSpec(kind="sendrecv", pairs=((0, 0, 4),)), 2, "to itself"),
    (CollectiveSpec(kind="sendrecv", pairs=((0, 3, 4),)), 2, "outside 0..1"),
    (CollectiveSpec(kind="sendrecv", pairs=((0, 1, 4), (0, 1, 5))), 2, "repeats 0 -> 1"),
    (CollectiveSpec(kind="alltoall", size_bytes=4, in_place=True), 2, "no in-place form"),
    (CollectiveSpec(kind="scatter", size_bytes=4, in_place=True), 2, "no in-place form"),
    # sizes whose int64 sums would overflow: refused before anything is summed (they were OverflowError or a
    # wrapped, negative buffer size)
    (CollectiveSpec(kind="alltoallv", matrix=((0, 2**70), (1, 0))), 2,
     "would move 1.18e.21 bytes in all, beyond the 2 EiB"),
    (CollectiveSpec(kind="alltoallv", matrix=((0, 1, 2), (1, 0))), 2, "rows differ in length"),
    (CollectiveSpec(kind="alltoallv", matrix=((0, 3 << 58, 3 << 58), (0, 0, 0), (0, 0, 0))), 3,
     "rank 0's input .* 1.73e.18 bytes, over 1 EiB"),
    (CollectiveSpec(kind="alltoallv", matrix=((0, 0, 0), (3 << 58, 0, 0), (3 << 58, 0, 0))), 3,
     "rank 0's output .* over 1 EiB"),
    (CollectiveSpec(kind="allgather", size_bytes=1 << 60), 16, "would move 1.84e.19 bytes in all, beyond the 2 EiB"),
    (CollectiveSpec(kind="broadcast", size_bytes=1 << 60, root=0), 3, "beyond the 2 EiB"),
    (CollectiveSpec(kind="sendrecv", pairs=((0, 1, 2**70),)), 2, "beyond the 2 EiB"),
    (CollectiveSpec(kind="sendrecv", pairs=((0, 1, 5 << 58),)), 2, r"pair 0 \(0 -> 1\) has size .* over 1 EiB"),
    (CollectiveSpec(kind="sendrecv", pairs=((0, 1, 1 << 59), (0, 2, 1 << 59), (0, 3, 1 << 59))), 4,
     "rank 0 sends over 1 EiB"),
])
def test_layout_errors(spec, G, needle):
    with pytest.raises(CollectiveError, match=needle):
        layout(spec, G)


@pytest.mark.parametrize("kind", ["allreduce", "reducescatter", "reduce"])
def test_reductions_are_refused_with_advice(kind):
    err = refuse_reduction(kind)
    assert "copy engine" in str(err) and "NCCL" in str(err)


def test_matrix_and_pairs_files(tmp_path):
    mat = np.array([[0, 3], [4, 0]])
    np.save(tmp_path / "m.npy", mat)
    (tmp_path / "m.csv").write_text("0,3\n4,0\n")
    (tmp_path / "m.json").write_text("[[0, 3], [4, 0]]")
    for name in ("m.npy", "m.csv", "m.json"):
        assert load_matrix(tmp_path / name) == ((0, 3), (4, 0))
    (tmp_path / "bad.json").write_text("[[0, 1.5], [4, 0]]")
    with pytest.raises(CollectiveError, match="whole byte counts"):
        load_matrix(tmp_path / "bad.json")
    (tmp_path / "rect.json").write_text("[[0, 1, 2], [4, 0, 1]]")
    with pytest.raises(CollectiveError, match="square"):
        load_matrix(tmp_path / "rect.json")
    (tmp_path / "p.csv").write_text("# src,dst,bytes\n0,1,1MiB\n1,2,4096\n")
    assert load_pairs(tmp_path / "p.csv") == ((0, 1, 1 << 20), (1, 2, 4096))
    (tmp_path / "p.json").write_text("[[0, 1]]")
    with pytest.raises(CollectiveError, match="must be"):
        load_pairs(tmp_path / "p.json")


@pytest.mark.parametrize("kind,in_place", [("allgather", False), ("allgather", True), ("broadcast", False),
                                           ("broadcast", True), ("scatter", False), ("gather", False),
                                           ("gather", True), ("alltoall", False)])
def test_size_zero_is_an_empty_valid_plan(kind, in_place):
    from hoccl_compiler import compile_plan, make_topology
    from hoccl_compiler.verify import verify_plan

    spec = CollectiveSpec(kind=kind, size_bytes=0, root=1 if kind in ("broadcast", "scatter", "gather") else None,
                          in_place=in_place)
    plan = compile_plan(make_topology("dgx-h100", nodes=2), spec)
    verify_plan(plan)
    assert len(plan.flows.src) == 0 and not plan.stages and plan.report.baselines.naive_rounds == 0


def test_flows_beyond_2_to_the_53_bytes_are_scheduled_exactly():
    """Byte counts above 2**53 (8 PiB) lost bytes in float64 sums: a 2 x 2 All-to-Allv of ~2**57-byte flows was an
    internal error ("flow 0 got ... of ... bytes scheduled"), the NVLink shares over the stages' slack rounding
    above the flow. Up to the 2 EiB in all that the layout accepts, plans compile and verify (the verifier sums
    exactly too)."""
    from hoccl_compiler import compile_plan, make_topology

    rng = np.random.default_rng(5)
    for scale in (1 << 55, 1 << 56, 1 << 57):  # up to 12 flows of up to 2**57 bytes: under 2 EiB in all
        m = (rng.random((4, 4)) * scale).astype(np.int64)
        np.fill_diagonal(m, 0)
        plan = compile_plan(make_topology("dgx-h100", nodes=2, gpus_per_node=2),
                            CollectiveSpec(kind="alltoallv", matrix=tuple(map(tuple, m.tolist()))))
        assert plan.flows.bytes == m[m > 0].tolist()
    size = (1 << 61) // 16  # 2 EiB in all over 16 ranks
    for kind in ("allgather", "alltoall", "broadcast", "scatter", "gather"):
        compile_plan(make_topology("paper-h800", nodes=2), CollectiveSpec(kind=kind, size_bytes=size))
    for kind in ("scatter", "gather"):  # the size is the root's whole buffer: 1 EiB in all
        compile_plan(make_topology("paper-h800", nodes=2), CollectiveSpec(kind=kind, size_bytes=1 << 60))
