"""Every HOCCL_* variable goes through hoccl_runtime.settings, is listed in docs/settings.md, and a bad
value is a clear error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hoccl_runtime.errors import HocclError
from hoccl_runtime.settings import SETTINGS, env_flag, env_float, env_int

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_table_is_the_settings_table():
    rows = re.findall(r"^\| `(HOCCL_[A-Z_]+)` \| (.*?) \|", (ROOT / "docs" / "settings.md").read_text(), re.M)
    assert [name for name, _ in rows] == list(SETTINGS)
    for name, default in rows:
        assert default == (f"`{SETTINGS[name][0]}`" if SETTINGS[name][0] else "(unset)"), name


def test_every_variable_the_code_reads_is_a_setting():
    used = set()
    for folder in ("hoccl_runtime", "hoccl_compiler"):
        for path in (ROOT / folder).rglob("*.py"):
            used |= set(re.findall(r"HOCCL_[A-Z][A-Z_]*[A-Z]", path.read_text()))
    assert used - {"HOCCL_TCP"} <= set(SETTINGS), sorted(used - set(SETTINGS))


def test_bad_values_name_the_variable(monkeypatch):
    monkeypatch.setenv("HOCCL_EAGER_BYTES", "4MiB")
    with pytest.raises(HocclError, match=r"HOCCL_EAGER_BYTES='4MiB' is not an integer.*default 4194304"):
        env_int("HOCCL_EAGER_BYTES", 4 << 20, 0)
    monkeypatch.setenv("HOCCL_EAGER_BYTES", "-1")
    with pytest.raises(HocclError, match="HOCCL_EAGER_BYTES=-1 is out of range: give at least 0"):
        env_int("HOCCL_EAGER_BYTES", 4 << 20, 0)
    monkeypatch.setenv("HOCCL_DMA_QUEUES", "9")
    with pytest.raises(HocclError, match="give 1..4"):
        env_int("HOCCL_DMA_QUEUES", 1, 1, 4)
    monkeypatch.setenv("HOCCL_PACE_PERIOD_US", "0")
    with pytest.raises(HocclError, match="HOCCL_PACE_PERIOD_US=0 must be positive"):
        env_float("HOCCL_PACE_PERIOD_US", 250.0)
    monkeypatch.setenv("HOCCL_EAGER_COLLECTIVES", "yes")
    with pytest.raises(HocclError, match="give 1 .on. or 0 .off."):
        env_flag("HOCCL_EAGER_COLLECTIVES", False)
    monkeypatch.setenv("HOCCL_GRAPH_TAIL_DIRECT", " 0 ")
    assert env_flag("HOCCL_GRAPH_TAIL_DIRECT", True) is False
    monkeypatch.setenv("HOCCL_EAGER_BYTES", "")
    assert env_int("HOCCL_EAGER_BYTES", 4 << 20, 0) == 4 << 20  # empty: the default
    with pytest.raises(KeyError, match="not a HOCCL setting"):
        env_int("HOCCL_NOT_A_SETTING", 1, 0)


def test_a_communicator_refuses_a_bad_setting_before_allocating(monkeypatch):
    import fake_cuda

    fake_cuda.install(monkeypatch)
    from hoccl_runtime import comm
    from hoccl_runtime.comm import intranode

    made = []
    monkeypatch.setattr(intranode, "_SharedHost", lambda *a, **k: made.append(a))  # nothing shared may be made
    monkeypatch.setenv("HOCCL_GRAPH_AFTER", "often")
    with pytest.raises(HocclError, match="HOCCL_GRAPH_AFTER='often' is not an integer"):
        comm.Communicator(0, 2, 0, fake_cuda.Store())
    assert made == []
