# Session 58, the CPU VM: the six shared_delay calls of the 1024-GPU All-to-All compile (captured by sdcap.py, run from
# the project root) timed with the code before its one-size way (a checkout at /tmp/before_tree: git worktree add
# --detach /tmp/before_tree 8c3a66e) and today's, alternated 8 times in one process; the figures checked equal.
import sys, time, importlib.util, numpy as np
def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
old = load("/tmp/before_tree/hoccl_compiler/chain.py", "old_chain"); new = load("/work/main/hoccl_compiler/chain.py", "new_chain")
d = np.load("/tmp/prof/sdcap.npz"); caps = [(d[f"g{i}"], d[f"b{i}"]) for i in range(6)]
for rep in range(8):
    for name, m in (("old", old), ("new", new)):
        t = time.perf_counter()
        outs = [m.shared_delay(g, b) for g, b in caps]
        print(rep, name, round(time.perf_counter() - t, 3))
        if name == "old": ref = outs
        else: assert all(np.array_equal(a, b) for a, b in zip(ref, outs))
