"""The examples run as tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(script: str, *args: str) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_compile_and_replay():
    assert "replay on random bytes: OK" in run("compile_and_replay.py")


def test_bench_compiler_quick():
    out = run("bench_compiler.py", "--quick")
    assert "| 16 | alltoallv Zipf(1.1) |" in out and "worst stages in the port model / bound" in out


def test_zipf_matrix_is_skewed_and_sized():
    sys.path.insert(0, str(EXAMPLES))
    from workloads import zipf_matrix

    m = zipf_matrix(16, mean_pair_bytes=1 << 20, seed=3)
    off = m[~__import__("numpy").eye(16, dtype=bool)]
    assert (m.diagonal() == 0).all() and abs(off.mean() - (1 << 20)) < 1024 and off.max() > 20 * off.mean()


def test_profile_python_runs_the_communicator_hot_path_without_cuda():
    """send, recv and all_gather through the real Communicator code (mailbox, launch lists), CUDA stubbed."""
    out = run("profile_python.py", "--calls", "200")
    rows = {" ".join(line.split()[:-1]): float(line.split()[-1]) for line in out.splitlines()[1:] if line.strip()}
    assert set(rows) == {"send 2 MiB", "recv 2 MiB", "all_gather 2 MiB", "all_gather 2 MiB peer",
                         "all_gather 2 MiB window", "send 2 MiB eager", "recv 2 MiB eager"}, rows
    assert all(v > 0 for v in rows.values())


def test_internode_curves_on_host_buffers():
    """bench_internode's AllGather / All-to-All curves (issue 6's 2 nodes x 2 GPUs), here on host buffers:
    2 nodes x 2 ranks as processes over TCP; one row per collective and size, with a positive rate."""
    sys.path.insert(0, str(EXAMPLES))
    import bench_internode

    rows = bench_internode.time_curves(["allgather", "alltoall"], 2, 2, 1 << 20, sizes=(4 << 20,), host=True)
    assert [(r["op"], r["size"], r["gpus_per_node"]) for r in rows] == [("allgather", 4 << 20, 2),
                                                                        ("alltoall", 4 << 20, 2)]
    assert all(r["gbps"] > 0 and r["seconds"] > 0 for r in rows)


def test_calibrate_cost_sets_every_measured_row_beside_its_prediction(tmp_path):
    """examples/calibrate_cost.py over the checked-in 2x H200 runs: one row per measured call, each with a v2
    prediction for the plan the runtime compiles, host-bound and eager rows marked."""
    import json

    out = run("calibrate_cost.py", "--json", str(tmp_path / "cal.json"))
    rows = json.loads((tmp_path / "cal.json").read_text())
    nvlink = [r for r in rows if r["setting"] == "1 node, NVLink"]
    assert len(nvlink) == 30 and {r["op"] for r in nvlink} == {"sendrecv", "allgather", "alltoall"}
    assert all(r["predicted_s"] > 0 and r["ratio"] == r["predicted_s"] / r["measured_s"] for r in rows)
    assert {r["note"] for r in nvlink} == {"", "eager path", "host-bound"}
    assert [r["size"] for r in rows if r["setting"] == "2 nodes, TCP"] == [2 << 20, 8 << 20, 32 << 20, 128 << 20,
                                                                          512 << 20, 1 << 30]
    today = [r for r in rows if r["setting"].startswith("2 nodes, TCP, 1x H200, session 18")]
    assert [r["size"] for r in today] == [64 << 10, 2 << 20, 8 << 20, 32 << 20, 128 << 20, 512 << 20, 1 << 30]
    assert all(r["note"].startswith("rounds ") for r in today)  # the 5 rounds' range beside the median
    # the NIC is that host's wire in the same rounds (1 GiB, chunked writes), not the preset's 18.9 GB/s
    assert "(NIC 17.1 GB/s)" in today[0]["setting"] and today[-1]["predicted_s"] > (1 << 30) / 17.1e9
    assert "device-bound rows within 10%" in out
