"""scripts/tcp-nodes.sh --compare without a GPU: stub nvidia-smi and torchrun (the stub records its arguments) show
which runs the comparison makes, with which arguments, and that COMPARE_ARGS reaches every run."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _compare(tmp_path: Path, prefix: tuple[str, ...] = (), rc: int = 0, size: str = "small",
             **env: str) -> list[list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls.txt"
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stub (UUID: GPU-0)'\n")
    # the stub records its host id and arguments, and with STUB_AFFINITY its CPUs last
    (bin_dir / "torchrun").write_text(
        '#!/bin/sh\ncpus=""\n[ -n "$STUB_AFFINITY" ] && cpus=$(grep Cpus_allowed_list /proc/self/status | cut -f2)\n'
        f'echo "$NCCL_HOSTID $* $cpus" >> {shlex.quote(str(calls))}\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    run_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MASTER_PORT": "29999", **env}
    out = subprocess.run([*prefix, "bash", str(ROOT / "scripts" / "tcp-nodes.sh"), "--compare", str(tmp_path / "out"),
                          size], env=run_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == rc, out.stdout + out.stderr
    if rc:
        return [[out.stdout + out.stderr]]
    return [line.split() for line in calls.read_text().splitlines()]


def test_compare_runs_fsdp_twice_and_the_pipeline_on_two_nodes_with_their_own_host_ids(tmp_path):
    calls = _compare(tmp_path)
    assert len(calls) == 6  # three runs, two nodes each
    assert sorted(c[0] for c in calls) == ["hoccl-node0"] * 3 + ["hoccl-node1"] * 3
    scripts = [next(a for a in c if a.endswith(".py")).rsplit("/", 1)[-1] for c in calls]
    assert scripts == ["train_fsdp.py"] * 4 + ["train_pipeline.py"] * 2
    reduce = [c[c.index("--reduce") + 1] for c in calls[:4]]
    assert reduce == ["nccl", "nccl", "hoccl", "hoccl"]
    comm = [c[c.index("--comm") + 1] for c in calls]
    assert comm == ["hoccl,nccl,none"] * 6
    assert all(c[c.index("--gc-every") + 1] == "50" for c in calls), calls  # torchtitan's collector by default
    assert all(c[c.index("--steps") + 1] == "100" for c in calls), calls  # rounds of 100 steps at small


def test_at_1_3b_fsdp_s_limit_runs_on_its_own(tmp_path):
    """At 1.3b the limit's whole replica does not fit beside the two FSDP variants' halves on an 80 GB GPU (two ranks):
    the FSDP runs compare HOCCL with NCCL only, and a third run of its own trains the limit; the pipeline keeps all
    three. COMPARE_NONE_APART names the sizes where it is so ("" for none)."""
    calls = _compare(tmp_path, size="1.3b")
    comm = [(c[c.index("--comm") + 1], c[c.index("--json") + 1].rsplit("/", 1)[-1]) for c in calls[::2]]
    assert comm == [("hoccl,nccl", "fsdp-1.3b-reduce-nccl-sliced.json"),
                    ("hoccl,nccl", "fsdp-1.3b-reduce-hoccl-sliced.json"), ("none", "fsdp-1.3b-none-sliced.json"),
                    ("hoccl,nccl,none", "pipeline-1.3b-sliced.json")], comm
    assert all(c[c.index("--steps") + 1] == "8" and c[c.index("--batch") + 1] in ("2", "8") for c in calls), calls
    together = _compare(tmp_path / "together", size="1.3b", COMPARE_NONE_APART="")
    assert [c[c.index("--comm") + 1] for c in together] == ["hoccl,nccl,none"] * 6, together
    apart = _compare(tmp_path / "apart", COMPARE_NONE_APART="350m,small")  # small named: its limit apart too
    assert [c[c.index("--comm") + 1] for c in apart[::2]] == ["hoccl,nccl", "hoccl,nccl", "none", "hoccl,nccl,none"]


def test_compare_examples_picks_the_runs(tmp_path):
    """COMPARE_EXAMPLES=fsdp repeats FSDP's rows alone (at 1.3b with its limit apart); pipeline alone; a name that is
    neither is refused before anything runs."""
    fsdp = _compare(tmp_path / "fsdp", size="1.3b", COMPARE_EXAMPLES="fsdp")
    assert [c[c.index("--json") + 1].rsplit("/", 1)[-1] for c in fsdp[::2]] == [
        "fsdp-1.3b-reduce-nccl-sliced.json", "fsdp-1.3b-reduce-hoccl-sliced.json", "fsdp-1.3b-none-sliced.json"]
    pipe = _compare(tmp_path / "pipe", COMPARE_EXAMPLES="pipeline")
    assert [c[c.index("--json") + 1].rsplit("/", 1)[-1] for c in pipe] == ["pipeline-small-sliced.json"] * 2
    both = _compare(tmp_path / "both", COMPARE_EXAMPLES="pipeline, fsdp")  # a space after the comma: both still run
    assert [c[c.index("--json") + 1].rsplit("/", 1)[-1] for c in both[::2]] == [
        "fsdp-small-reduce-nccl-sliced.json", "fsdp-small-reduce-hoccl-sliced.json", "pipeline-small-sliced.json"]
    for bad in ("fsdp,pipe", ",", "*"):
        where = tmp_path / f"bad{ord(bad[-1])}"
        (msg,), = _compare(where, rc=2, COMPARE_EXAMPLES=bad)
        assert f"COMPARE_EXAMPLES='{bad}'" in msg and "fsdp, pipeline or both" in msg, msg
        assert not (where / "calls.txt").exists()


def test_compare_args_reach_every_run(tmp_path):
    calls = _compare(tmp_path, COMPARE_ARGS="--gc-every 10 --deterministic")
    assert len(calls) == 6
    for c in calls:
        assert c[c.index("--gc-every") + 1] == "10" and "--deterministic" in c, c
    plain = _compare(tmp_path / "plain", COMPARE_ARGS="")  # empty: the collector as Python runs it
    assert len(plain) == 6 and not any("--gc-every" in c for c in plain), plain


def test_pin_puts_each_node_on_its_half_of_the_cpus(tmp_path):
    """TCP_NODES_PIN=1 runs each node under taskset on half of the CPUs (node 0 the first half); unset, no pinning."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    half = len(cpus) // 2
    calls = _compare(tmp_path, TCP_NODES_PIN="1", STUB_AFFINITY="1")
    assert len(calls) == 6
    want = {"hoccl-node0": set(cpus[:half]), "hoccl-node1": set(cpus[half:])}
    for c in calls:
        assert _cpu_set(c[-1]) == want[c[0]], c
    unpinned = _compare(tmp_path / "plain", STUB_AFFINITY="1")
    assert all(_cpu_set(c[-1]) == set(cpus) for c in unpinned)


