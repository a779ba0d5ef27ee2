"""Samples every thread of this host's python processes every PERIOD s until killed (SIGTERM) or DURATION s: one CSV
row per thread and sample, on time.perf_counter's clock (CLOCK_MONOTONIC, the clock HOCCL_NET_TRACE's t0_us uses):
t_us, pid, tid, the process's command line head, the thread's name, its state, the CPU it last ran on, and its user
and system ticks so far. Used to see where the threads of the two TCP nodes ran in fast and slow rounds.

    python3 threads.py OUT.csv [PERIOD_S] [DURATION_S]
"""
import csv
import os
import signal
import sys
import time

out = sys.argv[1]
period = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
duration = float(sys.argv[3]) if len(sys.argv) > 3 else 600.0
stop = False


def _stop(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, _stop)
me = os.getpid()
end = time.perf_counter() + duration
with open(out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["t_us", "pid", "tid", "cmd", "comm", "state", "cpu", "utime", "stime"])
    cmds = {}
    while not stop and time.perf_counter() < end:
        t = time.perf_counter()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            try:
                if pid not in cmds:
                    with open(f"/proc/{pid}/cmdline", "rb") as c:
                        cmds[pid] = c.read().replace(b"\0", b" ").decode(errors="replace")[:120]
                if "python" not in cmds[pid]:
                    continue
                for tid in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{tid}/stat") as s:
                        raw = s.read()
                    name = raw[raw.index("(") + 1:raw.rindex(")")]
                    rest = raw[raw.rindex(")") + 2:].split()
                    # rest[0] is field 3 (state); utime 14, stime 15, processor 39
                    w.writerow([f"{t * 1e6:.0f}", pid, tid, cmds[pid], name, rest[0], rest[36], rest[11], rest[12]])
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(max(0.0, period - (time.perf_counter() - t)))
