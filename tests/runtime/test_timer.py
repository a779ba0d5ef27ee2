"""hoccl_runtime._timer.fine_sleeps: the calling thread's timer slack for a block (Linux), put back after."""

from __future__ import annotations

import pytest

from hoccl_runtime._timer import PR_GET_TIMERSLACK, _prctl, fine_sleeps
from hoccl_runtime.errors import HocclError


def _slack() -> int:
    return _prctl().prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)


@pytest.mark.skipif(_prctl() is None, reason="no prctl (not Linux)")
def test_fine_sleeps_sets_the_threads_slack_for_the_block_and_puts_it_back(monkeypatch):
    import threading

    before = _slack()
    with fine_sleeps():
        assert _slack() == 1000
        with fine_sleeps(5000):
            assert _slack() == 5000
        assert _slack() == 1000
        seen = []
        t = threading.Thread(target=lambda: seen.append(_slack()))  # a thread started here inherits it
        t.start()
        t.join()
        assert seen == [1000]
    assert _slack() == before
    monkeypatch.setenv("HOCCL_TIMER_SLACK_NS", "0")  # 0: the kernel's, untouched
    with fine_sleeps():
        assert _slack() == before
    monkeypatch.setenv("HOCCL_TIMER_SLACK_NS", "20000")
    with fine_sleeps():
        assert _slack() == 20000
    assert _slack() == before


def test_a_bad_timer_slack_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv("HOCCL_TIMER_SLACK_NS", "fast")
    with pytest.raises(HocclError, match="HOCCL_TIMER_SLACK_NS='fast' is not an integer"), fine_sleeps():
        pass
    monkeypatch.setenv("HOCCL_TIMER_SLACK_NS", "-5")
    with pytest.raises(HocclError, match="out of range"), fine_sleeps():
        pass
