#!/usr/bin/env bash
# Session 29, run 2 on the 1x H200 (run 1's pipeline runs failed at start: the none variant looked up a group it
# has not; its bench_tcp lines are kept in run1/): pipeline small and 350m (1F1B, 2 stages), HOCCL / NCCL / none
# (the no-communication limit), 3 interleaved rounds, both settings.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export TCP_NODES_TIMEOUT=200
P=examples/train_pipeline.py
for size in small 350m; do
  steps=20; [ $size = 350m ] && steps=8
  for s in sliced mps; do
    m=(); [ $s = mps ] && m=(--mps)
    bash scripts/tcp-nodes.sh "${m[@]}" $P --size $size --steps $steps --repeats 3 --comm hoccl,nccl,none \
      --json $OUT/pipe-$size-$s.json > $OUT/pipe-$size-$s.log 2>&1
    echo "=== pipeline $size $s rc=$?"; grep -E "^(comm|hoccl|nccl|none) " $OUT/pipe-$size-$s.log | tail -4
  done
done
cd "$OUT" && tar czf logs.tgz *.log *.json; rm -f *.log *.json
