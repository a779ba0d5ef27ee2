"""Session 52: where the training thread's time goes, by sampling its Python stack. Runs a script as __main__ with a
thread that looks at the main thread's stack every SAMPLE_US (default 200) us and, at exit, writes
SAMPLE_OUT.rankN.txt: the wall time by function (inclusive: the function anywhere on the stack; innermost: the frame
the thread was in). A sample's weight is the time since the previous one, so a stretch where the sampler could not
run (the main thread held the GIL in one C call) counts for the frame it was in when the sampler got back. The
process's switch interval is set to SAMPLE_US so that the sampler gets the GIL about that often.
Usage (under torchrun / scripts/tcp-nodes.sh): sample.py SCRIPT [ARGS...]."""
import atexit
import os
import runpy
import sys
import threading
import time
from collections import Counter

interval = float(os.environ.get("SAMPLE_US", "200")) * 1e-6
out = os.environ.get("SAMPLE_OUT", "/tmp/sample")
main_id = threading.main_thread().ident
inclusive, innermost, lines = Counter(), Counter(), Counter()
state = {"on": True, "total": 0.0, "n": 0, "longest": 0.0}


def where(frame):
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{code.co_name}"


def sample():
    last = time.perf_counter()
    while state["on"]:
        time.sleep(interval)
        frame = sys._current_frames().get(main_id)
        now = time.perf_counter()
        w, last = now - last, now
        if frame is None:
            continue
        state["total"] += w
        state["n"] += 1
        state["longest"] = max(state["longest"], w)
        innermost[where(frame)] += w
        lines[f"{where(frame)}:{frame.f_lineno}"] += w
        seen = set()
        f = frame
        while f is not None:
            k = where(f)
            if k not in seen:
                seen.add(k)
                inclusive[k] += w
            f = f.f_back


def report():
    state["on"] = False
    time.sleep(10 * interval)  # the sampler's last look done (run 2's rank 0 report was cut short without it)
    rank = os.environ.get("RANK", "0")
    total = state["total"] or 1.0
    with open(f"{out}.rank{rank}.txt", "w") as f:
        f.write(f"{state['n']} samples over {total:.2f} s (longest gap {state['longest'] * 1e3:.2f} ms), "
                f"every {interval * 1e6:.0f} us asked\n")
        for title, c, n in (("inclusive", inclusive, 60), ("innermost", innermost, 40), ("innermost line", lines, 40)):
            f.write(f"\n# {title} (s, % of the sampled time)\n")
            for k, v in Counter(dict(c)).most_common(n):  # a copy: the sampler may still be adding to it
                f.write(f"{v:9.3f} {100 * v / total:6.2f}%  {k}\n")


sys.setswitchinterval(interval)
atexit.register(report)
threading.Thread(target=sample, daemon=True, name="stack-sampler").start()
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
runpy.run_path(sys.argv[0], run_name="__main__")
