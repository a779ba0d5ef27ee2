"""hoccl-bench-report on result files (a real run's rows and bad inputs)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from hoccl_bench.report import main

RUN = {"date": "2026-11-30 03:44", "gpu": "NVIDIA H200", "driver": 13000, "env": {"X": None},
       "rows": [
           {"op": "allgather", "impl": "hoccl-events", "size": 2 << 20, "gbps": 50.9, "host_us": 40.9},
           {"op": "allgather", "impl": "hoccl-events", "size": 1 << 30, "gbps": 760.5, "host_us": 50.4},
           {"op": "allgather", "impl": "raw-bidir-memcpyPeer", "size": 1 << 30, "gbps": 779.4, "host_us": 6.6},
           {"op": "sendrecv", "impl": "hoccl-events", "size": 1 << 30, "gbps": 393.5, "host_us": 31.5},
       ]}


def test_report_tables(tmp_path, capsys):
    (tmp_path / "run.json").write_text(json.dumps(RUN))
    (tmp_path / "nccl.json").write_text(json.dumps({"date": "d", "gpu": "g", "driver": "2.28.9", "rows": [
        {"op": "allgather", "impl": "nccl-default", "size": 1 << 30, "gbps": 524.9, "host_us": 47.8}]}))
    (tmp_path / "other.json").write_text(json.dumps({"not": "a result"}))
    assert main([str(tmp_path), "-o", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "| size | hoccl-events | nccl-default | raw-bidir-memcpyPeer |" in text
    assert "| 1 GiB | 760.5 (50) | 524.9 (48) | 779.4 (7) |" in text
    assert "| 2 MiB | 50.9 (41) |  |  |" in text
    assert "## sendrecv" in text and "NVIDIA H200, driver 13000, 2026-11-30 03:44" in text
    assert "SM-free" not in text  # no row measured it
    (tmp_path / "free.json").write_text(json.dumps({"date": "d", "rows": [
        {"op": "allgather", "impl": i, "size": 64 << 20, "gbps": 1.0, "host_us": 1.0, "sms": k, "sm_free": f}
        for i, k, f in (("hoccl", 0, False), ("hoccl-inplace", 0, True), ("nccl", 24, False))]}))
    assert main([str(tmp_path), "-o", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "| op | size | hoccl | hoccl-inplace | nccl |" in text
    assert "| allgather | 64 MiB | 0 | 0 | 24 |" in text and "| allgather | 64 MiB | no | yes | no |" in text


def test_report_plots(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "run.json").write_text(json.dumps(RUN))
    assert main([str(tmp_path), "-o", str(tmp_path / "r.md"), "--plots", str(tmp_path / "png")]) == 0
    assert (tmp_path / "png" / "allgather.png").read_bytes()[:4] == b"\x89PNG"
    (tmp_path / "contention.json").write_text(json.dumps({"kind": "contention", "date": "d", "rows": [
        {"load": "gemm", "comm": c, "slowdown": sl, "paired": sl, "spread": [sl, sl], "delivered_gbps": g}
        for c, sl, g in (("alone", 1.0, 0.0), ("hoccl", 1.1, 150.0), ("hoccl@50", 1.05, 50.0),
                         ("raw", 1.12, 149.0), ("raw@50", 1.04, 51.0), ("hoccl@50/4000us", 1.03, 48.0),
                         ("hoccl-inplace", 1.1, 360.0), ("hoccl-inplace@95", 1.04, 84.0), ("nccl", 1.14, 72.0))]}))
    assert main([str(tmp_path), "-o", str(tmp_path / "r.md"), "--plots", str(tmp_path / "png")]) == 0
    assert (tmp_path / "png" / "contention-gemm-curve.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("setup,needle", [
    (lambda d: None, "no benchmark rows"),
    (lambda d: (d / "x.json").write_text("{bad"), "not valid JSON"),
    (lambda d: (d / "x.json").write_text(json.dumps({"rows": [{"op": "a"}]})), "lacks"),
])
def test_report_errors(tmp_path, capsys, setup, needle):
    setup(tmp_path)
    assert main([str(tmp_path)]) == 2
    assert needle in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2


def test_report_other_kinds(tmp_path):
    (tmp_path / "launch.json").write_text(json.dumps({"kind": "launch", "date": "d", "rows": [
        {"op": "sendrecv", "impl": "hoccl", "size": 2 << 20, "host_us": 21.2, "gbps": 0.0}]}))
    (tmp_path / "contention.json").write_text(json.dumps({"kind": "contention", "date": "d", "rows": [
        {"load": "gemm", "comm": "alone", "slowdown": 1.0, "spread": [0.99, 1.01], "delivered_gbps": 0.0,
         "watts": None, "sm_mhz": None},
        {"load": "gemm", "comm": "hoccl@200", "slowdown": 1.033, "spread": [1.027, 1.038], "delivered_gbps": 124.6,
         "watts": 605.0, "sm_mhz": 1890.0, "power_cap": 0.75},
        {"load": "gemm", "comm": "raw@200", "slowdown": 1.04, "paired": 1.012, "spread": [1.0, 1.1],
         "delivered_gbps": 130.0, "watts": None, "sm_mhz": None}]}))
    (tmp_path / "internode.json").write_text(json.dumps({"kind": "internode", "date": "d", "rows": [
        {"op": "sendrecv", "impl": "hoccl-gpu-tcp", "size": 1 << 30, "gbps": 13.76, "seconds": 0.078,
         "d2h_seconds": 0.0194, "host_path_seconds": 0.1247, "cpu_us_per_call": 261728}],
        "variants": [{"setting": "default", "gpu_seconds": 0.05932, "raw_socket_seconds": 0.0575,
                      "of_raw_sockets": 0.95, "per_round": [1.0, 0.92, 0.91, 0.99]}]}))
    assert main([str(tmp_path), "-o", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "## Launch cost: sendrecv" in text and "| 2 MiB | 21.2 |" in text
    assert "| gemm | hoccl@200 | +3.3% |  | +2.7..+3.8% | 124.6 | 605 | 1890 | 75% |" in text  # before "paired"
    assert "| gemm | raw@200 | +4.0% | +1.2% | +0.0..+10.0% | 130.0 |  |  |  |" in text
    assert "| sendrecv | 1 GiB | 13.76 | 78.00 | 19.40 |  |  |  | 124.70 | 261728 |" in text
    assert "| default | 59.32 | 57.50 | 0.95 | 1.00 0.92 0.91 0.99 |" in text
    (tmp_path / "bad.json").write_text(json.dumps({"kind": "mystery", "rows": [{}]}))
    assert main([str(tmp_path), "-o", str(tmp_path / "r.md")]) == 2


def test_contention_rows_pair_each_round_with_its_own_time_alone():
    """A load whose clock drifts by 10% between rounds: against the median time alone a variant that costs
    2% looks like -3%..+7%; paired with its round's time alone it is +2% every round."""
    from hoccl_bench.bench import contention_rows

    alone = [1.00, 1.10, 0.95, 1.05, 1.00]
    samples = {("gemm", "alone"): [{"seconds": a, "gbps": 0.0, "watts": None, "sm_mhz": None} for a in alone],
               ("gemm", "hoccl"): [{"seconds": a * 1.02, "gbps": 150.0, "watts": 600.0, "sm_mhz": 1500.0}
                                   for a in alone]}
    rows = {r["comm"]: r for r in contention_rows(samples)}
    assert rows["alone"]["paired"] == pytest.approx(1.0) and rows["alone"]["slowdown"] == pytest.approx(1.0)
    assert rows["hoccl"]["paired"] == pytest.approx(1.02)
    assert rows["hoccl"]["slowdown"] == pytest.approx(1.02)  # the medians agree here; the spread does not
    lo, hi = rows["hoccl"]["spread"]
    assert lo == pytest.approx(0.95 * 1.02) and hi == pytest.approx(1.10 * 1.02)
    assert rows["hoccl"]["watts"] == 600.0 and rows["alone"]["watts"] is None


