#!/usr/bin/env bash
# Session 40, run 1 on the 1x H200: the issue's --compare at small, both settings, on today's main (the first GPU
# run since session 36: plan columns as int64 buffers, the collector paused in compiles), each setting once plain
# and once with TCP_NODES_PIN=1 (each node's processes on half of the CPUs), interleaved.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
for mode in mps sliced; do
  flag=""; [ $mode = mps ] && flag="--mps"
  for pin in 0 1; do
    t0=$(date +%s)
    TCP_NODES_PIN=$pin TCP_NODES_TIMEOUT=150 bash scripts/tcp-nodes.sh $flag --compare $OUT/$mode-pin$pin small \
      > $OUT/compare-$mode-pin$pin.txt 2>&1
    echo "=== compare $mode pin=$pin rc=$? $(( $(date +%s) - t0 )) s"; cat $OUT/compare-$mode-pin$pin.txt
  done
done
cd $OUT && tar czf logs-run1.tgz mps-pin* sliced-pin* && rm -rf mps-pin* sliced-pin*
