"""A process that forks with an open native TCP connection: the child closes what it inherited and exits through
the interpreter; the parent's connection must still carry data (tests/transport/test_transport_native.py)."""
import os
import sys
import threading

import numpy as np

from hoccl_runtime.net.transport import TcpTransport

rx = TcpTransport(lanes=2, session="s", engine="native")
address = rx.listen()
tx = TcpTransport(lanes=2, session="s", engine="native")
box = {}
t = threading.Thread(target=lambda: box.setdefault("c", rx.accept(timeout_s=10)))
t.start()
c_tx = tx.connect(address, timeout_s=10)
t.join()
c_rx = box["c"]
src, dst = np.arange(1 << 20, dtype=np.uint32).view(np.uint8)[: 1 << 20].copy(), np.zeros(1 << 20, np.uint8)
local, remote = tx.register(src), rx.register(dst)
pid = os.fork()
if pid == 0:
    c_tx.close()
    c_rx.close()
    sys.exit(0)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
c_tx.write(local, 0, 1 << 20, remote.id, 0, imm=9)
got = []
while not got:
    got = [c.imm for c in c_rx.poll(timeout_s=10) if c.kind == "received"]
assert got == [9] and (src == dst).all(), got
tx.close()
rx.close()
print("parent ok", flush=True)
