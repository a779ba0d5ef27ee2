"""The CLIs through main([...]): happy paths, every bad input (exit 2, a message, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hoccl_compiler import load_plan
from hoccl_compiler.cli import compile_main, inspect_main


def run(main, argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_compile_default_and_inspect(tmp_cwd, capsys):
    code, out, _ = run(compile_main, ["--size", "64MiB", "--nodes", "2"], capsys)
    assert code == 0
    path = tmp_cwd / "schedules" / "alltoall-2x8-64MiB.json"
    assert path.exists() and f"verified and wrote {path.relative_to(tmp_cwd)}" in out
    assert "lower bound" in out and "naive rounds" in out
    code, out, _ = run(inspect_main, [str(path), "--verify", "--stages", "3"], capsys)
    assert code == 0 and "verify: OK" in out and "more stage(s)" in out and "dma0.0:" in out
    code, out, _ = run(inspect_main, [str(path), "--format", "json"], capsys)
    data = json.loads(out)
    assert data["gpus"] == 16 and data["ratio"] >= 1 and len(data["stage_table"]) == data["stages"]


def test_compile_each_collective(tmp_cwd, capsys):
    np.save("m.npy", np.arange(16).reshape(4, 4) * 1000)
    (tmp_cwd / "pairs.json").write_text("[[0, 3, 5000], [3, 1, 100]]")
    cases = [
        ["allgather", "--size", "1MiB"],
        ["alltoallv", "--matrix", "m.npy"],
        ["matrix", "--matrix", "m.npy"],
        ["broadcast", "--size", "1MiB", "--root", "2"],
        ["scatter", "--size", "1MiB", "--root", "1"],
        ["gather", "--size", "1MiB", "--root", "3", "--in-place"],
        ["sendrecv", "--size", "1MiB"],
        ["sendrecv", "--pairs", "pairs.json"],
    ]
    for i, args in enumerate(cases):
        out_file = tmp_cwd / f"p{i}.json.gz"
        code, _, err = run(compile_main, [*args, "--topology", "h200x2", "--nodes", "2", "-o", str(out_file), "-q"],
                           capsys)
        assert code == 0, (args, err)
        plan = load_plan(out_file)
        assert plan.collective.kind == args[0] and plan.num_ranks == 4


def test_inspect_notes_same_gpu_copies_unless_in_place(tmp_cwd, capsys):
    """A plan with local copies says they run on SMs (the CUDA driver's copy kernel) and how to avoid them."""
    for extra, noted in (([], True), (["--in-place"], False)):
        code, _, err = run(compile_main, ["allgather", "--size", "1MiB", "--topology", "h200x2", "--nodes", "1",
                                          "-o", "ag.json", "-q", *extra], capsys)
        assert code == 0, err
        code, out, _ = run(inspect_main, ["ag.json"], capsys)
        assert code == 0
        assert ("note         local 1 MiB: same-GPU copies, which the CUDA driver runs on SMs" in out) == noted
        assert ("--in-place" in out) == noted
        assert ("HOCCL_LOCAL_COPIES=peer" in out) == noted  # a one-node plan: the intra-node runtime's setting
    code, _, err = run(compile_main, ["alltoall", "--size", "1MiB", "--topology", "h200x2", "--nodes", "2",
                                      "-o", "a2a.json", "-q"], capsys)
    code, out, _ = run(inspect_main, ["a2a.json"], capsys)
    assert code == 0 and "same-GPU copies" in out and "HOCCL_LOCAL_COPIES" not in out
    assert "--in-place" not in out  # All-to-All has no in-place form: no advice to compile one
    for kind, offered in (("broadcast", True), ("scatter", False)):  # the advice follows the collective
        code, _, err = run(compile_main, [kind, "--size", "1MiB", "--topology", "h200x2", "--nodes", "2",
                                          "-o", f"{kind}.json", "-q"], capsys)
        code, out, _ = run(inspect_main, [f"{kind}.json"], capsys)
        assert code == 0 and "same-GPU copies" in out and ("compile it --in-place" in out) == offered, out


def test_dump_after_each_pass(tmp_cwd, capsys):
    for name in ("traffic", "expand", "stages", "chunks", "plan", "verify"):
        code, _, err = run(compile_main, ["allgather", "--size", "64KiB", "--nodes", "2", "--gpus-per-node", "2",
                                          "-o", "ag.json", "--dump-after", name, "-q"], capsys)
        assert code == 0, err
        dumped = json.loads((tmp_cwd / f"ag.json.{name}.json").read_text())
        assert dumped["pass"] == name
    assert "origin_matrix" in json.loads((tmp_cwd / "ag.json.traffic.json").read_text())
    assert "hoccl_matrix" in json.loads((tmp_cwd / "ag.json.expand.json").read_text())


def test_forwarding_none_and_topology_file(tmp_cwd, capsys):
    (tmp_cwd / "topo.json").write_text(json.dumps(dict(nodes=2, gpus_per_node=2, nvlink_gbps=100, nic_gbps=10)))
    code, _, err = run(compile_main, ["alltoall", "--topology", "topo.json", "--size", "4KiB", "--forwarding", "none",
                                      "-o", "a.json", "-q"], capsys)
    assert code == 0, err
    plan = load_plan(tmp_cwd / "a.json")
    assert plan.topology.forwarding == "none"
    assert {plan.roles[r].name for s in plan.stages for r in s.transfers.role} == {"local", "native", "rdma"}


@pytest.mark.parametrize("argv,needle", [
    (["allreduce"], "copy engine can only copy"),
    (["reducescatter"], "reduction"),
    (["reduce"], "reduction"),
    (["allgather", "--size", "1000", "--nodes", "2"], "not a multiple of the 16 ranks"),
    (["allgather", "--size", "12 parsecs"], "unknown size unit"),
    (["frobnicate"], "unknown collective"),
    (["alltoallv"], "needs --matrix"),
    (["alltoallv", "--matrix", "nope.npy"], "cannot read matrix"),
    (["alltoall", "--matrix", "m.npy"], "applies to alltoallv"),
    (["broadcast", "--root", "99"], "root 99 is out of range"),
    (["broadcast", "--root", "-1"], "root -1 is out of range for 16 ranks; pick --root in 0..15"),
    (["reduce_scatter"], "reduction"),
    (["all_reduce"], "copy engine can only copy"),
    (["alltoall", "--root", "1"], "--root applies to"),
    (["alltoall", "--topology", "tpu-pod"], "neither a preset"),
    (["alltoall", "--topology", "paper-h800", "--nodes", "0"], "nodes"),
    (["alltoall", "--gpus-per-node", "0"], "--gpus-per-node 0: give a whole number >= 1"),
    (["alltoall", "--chunk", "0"], "positive"),
    (["broadcast", "--topology", "dgx-h100", "--nodes", "2", "--size", "1GiB", "--net-chunk", "3"],
     "give a larger chunk size (--chunk, and --net-chunk for the network transfers), at least 256 B"),
    (["alltoall", "--in-place"], "no in-place form"),
    (["sendrecv", "--pairs", "missing.csv"], "cannot read pairs"),
    (["alltoall", "--bogus-flag"], "unrecognized arguments"),
    (["alltoall", "--nodes", "two"], "invalid int value"),
    (["alltoall", "--max-extra-time", "2"], "must be a fraction in 0..1"),
])
def test_compile_bad_input_exits_2(tmp_cwd, capsys, argv, needle):
    code, out, err = run(compile_main, [*argv, "-o", "x.json"], capsys)
    assert code == 2
    assert needle in err and err.startswith("hoccl-compile: error:")
    assert not (tmp_cwd / "x.json").exists()


@pytest.mark.parametrize("name,text", [
    ("m.json", "[[0, 1, 2], [3, 0], [4, 5, 0]]"),
    ("m.csv", "0,1,2\n3,0\n4,5,0\n"),
])
def test_a_matrix_file_with_rows_of_other_lengths_is_refused_by_row(tmp_cwd, capsys, name, text):
    (tmp_cwd / name).write_text(text)
    code, _, err = run(compile_main, ["alltoallv", "--matrix", name, "-o", "x.json"], capsys)
    assert code == 2
    assert f"matrix file {name}: row 1 has 2 entries and row 0 has 3" in err


@pytest.mark.parametrize("name,kind", [("all_gather", "allgather"), ("all_to_all", "alltoall"),
                                       ("ALL-GATHER", "allgather"), ("send_recv", "sendrecv")])
def test_torchs_and_spelled_out_collective_names_compile(tmp_cwd, capsys, name, kind):
    code, _, err = run(compile_main, [name, "--nodes", "1", "--size", "64KiB", "-o", "x.json", "-q"], capsys)
    assert code == 0, err
    assert load_plan(tmp_cwd / "x.json").collective.kind == kind


def test_inspect_bad_input_exits_2(tmp_cwd, capsys):
    assert run(compile_main, ["allgather", "--size", "64KiB", "-o", "ag.json", "-q"], capsys)[0] == 0
    (tmp_cwd / "corrupt.json").write_text('{"schema_version": 1, "stages": "nope"')
    cases = [
        (["missing.json"], "cannot read plan"),
        (["corrupt.json"], "not valid JSON"),
        (["ag.json", "--topology", "paper-h800", "--nodes", "4"], "recompile the plan for this topology"),
        (["ag.json", "--format", "yaml"], "invalid choice"),
    ]
    for argv, needle in cases:
        code, _, err = run(inspect_main, argv, capsys)
        assert code == 2 and needle in err, (argv, err)


def test_inspect_plot(tmp_cwd, capsys):
    pytest.importorskip("matplotlib")
    argv = ["alltoall", "--size", "1MiB", "--gpus-per-node", "2", "-o", "a.json", "-q"]
    assert run(compile_main, argv, capsys)[0] == 0
    code, out, _ = run(inspect_main, ["a.json", "--plot", "a.png"], capsys)
    assert code == 0 and (tmp_cwd / "a.png").read_bytes()[:4] == b"\x89PNG"


def test_the_plot_draws_every_cost_the_prediction_counts_and_big_plans_aggregated(tmp_cwd, capsys):
    """The timeline's parts add up to the predicted time in its title (the call start and the network host work
    included: a 2x8 All-to-All's drawing ended at ~750 us under "predicted 18178.8 us"); a plan past the chunk limit
    is drawn per queue and stage, quickly; a symlink planted at the output name is replaced, not written through."""
    import time

    pytest.importorskip("matplotlib")
    from hoccl_compiler.codec import load_plan
    from hoccl_compiler.plot import GANTT_CHUNK_LIMIT, cost_segments, plot_plan, queue_busy

    argv = ["alltoall", "--topology", "paper-h800", "--nodes", "2", "--size", "64MiB", "-o", "a.json", "-q"]
    assert run(compile_main, argv, capsys)[0] == 0
    plan = load_plan("a.json")
    parts = cost_segments(plan)
    assert [p[0] for p in parts][0] == "call start" and "network transfers (host)" in [p[0] for p in parts]
    assert sum(d for _, _, d in parts) == pytest.approx(plan.report.predicted_time_s, rel=1e-9)
    assert all(abs(parts[i][1] + parts[i][2] - parts[i + 1][1]) < 1e-12 for i in range(len(parts) - 1))
    argv = ["alltoall", "--topology", "paper-h800", "--nodes", "4", "--size", "1GiB", "--chunk", "256KiB",
            "-o", "b.json", "-q"]
    assert run(compile_main, argv, capsys)[0] == 0
    big = load_plan("b.json")
    assert big.num_chunk_entries() > GANTT_CHUNK_LIMIT
    busy = queue_busy(big)
    assert len({q for q, *_ in busy}) == len(big.queues.gpu) - 32  # every queue that moves bytes (local ones don't)
    victim = tmp_cwd / "victim.txt"
    victim.write_text("keep")
    (tmp_cwd / "b.png").symlink_to(victim)
    said = []
    t0 = time.monotonic()
    plot_plan(big, "b.png", progress=said.append)
    assert time.monotonic() - t0 < 30 and any("busy time per stage" in m for m in said)
    assert victim.read_text() == "keep" and (tmp_cwd / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_internal_errors_exit_1_without_traceback(tmp_cwd, capsys, monkeypatch):
    import hoccl_compiler.pipeline as pipeline

    def boom(*args, **kwargs):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(pipeline, "compile_state", boom)
    code, _, err = run(compile_main, ["alltoall"], capsys)
    assert code == 1 and "internal error" in err and "kaboom" in err


def test_compile_bad_topology_file_exits_2(tmp_cwd, capsys):
    (tmp_cwd / "bad.json").write_text(json.dumps(dict(nodes=2, gpus_per_node=4, nvlink_gbps=400, nic_gbps=50,
                                                      peers=[1, 2, 3, 0])))
    code, _, err = run(compile_main, ["alltoall", "--topology", "bad.json", "-o", "x.json"], capsys)
    assert code == 2 and "not an involution" in err and "bad.json" in err
    (tmp_cwd / "neg.json").write_text(json.dumps(dict(nodes=2, gpus_per_node=2, nvlink_gbps=-1, nic_gbps=50)))
    code, _, err = run(compile_main, ["alltoall", "--topology", "neg.json", "-o", "x.json"], capsys)
    assert code == 2 and "nvlink_gbps" in err
    (tmp_cwd / "list.json").write_text("[1, 2]")
    code, _, err = run(compile_main, ["alltoall", "--topology", "list.json", "-o", "x.json"], capsys)
    assert code == 2 and "must hold an object" in err
    assert not (tmp_cwd / "x.json").exists()


def test_inspect_wrong_schema_version_exits_2(tmp_cwd, capsys):
    """A plan of another schema version (here version 1, before plans carried resident offsets) is refused in one
    line that says to recompile it."""
    assert run(compile_main, ["allgather", "--size", "64KiB", "-o", "ag.json", "-q"], capsys)[0] == 0
    data = json.loads((tmp_cwd / "ag.json").read_text())
    data["schema_version"] = 1
    del data["ranks"]["resident_offset"], data["ranks"]["resident_bytes"]
    (tmp_cwd / "v1.json").write_text(json.dumps(data))
    code, _, err = run(inspect_main, ["v1.json"], capsys)
    assert code == 2 and "schema_version 1" in err and "recompile" in err and len(err.strip().splitlines()) == 1


class _Terminal:
    """A stderr that says it is a terminal and keeps what is written."""

    def __init__(self):
        self.text = ""

    def isatty(self):
        return True

    def write(self, text):
        self.text += text

    def flush(self):
        pass


def test_progress_is_a_status_line_on_a_terminal_and_quiet_elsewhere():
    from hoccl_compiler.cli import _Progress

    now = [0.0]
    clock = lambda: now[0]  # noqa: E731
    term = _Terminal()
    bar = _Progress(term, 4, clock=clock, width=60, tick_s=None)  # ticks by hand below
    bar("pass traffic: 1 ms")  # within the first second: nothing yet (short compiles stay quiet)
    assert term.text == ""
    now[0] = 2.5
    bar("pass expand: 3 ms")
    bar("stages: 256 matchings, 99.10% of the busiest line")
    assert term.text.startswith("\r[##########..........] 2/4 passes    2.5s  pass expand")
    last = term.text.rsplit("\r", 1)[1]
    assert last.startswith("[##########..........] 2/4 passes") and "stages: 256 ma" in last
    assert all(len(line) <= 59 for line in term.text.split("\r"))  # cut to the terminal's width
    now[0] = 64.0  # a long pass sends no message: the line's clock still moves (the ticker's redraw)
    bar.tick()
    last = term.text.rsplit("\r", 1)[1]
    assert last.startswith("[##########..........] 2/4 passes   64.0s") and "stages: 256 ma" in last
    bar("network chunks of 1024 KiB: compiling that plan too")  # --net-chunk auto: another compile, passes anew
    assert term.text.rsplit("\r", 1)[1].startswith("[....................] 0/4 passes")
    bar("pass traffic: 1 ms")
    last = term.text.rsplit("\r", 1)[1]
    assert last.startswith("[#####...............] 1/4 passes")
    bar.close()
    assert term.text.endswith("\r" + " " * len(last) + "\r")  # the line is cleared before the result is printed
    for verbose, quiet in ((False, False), (False, True)):  # not a terminal, or -q: nothing at all
        log = _Terminal()
        log.isatty = lambda: False
        quietly = _Progress(_Terminal() if quiet else log, 4, verbose=verbose, quiet=quiet, clock=clock)
        now[0] = 5.0
        quietly("pass traffic: 1 ms")
        quietly.close()
        assert log.text == ""
    lines = _Terminal()
    verbose = _Progress(lines, 4, verbose=True, clock=clock)  # -v: a timestamped line each, on a terminal too
    verbose("pass traffic: 1 ms")
    assert lines.text == "[   0.00s] pass traffic: 1 ms\n"


def test_compile_progress_on_stderr_only_when_asked(tmp_cwd, capsys):
    code, out, err = run(compile_main, ["--size", "1MiB", "--nodes", "2", "-o", "a.json"], capsys)
    assert code == 0 and err == ""  # stderr is not a terminal here: quiet
    code, out, err = run(compile_main, ["--size", "1MiB", "--nodes", "2", "-o", "b.json", "-v"], capsys)
    assert code == 0 and "pass traffic" in err and "pass verify" in err and "wrote b.json" in err


def test_pairs_csv_may_have_a_header_and_help_lists_the_in_place_kinds(tmp_path, capsys):
    """A src,dst,bytes header row is read as a header (it was refused as a bad row); --help lists exactly the
    collectives that have an in-place form (it listed scatter, which is refused)."""
    from hoccl_compiler.collective import IN_PLACE_KINDS, load_pairs

    f = tmp_path / "pairs.csv"
    f.write_text("src,dst,bytes\n0,1,4KiB\n1,0,1M\n")
    assert load_pairs(f) == ((0, 1, 4096), (1, 0, 1 << 20))
    f.write_text("0,1,4KiB\n")
    assert load_pairs(f) == ((0, 1, 4096),)
    with pytest.raises(SystemExit):
        compile_main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"in-place variant ({', '.join(IN_PLACE_KINDS)})" in text and "scatter" not in IN_PLACE_KINDS


def test_inspect_into_a_closed_pipe_stops_quietly(tmp_path):
    """``hoccl-inspect PLAN | head -1``: the reader leaves, the CLI exits 0 without a message (it exited 2 with
    'Broken pipe')."""
    import subprocess
    import sys

    plan = tmp_path / "p.json"
    assert compile_main(["alltoall", "--topology", "paper-h800", "--nodes", "2", "--size", "64MiB", "-o",
                         str(plan)]) == 0
    code = ("import sys; from hoccl_compiler.cli import inspect_main; "
            f"sys.exit(inspect_main([{str(plan)!r}, '--stages', '2000']))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # nobody reads: the first write meets EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 0 and err == "", err


def test_the_status_line_redraws_on_its_own_between_messages():
    """On a terminal the status line redraws every tick_s whatever the passes say (it sat at one time for two
    minutes on a --chunk 1KiB compile); it stops at close."""
    import time

    from hoccl_compiler.cli import _Progress

    term = _Terminal()
    bar = _Progress(term, 4, after_s=0.0, width=80, tick_s=0.02)
    bar("pass traffic: 1 ms")
    deadline = time.monotonic() + 10
    while term.text.count("passes") < 4 and time.monotonic() < deadline:  # no message meanwhile: the ticker draws
        time.sleep(0.02)
    bar.close()
    times = [float(line.split("passes")[1].split("s")[0]) for line in term.text.split("\r") if "passes" in line]
    assert len(times) >= 4 and times[-1] > times[0]
    after = term.text
    time.sleep(0.1)
    assert term.text == after  # nothing drawn after close


def test_a_tiny_chunk_is_warned_about(tmp_cwd, capsys, monkeypatch):
    """An explicit --chunk that makes more than CHUNK_ENTRIES_WARN chunk entries: a warning names the count and
    the fix (a 1KiB compile wrote a 111 MB plan without a word)."""
    from hoccl_compiler import cli

    monkeypatch.setattr(cli, "CHUNK_ENTRIES_WARN", 1000)
    code, out, err = run(compile_main, ["alltoall", "--nodes", "2", "--size", "1MiB", "--chunk", "4KiB", "-o",
                                        "a.json"], capsys)
    assert code == 0 and "warning: --chunk 4KiB makes" in err and "--chunk auto" in err
    code, out, err = run(compile_main, ["alltoall", "--nodes", "2", "--size", "1MiB", "-o", "b.json"], capsys)
    assert code == 0 and "warning" not in err


def _hugepage_flag():
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        from numpy.core.multiarray import _set_madvise_hugepage
    return _set_madvise_hugepage


@pytest.mark.parametrize("env", [None, "1"])
def test_a_cli_run_drops_numpys_hugepage_advice_unless_numpy_is_told(tmp_cwd, capsys, monkeypatch, env):
    """Large arrays advised onto huge pages cost 10 s a GiB to touch on the 2-core VM (cli._no_hugepage_advice):
    a CLI run turns NumPy's advice off for its body and puts it back after; NUMPY_MADVISE_HUGEPAGE, where set,
    decides instead."""
    from hoccl_compiler import cli

    flag = _hugepage_flag()
    seen = []
    real = cli._compile_and_write

    def spy(*args, **kwargs):
        seen.append(flag(True))  # the advice as the body runs (and set back to it at once)
        flag(seen[-1])
        return real(*args, **kwargs)

    if env is None:
        monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    else:
        monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", env)
    monkeypatch.setattr(cli, "_compile_and_write", spy)
    before = flag(True)
    try:
        code, _, _ = run(compile_main, ["--size", "1MiB", "--nodes", "2", "-q"], capsys)
        after = flag(True)
    finally:
        flag(before)
    assert code == 0 and seen == [env is not None] and after is True


class _FakeLibc:
    """A C library's malloc tuning calls, recorded (``mallopt`` answers 1: accepted)."""

    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append(("mallopt", param, value))
        return 1

    def malloc_trim(self, pad):
        self.calls.append(("malloc_trim", pad))
        return 1


def test_a_cli_run_keeps_the_memory_it_frees_and_puts_mallocs_defaults_back(tmp_cwd, capsys, monkeypatch):
    """cli._memory_kept: during the body malloc neither maps large blocks apart nor trims (M_MMAP_MAX 0,
    M_TRIM_THRESHOLD at its largest), so freed arrays are reused instead of faulted in afresh; after it glibc's
    defaults come back and what was kept is trimmed. A C library without these calls is left alone."""
    import ctypes

    from hoccl_compiler import cli

    libc = _FakeLibc()
    during = []
    real = cli._compile_and_write

    def spy(*args, **kwargs):
        during.append(list(libc.calls))
        return real(*args, **kwargs)

    monkeypatch.setattr(ctypes, "CDLL", lambda name: libc)
    monkeypatch.setattr(cli, "_compile_and_write", spy)
    code, _, _ = run(compile_main, ["--size", "1MiB", "--nodes", "2", "-q"], capsys)
    assert code == 0
    assert during == [[("mallopt", -4, 0), ("mallopt", -1, 2**31 - 1)]]
    assert libc.calls[2:] == [("mallopt", -4, 65536), ("mallopt", -1, 128 * 1024), ("malloc_trim", 0)]

    class NoMallopt:  # musl, macOS: no such symbols
        def __getattr__(self, name):
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", lambda name: NoMallopt())
    calls = len(libc.calls)
    code, _, err = run(compile_main, ["--size", "1MiB", "--nodes", "2", "-q"], capsys)
    assert code == 0 and err == "" and len(during) == 2 and len(libc.calls) == calls


@pytest.mark.parametrize("edit, named", [({"num_stages": 2**63}, "num_stages is 9223372036854775808"),
                                         ({"stage_time_s": [1e-6]}, "stage_time_s has 1 entries")])
def test_inspect_refuses_a_pattern_plan_whose_stage_count_and_times_disagree(tmp_cwd, capsys, edit, named):
    """hoccl-inspect prints a pattern plan's stage table without --verify; a file whose num_stages and stage_time_s
    disagree (an edit, or damage) is refused on load with the two values named, not an IndexError (session 64's
    fuzzing found one)."""
    code, _, _ = run(compile_main, ["alltoall", "--nodes", "3", "--size", "24MiB", "--pattern", "on", "-o", "p.json",
                                    "-q"], capsys)
    assert code == 0
    data = json.loads(Path("p.json").read_text())
    assert len(data["stage_time_s"]) == data["num_stages"] > 1
    data.update(edit)
    Path("bad.json").write_text(json.dumps(data))
    code, out, err = run(inspect_main, ["bad.json"], capsys)
    assert code == 2 and out == "" and named in err and "recompile it" in err and "Traceback" not in err


def _damage(data: dict, where: str) -> None:
    """One index of a full plan's JSON pointed outside what it indexes."""
    tr = data["stages"][0]["transfers"]
    if where in ("after", "role", "src", "queue", "flow"):
        tr[where][1] = 2**62
    elif where == "flows.dst":
        data["flows"]["dst"][0] = -3
    elif where == "queues.gpu":
        data["queues"]["gpu"][0] = 10**6
    elif where == "chunks":
        data["stages"][0]["chunks"][0] = len(tr["flow"])


DAMAGE = [("after", "waits on a transfer outside its stage"), ("role", "unknown role"), ("src", "GPU outside 0..G-1"),
          ("queue", "queue outside"), ("flow", "flow index outside"),
          ("flows.dst", "flow 0's dst is -3, outside 0..15"), ("queues.gpu", "queue 0 is on GPU 1000000"),
          ("chunks", "chunk order names transfer")]


@pytest.mark.parametrize("where, named", DAMAGE)
def test_inspect_and_simulate_refuse_a_damaged_index_by_name(tmp_cwd, capsys, where, named):
    """hoccl-inspect reads an unverified plan by index (its summary, --simulate): a damaged index (a transfer's
    wait, role, GPU, queue or flow; a flow's GPU; a queue's GPU; a chunk order's entry) is refused with exit 2 and
    its place named (verify.check_indices), not an IndexError (session 64's fuzzing found four); simulate() raises
    PlanError the same way."""
    from hoccl_compiler import PlanError
    from hoccl_compiler.codec import plan_from_json
    from hoccl_compiler.simulate import simulate

    code, _, _ = run(compile_main, ["allgather", "--nodes", "2", "--size", "3MiB", "-o", "p.json", "-q",
                                    "--encoding", "full"], capsys)
    assert code == 0
    data = json.loads(Path("p.json").read_text())
    _damage(data, where)
    Path("bad.json").write_text(json.dumps(data))
    for extra in ([], ["--simulate"], ["--format", "json"]):
        code, out, err = run(inspect_main, ["bad.json", *extra], capsys)
        assert code == 2 and out == "" and named in err and "Traceback" not in err, (extra, err)
    with pytest.raises(PlanError, match=named.replace("(", r"\(").replace(".", r"\.")):
        simulate(plan_from_json(json.dumps(data)))


@pytest.mark.parametrize("flag", ["--nodes", "--gpus-per-node", "--dma-queues"])
@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_topology_count_below_one_is_refused_naming_the_flag(flag, value, tmp_cwd, capsys):
    """Found by session 68's hoccl-inspect fuzz: these reached pydantic ("nodes: Input should be greater than or
    equal to 1")."""
    code, _, err = run(compile_main, ["alltoall", "--topology", "paper-h800", "--size", "1MiB", flag, value], capsys)
    assert code == 2 and f"{flag} {value}: give a whole number >= 1" in err, err
    code, _, _ = run(compile_main, ["alltoall", "--topology", "paper-h800", "--size", "1MiB", "-o", "p.json"], capsys)
    assert code == 0
    code, _, err = run(inspect_main, ["p.json", "--topology", "paper-h800", flag, value], capsys)
    assert code == 2 and f"{flag} {value}: give a whole number >= 1" in err, err


def test_a_plan_given_as_the_topology_is_named_as_a_plan(tmp_cwd, capsys):
    code, _, _ = run(compile_main, ["alltoall", "--topology", "paper-h800", "--size", "1MiB", "-o", "p.json"], capsys)
    assert code == 0
    for main, argv in ((inspect_main, ["p.json"]), (compile_main, ["alltoall", "--size", "1MiB", "-o", "q.json"])):
        code, _, err = run(main, [*argv, "--topology", "p.json"], capsys)
        assert code == 2 and "p.json is a HOCCL plan, not a topology file: give a preset" in err, err
