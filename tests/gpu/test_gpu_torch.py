"""The torch integration on a GPU: the hoccl backend, FSDP2, pipelining and the examples, under torchrun with every
rank on GPU 0 (the 1-GPU machine). Copies between ranks on one GPU are same-GPU copies: these tests check
behaviour, not speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).resolve().parents[1] / "support" / "mp_torch_worker.py"


def _torchrun(nproc: int, script: Path, *args: str, timeout: int = 400, **extra_env: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra_env)
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
                          str(script), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-6000:]
    return text


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    path = tmp_path_factory.mktemp("torch") / "two.json"
    _torchrun(2, WORKER, str(path), *GROUPS["two_ranks"])
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    path = tmp_path_factory.mktemp("torch") / "four.json"
    _torchrun(4, WORKER, str(path), *GROUPS["four_ranks"])
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def over_tcp(tmp_path_factory):
    """2 ranks, each its own "node" (HOCCL_GPUS_PER_NODE=1): the group runs on NetCommunicator over TCP."""
    path = tmp_path_factory.mktemp("torch") / "tcp.json"
    _torchrun(2, WORKER, str(path), *GROUPS["over_tcp"], HOCCL_GPUS_PER_NODE="1")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def two_nodes_of_two(tmp_path_factory):
    """4 ranks as 2 nodes of 2 (HOCCL_GPUS_PER_NODE=2): NodeNetCommunicator, node leaders over TCP."""
    path = tmp_path_factory.mktemp("torch") / "nodes.json"
    _torchrun(4, WORKER, str(path), *GROUPS["two_nodes_of_two"], HOCCL_GPUS_PER_NODE="2")
    return json.loads(path.read_text())


# Over TCP (NetCommunicator, one GPU per "node") and with 2 nodes of 2 (NodeNetCommunicator) no proxy makes a CUDA
# call (session 13, resp. 14): one that did was held up inside the CUDA driver behind the application's blocking
# tensor.cpu(), which waited for that very call. The FSDP check failed now and then over TCP until a call's
# tensors were let go at Work.wait() (session 14): before, FSDP's window blocks came back when the GPU finished,
# so ranks ran out of window at different calls and left the check at different points.
_NAMES = ["all_gather", "all_to_all", "rooted", "reductions", "barrier", "errors", "fsdp", "p2p"]
# each group of ranks (a fixture above: one torchrun of the worker) and the checks it runs
GROUPS = {
    "two_ranks": ["all_gather", "all_to_all", "rooted", "p2p", "reductions", "barrier", "errors", "fsdp",
                  "fsdp_no_kernel", "nccl_shared_gpu",  # a refusing NCCL leaves its NCCL group broken
                  "split_refusal"],  # last: one node's ranks no longer pair after a refused call
    "four_ranks": ["all_gather", "all_to_all", "rooted", "p2p", "reductions", "subgroups", "errors", "hsdp"],
    "over_tcp": _NAMES + ["split_refusal"],
    "two_nodes_of_two": _NAMES + ["hsdp"],  # HSDP's shards in a node, its replicas across the nodes
}


@pytest.mark.parametrize("group,check", [(g, c) for g, checks in GROUPS.items() for c in checks])
def test_backend(request, group, check):
    assert request.getfixturevalue(group)[check] == "ok"


def test_a_dead_rank_raises_in_time():
    text = _torchrun(2, WORKER.with_name("mp_torch_death.py"), timeout=200)
    line = next(line for line in text.splitlines() if line.startswith("DEATH OK"))
    assert float(line.split()[2]) < 25.0, line


def test_train_fsdp_example(tmp_path):
    """HOCCL's reduce-scatters on a second group (use_for_fsdp's default), and (hoccl-onegroup) on the AllGathers'
    group, and with FSDP2's explicit prefetch two blocks ahead (hoccl+prefetch=2): the same sums in the same order,
    so with deterministic kernels the same losses bit for bit."""
    out = tmp_path / "fsdp.json"
    variants = ("hoccl", "hoccl-onegroup", "hoccl+prefetch=2")
    _torchrun(2, ROOT / "examples" / "train_fsdp.py", "--size", "tiny", "--steps", "4", "--warmup", "1",
              "--share-gpu", "--comm", ",".join(variants), "--deterministic", "--json", str(out))
    got = json.loads(out.read_text())
    for variant in variants:
        s = got["summary"][variant]
        assert s["tokens_per_s"] > 0 and s["steps_measured"] == 3 and s["slack_ms_median"] is not None
        assert all(r["loss"] == r["loss"] for r in got["records"][variant])  # no NaN
    for variant in variants[1:]:
        assert [r["loss"] for r in got["records"]["hoccl"]] == [r["loss"] for r in got["records"][variant]], variant


@pytest.mark.parametrize("schedule,per_node", [("gpipe", ""), ("1f1b", ""), ("1f1b", "1")],
                         ids=["gpipe", "1f1b", "1f1b-over-tcp"])
def test_train_pipeline_example_matches_one_process(tmp_path, schedule, per_node):
    """The pipeline example's stages exchange through the hoccl group (one node; or, HOCCL_GPUS_PER_NODE=1, each
    rank its own node over TCP) and match one process's losses and gradients, in 2 interleaved rounds."""
    out = tmp_path / "pp.json"
    _torchrun(2, ROOT / "examples" / "train_pipeline.py", "--size", "tiny", "--steps", "2", "--repeats", "2",
              "--share-gpu", "--check", "--schedule", schedule, "--json", str(out),
              **({"HOCCL_GPUS_PER_NODE": per_node} if per_node else {}))
    got = json.loads(out.read_text())
    ranks = got["ranks"]
    assert got["comm"] == ["hoccl"] and len(ranks[-1]["losses"]) == 4  # 2 rounds x 2 steps
    assert ranks[-1]["max_loss_diff"] < 1e-5
    assert max(r["max_grad_rel_diff"] for r in ranks) < 1e-4