def test_power_log_reads_the_power_cap_bit_of_each_sample():
    """nvidia-smi's clock event reasons: the share of a window's samples with the SW power cap (0x4) on."""
    from hoccl_bench.bench import PowerLog, contention_rows

    log = PowerLog.__new__(PowerLog)
    log.samples = []
    log.add(1.0, "0, 690.5, 1500, 0x0000000000000004")
    log.add(1.1, "0, 640.0, 1700, 0x0000000000000000")
    log.add(1.2, "0, 700.0, 1400, 0x000000000000000C")  # power cap and HW slowdown
    log.add(1.3, "1, 300.0, 1980, 0x0000000000000004")  # another GPU
    log.add(1.4, "0, [N/A], 1980, 0x0")                 # skipped
    log.add(1.5, "0, 600.0, 1900")                      # a driver without the field
    got = log.window(0.9, 1.3, 0)
    assert got["power_cap"] == pytest.approx(2 / 3) and got["watts"] == pytest.approx((690.5 + 640 + 700) / 3)
    assert log.window(1.45, 1.6, 0) == {"watts": 600.0, "sm_mhz": 1900.0, "power_cap": None}
    assert log.window(5.0, 6.0, 0)["power_cap"] is None
    samples = {("gemm", "alone"): [{"seconds": 1.0, "gbps": 0.0, "power_cap": 0.5}],
               ("gemm", "raw"): [{"seconds": 1.1, "gbps": 9.0, "power_cap": None}]}
    rows = {r["comm"]: r for r in contention_rows(samples)}
    assert rows["alone"]["power_cap"] == 0.5 and rows["raw"]["power_cap"] is None


