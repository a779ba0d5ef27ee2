"""Session 35: how long a 10 us poll sleep lasts on this host (under the 1 us timer slack the proxy sets), as the
proxy's driving loop sleeps: percentiles and the count of sleeps of 1 ms or more over SECONDS, in a process of its
own (optionally beside 16 threads blocked in socket reads, as the proxy's lanes).
    python sleepprobe.py SECONDS [threads]"""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.getcwd())
from hoccl_runtime._timer import fine_sleeps  # noqa: E402

seconds = float(sys.argv[1])
if len(sys.argv) > 2:
    pairs = [socket.socketpair() for _ in range(16)]
    for a, _ in pairs:
        threading.Thread(target=a.recv, args=(1,), daemon=True).start()
took = []
with fine_sleeps():
    end = time.perf_counter() + seconds
    while True:
        t = time.perf_counter()
        if t > end:
            break
        time.sleep(10e-6)
        took.append(time.perf_counter() - t)
took.sort()
q = lambda p: took[int(p * (len(took) - 1))] * 1e6  # noqa: E731
print(f"sleepprobe {'+threads ' if len(sys.argv) > 2 else ''}{len(took)} sleeps: p50 {q(.5):.0f} us p99 {q(.99):.0f} "
      f"p99.9 {q(.999):.0f} max {took[-1] * 1e6:.0f}; >= 1 ms: {sum(t >= 1e-3 for t in took)}", flush=True)
