"""A process with an open native TCP connection (tests/transport/test_transport_native.py), run as
``python native_exit.py MODE``:

* ``leave``: it leaves its connections open, with 512 MiB of writes still queued, and exits; prints "leaving".
* ``fork``: it forks; the child closes what it inherited and exits through the interpreter, and the parent's
  connection must still carry data; prints "parent ok".
"""
import os
import sys
import threading

import numpy as np

from hoccl_runtime.net.transport import TcpTransport

mode = sys.argv[1]
rx = TcpTransport(lanes=2, session="s", engine="native")
address = rx.listen()
tx = TcpTransport(lanes=2, session="s", engine="native")
box = {}
t = threading.Thread(target=lambda: box.setdefault("c", rx.accept(timeout_s=10)))
t.start()
c_tx = tx.connect(address, timeout_s=10)
t.join()
c_rx = box["c"]
if mode == "leave":
    src, dst = np.ones(8 << 20, np.uint8), np.zeros(8 << 20, np.uint8)
    local, remote = tx.register(src), rx.register(dst)
    for i in range(64):
        c_tx.write(local, 0, 8 << 20, remote.id, 0, imm=i)
    print("leaving", flush=True)
    sys.exit(0)
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
