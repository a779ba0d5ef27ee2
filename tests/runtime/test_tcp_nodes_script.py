"""scripts/tcp-nodes.sh --compare without a GPU: stub nvidia-smi and torchrun (the stub records its arguments) show
which runs the comparison makes, with which arguments, and that COMPARE_ARGS reaches every run."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _compare(tmp_path: Path, **env: str) -> list[list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: stub (UUID: GPU-0)'\n")
    (bin_dir / "torchrun").write_text(f'#!/bin/sh\necho "$NCCL_HOSTID $*" >> {shlex.quote(str(calls))}\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    run_env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "MASTER_PORT": "29999", **env}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "tcp-nodes.sh"), "--compare", str(tmp_path / "out"),
                          "small"], env=run_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [line.split() for line in calls.read_text().splitlines()]


def test_compare_runs_fsdp_twice_and_the_pipeline_on_two_nodes_with_their_own_host_ids(tmp_path):
    calls = _compare(tmp_path)
    assert len(calls) == 6  # three runs, two nodes each
    assert sorted(c[0] for c in calls) == ["hoccl-node0"] * 3 + ["hoccl-node1"] * 3
    scripts = [next(a for a in c if a.endswith(".py")).rsplit("/", 1)[-1] for c in calls]
    assert scripts == ["train_fsdp.py"] * 4 + ["train_pipeline.py"] * 2
    reduce = [c[c.index("--reduce") + 1] for c in calls[:4]]
    assert reduce == ["nccl", "nccl", "hoccl", "hoccl"]
    assert all("hoccl,nccl,none" in c for c in calls)
    assert not any("--gc-every" in c for c in calls)


def test_compare_args_reach_every_run(tmp_path):
    calls = _compare(tmp_path, COMPARE_ARGS="--gc-every 50")
    assert len(calls) == 6
    for c in calls:
        assert c[c.index("--gc-every") + 1] == "50", c
