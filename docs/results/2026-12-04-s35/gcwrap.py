"""Session 35: run a training example with a clock on this process's garbage collections (gc.callbacks), and print
per generation how many ran, their total and longest time, and how many took 5 ms or more, at exit:
    torchrun ... gcwrap.py examples/train_fsdp.py ARGS..."""
import atexit
import gc
import os
import runpy
import sys
import time

runs: list = []
_start = [0.0]


def clock(phase, info):
    if phase == "start":
        _start[0] = time.perf_counter()
    else:
        runs.append((info["generation"], time.perf_counter() - _start[0]))


def report():
    rank = os.environ.get("RANK", "?")
    for gen in (0, 1, 2):
        t = [s for g, s in runs if g == gen]
        if t:
            print(f"gc rank {rank} gen {gen}: {len(t)} collections, {sum(t) * 1e3:.1f} ms in all, longest "
                  f"{max(t) * 1e3:.2f} ms, {sum(s >= 5e-3 for s in t)} of 5 ms or more", flush=True)


gc.callbacks.append(clock)
atexit.register(report)
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
runpy.run_path(script, run_name="__main__")
