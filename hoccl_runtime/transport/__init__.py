"""Transports between nodes: one interface (listen/connect/accept, register once, write with a
notification, poll completions, close), a TCP implementation that runs anywhere, and (later) RDMA
verbs. See :mod:`hoccl_runtime.transport.base`."""

from __future__ import annotations

from .base import Completion, Connection, Region, Transport
from .tcp import TcpTransport

__all__ = ["Transport", "Connection", "Region", "Completion", "TcpTransport"]
