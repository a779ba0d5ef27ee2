#!/usr/bin/env bash
# Session 67, the CPU VM: the Zipf(1.1) All-to-Allv (paper-h800, 1 GiB mean per rank, bench_compiler's matrix) through
# hoccl-compile, the checkout at $BASE (main before the change) against this one, alternated; /usr/bin/time -v, and
# whether the two plans are the same (each run from its checkout's root: the
# current directory comes first on sys.path). GPUS (1024), PAIRS (2).
set -u
G=${GPUS:-1024}; BASE=${BASE:?the checkout before}
python3 -c "
import json, sys; sys.path[:0] = ['.', 'examples']
from workloads import zipf_matrix
json.dump(zipf_matrix($G, mean_pair_bytes=(1 << 30) // $G, seed=$G).tolist(), open('/tmp/zipf$G.json', 'w'))"
for i in $(seq ${PAIRS:-2}); do
  for side in before after; do
    dir=$PWD; [ $side = before ] && dir=$BASE
    echo "## $side, run $i"
    (cd $dir && /usr/bin/time -v python3 -c "import sys; from hoccl_compiler.cli import compile_main; sys.exit(compile_main(sys.argv[1:]))" alltoallv --topology paper-h800 \
      --nodes $((G / 8)) --matrix /tmp/zipf$G.json -o /tmp/zipf$G-$side.json.gz -q 2>&1) \
      | grep -E 'Elapsed|Maximum resident|User time|System time'
  done
  python3 -c "
import gzip, json, sys
a, b = (json.load(gzip.open(f'/tmp/zipf$G-{s}.json.gz')) for s in ('before', 'after'))
print('same plan' if a == b else 'PLANS DIFFER', len(a.get('stages', a.get('s', []))))"
done
