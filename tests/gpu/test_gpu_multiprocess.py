"""Several processes under torchrun: the intra-node communicator in 2 processes (one GPU each on the 2-GPU
machine; both on GPU 0 on the 1-GPU machine, where the copies between ranks are same-GPU copies and the SM-free
check is skipped), and the tests that need 2 GPUs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parents[1] / "support" / "mp_worker.py"
VARIANTS = {"sm": ("sm", None), "peer": ("peer", None), "connections1": ("sm", "1")}
# the checks of tests/support/mp_worker.py, in its order (a check missing from a rank's results fails as such)
CHECKS = ["all_gather", "all_to_all", "broadcast", "scatter_gather", "send_recv", "batch_isend_irecv", "pacing",
          "synchronize_waits_for_graphs", "create_close_cycles", "torch_bf16", "no_kernel_trace", "sm_free",
          "two_streams", "windows", "async_pool_refused", "mismatch", "graph_capture", "dead_peer"]


def _why(text: str) -> str:
    """The workers' first traceback (torchrun's own report comes last and says little), and the tail."""
    first = text.find("Traceback")
    return (text[first:first + 3000] if first >= 0 else "") + "\n...\n" + text[-1500:]


@pytest.fixture(scope="module", params=list(VARIANTS))
def two_processes(request, tmp_path_factory):
    """tests/support/mp_worker.py in 2 processes, once per variant: HOCCL_LOCAL_COPIES sm and peer, and under
    CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron's setting). Returns (variant, {rank: results}, notes, text)."""
    local_copies, connections = VARIANTS[request.param]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(WORKER.parents[2]), os.environ.get("PYTHONPATH", "")]),
               HOCCL_LOCAL_COPIES=local_copies)
    env.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    if connections is not None:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = connections
    path = tmp_path_factory.mktemp("mp") / "worker.json"
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(WORKER),
                          str(path)], capture_output=True, text=True, timeout=400, env=env)
    text = out.stdout + out.stderr
    ranks = {}
    for r in range(2):
        got = path.with_name(f"{path.name}.rank{r}")
        assert got.exists(), f"rank {r} wrote no results\n" + _why(text)
        ranks[r] = json.loads(got.read_text())
    return request.param, ranks, text


@pytest.mark.gpu
@pytest.mark.parametrize("check", CHECKS)
def test_communicator_two_processes(two_processes, check):
    """Every check of the worker on both ranks: "ok", or "skipped: why" for the SM-free check where the ranks
    share a GPU. With HOCCL_LOCAL_COPIES=peer the out-of-place collectives must also pass the SM probe (the
    worker fails its check otherwise)."""
    _, ranks, _ = two_processes
    got = {r: ranks[r]["results"].get(check, "missing (the worker did not get to it)") for r in ranks}
    if check == "sm_free" and all(ranks[r]["shared_gpu"] for r in ranks):
        assert all(v.startswith("skipped: the ranks share a GPU") for v in got.values()), got
    elif check == "dead_peer":  # the last rank leaves; the others must hear of it in time
        last = max(ranks)
        assert got[last] == "skipped: this rank is the one that leaves" and \
            all(v == "ok" for r, v in got.items() if r != last), got
    else:
        assert all(v == "ok" for v in got.values()), got


@pytest.mark.gpu
def test_max_connections_one_warns_once_per_communicator(two_processes):
    """Under CUDA_DEVICE_MAX_CONNECTIONS=1 each rank's communicator warns once of its first same-GPU copy (that
    kernel then waits behind the compute); otherwise never."""
    variant, _, text = two_processes
    warned = [line for line in text.splitlines() if "under CUDA_DEVICE_MAX_CONNECTIONS=1 that kernel waits" in line]
    if variant == "connections1":
        assert all(any(f"rank {r}: this " in line for line in warned) for r in range(2)), warned
    else:
        assert not warned, warned


MULTI_GPU = pytest.mark.multi_gpu(2)


@MULTI_GPU
def test_peer_dying_while_gpus_wait_on_it():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(WORKER.parents[2]), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          str(WORKER.with_name("mp_death.py"))], capture_output=True, text=True, timeout=180, env=env)
    text = out.stdout + out.stderr
    assert "DEATH OK" in text, _why(text)
    assert "synchronize raised" in text and "rank 1" in text


@MULTI_GPU
def test_one_gpu_per_node_communicator_over_tcp():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(WORKER.parents[2]), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          str(WORKER.with_name("mp_net_worker.py"))], capture_output=True, text=True, timeout=300,
                         env=env)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and text.count("NET OK") == 2, _why(text)


@MULTI_GPU
def test_two_nodes_of_two_gpus_through_node_leaders():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(WORKER.parents[2]), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "4",
                          str(WORKER.with_name("mp_nodenet_worker.py"))], capture_output=True, text=True,
                         timeout=300, env=env)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and text.count("NODENET OK") == 4, _why(text)
