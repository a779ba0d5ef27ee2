"""The compact plan encoding (hoccl_compiler.compact): what the compiler decided, the rest derived on reading."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from hoccl_compiler import CollectiveSpec, compile_plan, load_plan, make_topology, save_plan, verify_plan
from hoccl_compiler.codec import plan_from_json
from hoccl_compiler.compact import to_compact
from hoccl_compiler.errors import PlanError
from hoccl_compiler.ir import CompileOptions
from hoccl_compiler.schema import PRETTY_LIMIT

SCHEDULES = sorted((Path(__file__).resolve().parents[2] / "schedules").glob("*.json"))


@pytest.mark.parametrize("path", SCHEDULES, ids=[p.name for p in SCHEDULES])
def test_golden_plans_read_back_from_the_compact_encoding(path, tmp_path):
    plan = load_plan(path)
    out = save_plan(plan, tmp_path / "c.json.gz", encoding="compact")
    data = json.loads(gzip.decompress(out.read_bytes()))
    assert data["encoding"] == "compact-1" and "flows" not in data and "hoccl_matrix" not in data
    again = load_plan(out)
    assert again == plan
    verify_plan(again)
    assert out.stat().st_size < len(plan.model_dump_json().encode())


def test_skewed_multi_queue_plans_round_trip(tmp_path):
    rng = np.random.default_rng(5)
    m = (rng.zipf(1.4, (16, 16)) * 4096).astype(np.int64)
    np.fill_diagonal(m, 0)
    plan = compile_plan(make_topology("dgx-h100", nodes=2, gpus_per_node=8, dma_queues=2),
                        CollectiveSpec(kind="alltoallv", matrix=tuple(map(tuple, m.tolist()))),
                        CompileOptions(chunk_bytes=16384))
    assert load_plan(save_plan(plan, tmp_path / "p.json", encoding="compact")) == plan


def test_auto_encoding_is_full_for_small_plans_and_compact_for_large():
    small = compile_plan(make_topology("h200x2"), CollectiveSpec(kind="alltoall", size_bytes=1 << 20))
    assert small.num_chunk_entries() <= PRETTY_LIMIT
    large = compile_plan(make_topology("paper-h800", nodes=8), CollectiveSpec(kind="alltoall", size_bytes=1 << 30),
                         CompileOptions(chunk_bytes=64 << 10, baselines=False))
    assert large.num_chunk_entries() > PRETTY_LIMIT
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        a = save_plan(small, Path(tmp) / "a.json")
        b = save_plan(large, Path(tmp) / "b.json")
        assert "encoding" not in json.loads(a.read_text())
        assert json.loads(b.read_text())["encoding"] == "compact-1"
        assert load_plan(b) == large


def _compact(plan) -> dict:
    from hoccl_compiler.compact import to_compact

    return json.loads(json.dumps(to_compact(plan)))


@pytest.fixture(scope="module")
def plan():
    return compile_plan(make_topology("paper-h800", nodes=2, gpus_per_node=4),
                        CollectiveSpec(kind="alltoall", size_bytes=8 << 20), CompileOptions(chunk_bytes=1 << 20))


@pytest.mark.parametrize("tamper,match", [
    (lambda d: d["collective"].update(size_bytes=16 << 20), "plan_id"),
    (lambda d: d["stages"][0]["segments"]["flow"].__setitem__(0, 10 ** 6), "names flow"),
    (lambda d: d["stages"][0]["segments"]["flow"].reverse(), "sorted by flow"),
    (lambda d: d["stages"][0]["segments"]["bytes"].pop(), "differ in length"),
    (lambda d: d["stages"][0]["chunks"].__setitem__(0, 999), "chunk order names transfer"),
    (lambda d: d.update(encoding="compact-9"), "encoding 'compact-9'"),
    (lambda d: d["stages"][0].pop("segments"), "not a valid compact plan"),
    (lambda d: d["stages"].__setitem__(1, []), "not a valid compact plan .AttributeError"),  # was an internal error
])
def test_a_tampered_compact_file_is_refused_with_the_reason(plan, tamper, match):
    data = _compact(plan)
    tamper(data)
    with pytest.raises(PlanError, match=match):
        plan_from_json(json.dumps(data))


def test_a_compact_file_from_before_a_topology_field_reads_with_its_own_id(plan):
    """A compact file written before a topology cost existed (its writer hashed the topology without it) reads:
    the new field takes its default and the file keeps its id; an edit to what it holds is still refused."""
    from hoccl_compiler.schema import plan_id_of_json

    data = _compact(plan)
    del data["topology"]["costs"]["net_flow_us"]  # as a session-17 compiler wrote it
    data["plan_id"] = plan_id_of_json(data["topology"], data["collective"], data["options"])
    old = plan_from_json(json.dumps(data))
    assert old.plan_id == data["plan_id"] != plan.plan_id
    assert old.topology.costs.net_flow_us == plan.topology.costs.net_flow_us
    assert old.stages == plan.stages
    with pytest.raises(PlanError, match="compiled by an older version.*recompile it, or write it in the full"):
        to_compact(old)  # its compact file would not read back (the topology now holds the new field)
    data["topology"]["nic_gbps"] = 51.0
    with pytest.raises(PlanError, match="edited or is corrupt"):
        plan_from_json(json.dumps(data))


def test_a_shifted_segment_reads_but_fails_verification(plan):
    data = _compact(plan)
    data["stages"][0]["segments"]["offset"][0] += 4096
    with pytest.raises(PlanError):
        verify_plan(plan_from_json(json.dumps(data)))


def test_a_hand_edited_plan_cannot_be_written_compact(plan, tmp_path):
    stage = plan.stages[0]
    queues = list(stage.transfers.queue)
    queues[0] = queues[0] + 1  # another queue than the compiler's assignment
    edited = plan.model_copy(update={"stages": [stage.model_copy(update={
        "transfers": stage.transfers.model_copy(update={"queue": queues})}), *plan.stages[1:]]})
    with pytest.raises(PlanError, match="full encoding"):
        save_plan(edited, tmp_path / "e.json", encoding="compact")
    assert load_plan(save_plan(edited, tmp_path / "e.json", encoding="full")) == edited


def test_compile_cli_writes_either_encoding(tmp_path, capsys):
    from hoccl_compiler.cli import compile_main, inspect_main

    for enc in ("full", "compact"):
        out = tmp_path / f"{enc}.json"
        assert compile_main(["alltoall", "--topology", "h200x2", "--nodes", "2", "--size", "64MiB", "-o", str(out),
                             "--encoding", enc, "-q"]) == 0
        assert ("encoding" in json.loads(out.read_text())) == (enc == "compact")
        assert inspect_main([str(out), "--verify"]) == 0
    capsys.readouterr()
    assert load_plan(tmp_path / "full.json") == load_plan(tmp_path / "compact.json")


def test_a_plan_whose_transfers_its_segments_do_not_derive_is_not_written_compact(tmp_path):
    """The compact writer checks that the file reads back to the plan (its transfers, waits, chunk orders, flows,
    queues): a hand-edited queue or wait, valid or not, but not what the segments derive, is refused with the way
    out (a chunk order is kept in the file as it is)."""
    from hoccl_compiler.ir import CompileOptions

    plan = compile_plan(make_topology("paper-h800", nodes=2, gpus_per_node=4, dma_queues=2),
                        CollectiveSpec(kind="alltoall", size_bytes=8 * 8192), CompileOptions(chunk_bytes=4096))
    save_plan(plan, tmp_path / "ok.json", encoding="compact")
    st = plan.stages[0]
    tr = st.transfers
    j = next(j for j, r in enumerate(tr.role) if r == 1)  # a native copy: to the GPU's other DMA queue
    queue = list(tr.queue)
    queue[j] += 1 if plan.queues.index[queue[j]] == 0 else -1
    k = next(k for k, a in enumerate(tr.after) if a >= 0)
    after = list(tr.after)
    after[k] = -1
    for edit in ({"queue": queue}, {"after": after}):
        bad = plan.model_copy(update={"stages": [st.model_copy(update={"transfers": tr.model_copy(update=edit)}),
                                                 *plan.stages[1:]]})
        with pytest.raises(PlanError, match="not the ones the compiler derives|segments must be sorted"):
            save_plan(bad, tmp_path / "bad.json", encoding="compact")


def test_a_plan_compiled_here_is_written_without_deriving_it_again(tmp_path, monkeypatch):
    """The writer takes a plan the pass table built in this process as what its segments derive (the reader runs the
    same passes) and does not derive it again (1.2-1.5 s of writing a 1024-GPU All-to-All); the file reads back to
    the plan. A copy of it (not built here) is derived again and compared, as any plan from outside."""
    import hoccl_compiler.compact as compact

    plan = compile_plan(make_topology("paper-h800", nodes=2, gpus_per_node=4),
                        CollectiveSpec(kind="alltoall", size_bytes=8 * 8192), CompileOptions(chunk_bytes=4096))
    real = compact.from_compact
    calls = []
    monkeypatch.setattr(compact, "from_compact", lambda *a, **k: calls.append(k) or real(*a, **k))
    out = save_plan(plan, tmp_path / "p.json", encoding="compact")
    assert calls == []
    monkeypatch.setattr(compact, "from_compact", real)
    assert load_plan(out) == plan
    monkeypatch.setattr(compact, "from_compact", lambda *a, **k: calls.append(k) or real(*a, **k))
    save_plan(plan.model_copy(), tmp_path / "q.json", encoding="compact")
    assert calls == [{"source": f"plan {plan.plan_id}", "arrays": True}]