def test_reductions_delegated_to_a_real_nccl_group():
    """reduce="nccl": all_reduce, reduce_scatter_tensor, reduce_scatter (list) and reduce go to a real
    ProcessGroupNCCL made as create_backend makes it (a PrefixStore of the group's store). NCCL refuses two ranks
    on one GPU, so on the 1-GPU machine the group has one rank: this checks the delegation's calls against torch's
    real NCCL backend and their results (a sum over one rank is the tensor itself; AVG too; PREMUL_SUM scales),
    not NCCL across GPUs. (Its first run found that NCCL's bindings refuse options of None.)"""
    import datetime
    import types

    import torch
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import ProcessGroupNCCL

    from hoccl_runtime.torch import ProcessGroupHoccl

    if not torch.cuda.is_available():
        pytest.skip("needs 1 CUDA GPU(s), found 0")
    torch.cuda.set_device(0)
    store = dist.HashStore()
    opts = ProcessGroupNCCL.Options()
    opts._timeout = datetime.timedelta(seconds=60)
    nccl = ProcessGroupNCCL(dist.PrefixStore("nccl/", store), 0, 1, opts)
    g = ProcessGroupHoccl(types.SimpleNamespace(device=0), 0, 1, reduce="nccl", nccl=nccl)  # calls skip the comm
    try:
        x = torch.randn(1001, device="cuda")
        t = x.clone()
        g.allreduce([t]).wait()  # no options (torch's own calls always pass some; direct callers may not)
        out = torch.full_like(x, -3.0)
        g._reduce_scatter_base(out, x.clone()).wait()
        outs = torch.full_like(x, -3.0)
        g.reduce_scatter([outs], [[x.clone()]]).wait()
        r = x.clone()
        ropts = dist.ReduceOptions()
        ropts.rootRank = 0
        g.reduce([r], ropts).wait()
        avg = x.clone()
        aopts = dist.AllreduceOptions()
        aopts.reduceOp = dist.ReduceOp.AVG
        g.allreduce([avg], aopts).wait()
        pre = x.clone()
        popts = dist.AllreduceOptions()
        popts.reduceOp = dist._make_nccl_premul_sum(2.0)
        g.allreduce([pre], popts).wait()
        torch.cuda.synchronize()
        for name, got in (("all_reduce", t), ("reduce_scatter_tensor", out), ("reduce_scatter", outs),
                          ("reduce", r), ("all_reduce AVG", avg)):
            assert torch.equal(got, x), name
        assert torch.allclose(pre, 2 * x), "all_reduce PREMUL_SUM"
    finally:
        nccl.shutdown() if hasattr(nccl, "shutdown") else None
