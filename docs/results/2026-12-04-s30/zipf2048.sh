#!/usr/bin/env bash
# Session 30, on the 2-core CPU VM: the Zipf(1.1) All-to-Allv on 2048 GPUs (256 x 8, paper-h800, 1 GiB mean per rank,
# the matrix of examples/bench_compiler.py), explicit, through hoccl-compile, timed with /usr/bin/time -v.
set -eu
python3 -c "
import json, sys; sys.path[:0] = ['.', 'examples']
from workloads import zipf_matrix
json.dump(zipf_matrix(2048, mean_pair_bytes=(1 << 30) // 2048, seed=2048).tolist(), open('/tmp/zipf2048.json', 'w'))"
/usr/bin/time -v hoccl-compile alltoallv --topology paper-h800 --nodes 256 --matrix /tmp/zipf2048.json \
  -o /tmp/zipf2048.json.gz -q 2>&1 | grep -E 'Elapsed|Maximum resident|User time|System time'
