"""examples/gc_steps.py: the training examples' ``--gc-every`` (torchtitan's collector every N steps)."""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from gc_steps import Collector, add_option  # noqa: E402


class _Cycle:
    def __init__(self):
        self.me = self


def _garbage(n: int = 2000) -> None:
    for _ in range(n):
        _Cycle()


def test_every_n_steps_the_collector_is_off_and_collects_between_steps():
    assert gc.isenabled()
    with Collector(3) as c:
        assert not gc.isenabled()
        for _ in range(7):
            _garbage()
            c.step_done()
        s = c.summary()
    assert gc.isenabled()  # given back as found
    assert s["steps"] == 7
    assert s["between_steps"]["count"] == 2  # after steps 3 and 6
    assert s["automatic"]["count"] == 0  # 14,000 cycles made, none collected by Python itself
    assert "every 3 steps" in c.line() and "2 between steps" in c.line()


def test_by_default_python_collects_and_the_collections_are_timed():
    with Collector(0) as c:
        assert gc.isenabled()
        for _ in range(5):
            _garbage()
            c.step_done()
    s = c.summary()
    assert s["between_steps"]["count"] == 0
    assert s["automatic"]["count"] > 0 and s["automatic"]["max_ms"] > 0
    assert "as Python runs it" in c.line()


def test_a_collector_found_off_stays_off_and_a_negative_count_is_refused():
    gc.disable()
    try:
        with Collector(2):
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(ValueError, match="--gc-every -1"):
        Collector(-1)


def test_the_examples_option_takes_a_step_count_and_refuses_a_negative_one(capsys):
    import argparse

    p = argparse.ArgumentParser()
    add_option(p)
    assert p.parse_args([]).gc_every == 0 and p.parse_args(["--gc-every", "50"]).gc_every == 50
    with pytest.raises(SystemExit):
        p.parse_args(["--gc-every", "-1"])
    assert "--gc-every -1: give 0 (Python's own collector) or a number of steps >= 1" in capsys.readouterr().err
