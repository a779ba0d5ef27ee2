"""A process that leaves its native TCP connections open, with 512 MiB of writes still queued, and exits
(tests/transport/test_transport_native.py)."""
import threading

import numpy as np

from hoccl_runtime.net.transport import TcpTransport

rx = TcpTransport(lanes=2, session="s", engine="native")
address = rx.listen()
tx = TcpTransport(lanes=2, session="s", engine="native")
box = {}
t = threading.Thread(target=lambda: box.setdefault("c", rx.accept(timeout_s=10)))
t.start()
c = tx.connect(address, timeout_s=10)
t.join()
src, dst = np.ones(8 << 20, np.uint8), np.zeros(8 << 20, np.uint8)
local, remote = tx.register(src), rx.register(dst)
for i in range(64):
    c.write(local, 0, 8 << 20, remote.id, 0, imm=i)
print("leaving", flush=True)
