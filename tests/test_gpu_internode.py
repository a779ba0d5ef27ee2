"""The inter-node path on GPUs: nodes as processes joined by TCP on the 2-GPU machine (skipped elsewhere)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multi_gpu(2)
SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "bench_internode.py"


def test_two_nodes_of_one_and_of_two_gpus_over_tcp():
    out = subprocess.run([sys.executable, str(SCRIPT), "--check-only"], capture_output=True, text=True, timeout=600)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "INTERNODE ALL OK" in text, text[-4000:]
    for name in ("allgather", "alltoall", "alltoallv", "sendrecv"):
        assert f"2 nodes x 1 GPUs {name}: OK" in text and f"2 nodes x 2 GPUs {name}: OK" in text
