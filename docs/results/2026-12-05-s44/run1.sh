#!/usr/bin/env bash
# Session 44, run 1 on the 1x H200 (the call got a 1x H100): the comparison at 350m on today's main, both settings, one command each
# (`tcp-nodes.sh [--mps] --compare OUT 350m`: FSDP2 reduced by NCCL and by HOCCL, 1F1B pipeline, HOCCL / NCCL / none,
# 3 interleaved rounds of 8 steps), CPUs pinned (TCP_NODES_PIN=1) as in session 43's run 1.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi -L
for mode in sliced mps; do
  t0=$(date +%s); flag=""; [ $mode = mps ] && flag="--mps"
  TCP_NODES_PIN=1 TCP_NODES_TIMEOUT=150 bash scripts/tcp-nodes.sh $flag --compare $OUT/$mode 350m > $OUT/compare-$mode.txt 2>&1
  echo "=== compare 350m $mode rc=$? $(( $(date +%s) - t0 )) s"; grep -v "^\[" $OUT/compare-$mode.txt | grep -v "^torch" | tail -n 24
done
cd $OUT && tar czf logs-run1.tgz sliced mps compare-*.txt && rm -rf sliced mps compare-*.txt
