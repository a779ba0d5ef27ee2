"""Transports between nodes: one interface (listen/connect/accept, register once, write with a
notification, poll completions, close), a TCP implementation that runs anywhere, and RDMA verbs
through pyverbs (not run on a NIC yet). See :mod:`hoccl_runtime.net.transport.base`."""

from __future__ import annotations

from .base import Completion, Connection, Region, Transport
from .tcp import TcpTransport
from .verbs import VerbsTransport

__all__ = ["Transport", "Connection", "Region", "Completion", "TcpTransport", "VerbsTransport"]
