"""examples/compare_table.py: the HOCCL / NCCL table of a ``tcp-nodes.sh --compare`` run, read from its JSON records
(session 58's run 3 records, committed under docs/results, and records broken on purpose)."""

from __future__ import annotations

import importlib.util
import json
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN3 = ROOT / "docs" / "results" / "2026-12-06-s58" / "run3" / "logs-run3.tgz"


@pytest.fixture(scope="module")
def ct():
    spec = importlib.util.spec_from_file_location("compare_table", ROOT / "examples" / "compare_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run3(tmp_path_factory):
    out = tmp_path_factory.mktemp("run3")
    with tarfile.open(RUN3) as tar:
        tar.extractall(out, filter="data")
    return out


def _row(ct, path, record: dict, capsys) -> str:
    """The table's one row of ``record``, written to ``path`` (alone in its folder) and read back by the script."""
    path.write_text(json.dumps(record))
    assert ct.main([str(path.parent)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 5 and lines[3] == "" and lines[4].startswith("issue 34's bar"), lines  # the header, its
    return lines[2]  # rule and the row; then a blank line, the bar's line and the row's misses


def test_the_table_of_a_real_run_has_the_figures_its_runs_printed(ct, run3, capsys):
    assert ct.main([str(run3 / "compare-mps"), str(run3 / "compare-sliced")]) == 0
    lines = capsys.readouterr().out.split("\n\n")[0].splitlines()  # the table (the bar's lines follow)
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in lines[2:]}
    assert len(rows) == 6  # FSDP reduced by NCCL and by HOCCL, and the pipeline, in both settings
    # the figures the examples printed in that run (run3.out): tokens/s of each variant, and their ratio
    fsdp = rows[("FSDP small, NCCL reducing", "MPS")]
    assert ("| 52,774 (2.6%) | 46,824 (11.6%) | 1.127 | 1.077-1.193 | 220,037 (20.4%) | 38.81 / 43.74 / 9.31 | "
            "0.08 / 1.17 | yes |") in fsdp  # and each variant's step, and HOCCL's and NCCL's CPU slack
    assert "| 0.959 |" in rows[("FSDP small, HOCCL reducing", "MPS")]
    pipe = rows[("pipeline small", "time-sliced")]
    assert "| 106,299 " in pipe and "| 102,312 " in pipe and "| 1.039 |" in pipe and pipe.endswith("| yes |")
    assert "| 19.24 / 19.68 / 13.87 | - |" in pipe  # the last stage's step; the pipeline records no CPU slack
    # under MPS that run's NCCL pipeline differed from HOCCL's in the last bit of some microbatch losses (it printed
    # "no"): a run without --deterministic
    assert rows[("pipeline small", "MPS")].endswith("| no (without --deterministic) |")
    # the pipeline's spread is (max - min) / min over its rounds, as FSDP's: 104,596-117,597 and 89,365-122,014
    assert "113,243 (12.4%)" in rows[("pipeline small", "MPS")] and "108,858 (36.5%)" in rows[("pipeline small", "MPS")]


def test_unequal_losses_read_no_and_say_whether_the_run_was_deterministic(ct, run3, tmp_path, capsys):
    record = json.loads((run3 / "compare-mps" / "fsdp-small-reduce-nccl-mps.json").read_text())
    record["summary"]["nccl"]["final_loss"] += 1e-4
    path = tmp_path / "fsdp-small-reduce-nccl-mps.json"
    assert _row(ct, path, record, capsys).endswith("| no (without --deterministic) |")
    record["args"]["deterministic"] = True
    assert _row(ct, path, record, capsys).endswith("| 220,037 (20.4%) | 38.81 / 43.74 / 9.31 | 0.08 / 1.17 | no |")


def test_round_by_round_ratios_pair_each_round_s_hoccl_with_its_nccl(ct, run3, tmp_path, capsys):
    """The lowest and highest of HOCCL's round over NCCL's same round; "-" with one round or rounds that do not
    pair."""
    record = json.loads((run3 / "compare-mps" / "fsdp-small-reduce-nccl-mps.json").read_text())
    s = record["summary"]
    s["hoccl"]["rounds_tokens_per_s"], s["nccl"]["rounds_tokens_per_s"] = [100.0, 90.0, 120.0], [50.0, 100.0, 100.0]
    path = tmp_path / "fsdp-small-reduce-nccl-mps.json"
    assert "| 1.127 | 0.900-2.000 |" in _row(ct, path, record, capsys)  # 0.9 (round 2) and 2.0 (round 1), not 90/50
    s["hoccl"]["rounds_tokens_per_s"] = [100.0, 90.0]
    assert "| 1.127 | - |" in _row(ct, path, record, capsys)


def test_broken_records_are_named_and_left_out(ct, run3, tmp_path, capsys):
    good = (run3 / "compare-mps" / "pipeline-small-mps.json").read_text()
    (tmp_path / "pipeline-small-mps.json").write_text(good)
    (tmp_path / "pipeline-350m-mps.json").write_text(good[: len(good) // 2])  # cut short
    no_nccl = json.loads((run3 / "compare-mps" / "fsdp-small-reduce-nccl-mps.json").read_text())
    del no_nccl["summary"]["nccl"]
    (tmp_path / "fsdp-small-reduce-nccl-mps.json").write_text(json.dumps(no_nccl))
    (tmp_path / "fsdp-small-reduce-hoccl-mps.json").write_text('{"summary": [1, 2]}')  # JSON, not a record
    zero = {"summary": {"hoccl": {"tokens_per_s": 5.0}, "nccl": {"tokens_per_s": 0}}}
    (tmp_path / "fsdp-350m-reduce-nccl-mps.json").write_text(json.dumps(zero))
    (tmp_path / "other.json").write_text("{}")  # not a name --compare writes: not read
    assert ct.main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.split("\n\n")[0].splitlines()) == 3 and "| pipeline small | MPS |" in captured.out
    err = captured.err
    assert "pipeline-350m-mps.json: not a --compare record (JSONDecodeError" in err
    assert "fsdp-small-reduce-nccl-mps.json" in err and "run --comm hoccl,nccl,none" in err
    assert "fsdp-small-reduce-hoccl-mps.json: not a --compare record (AttributeError" in err
    assert "fsdp-350m-reduce-nccl-mps.json: not a --compare record (ValueError: NCCL's tokens/s is 0.0, no ratio" in err
    assert "other.json" not in err


def test_nothing_to_read_exits_1_with_the_reason(ct, tmp_path, capsys):
    assert ct.main([str(tmp_path / "missing")]) == 1
    err = capsys.readouterr().err
    assert "missing: no such folder (give the OUTDIR of tcp-nodes.sh --compare)" in err
    assert ct.main([str(tmp_path)]) == 1
    assert "no --compare record" in capsys.readouterr().err


def test_a_pipeline_loss_that_differs_reads_no(ct, run3, tmp_path, capsys):
    """The pipeline's losses are compared microbatch by microbatch on its last stage, as train_pipeline.py does."""
    record = json.loads((run3 / "compare-sliced" / "pipeline-small-sliced.json").read_text())
    path = tmp_path / "pipeline-small-sliced.json"
    assert ct.main([str(run3 / "compare-sliced")]) == 0
    assert "| pipeline small | time-sliced |" in capsys.readouterr().out
    record["by_comm"]["nccl"][-1]["losses"][5][2] += 1e-6
    record["args"] = {"deterministic": True}
    assert _row(ct, path, record, capsys).endswith("| 145,255 (19.1%) | 19.24 / 19.68 / 13.87 | - | no |")
    del record["by_comm"]["nccl"][-1]["losses"]  # a record from before the losses were kept: not compared
    assert _row(ct, path, record, capsys).endswith("| - |")


def test_steps_and_slack_read_what_the_record_has(ct, run3, tmp_path, capsys):
    """A variant's step or slack the record lacks reads "-" in its place; a column none of them has reads "-"."""
    record = json.loads((run3 / "compare-mps" / "fsdp-small-reduce-nccl-mps.json").read_text())
    path = tmp_path / "fsdp-small-reduce-nccl-mps.json"
    del record["summary"]["none"]["step_ms"], record["summary"]["nccl"]["slack_ms_median"]
    assert "| 220,037 (20.4%) | 38.81 / 43.74 / - | 0.08 / - | yes |" in _row(ct, path, record, capsys)
    for s in record["summary"].values():
        s.pop("step_ms", None), s.pop("slack_ms_median", None)
    assert "| 220,037 (20.4%) | - | - | yes |" in _row(ct, path, record, capsys)


def test_a_limit_run_on_its_own_gives_the_fsdp_rows_of_its_size_and_setting_their_limit(ct, run3, tmp_path, capsys):
    """``tcp-nodes.sh --compare`` runs FSDP's limit apart at 1.3b (``fsdp-1.3b-none-SETTING.json``): both FSDP rows of
    that size and setting read its tokens/s and step, the pipeline's and the other setting's rows do not, and a limit
    record without a ``none`` variant is named and left out."""
    record = json.loads((run3 / "compare-mps" / "fsdp-small-reduce-nccl-mps.json").read_text())
    limit = {"args": record["args"], "summary": {"none": record["summary"].pop("none")}}
    (tmp_path / "fsdp-small-reduce-nccl-mps.json").write_text(json.dumps(record))
    (tmp_path / "fsdp-small-reduce-hoccl-mps.json").write_text(json.dumps(record))
    (tmp_path / "fsdp-small-reduce-nccl-sliced.json").write_text(json.dumps(record))
    (tmp_path / "pipeline-small-mps.json").write_text((run3 / "compare-mps" / "pipeline-small-mps.json").read_text())
    (tmp_path / "fsdp-small-none-mps.json").write_text(json.dumps(limit))
    assert ct.main([str(tmp_path)]) == 0
    lines = capsys.readouterr().out.split("\n\n")[0].splitlines()[2:]
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in lines}
    assert len(rows) == 4, rows  # the limit record alone makes no row
    for red in ("NCCL", "HOCCL"):
        assert "| 220,037 (20.4%) | 38.81 / 43.74 / 9.31 |" in rows[(f"FSDP small, {red} reducing", "MPS")]
    assert "| - | 38.81 / 43.74 / - |" in rows[("FSDP small, NCCL reducing", "time-sliced")]  # no limit of its setting
    assert "| 157,483 (40.3%) |" in rows[("pipeline small", "MPS")]  # the pipeline keeps its own limit
    (tmp_path / "fsdp-small-none-mps.json").write_text(json.dumps({"summary": {"hoccl": limit["summary"]["none"]}}))
    assert ct.main([str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "fsdp-small-none-mps.json: not a --compare record (ValueError: no none variant in it" in captured.err
    assert "| - | 38.81 / 43.74 / - |" in captured.out


def test_the_bar_says_what_each_row_misses(ct, run3, capsys):
    """Issue 34's bar below the table: HOCCL >= 1.00x NCCL at small (1.10x above), both variants' rounds within 3%,
    HOCCL's CPU slack >= 0 where NCCL's is; one line per row that misses it, naming each miss."""
    assert ct.main([str(run3 / "compare-mps")]) == 0
    out = capsys.readouterr().out
    bar = out.split("\n\n", 1)[1].splitlines()
    assert bar[0].startswith("issue 34's bar") and bar[0].endswith(": 0 of 3 rows met")
    misses = {line.split(":")[0]: line for line in bar[1:]}
    # session 58's run 3 under MPS: FSDP (NCCL reducing) 1.127x with HOCCL's rounds 2.6% and NCCL's 11.6% apart
    assert misses["- FSDP small, NCCL reducing, MPS"].endswith(
        ": NCCL's rounds spread 11.6% > 3% (the no-communication limit's rounds spread 20.4% too)")
    assert "0.959x < 1.00x" in misses["- FSDP small, HOCCL reducing, MPS"]
    # a spread miss where the limit, which waits for no one, spread over the bar too says so: the host moved
    assert misses["- pipeline small, MPS"].endswith(" (the no-communication limit's rounds spread 40.3% too)")
    # not where the row misses on pace alone, nor where the limit's rounds kept within the bar
    assert ct._noisy({"none": {"spread": 0.2}}, ["0.959x < 1.00x"]) == ""
    assert ct._noisy({"none": {"spread": 0.02}}, ["HOCCL's rounds spread 9.2% > 3%"]) == ""
    assert ct._noisy({"none": None}, ["HOCCL's rounds spread 9.2% > 3%"]) == ""
    row = {"size": "350m", "ratio": 1.12, "hoccl": {"spread": 0.02, "slack_ms": -0.1},
           "nccl": {"spread": 0.01, "slack_ms": 0.5}}
    assert ct.misses(row) == ["HOCCL's CPU slack -0.10 ms < 0 where NCCL's is 0.50"]
    row["hoccl"]["slack_ms"], row["ratio"] = 0.2, 1.09
    assert ct.misses(row) == ["1.090x < 1.10x"]
    row["ratio"] = 1.10
    assert ct.misses(row) == []
