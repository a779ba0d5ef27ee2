"""A transport peer run inside a network namespace by tests/transport/test_transport_netns.py.

    python tests/support/netns_peer.py recv HOST PORT NBYTES [--die-after N]
    python tests/support/netns_peer.py send HOST:PORT NBYTES

The receiver prints the CRC-32 of what it got; the sender sends seeded bytes and prints their CRC.
"""

from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from hoccl_runtime.errors import HocclError  # noqa: E402
from hoccl_runtime.net.transport import TcpTransport  # noqa: E402


def main() -> int:
    role = sys.argv[1]
    if role == "recv":
        host, port, nbytes = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        die_after = int(sys.argv[6]) if len(sys.argv) > 6 and sys.argv[5] == "--die-after" else 0
        rx = TcpTransport(host=host, port=port, lanes=4, session="netns")
        buf = np.zeros(nbytes, dtype=np.uint8)
        rx.register(buf)
        print(f"listening {rx.listen()}", flush=True)
        conn = rx.accept(timeout_s=30)
        got = 0
        while True:
            got += len([c for c in conn.poll(timeout_s=30) if c.kind == "received"])
            if die_after and got >= die_after:
                os._exit(0)  # a peer that dies mid-transfer
            if not die_after and got == 1:
                print(f"crc {zlib.crc32(buf)}", flush=True)
                rx.close()
                return 0
    address, nbytes = sys.argv[2], int(sys.argv[3])
    tx = TcpTransport(lanes=4, session="netns")
    data = np.random.default_rng(5).integers(0, 256, nbytes, dtype=np.uint8)
    region = tx.register(data)
    conn = tx.connect(address, timeout_s=30)
    try:
        while True:
            conn.write(region, 0, nbytes, 0, 0, imm=1)
            done = False
            while not done:
                done = any(c.kind == "sent" for c in conn.poll(timeout_s=30))
            if "--forever" not in sys.argv:
                break
    except HocclError as exc:
        print(f"error {type(exc).__name__}: {exc}", flush=True)
        tx.close()
        return 3
    print(f"crc {zlib.crc32(data)}", flush=True)
    tx.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