def test_raw_plan_moves_each_collectives_bytes_to_the_right_place():
    """The raw baseline (in this process or the copier process) copies what the collective would."""
    from hoccl_bench.bench import raw_plan

    outs = [1000, 2000, 3000]  # every rank's output as this process sees it; 12 bytes, 4 per rank
    remote, local = raw_plan("allgather", 1, 3, outs, 50, 12)
    assert remote == [(1000 + 4, 50, 4), (3000 + 4, 50, 4)]
    assert local == [(2000 + 4, 50, 4)]
    remote, local = raw_plan("alltoall", 2, 3, outs, 50, 12)
    assert remote == [(1000 + 8, 50, 4), (2000 + 8, 54, 4)]
    assert local == [(3000 + 8, 58, 4)]
    assert raw_plan("sendrecv", 0, 2, outs[:2], 50, 12) == ([(2000, 50, 12)], [])
    assert raw_plan("sendrecv", 1, 2, outs[:2], 50, 12) == ([], [])
    remote, local = raw_plan("allgather", 1, 3, outs, 2004, 12)  # in place: the input is the own block
    assert remote == [(1000 + 4, 2004, 4), (3000 + 4, 2004, 4)] and local == []


def test_cpu_gauge_and_current_cpu():
    """The sweep's CPU gauge is a positive time of microseconds, and the CPU it names is one this process may
    run on."""
    import os

    from hoccl_bench.bench import cpu_gauge_us, current_cpu

    assert 0 < cpu_gauge_us() < 10_000
    cpu = current_cpu()
    if hasattr(os, "sched_getaffinity") and cpu is not None:
        assert cpu in os.sched_getaffinity(0)


def test_sweep_refuses_bad_iters_and_names_window_baseline():
    import pytest

    from hoccl_bench.bench import _baselines, main

    assert "hoccl-window" in _baselines("hoccl,hoccl-window")
    with pytest.raises(SystemExit, match="--iters -3"):
        main(["sweep", "--iters", "-3"])


