import cProfile, pstats, sys, time, json
sys.path[:0] = ['.', 'examples']  # run from the repository root
from workloads import zipf_matrix
G = int(sys.argv[1])
json.dump(zipf_matrix(G, mean_pair_bytes=(1 << 30) // G, seed=G).tolist(), open(f'/tmp/zipf{G}.json', 'w'))
from hoccl_compiler.cli import compile_main
argv = ["alltoallv", "--topology", "paper-h800", "--nodes", str(G // 8), "--matrix", f"/tmp/zipf{G}.json", "-o", f"/tmp/zipf{G}.json.gz", "-q"]
t0 = time.time()
cProfile.run('compile_main(argv)', '/tmp/zprof.out')
print("wall", time.time() - t0)
p = pstats.Stats('/tmp/zprof.out'); p.sort_stats('cumtime').print_stats(45)
