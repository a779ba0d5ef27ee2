"""Session 32: one-way latency of TcpTransport writes (a ping-pong between two processes over loopback), the
waiting side polling as the network executor's driving loop does. WAIT=sleep: time.sleep(POLL_US) under a 1 us timer
slack (the driver today); WAIT=bell: a lock the lanes' receiving threads release when a completion arrives, waited
on with POLL_US as the timeout (the driver wakes at once instead of at its next poll). Prints median one-way us."""
import os, sys, time, statistics, threading
sys.path.insert(0, os.getcwd())
import numpy as np
from hoccl_runtime.net.transport.tcp import TcpTransport

SIZES = [int(s) for s in os.environ.get("SIZES", "65536,1048576").split(",")]
ROUNDS = int(os.environ.get("ROUNDS", "200"))
LANES = int(os.environ.get("LANES", "8"))
POLL = float(os.environ.get("POLL_US", "10")) * 1e-6

WAIT = os.environ.get("WAIT", "sleep")
bell = threading.Lock()
bell.acquire()


def ring():
    if bell.locked():
        try:
            bell.release()
        except RuntimeError:
            pass


def wait_recv(conn):
    if WAIT == "bell" and not hasattr(conn, "_rung"):
        put = conn._completions.put
        conn._completions.put = lambda item, *a, **k: (put(item, *a, **k), ring())
        conn._rung = True
    while True:
        for c in conn.poll(timeout_s=0):
            if c.kind == "received":
                return
        if WAIT == "bell":
            bell.acquire(timeout=POLL)
        else:
            time.sleep(POLL)

def side(role, addr_w, addr_r):
    from hoccl_runtime._timer import fine_sleeps
    with fine_sleeps():
        _side(role, addr_w, addr_r)


def _side(role, addr_w, addr_r):
    tr = TcpTransport(lanes=LANES, session="b", name=role, secret=b"x"*32)
    buf = np.zeros(max(SIZES), np.uint8)
    reg = tr.register(buf)
    if role == "a":
        addr = tr.listen()
        os.write(addr_w, addr.encode()); conn = tr.accept()
    else:
        addr = os.read(addr_r, 200).decode(); conn = tr.connect(addr)
    res = []
    for n in SIZES:
        ts = []
        for i in range(ROUNDS + 20):
            t0 = time.perf_counter()
            if role == "a":
                conn.write(reg, 0, n, reg.id, 0)
                wait_recv(conn)
            else:
                wait_recv(conn)
                conn.write(reg, 0, n, reg.id, 0)
            if i >= 20:
                ts.append((time.perf_counter() - t0) / 2 * 1e6)
        res.append((n, statistics.median(ts)))
    time.sleep(0.2)
    conn.close(); tr.close()
    if role == "a":
        print(f"{WAIT:<6} lanes={LANES} poll={POLL*1e6:.0f}us ", " ".join(f"{n>>10}KiB {t:.0f}us" for n, t in res), flush=True)

r, w = os.pipe()
pid = os.fork()
if pid == 0:
    side("b", w, r); os._exit(0)
side("a", w, r); os.waitpid(pid, 0)
