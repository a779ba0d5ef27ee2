"""What the network communicators (``comm/net.py``, ``comm/nodenet.py``) and ``hr.execute`` across nodes
(``nodes.py``) set up from: the job's TCP secret, the chunk size and lanes (arguments or HOCCL_* settings), and the
address this node is reached at."""

from __future__ import annotations

from typing import Any

from ..errors import HocclError

__all__ = ["job_secret", "net_chunk_bytes", "net_lanes", "net_poll_us", "local_address"]


def job_secret(store: Any, rank: int) -> bytes:
    """The job's secret for the TCP handshake (hoccl_runtime.net.transport.tcp): made by rank 0 at bootstrap, shared
    through the communicator's store; every connection of the job proves it holds it."""
    import os

    if rank == 0:
        store.set("tcp-secret", os.urandom(32))
    secret = store.get("tcp-secret")
    return bytes(secret)


def net_chunk_bytes(given: int | None) -> int:
    """The chunk size of a network communicator: ``given``, else HOCCL_NET_CHUNK_BYTES (2 MiB: on the 1x H200's TCP
    nodes, AllGathers of 1-12 MiB a rank took 5-17% less time than with 8 MiB chunks under MPS, and FSDP small and
    350m went from 0.89-1.00x to 0.96-1.06x NCCL's tokens/s under MPS; docs/results/training-history.md, 2026-12-04)."""
    from ..settings import env_int

    if given is None:
        return env_int("HOCCL_NET_CHUNK_BYTES", 2 << 20, 4096, 1 << 30)
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise HocclError(f"chunk_bytes={given!r}: give a positive number of bytes (default 2 MiB)")
    return given


def net_lanes(given: int | None) -> int:
    """TCP connections per peer of a network communicator: ``given``, else HOCCL_NET_LANES (8)."""
    from ..settings import env_int

    if given is None:
        return env_int("HOCCL_NET_LANES", 8, 1, 64)
    if isinstance(given, bool) or not isinstance(given, int) or not 1 <= given <= 64:
        raise HocclError(f"lanes={given!r}: give 1..64 TCP connections per peer (default 8, HOCCL_NET_LANES)")
    return given


def net_poll_us() -> int:
    """The network proxy process's pause between looks, us (HOCCL_NET_POLL_US, 10; 0: it spins, a yield between
    looks)."""
    from ..settings import env_int

    return env_int("HOCCL_NET_POLL_US", 10, 0, 10_000)


def local_address() -> str:
    """The address other nodes reach this one at: HOCCL_SOCKET_ADDR if set, else the address of the
    interface that routes to MASTER_ADDR (torchrun's), else loopback (every "node" on this machine)."""
    import os
    import socket

    given = os.environ.get("HOCCL_SOCKET_ADDR", "").strip()
    if given:
        try:  # one that this host cannot listen on is the setting's fault: say so here, not in a bind far away
            family = socket.AF_INET6 if ":" in given else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((given, 0))
        except (OSError, UnicodeError, ValueError) as exc:
            raise HocclError(f"HOCCL_SOCKET_ADDR={given!r}: this host cannot listen at that address ({exc}); give one "
                             "of its own addresses (the one other nodes reach it at), or unset it") from None
        return given
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    if master in ("127.0.0.1", "localhost", "::1"):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # no packet is sent
            probe.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"