def _cpu_set(text: str) -> set[int]:
    """The CPUs of a Cpus_allowed_list ("0-3,8")."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset is not installed")
def test_pin_on_one_cpu_is_refused_with_the_reason(tmp_path):
    one = str(min(os.sched_getaffinity(0)))
    [[text]] = _compare(tmp_path, prefix=("taskset", "-c", one), rc=2, TCP_NODES_PIN="1")
    assert "TCP_NODES_PIN=1 needs 2 CPUs or more, this process may use 1" in text


def test_compare_ends_with_the_table_of_its_runs_records(tmp_path):
    """The closing table (examples/compare_table.py) reads what the runs wrote: here a stub torchrun writes one FSDP
    record per run where it is told to (``--json``), and the script's last lines are their rows; a run that wrote
    none (the pipeline's stub here) is left out."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = ('{"args": {"deterministic": false}, "summary": {"hoccl": {"tokens_per_s": 300.0, "round_spread": 0.01,'
              ' "final_loss": 2.5}, "nccl": {"tokens_per_s": 200.0, "round_spread": 0.02, "final_loss": 2.5}}}')
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stub (UUID: GPU-0)'\n")
    (bin_dir / "torchrun").write_text(  # the FSDP runs' record, written where --json says (the pipeline's: none)
        '#!/bin/sh\ncase "$*" in *train_fsdp.py*) ;; *) exit 0 ;; esac\n'
        'while [ $# -gt 0 ]; do [ "$1" = --json ] && { shift; json=$1; }; shift; done\n'
        f'printf %s {shlex.quote(record)} > "$json"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MASTER_PORT": "29999"}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "tcp-nodes.sh"), "--compare", str(tmp_path / "out"), "small"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("=== HOCCL / NCCL, every run above"))
    rows = lines[head + 3:head + 5]
    row = "| time-sliced | 300 (1.0%) | 200 (2.0%) | 1.500 | - | - | - | - | yes |"  # one round, no steps recorded
    assert rows == [f"| FSDP small, HOCCL reducing {row}", f"| FSDP small, NCCL reducing {row}"], lines
    assert lines[head + 5:] == ["", lines[head + 6]] and lines[head + 6].endswith(": 2 of 2 rows met"), lines


def _soak(tmp_path: Path, *args: str, torchrun: str = "", **env: str) -> tuple[subprocess.CompletedProcess, list]:
    """``tcp-nodes.sh --soak ARGS`` with stubs: torchrun records its host id and arguments, then runs ``torchrun``'s
    shell text (where it may fail or hang)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls.txt"
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stub (UUID: GPU-0)'\n")
    (bin_dir / "torchrun").write_text(f'#!/bin/sh\necho "$NCCL_HOSTID $*" >> {shlex.quote(str(calls))}\n{torchrun}\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    run_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MASTER_PORT": "29999", **env}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "tcp-nodes.sh"), "--soak", *args], env=run_env,
                         capture_output=True, text=True, timeout=60)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return out, [line.split() for line in lines]


def test_soak_runs_the_fsdp_comparison_n_times_in_a_row_as_fresh_pairs(tmp_path):
    out, calls = _soak(tmp_path, "3", str(tmp_path / "out"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert len(calls) == 6  # both nodes of a run start together: sorted within each run
    assert [sorted(c[0] for c in calls[i:i + 2]) for i in (0, 2, 4)] == [["hoccl-node0", "hoccl-node1"]] * 3
    for c in calls:
        assert c[c.index("--size") + 1] == "350m" and c[c.index("--comm") + 1] == "hoccl,nccl", c
        assert c[c.index("--reduce") + 1] == "nccl" and c[c.index("--steps") + 1] == "3", c
    jsons = [c[c.index("--json") + 1].rsplit("/", 1)[-1] for c in calls[::2]]
    assert jsons == [f"soak-fsdp-350m-sliced-{i}.json" for i in (1, 2, 3)]
    assert out.stdout.splitlines()[-1].startswith("soak: 3 of 3 runs completed (sliced, FSDP 350m"), out.stdout


def test_soak_goes_on_after_a_failed_run_and_says_how_many_completed(tmp_path):
    """The second run's node 1 fails: the third still runs, and the exit status is the failed run's."""
    fail = 'case "$*" in *soak-fsdp-small-sliced-2*) [ "$NCCL_HOSTID" = hoccl-node1 ] && exit 3 ;; esac\nexit 0'
    out, calls = _soak(tmp_path, "3", str(tmp_path / "out"), "small", torchrun=fail, SOAK_ARGS="--steps 2")
    assert out.returncode == 3, out.stdout + out.stderr
    assert len(calls) == 6 and all(c[c.index("--batch") + 1] == "4" and "--reduce" not in c for c in calls), calls
    assert "=== soak-fsdp-small-sliced-2 rc=3" in out.stdout
    assert out.stdout.splitlines()[-1].startswith("soak: 2 of 3 runs completed"), out.stdout


def test_soak_cuts_a_hung_run_at_the_timeout(tmp_path):
    out, calls = _soak(tmp_path, "1", str(tmp_path / "out"), torchrun="exec sleep 30", TCP_NODES_TIMEOUT="1")
    assert out.returncode == 124, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1].startswith("soak: 0 of 1 runs completed"), out.stdout
    assert "each bounded by 1 s" in out.stdout


@pytest.mark.parametrize("args", [("0", "out"), ("00", "out"), ("x", "out"), ("-1", "out"), ("", "out"), ("2",)])
def test_soak_refuses_a_bad_count_or_no_outdir_before_it_starts(tmp_path, args):
    out, calls = _soak(tmp_path, *args)
    assert out.returncode == 2 and not calls, out.stdout + out.stderr
    assert out.stdout.startswith("tcp-nodes --soak: ") and "usage: tcp-nodes.sh" in out.stdout, out.stdout
