"""The verifier catches corrupt plans; the plan file round-trips and refuses what it should."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from hoccl_compiler import CollectiveSpec, PlanError, compile_plan, load_plan, make_topology, save_plan, verify_plan
from hoccl_compiler.codec import plan_from_json
from hoccl_compiler.ir import CompileOptions
from hoccl_compiler.schema import PLAN_ROLES, Plan, check_plan_topology, plan_json_schema

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "hoccl_compiler" / "plan.schema.json"


@pytest.fixture(scope="module")
def plan() -> Plan:
    topo = make_topology("paper-h800", nodes=2, gpus_per_node=4)
    return compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=8 * 3000), CompileOptions(chunk_bytes=1024))


def mutate(plan: Plan, fn) -> Plan:
    data = plan.model_dump(mode="json")
    fn(data)
    return Plan.model_validate(data)


def first_index(stage, role_name):
    role = [r.name for r in PLAN_ROLES].index(role_name)
    return stage["transfers"]["role"].index(role)


def native_on_dma_recv(d):
    """A unicast plan's native copy moved to its GPU's dma_recv queue (multicast plans across nodes deal theirs
    there too; a unicast plan's dma_recv queue takes only recv_forward copies)."""
    tr = d["stages"][0]["transfers"]
    i = first_index(d["stages"][0], "native")
    tr["queue"][i] = next(q for q, (gpu, kind) in enumerate(zip(d["queues"]["gpu"], d["queues"]["kind"], strict=True))
                          if gpu == tr["src"][i] and kind == "dma_recv")


def test_compiled_plan_verifies(plan):
    verify_plan(plan, byte_replay=True)


@pytest.mark.parametrize("name,edit,needle", [
    ("drop a chunk", lambda d: d["stages"][0]["chunks"].pop(), "chunk count"),
    ("bytes of a transfer", lambda d: d["stages"][1]["transfers"]["bytes"].__setitem__(0, 7), "add up to T|byte range"),
    ("wrong destination", lambda d: d["stages"][0]["transfers"]["dst"].__setitem__(0, 5), "add up to T|endpoints"),
    ("flow table", lambda d: d["flows"]["dst_offset"].__setitem__(3, 1), "layout"),
    ("hoccl matrix", lambda d: d["hoccl_matrix"][0].__setitem__(1, 1), "expanded"),
    ("queue of another gpu", lambda d: d["stages"][0]["transfers"]["queue"].__setitem__(0, 7),
     "another GPU|queue kind"),
    ("native copy on dma_recv", native_on_dma_recv, "queue kind"),
    ("broken wait", lambda d: d["stages"][0]["transfers"]["after"].__setitem__(
        first_index(d["stages"][0], "rdma"), -1), "does not wait"),
    ("waits reordered", lambda d: d["stages"][0].__setitem__("chunks", d["stages"][0]["chunks"][::-1]), "deadlock"),
    ("chunk order out of range", lambda d: d["stages"][0]["chunks"].__setitem__(0, 10**6), "outside"),
    ("resident offset", lambda d: d["ranks"]["resident_offset"].__setitem__(0, 4096), "resident"),
    ("resident bytes", lambda d: d["ranks"]["resident_bytes"].__setitem__(1, 1), "resident"),
    ("resident list short", lambda d: d["ranks"]["resident_bytes"].pop(), "rank table"),
])
def test_verifier_catches(plan, name, edit, needle):
    bad = mutate(plan, edit)
    with pytest.raises(PlanError, match=needle):
        verify_plan(bad, byte_replay=False)


def test_verifier_catches_two_rdma_flows_in_a_stage(plan):
    # move stage 1's transfers into stage 0: GPUs then send two RDMA flows in one stage
    def merge(d):
        s0, s1 = d["stages"][0], d["stages"][1]
        n0 = len(s0["transfers"]["flow"])
        for key, values in s1["transfers"].items():
            if key == "after":
                values = [a + n0 if a >= 0 else -1 for a in values]
            s0["transfers"][key] = s0["transfers"][key] + values
        s0["chunks"] = s0["chunks"] + [c + n0 for c in s1["chunks"]]
        del d["stages"][1]
        for i, s in enumerate(d["stages"]):
            s["index"] = i
    with pytest.raises(PlanError, match="at most one per GPU"):
        verify_plan(mutate(plan, merge), byte_replay=False)


def test_byte_replay_catches_swapped_sources(plan):
    # swap the source offsets of two flows from the same rank: every structural check still holds
    # per flow, but the layout check (and the replay) sees the bytes land in the wrong place
    def swap(d):
        f = d["flows"]["src_offset"]
        f[1], f[2] = f[2], f[1]
    with pytest.raises(PlanError, match="layout"):
        verify_plan(mutate(plan, swap), byte_replay=True)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_save_load_round_trip_is_deterministic(plan, tmp_path, suffix):
    a, b = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
    save_plan(plan, a)
    topo = make_topology("paper-h800", nodes=2, gpus_per_node=4)
    again = compile_plan(topo, CollectiveSpec(kind="alltoall", size_bytes=8 * 3000), CompileOptions(chunk_bytes=1024))
    save_plan(again, b)
    assert a.read_bytes() == b.read_bytes()
    assert load_plan(a) == plan
    assert not list(tmp_path.glob(".*"))  # no temp files left behind


def test_load_errors(plan, tmp_path):
    path = tmp_path / "p.json"
    save_plan(plan, path)
    text = path.read_text()
    (tmp_path / "trunc.json").write_text(text[: len(text) // 2])
    with pytest.raises(PlanError, match="not valid JSON"):
        load_plan(tmp_path / "trunc.json")
    data = json.loads(text)
    data["schema_version"] = 99
    (tmp_path / "v99.json").write_text(json.dumps(data))
    with pytest.raises(PlanError, match="schema_version 99.*recompile"):
        load_plan(tmp_path / "v99.json")
    data = json.loads(text)
    data["stages"][0]["surprise"] = 1
    (tmp_path / "extra.json").write_text(json.dumps(data))
    with pytest.raises(PlanError, match="surprise"):
        load_plan(tmp_path / "extra.json")
    (tmp_path / "bad.json.gz").write_bytes(gzip.compress(text.encode())[:50])
    with pytest.raises(PlanError, match="gzip"):
        load_plan(tmp_path / "bad.json.gz")
    with pytest.raises(PlanError, match="cannot read"):
        load_plan(tmp_path / "missing.json")
    with pytest.raises(PlanError, match="not a HOCCL plan"):
        plan_from_json("[1, 2]")


@pytest.mark.parametrize("where", [
    lambda d: d["origin_matrix"][0],
    lambda d: d["flows"]["bytes"],
    lambda d: d["ranks"]["output_bytes"],
    lambda d: d["stages"][0]["transfers"]["offset"],
    lambda d: d["stages"][0]["chunks"],
])
@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**70])
def test_an_integer_beyond_64_bits_is_a_schema_error(plan, where, value):
    """The readers hold a plan's tables as int64 arrays: a larger integer (an edited file) was an OverflowError
    inside the verifier ("internal error" from hoccl-inspect); the schema refuses it and names the field."""
    data = json.loads(plan.model_dump_json())
    where(data)[0] = value
    with pytest.raises(PlanError, match=r"does not match the plan schema: .*: Input should be (less|greater)"):
        plan_from_json(json.dumps(data))


def test_plan_for_another_topology_is_refused(plan):
    check_plan_topology(plan, make_topology("paper-h800", nodes=2, gpus_per_node=4))
    with pytest.raises(PlanError, match="nodes=2.*nodes=4.*recompile"):
        check_plan_topology(plan, make_topology("paper-h800", nodes=4, gpus_per_node=4))


def test_checked_in_json_schema_is_current():
    assert SCHEMA_FILE.read_text() == plan_json_schema(), \
        "regenerate with: python -m hoccl_compiler.schema_tool > hoccl_compiler/plan.schema.json"


def test_runtime_reads_only_the_plan_schema():
    """`import hoccl_runtime` works without a GPU and pulls in no compiler pass."""
    import subprocess

    code = ("import sys, hoccl_runtime; "
            "bad = [m for m in sys.modules if m.startswith('hoccl_compiler.passes') or m in "
            "('hoccl_compiler.pipeline', 'cupy', 'torch', 'cuda')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = ("import sys, hoccl_compiler.pipeline; "
            "print([m for m in sys.modules if m.split('.')[0] in ('cupy', 'torch', 'cuda', 'pyverbs')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_plan_tables_hold_int_columns_numpy_reads_without_a_copy(plan, tmp_path):
    """A plan's integer columns are IntColumns (one int64 buffer, no int objects), whether the compiler built the plan
    or it was read back from a full or a compact file; NumPy views them without copying, and they read, compare and
    pickle as lists of ints do."""
    import pickle

    import numpy as np

    from hoccl_compiler.schema import IntColumn

    full, compact = tmp_path / "full.json", tmp_path / "compact.json"
    save_plan(plan, full, encoding="full")
    save_plan(plan, compact, encoding="compact")
    for p in (plan, load_plan(full), load_plan(compact)):
        tr = p.stages[0].transfers
        for col in (tr.flow, tr.after, p.stages[0].chunks, p.flows.src, p.ranks.output_bytes, p.queues.gpu,
                    p.origin_matrix[0]):
            assert type(col) is IntColumn
        view = np.asarray(tr.offset)
        assert view.dtype == np.int64 and np.shares_memory(view, tr.offset)
        assert p == plan
    col = plan.stages[0].transfers.bytes
    as_list = list(col)
    assert all(type(x) is int for x in as_list) and col == as_list and col == tuple(as_list)
    assert col != [*as_list, 1] and col != [*as_list[:-1], as_list[-1] + 1] and col != "not ints"
    assert not col == [*as_list[:-1], as_list[-1] + 1]  # noqa: SIM201 (__eq__ itself, not __ne__)
    assert pickle.loads(pickle.dumps(col)) == col and type(pickle.loads(pickle.dumps(col))) is IntColumn
    assert json.loads(plan.model_dump_json())["stages"][0]["transfers"]["bytes"] == as_list
    assert IntColumn.of(np.array([3, -1])) == [3, -1] and repr(IntColumn.of([3, -1])) == "IntColumn([3, -1])"
    import copy

    for other in (col[1:3], copy.copy(col), copy.deepcopy(col), plan.model_copy(deep=True).stages[0].transfers.bytes):
        assert type(other) is IntColumn
    assert col[1:3] == as_list[1:3] and col[-1] == as_list[-1] and type(col[0]) is int
    with pytest.raises(TypeError):
        hash(col)


@pytest.mark.parametrize("dense", [True, False])
def test_matrix_checks_whole_and_row_by_row_agree(plan, monkeypatch, dense):
    """The verifier compares a plan's G x G matrices whole up to DENSE_MATRIX_GPUS, row by row above (no G x G copy):
    both forms pass a good plan and name the same first wrong cell."""
    import numpy as np

    from hoccl_compiler import verify

    monkeypatch.setattr(verify, "DENSE_MATRIX_GPUS", 1 << 20 if dense else 0)
    verify_plan(plan, byte_replay=False)
    rows = [[0, 5, 0], [0, 0, 0], [7, 0, 2]]
    i, j, w = np.array([0, 2, 2, 0, 2]), np.array([1, 0, 0, 1, 2]), np.array([2, 3, 4, 3, 2])
    assert verify._matrix_mismatch(rows, 3, i, j, w) is None
    assert verify._matrix_mismatch([[0, 5, 0], [0, 0, 1], [7, 0, 2]], 3, i, j, w) == (1, 2, 1, 0)
    assert verify._matrix_mismatch(rows, 3, i, j, np.array([2, 3, 4, 3, 3])) == (2, 2, 2, 3)
    with pytest.raises(PlanError, match="origin_matrix is not the sum"):
        verify_plan(mutate(plan, lambda d: d["origin_matrix"][1].__setitem__(0, 1)), byte_replay=False)
    with pytest.raises(PlanError, match="expanded"):
        verify_plan(mutate(plan, lambda d: d["hoccl_matrix"][2].__setitem__(3, 9)), byte_replay=False)
