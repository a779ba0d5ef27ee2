"""HOCCL_NET_POLL_US=0: the network proxy's loops never sleep while a call is in flight, they yield the CPU between
looks (hoccl_runtime._timer.nap): the pause itself and the setting's range. The bytes of calls through a spinning
proxy process: test_netcomm_cpu.py's test_collectives_through_the_proxy_in_order."""

from __future__ import annotations

import pytest

from hoccl_runtime import _timer
from hoccl_runtime.errors import HocclError
from hoccl_runtime.net.transport import base


def test_nap_yields_at_zero_and_sleeps_otherwise(monkeypatch):
    did = []
    monkeypatch.setattr(_timer.os, "sched_yield", lambda: did.append("yield"))
    monkeypatch.setattr(_timer.time, "sleep", lambda s: did.append(("sleep", s)))
    _timer.nap(0)
    _timer.nap(25e-6)
    assert did == ["yield", ("sleep", 25e-6)]


def test_a_pause_of_zero_spins_instead_of_waiting_on_the_engine(monkeypatch):
    """With one connection that can wait (the native engine's), a pause waits on it; at 0 it yields instead, so a
    spinning loop is never held by the engine's timed wait."""
    did = []

    class Conn:
        def wait(self, seconds):
            did.append(("wait", seconds))

    monkeypatch.setattr(_timer.os, "sched_yield", lambda: did.append("yield"))
    base.pause({1: Conn()}, 10e-6)
    base.pause({1: Conn()}, 0)
    assert did == [("wait", 10e-6), "yield"]


def test_the_poll_setting_takes_zero_and_refuses_a_negative_naming_it(monkeypatch):
    from hoccl_runtime.comm.netconf import net_poll_us

    monkeypatch.delenv("HOCCL_NET_POLL_US", raising=False)
    assert net_poll_us() == 10
    monkeypatch.setenv("HOCCL_NET_POLL_US", "0")
    assert net_poll_us() == 0
    monkeypatch.setenv("HOCCL_NET_POLL_US", "-1")
    with pytest.raises(HocclError, match="HOCCL_NET_POLL_US"):
        net_poll_us()
