"""The floor of a one-way TCP message over loopback between two processes, from Python: a ping-pong of N bytes
(each side receives the whole message with one MSG_WAITALL recv_into, then sends it back), (a) in the main thread,
(b) through a receiving thread that hands each message to the main thread by a queue.Queue (as HOCCL's lanes do),
(c) as (b) while a third thread polls with 10 us sleeps (as HOCCL's driving loop does). Prints median one-way us."""
import os
import queue
import socket
import statistics
import sys
import threading
import time

SIZES = (64 << 10, 1 << 20)
ROUNDS = 300


def pair():
    a, b = socket.socketpair(socket.AF_UNIX) if False else (None, None)
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    c = socket.create_connection(lst.getsockname())
    s, _ = lst.accept()
    for x in (c, s):
        x.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c, s


def child(sock, mode):
    buf = bytearray(max(SIZES))
    view = memoryview(buf)
    for n in SIZES:
        for _ in range(ROUNDS + 20):
            sock.recv_into(view[:n], n, socket.MSG_WAITALL)
            sock.sendall(view[:n])


def run(mode: str) -> None:
    c, s = pair()
    pid = os.fork()
    if pid == 0:
        c.close()
        child(s, mode)
        os._exit(0)
    s.close()
    buf = bytearray(max(SIZES))
    view = memoryview(buf)
    stop = threading.Event()
    q: queue.Queue = queue.Queue()
    if mode in ("thread", "thread+poller"):
        sizes = [n for n in SIZES for _ in range(ROUNDS + 20)]

        def recv_loop():
            for n in sizes:
                c.recv_into(view[:n], n, socket.MSG_WAITALL)
                q.put(n)
        threading.Thread(target=recv_loop, daemon=True).start()
    if mode == "thread+poller":
        def poller():
            while not stop.is_set():
                time.sleep(10e-6)
        threading.Thread(target=poller, daemon=True).start()
    out = []
    for n in SIZES:
        times = []
        for i in range(ROUNDS + 20):
            t0 = time.perf_counter()
            c.sendall(view[:n])
            if mode == "main":
                c.recv_into(view[:n], n, socket.MSG_WAITALL)
            else:
                while True:
                    try:
                        q.get_nowait()
                        break
                    except queue.Empty:
                        time.sleep(10e-6)
            if i >= 20:
                times.append((time.perf_counter() - t0) / 2 * 1e6)
        out.append(statistics.median(times))
    stop.set()
    os.waitpid(pid, 0)
    print(f"{mode:<14}" + "".join(f"{n >> 10:>6} KiB {t:>7.1f} us" for n, t in zip(SIZES, out, strict=True)), flush=True)


if __name__ == "__main__":
    for mode in sys.argv[1:] or ("main", "thread", "thread+poller"):
        run(mode)
