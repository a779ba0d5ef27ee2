"""The network proxy's trace summary (hoccl_runtime.net.trace) on trace files written by write_trace."""

from __future__ import annotations

from hoccl_runtime.net.trace import STEPS, summarize, write_trace


def _row(call: str, start: float, arrived: float) -> tuple:
    """A call whose steps follow each other 10 us apart from ``start`` (s), its message in at ``arrived`` (s)."""
    times = [arrived] + [start + 10e-6 * k for k in range(1, len(STEPS))]
    return (call, *times, (5e-6, 7e-6))


def test_the_summary_gives_the_way_in_from_the_call_before(tmp_path):
    """Calls 1 ms apart, each through 100 us after its start: the second arrives 200 us before the first is through
    (issued early), the third 300 us after (its caller late), the fourth 100 us after."""
    first_end = 100e-6  # the copies of a call starting at s end at s + 10 us x (len(STEPS) - 1) = s + 100 us
    assert abs(10e-6 * (len(STEPS) - 1) - first_end) < 1e-12
    rows = [_row("allgather 8", 0.0, 0.0), _row("allgather 8", 1e-3, first_end - 200e-6),
            _row("allgather 8", 2e-3, 1e-3 + first_end + 300e-6), _row("allgather 8", 3e-3, 2e-3 + first_end + 100e-6),
            _row("broadcast 4", 4e-3, 4e-3)]
    write_trace(str(tmp_path / "t"), 0, rows)
    text = summarize(str(tmp_path / "t"))
    line = next(x for x in text.splitlines() if "after the call before it was through" in x)
    # arrived: -200, +300, +100 (p50 +100); taken (start + 10 us): +910, +910, +910; stream (start + 50 us): +950
    assert line.startswith("  allgather 8, after") and "arrived +100," in line and "taken +910," in line, line
    assert "its stream there +950;" in line, line
    # the arrivals at 0, -100, 1,400 and 2,200 us: apart -100, 1,500 and 800 (p50 800)
    assert "arrivals 800 apart (x3)" in line, line


def test_a_single_call_has_no_way_in(tmp_path):
    write_trace(str(tmp_path / "t"), 0, [_row("sendrecv 0->1 8", 0.0, 0.0)])
    assert "sendrecv 0->1 8: no call before it to measure the way in from" in summarize(str(tmp_path / "t"))


def test_a_step_never_seen_is_a_dash(tmp_path):
    """Calls whose stream the trace never saw (a blank step) give "-" there, not a number."""
    rows = []
    for k in range(3):
        call, *times, gap = _row("allgather 8", k * 1e-3, k * 1e-3)
        times[STEPS.index("stream")] = None
        rows.append((call, *times, gap))
    write_trace(str(tmp_path / "t"), 0, rows)
    line = next(x for x in summarize(str(tmp_path / "t")).splitlines() if "was through" in x)
    assert "its stream there -;" in line and "arrived +900," in line and "arrivals 1000 apart (x2)" in line, line


def test_the_summary_gives_each_steps_tail_and_the_calls_whole_time(tmp_path):
    """Ten calls whose stream-to-staged step takes 10 us, but 910 us in two of them: the median stays at 10, the
    90th percentile shows the slow ones; the time from the stream to the copies through is 50 us a call, 950 in the
    slow ones."""
    rows = []
    for k in range(10):
        call, *times, gap = _row("allgather 8", k * 1e-2, k * 1e-2)
        if k >= 8:
            i = STEPS.index("staged")
            times[i:] = [t + 900e-6 for t in times[i:]]
        rows.append((call, *times, gap))
    write_trace(str(tmp_path / "t"), 0, rows)
    lines = summarize(str(tmp_path / "t")).splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("  allgather 8 x10:"))
    assert "staged +10," in lines[at], lines[at]
    assert lines[at + 1].startswith("    p90: ") and "staged +910," in lines[at + 1], lines[at + 1]
    # stream is step 5 (start + 50 us), copies step 10 (start + 100 us): 50 us, and 950 in the slow call
    assert lines[at + 2] == "    from its stream to its copies through: p10 50 p50 50 p90 950", lines[at + 2]