def test_report_names_each_contention_rows_file_when_there_are_several(tmp_path):
    """Two contention runs (say, with and without CUDA_DEVICE_MAX_CONNECTIONS=1, or traffic first): each row
    names its file, and the sources say which run issued the traffic first."""
    def run(name, gbps, first):
        (tmp_path / name).write_text(json.dumps({"kind": "contention", "date": "d", "traffic_first": first,
                                                 "env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, "rows": [
            {"load": "gemm", "comm": "alone", "slowdown": 1.0, "delivered_gbps": 0.0},
            {"load": "gemm", "comm": "nccl", "slowdown": 1.08, "delivered_gbps": gbps}]}))

    run("a.json", 0.0, False)
    assert main([str(tmp_path), "-o", str(tmp_path / "r.md")]) == 0
    assert "| gemm | nccl | +8.0% |" in (tmp_path / "r.md").read_text()  # one file: no run column
    run("b.json", 17.3, True)
    assert main([str(tmp_path), "-o", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "| `a.json` | gemm | nccl | +8.0% |" in text and "| 0.0 |" in text
    assert "| `b.json` | gemm | nccl | +8.0% |" in text and "| 17.3 |" in text
    sources = [line for line in text.splitlines() if line.startswith("* `")]
    assert any("b.json" in line and "traffic issued before the load" in line for line in sources)
    assert not any("a.json" in line and "traffic issued" in line for line in sources)
    if importlib.util.find_spec("matplotlib") is not None:  # one set of plots per run, named after its file
        assert main([str(tmp_path), "-o", str(tmp_path / "r.md"), "--plots", str(tmp_path / "png")]) == 0
        names = sorted(q.name for q in (tmp_path / "png").iterdir())
        assert names == ["contention-a-gemm-curve.png", "contention-a-gemm.png", "contention-b-gemm-curve.png",
                         "contention-b-gemm.png"], names


@pytest.mark.parametrize("content, needle", [
    ({"kind": [], "rows": []}, "'kind' is []"),
    ({"kind": []}, "'kind' is []"),
    ({"rows": 5}, "'rows' is a int"),
    ({"env": "HOCCL_X=1", "rows": [{"op": "a", "impl": "b", "size": 1, "gbps": 1.0}]}, "'env' is a str"),
    ({"kind": "contention", "rows": [{"load": "gemm", "comm": "hoccl", "slowdown": 1.1, "delivered_gbps": 5,
                                      "spread": 5}]}, "spread is 5"),
    ({"kind": "internode", "variants": [{"setting": "lanes 8"}], "rows": [
        {"op": "a", "impl": "b", "size": 1, "gbps": 1.0}]}, "variant 'lanes 8' lacks gpu_seconds"),
    ({"kind": "internode", "variants": 5, "rows": []}, "'variants' is a int"),
    ({"rows": [{"op": "a", "impl": "b", "size": 1, "gbps": 1.0, "host_us": "fast"}]}, "host_us is 'fast'"),
])
def test_a_malformed_results_file_is_one_line_naming_the_field(tmp_path, capsys, content, needle):
    """Each of these gave a traceback (or exit 0) before: now exit 2 and one line naming the file and the field."""
    from hoccl_bench.report import main

    (tmp_path / "r.json").write_text(json.dumps(content))
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "r.json" in err and needle in err, err


def test_plot_names_stay_in_their_folder_and_replace_a_planted_symlink(tmp_path):
    pytest.importorskip("matplotlib")
    from hoccl_bench.report import plot

    rows = [{"kind": "bandwidth", "op": "../../escaped", "impl": "x", "size": 1 << 20, "gbps": 1.0},
            {"kind": "bandwidth", "op": "allgather", "impl": "x", "size": 1 << 20, "gbps": 2.0}]
    folder = tmp_path / "plots"
    folder.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (folder / "allgather.png").symlink_to(victim)
    written = plot(rows, folder)
    assert all(p.parent == folder for p in written), written
    assert not (tmp_path / "escaped.png").exists() and not list(tmp_path.parent.glob("escaped*"))
    assert victim.read_text() == "keep" and not (folder / "allgather.png").is_symlink()


def test_the_sweep_table_speaks_nccl_tests():
    """hoccl-bench sweep's table: size in bytes, out/in place, time per call, algbw and busbw, #wrong (blank where a
    row was not checked), as nccl-tests prints them; the report says its GB/s are algbw."""
    from hoccl_bench.report import render
    from hoccl_bench.sweep import sweep_table

    rows = [dict(op="allgather", impl="hoccl", size=1 << 30, seconds=1.43e-3, gbps=750.8, busbw=375.4, wrong=0,
                 host_us=12.1, sms=0, sm_free=True, cpu_gauge_us=1.0),
            dict(op="allgather", impl="hoccl-inplace", size=1 << 30, seconds=1.41e-3, gbps=760.2, busbw=380.1, wrong=3,
                 host_us=12.0, sms=None, sm_free=None, cpu_gauge_us=1.0),
            dict(op="allgather", impl="nccl", size=1 << 30, seconds=2.03e-3, gbps=529.1, busbw=264.6, wrong=None,
                 host_us=20.0, sms=32, sm_free=False, cpu_gauge_us=1.0)]
    head, *lines = sweep_table(rows)
    assert head.split()[:8] == ["op", "impl", "size", "place", "time(us)", "algbw", "busbw", "#wrong"]
    cells = [line.split() for line in lines]
    assert cells[0][:8] == ["allgather", "hoccl", str(1 << 30), "out", "1430.0", "750.8", "375.4", "0"]
    assert cells[1][3] == "in" and cells[1][7] == "3"
    assert cells[2][7] == "20.0"  # no #wrong for an unchecked row: the next column follows
    text = render([{**r, "kind": "bandwidth", "file": "sweep.json"} for r in rows], [])
    assert "algbw GB/s" in text
