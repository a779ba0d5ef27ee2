#!/usr/bin/env bash
# Session 31, run 6 on the 1x H200: where a HOCCL call's host time goes today (d00740f): cProfile of 1 MiB sends
# (rank 0) and receives (rank 1) through the hoccl group, and the per-layer breakdown (profile_pipeline.py).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=150
bash scripts/tcp-nodes.sh examples/profile_pipeline.py --comm hoccl --no-pipeline --breakdown --calls 64 \
  --cprofile $OUT/prof > $OUT/prof.log 2>&1
echo "=== rc=$?"; grep -E '^(layer|group|hoccl) ' $OUT/prof.log
for r in 0 1; do echo "--- rank $r"; sed -n 1,40p $OUT/prof.rank$r.txt | cut -c1-150; done
cd $OUT && tar czf logs.tgz prof* && rm -f prof.log prof.rank*.txt
