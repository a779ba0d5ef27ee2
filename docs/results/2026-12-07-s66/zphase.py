import sys, time, json
sys.path[:0] = ['.', 'examples']
from workloads import zipf_matrix
G = int(sys.argv[1])
json.dump(zipf_matrix(G, mean_pair_bytes=(1 << 30) // G, seed=G).tolist(), open(f'/tmp/zipf{G}.json', 'w'))
import hoccl_compiler.passes.chunks as ch
orig = ch.pick_chunk
def spy(largest, time_of, entries_of, floor=0.0):
    print("floor", floor * 1e3, "ms", flush=True)
    def t(c):
        t0 = time.time(); v = time_of(c); print(f"  chunk {c>>10:8d} KiB: v2 {v*1e3:9.3f} ms, entries {entries_of(c):9d}, costed in {time.time()-t0:.2f} s", flush=True); return v
    r = orig(largest, t, entries_of, floor); print("chosen", r >> 10, "KiB", flush=True); return r
ch.pick_chunk = spy
import hoccl_compiler.pipeline as pl
for name in ("_stages", "_verify"):
    f = getattr(pl, name, None)
    if f:
        def wrap(*a, f=f, name=name, **k):
            t0 = time.time(); r = f(*a, **k); print(f"{name} {time.time()-t0:.1f} s", flush=True); return r
        setattr(pl, name, wrap)
from hoccl_compiler.cli import compile_main
t0 = time.time()
compile_main(["alltoallv", "--topology", "paper-h800", "--nodes", str(G // 8), "--matrix", f"/tmp/zipf{G}.json", "-o", f"/tmp/zipf{G}c.json.gz", "-q"])
print("total", time.time() - t0)
