"""One process per GPU under torchrun (run on the 2-GPU machine; skipped elsewhere)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multi_gpu(2)
WORKER = Path(__file__).with_name("mp_worker.py")


def _why(text: str) -> str:
    """The workers' own failure lines, their first traceback (torchrun's own report comes last and says
    little), and the tail."""
    failed = "\n".join(line for line in text.splitlines() if "FAILED [" in line)
    first = text.find("Traceback")
    return failed + "\n" + (text[first:first + 3000] if first >= 0 else "") + "\n...\n" + text[-1500:]


@pytest.mark.parametrize("local_copies,connections", [("sm", None), ("peer", None), ("sm", "1")])
def test_communicator_two_processes(local_copies, connections):
    """Every collective, checks and faults, in two processes; with HOCCL_LOCAL_COPIES=peer every collective
    but the eager receive must also pass the SM probe (a kernel holding every SM does not hold it up). Also
    under CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron's setting), where each rank's communicator warns once of its
    first same-GPU copy."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(WORKER.parents[1]), os.environ.get("PYTHONPATH", "")]),
               HOCCL_LOCAL_COPIES=local_copies)
    env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    if connections is not None:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = connections
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(WORKER)],
                         capture_output=True, text=True, timeout=300, env=env)
    text = out.stdout + out.stderr
    assert out.returncode == 0, _why(text)
    warned = [line for line in text.splitlines() if "under CUDA_DEVICE_MAX_CONNECTIONS=1 that kernel waits" in line]
    # once per communicator: every rank's first one at least
    assert all(any(f"rank {r}: this " in line for line in warned) for r in range(2)) if connections else not warned
    assert text.count("ALL OK") == 2, _why(text)
    assert "mismatch detected" in text and "dead peer detected" in text
    assert "all_gather: " in text and "gather: " in text and " 0 kernels in the trace" in text
    assert text.count("all_gather in place: SM-free") == 2, _why(text)
    if local_copies == "peer":
        for name in ("all_gather", "all_to_all", "scatter", "gather"):
            assert text.count(f" {name}: SM-free") == 2, _why(text)


def test_peer_dying_while_gpus_wait_on_it():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(WORKER.parents[1]), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          str(WORKER.with_name("mp_death.py"))], capture_output=True, text=True, timeout=180, env=env)
    text = out.stdout + out.stderr
    assert "DEATH OK" in text, _why(text)
    assert "synchronize raised" in text and "rank 1" in text


def test_one_gpu_per_node_communicator_over_tcp():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(WORKER.parents[1]), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          str(WORKER.with_name("mp_net_worker.py"))], capture_output=True, text=True, timeout=300,
                         env=env)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and text.count("NET OK") == 2, _why(text)


def test_two_nodes_of_two_gpus_through_node_leaders():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(WORKER.parents[1]), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4",
                          str(WORKER.with_name("mp_nodenet_worker.py"))], capture_output=True, text=True,
                         timeout=300, env=env)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and text.count("NODENET OK") == 4, _why(text)
