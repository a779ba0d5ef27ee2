"""The examples run as tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

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


def test_measure_verbs_host_costs_runs_on_the_fake_nic(tmp_path):
    """The script behind the verbs cost profile (hoccl_compiler.topology.TRANSPORT_COSTS["verbs"]) runs its reusable
    executors over the fake verbs to the end: it hung on its first shape until 2026-12-07, when such executors stalled
    on runs on alternate ring halves, and nothing ran it."""
    import json

    path = tmp_path / "v.json"
    out = run("measure_verbs_host_costs.py", "--reps", "3", "--shapes", "2x1,3x1,2x2", "--json", str(path))
    got = json.loads(path.read_text())
    assert [(r["nodes"], r["gpus_per_node"]) for r in got["rows"]] == [(2, 1), (3, 1), (2, 2)]
    assert all(r["median_us"] > 0 for r in got["rows"]) and "fit (1 GPU per node)" in out


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

    plain = run("calibrate_cost.py", "--out-of-sample")  # the headline: as measured, no skew estimate
    assert "estimated start skew" not in plain and "less the start skew" not in plain and "| sweep |" not in plain
    assert all(r.get("skew_s") is None for r in calibrate_rows())
    out = run("calibrate_cost.py", "--skew-estimate", "--json", str(tmp_path / "cal.json"))
    assert "(fitted)" in out and "out of sample" in out  # the other sessions' sweeps beside the fitted one
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
    # the sweep's start-up skew: once per batch of calls, so 1/calls of it on each one-node row
    from hoccl_bench.bench import batch_calls

    assert all(r["skew_s"] > 0 and r["ratio_less_skew"] == r["predicted_s"] / (r["measured_s"] - r["skew_s"])
               for r in nvlink)
    big = [r for r in nvlink if r["size"] >= 128 << 20]
    assert len({round(r["skew_s"], 12) for r in big}) == 1 and batch_calls(128 << 20) == 10
    assert "against the measured time less the start skew" in out
    assert "device-bound rows within 10%" in out


def calibrate_rows():
    sys.path.insert(0, str(EXAMPLES))
    import calibrate_cost

    return calibrate_cost.rows(calibrate_cost.SWEEP, None, network=False)


def test_calibrate_cost_start_skew_recovers_a_known_call_cost_and_skew():
    """The fit behind the skew column: rows built as raw + c + skew / calls give back c and skew, and the eager
    send/recv rows (4 MiB and below) are not used."""
    sys.path.insert(0, str(EXAMPLES))
    import calibrate_cost

    from hoccl_bench.bench import batch_calls

    c, skew = 14e-6, 200e-6
    rows = []
    for k in range(21, 31):
        n = 1 << k
        raw = n / 390e9
        rows.append(dict(op="sendrecv", impl="raw", size=n, seconds=raw))
        hoccl = raw + c + skew / batch_calls(n) + (1e-3 if n <= 4 << 20 else 0.0)  # eager rows: way off the line
        rows.append(dict(op="sendrecv", impl="hoccl", size=n, seconds=hoccl))
    got_c, got_skew = calibrate_cost.start_skew(rows)
    assert abs(got_c - c) < 1e-9 and abs(got_skew - skew) < 1e-8
    with pytest.raises(ValueError, match="start-up skew"):
        calibrate_cost.start_skew([r for r in rows if r["impl"] == "raw"])


def test_calibrate_cost_skew_from_sweeps_of_one_size_with_several_batch_lengths(tmp_path):
    """--skew-from: sweeps of one size timed with 10, 40 and 160 calls a batch (rows recording their calls), as
    scripts/device-check.sh skew makes them; the fit gives back the call cost and the skew per op."""
    import json

    files = []
    for calls in (10, 40, 160):
        rows = []
        for op, c, skew in (("sendrecv", 14e-6, 190e-6), ("allgather", 15e-6, 210e-6)):
            raw = (64 << 20) / 390e9
            rows.append(dict(op=op, impl="raw", size=64 << 20, calls=calls, seconds=raw))
            rows.append(dict(op=op, impl="hoccl", size=64 << 20, calls=calls, seconds=raw + c + skew / calls))
        path = tmp_path / f"skew-{calls}.json"
        path.write_text(json.dumps({"rows": rows}))
        files.append(str(path))
    out = run("calibrate_cost.py", "--skew-from", *files)
    assert "sendrecv: call 14.0 us + skew 190 us / calls" in out
    assert "allgather: call 15.0 us + skew 210 us / calls" in out
    assert "160 calls 15.2 us (fit 15.2)" in out  # 14 + 190/160 = 15.19
