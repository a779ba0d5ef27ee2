"""The TCP transport between two network namespaces joined by a veth pair (a two-host network on one
machine). Needs root and iproute2; skipped otherwise. Every step is bounded in time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

PEER = Path(__file__).resolve().parents[1] / "support" / "netns_peer.py"


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=20)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create network namespaces")
    tag = uuid.uuid4().hex[:6]
    a, b = f"hoccl-a-{tag}", f"hoccl-b-{tag}"
    try:
        _run("ip", "netns", "add", a)
        _run("ip", "netns", "add", b)
        _run("ip", "link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}")
        _run("ip", "link", "set", f"va{tag}", "netns", a)
        _run("ip", "link", "set", f"vb{tag}", "netns", b)
        _run("ip", "-n", a, "addr", "add", "10.77.0.1/24", "dev", f"va{tag}")
        _run("ip", "-n", b, "addr", "add", "10.77.0.2/24", "dev", f"vb{tag}")
        for ns, dev in ((a, f"va{tag}"), (b, f"vb{tag}")):
            _run("ip", "-n", ns, "link", "set", dev, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"cannot build network namespaces here: {exc}")
    yield a, b
    for ns in (a, b):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def _peer(ns: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(PEER.parents[1]))
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, str(PEER), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_listening(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()
    assert line.startswith("listening"), (line, proc.stderr.read() if proc.poll() is not None else "")


def test_transfer_between_namespaces(two_hosts):
    a, b = two_hosts
    n = 16 << 20
    rx = _peer(a, "recv", "10.77.0.1", "29400", str(n))
    try:
        _wait_listening(rx)
        tx = _peer(b, "send", "10.77.0.1:29400", str(n))
        out_tx, err_tx = tx.communicate(timeout=60)
        out_rx, err_rx = rx.communicate(timeout=60)
        assert tx.returncode == 0 and rx.returncode == 0, (err_tx, err_rx)
        assert out_tx.split()[-1] == out_rx.split()[-1]  # same CRC on both hosts
    finally:
        rx.kill()


def test_peer_killed_in_other_namespace(two_hosts):
    a, b = two_hosts
    rx = _peer(a, "recv", "10.77.0.1", "29401", str(4 << 20), "--die-after", "3")
    try:
        _wait_listening(rx)
        tx = _peer(b, "send", "10.77.0.1:29401", str(4 << 20), "--forever")
        out, err = tx.communicate(timeout=60)
        assert tx.returncode == 3, (out, err)
        assert "TransportError" in out and "10.77.0.1:29401" in out
    finally:
        rx.kill()
