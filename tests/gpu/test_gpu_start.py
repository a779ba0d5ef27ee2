"""A rank that fails while the communicator is set up, on a real GPU under torchrun (both ranks on GPU 0's
machine; rank 1 asks for GPU 7): it raises naming the GPU, and rank 0 hears of it at once instead of waiting
for its timeout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def test_a_rank_without_its_gpu_fails_the_others_at_once():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          str(ROOT / "tests" / "support" / "mp_start_failure.py")], capture_output=True, text=True,
                         timeout=120, env=env, cwd=ROOT)
    text = out.stdout + out.stderr
    fails = {m[0]: (float(m[1]), m[2]) for m in re.findall(r"START-FAIL rank (\d) after ([\d.]+) s: (.*)", text)}
    assert set(fails) == {"0", "1"}, text[-4000:]
    assert "7" in fails["1"][1], fails["1"]  # names the GPU it asked for
    assert "rank 1" in fails["0"][1] and fails["0"][0] < 15.0, fails["0"]  # heard of it, well within 60 s
